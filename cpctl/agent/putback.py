"""Putting back a ``--keep-in`` write (the ClusterConfiguration and kubeadm patch files): ONE rule for
``core.keptin`` and the node-side revert.

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import errno
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

from cpctl.agent.fileops import read_file, unlink, write_atomic
from cpctl.agent.httpops import http
from cpctl.agent.shapes import NodeApiAccess, RevertPlan, TlsOptions
from cpctl.agent.tinyyaml import yaml_dump, yaml_load
from cpctl.agent.txn import _append_record, _read_json, _utc_now

# --- putting back a --keep-in write to a ConfigMap: ONE rule, for cpctl (``core.keptin.undo``) and for
# the node-side revert of a master without cpctl (``_plan_keepin``) ------------------------------------------
# The undo is a three-way merge, the way ``kubectl apply`` uses its last-applied configuration: what cpctl
# wrote (``after``) against what was there before it (``before``) names exactly cpctl's own keys; each is
# put back in the ClusterConfiguration as it is NOW, and only where it still holds cpctl's value. A key
# someone else changed since is a conflict: nothing is written, the record stays until it is resolved.
# Everything else anyone changed since (another flag, another section, the metadata) stays as it is.


class _Named(object):
    """A step into a list of mappings keyed by ``name`` (v1beta4 ``extraArgs``, ``extraVolumes``): all
    the items of that name, in order (a v1beta4 argument may repeat)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


#: One step of a key's path in the ClusterConfiguration: a mapping's key, or a name in a list of mappings
KeyStep = Union[str, "_Named"]
#: A key's path from the top of the ClusterConfiguration
KeyPath = Tuple[KeyStep, ...]
#: (path, a value there) of each key a merge found
Found = List[Tuple[KeyPath, object]]
#: A keep-in record's text fields (``_KEPT_FIELDS``), as ``_kept_record`` checked them
Kept = Mapping[str, str]


class Secrets(TypedDict):
    """What ``secret_free`` reads of a plan: the regexes of secret text (``cpctl.redaction``'s rule)."""

    secret_patterns: List[str]


_ABSENT = object()          # a key a document does not have
_OTHER = object()           # a place whose parent has another shape now: never anyone's value


def config_undo(text: Optional[str], before: str, after: str, load: Optional[Callable[[str], object]] = None,
                dump: Optional[Callable[[Dict[str, object]], str]] = None) -> Tuple[str, str, List[str]]:
    """Undo cpctl's write of ``after`` over ``before`` on the ConfigMap key as found now (``text``;
    None: no such ConfigMap). ``load``/``dump`` read and write the YAML (cpctl passes its YAML library;
    the node side uses ``yaml_load``/``yaml_dump``, the subset kubeadm and cpctl write). Returns
    (decision, text to write, keys): ``gone`` (nothing to put back), ``done`` (every key cpctl changed
    holds its value before already), ``write`` (the text with exactly cpctl's keys put back; ``before``
    itself when nobody else wrote the text), ``conflict`` (the keys someone else changed since: nothing
    written) or ``unreadable`` (the text cannot be read here: the keys hold why)."""
    read, write = load or yaml_load, dump or yaml_dump
    if text is None:
        return "gone", "", []
    if text == before:
        return "done", "", []
    if text == after:
        return "write", before, []
    try:
        docs = [read(t) for t in (before, after, text)]
    except (ValueError, TypeError) as exc:
        return "unreadable", "", [str(exc)[:200]]
    old, ours, now = docs
    if not isinstance(old, dict) or not isinstance(ours, dict) or not isinstance(now, dict):
        return "unreadable", "", ["the ClusterConfiguration is not a mapping"]
    undo, conflicts = _config_merge(old, ours, now)
    if conflicts:
        return "conflict", "", [config_key_name(path) for path, _ in conflicts]
    if not undo:
        return "done", "", []
    for path, was in undo:
        _config_put(now, path, was)
        _config_prune(now, old, path)
    return "write", write(now), [config_key_name(p) for p, _ in undo]


def _config_merge(old: object, ours: object, now: object) -> Tuple[Found, Found]:
    """([(path, value before)] of cpctl's keys that still hold cpctl's value in ``now``, [(path, value
    now)] of those someone else changed too) - the three-way merge of ``config_undo``."""
    undo: Found = []
    conflicts: Found = []
    for path, was, wrote in _config_changes(old, ours, ()):
        found = _config_get(now, path)
        if _same(found, wrote):
            undo.append((path, was))
        elif not _same(found, was):
            conflicts.append((path, found))
    return undo, conflicts


def config_theirs(text: str, before: str, after: str,
                  load: Optional[Callable[[str], object]] = None) -> Dict[str, Optional[str]]:
    """{key: the other writer's value now} of each of cpctl's keys of a ``conflict`` (``config_undo``) in
    the ClusterConfiguration ``text``: a string as it is, anything else as compact JSON, None where they
    removed the key; at most ``_THEIRS_CHARS`` characters each. {} when it is no conflict (or unreadable)."""
    import json
    read = load or yaml_load
    try:
        old, ours, now = [read(t) for t in (before, after, text)]
    except (ValueError, TypeError):
        return {}
    if not all(isinstance(d, dict) for d in (old, ours, now)):
        return {}
    out: Dict[str, Optional[str]] = {}
    for path, found in _config_merge(old, ours, now)[1]:
        value = None if found is _ABSENT else "(another shape)" if found is _OTHER else found if \
            isinstance(found, str) else json.dumps(found, sort_keys=True, separators=(",", ":"), default=str)
        out[config_key_name(path)] = value if value is None or len(value) <= _THEIRS_CHARS else \
            value[:_THEIRS_CHARS] + "..."
    return out


_THEIRS_CHARS = 500


def config_key_steps(before: str, after: str, load: Optional[Callable[[str], object]] = None) -> Dict[str, List[str]]:
    """{key: [the names on its path]} of every key cpctl's write of ``after`` over ``before`` changed
    (``config_key_name``): what decides, by cpctl's redaction rule, whether a key's value may be shown."""
    read = load or yaml_load
    old, ours = read(before), read(after)
    if not isinstance(old, dict) or not isinstance(ours, dict):
        return {}
    return dict((config_key_name(path), [s.name if isinstance(s, _Named) else str(s) for s in path])
                for path, _, _ in _config_changes(old, ours, ()))


def config_key_name(path: KeyPath) -> str:
    """A key of the ClusterConfiguration for a person: ``scheduler.extraArgs.v`` (a map) or
    ``apiServer.extraVolumes[name=audit]`` (a list keyed by name)."""
    out = ""
    for step in path:
        out += "[name=%s]" % step.name if isinstance(step, _Named) else ("." if out else "") + str(step)
    return out


def _same(a: object, b: object) -> bool:
    """Equal, type for type (a bool is no int, a plain scalar no quoted one); a mapping's keys in any order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):      # (of one type: both or neither)
        return len(a) == len(b) and all(k in b and _same(a[k], b[k]) for k in a)    # in any order
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is _ABSENT or a is _OTHER:
        return a is b
    return a == b


def _named(value: object) -> Optional[Dict[str, List[Dict[str, object]]]]:
    """{name: [items]} of a list of mappings that each have a string ``name`` (None: not one)."""
    if not isinstance(value, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in value):
        return None
    out: Dict[str, List[Dict[str, object]]] = {}
    for item in value:
        out.setdefault(item["name"], []).append(item)
    return out


def _config_changes(was: object, now: object, path: KeyPath) -> List[Tuple[KeyPath, object, object]]:
    """[(path, value before, value after)]: every key cpctl's write changed, as finely as kubeadm keys
    it (a mapping by key, a list of named mappings by name; anything else whole)."""
    if _same(was, now):
        return []
    if isinstance(was, dict) or isinstance(now, dict):
        if not all(isinstance(v, dict) or v is _ABSENT for v in (was, now)):
            return [(path, was, now)]
        a: Dict[str, object] = was if isinstance(was, dict) else {}      # (or _ABSENT)
        b: Dict[str, object] = now if isinstance(now, dict) else {}
        out: List[Tuple[KeyPath, object, object]] = []
        for key in list(a) + [k for k in b if k not in a]:
            out += _config_changes(a.get(key, _ABSENT), b.get(key, _ABSENT), path + (key,))
        return out
    first, second = [{} if v is _ABSENT else _named(v) for v in (was, now)]
    if first is None or second is None or not path or isinstance(path[-1], _Named):
        return [(path, was, now)]
    out = []
    for name in list(first) + [n for n in second if n not in first]:
        items = [first.get(name, _ABSENT), second.get(name, _ABSENT)]
        if not _same(items[0], items[1]):
            out.append((path + (_Named(name),), items[0], items[1]))
    return out


def _config_get(doc: object, path: KeyPath) -> object:
    """The value at ``path`` now (_ABSENT: not there; _OTHER: a parent has another shape)."""
    for step in path:
        if doc is _ABSENT:
            return _ABSENT
        if isinstance(step, _Named):
            keyed = _named(doc)
            if keyed is None:
                return _OTHER
            doc = keyed.get(step.name, _ABSENT)
        elif isinstance(doc, dict):
            doc = doc.get(step, _ABSENT)
        else:
            return _OTHER
    return doc


def _config_put(doc: object, path: KeyPath, value: object) -> None:
    """Set ``path`` to ``value`` (_ABSENT: remove it), making the mappings on the way; the items of a
    name go where its first one was (else at the end). The path is one ``_config_changes`` found:
    mappings' keys up to a last step (TypeError for any other shape)."""
    for i, step in enumerate(path[:-1]):
        if not isinstance(doc, dict) or isinstance(step, _Named):
            raise TypeError("no mapping on the way to %s" % config_key_name(path))
        nxt = doc.get(step, _ABSENT)
        if nxt is _ABSENT:
            nxt = doc[step] = [] if isinstance(path[i + 1], _Named) else {}
        doc = nxt
    last = path[-1]
    if not isinstance(last, _Named):
        if not isinstance(doc, dict):
            raise TypeError("no mapping holds %s" % config_key_name(path))
        if value is _ABSENT:
            doc.pop(last, None)
        else:
            doc[last] = value
        return
    if not isinstance(doc, list) or not (value is _ABSENT or isinstance(value, list)):
        raise TypeError("no list of named items holds %s" % config_key_name(path))
    items = [] if value is _ABSENT or not isinstance(value, list) else list(value)
    out: List[object] = []
    placed = False
    for item in doc:
        if item.get("name") != last.name:
            out.append(item)
        elif not placed:
            out.extend(items)
            placed = True
    if not placed:
        out.extend(items)
    doc[:] = out


def _config_prune(doc: object, before: object, path: KeyPath) -> None:
    """Drop the mappings and lists on ``path`` that are empty now and that ``before`` did not have
    (cpctl made them)."""
    for end in range(len(path) - 1, 0, -1):
        parent, key = _config_get(doc, path[:end - 1]), path[end - 1]
        here = _config_get(doc, path[:end])
        if isinstance(key, _Named) or not isinstance(parent, dict) or here not in ({}, []) or \
                _config_get(before, path[:end]) is not _ABSENT:
            return
        del parent[key]


def kept_config_said(what: str, where: str, component: str, op: str = "", version: str = "", keys: Sequence[str] = (),
                     hint: str = "", why: object = "", record: str = "") -> str:
    """The one line cpctl (``core.keptin.undo``) and the node-side revert (``_plan_keepin``) say about
    putting a ``--keep-in`` write to ConfigMap ``where`` back (``config_undo``): ``what`` is ``gone``,
    ``conflict`` (someone else changed ``keys`` too: nothing written, the change stays recorded in
    ``record``), ``busy`` (written by someone else while cpctl put it back, twice), ``put-back``
    (``keys``: cpctl's keys put back into a text others changed too - none: the text before
    itself; ``version`` the write produced) or ``not-yet`` (``why``); ``hint``: how to run ``check
    --kubeadm`` on that master."""
    if what == "gone":
        return "%s is gone: its change by the %s of %s was not put back" % (where, op, component)
    if what == "conflict":
        return ("%s NOT put back: someone else changed %s too since cpctl's --keep-in change of %s, so the next "
                "kubeadm upgrade renders their value; the change stays recorded (%s) and every cpctl command on this "
                "node tries again: resolve it - put %s back to the value before the change (kubectl -n kube-system "
                "edit cm kubeadm-config), or remove that record to keep theirs - and check it (%s)"
                % (where, ", ".join(keys), component, record or "?", "it" if len(keys) == 1 else "them", hint))
    if what == "busy":
        return ("%s changed while cpctl put its --keep-in change of %s back (someone else writes it): NOT put back "
                "yet; the change stays recorded and the next cpctl command tries again; check it (%s)"
                % (where, component, hint))
    if what == "put-back":
        if keys:
            return ("%s: cpctl's %s put back as before the change, what others changed since kept (resourceVersion "
                    "%s)" % (where, ", ".join(keys), version or "?"))
        return "%s put back as it was before the change (resourceVersion %s)" % (where, version or "?")
    return ("%s NOT put back yet (%s): the --keep-in change of %s stays recorded; the next cpctl command tries again"
            % (where, why, component))


def config_undone_record(who: Mapping[str, object], kept: Kept, where: str, version: str, text: Optional[str] = None,
                         keys: Sequence[str] = ()) -> Dict[str, object]:
    """The history record ``keep-in-undone`` of putting ``kept`` (a keep-in record's fields: component,
    file, op, before) back, by ``who`` (user, host, node, origin): one shape for cpctl and the node-side
    revert. ``text``: what was written (the text before, unless merged), ``keys``: cpctl's keys merged."""
    import hashlib
    written = kept["before"] if text is None else text
    record: Dict[str, object] = {
        "time": _utc_now(), "user": who["user"], "host": who["host"], "node": who["node"], "action": "keep-in-undone",
        "component": kept["component"], "file": kept["file"],
        "checksum": hashlib.sha256(written.encode("utf-8")).hexdigest(), "op": kept["op"],
        "configmap": where, "resource_version": version, "origin": who["origin"] or "",
        "reason": "the manifest is back at the version before the change"}
    if keys:
        record["keys"] = list(keys)
    return record


#: what a secret value is shown as (``cpctl.redaction.REDACTED``, which the agent cannot import; a test holds
#: them equal)
REDACTED = "<redacted>"


def config_conflict_record(who: Mapping[str, object], kept: Kept, where: str, theirs: Mapping[str, object],
                           record: str) -> Dict[str, object]:
    """The history record ``keep-in-conflict`` of a put-back refused (``config_undo``: someone else changed
    cpctl's own keys too), by ``who`` (user, host, node, origin): the keys and the other writer's value
    of each (``theirs``, secret ones ``REDACTED`` already), the keep-in record kept (``record``) and the one
    command that resolves it (``resolve``: put cpctl's keys back to their value before the change - the
    record then goes at the next cpctl command; removing the record instead keeps theirs)."""
    keys = sorted(theirs)
    said = ", ".join("%s=%s" % (k, "(removed)" if theirs[k] is None else theirs[k]) for k in keys)
    resolve = "kubectl -n %s edit configmap %s" % (kept["namespace"], kept["name"])
    return {"time": _utc_now(), "user": who["user"], "host": who["host"], "node": who["node"],
            "action": "keep-in-conflict", "component": kept["component"], "file": kept["file"], "checksum": None,
            "op": kept["op"], "configmap": where, "keys": keys, "theirs": theirs, "keepin_record": record,
            "resolve": resolve, "origin": who["origin"] or "",
            "reason": ("NOT put back: someone else changed %s too (theirs: %s), so the next kubeadm upgrade renders "
                       "their value; resolve it: put %s back to the value before the change (%s) - the next cpctl "
                       "command then drops the record - or remove %s to keep theirs"
                       % (", ".join(keys), said, "it" if len(keys) == 1 else "them", resolve, record or "the record"))}


def config_pending_record(who: Mapping[str, object], kept: Kept, where: str, why: object, record: str,
                          hint: str) -> Dict[str, object]:
    """The history record ``keep-in-pending`` of a put-back the node-side revert could not make (``why``:
    YAML it does not read, the API or the kubeconfig unusable), by ``who``: the keep-in record kept
    (``record``) for the next cpctl command, which puts it back; ``hint``: how to run ``check --kubeadm``."""
    return {"time": _utc_now(), "user": who["user"], "host": who["host"], "node": who["node"],
            "action": "keep-in-pending", "component": kept["component"], "file": kept["file"], "checksum": None,
            "op": kept["op"], "configmap": where, "keepin_record": record, "origin": who["origin"] or "",
            "reason": ("NOT put back yet (%s): cpctl's --keep-in change stays in the ClusterConfiguration, so the next "
                       "kubeadm upgrade renders the reverted flag again; the record stays (%s) and the next cpctl "
                       "command on this node puts it back: run one, and check it (%s)" % (why, record, hint))}


def kept_patch_said(what: str, path: str, component: str, removed: bool = False) -> str:
    """The one line about putting a ``--keep-in patches`` file back: ``theirs`` or ``put-back``
    (``removed``: there was none before)."""
    if what == "theirs":
        return ("%s was changed by someone else since cpctl's --keep-in change of %s: left as it is - it may still "
                "hold what was undone" % (path, component))
    return "%s put back as it was before the change%s" % (path, " (removed: there was none)" if removed else "")


#: kubeadm's patch file as cpctl writes it (``--keep-in patches``): ``<component>+json.yaml``
PATCH_FILE_NAME = r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\+json\.yaml$"


def patch_undo(now: Optional[str], was: Optional[str], after: str) -> str:
    """What undoing cpctl's write of a kubeadm patch file does, given the sha256 of the file now
    (None: no file), before the change (None: there was none) and of cpctl's bytes: ``done`` (it
    is as before already), ``theirs`` (someone else's bytes: leave them, say so) or ``write`` (put
    the bytes before back, or remove the file). One rule for ``core.keptin.undo_patch`` and the
    node-side revert (``_plan_patches``)."""
    if now == was:
        return "done"
    return "write" if now == after else "theirs"


def _api_from(ref: NodeApiAccess) -> Optional[Tuple[str, TlsOptions]]:
    """(server, tls) for the node-side revert to reach the API server: the credentials read from the
    node's kubeconfig itself, at the byte offsets of their base64 text cpctl recorded at arm time
    (``probes.kubeapi.node_access``: no copy of a credential anywhere), and only while the file is
    the one cpctl read (its sha256; ``kubeadm certs renew`` rewrites admin.conf). None when not."""
    import base64
    import hashlib
    raw = read_file(ref["kubeconfig"], 4 << 20)
    if hashlib.sha256(raw).hexdigest() != ref["sha256"]:
        return None
    tls = ref["tls"].copy()
    for key, (start, end) in ref["slices"].items():       # the keys plan_problem allows
        data = base64.b64decode(raw[start:end], validate=True)
        if key == "ca_data":
            tls["ca_data"] = data
        elif key == "cert_data":
            tls["cert_data"] = data
        elif key == "key_data":
            tls["key_data"] = data
    return ref["server"], tls


_K8S_NAME = "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
KEPT_OP = "^[0-9a-f]{8,64}$"     #: the change id in a keep-in record's name (``core.keptin`` checks it too)


def kept_record_name(manifest_file: str, op: str, patch: bool = False) -> str:
    """The file name of a keep-in record in ``STATE/keepin``: ``<file>.<op>.json`` for a ClusterConfiguration
    write, ``<file>.<op>.patch.json`` for a patch file; ``core.keptin`` writes it, the node side finds it."""
    return "%s.%s.%s" % (manifest_file, op, "patch.json" if patch else "json")
_KEPT_FIELDS = ("op", "component", "file", "previous", "checksum", "namespace", "name", "key", "before", "after",
                "resource_version", "time")


def _kept_record(path: str, state_dir: str, manifest_file: Optional[str] = None) -> Optional[Dict[str, str]]:
    """A ``--keep-in kubeadm-config`` record (``STATE/keepin/<file>.<op>.json``, as ``core.keptin`` writes
    it) - of ``manifest_file`` when given -, checked like cpctl checks it; None when gone or not one."""
    import re
    if os.path.dirname(path) != state_dir + "/keepin":
        return None
    found = _read_json(path, 4 << 20)
    kept = {k: v for k, v in found.items() if isinstance(v, str)} if found is not None else None   # the text fields
    if kept is None or any(f not in kept for f in _KEPT_FIELDS) or \
            not re.match(KEPT_OP, kept["op"]) or manifest_file not in (None, kept["file"]) or \
            os.path.basename(path) != kept_record_name(kept["file"], kept["op"]) or \
            not re.match(_K8S_NAME, kept["namespace"]) or not re.match(_K8S_NAME, kept["name"]):
        return None
    return kept


def _plan_keepin(plan: RevertPlan) -> List[str]:
    """After the revert, under the node lock: put back the ClusterConfiguration the reverted change
    wrote (``--keep-in kubeadm-config``), with cpctl's own rule (``config_undo``: exactly cpctl's keys,
    merged into what is there now; a key someone else changed too is a conflict, named, and keeps the
    record), its record dropped, history ``keep-in-undone`` - what ``core.keptin.settle`` does at the
    next cpctl command, done here at once because a master managed over SSH may see none for a long
    time. What cannot be done now (no API, the kubeconfig changed, YAML this agent does not read, a
    conflict) stays recorded for that next command, and the history says so (``keep-in-pending``,
    ``keep-in-conflict``): never lost silently. One line per record handled."""
    state_dir = os.path.dirname(plan["journal"])
    records = [(p, r) for p, r in ((p, _kept_record(p, state_dir, plan["entry"]["file"]))
                                   for p in plan["keepin"]) if r]
    if not records:
        return []
    try:
        api = plan["api"]
        access = _api_from(api) if api else None
        why = "" if access else "the node's kubeconfig is not the one cpctl read at arm time, or cannot be used"
    except (OSError, ValueError) as exc:     # not readable, or not base64 where it was (plan_problem: the rest)
        access, why = None, "the node's kubeconfig: %s" % (getattr(exc, "strerror", None) or type(exc).__name__)
    lines: List[str] = []
    for path, kept in records:
        where = "%s/%s" % (kept["namespace"], kept["name"])
        try:
            if access is None:
                raise OSError(errno.EACCES, why)
            line, settled = _put_back_config(plan, kept, access, path)
            if settled:
                unlink(path)
        except (OSError, ValueError) as exc:
            reason = str(getattr(exc, "strerror", None) or exc)
            line = kept_config_said("not-yet", where, kept["component"], why=reason)
            line += _record_pending(plan, kept, where, reason, path)
        if line:
            lines.append(line)
    return lines


def _api_json(method: str, url: str, access: Tuple[str, TlsOptions],
              body: Optional[object] = None) -> Tuple[int, Optional[Dict[str, object]]]:
    """(status, the JSON object answered, or None) of one request to the API server."""
    import json
    server, tls = access
    headers = {"Accept": "application/json"}
    payload = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        payload = json.dumps(body).encode("utf-8")
    reply = http(method, server + url, headers=headers, body=payload, timeout=10.0, tls=tls, limit=4 << 20)
    if reply["status"] != 200:
        return reply["status"], None
    found = json.loads(reply["body"].decode("utf-8"))
    if not isinstance(found, dict):
        raise ValueError("%s %s: the answer is not an object" % (method, url))
    return 200, found


def _put_back_config(plan: RevertPlan, kept: Kept, access: Tuple[str, TlsOptions],
                     record: str = "") -> Tuple[str, bool]:
    """One record (at ``record``): GET the ConfigMap, merge with ``config_undo`` (cpctl's keys only),
    PUT the result over the resourceVersion read (a write by someone else in between: read and merge
    again, once). (line, settled): what happened ("" when nothing to say), and whether the record is
    done with - a conflict keeps it until resolved. OSError/ValueError: the API could not be asked
    (the record stays)."""
    where = "%s/%s" % (kept["namespace"], kept["name"])
    url = "/api/v1/namespaces/%s/configmaps/%s" % (kept["namespace"], kept["name"])
    hint = plan["check_hint"]
    for _attempt in (1, 2):
        status, found = _api_json("GET", url, access)
        if status not in (200, 404):
            raise OSError(errno.EIO, "GET %s answered HTTP %d" % (where, status))
        data = (found or {}).get("data")
        data = data if isinstance(data, dict) else {}
        text = data.get(kept["key"])
        decision, new_text, keys = config_undo(None if found is None else text if isinstance(text, str) else "",
                                               kept["before"], kept["after"])
        if decision == "unreadable":
            raise ValueError("the ClusterConfiguration is YAML the master's revert does not read (%s); cpctl "
                             "reads any" % "; ".join(keys))
        if decision == "gone":
            return kept_config_said(decision, where, kept["component"], kept["op"]), True
        if decision == "conflict":
            line = kept_config_said(decision, where, kept["component"], keys=keys, hint=hint, record=record)
            return line + _record_conflict(plan, kept, where, text if isinstance(text, str) else "", record), False
        if decision != "write":
            return "", True
        status, written = _api_json("PUT", url, access, dict(found or {}, data=dict(data, **{kept["key"]: new_text})))
        if status != 409:
            break
    else:
        return kept_config_said("busy", where, kept["component"], hint=hint), False
    if status != 200:
        raise OSError(errno.EIO, "PUT %s answered HTTP %d" % (where, status))
    meta = (written or {}).get("metadata")
    version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
    _kept_ours_again(os.path.dirname(plan["journal"]), kept, version)
    _append_record(plan, config_undone_record(plan["verdict"], kept, where, str(secret_free(plan, version)), new_text,
                                              keys))
    return kept_config_said("put-back", where, kept["component"], version=version, keys=keys), True


def _record_pending(plan: RevertPlan, kept: Kept, where: str, why: str, record: str) -> str:
    """History ``keep-in-pending`` (``config_pending_record``) of a put-back the node-side revert could not
    make now (YAML it does not read, no API): never lost silently. "" when written, else what to add to
    the line."""
    try:
        _append_record(plan, config_pending_record(plan["verdict"], kept, where, secret_free(plan, why), record,
                                                   plan["check_hint"]))
    except OSError as exc:
        return " (its history record NOT written: %s)" % (exc.strerror or exc)
    return ""


def _record_conflict(plan: RevertPlan, kept: Kept, where: str, text: str, record: str) -> str:
    """History ``keep-in-conflict`` (``config_conflict_record``) of a put-back the node-side revert refused:
    the other writer's values shown only for the keys the plan names as not secret (``shown_keys``: cpctl's
    redaction rule, applied at arm time). "" when written, else what to add to the line."""
    shown = set(plan["shown_keys"])
    theirs = dict((key, secret_free(plan, value) if key in shown or value is None else REDACTED)
                  for key, value in config_theirs(text, kept["before"], kept["after"]).items())
    try:
        _append_record(plan, config_conflict_record(plan["verdict"], kept, where, theirs, record))
    except OSError as exc:
        return " (its history record NOT written: %s)" % (exc.strerror or exc)
    return ""


def secret_free(plan: Secrets, text: object) -> object:
    """``text`` from the cluster as a history record may hold it: ``REDACTED`` when one of the plan's
    ``secret_patterns`` (``cpctl.redaction.secret_text_patterns``: its one rule, which the agent cannot
    import; checked by ``plan_problem``) finds a secret in it - a key named harmlessly can still hold
    a private key or a ``--token=...``."""
    import re
    if isinstance(text, str) and any(re.search(pattern, text) for pattern in plan["secret_patterns"]):
        return REDACTED
    return text


def _kept_ours_again(state_dir: str, kept: Kept, version: str) -> None:
    """An older recorded change whose text is back now: cpctl's write again, at ``version`` (as
    ``core.keptin.undo`` re-saves it)."""
    import json
    folder = state_dir + "/keepin"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = folder + "/" + name
        if not name.endswith(".json") or name.endswith(".patch.json") or name.startswith("."):
            continue
        other = _kept_record(path, state_dir)
        if other is None or other["op"] == kept["op"] or other["after"] != kept["before"] or \
                other["namespace"] != kept["namespace"] or other["name"] != kept["name"]:
            continue
        other["resource_version"] = version
        write_atomic(path, (json.dumps(other, indent=2, sort_keys=True) + "\n").encode("utf-8"))

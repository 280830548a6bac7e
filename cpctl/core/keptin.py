"""What a ``--keep-in kubeadm-config`` change wrote outside the manifest, kept so that its undo is whole.

``--keep-in kubeadm-config`` changes the cluster-wide ClusterConfiguration (``kube-system/kubeadm-config``)
together with the manifest; the next ``kubeadm upgrade`` renders every master's manifest from it. A
manifest change undone without it comes back, on every master, at that upgrade. So the change records,
under the node lock and BEFORE it writes the ConfigMap, ``STATE/keepin/<file>.<op>.json``: the manifest's
checksum before (``previous``) and after, and the ClusterConfiguration text before and after cpctl's write
with the ``resourceVersion`` that write produced (recorded right after it).

One rule puts it back (:func:`settle`): once the manifest holds the ``previous`` bytes again - a
``rollback``, an unconfirmed change's revert, an automatic rollback, a change interrupted or killed
before its commit (the journal's recovery put the old bytes back) - cpctl's own keys are put back in
the ClusterConfiguration as it is then, by a three-way merge against what cpctl wrote (the way
``kubectl apply`` uses its last-applied configuration: ``agent.putback.config_undo``, the node-side revert's
rule too): a key cpctl changed that still holds cpctl's value gets its value before back, what anyone
else changed since (another flag, another section) stays. A key someone else changed too is a
conflict: nothing is written, the record stays and every command says so until it is resolved. The
record is dropped once cpctl's keys are back; an API that cannot be asked keeps it, and the next
command tries again.

It is representation-agnostic: the snapshot is the ClusterConfiguration TEXT, whatever ``keepin``
changed in it (extraArgs, extraVolumes, ...).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Set, Tuple

from cpctl.agent import putback
from cpctl.core import kubeadmconfig as kc
from cpctl.core import manifests
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.timeutil import iso

if TYPE_CHECKING:
    from cpctl.core import journal

SUBDIR = "keepin"
MAX_RECORD_BYTES = 4 << 20
KEEP_RECORDS = 20                 # per manifest file, newest kept (older ones can no longer come back)
_OP = re.compile(putback.KEPT_OP)


@dataclass
class KeptConfig:
    """One change's write to the ClusterConfiguration, and the manifest change it goes with."""

    op: str
    component: str
    file: str
    previous: str                 # sha256 of the manifest bytes before the change: when back, undo
    checksum: str                 # sha256 of the manifest bytes the change writes
    namespace: str
    name: str
    key: str                      # the ConfigMap's data key (ClusterConfiguration)
    before: str                   # its text before cpctl's write
    after: str                    # the text cpctl wrote
    resource_version: str = ""    # what cpctl's write produced ("": not recorded - killed right after it)
    time: str = ""


@dataclass
class ConfigWrite:
    """How one change writes the ClusterConfiguration (built by ``ops.keepin``): where, the text read
    and the text meant, and ``write()``, the read-modify-write itself, returning (text before, text
    written, resourceVersion of the write) - ("", "", "") when it found nothing to change."""

    namespace: str
    name: str
    key: str
    before: str
    after: str
    write: Callable[[], Tuple[str, str, str]]


def write(node: Node, config: ConfigWrite, kept: KeptConfig) -> None:
    """Under the node lock, before the manifest change ``kept.op`` (``kept.previous`` -> ``kept.checksum``)
    is applied: record ``kept`` - the inverse of the change's ClusterConfiguration part, computed with its
    plan (``core.plan.Plan.inverse``) -, write the change, record the texts and the resourceVersion the
    write produced (the undo is only made over that version). A write that fails (or finds nothing to
    change) leaves no record."""
    save(node, kept)
    before, after, version = config.write()     # failed or interrupted: the record stays, ``settle`` decides
    if not version:
        drop(node, kept)
        return
    save(node, replace(kept, before=before, after=after, resource_version=version))
    prune(node, kept.file)


@dataclass
class KeptPatch:
    """One change's write of a kubeadm patch file (``--keep-in patches``): its bytes before (None: no
    file) and the sha256 of the bytes cpctl wrote, and the manifest change it goes with."""

    op: str
    component: str
    file: str
    previous: str                 # sha256 of the manifest bytes before the change: when back, undo
    checksum: str                 # sha256 of the manifest bytes the change wrote
    path: str
    before: Optional[bytes]
    after: str
    time: str = ""


def save_patch(node: Node, kept: KeptPatch) -> None:
    """Record a patch file write (after it was made, in the same session)."""
    node.host.makedirs(directory(node), 0o700)
    value = dict(asdict(replace(kept, time=kept.time or iso())), kind="patch",
                 before=None if kept.before is None else base64.b64encode(kept.before).decode("ascii"))
    node.host.write_atomic(patch_path_of(node, kept), (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())


def patch_records(node: Node, filename: Optional[str]) -> List[KeptPatch]:
    """The ``--keep-in patches`` records (of ``filename``); a record cpctl did not write: exit 7."""
    where = directory(node)
    if node.host.lstat(where) is None:
        return []
    found = []
    for name in sorted(node.host.listdir(where)):
        if not name.endswith(".patch.json") or (filename is not None and not name.startswith(filename + ".")):
            continue
        path = where + "/" + name
        entry = node.host.lstat(path)
        if entry is None or entry["kind"] != "file" or entry["size"] > MAX_RECORD_BYTES:
            raise CpctlError("%s is not a --keep-in record cpctl wrote: inspect it by hand" % path,
                             ExitCode.ENVIRONMENT)
        try:
            value = json.loads(node.host.read_file(path, MAX_RECORD_BYTES).decode("utf-8"))
            before = value["before"]
            kept = KeptPatch(str(value["op"]), str(value["component"]), str(value["file"]), str(value["previous"]),
                             str(value["checksum"]), str(value["path"]),
                             None if before is None else base64.b64decode(str(before), validate=True),
                             str(value["after"]), str(value.get("time") or ""))
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, binascii.Error):
            raise CpctlError("%s is not a --keep-in record cpctl wrote: inspect it by hand" % path,
                             ExitCode.ENVIRONMENT) from None
        if name == putback.kept_record_name(kept.file, kept.op, patch=True) and _OP.match(kept.op):
            found.append(kept)
    return found


def _drop_patch(node: Node, kept: KeptPatch) -> None:
    node.host.unlink(patch_path_of(node, kept))


def patch_path_of(node: Node, kept: KeptPatch) -> str:
    """Where ``kept`` is recorded in the state dir."""
    return "%s/%s" % (directory(node), putback.kept_record_name(kept.file, kept.op, patch=True))


def patch_undo_change(kept: KeptPatch) -> "journal.Change":
    """The journaled change that puts the patch file's bytes before ``kept`` back (removes it when
    there was none), made only over cpctl's own bytes (``before`` of its write step)."""
    from cpctl.core import journal
    name = os.path.basename(kept.path)
    record = {"patch": kept.path, "reason": "the manifest is back at the version before the change", "undo": True}
    if kept.before is None:
        return journal.Change("keep-in", kept.component, name, None, [journal.remove(kept.path)], commit=0,
                              record=record)
    step = journal.write(kept.path, manifests.checksum(kept.before), mode=0o600, before=kept.after)
    return journal.Change("keep-in", kept.component, name, manifests.checksum(kept.before), [step], commit=0,
                          data={0: kept.before}, record=record)


def undo_patch(node: Node, kept: KeptPatch) -> str:
    """Put the patch file's bytes before the change back (remove it when there was none), through the
    journal - only over cpctl's own bytes (``agent.putback.patch_undo``); someone else's are left and named."""
    info = node.host.lstat(kept.path)
    now = manifests.checksum(node.host.read_file(kept.path, MAX_RECORD_BYTES)) \
        if info is not None and info["kind"] == "file" else None
    decision = putback.patch_undo(now, manifests.checksum(kept.before) if kept.before is not None else None,
                                  kept.after)
    if decision == "write":
        node.apply(patch_undo_change(kept))
    _drop_patch(node, kept)
    if decision == "done":
        return ""
    return putback.kept_patch_said("put-back" if decision == "write" else decision, kept.path, kept.component,
                                   removed=kept.before is None)


def directory(node: Node) -> str:
    return node.state.path + "/" + SUBDIR


def record_path(node: Node, kept: KeptConfig) -> str:
    """Where ``kept`` is recorded in the state dir (``STATE/keepin/<file>.<op>.json``)."""
    return "%s/%s" % (directory(node), putback.kept_record_name(kept.file, kept.op))


def save(node: Node, kept: KeptConfig) -> None:
    """Write (or rewrite) the record, atomically, in the 0700 state dir."""
    node.host.makedirs(directory(node), 0o700)
    data = (json.dumps(asdict(replace(kept, time=kept.time or iso())), indent=2, sort_keys=True) + "\n").encode()
    node.host.write_atomic(record_path(node, kept), data)


def drop(node: Node, kept: KeptConfig) -> None:
    node.host.unlink(record_path(node, kept))


def _parse(data: bytes, path: str) -> KeptConfig:
    """A record as cpctl writes it; anything else is one clear error (exit 7)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        value = None
    fields = [f for f in KeptConfig.__dataclass_fields__]
    if not isinstance(value, dict) or any(not isinstance(value.get(f), str) for f in fields) or \
            not _OP.match(str(value.get("op"))):
        raise CpctlError("%s is not a --keep-in record cpctl wrote: inspect it by hand (remove it to forget the "
                         "ClusterConfiguration change it names)" % path, ExitCode.ENVIRONMENT)
    return KeptConfig(**{f: value[f] for f in fields})


def read_all(node: Node, filename: Optional[str] = None) -> List[KeptConfig]:
    """The records (of ``filename``), oldest first; none when the directory is absent."""
    where = directory(node)
    info = node.host.lstat(where)
    if info is None:
        return []
    if info["kind"] != "dir":
        raise CpctlError("%s is not a directory: inspect it by hand" % where, ExitCode.ENVIRONMENT)
    found = []
    for name in sorted(node.host.listdir(where)):
        if not name.endswith(".json") or name.endswith(".patch.json") or name.startswith(".") or \
                (filename is not None and not name.startswith(filename + ".")):
            continue
        path = where + "/" + name
        entry = node.host.lstat(path)
        if entry is None or entry["kind"] != "file" or entry["size"] > MAX_RECORD_BYTES:
            raise CpctlError("%s is not a --keep-in record cpctl wrote: inspect it by hand" % path,
                             ExitCode.ENVIRONMENT)
        kept = _parse(node.host.read_file(path, MAX_RECORD_BYTES), path)
        if name != putback.kept_record_name(kept.file, kept.op) or (filename is not None and kept.file != filename):
            continue
        found.append(kept)
    return sorted(found, key=lambda k: k.time)


def prune(node: Node, filename: str) -> None:
    """Keep the newest KEEP_RECORDS records of ``filename``."""
    records = read_all(node, filename)
    for old in records[:max(0, len(records) - KEEP_RECORDS)]:
        drop(node, old)


def settle(node: Node, filename: Optional[str] = None) -> List[str]:
    """Put back the ClusterConfiguration of every recorded change (of ``filename``) whose manifest
    holds its ``previous`` bytes again (see the module); one line per record handled."""
    lines = []
    for kept in read_all(node, filename):
        now = node.checksum_of(node.manifests_dir + "/" + kept.file)
        if now == kept.previous:
            lines.append(undo(node, kept))
    for patch in patch_records(node, filename):
        if node.checksum_of(node.manifests_dir + "/" + patch.file) == patch.previous:
            lines.append(undo_patch(node, patch))
    return [line for line in lines if line]


def undo(node: Node, kept: KeptConfig) -> str:
    """Put cpctl's keys of ``kept`` back in the ConfigMap as it is now (``agent.putback.config_undo``: a
    three-way merge against what cpctl wrote; the text before itself when nobody else wrote the
    text), over the resourceVersion read (a write in between: read and merge again, once); say what
    happened. A key someone else changed too keeps the record (a conflict, said at every command)."""
    from cpctl.probes.kubeapi import ApiError, client_for
    where = "%s/%s" % (kept.namespace, kept.name)
    hint = node.command("check", "--kubeadm")
    try:
        client = client_for(node.host, node.kubeconfig)
        for attempt in (1, 2):
            found = client.get_configmap(kept.namespace, kept.name)
            data = found.get("data") if found is not None and isinstance(found.get("data"), dict) else {}
            assert isinstance(data, dict)
            text = data.get(kept.key) if found is not None else None
            decision, new_text, keys = putback.config_undo(
                None if found is None else text if isinstance(text, str) else "", kept.before, kept.after,
                load_config, kc.dump_config)
            if decision in ("gone", "done"):
                drop(node, kept)
                return putback.kept_config_said("gone", where, kept.component, kept.op) if decision == "gone" else ""
            if decision == "unreadable":
                return _unreachable(where, kept, "its ClusterConfiguration does not parse: %s" % "; ".join(keys))
            if decision == "conflict":
                record_conflict(node, kept, text if isinstance(text, str) else "")
                return putback.kept_config_said("conflict", where, kept.component, keys=keys, hint=hint,
                                                record=record_path(node, kept))
            assert found is not None
            try:
                written = client.update_configmap(kept.namespace, kept.name, dict(found, data=dict(data, **{
                    kept.key: new_text})))
                break
            except ApiError as exc:
                if exc.status != 409:
                    raise
                if attempt == 2:
                    return putback.kept_config_said("busy", where, kept.component, hint=hint)
    except ApiError as exc:
        return _unreachable(where, kept, exc.message)
    except (CpctlError, OSError) as exc:
        return _unreachable(where, kept, getattr(exc, "message", None) or str(exc))
    new_meta = written.get("metadata") if isinstance(written, dict) else None
    new_version = str(new_meta.get("resourceVersion") or "") if isinstance(new_meta, dict) else ""
    drop(node, kept)
    for other in read_all(node):      # an older change whose text is back: ours again, at the new version
        if other.after == kept.before and other.namespace == kept.namespace and other.name == kept.name:
            save(node, replace(other, resource_version=new_version))
    who = node.who()
    node.state.append_history(putback.config_undone_record(
        {"user": who.get("sudo_user") or who.get("user"), "host": who.get("hostname"), "node": who.get("node"),
         "origin": who.get("origin")}, asdict(kept), where, new_version, new_text, keys))
    return putback.kept_config_said("put-back", where, kept.component, version=new_version, keys=keys)


def shown_keys(records: Sequence[KeptConfig]) -> List[str]:
    """The ClusterConfiguration keys the records' changes touch whose values are no secret by cpctl's one
    redaction rule (no name on the key's path is a credential's: ``redaction.is_secret_name``): only
    their other writer's values are shown when a put-back is refused (history ``keep-in-conflict``). A
    node-side revert plan carries them (``shown_keys``): the agent cannot import the rule."""
    from cpctl.redaction import is_secret_name
    shown: Set[str] = set()
    for kept in records:
        try:
            steps = putback.config_key_steps(kept.before, kept.after, load_config)
        except ValueError:                  # unreadable: no value of it is shown
            continue
        shown.update(key for key, names in steps.items() if not any(is_secret_name(n) for n in names))
    return sorted(shown)


def record_conflict(node: Node, kept: KeptConfig, text: str) -> None:
    """History ``keep-in-conflict`` (``putback.config_conflict_record``, the node-side revert's record too)
    of a put-back refused because someone else changed cpctl's keys too, in ClusterConfiguration ``text``:
    once per other writer's values - every command tries the put-back again (and a master's own revert
    may have recorded it already), the history says it once."""
    from cpctl.redaction import redact, secret_text_patterns
    shown = set(shown_keys([kept]))
    # as the node-side revert's plan: the same record
    secret: putback.Secrets = {"secret_patterns": secret_text_patterns()}
    theirs = redact({key: putback.secret_free(secret, value) if key in shown or value is None else putback.REDACTED
                     for key, value in putback.config_theirs(text, kept.before, kept.after, load_config).items()})
    assert isinstance(theirs, dict)          # redact keeps a mapping a mapping
    if any(r.get("action") == "keep-in-conflict" and r.get("op") == kept.op and r.get("theirs") == theirs
           for r in node.state.read_history_tail()):
        return
    who = node.who()
    node.state.append_history(putback.config_conflict_record(
        {"user": who.get("sudo_user") or who.get("user"), "host": who.get("hostname"), "node": who.get("node"),
         "origin": who.get("origin")}, asdict(kept), "%s/%s" % (kept.namespace, kept.name), theirs,
        record_path(node, kept)))


def load_config(text: str) -> object:
    """A ClusterConfiguration text read with cpctl's bounded YAML reader (ValueError when it is none)."""
    try:
        value, _ = manifests.decode(text.encode("utf-8", "surrogateescape"))
    except manifests.InvalidManifest as exc:
        raise ValueError(str(exc)) from None
    return value


def _unreachable(where: str, kept: KeptConfig, why: str) -> str:
    return putback.kept_config_said("not-yet", where, kept.component, why=why)

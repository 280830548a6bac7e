"""``--name=value`` arguments of a static pod's container, read and changed in the manifest's text.

Control-plane components take their configuration as flags in the container's ``command`` (kubeadm)
or ``args``, one ``--name=value`` item per line. ``set_flags`` changes those items where they are
in the file's text -- comments, key order, quoting and every other line stay byte for byte -- and
checks that the result decodes to exactly the intended lists; a layout it cannot edit in place
(a flow-style list, two items on a line) is re-written as a whole instead, and says so.

A flag given as two items (``--name value``) is ambiguous for a boolean flag, so cpctl does not
guess: it refuses and points at ``cpctl edit``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from cpctl.core import manifests
from cpctl.errors import CpctlError, ExitCode
from cpctl.redaction import REDACTED, is_secret_name, redact_text

_FLAG = re.compile(r"^--(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:=(?P<value>.*))?$", re.S)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
LISTS = ("command", "args")
#: Flags a component accepts several times (each adds a value), so a repeat is not a mistake.
REPEATABLE = frozenset({
    "service-account-issuer", "service-account-key-file", "tls-sni-cert-key", "api-audiences",
    "oidc-required-claim", "vmodule", "feature-gates", "requestheader-allowed-names", "cors-allowed-origins",
    "admission-control-config-file", "allow-metric-labels",
})


@dataclass
class Flag:
    """One ``--name[=value]`` item of a container's ``command`` or ``args``."""

    where: str          # "command" or "args"
    index: int
    name: str
    value: Optional[str]


def flags_of(container: Mapping[str, object]) -> List[Flag]:
    """Every ``--name[=value]`` item of the container, in command then args order."""
    found = []
    for where in LISTS:
        for index, item in enumerate(_items(container.get(where))):
            match = _FLAG.match(item) if isinstance(item, str) else None
            if match:
                found.append(Flag(where, index, match.group("name"), match.group("value")))
    return found


def _items(value: object) -> List[object]:
    """A decoded list field ([] when absent or not a list)."""
    return value if isinstance(value, list) else []


def duplicated(container: Mapping[str, object]) -> List[str]:
    """Names of flags given more than once that the component takes only once (the last one wins,
    silently: a classic of hand edits)."""
    counts: Dict[str, int] = {}
    for flag in flags_of(container):
        counts[flag.name] = counts.get(flag.name, 0) + 1
    return sorted(name for name, count in counts.items() if count > 1 and name not in REPEATABLE)


def redact(text: str) -> str:
    """``text`` with the values of flags that look like credentials replaced (diffs, history): the
    one rule of :mod:`cpctl.redaction`."""
    return redact_text(text)


def pick_container(pod: Mapping[str, object], wanted: Optional[str]) -> Tuple[int, Dict[str, Any]]:
    """(index, container) named ``wanted``; without a name the only container, or the one named
    like the pod (kubeadm's layout). A usage error (exit 2) names the choices otherwise. The
    container is the decoded one (its fields as ``podspec.check_types`` left them)."""
    spec, meta = pod.get("spec"), pod.get("metadata")
    containers = [c for c in _items(spec.get("containers") if isinstance(spec, dict) else None) if isinstance(c, dict)]
    pod_name = str(meta.get("name")) if isinstance(meta, dict) else ""
    names = [str(c.get("name")) for c in containers]
    if wanted is not None:
        if wanted not in names:
            raise CpctlError("no container %r in pod %s (it has %s)"
                             % (wanted, pod_name, ", ".join(names)), ExitCode.USAGE)
        return names.index(wanted), containers[names.index(wanted)]
    if len(containers) == 1:
        return 0, containers[0]
    if pod_name in names:
        index = names.index(pod_name)
        return index, containers[index]
    raise CpctlError("pod %s has several containers (%s): choose one with --container"
                     % (pod_name, ", ".join(names)), ExitCode.USAGE)


def parse_assignment(text: str) -> Tuple[str, str]:
    """``NAME=VALUE`` (a leading ``--`` allowed) of ``--set``; a usage error otherwise."""
    name, sep, value = text.partition("=")
    name = name[2:] if name.startswith("--") else name
    if not sep or not NAME.match(name):
        raise CpctlError("--set %r: expected NAME=VALUE (e.g. --set enable-admission-plugins=NodeRestriction)" % text,
                         ExitCode.USAGE)
    bad = next(((n, c) for n, c in enumerate(value) if not c.isprintable()), None)
    if bad is not None:         # a newline, ESC, a bidi override: never a flag value, often a trick
        raise CpctlError("--set %s: the value holds a control or format character (U+%04X at position %d): a flag "
                         "value is one line of printable text; refused, nothing changed" % (name, ord(bad[1]), bad[0]),
                         ExitCode.USAGE)
    return name, value


def parse_name(text: str) -> str:
    name = text[2:] if text.startswith("--") else text
    if not NAME.match(name):
        raise CpctlError("--unset %r: expected a flag name (e.g. --unset profiling)" % text, ExitCode.USAGE)
    return name


# --- computing the new lists -----------------------------------------------------------------
def new_lists(container: Mapping[str, object], sets: Sequence[Tuple[str, str]], unsets: Sequence[str],
              edit: str = "cpctl edit") -> Tuple[Dict[str, List[str]], List[str]]:
    """The container's command and args (strings in a valid pod) after the change, and one line
    per effect. ``edit``: the command a refusal points to (``Node.command("edit", COMPONENT)``)."""
    lists = {where: [i for i in _items(container.get(where)) if isinstance(i, str)] for where in LISTS}
    _refuse_two_word_forms(lists, [n for n, _ in sets] + list(unsets), edit)
    said = []
    for name in unsets:
        before = sum(len(items) for items in lists.values())
        for where in LISTS:
            lists[where] = [i for i in lists[where] if not _is_flag(i, name)]
        gone = before - sum(len(items) for items in lists.values())
        if not gone:
            _refuse_misspelt_unset(container, lists, name)
        said.append("--%s removed" % name if gone else "--%s was not set" % name)
    for name, value in sets:
        said.append(_set_one(lists, name, value, edit))
    return lists, said


def _refuse_misspelt_unset(container: Mapping[str, object], lists: Dict[str, List[str]], name: str) -> None:
    """``--unset`` of a flag that is not set: a usage error (exit 2) when it looks misspelt -- a set
    flag is close to it, or the component's binary has no such flag -- naming the nearest; a real
    flag that is simply not set stays "was not set" (unsetting twice is no error)."""
    from cpctl.core import knownflags
    command = _items(container.get("command"))
    binary = command[0].rsplit("/", 1)[-1] if command and isinstance(command[0], str) else ""
    set_names = sorted({m.group("name") for items in lists.values() for m in map(_FLAG.match, items) if m})
    known = knownflags.known_flags(binary, str(container.get("image") or ""))
    unknown = known is not None and name not in known
    close = manifests.close_names(name, set_names) or (manifests.close_names(name, sorted(known or ()))
                                                       if unknown else [])
    if not close and not unknown:
        return
    raise CpctlError("--unset %s: %s %s (%s); nothing changed"
                     % (name, binary or "container %s" % container.get("name"),
                        "has no flag --%s" % name if unknown else "does not set --%s" % name,
                        "did you mean --%s?" % close[0] if close else "it sets: %s" % (", ".join(set_names) or "none")),
                     ExitCode.USAGE)


def _is_flag(item: object, name: str) -> bool:
    match = _FLAG.match(item) if isinstance(item, str) else None
    return bool(match and match.group("name") == name)


def _refuse_two_word_forms(lists: Dict[str, List[str]], names: List[str], edit: str) -> None:
    for where, items in lists.items():
        for index, item in enumerate(items[:-1]):
            following = items[index + 1]
            if item in ["--" + n for n in names] and isinstance(following, str) and not following.startswith("-"):
                shown = REDACTED if is_secret_name(item) else following
                raise CpctlError("%s is followed by %r in %s: cpctl cannot tell whether that is its value; change it "
                                 "with %s" % (item, shown, where, edit), ExitCode.REFUSED)


def _set_one(lists: Dict[str, List[str]], name: str, value: str, edit: str) -> str:
    item = "--%s=%s" % (name, value)
    hits = [(where, i) for where in LISTS for i, x in enumerate(lists[where]) if _is_flag(x, name)]
    if len(hits) > 1:
        raise CpctlError("--%s is given %d times: change it with %s" % (name, len(hits), edit), ExitCode.REFUSED)
    if hits:
        where, index = hits[0]
        if lists[where][index] == item:
            return "--%s already %s" % (name, value)
        lists[where][index] = item
        return "--%s set to %s" % (name, value)
    where = _flag_list(lists)
    lists[where].append(item)
    return "--%s=%s added" % (name, value)


def _flag_list(lists: Dict[str, List[str]]) -> str:
    """Where a new flag goes: the list that has flags (args wins when both do), else the command."""
    if any(_FLAG.match(i) for i in lists["args"] if isinstance(i, str)):
        return "args"
    if lists["command"] or not lists["args"]:
        return "command"
    return "args"


# --- writing them into the text ------------------------------------------------------------------
def set_flags(data: bytes, pod: Mapping[str, object], container_index: int, lists: Dict[str, List[str]]
              ) -> Tuple[bytes, bool]:
    """The manifest ``data`` with container ``container_index``'s command and args replaced by
    ``lists``: (new bytes, True when the file had to be re-written as a whole)."""
    try:
        edited = _edit_in_place(data.decode("utf-8"), container_index, lists)
    except (_NotInPlace, UnicodeDecodeError, yaml.YAMLError):
        edited = None
    if edited is not None and _result_is(edited, container_index, lists):
        return edited, False
    whole = _rewritten(pod, container_index, lists)
    if not _result_is(whole, container_index, lists):
        raise CpctlError("cannot write the changed flags back into the manifest (a bug: please report it)",
                         ExitCode.INTERNAL)
    return whole, True


class _NotInPlace(Exception):
    """The text's layout does not allow an in-place edit."""


def _edit_in_place(text: str, container_index: int, lists: Dict[str, List[str]]) -> bytes:
    root = next(iter(yaml.compose_all(text, Loader=yaml.SafeLoader)), None)
    container = _node_at(root, ["spec", "containers", container_index])
    edits: List[Tuple[int, int, str]] = []          # (start, end, replacement) in text
    for where in LISTS:
        node = _node_at(container, [where]) if container is not None else None
        wanted = lists[where]
        if node is None:
            if wanted:
                raise _NotInPlace()                 # a new key: leave it to the full re-write
            continue
        if not isinstance(node, yaml.SequenceNode) or node.flow_style:
            raise _NotInPlace()
        edits += _sequence_edits(text, node, wanted)
    out = text
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + replacement + out[end:]
    return out.encode("utf-8")


def _node_at(node: Optional[yaml.Node], path: Sequence[Union[str, int]]) -> Optional[yaml.Node]:
    for key in path:
        if isinstance(key, int):
            if not isinstance(node, yaml.SequenceNode) or key >= len(node.value):
                return None
            node = node.value[key]
        else:
            if not isinstance(node, yaml.MappingNode):
                return None
            node = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    return node


def _sequence_edits(text: str, node: yaml.SequenceNode, wanted: List[str]) -> List[Tuple[int, int, str]]:
    """Edits that turn the block sequence ``node`` into ``wanted``: kept items stay, changed items
    are replaced where they stand, removed ones lose their line, added ones follow the last kept."""
    items = node.value
    if not items or any(not isinstance(i, yaml.ScalarNode) for i in items):
        raise _NotInPlace()
    mapped = [_counterpart(i.value, wanted) for i in items]
    added = [w for w in wanted if w not in mapped]
    kept = [index for index, target in enumerate(mapped) if target is not None]
    if not kept or [m for m in mapped if m is not None] + added != wanted:
        raise _NotInPlace()                         # the order would differ: re-write the whole file
    lines = [_item_line(text, i) for i in items]
    edits = []
    for index, target in enumerate(mapped):
        if target is None:
            edits.append((lines[index][0], lines[index][1], ""))
        elif target != items[index].value:
            edits.append((items[index].start_mark.index, items[index].end_mark.index, _scalar(target)))
    if added:
        anchor = kept[-1]
        prefix = text[lines[anchor][0]:items[anchor].start_mark.index]
        at = lines[anchor][1]
        edits.append((at, at, "".join(prefix + _scalar(w) + "\n" for w in added)))
    return edits


def _counterpart(value: object, wanted: List[str]) -> Optional[str]:
    """What ``value`` becomes: itself when kept, the new item of the same flag, None when removed."""
    if value in wanted:
        return str(value)
    match = _FLAG.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    return next((w for w in wanted if _is_flag(w, match.group("name"))), None)


def _item_line(text: str, item: yaml.Node) -> Tuple[int, int]:
    """(start, end) of the whole line holding block sequence item ``item``, end after its newline;
    refused when the line holds anything else than ``- item`` and a comment."""
    start = text.rfind("\n", 0, item.start_mark.index) + 1
    end = text.find("\n", item.end_mark.index)
    end = len(text) if end < 0 else end + 1
    before = text[start:item.start_mark.index]
    after = text[item.end_mark.index:end].strip()
    if before.strip() != "-" or (after and not after.startswith("#")) or item.start_mark.line != item.end_mark.line:
        raise _NotInPlace()
    return start, end


def _scalar(value: str) -> str:
    """``value`` as a YAML scalar: plain when it reads back as the same string, else double-quoted."""
    plain_ok = value and not re.search(r"(: |\s#|^[\s!&*?|>'\"%@`{}\[\],#-]\s|^[!&*?|>'\"%@`{\[]|\s$|:$)", value)
    if plain_ok:
        try:
            if yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value)


def _rewritten(pod: Mapping[str, object], container_index: int, lists: Dict[str, List[str]]) -> bytes:
    changed = json.loads(json.dumps(pod))
    container = changed["spec"]["containers"][container_index]
    for where in LISTS:
        if lists[where]:
            container[where] = lists[where]
        else:
            container.pop(where, None)
    return yaml.safe_dump(changed, sort_keys=False, default_flow_style=False).encode("utf-8")


def append_in_place(data: bytes, additions: Sequence[Tuple[Sequence[Union[str, int]], List[object]]],
                    intended: Mapping[str, object]) -> Optional[bytes]:
    """``data`` with each (path, items) of ``additions`` appended to the block sequence at that path
    (``["spec", "volumes"]``), spliced into the text after its last item - every other byte, the
    comments too, as it was - or None when the layout allows no in-place edit (no such sequence yet,
    a flow or empty one) or the result would not read back as ``intended`` (the caller then
    re-writes the file as a whole). What ``--mount`` adds to a manifest."""
    try:
        text = data.decode("utf-8")
        root = next(iter(yaml.compose_all(text, Loader=yaml.SafeLoader)), None)
        edits = [_append_edit(text, root, path, items) for path, items in additions if items]
    except (_NotInPlace, UnicodeDecodeError, yaml.YAMLError):
        return None
    out = text
    for at, _depth, insert in sorted(edits, reverse=True):     # at one place: the deeper one first
        out = out[:at] + insert + out[at:]
    try:
        return out.encode("utf-8") if manifests.parse_pod(out.encode("utf-8")) == intended else None
    except manifests.InvalidManifest:
        return None


def _append_edit(text: str, root: Optional[yaml.Node], path: Sequence[Union[str, int]], items: List[object]
                 ) -> Tuple[int, int, str]:
    """(where, -depth, text) that appends ``items`` to the block sequence at ``path``: after the line
    that ends its last item, each item dumped as a block at the column of the sequence's dashes; a
    sequence not there yet is a new key after the last line of its block mapping, at its keys' column
    (the sequence's dashes there too, as kubeadm writes them)."""
    node = _node_at(root, path)
    if node is None:
        parent = _node_at(root, path[:-1])
        if not isinstance(parent, yaml.MappingNode) or parent.flow_style or not parent.value:
            raise _NotInPlace()
        column = parent.value[0][0].start_mark.column
        at, newline = _after_line(text, _last_mark(parent))
        return at, -len(path), newline + " " * column + "%s:\n" % path[-1] + _block(items, column)
    if not isinstance(node, yaml.SequenceNode) or node.flow_style or not node.value:
        raise _NotInPlace()
    at, newline = _after_line(text, max(_last_mark(item) for item in node.value))
    return at, -len(path), newline + _block(items, node.start_mark.column)


def _after_line(text: str, index: int) -> Tuple[int, str]:
    """Where the line holding ``index`` ends (after its newline), and the newline the text lacks there."""
    end = text.find("\n", index)
    return (len(text), "\n") if end < 0 else (end + 1, "")


def _block(items: List[object], column: int) -> str:
    dumped = yaml.safe_dump(items, default_flow_style=False, sort_keys=False)
    return "".join(" " * column + line + "\n" for line in dumped.splitlines())


def _last_mark(node: yaml.Node) -> int:
    """Where the last scalar of ``node`` ends in the text (a collection's own end mark may lie past
    the comments that follow it)."""
    if isinstance(node, yaml.ScalarNode):
        if node.style in ("|", ">"):
            raise _NotInPlace()                     # a block scalar ends on a later line
        return node.end_mark.index
    if isinstance(node, yaml.MappingNode):
        return max((_last_mark(v) for pair in node.value for v in pair), default=node.start_mark.index)
    if isinstance(node, yaml.SequenceNode):
        return max((_last_mark(v) for v in node.value), default=node.start_mark.index)
    raise _NotInPlace()


def _result_is(data: bytes, container_index: int, lists: Dict[str, List[str]]) -> bool:
    try:
        pod = manifests.parse_pod(data)
    except manifests.InvalidManifest:
        return False
    container = pod["spec"]["containers"][container_index]
    return all(list(container.get(where) or []) == lists[where] for where in LISTS)

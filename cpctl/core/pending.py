""""Verification pending": a manifest change whose new pod nobody has judged yet.

``apply``, ``edit``, ``flags`` and ``rollback`` write the new bytes, then wait for the new pod. A
cpctl killed during that wait (SIGKILL, a lost SSH connection, a reboot of the operator's laptop)
leaves a version in place that may be crash-looping, and nothing else would ever say so. So the
change that writes the manifest also records, in the same journaled change and before its commit
step, an entry in ``STATE/pending.json`` (file -> who, when, which bytes); the verdict (verified,
rolled back, interrupted and put back, a conflict) clears it. An entry found later by a command
that does not hold it is a change that was never verified: every command that opens the node says
so (``pending_notices``), and ``check`` reports it as a finding.

The file is input like anything in the state dir: entries are type-checked, a corrupt file is one
notice naming it (never a dead tool).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from cpctl.core import manifests
from cpctl.core.settings import command_hint_here
from cpctl.core.state import MAX_STATE_FILE, StateDir
from cpctl.host.base import Host

if TYPE_CHECKING:
    from cpctl.core import journal  # imported by ``mark_step``: a view (status) never needs it

MAX_PENDING_BYTES = 1 << 20
_TEXT = ("op", "action", "component", "file", "checksum", "previous", "started", "by", "host", "node")


@dataclass
class Pending:
    """One change whose new pod was never judged: ``checksum`` is the bytes it wrote."""

    op: str
    action: str
    component: str
    file: str
    checksum: str
    previous: str
    started: str
    by: str
    host: str
    node: str
    pid: int
    revision: int            # the revision that keeps the bytes it replaced

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


def path(state: StateDir) -> str:
    return state.pending_path


def read(host: Host, state: StateDir) -> Tuple[Dict[str, Pending], str]:
    """(file -> entry, a problem with the file or ""): absent is empty, corrupt is a problem."""
    where = path(state)
    try:
        data = host.read_file(where, min(MAX_PENDING_BYTES, MAX_STATE_FILE))
    except FileNotFoundError:
        return {}, ""
    except OSError as exc:
        return {}, "cannot read %s: %s" % (where, exc.strerror or exc)
    return parse(where, data)


def parse(where: str, data: bytes) -> Tuple[Dict[str, Pending], str]:
    """The entries of ``data`` (the bytes of pending.json), or a problem naming ``where``."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return {}, "%s is corrupt (not JSON): inspect it, then remove it by hand" % where
    if not isinstance(value, dict) or not isinstance(value.get("changes"), dict):
        return {}, "%s is corrupt (not cpctl's): inspect it, then remove it by hand" % where
    found: Dict[str, Pending] = {}
    for name, entry in value["changes"].items():
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), str) for k in _TEXT) \
                or entry.get("file") != name:
            return {}, "%s is corrupt (entry %r): inspect it, then remove it by hand" % (where, name[:80])
        numbers = [entry.get(k) for k in ("pid", "revision")]
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in numbers):
            return {}, "%s is corrupt (entry %r): inspect it, then remove it by hand" % (where, name[:80])
        found[name] = Pending(**{k: entry[k] for k in Pending.__dataclass_fields__})
    return found, ""


def encode(entries: Dict[str, Pending]) -> bytes:
    return (json.dumps({"version": 1, "changes": {k: v.to_dict() for k, v in sorted(entries.items())}},
                       indent=2, sort_keys=True) + "\n").encode("utf-8")


def mark_step(host: Host, state: StateDir, entry: Pending) -> Tuple[journal.Step, bytes]:
    """The journal step (and its bytes) that records ``entry``, replacing any older entry of its file:
    part of the change that writes the manifest, before its commit step."""
    from cpctl.core import journal
    where = path(state)
    info = host.lstat(where)
    old = host.read_file(where, MAX_PENDING_BYTES) if info is not None and info["kind"] == "file" else b""
    entries, _problem = parse(where, old) if old else ({}, "")
    entries[entry.file] = entry
    new = encode(entries)
    return journal.write(where, manifests.checksum(new), before=manifests.checksum(old) if old else ""), new


def clear(host: Host, state: StateDir, filename: str, op: Optional[str] = None, unless: str = "") -> None:
    """The verdict is in: drop the entry of ``filename`` (only the one of change ``op`` when given;
    never the one of change ``unless``: an older entry the failed change did not replace).
    One atomic write of a state file; a failure is not worth failing a verdict for (the entry then
    shows as "never verified", which errs on the safe side)."""
    entries, problem = read(host, state)
    entry = entries.get(filename)
    if problem or entry is None or (op is not None and entry.op != op) or (unless and entry.op == unless):
        return
    del entries[filename]
    try:
        if entries:
            host.write_atomic(path(state), encode(entries))
        else:
            host.unlink(path(state))
    except OSError:
        pass


def describe(entry: Pending, in_place: Optional[str], command: Callable[..., str] = command_hint_here) -> str:
    """One line about a change never verified: which, when, by whom, and what to do (``command``:
    ``Node.command``, the hints' cpctl command lines)."""
    text = ("%s of %s (%s) on %s at %s by %s (pid %d) was never verified: cpctl stopped while waiting for the new "
            "pod, so the version in place may not be healthy" % (entry.action, entry.component, entry.file,
                                                                  entry.node, entry.started, entry.by, entry.pid))
    if in_place is not None and in_place != entry.checksum:
        text += " (the file has changed since)"
    return text + ("; check it with %s, then confirm it with %s or undo it with %s (revision %d holds the previous "
                   "version)" % (command("status", entry.component), command("start", entry.component),
                                 command("rollback", entry.component), entry.revision))


def notices(host: Host, state: StateDir, in_place: Dict[str, Optional[str]]) -> List[str]:
    """One line per change never verified (``in_place``: file -> checksum of the manifest now)."""
    entries, problem = read(host, state)
    lines = [problem] if problem else []
    return lines + [describe(e, in_place.get(name)) for name, e in sorted(entries.items())]


def present(host: Host, state: StateDir) -> bool:
    """True when a pending file exists (one lstat; what every command checks first)."""
    return host.lstat(path(state)) is not None

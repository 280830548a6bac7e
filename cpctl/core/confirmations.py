"""Commit-confirmed changes: the pending confirmations ("arms") kept in the state dir.

A change made with ``--confirm-within`` is *armed*: unless ``cpctl confirm`` disarms it before its
deadline, a node-side timer reverts it to the revision before it (manifest and companion files).
This module is the arm record only; the flow (timers, revert) is :mod:`cpctl.ops.confirm`.

One record per manifest file: ``STATE/confirm/<file>.json``. It is written (``armed``) and removed
(``confirmed``, ``reverted``, ``dropped``) by journaled changes like every other state file, so a
SIGKILL at any instant leaves either the old or the new record, and every step lands in
``history``. The record is input like anything in the state dir: it is type-checked field by field
on every read, and one that is not cpctl's is one clear error (exit 7) naming it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Dict, List, Optional

from cpctl import catalogue
from cpctl.core import manifests
from cpctl.core.state import CONFIRM as SUBDIR
from cpctl.core.state import MAX_ARM_BYTES, StateDir
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
from cpctl.timeutil import parse_iso

if TYPE_CHECKING:               # the journal loads with a node's first change, not for a status
    from cpctl.core import journal

SUFFIX = ".json"
TIMERS = ("systemd", "process", "none")
_TEXT = ("op", "component", "file", "checksum", "previous", "action", "armed_at", "deadline", "by", "host",
         "node", "timer", "unit", "check")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_UNIT = re.compile(r"^(|cpctl-confirm-[A-Za-z0-9._-]{1,200})$")


@dataclass
class Arm:
    """One armed change: ``checksum`` is the manifest bytes it wrote, ``revision`` keeps the bytes
    before it (``previous``), ``deadline`` when the node reverts it unless confirmed; ``timer`` says
    what reverts it on the node (a transient systemd ``unit``, or a detached process ``pid``)."""

    op: str
    component: str
    file: str
    checksum: str
    previous: str
    revision: int
    action: str
    armed_at: str
    deadline: str
    by: str
    host: str
    node: str
    reason: Optional[str]
    timer: str
    unit: str = ""
    pid: int = 0
    check: str = ""

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)

    def deadline_epoch(self) -> float:
        return parse_iso(self.deadline)

    def overdue(self, now: float) -> bool:
        return now >= self.deadline_epoch()

    def matches(self, wanted: str) -> bool:
        """``wanted`` names the armed component: its name, file, file stem or catalogue alias."""
        return wanted in (self.component, self.file, manifests.file_stem(self.file)) or \
            catalogue.canonical(wanted) == self.component

    def refusal(self, action: str) -> CpctlError:
        """Why ``action`` of the armed component is refused (exit 4, nothing changed): another
        change under an arm would make the revert undo the wrong one; a stop would leave it nothing
        to revert (the revert puts the old bytes back in the manifests dir, so a parked manifest
        means the arm is dropped and the change stays unconfirmed)."""
        import time
        when = ("its revert is due since %s and in progress or about to run (see cpctl status %s)"
                % (self.deadline, self.component)) if self.overdue(time.time()) else "reverts at %s" % self.deadline
        return CpctlError("%s refused: %s has an unconfirmed change (%s by %s, %s); confirm it first "
                          "(cpctl confirm %s) or revert it now (cpctl revert-unconfirmed %s); nothing changed"
                          % (action, self.component, self.action, self.by, when, self.component,
                             self.component), ExitCode.REFUSED)


def directory(state: StateDir) -> str:
    return state.path.rstrip("/") + "/" + SUBDIR


def path_of(state: StateDir, filename: str) -> str:
    return directory(state) + "/" + filename + SUFFIX


def parse(where: str, data: bytes) -> Arm:
    """The arm in ``data`` (the bytes of ``where``); exit 7 for anything cpctl did not write."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise CpctlError("%s is corrupt (not JSON): inspect it, then remove it by hand" % where,
                         ExitCode.ENVIRONMENT) from None
    problem = _problem(value)
    if problem:
        raise CpctlError("%s is corrupt (%s): inspect it, then remove it by hand" % (where, problem),
                         ExitCode.ENVIRONMENT)
    fields = {k: value.get(k) for k in Arm.__dataclass_fields__}
    return Arm(**fields)


def _problem(value: object) -> str:
    """Why ``value`` is not an arm record cpctl wrote ("" when it is)."""
    if not isinstance(value, dict):
        return "not an object"
    for key in _TEXT:
        if not isinstance(value.get(key), str):
            return "%s is not text" % key
    if value.get("reason") is not None and not isinstance(value.get("reason"), str):
        return "reason is not text"
    for key in ("revision", "pid"):
        number = value.get(key)
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            return "%s is not a number" % key
    if not _SHA.match(value["checksum"]) or not _SHA.match(value["previous"]):
        return "checksum is not a sha256"
    if value["timer"] not in TIMERS or not _UNIT.match(value["unit"]):
        return "timer is not one cpctl starts"
    for key in ("armed_at", "deadline"):
        try:
            parse_iso(value[key])
        except ValueError:
            return "%s is not a time" % key
    try:
        manifests.validate_component_name(value["file"])
    except CpctlError:
        return "file is not a manifest file name"
    return ""


def read(host: Host, state: StateDir, filename: str) -> Optional[Arm]:
    """The arm of manifest ``filename`` (None: nothing armed)."""
    where = path_of(state, filename)
    try:
        data = host.read_file(where, MAX_ARM_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CpctlError("cannot read %s: %s" % (where, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
    arm = parse(where, data)
    if arm.file != filename:
        raise CpctlError("%s is corrupt (it names %s): inspect it, then remove it by hand" % (where, arm.file[:80]),
                         ExitCode.ENVIRONMENT)
    return arm


def refuse_armed(host: Host, state: StateDir, filename: str, action: str) -> None:
    """Refuse ``action`` of manifest ``filename`` while its last change awaits confirmation
    (``Arm.refusal``)."""
    arm = read(host, state, filename) if state.ensure(create=False) else None
    if arm is not None:
        raise arm.refusal(action)


def read_all(host: Host, state: StateDir) -> List[Arm]:
    """Every arm of the node, by file name (one read of the confirm dir)."""
    try:
        entries = host.scan_dir(directory(state), MAX_ARM_BYTES)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CpctlError("cannot read %s: %s" % (directory(state), exc.strerror or exc),
                         ExitCode.ENVIRONMENT) from None
    found = []
    for entry in sorted(entries, key=lambda e: str(e["name"])):
        name = str(entry["name"])
        if name.startswith(".") or not name.endswith(SUFFIX):
            continue
        where = directory(state) + "/" + name
        if entry.get("kind") != "file" or "data" not in entry:
            raise CpctlError("cannot read %s: not a regular file of at most 64 KiB" % where, ExitCode.ENVIRONMENT)
        arm = parse(where, entry["data"])
        if arm.file + SUFFIX != name:
            raise CpctlError("%s is corrupt (it names %s): inspect it, then remove it by hand" % (where, arm.file[:80]),
                             ExitCode.ENVIRONMENT)
        found.append(arm)
    return found


def arm_change(state: StateDir, arm: Arm) -> journal.Change:
    """The journaled change that records ``arm`` (history action ``armed``)."""
    from cpctl.core import journal
    data = (json.dumps(arm.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    step = journal.write(path_of(state, arm.file), manifests.checksum(data))
    record = {"reason": arm.reason, "deadline": arm.deadline, "revision": arm.revision, "timer": arm.timer,
              "armed_action": arm.action, "check": arm.check or None, "unit": arm.unit or None,
              "pid": arm.pid or None}
    return journal.Change("armed", arm.component, arm.file, arm.checksum, [step], commit=0, record=record,
                          data={0: data}, op=arm.op + "-arm")


def disarm_change(state: StateDir, arm: Arm, action: str, why: str, **record: object) -> journal.Change:
    """The journaled change that removes ``arm``: ``action`` is ``confirmed``, ``reverted`` or
    ``dropped`` (the revert could not run), ``why`` the history's reason."""
    from cpctl.core import journal
    step = journal.remove(path_of(state, arm.file))
    fields: Dict[str, object] = {"reason": why, "armed_op": arm.op, "deadline": arm.deadline, "revision": arm.revision}
    fields.update(record)
    return journal.Change(action, arm.component, arm.file, arm.checksum, [step], commit=0, record=fields)

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
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Union

from cpctl import catalogue
from cpctl.core import manifests
from cpctl.core.settings import command_hint_here
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
# Added by issue 35 (optional: a record written before has none of them): the node's boot and its
# CLOCK_BOOTTIME deadline, and why the last revert attempt failed, how often, when it tries again.
_OPTIONAL_TEXT = ("boot_id", "failing", "next_try")
_BOOT_ID = re.compile(r"^(|[0-9a-f-]{16,64})$")


@dataclass
class NodeClock:
    """The node's clocks at one instant (``Host.clock``): wall time (Unix seconds), CLOCK_BOOTTIME
    seconds (monotonic, counts suspend, restarts at boot) and the boot it belongs to. "Overdue" is
    judged on these, never on the operator's clock."""

    time: float
    boottime: float
    boot_id: str
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
    boot_id: str = ""            # the node's boot id when armed ("" in a record from before issue 35)
    due_boottime: float = 0.0    # CLOCK_BOOTTIME (s) at which it is due, within that boot
    failing: str = ""            # why the last revert attempt failed ("" none did): it is retried
    attempts: int = 0            # revert attempts that failed so far
    next_try: str = ""           # when the node tries again (UTC, the node's clock)

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)

    def deadline_epoch(self) -> float:
        return parse_iso(self.deadline)

    def due_in(self, clock: NodeClock) -> float:
        """Seconds until the revert is due, judged on the node: within the boot it was armed in, by
        CLOCK_BOOTTIME (a wall-clock step changes nothing); after a reboot (or for a record without
        a boot id) by the wall-clock deadline, the one the persistent timer fires at."""
        if self.boot_id and self.due_boottime > 0 and clock.boot_id == self.boot_id:
            return self.due_boottime - clock.boottime
        return self.deadline_epoch() - clock.time

    def overdue(self, now: Union[float, NodeClock]) -> bool:
        """Past the deadline: on the node's ``NodeClock`` (see ``due_in``), or a bare wall time."""
        if isinstance(now, NodeClock):
            return self.due_in(now) <= 0
        return now >= self.deadline_epoch()

    def matches(self, wanted: str) -> bool:
        """``wanted`` names the armed component: its name, file, file stem or catalogue alias."""
        return wanted in (self.component, self.file, manifests.file_stem(self.file)) or \
            catalogue.canonical(wanted) == self.component

    def pending_text(self, now: Union[float, "NodeClock"], command: Callable[..., str] = command_hint_here,
                     dead: str = "") -> str:
        """What awaits this arm, for ``status``, ``check`` and refusals: "unconfirmed, reverts at T
        unless: cpctl confirm C", or once past the deadline "overdue since T": a read-only command only
        says so - the node's revert timer reverts it (``revert-unconfirmed`` does it now). ``dead``:
        why its timer no longer runs (``timer_problem``): then nothing reverts it by itself, and the
        text says so and names the one command that reverts it. ``command``: ``Node.command``, the
        hint's cpctl command line with the ``-H``/``-i`` that reach the node."""
        failing = "; %s, the node retries" % self.failing_text() if self.failing else ""
        if dead:
            when = "overdue since %s" % self.deadline if self.overdue(now) else "reverts at %s" % self.deadline
            return ("unconfirmed, %s, but its revert timer is NOT running (%s): nothing reverts it by itself; %s "
                    "reverts it now (the next cpctl change on this node restarts the timer)%s"
                    % (when, dead, command("revert-unconfirmed", self.component), failing))
        if self.overdue(now):
            return ("unconfirmed, overdue since %s: reverts now by the node's timer (not confirmed in time; %s "
                    "reverts it at once)%s" % (self.deadline, command("revert-unconfirmed", self.component), failing))
        return "unconfirmed, reverts at %s unless: %s%s" % (self.deadline, command("confirm", self.component),
                                                            failing)

    def failing_text(self) -> str:
        """"revert failing: WHY (attempt N, next try T)" while the node retries a revert, else ""."""
        if not self.failing:
            return ""
        return "revert failing: %s (attempt %d%s)" % (self.failing, self.attempts,
                                                       ", next try %s" % self.next_try if self.next_try else "")

    def refusal(self, action: str, command: Callable[..., str] = command_hint_here,
                now: Optional[Union[float, "NodeClock"]] = None) -> CpctlError:
        """Why ``action`` of the armed component is refused (exit 4, nothing changed): another
        change under an arm would make the revert undo the wrong one; a stop would leave it nothing
        to revert (the revert puts the old bytes back in the manifests dir, so a parked manifest
        means the arm is dropped and the change stays unconfirmed). An overdue arm refuses the same
        way: a change never builds on a version whose revert is owed, and never reverts it by the way.
        ``now``: the node's clock (``node_clock``), which decides whether it is overdue."""
        import time
        if self.overdue(time.time() if now is None else now):
            return CpctlError("%s refused: %s has an unconfirmed change (%s by %s) overdue since %s: the node's timer "
                              "reverts it; revert it now (%s), then retry; nothing changed"
                              % (action, self.component, self.action, self.by, self.deadline,
                                 command("revert-unconfirmed", self.component)), ExitCode.REFUSED)
        return CpctlError("%s refused: %s has an unconfirmed change (%s by %s, reverts at %s); confirm it first "
                          "(%s) or revert it now (%s); nothing changed"
                          % (action, self.component, self.action, self.by, self.deadline,
                             command("confirm", self.component), command("revert-unconfirmed", self.component)),
                          ExitCode.REFUSED)


# Whether an arm's node-side timer can still revert it (issue 49): the one rule every reader of an
# arm (status, check, the metrics) and the next change on the node (which restarts a dead one) use.
ALIVE_STATES = ("active", "activating", "reloading")     # systemctl is-active: a timer waiting/elapsed, a run


def timer_problem(host: Host, arm: Arm) -> Optional[str]:
    """Why the node-side timer of ``arm`` can no longer revert it ("" when it runs; None when that
    cannot be told: no ``systemctl`` answer). A systemd arm: its timer or service unit active (a
    timer waits, or has fired and its run retries). A process arm: its recorded pid - or one a
    boot entry started again after a reboot - runs the revert of this very arm
    (``/proc/PID/cmdline`` names its op). Read-only: nothing is started or reverted here."""
    if arm.timer == "systemd" and arm.unit:
        try:
            found = host.run(["systemctl", "is-active", arm.unit + ".timer", arm.unit + ".service"], timeout=10.0)
        except (OSError, CpctlError):
            return None
        states = found.stdout.decode("ascii", "replace").split()
        if found.rc == 127 or len(states) != 2:
            return None
        if any(s in ALIVE_STATES for s in states):
            return ""
        return "its systemd timer %s.timer is %s" % (arm.unit, states[0][:40])
    if arm.timer != "process":
        return None            # a record that names no timer (``none``): nothing to look at
    if arm.pid > 1 and process_reverts(host, arm.pid, arm.op):
        return ""
    if any(process_reverts(host, pid, arm.op) for pid in _pids_naming(host, arm.op)):
        return ""          # a boot entry started it again after a reboot (its pid is not recorded)
    return "its revert process (pid %d) is gone" % arm.pid


def process_reverts(host: Host, pid: int, op: str) -> bool:
    """Process ``pid`` on the node runs the revert of the arm ``op``: ``cpctl revert-unconfirmed ...
    --op OP``, or the agent's ``revert-plan .../<file>.OP.plan`` (a pid reused by anything else is not)."""
    try:
        parts = host.read_file("/proc/%d/cmdline" % pid, 1 << 16).split(b"\0")
    except OSError:
        return False
    word = op.encode("ascii")
    if any(a == b"--op" and b == word for a, b in zip(parts, parts[1:])):
        return b"revert-unconfirmed" in parts
    return b"revert-plan" in parts and any(p.endswith(b"." + word + b".plan") for p in parts)


def _pids_naming(host: Host, op: str) -> List[int]:
    """Pids whose command line contains ``op`` (``pgrep -f``; none when the node has no pgrep)."""
    if not re.match(r"^[0-9a-f]{8,64}$", op):
        return []
    try:
        found = host.run(["pgrep", "-f", "--", op], timeout=10.0, limit=4096)
    except (OSError, CpctlError):
        return []
    text = found.stdout.decode("ascii", "replace").split() if found.rc == 0 else []
    return [int(p) for p in text[:50] if p.isdigit()]


def node_clock(host: Host) -> NodeClock:
    """The node's clocks now (one agent call; CLOCK_BOOTTIME and the boot id read on the node)."""
    found = host.clock()
    return NodeClock(float(found["time"]), float(found["boottime"]), str(found["boot_id"]))


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
    fields = {k: value[k] for k in Arm.__dataclass_fields__ if k in value}
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
    for key in _OPTIONAL_TEXT:
        if not isinstance(value.get(key, ""), str) or len(value.get(key, "")) > 2000:
            return "%s is not text" % key
    attempts, due = value.get("attempts", 0), value.get("due_boottime", 0.0)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0:
        return "attempts is not a number"
    if not isinstance(due, (int, float)) or isinstance(due, bool) or not 0 <= due < 1e12:
        return "due_boottime is not a number"
    if not _BOOT_ID.match(value.get("boot_id", "")):
        return "boot_id is not a boot id"
    if value.get("next_try"):
        try:
            parse_iso(value["next_try"])
        except ValueError:
            return "next_try is not a time"
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


def refuse_armed(host: Host, state: StateDir, filename: str, action: str,
                 command: Callable[..., str] = command_hint_here) -> None:
    """Refuse ``action`` of manifest ``filename`` while its last change awaits confirmation
    (``Arm.refusal``; ``command``: ``Node.command``)."""
    arm = read(host, state, filename) if state.ensure(create=False) else None
    if arm is not None:
        raise arm.refusal(action, command, node_clock(host))      # the node's clock says if it is overdue


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


def rearm_change(state: StateDir, arm: Arm, why: str, before: str) -> journal.Change:
    """The journaled change that records ``arm`` with its restarted timer (its unit or new pid;
    history action ``rearmed``, ``why`` its old timer had died) over the record of sha256 ``before``."""
    from cpctl.core import journal
    data = (json.dumps(arm.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    step = journal.write(path_of(state, arm.file), manifests.checksum(data), before=before)
    record = {"reason": "revert timer restarted: %s" % why, "armed_op": arm.op, "deadline": arm.deadline,
              "revision": arm.revision, "timer": arm.timer, "unit": arm.unit or None, "pid": arm.pid or None}
    return journal.Change("rearmed", arm.component, arm.file, arm.checksum, [step], commit=0, record=record,
                          data={0: data})


def disarm_change(state: StateDir, arm: Arm, action: str, why: str, **record: object) -> journal.Change:
    """The journaled change that removes ``arm``: ``action`` is ``confirmed``, ``reverted`` or
    ``dropped`` (the revert could not run), ``why`` the history's reason."""
    from cpctl.core import journal
    step = journal.remove(path_of(state, arm.file))
    fields: Dict[str, object] = {"reason": why, "armed_op": arm.op, "deadline": arm.deadline, "revision": arm.revision}
    fields.update(record)
    return journal.Change(action, arm.component, arm.file, arm.checksum, [step], commit=0, record=fields)

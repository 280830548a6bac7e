"""The node-side revert of an unconfirmed change (``python3 AGENT revert-plan PLAN``): apply the plan's
journaled change, put back its keep-in parts, verify, record (``revert_plan_main``).

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import errno
import os
import sys
import time
from typing import Dict, List, Mapping, Optional, Tuple

from cpctl.agent.crictlread import _plan_verify
from cpctl.agent.fileops import _unlink_quiet, lock, lstat, read_file, unlink, unlock, write_atomic
from cpctl.agent.journalseal import JournalKeyError, journal_key, seal_problem
from cpctl.agent.putback import _plan_keepin, kept_patch_said, patch_undo
from cpctl.agent.revertplan import RETRY_FIRST, RETRY_MAX, journal_entry_of, plan_of
from cpctl.agent.rpc import agent_main, boottime, clock
from cpctl.agent.shapes import ClockReading, JournalEntry, JournalStep, RevertPlan, TransactionOutcome
from cpctl.agent.txn import (
    StepRunner,
    _append_record,
    _node_runner,
    _plan_log,
    _plan_transaction,
    _read_json,
    _sha_of,
    _utc_now,
)

# --- the node-side revert of an unconfirmed change (cpctl confirm, remote mode) -----------------
# ``python3 <this file> revert-plan PLAN [--within SECONDS]``: nothing of cpctl is installed on a
# master, so ``--confirm-within`` over SSH writes this file and a plan into the master's state dir, and
# a persistent systemd timer (or a detached process) runs it when the arm is due by the master's own
# clock (CLOCK_BOOTTIME within the boot it was armed in, the UTC deadline after a reboot). The plan holds the
# journaled change cpctl itself built (the rollback to the revision before the armed change,
# manifest and companion files, and the removal of the arm record); this applies it the way
# cpctl.core.journal does - journal first, each step idempotent, dot-temp files renamed into place -
# so a kill at any instant is finished or rolled back by the next cpctl run. Exit codes as cpctl's:
# 0 reverted and verified (or nothing armed), 12 reverted but not verified, 10 another writer
# replaced the armed version (nothing changed), 7 a refused agent or plan. An environment error (the
# lock held, EROFS, EIO, a pending journal) keeps the arm and is retried with back-off.


def _not_done(result: TransactionOutcome) -> str:
    """Why a transaction of the plan did not happen, as one line (exit 7); a journal key that is not
    cpctl's, or none that can be made, as the exception ``_plan_attempt`` words."""
    state = result["state"]
    if state == "bad_key":
        raise JournalKeyError(result["why"])
    if state == "no_key":
        raise OSError(result.get("errno") or errno.EIO, result["why"])
    if state == "conflict":
        return "%s changed since the plan was made (nothing changed)" % result["path"]
    if state == "unstaged":
        return "cannot keep its files: %s (nothing changed)" % result["why"]
    if state == "unrecordable":
        why = "cannot write the history record (%s)" % result["why"]
    else:
        why = (result.get("failed") or ["its file is in neither form"])[0]
    if result.get("not_undone"):             # the journal stays: the next try (or cpctl) finishes it
        return "%s, and undoing it failed: %s" % (why, "; ".join(result["not_undone"]))
    return "%s (nothing changed)" % why


def _run_entry(plan: RevertPlan, entry: JournalEntry, record: Mapping[str, object],
               runner: StepRunner) -> Tuple[int, str]:
    """Run one of the plan's journaled changes (the revert, or a patch file's undo) as cpctl's journal
    runs it (``Transaction``): (0, "done") or (7, why). A step that fails before the change has happened
    leaves everything as it was; the plan's staged bytes stay for the next try."""
    import json  # a copy: the transaction names its files in the steps it is given
    result = _plan_transaction(plan, runner).apply(json.loads(json.dumps(entry)), [], record)
    return (0, "done") if result["state"] == "completed" else (7, _not_done(result))


def _plan_apply(plan: RevertPlan) -> Tuple[int, str]:
    """Apply the plan's journaled change under the node lock (``_run_entry``): (exit code, message).
    A step that fails before the change has happened leaves everything as it was (exit 7: the arm
    stays, the revert is tried again)."""
    runner = _node_runner()
    entry = plan["entry"]
    steps = entry["steps"]
    if lstat(plan["journal"]) is not None:
        pending, message = _pending_journal(plan, runner)
        if pending is not None:
            return pending, message
    arm = _arm_record(plan["arm"])
    if arm is None or arm.get("op") != plan["op"]:
        return 0, "nothing armed for %s any more (confirmed or reverted already)" % entry["component"]
    commit = steps[entry["commit"]]
    if _sha_of(commit["path"]) != plan["armed"]:
        return 10, ("unconfirmed change of %s NOT reverted: %s no longer holds the armed version (another writer "
                    "replaced it); it stays as it is" % (entry["component"], commit["path"]))
    for step in steps:                       # the bytes each write replaces are still the expected ones
        if step["kind"] == "write" and step.get("before") and _sha_of(step["path"]) != step["before"]:
            return 10, "unconfirmed change of %s NOT reverted: %s changed since the arm" % (
                entry["component"], step["path"])
    code, message = _run_entry(plan, entry, plan["record"], runner)
    return (0, "reverted") if code == 0 else (code, message)


def _own_entries(plan: RevertPlan) -> List[Tuple[JournalEntry, Dict[str, object], str]]:
    """[(journal entry, history record, keep-in record path or "")] of the changes the plan runs."""
    return [(plan["entry"], plan["record"], "")] + [(item["entry"], item["history"], item["record"])
                                                    for item in plan["patches"]]


def _plan_patches(plan: RevertPlan, runner: StepRunner) -> List[str]:
    """After the revert, under the node lock: put back the kubeadm patch file the reverted change wrote
    (``--keep-in patches``) with cpctl's rule (``patch_undo``: only over cpctl's own bytes) and the
    journaled change cpctl built for it at arm time (``core.keptin.patch_undo_change``), its record
    dropped - what ``core.keptin.settle`` does at the next cpctl command. One line per record."""
    lines: List[str] = []
    for item in plan["patches"]:
        if lstat(item["record"]) is None:    # settled already
            continue
        path = item["entry"]["steps"][0]["path"]
        decision = patch_undo(_sha_of(path), item["was"], item["after"])
        if decision == "write":
            code, why = _run_entry(plan, item["entry"], item["history"], runner)
            if code:
                lines.append("%s NOT put back yet (%s): the next cpctl command tries again" % (path, why))
                continue
            lines.append(kept_patch_said("put-back", path, item["entry"]["component"], removed=not item["was"]))
        elif decision == "theirs":
            lines.append(kept_patch_said("theirs", path, item["entry"]["component"]))
        unlink(item["record"])
    return lines


def _pending_journal(plan: RevertPlan, runner: StepRunner) -> Tuple[Optional[int], str]:
    """A journal is pending. When it is this plan's own - its revert, interrupted; or the arm that
    started it (cpctl killed right after writing the arm, before its history record) - the journal's
    recovery (``Transaction.recover``) finishes or rolls it back and records it as cpctl's would:
    (None, "") to go on, or (0, "reverted") when it finished the revert itself. Anything else is
    cpctl's to recover (exit 7 and why)."""
    import pwd
    entry = _read_json(plan["journal"], 1 << 20)
    own = plan["entry"]
    state_dir = os.path.dirname(plan["journal"]) + "/"
    try:
        problem = seal_problem(entry, journal_key(state_dir))
    except JournalKeyError as exc:
        problem = str(exc)
    if problem:                              # never acted on: the operator's to inspect
        return 7, ("%s is not a journal cpctl wrote on this node (%s): nothing of it runs and the unconfirmed "
                   "change of %s is NOT reverted; inspect it, then remove it by hand" % (plan["journal"], problem,
                                                                                         own["component"]))
    transaction = _plan_transaction(plan, runner)
    for mine, record, kept in _own_entries(plan):
        if not isinstance(entry, dict) or entry.get("op") != mine["op"] or entry.get("steps") != mine["steps"] \
                or entry.get("commit") != mine["commit"]:
            continue
        result = transaction.recover(mine, record)
        if result["state"] == "completed":
            if kept:
                unlink(kept)
            return (0, "reverted") if mine is own else (None, "")
        if result["state"] == "rolled_back" and not result["not_undone"]:
            return None, ""
        return 7, ("the interrupted %s of %s (%s) can be neither completed nor rolled back: %s" % (
            mine["action"], mine["component"], plan["journal"], _not_done(result)))
    pending = journal_entry_of(entry)
    steps = pending["steps"] if pending is not None else []
    arm_step: JournalStep = steps[0] if len(steps) == 1 else {}
    if pending is None or pending["action"] != "armed" or pending["op"] != plan["op"] + "-arm" \
            or pending["commit"] != 0 or arm_step.get("kind") != "write" or arm_step.get("path") != plan["arm"] \
            or not all(not p or p.startswith(state_dir) for p in (arm_step.get("staged"), arm_step.get("kept"))):
        return 7, ("an interrupted cpctl change is pending (%s): the unconfirmed change of %s is NOT reverted; run any "
                   "cpctl command on this node (it finishes that change, then reverts)" % (plan["journal"],
                                                                                          own["component"]))
    record = dict(pending["record"] or {}, user=pwd.getpwuid(os.geteuid()).pw_name, host=os.uname().nodename,
                  node=plan["verdict"]["node"], action="armed", component=pending["component"],
                  file=pending["file"], checksum=pending["checksum"], op=pending["op"],
                  origin="the node-side revert")
    if transaction.recover(pending, record)["state"] == "nowhere":
        transaction.forget(steps, done=True)
    return None, ""


def _arm_record(path: str) -> Optional[Dict[str, object]]:
    """The arm record at ``path`` as a dict (None: none, or not readable as one)."""
    return _read_json(path, 1 << 16)


def arm_due_in(arm: Mapping[str, object], now: Optional[ClockReading] = None) -> float:
    """Seconds until ``arm`` is due by this node's clocks (``cpctl.core.confirmations.Arm.due_in``):
    CLOCK_BOOTTIME within the boot it was armed in, the wall-clock deadline after a reboot."""
    import calendar
    now = now or clock()
    due = arm.get("due_boottime")
    if arm.get("boot_id") and isinstance(due, (int, float)) and due > 0 and arm.get("boot_id") == now["boot_id"]:
        return float(due) - now["boottime"]
    try:
        deadline = calendar.timegm(time.strptime(str(arm.get("deadline")), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return 0.0
    return deadline - now["time"]


def _plan_wait(plan: RevertPlan, within: Optional[float]) -> bool:
    """Wait until the plan's arm is due (``arm_due_in``); False when it went away meanwhile (an arm
    never seen ends the wait after ``within`` seconds, or at once without it: the timer fired)."""
    started = boottime()
    seen = False
    while True:
        arm = _arm_record(plan["arm"])
        if arm is not None and arm.get("op") == plan["op"]:
            seen = True
            left = arm_due_in(arm)
        elif seen:
            return False
        else:
            left = started + within - boottime() if within is not None else 0.0
        if left <= 0:
            return True
        time.sleep(min(1.0, left))


def _plan_failed(plan: RevertPlan, why: str, pause: float) -> None:
    """Note in the arm record why the revert failed, the attempt count and the next try (one atomic
    rewrite, only while the record holds the bytes just read: a confirm in between wins)."""
    import hashlib
    import json
    try:
        data = read_file(plan["arm"], 1 << 16)
        arm = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(arm, dict) or arm.get("op") != plan["op"]:
        return
    attempts = arm.get("attempts")
    arm["attempts"] = (attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0) + 1
    arm["failing"] = " ".join(why.split())[:500]
    arm["next_try"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + pause))
    try:
        write_atomic(plan["arm"], (json.dumps(arm, indent=2, sort_keys=True) + "\n").encode("utf-8"), 0o600,
                     expect=hashlib.sha256(data).hexdigest())
    except OSError:
        pass


def _plan_cleanup(plan_path: str) -> None:
    """Remove the plan's files (``<file>.<op>.agent.py``, ``.plan``, staged copies): the revert is
    over, they must not pile up in the state dir."""
    base = plan_path[:-len(".plan")] if plan_path.endswith(".plan") else plan_path
    folder, prefix = os.path.dirname(base), os.path.basename(base) + "."
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            _unlink_quiet(os.path.join(folder, name))


def _plan_kept_parts(plan: RevertPlan) -> None:
    """The revert is done: put its ``--keep-in`` parts back and log each line. Whatever goes wrong
    here never stops the revert's verification: the records stay for the next cpctl command."""
    try:
        lines = _plan_keepin(plan) + _plan_patches(plan, _node_runner())
    except Exception as exc:  # noqa: BLE001 - the revert itself is done and recorded
        lines = ["the --keep-in part of the reverted change is NOT put back yet (%s: %s): the next cpctl command "
                 "tries again" % (type(exc).__name__, getattr(exc, "strerror", None) or exc)]
    for line in lines:
        _plan_log(line, "NOT" in line or "someone else" in line)


def _plan_attempt(plan: RevertPlan) -> Tuple[int, str]:
    """One try under the node lock: (exit code, message); 5 and 7 are retried."""
    component = plan["entry"]["component"]
    try:
        lock(plan["lock"], 120, "pid %d (cpctl revert-plan %s)" % (os.getpid(), component))
    except Exception as exc:  # noqa: BLE001 - LockBusy, or an I/O error
        return 5, "the node lock: %s" % exc
    try:
        code, message = _plan_apply(plan)
        if code == 0 and message == "reverted":
            _plan_kept_parts(plan)
        return code, message
    except OSError as exc:
        return 7, ("%s; the journal (if written) is finished or rolled back by the next cpctl run"
                   % (exc.strerror or exc))
    except JournalKeyError as exc:           # nothing written: the journal is sealed before it is written
        return 7, "%s: inspect it (cpctl creates it when it is absent)" % exc
    finally:
        unlock(plan["lock"])


def revert_plan_main(argv: List[str]) -> int:
    """``revert-plan PLAN --plan-sha256 SHA256 [--within SECONDS]``: wait until the arm is due by
    this node's clock, then revert (see above) - only a plan whose bytes are the ones recorded at
    arm time, naming only paths it may touch. An environment error (the lock held, EROFS, EIO, a
    pending journal) keeps the arm: it is noted in the arm record and tried again with back-off."""
    import hashlib
    import json
    options = dict(zip(argv[1::2], argv[2::2]))
    with open(argv[0], "rb") as handle:
        data = handle.read(64 << 20)
    if hashlib.sha256(data).hexdigest() != options.get("--plan-sha256"):
        _plan_log("the revert plan %s is not the one cpctl armed (sha256 differs): not applied (exit 7)" % argv[0],
                  True)
        return 7
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        plan, problem = None, "it is not JSON (%s)" % exc
    else:
        plan, problem = plan_of(value)        # every field checked before any of it is used
    if plan is None:
        _plan_log("revert plan %s refused: %s; nothing done, the arm stays for the operator (exit 7)"
                  % (argv[0], " ".join(problem.split())), True)
        return 7
    within = float(options["--within"]) if "--within" in options else None
    if within is None and "--at" in options:       # a timer armed by an older cpctl
        within = max(0.0, float(options["--at"]) - time.time())
    component = plan["entry"]["component"]
    if not _plan_wait(plan, within):
        _plan_log("nothing armed for %s any more (confirmed)" % component)
        _plan_cleanup(argv[0])
        return 0
    while True:
        code, message = _plan_attempt(plan)
        if code not in (5, 7):
            break
        arm = _arm_record(plan["arm"])
        if arm is None or arm.get("op") != plan["op"]:
            code, message = 0, "nothing armed for %s any more (confirmed)" % component
            break
        counted = arm.get("attempts")
        attempts = counted if isinstance(counted, int) else 0
        pause = min(RETRY_MAX, RETRY_FIRST * 2 ** min(attempts, 10))
        _plan_failed(plan, message, pause)
        _plan_log("revert of the unconfirmed change of %s failed (attempt %d): %s; the arm stays, next try in %ds"
                  % (component, attempts + 1, message, pause), True)
        end = boottime() + pause
        while boottime() < end and (_arm_record(plan["arm"]) or {}).get("op") == plan["op"]:
            time.sleep(min(1.0, max(0.0, end - boottime())))
    if message != "reverted":
        _plan_log("%s (exit %d)" % (message, code), code != 0)
        _plan_cleanup(argv[0])
        return code
    ok, why = _plan_verify(plan["verify"])
    verdict = dict(plan["verdict"], time=_utc_now(), action="reverted", op=plan["entry"]["op"],
                   outcome="verified" if ok else "NOT healthy: " + why)   # op: the revert's, as its record
    if ok:
        _plan_log("unconfirmed change of %s reverted to revision %s: %s" % (component, plan["verdict"]["revision"],
                                                                           why))
    else:
        _plan_log("unconfirmed change of %s reverted to revision %s, but the reverted version is NOT verified "
                  "healthy: %s; act now (exit 12)" % (component, plan["verdict"]["revision"], why), True)
    _append_record(plan, verdict)
    _plan_cleanup(argv[0])
    return 0 if ok else 12


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "revert-plan":
        sys.exit(revert_plan_main(sys.argv[2:]))
    agent_main()

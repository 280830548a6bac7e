"""The ONE executor of a journaled change's steps (``StepRunner``) and the ``Transaction`` around it
(staging, journal entry, commit, history record, recovery), run in-process or as the ``transaction`` op.

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import os
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Type

from cpctl.agent.fileops import lstat, read_file
from cpctl.agent.journalseal import (
    HISTORY,
    HISTORY_ROTATE_BYTES,
    HISTORY_SEGMENTS,
    HISTORY_TAIL_BYTES,
    JournalKeyError,
    NodeFiles,
    append_history,
    history_line,
    journal_bytes,
    journal_key,
    sealed,
    step_words,
    tail_records,
)
from cpctl.agent.rpc import OPS
from cpctl.agent.shapes import (
    JournalEntry,
    JournalStep,
    NodeFs,
    RevertPlan,
    TransactionOutcome,
    TransactionRequest,
)

#: [(step index, the error)] of the steps a run could not do or undo
Failures = List[Tuple[int, BaseException]]
#: The errors an undo or a roll-forward notes and goes on after
Tolerated = Tuple[Type[BaseException], ...]


def _utc_now() -> str:
    """Now as the records cpctl writes give it (``cpctl.timeutil.iso``; the agent imports no cpctl)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _plan_log(message: str, loud: bool = False) -> None:
    """One line to syslog (journald) and stderr: no terminal is left to tell."""
    try:
        import syslog
        syslog.openlog("cpctl", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_ERR if loud else syslog.LOG_NOTICE, ("ERROR: " if loud else "") + message)
    except Exception:  # noqa: BLE001 - logging never stops the revert
        pass
    sys.stderr.write("cpctl: %s%s\n" % ("ERROR: " if loud else "", message))
    sys.stderr.flush()


def _sha_of(path: str) -> Optional[str]:
    import hashlib
    info = lstat(path)
    if info is None or info["kind"] != "file":
        return None
    return hashlib.sha256(read_file(path, info["size"] + 1)).hexdigest()


class StepOutcome(object):
    """What ``StepRunner.run`` or ``recover`` did: ``state`` is ``completed``, ``aborted`` (run: a step
    up to the commit failed, what was done is undone), ``rolled_back`` or ``nowhere`` (recover);
    ``failed``: [(step index, error)] of steps that could not be done; ``not_undone``: the same for
    steps an undo could not put back."""

    __slots__ = ("state", "failed", "not_undone")

    def __init__(self, state: str) -> None:
        self.state = state
        self.failed: Failures = []
        self.not_undone: Failures = []


class StepRunner(object):
    """THE executor of a journaled change's steps (wire form: dicts with ``kind``, ``path``, ``src``,
    ``checksum``, ``staged``, ``before``, ``kept``, ``mode``, ``uid``, ``gid``), standard library only:
    cpctl's journal runs it through a ``Host`` (``core.journal.ChangePath``: locally, or each call over
    SSH), and the node-side revert of a remote ``--confirm-within`` runs it on this module's own
    functions. Every step is idempotent: ``do`` a done step does nothing, ``undo`` an undone one either.

    ``fs`` offers ``lstat``, ``read_file``, ``write_atomic``, ``move``, ``unlink``, ``chmod`` with this
    module's signatures (``Host`` has the same); ``limit`` bounds what is read back; ``tolerated``:
    the errors an undo or a roll-forward notes and goes on after (OSError; through a Host also its
    own error for a lost connection).

    ``run`` and ``recover`` are THE loops over a change's steps - how a change is applied and how an
    interrupted one is finished or rolled back - for every caller: the journal (locally or over
    SSH) and the node-side revert alike. They return a ``StepOutcome``; the caller words it and
    records the history."""

    def __init__(self, fs: NodeFs, limit: int, tolerated: Tolerated = (OSError,)) -> None:
        self.fs = fs
        self.limit = limit
        self.tolerated = tuple(tolerated)

    def run(self, steps: Sequence[JournalStep], commit: int, data: Optional[Mapping[int, bytes]] = None) -> StepOutcome:
        """Do ``steps`` in order (new bytes of a write: ``data[index]``, else its staged copy). A step
        up to the commit that fails (it may be half done) is undone with all done before it, in
        reverse: ``completed`` False, nothing changed unless ``not_undone`` says otherwise. A step
        after the commit that fails is noted and the rest still done: the change has happened."""
        outcome = StepOutcome("aborted")
        done: List[int] = []
        for index, step in enumerate(steps):
            try:
                self.do(step, (data or {}).get(index))
            except OSError as exc:
                outcome.failed.append((index, exc))
                if index <= commit:
                    outcome.not_undone = self.undo_all(steps, done + [index])
                    return outcome
                continue
            done.append(index)
        outcome.state = "completed"
        return outcome

    def recover(self, steps: Sequence[JournalStep], commit: int) -> StepOutcome:
        """Finish or roll back a change interrupted at any instant, from the files alone: the commit
        step is done -> redo every step that is not (and the commit step: it finishes an interrupted
        copy across filesystems), ``completed``; its starting point is still there -> undo the steps
        before it, ``rolled_back``; neither -> ``nowhere`` (the file is in neither form: touch nothing)."""
        if self.is_done(steps[commit]):
            outcome = StepOutcome("completed")
            for index, step in enumerate(steps):
                try:
                    if index == commit or not self.is_done(step):
                        self.do(step)
                except self.tolerated as exc:
                    outcome.failed.append((index, exc))
            return outcome
        if not self.before_state(steps[commit]):
            return StepOutcome("nowhere")
        outcome = StepOutcome("rolled_back")
        outcome.not_undone = self.undo_all(steps, list(range(commit)))
        return outcome

    def undo_all(self, steps: Sequence[JournalStep], indexes: Sequence[int]) -> Failures:
        """Undo these steps in reverse order: [(index, error)] of those that could not be undone."""
        left: Failures = []
        for index in sorted(indexes, reverse=True):
            try:
                self.undo(steps[index])
            except self.tolerated as exc:
                left.append((index, exc))
        return left

    def holds(self, path: Optional[str], checksum: Optional[str]) -> bool:
        """``path`` is a regular file whose sha256 is ``checksum``."""
        import hashlib
        info = self.fs.lstat(path) if path else None
        if not path or info is None or info["kind"] != "file" or not checksum:
            return False
        return hashlib.sha256(self.fs.read_file(path, info["size"] + 1)).hexdigest() == checksum

    def do(self, step: JournalStep, data: Optional[bytes] = None) -> None:
        """Make the step's change (its new bytes: ``data``, else its staged copy)."""
        kind, path = step["kind"], step["path"]
        if kind == "move":
            if self.holds(path, step.get("checksum")) and self.holds(step["src"], step.get("checksum")):
                self.fs.unlink(step["src"])    # a copy across filesystems had finished but its unlink had not
            elif not self.holds(path, step.get("checksum")):
                self.fs.move(step["src"], path)
        elif kind == "write":
            if not self.holds(path, step.get("checksum")):
                payload = data if data is not None else self.fs.read_file(step["staged"], self.limit)
                self.fs.write_atomic(path, payload, step.get("mode", 0o600), step.get("uid"), step.get("gid"),
                                     expect=step.get("before") or "absent")
        elif kind == "remove":
            if self.fs.lstat(path) is None:
                return
            self.fs.unlink(step["kept"])
            self.fs.move(path, step["kept"])
        elif kind == "touch":
            info = self.fs.lstat(path)
            if info is not None and info["kind"] == "file":
                self.fs.chmod(path, info["mode"])

    def is_done(self, step: JournalStep) -> bool:
        if step["kind"] in ("move", "write"):
            return self.holds(step["path"], step.get("checksum"))
        if step["kind"] == "remove":
            return self.fs.lstat(step["path"]) is None
        return False

    def undo(self, step: JournalStep) -> None:
        """Put back what the step changed (a write's replaced bytes wait in ``kept``)."""
        kind, path = step["kind"], step["path"]
        if kind == "move" and self.holds(path, step.get("checksum")):
            if self.holds(step["src"], step.get("checksum")):
                self.fs.unlink(path)           # both copies exist (interrupted copy): drop the new one
            else:
                self.fs.move(path, step["src"])
        elif kind == "write" and self.holds(path, step.get("checksum")):
            if step.get("before"):
                self.fs.write_atomic(path, self.fs.read_file(step["kept"], self.limit), step.get("mode", 0o600),
                                     step.get("uid"), step.get("gid"), expect=step.get("checksum"))
            else:
                self.fs.unlink(path)
        elif kind == "remove" and self.fs.lstat(path) is None and self.fs.lstat(step["kept"]) is not None:
            self.fs.move(step["kept"], path)

    def before_state(self, step: JournalStep) -> bool:
        """The step's starting point is still there (so undoing it loses nothing)."""
        if step["kind"] == "move":
            return self.holds(step["src"], step.get("checksum"))
        if step["kind"] == "write":
            return self.holds(step["path"], step["before"]) if step.get("before") else \
                self.fs.lstat(step["path"]) is None
        return True


class Transaction(object):
    """THE transaction around a journaled change, standard library only: staging, the sealed journal
    entry, the steps (``StepRunner``), the history record, clearing the journal and the staged files,
    the undo of a change that cannot be recorded, and the recovery of an interrupted one. cpctl's
    journal (``core.journal.ChangePath``) runs it in ONE call on the node (``Host.transaction``: the
    ``transaction`` op of the agent, or in-process through a local ``Host``); the node-side revert of
    a remote ``--confirm-within`` runs it on this module's own functions.

    The caller gives the entry (``core.journal.entry_of``: version, op, action, component, file,
    checksum, commit, steps, record, companions) and the history record's fields but its time (user,
    host, node, origin, action, component, file, checksum, op, the change's own fields); this fills in
    the start, the pid and the time on the node. Each method returns an outcome dict
    (``host.base.TransactionOutcome``): ``state`` (completed, aborted, rolled_back, nowhere,
    unrecordable; before anything changed: bad_key, no_key, conflict, unstaged), ``failed`` and
    ``not_undone`` (step words), ``kept`` (the journal stays), ``why`` and ``path``. The caller words it.

    Files a change stages itself lie in STATE/staged; bytes staged elsewhere beforehand (a revert plan's)
    are dropped only once the change is done: a change that did not happen is tried again from them."""

    def __init__(self, state_dir: str, runner: StepRunner, rotate: int = HISTORY_ROTATE_BYTES,
                 keep: int = HISTORY_SEGMENTS, tail: int = HISTORY_TAIL_BYTES) -> None:
        self.state_dir = state_dir.rstrip("/") or "/"
        self.runner = runner
        self.fs = runner.fs
        self.journal = self.state_dir + "/journal.json"
        self.staged_dir = self.state_dir + "/staged/"
        self.bounds = (rotate, keep, tail)

    def handle(self, request: TransactionRequest) -> TransactionOutcome:
        """The ``transaction`` op's request: ``do`` apply (with ``data``: the new bytes of each write,
        by step index, or None) or recover."""
        if request["do"] == "apply":
            return self.apply(request["entry"], request.get("data") or [], request["record"])
        return self.recover(request["entry"], request["record"])

    def apply(self, entry: JournalEntry, data: Sequence[Optional[bytes]],
              record: Mapping[str, object]) -> TransactionOutcome:
        """Stage, write the sealed journal, run the steps, record: the change done, or undone."""
        try:
            key = journal_key(self.state_dir, self.fs, create=True)
        except JournalKeyError as exc:
            return {"state": "bad_key", "why": str(exc), "kept": False}
        except OSError as exc:
            return {"state": "no_key", "why": exc.strerror or str(exc), "errno": exc.errno, "kept": False}
        if key is None:                      # made, yet not there: as if it could not be made
            return {"state": "no_key", "why": "the journal key is gone again", "kept": False}
        steps = entry["steps"]
        new = dict((i, b) for i, b in enumerate(data) if b is not None)
        problem = self._stage(entry["op"], steps, new)
        if problem is not None:
            return problem
        entry = {**entry, "started": _utc_now(), "pid": self.fs.info()["pid"]}
        self.fs.write_atomic(self.journal, journal_bytes(sealed(entry, key)))
        outcome = self.runner.run(steps, entry["commit"], new)
        failed = step_words(steps, outcome.failed)
        if outcome.state == "aborted":       # a step up to the commit failed; the runner undid what was done
            left = step_words(steps, outcome.not_undone, " not undone")
            if not left:
                self.forget(steps, done=False)
            return {"state": "aborted", "failed": failed, "not_undone": left, "kept": bool(left)}
        return self._close(entry, record, failed, recovered=False)

    def recover(self, entry: JournalEntry, record: Mapping[str, object]) -> TransactionOutcome:
        """Finish or roll back the change a killed run left in the journal ``entry`` (checked by the
        caller: sealed here, its paths allowed), from the files alone."""
        steps = entry["steps"]
        outcome = self.runner.recover(steps, entry["commit"])
        if outcome.state == "completed":
            return self._close(entry, record, step_words(steps, outcome.failed), recovered=True)
        if outcome.state == "nowhere":
            return {"state": "nowhere", "kept": True}
        left = step_words(steps, outcome.not_undone, " not undone")
        if not left:
            self.forget(steps, done=False)
        return {"state": "rolled_back", "not_undone": left, "kept": bool(left)}

    def _stage(self, op: str, steps: Sequence[JournalStep], new: Mapping[int, bytes]) -> Optional[TransactionOutcome]:
        """Keep the new bytes of each write (and the bytes it replaces, still the ``before`` it was
        planned from) in the state dir first, and name the place a removed file waits until the
        change is over. None, or the outcome of a change that could not start (nothing changed)."""
        written: List[str] = []
        try:
            for index, step in enumerate(steps):
                if step["kind"] == "remove" and not step.get("kept"):
                    step["kept"] = "%s%s.%d.removed" % (self.staged_dir, op, index)
                if step["kind"] != "write":
                    continue
                if index in new:
                    step["staged"] = "%s%s.%d.new" % (self.staged_dir, op, index)
                    self.fs.write_atomic(step["staged"], new[index])
                    written.append(step["staged"])
                if step.get("before"):
                    step["kept"] = step.get("kept") or "%s%s.%d.old" % (self.staged_dir, op, index)
                    old = self.fs.read_file(step["path"], self.runner.limit)
                    if _sha256(old) != step["before"]:
                        self._drop(written)
                        return {"state": "conflict", "path": step["path"], "kept": False}
                    self.fs.write_atomic(step["kept"], old)
                    written.append(step["kept"])
        except OSError as exc:
            self._drop(written)
            return {"state": "unstaged", "why": exc.strerror or str(exc), "kept": False}
        return None

    def _close(self, entry: JournalEntry, record: Mapping[str, object], unfinished: List[str],
               recovered: bool) -> TransactionOutcome:
        """The history record (unless a recovered change has one already), then forget the journal.
        No history -> no change: undo it."""
        try:
            if not (recovered and any(r.get("op") == entry["op"] for r in
                                      tail_records(self.fs, self.state_dir + "/" + HISTORY, self.bounds[2]))):
                append_history(self.fs, self.state_dir, history_line(self._record(entry, record, unfinished,
                                                                                   recovered)), *self.bounds[:2])
        except OSError as exc:
            left = step_words(entry["steps"], self.runner.undo_all(entry["steps"], list(range(len(entry["steps"])))),
                              " not undone")
            if not left:
                self.forget(entry["steps"], done=False)
            return {"state": "unrecordable", "why": exc.strerror or str(exc), "not_undone": left, "kept": bool(left)}
        self.forget(entry["steps"], done=True)
        return {"state": "completed", "failed": unfinished, "kept": False}

    @staticmethod
    def _record(entry: JournalEntry, record: Mapping[str, object], unfinished: List[str],
                recovered: bool) -> Dict[str, object]:
        """The history record: the caller's fields, the op, the time on this node; a recovered change
        says so (and by whom), an unfinished one what is left."""
        record = dict(record, time=_utc_now())
        record.setdefault("op", entry["op"])
        if recovered:
            record["recovered"] = True
            if record.get("origin"):
                record["origin"] = "recovered by %s" % record["origin"]
        if unfinished:
            record["unfinished"] = unfinished
        return record

    def forget(self, steps: Sequence[JournalStep], done: bool) -> None:
        """Remove the journal, then the bytes kept for an undo and the change's own staged bytes (all
        staged bytes once it is ``done``)."""
        self.fs.unlink(self.journal)
        for step in steps:
            if step.get("staged") and (done or step["staged"].startswith(self.staged_dir)):
                self.fs.unlink(step["staged"])
            if step.get("kept"):
                self.fs.unlink(step["kept"])

    def _drop(self, paths: Sequence[str]) -> None:
        for path in paths:
            self.fs.unlink(path)


def _sha256(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()


def transaction(request: TransactionRequest, fs: Optional[NodeFs] = None,
                tolerated: Tolerated = (OSError,)) -> TransactionOutcome:
    """The ``transaction`` op: apply or recover one journaled change as a whole, on the node
    (``Transaction``; ``fs`` a local ``Host`` when run in-process, else this module's functions)."""
    bounds = request.get("history") or {}
    runner = StepRunner(fs or _node_fs(), request.get("limit") or 64 << 20, tolerated)
    return Transaction(request["state_dir"], runner, bounds.get("rotate", HISTORY_ROTATE_BYTES),
                       bounds.get("keep", HISTORY_SEGMENTS), bounds.get("tail", HISTORY_TAIL_BYTES)).handle(request)


OPS["transaction"] = transaction


def _node_fs() -> NodeFs:
    """This node's primitives as a ``Host``-like object (``journalseal.NodeFiles``)."""
    return NodeFiles()


def _node_runner() -> StepRunner:
    """The journal's own executor (``StepRunner``) on this node's primitives (also when exec'd)."""
    return StepRunner(_node_fs(), 64 << 20)


def _plan_transaction(plan: RevertPlan, runner: StepRunner) -> Transaction:
    """The journal's transaction in the plan's state dir, on ``runner``."""
    return Transaction(os.path.dirname(plan["journal"]), runner)


def _read_json(path: str, limit: int) -> Optional[Dict[str, object]]:
    """The JSON object at ``path`` (None: none, or not readable as one)."""
    import json
    try:
        with open(path, "rb") as handle:
            value = json.loads(handle.read(limit).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _append_record(plan: RevertPlan, record: Mapping[str, object]) -> None:
    """One history record in the plan's state dir, as cpctl writes it (``append_history``)."""
    append_history(_node_fs(), os.path.dirname(plan["journal"]), history_line(record))

"""The one journaled change path: every change to the manifests dir, or to a file next to it.

A ``Change`` is a short list of file ``Step``s (move, write, remove, touch). Exactly one of them
is the *commit* step: the one after which the change has happened (for a stop, the manifest moving
out of the manifests dir). ``ChangePath.apply`` runs every change the same way::

    stage new bytes in the state dir -> journal (write-ahead) -> steps -> history
    -> clear the journal and the staged bytes -> listeners

That transaction is ``agent.txn.Transaction``, run on the node in ONE call (``Host.transaction``:
in-process locally, one agent request over SSH); the node-side revert of ``--confirm-within``
runs the same class. Here: the path checks, the history record's fields, the listeners (they
run on the operator's side), and the words of each outcome.

Each step is idempotent and can tell whether it is done by looking at the files (a checksum at
its path), so after a SIGKILL at any instant ``recover`` decides from the filesystem alone: the
commit step done -> finish the later steps and record the history (roll forward); not done ->
undo the earlier steps (roll back). Nothing is ever half-written in the manifests dir: moves are
one no-replace rename (or a dot-temp copy renamed into place), writes a dot-temp file renamed
into place.

A failure while applying:

* before or at the commit step: the steps done are undone, and so is whatever the failed step did
  half way (a copy across filesystems whose source could not be removed), nothing changed
  ("rolled back");
* the history record cannot be written (disk full): the change is rolled back too - a change that
  is not on record is not allowed to stand;
* a later step fails (a metadata file that cannot be removed, a config file left behind): the
  change stands, is recorded with ``unfinished`` and the caller is told what is left.

When even the roll-back fails, the journal stays and the error says where every file is now; the
next cpctl run tries again. A journal is input like any file in the state dir: every path in it
must lie directly in the manifests dir or below the state dir, or be a *companion file* cpctl
itself records: a second scheduler's ``<name>-config.yaml`` next to the manifests dir, which only
``scheduler-add`` creates (never over an existing file) and only ``scheduler-remove`` moves away
(when a ``scheduler-add`` in the history wrote it), and the kubeadm patch file
``<component>+json.yaml`` that a ``keep-in`` change names as its ``patch``, and the ``--with-file``
files a change lists in its own ``companions`` field (written or removed by that step only, never
in the manifests dir or the state dir). Anything else -
``admin.conf``, ``pki/ca.crt`` beside the manifests dir - is refused before any step runs.

Before all of that a journal must carry this node's seal (``journalseal.seal_problem``: an HMAC of the
entry under STATE/journal.key, written by ``agent.txn.Transaction``, for cpctl and the node-side revert):
a journal cpctl did not write here - crafted to overwrite an encryption config or remove a patch file
that the companion rules would allow - is refused (exit 7) and left for the operator, never acted on.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, cast

from cpctl import catalogue
from cpctl.agent import putback, revertplan
from cpctl.core import manifests
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host, JournalEntry, JournalStep, TransactionOutcome, TransactionRequest
from cpctl.redaction import redact

MOVE, WRITE, REMOVE, TOUCH = "move", "write", "remove", "touch"
STEP_KINDS = (MOVE, WRITE, REMOVE, TOUCH)
JOURNAL_VERSION = 2


def new_op() -> str:
    """A fresh change id: 16 hex digits from the OS's random source (``secrets.token_hex(8)``,
    without importing ``secrets``, whose hmac, hashlib and random cost every ``cpctl status``)."""
    return os.urandom(8).hex()


def started_text(entry: Mapping[str, object]) -> str:
    """``started T by pid P`` for a journal entry; what it does not record (a journal written by hand
    or by an older cpctl) is said so instead of printed as None."""
    started, pid = entry.get("started"), entry.get("pid")
    has_time = isinstance(started, str) and bool(started)
    has_pid = isinstance(pid, int) and not isinstance(pid, bool)
    if has_time and has_pid:
        return "started %s by pid %s" % (started, pid)
    return "%s, %s" % ("started %s" % started if has_time else "start time not recorded",
                       "pid %s" % pid if has_pid else "pid not recorded")


@dataclass
class Step:
    """One idempotent file operation of a change.

    ``path`` is the file the step creates, replaces or removes (a move's destination). A write's
    new bytes wait in ``staged`` (state dir) so that recovery can redo it; when it replaces a
    file, ``before`` is that file's sha256 and ``kept`` a copy of it, so that it can be undone.
    """

    kind: str
    path: str
    src: str = ""
    checksum: str = ""
    staged: str = ""
    before: str = ""
    kept: str = ""
    mode: int = 0o600
    uid: Optional[int] = None
    gid: Optional[int] = None

    def to_wire(self) -> JournalStep:
        """The fields that are set (``JournalStep``; what the agent's ``StepRunner`` runs)."""
        return cast(JournalStep, {k: v for k, v in self.__dict__.items() if v not in ("", None)})

    @classmethod
    def from_wire(cls, wire: Any) -> "Step":
        """A step from a journal; ``CorruptJournal`` for anything that is not one."""
        if not isinstance(wire, dict) or wire.get("kind") not in STEP_KINDS:
            raise CorruptJournal("a step is not one of %s" % ", ".join(STEP_KINDS))
        fields: Dict[str, Any] = {}
        for name in ("kind", "path", "src", "checksum", "staged", "before", "kept"):
            value = wire.get(name, "")
            if not isinstance(value, str):
                raise CorruptJournal("step field %s is not text" % name)
            fields[name] = value
        for name in ("mode", "uid", "gid"):
            value = wire.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise CorruptJournal("step field %s is not a number" % name)
            if value is not None:
                fields[name] = value
        if not fields["path"] or (fields["kind"] == MOVE and not fields["src"]) or \
                (fields["kind"] == REMOVE and not fields["kept"]):
            raise CorruptJournal("a %s step without its paths" % fields["kind"])
        return cls(**fields)

    def paths(self) -> List[str]:
        return [p for p in (self.path, self.src, self.staged, self.kept) if p]


def move(src: str, dst: str, checksum: str) -> Step:
    """Move the file holding ``checksum`` from ``src`` to ``dst`` (never replacing ``dst``)."""
    return Step(MOVE, dst, src=src, checksum=checksum)


def write(path: str, checksum: str, mode: int = 0o600, before: str = "") -> Step:
    """Write new bytes (given to ``Change.data``) to ``path``; ``before`` is the sha256 of the file
    it replaces ("" when ``path`` does not exist yet)."""
    return Step(WRITE, path, checksum=checksum, mode=mode, before=before)


def remove(path: str) -> Step:
    """Remove a bookkeeping file: it is moved aside into the state dir until the change is over,
    so that undoing the change can put it back."""
    return Step(REMOVE, path)


def touch(path: str) -> Step:
    """chmod ``path`` to its own mode: the kubelet re-reads it at once (inotify IN_ATTRIB)."""
    return Step(TOUCH, path)


@dataclass
class Change:
    """What one cpctl action does to the files, and how it is recorded in ``history``."""

    action: str                      # history "action": stop, start, scheduler-add, move-stray, apply...
    component: str
    file: str                        # the manifest file it concerns
    checksum: Optional[str]          # sha256 of those manifest bytes
    steps: List[Step]
    commit: int                      # index of the step after which the change has happened
    record: Dict[str, Any] = field(default_factory=dict)   # extra history fields
    data: Dict[int, bytes] = field(default_factory=dict)   # new bytes of the write steps, by index
    op: str = field(default_factory=new_op)
    companions: List[str] = field(default_factory=list)      # node paths of companion files this change
    # writes (--with-file): recorded in the journal so that exactly these may lie outside the usual roots

    def __post_init__(self) -> None:
        if not 0 <= self.commit < len(self.steps):
            raise ValueError("commit step %d out of range" % self.commit)


@dataclass
class Applied:
    """What ``apply`` or ``recover`` did: ``completed`` or ``rolled_back``, plus what is left."""

    change: Change
    completed: bool
    unfinished: List[str] = field(default_factory=list)
    message: str = ""


class CorruptJournal(ValueError):
    """The journal is not something cpctl wrote (the text says why)."""


Listener = Callable[[Change, bool], None]      # (change, recovered): after its history record


class ChangePath:
    """Applies and recovers ``Change``s for one node (``state`` is its ``StateDir``): checks the paths,
    hands the change to the node's one transaction (``Host.transaction``: ``agent.txn.Transaction``,
    one call - over SSH one round trip), runs the listeners and words the outcome."""

    def __init__(self, host: Host, state: Any, manifests_dir: str, who: Callable[[], Dict[str, Any]],
                 log: Callable[[str], None]) -> None:
        self.host = host
        self.state = state
        self.manifests_dir = manifests_dir
        self.who = who
        self.log = log
        self.listeners: List[Listener] = []

    # --- apply ---------------------------------------------------------------------------------
    def apply(self, change: Change) -> Applied:
        """Run ``change`` under the write-ahead protocol (the caller holds the node lock).

        SIGINT and SIGTERM wait until it is over (applied and recorded, or rolled back), then
        take effect: a Ctrl-C never leaves a change half done for the next command to finish, and
        whoever catches it (``apply``'s put-back) starts from a settled node."""
        with signals_deferred():
            return self._apply(change)

    def _apply(self, change: Change) -> Applied:
        missing = [i for i, s in enumerate(change.steps) if s.kind == WRITE and i not in change.data]
        if missing:
            raise ValueError("write steps %s of %s have no data" % (missing, change.action))
        try:
            self._check_paths(change)
        except CorruptJournal as exc:
            raise CpctlError("%s of %s refused: %s" % (change.action, change.component, exc),
                             ExitCode.REFUSED) from None
        outcome = self.host.transaction(self._request(change, "apply"))
        state = outcome["state"]
        if state in ("bad_key", "no_key"):       # a key that is not cpctl's fails before anything is staged
            error = self.state.key_error(outcome.get("why", "") if state == "bad_key" else "", True,
                                       outcome.get("why", ""))
            raise CpctlError("%s (nothing changed)" % error.message, error.code, hint=error.hint)
        if state == "conflict":
            raise CpctlError("%s changed while cpctl was preparing to replace it: nothing changed, try again"
                             % outcome.get("path"), ExitCode.CONFLICT)
        if state == "unstaged":
            raise CpctlError("%s of %s: cannot keep its files in %s: %s (nothing changed)"
                             % (change.action, change.component, self.state.path, outcome.get("why")),
                             ExitCode.ENVIRONMENT)
        if state == "aborted":      # a step up to the commit failed; the runner undid what was done
            self._abort(change, outcome)
        return self._close(change, outcome, recovered=False)

    def _request(self, change: Change, do: str) -> TransactionRequest:
        """What the node's transaction needs: the entry, the new bytes, the history record but its time."""
        who = self.who()
        record: Dict[str, Any] = {"user": who.get("sudo_user") or who.get("user"), "host": who.get("hostname"),
                                  "node": who.get("node"), "action": change.action, "component": change.component,
                                  "file": change.file, "checksum": change.checksum, "op": change.op}
        record.update({k: v for k, v in change.record.items() if v is not None})
        if who.get("origin"):
            record["origin"] = who["origin"]
        data = [change.data.get(i) for i in range(len(change.steps))] if do == "apply" else []
        return {"do": do, "state_dir": self.state.path, "entry": entry_of(change), "data": data,
                "record": cast(Dict[str, Any], redact(record)), "limit": manifests.MAX_MANIFEST_BYTES,
                "history": self.state.history_bounds()}

    def _abort(self, change: Change, outcome: TransactionOutcome) -> None:
        """A step up to the commit failed and what was done is undone (``not_undone``: what could not
        be): fail with the reason."""
        why, left = (outcome.get("failed") or ["?"])[0], outcome.get("not_undone") or []
        if left:
            raise CpctlError("%s of %s failed (%s) and could not be rolled back: %s; journal kept at %s, the "
                             "next cpctl run tries again" % (change.action, change.component, why, "; ".join(left),
                                                             self.state.journal_path), ExitCode.ENVIRONMENT)
        raise CpctlError("%s of %s failed: %s (nothing changed)" % (change.action, change.component, why),
                         ExitCode.ENVIRONMENT)

    def _close(self, change: Change, outcome: TransactionOutcome, recovered: bool) -> Applied:
        """The change is recorded (or, when it could not be, undone): the listeners, what is left."""
        if outcome["state"] == "unrecordable":
            self._unrecordable(change, outcome)
        unfinished = list(outcome.get("failed") or [])
        for listener in self.listeners:
            try:
                listener(change, recovered)
            except Exception as exc:  # noqa: BLE001 - a listener never undoes a recorded change
                self.log("after %s of %s: %s" % (change.action, change.component, getattr(exc, "message", exc)))
        for item in unfinished:
            self.log("%s of %s done, but not all of it: %s" % (change.action, change.component, item))
        return Applied(change, True, unfinished)

    def _unrecordable(self, change: Change, outcome: TransactionOutcome) -> None:
        why = "cannot write the history record (%s)" % outcome.get("why")
        left = outcome.get("not_undone") or []
        if left:
            raise CpctlError("%s of %s is done but %s, and undoing it failed: %s; journal kept at %s"
                             % (change.action, change.component, why, "; ".join(left), self.state.journal_path),
                             ExitCode.ENVIRONMENT)
        raise CpctlError("%s of %s rolled back: %s; %s" % (change.action, change.component, why,
                                                          self._where(change)), ExitCode.ENVIRONMENT)

    def _where(self, change: Change) -> str:
        commit = change.steps[change.commit]
        if commit.kind == MOVE:
            return "the manifest is at %s" % commit.src
        return "%s holds its previous content" % commit.path

    # --- recovery ------------------------------------------------------------------------------
    def recover(self, entry: Dict[str, Any]) -> Applied:
        """Finish or roll back the change a killed cpctl left in the journal ``entry``."""
        change = self.change_from_journal(entry)
        started = started_text(entry)
        outcome = self.host.transaction(self._request(change, "recover"))
        if outcome["state"] in ("completed", "unrecordable"):
            finished = self._close(change, outcome, recovered=True)
            finished.message = "completed interrupted %s of %s (%s)" % (change.action, change.component, started)
            return finished
        if outcome["state"] == "nowhere":
            raise self._nowhere(change, started)
        left = outcome.get("not_undone") or []
        if left:
            raise CpctlError("interrupted %s of %s (%s) can be neither completed nor rolled back: %s; journal kept "
                             "at %s" % (change.action, change.component, started, "; ".join(left),
                                        self.state.journal_path), ExitCode.ENVIRONMENT)
        return Applied(change, False, message="rolled back interrupted %s of %s (%s; %s)"
                       % (change.action, change.component, started, self._where(change)))

    def _nowhere(self, change: Change, started: str) -> CpctlError:
        commit = change.steps[change.commit]
        where = "in neither %s nor %s" % (commit.src, commit.path) if commit.kind == MOVE else \
            "not at %s in either its old or its new form" % commit.path
        return CpctlError("interrupted %s of %s (%s): %s is %s; journal kept at %s: find the file, then remove "
                          "the journal by hand" % (change.action, change.component, started, change.file, where,
                                                   self.state.journal_path), ExitCode.ENVIRONMENT)

    def change_from_journal(self, entry: Dict[str, Any]) -> Change:
        """Rebuild and check a journaled change; ``CpctlError`` (exit 7) for a journal not sealed with
        this node's key (checked first: nothing of it is used) or a corrupt one."""
        problem = self.state.seal_problem(entry)
        if problem:
            raise CpctlError("%s is not a journal cpctl wrote on this node (%s): nothing of it runs; inspect it, "
                             "then remove it by hand" % (self.state.journal_path, problem), ExitCode.ENVIRONMENT)
        try:
            return self._parse(entry)
        except (CorruptJournal, ValueError, TypeError) as exc:
            raise CpctlError("%s is corrupt (%s): cpctl did not write it; inspect it and remove it by hand"
                             % (self.state.journal_path, exc), ExitCode.ENVIRONMENT) from None

    def _parse(self, entry: Dict[str, Any]) -> Change:
        if entry.get("version") != JOURNAL_VERSION:
            raise CorruptJournal("version %r is not %d" % (entry.get("version"), JOURNAL_VERSION))
        for name in ("op", "action", "component", "file"):
            if not isinstance(entry.get(name), str) or not entry[name]:
                raise CorruptJournal("%s is missing or not text" % name)
        steps = entry.get("steps")
        commit = entry.get("commit")
        if not isinstance(steps, list) or not steps or not isinstance(commit, int) or isinstance(commit, bool):
            raise CorruptJournal("no steps or no commit step")
        parsed = [Step.from_wire(s) for s in steps]
        if not 0 <= commit < len(parsed):
            raise CorruptJournal("commit step %d out of range" % commit)
        record: Dict[str, Any] = entry["record"] if isinstance(entry.get("record"), dict) else {}
        checksum = entry["checksum"] if isinstance(entry.get("checksum"), str) else None
        companions = entry.get("companions", [])
        if not isinstance(companions, list) or not all(_companion_ok(p) for p in companions):
            raise CorruptJournal("companions is not a list of absolute file paths")
        change = Change(entry["action"], entry["component"], entry["file"], checksum, parsed, commit, record,
                        {}, entry["op"], list(companions))      # write steps are redone from their staged copies
        self._check_paths(change)
        return change

    def _check_paths(self, change: Change) -> None:
        """Every path ``change`` touches lies in the manifests dir or the state dir, or is a
        companion file cpctl records (``companion_allowed``): never anywhere a crafted journal says."""
        roots = allowed_roots(self.manifests_dir, self.state.path)
        for step in change.steps:
            for path in step.paths():
                if path_allowed(path, roots):
                    continue
                if not self._companion_allowed(change, step, path, roots):
                    raise CorruptJournal("path %r is outside the manifests dir and the state dir, and no companion "
                                         "file cpctl recorded" % (path,))
                link = link_below(self.host, path, roots[2])      # on the node, now: its real directories
                if link is not None:
                    raise CorruptJournal("path %r lies below %s, a symlink" % (path, link))

    def _companion_allowed(self, change: Change, step: Step, path: str, roots: Tuple[str, str, str]) -> bool:
        """``path`` is a companion file this change may touch: one its ``companions`` field records
        (``--with-file``: written or removed by the step itself, never in the manifests or state dir),
        a second scheduler's config created new by a ``scheduler-add`` that names it, or moved into
        the state dir by a ``scheduler-remove`` that names it, after a ``scheduler-add`` in the
        history wrote it."""
        if path in change.companions:          # --with-file: only inside the allowance (issue 33 item 4)
            return step.path == path and step.kind in (WRITE, REMOVE) and _companion_ok(path) and \
                companion_place(path, roots) is None and \
                (step.kind != WRITE or (step.mode == COMPANION_MODE and step.uid is None and step.gid is None))
        if not companion_path(path, roots):
            return False
        if change.action == "keep-in":          # a kubeadm patch file (--keep-in patches), or its undo
            return PATCH_NAME.match(os.path.basename(path)) is not None and step.path == path and \
                change.record.get("patch") == path and \
                (step.kind == WRITE or (step.kind == REMOVE and change.record.get("undo") is True))
        if change.record.get("config") != path or COMPANION_NAME.match(os.path.basename(path)) is None:
            return False
        if change.action == "scheduler-add":
            return step.kind == WRITE and step.path == path and not step.before
        if change.action == "scheduler-remove":
            return step.kind == MOVE and step.src == path and _below(step.path, roots[1]) and \
                self.companion_recorded(path)
        return False

    def companion_recorded(self, path: str) -> bool:
        """A ``scheduler-add`` in the history wrote the config ``path``."""
        try:
            records = self.state.read_history(keep=lambda r: r.get("action") == "scheduler-add")
        except CpctlError:
            return False
        return any(r.get("config") == path for r in records)


COMPANION_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?-config\.yaml$")      # a second scheduler's config
PATCH_NAME = re.compile(putback.PATCH_FILE_NAME)                                          # kubeadm's patch file


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for the duration, then deliver the first one that came (in the main
    thread only: Python runs signal handlers there; elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: List[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is None:                  # installed outside Python: leave it alone
            continue
        previous[signum] = handler
        signal.signal(signum, lambda number, _frame: caught.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signal.raise_signal(caught[0])


def allowed_roots(manifests_dir: str, state_dir: str) -> Tuple[str, str, str]:
    """(manifests dir, state dir, the directory holding the manifests dir - kubeadm's /etc/kubernetes)."""
    return (os.path.normpath(manifests_dir), os.path.normpath(state_dir),
            os.path.dirname(os.path.normpath(manifests_dir)) or "/")


def path_allowed(path: str, roots: Tuple[str, str, str]) -> bool:
    """``path`` is absolute, has no ``.``/``..`` parts, and lies directly in the manifests dir or
    below the state dir."""
    if not _clean(path):
        return False
    norm = os.path.normpath(path)
    manifests_dir, state_dir, _parent = roots
    return os.path.dirname(norm) == manifests_dir or _below(norm, state_dir)


def companion_path(path: str, roots: Tuple[str, str, str]) -> bool:
    """``path`` can be a companion file: below the manifests dir's parent (not ``/``), outside the
    manifests dir and the state dir, named like the files cpctl writes there: ``<name>-config.yaml``
    (a second scheduler's config) or ``<component>+json.yaml`` (a kubeadm patch, ``--keep-in``)."""
    if not _clean(path):
        return False
    norm = os.path.normpath(path)
    manifests_dir, state_dir, parent = roots
    return (parent != "/" and _below(norm, parent) and not _below(norm, manifests_dir)
            and not _below(norm, state_dir)
            and any(p.match(os.path.basename(norm)) is not None for p in (COMPANION_NAME, PATCH_NAME)))


def entry_of(change: Change, started: str = "", pid: int = 0) -> JournalEntry:
    """The journal entry of ``change``: the one format, written here and by the node-side revert plan
    (``ops.confirm._plan``, which the agent stamps with its own start and pid)."""
    return {"version": JOURNAL_VERSION, "op": change.op, "action": change.action,
            "component": change.component, "file": change.file, "checksum": change.checksum,
            "commit": change.commit, "steps": [s.to_wire() for s in change.steps], "record": change.record,
            "started": started, "pid": pid, "companions": list(change.companions)}


COMPANION_MODE = 0o600         # what a companion file is written with (``core.replace``)


def companion_place(path: str, roots: Tuple[str, str, str]) -> Optional[str]:
    """Why ``path`` cannot be a ``--with-file`` companion file (None: it can): it must lie below the
    directory holding the manifests dir (kubeadm's /etc/kubernetes, never ``/``), outside the
    manifests dir and the state dir, and not be one of kubeadm's credentials (``pki/``, its
    kubeconfigs), which a change of a manifest never rewrites or removes."""
    manifests_dir, state_dir, kube_dir = roots
    if kube_dir == "/" or not _below(path, kube_dir):
        return "outside %s" % kube_dir
    if path == manifests_dir or _below(path, manifests_dir):
        return "in the manifests dir %s (the kubelet would try to run it)" % manifests_dir
    if path == state_dir or _below(path, state_dir):
        return "in cpctl's state dir %s" % state_dir
    if _below(path, kube_dir.rstrip("/") + "/pki") or os.path.dirname(path) == kube_dir.rstrip("/") and \
            os.path.basename(path) in catalogue.KUBECONFIGS:
        return "one of kubeadm's credentials (pki/, its kubeconfigs)"
    return None


def link_below(host: Host, path: str, top: str) -> Optional[str]:
    """The first directory between ``top`` (excluded) and ``path`` (excluded) that is a symlink on the
    node (a write or removal there would land elsewhere); None when there is none - checked on the
    node when it is used, never on the path's text alone (the agent's own rule, ``revertplan.link_below``)."""
    return revertplan.link_below(path, top, host.lstat)


def _clean(path: object) -> bool:
    return isinstance(path, str) and path.startswith("/") and "\0" not in path and \
        not any(part in (".", "..") for part in path.split("/"))


def _companion_ok(path: object) -> bool:
    """A companion path as cpctl records it: absolute, normalized, no ``.``/``..`` parts, not ``/``."""
    return isinstance(path, str) and path.startswith("/") and "\0" not in path and path != "/" and \
        os.path.normpath(path) == path and not any(part in (".", "..") for part in path.split("/"))


def _below(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")

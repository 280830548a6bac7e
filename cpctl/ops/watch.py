"""Watch the manifests dir and say, for every change, what the kubelet will do about it.

Runs ON the node: inotify (through watchdog) only sees the local filesystem, so ``cpctl watch``
is the one command that cannot act over SSH (remote runs are limited to the read-only checks
of ``cpctl check``). File contents are still read through a ``Host`` (a ``LocalHost``), so the
verdict logic is the same code the other commands use to see the dir "the kubelet's way".

Threads: watchdog's emitter and dispatcher threads, one short-lived thread per mirror pod
follow-up, and the main thread, which owns all state and all output. Everything reaches the
main thread through one ``queue.SimpleQueue`` - also from the signal handlers, which is why
it is a SimpleQueue (its ``put`` is reentrant). The main thread blocks on that queue with no
timeout unless a debounce deadline is pending, so an idle watch uses no CPU.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple, Union

from cpctl.core import manifests, podfields
from cpctl.errors import CpctlError
from cpctl.host.base import Host
from cpctl.host.local import LocalHost
from cpctl.ops.watchfollow import (
    FOLLOWED,
    LOAD,
    NOT_FOLLOWED,
    RELOAD,
    STOP,
    UNVERIFIED,
    Look,
    MirrorTrail,
    at_deadline,
    outcome,
)
from cpctl.probes.base import PodTarget, Waiter
from cpctl.timeutil import iso_millis

if TYPE_CHECKING:                   # watchdog is imported when a watch starts
    from watchdog.events import FileSystemEvent
    from watchdog.observers.api import BaseObserver, ObservedWatch

#: One watch record (``-o json``: one line): time, event, file, verdict, pod, detail, and extras.
Record = Dict[str, object]

IGNORE, REJECT, DUPLICATE = "ignore", "reject", "duplicate"     # and LOAD, RELOAD, STOP (watchfollow's)
POLL_INTERVAL = 0.2
# Looks at each mirror pod kept (their times, too): a follow-up judges "new" against the last one taken
# before the watch learned of the change, even while another follow-up of that pod is still looking.
KEPT_LOOKS = 8
# watchdog holds an unpaired IN_MOVED_FROM for 0.5 s hoping for its IN_MOVED_TO. A rename inside
# one directory delivers both in the same read(), so 25 ms keeps pairing and makes "moved out"
# (cpctl stop parks by rename) reach the first verdict within the 100 ms target.
MOVE_PAIRING_DELAY = 0.025
# A file created or written to is judged once its writer closes it (IN_CLOSE_WRITE), never while it is
# half written (a 10 MiB file written in chunks must not be judged "empty"). A writer that keeps the file
# open without writing for this long (or a file that was hard-linked in: no close follows) is judged as
# it is then, and the verdict says no close was seen.
WRITE_SETTLE = 2.0

_EVENT_KINDS = {"created": "created", "modified": "modified", "closed": "modified", "deleted": "deleted"}
# inotify events that mean a writer has the file open (a close-after-write is still to come)
_WRITING = ("created", "modified")


def _loaded(entry: manifests.Manifest, release: podfields.Release
            ) -> Tuple[str, str, Optional[str], Optional[str], str]:
    """What ``Watcher.loaded`` keeps of a valid manifest: its pod's digest as any kubelet decodes it,
    and as the kubelet of ``release`` does (without the fields that release does not have; only when
    the table is the node's own release's, as ``manifests.pod_effect`` decides)."""
    pod = entry.pod or {}
    known = podfields.known_only(pod, release) if not release.note else pod
    return (entry.namespace, entry.pod_name or "", entry.checksum, entry.digest,
            entry.digest or "" if known is pod else manifests.decoded_digest(known))


def _shorten_move_pairing() -> None:
    try:
        from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper
    except ImportError:  # other watchdog versions: keep their default (only latency changes)
        return
    InotifyMoveEventGrouper.delay = MOVE_PAIRING_DELAY


class _Pending:
    """A burst of events for one file, flushed as one verdict after the debounce delay, or, while a
    writer still has the file open, after its close-after-write (at the latest ``settle`` seconds after
    the last write)."""

    def __init__(self, at: float) -> None:
        self.kinds: List[str] = []
        self.deadline = 0.0
        self.writing = False
        self.first = at         # when the watch learned of the burst's first event (time.monotonic())

    def add(self, kind: str, now: float, debounce: float, settle: float, writing: bool) -> None:
        shown = _EVENT_KINDS.get(kind, kind)
        if shown not in self.kinds:
            self.kinds.append(shown)
        if kind == "closed" or kind not in _WRITING:
            self.writing = False        # closed, or the name now points elsewhere (moved, deleted)
        elif writing:
            self.writing = True
        self.deadline = now + (max(settle, debounce) if self.writing else debounce)


def transient_detail(name: str) -> str:
    """Why a file that came and went within one burst did not matter to the kubelet."""
    what = manifests.leftover_kind(name) or "a temporary file"
    return "%s (%s) appeared and vanished: nothing for the kubelet to load" % (name, what)


def dot_detail(name: str) -> str:
    edited = manifests.swap_file_of(name)
    if edited:
        return "vim swap file for %s: the kubelet ignores dot files" % edited
    return "dot file: the kubelet ignores it"


class Watch:
    """The watch loop: debounce per file, one verdict per burst, optional mirror pod follow-up."""

    def __init__(self, manifests_dir: str, emit: Callable[[Record], None], waiter: Optional[Waiter] = None,
                 node_name: str = "", timeout: float = 30.0, debounce: float = 0.05,
                 host: Optional[Host] = None, relist: float = 20.0, settle: float = WRITE_SETTLE) -> None:
        self.dir = os.path.normpath(manifests_dir)
        self.parent = os.path.dirname(self.dir) or "/"
        self.emit_record = emit
        self.waiter = waiter
        self.node_name = node_name
        self.timeout = timeout
        self.relist = relist            # the kubelet's fileCheckFrequency: its full re-list period
        self.debounce = debounce
        self.settle = settle            # how long a file still open for writing may stay silent
        self.host = host or LocalHost()
        self.events: Any = queue.SimpleQueue()
        self.pending: Dict[str, _Pending] = {}
        # file -> (namespace, pod, checksum, decoded digest, decoded digest of the fields the node's
        # release knows: its kubelet drops the others) as the kubelet has it
        self.loaded: Dict[str, Tuple[str, str, Optional[str], Optional[str], str]] = {}
        self.verdicts = 0
        self._unclosed = False          # the verdict being made is of a file no close-after-write ended
        self._changed_at = 0.0          # ... and when the watch learned of its burst's first event
        self._looks: Dict[str, Deque[Tuple[float, Mapping[str, object]]]] = {}  # mirror pod -> (when, look)
        self._looks_lock = threading.Lock()
        self._observer: Any = None
        self._handler: Any = None
        self._generation = 0            # of the manifests dir's watch: bumped by every re-arm
        self._watch: Any = None
        self._ident: Optional[Tuple[int, int]] = None
        self._stopping = threading.Event()

    # --- output ---------------------------------------------------------------------------------
    def _emit(self, event: str, file: Optional[str], verdict: str, pod: Optional[str], detail: str,
              **extra: object) -> None:
        if self._unclosed and file is not None:
            detail += " (no close-after-write within %gs of the last write: judged as the file is now)" % self.settle
        # one shape (docs/json.md): what only some events carry is there in every one, null or false
        record: Record = {"time": iso_millis(), "event": event, "file": file, "verdict": verdict, "pod": pod,
                          "detail": detail, "elapsed_seconds": None, "files": None, "bounce": False}
        record.update(extra)
        if verdict not in ("watching", "exit", FOLLOWED, NOT_FOLLOWED, UNVERIFIED):
            self.verdicts += 1
        self.emit_record(record)

    def mirror_name(self, pod_name: str) -> str:
        return "%s-%s" % (pod_name, self.node_name) if self.node_name else pod_name

    # --- setup ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Arm the watches, then read the dir: a change between the two is still seen as an event."""
        manifests.check_manifests_dir(self.host, self.dir)
        _shorten_move_pairing()
        self._observer = _make_observer()
        self._handler = _Handler(self.events, None)
        _schedule(self._observer, self._handler, self.parent, dirs_only=True)
        self._arm()
        self._observer.start()
        scan = manifests.scan(self.host, self.dir)
        release = podfields.node_release(m.pod for m in scan.valid)
        self.loaded = {m.file: _loaded(m, release) for m in scan.valid}
        self._look_at_all(scan.valid)
        names = ", ".join(sorted(m.file for m in scan.valid)) or "none"
        self._emit("start", None, "watching", None, "watching %s: the kubelet runs %d manifest%s (%s)"
                   % (self.dir, len(self.loaded), "" if len(self.loaded) == 1 else "s", names))

    def _arm(self) -> None:
        self._ident = _dir_identity(self.dir)
        # A handler of its own per watch of the dir: a removed dir's watch may still deliver the events
        # of its files' deletion (another watchdog thread) after the dir is back, and a stale "deleted"
        # must not be judged against the new dir ("kube-scheduler.yaml appeared and vanished").
        self._generation += 1
        handler = _Handler(self.events, self._generation)
        self._watch = _schedule(self._observer, handler, self.dir, dirs_only=False)

    def _disarm(self) -> None:
        if self._watch is not None:
            try:
                self._observer.unschedule(self._watch)
            except (KeyError, ValueError):
                pass  # watchdog already dropped the watch of a deleted dir
            self._watch = None

    def stop(self, reason: str) -> None:
        self.events.put(("stop", reason))

    def close(self) -> None:
        self._stopping.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)

    # --- main loop --------------------------------------------------------------------------------
    def run(self) -> int:
        """Block until stop(); returns the exit status (0)."""
        while True:
            item = self._next_item()
            if item is not None and item[0] == "stop":
                self._flush(force=True)
                self._emit("exit", None, "exit", None, "stopped (%s) after %d verdict%s"
                           % (item[1], self.verdicts, "" if self.verdicts == 1 else "s"))
                return 0
            if item is not None:
                self._handle(item)
            self._flush()

    def _next_item(self) -> Optional[tuple]:
        if not self.pending:
            return self.events.get()
        wait = min(p.deadline for p in self.pending.values()) - time.monotonic()
        try:
            return self.events.get(timeout=max(wait, 0.0)) if wait > 0 else self.events.get_nowait()
        except queue.Empty:
            return None

    def _handle(self, item: tuple) -> None:
        if item[0] == "follow":
            self._emit(**item[1])
            return
        _, kind, src, dest, generation = item[:5]
        at = item[5] if len(item) > 5 else time.monotonic()     # when watchdog's thread handed it over
        if kind == "moved":
            self._path_event(src, "moved_out", generation, at)
            self._path_event(dest, "moved_in", generation, at)
        else:
            self._path_event(src, kind, generation, at)

    def _path_event(self, path: str, kind: str, generation: Optional[int], at: float) -> None:
        if not path:
            return
        if path == self.dir:
            self._check_dir()
        elif os.path.dirname(path) == self.dir and generation in (None, self._generation):
            self._touch(os.path.basename(path), kind, at=at)

    def _touch(self, name: str, kind: str, writing: bool = True, at: Optional[float] = None) -> None:
        """One event for a file (``at``: when the watch learned of it); ``writing``: the event may come from
        a writer that has not closed it yet (false for a file found by listing the dir, a directory or a
        symlink, which no close follows)."""
        if writing and kind == "created" and not _regular_file(os.path.join(self.dir, name)):
            writing = False
        now = time.monotonic()
        burst = self.pending.setdefault(name, _Pending(now if at is None else min(at, now)))
        burst.add(kind, now, self.debounce, self.settle, writing)

    # --- the manifests dir itself -------------------------------------------------------------------
    def _check_dir(self) -> None:
        """Re-arm when the dir was removed/replaced; driven by what is there, not by event order."""
        ident = _dir_identity(self.dir)
        if ident == self._ident:
            return
        self._disarm()
        if self._ident is not None and ident is None:
            self._ident = None
            self._dir_gone()
            return
        if ident is not None:
            self._arm()
            self._emit("dir_created", None, "watching", None, "manifests dir %s is back: watching it again"
                       % self.dir)
            for name in self._listdir():
                self._touch(name, "created", writing=False)

    def _dir_gone(self) -> None:
        for name in sorted(self.loaded):
            namespace, pod = self.loaded[name][:2]
            self._emit("dir_removed", name, STOP, self.mirror_name(pod), "manifests dir removed: the kubelet "
                       "stops pod %s/%s" % (namespace, pod))
        self.loaded.clear()
        self.pending.clear()
        self._emit("dir_removed", None, STOP, None, "manifests dir %s removed: the kubelet runs no static pods "
                   "from it; waiting for it to come back" % self.dir)

    def _listdir(self) -> List[str]:
        try:
            return sorted(self.host.listdir(self.dir))
        except OSError:
            return []

    # --- verdicts ------------------------------------------------------------------------------------
    def _flush(self, force: bool = False) -> None:
        now = time.monotonic()
        # In the order the bursts ended, which is the order the kubelet saw the files settle.
        due = sorted((n for n, p in self.pending.items() if force or p.deadline <= now),
                     key=lambda n: (self.pending[n].deadline, n))
        if not due:
            return
        scan = self._scan()
        for name in due:
            burst = self.pending.pop(name, None)
            if scan is not None and burst is not None:
                self._unclosed, self._changed_at = burst.writing, burst.first
                self._verdict(name, "+".join(burst.kinds), scan)
        self._unclosed = False

    def _scan(self) -> Optional[manifests.DirScan]:
        try:
            return manifests.scan(self.host, self.dir)
        except CpctlError:
            self._check_dir()
            return None

    def _verdict(self, name: str, event: str, scan: manifests.DirScan) -> None:
        if name.startswith("."):
            self._emit(event, name, IGNORE, None, dot_detail(name))
            return
        if name in scan.ignored:
            self._emit(event, name, IGNORE, None, "directory: the kubelet does not descend into it")
            return
        entry = next((m for m in scan.manifests if m.file == name), None)
        if entry is None:
            self._gone(name, event, scan)
        elif not entry.valid:
            self._rejected(entry, event)
        else:
            self._valid(entry, event, scan)

    def _gone(self, name: str, event: str, scan: manifests.DirScan) -> None:
        prev = self.loaded.pop(name, None)
        if prev is None:
            self._emit(event, name, IGNORE, None, transient_detail(name))
            return
        namespace, pod = prev[:2]
        how = "moved out" if "moved_out" in event else "deleted"
        target = PodTarget(pod, namespace, self.node_name, file=name)
        others = [m.file for m in scan.valid if (m.namespace, m.pod_name) == (namespace, pod)]
        if others:
            # The kubelet forgets the pod key that file defined, even though another file defines
            # the same pod: the pod stops now and comes back at the next full re-list.
            self._emit(event, name, STOP, self.mirror_name(pod), "file %s: the kubelet stops pod %s/%s although %s "
                       "still defines it; its next full re-list (every %gs) starts it again from there"
                       % (how, namespace, pod, " and ".join(others), self.relist), bounce=True)
            self._follow([(STOP, self.timeout), (RELOAD, self.relist + self.timeout)], target, bounce=True)
            return
        self._emit(event, name, STOP, self.mirror_name(pod), "file %s: the kubelet stops pod %s/%s"
                   % (how, namespace, pod))
        self._follow([(STOP, self.timeout)], target)

    def _rejected(self, entry: manifests.Manifest, event: str) -> None:
        prev = self.loaded.pop(entry.file, None)
        detail = "the kubelet rejects it: %s" % entry.error
        pod = None
        if prev is not None:
            pod = self.mirror_name(prev[1])
            detail += "; it stops pod %s/%s when it next re-lists the dir (every %gs)" % (prev[0], prev[1],
                                                                                            self.relist)
        self._emit(event, entry.file, REJECT, pod, detail)

    def _valid(self, entry: manifests.Manifest, event: str, scan: manifests.DirScan) -> None:
        key = (entry.namespace, entry.pod_name)
        prev = self.loaded.get(entry.file)
        release = podfields.node_release(m.pod for m in scan.valid)
        self.loaded[entry.file] = now = _loaded(entry, release)
        pod = self.mirror_name(entry.pod_name or "")
        target = PodTarget(entry.pod_name or "", entry.namespace, self.node_name, entry.pod or {}, entry.file)
        others = [f for f in scan.duplicates().get(key, []) if f != entry.file]
        if others:
            self._emit(event, entry.file, DUPLICATE, pod, "pod %s/%s is also defined by %s: the kubelet runs only "
                       "one of them (a backup copy may run as a second %s)"
                       % (key[0], key[1], " and ".join(others), key[1]), files=[entry.file] + others)
        elif prev is None:
            self._emit(event, entry.file, LOAD, pod, "the kubelet starts pod %s/%s" % key)
            self._follow([(LOAD, self.timeout)], target)
        elif prev[2] == entry.checksum:
            self._emit(event, entry.file, IGNORE, pod, "content unchanged: the kubelet keeps pod %s/%s" % key)
        elif prev[:2] == key and prev[3] == entry.digest:
            self._emit(event, entry.file, IGNORE, pod, "only comments, formatting or API defaults changed: the "
                       "kubelet sees the same pod and keeps pod %s/%s running" % key)
        elif prev[:2] == key and prev[4] == now[4]:
            self._emit(event, entry.file, IGNORE, pod, "only fields Kubernetes 1.%d does not have changed: its "
                       "kubelet drops them, sees the same pod and keeps pod %s/%s running" % ((release.minor,) + key))
        else:
            was = "" if prev[:2] == key else " (was pod %s/%s)" % prev[:2]
            self._emit(event, entry.file, RELOAD, pod, "content changed: the kubelet recreates pod %s/%s%s"
                       % (key[0], key[1], was))
            self._follow([(RELOAD, self.timeout)], target)

    # --- mirror pod follow-up -------------------------------------------------------------------------
    def _follow(self, goals: List[Tuple[str, float]], target: PodTarget, bounce: bool = False) -> None:
        """Follow the mirror pod of ``target`` in a thread of its own: one line per (verdict, timeout) of
        ``goals`` (a bounce: stop, then the re-list's start), judged from the looks since the change
        (``cpctl.ops.watchfollow``)."""
        if self.waiter is None:
            return
        thread = threading.Thread(target=self._follow_thread, args=(goals, target, self._changed_at, bounce),
                                  name="cpctl-follow-%s" % target.component, daemon=True)
        thread.start()

    def _follow_thread(self, goals: List[Tuple[str, float]], target: PodTarget, changed: float,
                       bounce: bool) -> None:
        trail = MirrorTrail(self._look_before(target.mirror_name, changed))
        todo = list(goals)
        while todo and not self._stopping.is_set():
            begun = time.monotonic() - changed
            state = self._look(target)
            trail.add(Look(begun, state, time.monotonic() - changed))
            elapsed = time.monotonic() - changed
            for verdict, timeout in list(todo):
                done = outcome(verdict, trail, "mirror pod %s" % target.mirror_name, elapsed)
                if done is None and elapsed >= timeout:
                    done = at_deadline(verdict, trail, "mirror pod %s" % target.mirror_name, timeout, bounce)
                if done is not None:
                    self._report_follow(target, done[0], done[1], elapsed)
                    todo.remove((verdict, timeout))
                elif bounce:
                    break               # a bounce's start is reported after its stop
            if todo:
                self._stopping.wait(POLL_INTERVAL)

    def _look(self, target: PodTarget) -> Optional[Mapping[str, object]]:
        """The waiter's view of the mirror pod now (None: no probe could look), kept with its time."""
        try:
            state = self.waiter.describe(target) if self.waiter is not None else None
        except (CpctlError, OSError):
            state = None  # the API may be down right now (it may be the pod being replaced)
        if state is not None:
            with self._looks_lock:
                self._looks.setdefault(target.mirror_name, deque(maxlen=KEPT_LOOKS)).append((time.monotonic(), state))
        return state

    def _look_before(self, mirror: str, changed: float) -> Optional[Mapping[str, object]]:
        """The last look at ``mirror`` that ended before the watch learned of the change (None: none)."""
        with self._looks_lock:
            kept = list(self._looks.get(mirror, ()))
        return next((state for at, state in reversed(kept) if at < changed), None)

    def _look_at_all(self, valid: List[manifests.Manifest]) -> None:
        """A first look at the mirror pod of every manifest the kubelet runs, so that a follow-up of the
        first change has a look from before it: a bounce that ends before the follow-up's first look is
        still seen as a new pod (``cpctl.ops.watchfollow``)."""
        if self.waiter is None:
            return
        targets = [PodTarget(m.pod_name or "", m.namespace, self.node_name, m.pod or {}, m.file) for m in valid]
        try:
            self.waiter.prepare_describe(targets)
        except (CpctlError, OSError):
            pass        # each describe below looks by itself
        for target in targets:
            self._look(target)

    def _report_follow(self, target: PodTarget, verdict: str, detail: str, elapsed: float) -> None:
        record: Record = {"event": "mirror", "file": target.file, "verdict": verdict, "pod": target.mirror_name,
                          "detail": detail, "elapsed_seconds": round(elapsed, 3)}
        self.events.put(("follow", record))


# --- watchdog glue ---------------------------------------------------------------------------------

class _Handler:
    """watchdog handler that only forwards ("fs", kind, src, dest, generation, when) tuples to the main
    thread; ``generation``: the dir watch it serves (None: the parent dir's watch); ``when``: the
    ``time.monotonic()`` it handed the event over (a follow-up's looks are timed from it)."""

    def __init__(self, events: Any, generation: Optional[int]) -> None:
        self.events = events
        self.generation = generation

    def dispatch(self, event: "FileSystemEvent") -> None:
        kind = event.event_type
        if kind == "moved":
            src, dest = _text(event.src_path), _text(event.dest_path)
            if src and not dest:
                kind, dest = "moved_out", ""
            elif dest and not src:
                kind, src, dest = "moved_in", dest, ""
            self.events.put(("fs", kind, src, dest, self.generation, time.monotonic()))
        elif kind in _EVENT_KINDS or (event.is_directory and kind in ("created", "deleted")):
            self.events.put(("fs", kind, _text(event.src_path), "", self.generation, time.monotonic()))


def _text(path: Union[str, bytes]) -> str:
    return os.fsdecode(path) if path else ""


def _make_observer() -> "BaseObserver":
    """inotify observer reporting unpaired moves as moves (moved in / out), else watchdog's default."""
    try:
        from watchdog.observers.inotify import InotifyObserver
        return InotifyObserver(generate_full_events=True)
    except (ImportError, TypeError):
        from watchdog.observers import Observer
        return Observer()


def _schedule(observer: "BaseObserver", handler: Any, path: str, dirs_only: bool) -> "ObservedWatch":
    from watchdog import events as ev
    wanted = [ev.DirCreatedEvent, ev.DirDeletedEvent, ev.DirMovedEvent]
    if not dirs_only:
        wanted += [ev.FileCreatedEvent, ev.FileModifiedEvent, ev.FileDeletedEvent, ev.FileMovedEvent,
                   ev.FileClosedEvent]
    try:
        return observer.schedule(handler, path, recursive=False, event_filter=wanted)
    except TypeError:  # watchdog < 4: no event filter, the handler drops what it does not need
        return observer.schedule(handler, path, recursive=False)


def _regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _dir_identity(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def format_text(record: Mapping[str, object]) -> str:
    """One human line: time, verdict, file and what the kubelet does."""
    clock = str(record["time"])[11:23]
    where = "%s: " % record["file"] if record.get("file") else ""
    verdict = str(record["verdict"])
    return "%s %-9s %s%s" % (clock, verdict.upper() if verdict in (LOAD, RELOAD, STOP, REJECT, DUPLICATE) else verdict,
                             where, record["detail"])

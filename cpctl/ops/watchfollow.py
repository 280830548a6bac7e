"""What the looks of ``cpctl watch``'s mirror pod follow-up prove (issue 44).

A follow-up looks at the mirror pod every ``POLL_INTERVAL`` seconds after a verdict. The kubelet
does not wait for those looks: on a busy node, or with a short re-list period, the pod is removed
and created again between two looks, or even before the first one (the bounce after a duplicate's
removal). So "gone" and "recreated" are judged from evidence, never from one look alone:

* a look finds no mirror pod: gone;
* a look finds a pod **new since the change**: the pod that ran at the change is gone (a pod name is
  unique: that one was deleted first) and this one was created after it. New since the change: a
  look that found none came before it; an earlier look after the change saw another uid; it was
  created after the change (its creationTimestamp); or its uid is not the one the watch saw before
  it learned of the change (its last look at that pod) and it was created no earlier than
  ``CREATED_SLACK`` seconds before the change (so an old look does not stand for the pod of the
  change);
* the pod seen at the end is **the one from before the change** only when it was created more than
  ``OLD_MARGIN`` seconds before the change, no look found it new since, and its containers' start
  did not change (the same bytes back at the same path before the kubelet deleted the orphaned
  mirror pod: it keeps its uid and creation while the pod behind it restarts; real-node-facts.md).

A follow-up that found neither says so: "not verified", with what it saw. The change's time is when
watchdog handed the watch its first event, which is later than the change itself: "created after"
it is safe; "created before" it needs a margin for a watch that learned of the change late on a busy
node, besides creationTimestamp's whole seconds. The API server's clock is taken to be the node's (NTP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

#: The verdicts a follow-up judges (``cpctl.ops.watch``'s), and what it reports about them.
LOAD, RELOAD, STOP = "load", "reload", "stop"
FOLLOWED, NOT_FOLLOWED, UNVERIFIED = "followed", "not_followed", "unverified"
#: Seconds around the change within which a pod's creation time tells nothing (whole seconds).
CREATED_SLACK = 1.0
#: A pod created this long before the watch learned of the change ran before the change (CREATED_SLACK,
#: and up to 4 s that the watch may learn of the change late on a busy node).
OLD_MARGIN = CREATED_SLACK + 4.0

State = Mapping[str, object]


@dataclass
class Look:
    """One look at the mirror pod: begun ``at`` and ended ``end`` seconds after the change (its first
    event; ``end`` None: at once); ``state`` the waiter's ``describe`` (None: no probe could look).
    "Created after the change" is judged with ``at``, "created before it" with ``end``: the pod's age
    was taken somewhere in between."""

    at: float
    state: Optional[State]
    end: Optional[float] = None

    @property
    def ended(self) -> float:
        return self.at if self.end is None else self.end


def _age(state: State) -> Optional[float]:
    age = state.get("age_seconds")
    return float(age) if isinstance(age, (int, float)) and not isinstance(age, bool) else None


def _uid(state: Optional[State]) -> str:
    uid = state.get("uid") if state is not None else None
    return uid if isinstance(uid, str) else ""


def _other_uid(state: State, prev: Optional[State]) -> bool:
    """Both looks name a uid, through the same probe, and not the same one. The probes' uids differ
    for one pod (the API's mirror pod uid, crictl's static pod uid), and ``describe`` takes the
    runtime's view when the API cannot answer."""
    return bool(prev is not None and _uid(state) and _uid(prev) and state.get("source") == prev.get("source")
                and _uid(state) != _uid(prev))


def _started_again(prev: Optional[State], state: State) -> bool:
    """The same pod (uid) as ``prev``, with another container start."""
    if prev is None or not _uid(state) or _uid(prev) != _uid(state) or prev.get("source") != state.get("source"):
        return False
    was, now = prev.get("container_started"), state.get("container_started")
    return isinstance(was, str) and isinstance(now, str) and was != now


def _present(state: Optional[State]) -> bool:
    return bool(state is not None and state.get("present"))


class MirrorTrail:
    """The looks at one mirror pod since a change, and what they prove so far.

    ``before``: the watch's last look at the pod taken before it learned of the change (None when it
    has none); used only to tell a new pod, never to say the pod was not replaced."""

    def __init__(self, before: Optional[State] = None) -> None:
        self.before = before if _present(before) and _uid(before) else None
        self.looked = False
        self.last: Optional[Look] = None        # the last look that could see the pod
        self.gone = ""                          # how the pod of the change is known to be gone
        self.new = False                        # the pod of the last look is new since the change
        self.since: Optional[float] = None      # when that pod was first seen (seconds after the change)
        self.restarted = False                  # a look found the containers of one pod started again

    def add(self, look: Look) -> None:
        """Take one look into account (a look no probe could make proves nothing)."""
        if look.state is None:
            return
        self.looked = True
        if not _present(look.state):
            self.gone, self.new, self.since = self.gone or "gone", False, None
        else:
            why = self._new_why(look)
            self.gone = self.gone or why
            same = self.last is not None and _present(self.last.state) and not _other_uid(look.state, self.last.state)
            self.new = bool(why) or (self.new and same)
            self.restarted = self.restarted or _started_again(self.last.state if same and self.last else self.before,
                                                              look.state)
            self.since = self.since if same and not why else look.at
        self.last = look

    def _new_why(self, look: Look) -> str:
        """Why the pod of ``look`` is new since the change ("" when nothing says so)."""
        state, prev = look.state or {}, self.last.state if self.last else None
        age = _age(state)
        if prev is not None and not _present(prev):
            return "gone"
        if _other_uid(state, prev):
            return "replaced"
        if age is not None and age <= look.at:
            return "replaced"
        if _other_uid(state, self.before) and age is not None and age <= look.ended + CREATED_SLACK:
            return "replaced"
        return ""

    # --- what the looks prove ----------------------------------------------------------------------
    def stopped(self) -> bool:
        """The pod that ran at the change is gone (it may be back already)."""
        return bool(self.gone)

    def recreated(self) -> bool:
        """A pod new since the change, Ready at the last look."""
        return self.new and self.ready()

    def ready(self) -> bool:
        return bool(self.last is not None and _present(self.last.state) and (self.last.state or {}).get("ready"))

    def present(self) -> bool:
        return self.last is not None and _present(self.last.state)

    def the_old_pod(self) -> bool:
        """The last look found the pod that ran before the change: created more than OLD_MARGIN seconds
        before it (and not new since it)."""
        if self.new or self.last is None or not _present(self.last.state):
            return False
        age = _age(self.last.state or {})
        return not self.restarted and age is not None and age > self.last.ended + OLD_MARGIN


def outcome(verdict: str, trail: MirrorTrail, mirror: str, elapsed: float) -> Optional[Tuple[str, str]]:
    """(``followed``, the detail) once the looks prove that the mirror pod did what ``verdict``
    (stop, load, reload) said the kubelet does; None while they do not."""
    if verdict == STOP and trail.stopped():
        how = "" if trail.gone == "gone" else ": a new mirror pod had replaced it (between two looks)"
        return FOLLOWED, "%s gone after %.1fs%s" % (mirror, elapsed, how)
    if verdict == RELOAD and trail.recreated():
        return FOLLOWED, "%s recreated and Ready after %.1fs" % (mirror, elapsed)
    if verdict == LOAD and trail.ready():
        return FOLLOWED, "%s appeared and Ready after %.1fs" % (mirror, elapsed)
    return None


def at_deadline(verdict: str, trail: MirrorTrail, mirror: str, timeout: float, bounce: bool = False
                ) -> Tuple[str, str]:
    """(``not_followed`` or ``unverified``, the detail) of a follow-up whose ``timeout`` passed without
    ``outcome``. Only what a look showed is said: a pod that may have been replaced before the first
    look (``bounce``: the kubelet stops the pod and starts it again) is "not verified"."""
    within = "within %gs" % timeout
    if not trail.looked:
        return UNVERIFIED, "%s not verified: no probe could observe it %s" % (mirror, within)
    if verdict == LOAD:
        return NOT_FOLLOWED, "%s did not appear (Ready) %s" % (mirror, within)
    if verdict == STOP and (trail.the_old_pod() or not bounce):
        return NOT_FOLLOWED, "%s still present after %gs" % (mirror, timeout)
    if verdict == RELOAD and not trail.present():
        return NOT_FOLLOWED, "%s was not recreated (Ready) %s" % (mirror, within)
    if verdict == RELOAD and trail.new:
        return NOT_FOLLOWED, "%s was recreated but not Ready %s" % (mirror, within)
    if verdict == RELOAD and trail.the_old_pod():
        return NOT_FOLLOWED, "%s was not recreated %s: the pod from before the change is still there" % (
            mirror, within)
    why = "its containers started again (the kubelet may have restarted it behind the same mirror pod)" \
        if trail.restarted else "created within %gs of it" % CREATED_SLACK
    return UNVERIFIED, "%s not verified %s: the same mirror pod at every look since %.1fs after the change, " \
        "%s: whether it is the pod from before the change or a new one, no look can tell" % (
            mirror, within, trail.since or 0.0, why)

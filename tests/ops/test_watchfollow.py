"""What the looks of a watch follow-up prove (cpctl.ops.watchfollow), from scripted sequences of looks.

Issue 44: on a busy machine the kubelet's bounce (a duplicate removed: the pod stops, the re-list
starts it again) fell between two looks, or before the first one, and the watch said "still present
after 60s" and "was not recreated within 61s" about a pod that had been replaced. Here each timing
of the bounce relative to the looks is one sequence: no sleeping, no race.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest

from cpctl.ops.watchfollow import Look, MirrorTrail, at_deadline, outcome

MIRROR = "mirror pod kube-scheduler-cp-1"


def pod(uid: str, age: float, ready: bool = True) -> dict:
    """describe()'s view of a present mirror pod; ``age``: its age at the change (its creationTimestamp
    that many seconds before it; negative: after it), to which each look adds its own time."""
    return {"present": True, "ready": ready, "phase": "Running", "uid": uid, "age_seconds": age}


GONE = {"present": False}
OLD = pod("a", 50.0)          # the pod that ran before the change: created long before it


def trail_of(before: Optional[dict], looks: List[Tuple[float, Optional[dict]]]) -> MirrorTrail:
    trail = MirrorTrail(before)
    for at, state in looks:
        trail.add(Look(at, dict(state, age_seconds=state["age_seconds"] + at) if state and "age_seconds" in state
                       else state))
    return trail


def follow(before: Optional[dict], looks: List[Tuple[float, Optional[dict]]], bounce: bool = True
           ) -> Tuple[Tuple[str, str], Tuple[str, str]]:
    """(stop, reload) results of a bounce follow-up after ``looks``: each result as the watch reports it,
    by ``outcome`` or, with nothing proven, ``at_deadline``."""
    trail = trail_of(before, looks)
    elapsed = looks[-1][0]
    stop = outcome("stop", trail, MIRROR, elapsed) or at_deadline("stop", trail, MIRROR, 60, bounce)
    reload = outcome("reload", trail, MIRROR, elapsed) or at_deadline("reload", trail, MIRROR, 61, bounce)
    return stop, reload


def test_a_bounce_seen_as_an_absence_is_gone_then_recreated() -> None:
    stop, reload = follow(OLD, [(0.1, OLD), (0.3, GONE), (1.2, pod("b", -1.0))])
    assert stop[0] == "followed" and stop[1].startswith(MIRROR + " gone after ") and "replaced" not in stop[1]
    assert reload == ("followed", MIRROR + " recreated and Ready after 1.2s")


def test_a_bounce_between_two_looks_is_gone_and_recreated() -> None:
    """The CI failure's first case: old pod at one look, a new uid at the next, never an absence."""
    stop, reload = follow(OLD, [(0.1, OLD), (0.3, OLD), (0.5, pod("b", -0.4))])
    assert stop == ("followed", MIRROR + " gone after 0.5s: a new mirror pod had replaced it (between two looks)")
    assert reload == ("followed", MIRROR + " recreated and Ready after 0.5s")


def test_a_bounce_between_two_looks_is_seen_without_a_look_from_before_too() -> None:
    stop, reload = follow(None, [(0.1, pod("a", 0.3)), (0.3, pod("b", 0.3))])
    assert stop[0] == "followed" and "replaced" in stop[1]
    assert reload[0] == "followed"


def test_a_bounce_over_before_the_first_look_is_judged_against_the_look_from_before_the_change() -> None:
    """The CI failure's second case: the pod of the first look is already the new one (its
    creationTimestamp, in whole seconds, reads 0.5 s before the change: its age alone proves nothing)."""
    stop, reload = follow(OLD, [(0.8, pod("b", 0.5)), (1.0, pod("b", 0.5))])
    assert stop[0] == "followed" and "replaced" in stop[1]
    assert reload == ("followed", MIRROR + " recreated and Ready after 1.0s")


def test_a_bounce_over_before_the_first_look_with_no_look_from_before_is_not_verified() -> None:
    """Nothing tells the pod of every look from the one before the change: never "still present" nor
    "not recreated" about a pod that may have been replaced, never "gone" either."""
    stop, reload = follow(None, [(0.8, pod("b", 0.5)), (60.0, pod("b", 0.5)), (61.0, pod("b", 0.5))])
    assert stop[0] == "unverified" and stop[1].startswith(MIRROR + " not verified within 60s: the same mirror pod "
                                                          "at every look since 0.8s after the change"), stop
    assert reload[0] == "unverified" and "whether it is the pod from before the change or a new one" in reload[1]


def test_a_pod_created_after_the_change_is_new_whatever_was_seen_before() -> None:
    stop, reload = follow(None, [(2.5, pod("b", -1.5))])
    assert stop[0] == "followed" and reload[0] == "followed"


def test_the_same_uid_with_a_later_creation_is_a_new_pod() -> None:
    """crictl's uid is the static pod's (the same file back at the same path: the same uid); its sandbox's
    creation is new."""
    stop, reload = follow(None, [(0.1, pod("u", 30.0)), (3.0, pod("u", -2.0))])
    assert stop[0] == "followed" and reload[0] == "followed"


def test_the_pod_from_before_still_there_is_still_present_and_not_recreated() -> None:
    stop, reload = follow(OLD, [(0.1, OLD), (60.0, OLD), (61.0, OLD)])
    assert stop == ("not_followed", MIRROR + " still present after 60s")
    assert reload == ("not_followed", MIRROR + " was not recreated within 61s: the pod from before the change is "
                                               "still there")


def test_a_stale_look_from_before_does_not_stand_for_the_pod_of_the_change() -> None:
    """The last look before the change saw uid x; the pod since is another one created long before the
    change (replaced earlier, unseen by the watch): not new, and it is the pod from before."""
    stop, reload = follow(pod("x", 400.0), [(0.1, OLD), (61.0, OLD)])
    assert stop[0] == "not_followed" and reload[0] == "not_followed"


def test_recreated_but_not_ready_and_never_back() -> None:
    _, reload = follow(OLD, [(0.1, GONE), (61.0, pod("b", -1.0, ready=False))])
    assert reload == ("not_followed", MIRROR + " was recreated but not Ready within 61s")
    stop, reload = follow(OLD, [(0.1, GONE), (61.0, GONE)])
    assert stop[0] == "followed"
    assert reload == ("not_followed", MIRROR + " was not recreated (Ready) within 61s")


def test_no_look_at_all_is_not_verified() -> None:
    stop, reload = follow(OLD, [(0.1, None), (61.0, None)])
    assert stop == ("unverified", MIRROR + " not verified: no probe could observe it within 60s")
    assert reload == ("unverified", MIRROR + " not verified: no probe could observe it within 61s")


def test_a_failed_look_between_two_proves_nothing() -> None:
    stop, _ = follow(OLD, [(0.1, OLD), (0.3, None), (60.0, OLD)])
    assert stop == ("not_followed", MIRROR + " still present after 60s")


@pytest.mark.parametrize("bounce", [True, False])
def test_a_plain_stop_says_still_present_and_a_bounce_only_with_the_pod_from_before(bounce: bool) -> None:
    """A plain stop expects no pod at all: one at the deadline is "still present", whatever it is. A
    bounce expects the pod back: "still present" only about the pod from before the change."""
    stop, _ = follow(None, [(0.8, pod("b", 0.5)), (60.0, pod("b", 0.5))], bounce=bounce)
    assert stop[0] == ("unverified" if bounce else "not_followed"), stop


def test_load_needs_a_ready_pod() -> None:
    trail = trail_of(None, [(0.1, GONE), (0.3, pod("b", -0.2, ready=False))])
    assert outcome("load", trail, MIRROR, 0.3) is None
    assert at_deadline("load", trail, MIRROR, 30) == ("not_followed", MIRROR + " did not appear (Ready) within 30s")
    trail.add(Look(0.5, pod("b", 0.3)))
    assert outcome("load", trail, MIRROR, 0.5) == ("followed", MIRROR + " appeared and Ready after 0.5s")


def test_containers_started_again_behind_the_same_mirror_pod_are_not_the_old_pod() -> None:
    """The same bytes back at the same path before the kubelet deleted the orphaned mirror pod: its uid
    and creation stay while the pod behind it restarted (real-node-facts.md). Neither "still present"
    nor "not recreated": not verified."""
    before = dict(OLD, container_started="2026-12-07T20:00:00Z")
    after = dict(OLD, container_started="2026-12-07T20:31:02Z")
    stop, reload = follow(before, [(0.1, before), (60.0, after), (61.0, after)])
    assert stop[0] == reload[0] == "unverified", (stop, reload)
    assert "its containers started again" in reload[1]
    stop, reload = follow(before, [(0.1, before), (61.0, before)])
    assert (stop[0], reload[0]) == ("not_followed", "not_followed")


def test_uids_of_two_probes_are_never_compared() -> None:
    """The API's mirror pod uid and crictl's static pod uid differ for one pod; ``describe`` takes the
    runtime's view when the API cannot answer (the API server being changed): not a replaced pod."""
    api, runtime = dict(OLD, source="api"), dict(OLD, uid="static-hash", source="crictl")
    stop, reload = follow(api, [(0.1, api), (0.3, runtime), (60.0, runtime), (61.0, api)])
    assert (stop[0], reload[0]) == ("not_followed", "not_followed"), (stop, reload)
    stop, reload = follow(api, [(0.1, runtime), (0.3, dict(runtime, uid="another-hash")), (61.0, api)])
    assert (stop[0], reload[0]) == ("followed", "followed"), "crictl saw another static pod, Ready: replaced"

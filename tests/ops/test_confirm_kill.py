"""SIGKILL before every host call of the commit-confirmed steps (issue #25): arm, confirm, revert.

As in tests/core/test_journal_kill.py, each step runs in a forked child on a ``MockHost`` that kills the
process just before its Nth host call, for every N. The next cpctl command must find the arm record
and the history in step (armed or not; confirmed or not), and a revert killed anywhere must end -
once the timer's run comes again - with the previous version in place, no arm left, and exactly one
revert on record.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest

from cpctl.core import confirmations, views
from cpctl.core.confirmations import Arm
from cpctl.core.settings import Settings
from cpctl.host.local import LocalHost
from cpctl.ops import confirm, edits
from cpctl.ops.wiring import open_node
from cpctl.timeutil import iso
from tests.coreutil import MANIFESTS, NODE, NodeDirs, killed_run, sha

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]
NEW_SCHEDULER = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=4\n")
OPTIONS = edits.ApplyOptions(timeout=1, settle=0)


def _arm_of(node: Any) -> Arm:
    """The arm an ``apply --confirm-within 1h`` of NEW_SCHEDULER records (timer: none)."""
    return Arm("0123456789abcdef", "kube-scheduler", "kube-scheduler.yaml", sha(NEW_SCHEDULER), sha(SCHEDULER), 1,
               "apply", iso(), iso(time.time() + 3600), "root", "test", NODE, "kill test", "none")


def _arm(node: Any) -> None:
    with node.session("kill test"):
        node.host.makedirs(confirmations.directory(node.state), 0o700)
        node.apply(confirmations.arm_change(node.state, _arm_of(node)))


STEPS: Dict[str, Callable[[Any], Any]] = {
    "arm": _arm,
    "confirm": lambda node: confirm.confirm(node, "scheduler", "kill test"),
    "revert": lambda node: confirm.revert(node, "scheduler", "kill test", op="0123456789abcdef"),
}


def _settings(node: NodeDirs) -> Settings:
    return Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none", lock_timeout=1)


def _run(node: NodeDirs, kind: str, kill_at: int) -> Tuple[int, int]:
    """Run one step in a forked child that SIGKILLs itself before host call ``kill_at`` (0: never)."""
    return killed_run(node, STEPS[kind], kill_at)


def _prepare(kind: str, root: str) -> NodeDirs:
    """The scheduler changed by a verified apply (revision 1 keeps the old bytes), armed unless ``arm``."""
    node = NodeDirs(root, files={"kube-scheduler.yaml": SCHEDULER})
    edits.replace(open_node(_settings(node), LocalHost()), "scheduler", NEW_SCHEDULER, "test", "apply", OPTIONS)
    if kind != "arm":
        _arm(open_node(_settings(node), LocalHost()))
    return node


def _actions(node: NodeDirs) -> List[str]:
    return [r["action"] for r in node.history()]


def _armed(node: NodeDirs) -> bool:
    return os.path.exists(os.path.join(node.state, "confirm", "kube-scheduler.yaml.json"))


def _manifest(node: NodeDirs) -> bytes:
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        return handle.read()


def _check(node: NodeDirs, kind: str) -> str:
    views.status(open_node(_settings(node), LocalHost()))        # the next command: recovery first
    assert not os.path.exists(node.journal)
    staged = os.path.join(node.state, "staged")
    assert not (os.path.isdir(staged) and os.listdir(staged))
    if kind == "arm":
        assert _armed(node) == (_actions(node)[-1] == "armed")
        return "completed" if _armed(node) else "rolled back"
    if kind == "confirm":
        assert _armed(node) != (_actions(node)[-1] == "confirmed")
        assert _manifest(node) == NEW_SCHEDULER
        return "rolled back" if _armed(node) else "completed"
    started = "rolled back" if _manifest(node) == NEW_SCHEDULER else "completed"
    confirm.revert(open_node(_settings(node), LocalHost()), "scheduler", "again", op="0123456789abcdef")
    assert _manifest(node) == SCHEDULER and not _armed(node)
    actions = _actions(node)
    assert actions.count("reverted") == 1 and actions[-1] == "reverted", actions
    assert actions.count("rollback") == 1, actions
    return started


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(STEPS))
def test_sigkill_before_every_host_call_of_arm_confirm_revert(kind: str, tmp_path: Any) -> None:
    status, calls = _run(_prepare(kind, str(tmp_path / "count")), kind, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the step failed without a fault"
    seen = {"completed": 0, "rolled back": 0}
    for kill_at in range(1, calls + 1):
        root = str(tmp_path / ("k%d" % kill_at))
        node = _prepare(kind, root)
        status, _ = _run(node, kind, kill_at)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
            "kill point %d of %d not reached" % (kill_at, calls)
        seen[_check(node, kind)] += 1
        shutil.rmtree(root)
    assert seen["completed"] and seen["rolled back"], seen


def _signalled_revert(node: NodeDirs, signame: str, at: int) -> Tuple[int, int]:
    """The revert in a forked child that sends itself ``signame`` just before its ``at``-th host call
    (0: never), SIGTERM raising ``Terminated`` as the entry point's handler does; the exception it ends
    with is caught (the child exits 0): (wait status, host calls made)."""
    from cpctl.cli.main import _on_sigterm
    from cpctl.host.mock import Fault, MockHost
    from tests.coreutil import in_child

    def child() -> int:
        signal.signal(signal.SIGTERM, _on_sigterm)
        host = MockHost([Fault("*", signame, at=at)] if at else [])
        try:
            confirm.revert(open_node(_settings(node), host), "scheduler", "signal test", op="0123456789abcdef")
        except BaseException:  # noqa: BLE001 - the interruption itself is what is swept
            pass
        return len(host.calls)
    return in_child(child)


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_at_every_step_of_a_revert_never_flips_it(signame: str, tmp_path: Any) -> None:
    """Issue 33 item 3: SIGINT/SIGTERM before any host call of a revert never leaves the unconfirmed
    version in place without its arm, a "reverted" record means the previous version is in place, and
    the revert's next run ends with the previous version, no arm, and one revert on record."""
    status, calls = _signalled_revert(_prepare("revert", str(tmp_path / "count")), signame, 0)
    assert os.WIFEXITED(status) and calls > 5
    seen = {"kept the arm": 0, "reverted": 0}
    for at in range(1, calls + 1):
        root = str(tmp_path / ("s%d" % at))
        node = _prepare("revert", root)
        status, _ = _signalled_revert(node, signame, at)
        assert os.WIFEXITED(status), "signal point %d: the child died (status %d)" % (at, status)
        views.status(open_node(_settings(node), LocalHost()))          # the next command: recovery first
        if _manifest(node) == NEW_SCHEDULER:
            assert _armed(node), "signal point %d of %d: the unconfirmed version stands without an arm" % (at, calls)
            assert "reverted" not in _actions(node), (at, _actions(node))
            seen["kept the arm"] += 1
        else:
            assert _manifest(node) == SCHEDULER, at
            seen["reverted"] += 1
        if "reverted" in _actions(node):
            assert _manifest(node) == SCHEDULER, (at, node.history()[-1])
        confirm.revert(open_node(_settings(node), LocalHost()), "scheduler", "again", op="0123456789abcdef")
        assert _manifest(node) == SCHEDULER and not _armed(node), at
        actions = _actions(node)
        assert actions.count("reverted") == 1 and actions[-1] == "reverted", (at, actions)
        shutil.rmtree(root)
    assert seen["kept the arm"] and seen["reverted"], seen


def test_a_change_meeting_an_overdue_arm_does_not_say_it_reverts_at_a_past_time(tmp_path: Any) -> None:
    """Issue 33 item 6: the refusal under an arm whose deadline has passed (its revert runs or is about
    to) says so instead of 'reverts at <a time already past>'; checked under the lock by the change."""
    node = _prepare("revert", str(tmp_path))
    past = _arm_of(node)
    past.deadline = iso(time.time() - 60)
    assert "overdue since %s: the node's timer reverts it" % past.deadline in past.refusal("flags").message
    assert "reverts at" not in past.refusal("flags").message
    assert "reverts at" in _arm_of(node).refusal("flags").message
    opened = open_node(_settings(node), LocalHost())
    with pytest.raises(Exception, match="has an unconfirmed change"):
        edits.replace(opened, "scheduler", SCHEDULER, "test", "apply", OPTIONS)


def test_the_fallback_timer_waits_for_an_arm_recorded_after_it_started(tmp_path: Any, monkeypatch: Any) -> None:
    """The detached timer starts before cpctl records the arm: on a busy node the record may come
    after the timer's first look. An arm not seen yet must not end the wait (it did: "nothing armed
    any more (confirmed)", and the change was never reverted); one seen and then gone does. Once
    seen, the arm's own deadline on the node's clock decides (2.5 s after it was recorded, past the
    fallback's 1.5 s window)."""
    import threading
    monkeypatch.setattr(confirm, "CHECK_POLL", 0.05)
    node = _prepare("arm", str(tmp_path / "late"))
    settings = _settings(node)

    def soon(seconds: float) -> Arm:
        clock = confirmations.node_clock(LocalHost())
        return dataclasses.replace(_arm_of(None), deadline=iso(clock.time + seconds), boot_id=clock.boot_id,
                                   due_boottime=clock.boottime + seconds)

    def record(arm: Arm) -> None:
        opened = open_node(settings, LocalHost())
        with opened.session("late arm"):
            opened.host.makedirs(confirmations.directory(opened.state), 0o700)
            opened.apply(confirmations.arm_change(opened.state, arm))

    late = threading.Timer(0.4, lambda: record(soon(2.5)))
    late.start()
    started = time.monotonic()
    try:
        assert confirm.wait_due(open_node(settings, LocalHost()), "0123456789abcdef", 1.5) is True
    finally:
        late.join()
    assert time.monotonic() - started >= 2.8, "it ended before the arm recorded late was due"
    assert _armed(node)
    opened = open_node(settings, LocalHost())       # past its deadline: too late to confirm (issue 35); dropped
    with opened.session("drop the late arm"):
        overdue = confirmations.read(opened.host, opened.state, "kube-scheduler.yaml")
        assert overdue is not None
        opened.apply(confirmations.disarm_change(opened.state, overdue, "dropped", "test"))
    record(soon(3600))
    gone = threading.Timer(0.4, lambda: confirm.confirm(open_node(settings, LocalHost()), "scheduler", "test"))
    gone.start()
    try:
        assert confirm.wait_due(open_node(settings, LocalHost()), "0123456789abcdef", 30) is False
    finally:
        gone.join()

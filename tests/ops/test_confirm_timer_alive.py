"""Issue 49: whether an arm's node-side timer can still revert it (``confirmations.timer_problem``),
the one rule ``status``, ``check`` and the metrics read an arm by. A timer process that died without
a reboot, a pid reused by another program, a systemd unit stopped by hand: dead, so nothing reverts
the change by itself (the lab test kills the real timer process: tests/ops/test_confirm_lab.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, List, Optional, Sequence

from cpctl.core import confirmations
from cpctl.core.confirmations import Arm
from cpctl.host.base import RunResult
from cpctl.host.local import LocalHost

OP = "00112233445566aa"
SHA = "0" * 64


def _arm(timer: str, pid: int = 0, unit: str = "") -> Arm:
    return Arm(OP, "kube-scheduler", "kube-scheduler.yaml", SHA, SHA, 3, "flags", "2026-01-01T00:00:00Z",
               "2026-01-01T00:05:00Z", "root", "m1", "m1", None, timer, unit=unit, pid=pid)


class _Systemctl(LocalHost):
    """This machine, except that ``systemctl is-active`` answers ``states`` (rc: 0 when one is active)."""

    def __init__(self, states: Optional[List[str]], rc: int = 0) -> None:
        super().__init__()
        self.states, self.rc = states, rc
        self.asked: List[List[str]] = []

    def run(self, argv: Sequence[str], timeout: float = 60.0, stdin: bytes = b"", env: Any = None,
            limit: Optional[int] = None) -> RunResult:
        self.asked.append(list(argv))
        if self.states is None:
            return RunResult(127, b"", b"systemctl: not found")
        return RunResult(self.rc, "".join(s + "\n" for s in self.states).encode(), b"")


def test_a_systemd_timer_is_alive_while_its_timer_or_service_is_active() -> None:
    unit = "cpctl-confirm-kube-scheduler"
    for states, rc, expected in ((["active", "inactive"], 0, ""), (["active", "activating"], 0, ""),
                                 (["inactive", "activating"], 0, ""),
                                 (["inactive", "inactive"], 3, "its systemd timer %s.timer is inactive" % unit),
                                 (["failed", "failed"], 3, "its systemd timer %s.timer is failed" % unit)):
        host = _Systemctl(states, rc)
        assert confirmations.timer_problem(host, _arm("systemd", unit=unit)) == expected, states
        assert host.asked == [["systemctl", "is-active", unit + ".timer", unit + ".service"]]
    # no systemctl answer: unknown, never "alive" and never "dead"
    assert confirmations.timer_problem(_Systemctl(None), _arm("systemd", unit=unit)) is None


def test_a_process_timer_is_alive_only_while_its_pid_runs_the_revert_of_this_arm() -> None:
    host = LocalHost()
    naming = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "revert-unconfirmed",
                               "kube-scheduler", "--op", OP])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", OP])
    try:
        assert confirmations.timer_problem(host, _arm("process", naming.pid)) == ""
        # a pid reused by a program that merely mentions the op is not the timer; nor is a process
        # that names another arm; pgrep finds the one that does run it (a boot entry's restart)
        assert not confirmations.process_reverts(host, other.pid, OP)
        assert not confirmations.process_reverts(host, naming.pid, "ffeeddccbbaa9988")
        assert confirmations.timer_problem(host, _arm("process", other.pid)) == ""
    finally:
        naming.kill()
        naming.wait()
    try:
        assert confirmations.timer_problem(host, _arm("process", other.pid)) == \
            "its revert process (pid %d) is gone" % other.pid
        assert confirmations.timer_problem(host, _arm("process", naming.pid)) == \
            "its revert process (pid %d) is gone" % naming.pid
    finally:
        other.kill()
        other.wait()
    assert confirmations.timer_problem(host, _arm("none")) is None      # names no timer: nothing to look at

"""The --confirm-check runs in a process group of its own that a Ctrl-C stops, even when the Ctrl-C
lands while the check is still being started (issue 44: on a busy machine the check's ``sleep``
was left running, its PID unknown to cpctl, because the KeyboardInterrupt came out of ``Popen``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, List

import pytest

from cpctl.ops import confirm


def _running(marker: str) -> List[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                if handle.read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _gone(marker: str) -> bool:
    """True once no ``sleep MARKER`` runs: SIGKILL to the group is delivered asynchronously, and a
    process the shell forked is not the one cpctl reaps, so this allows a busy machine 30 s."""
    deadline = time.monotonic() + 30
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(marker)


def test_a_ctrl_c_while_the_check_is_being_started_stops_the_check(monkeypatch: Any) -> None:
    real_popen = subprocess.Popen

    def popen_then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        proc = real_popen(*args, **kwargs)        # the check has started (exec done) ...
        os.kill(os.getpid(), signal.SIGINT)       # ... and the Ctrl-C lands before Popen is back
        time.sleep(0.2)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        confirm._run_here("sleep 37.25", 60)
    monkeypatch.setattr(subprocess, "Popen", real_popen)
    assert _gone("37.25"), "the check was left running"


def test_a_ctrl_c_while_the_check_runs_stops_it() -> None:
    import threading
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        confirm._run_here("sleep 37.5", 60)
    assert _gone("37.5")


def test_the_check_s_result_and_its_deadline() -> None:
    assert confirm._run_here("echo ok; exit 3", 30).rc == 3
    started = time.monotonic()
    result = confirm._run_here("sleep 37.75", 0.5)
    assert result.rc == 124 and result.stderr == b"timed out"
    assert _gone("37.75") and time.monotonic() - started < 40

"""Honest progress during long waits (issue #17): what is waited for, for how long, out of how long.

* on a terminal: one self-overwriting line, erased before the result, an error or the Ctrl-C
  message is written (a real pseudo-terminal as the command's stdout and stderr);
* without a terminal, in text mode: a heartbeat line on stderr every ~5 s of waiting;
* with ``-o json``: neither (stdout is the data; stderr only the error).

A lab whose kubelet is slow to stop pods (``stop_lag``) makes the waits long.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Optional

import pytest

from cpctl.cli.context import Progress

pytestmark = pytest.mark.timeout(180)
CLEAR = "\r\x1b[K"
HEARTBEAT = re.compile(r"^cpctl: waiting: pod kube-(scheduler|controller-manager)-lab-master1 still present \(api\): "
                       r"\d+s of 6s$")


def lab_env(lab: Any) -> Dict[str, str]:
    env = dict(os.environ, **lab.env)
    env.pop("CPCTL_PROBE", None)
    return env


def on_terminal(env: Dict[str, str], *args: str, interrupt_when: Optional[str] = None) -> "tuple[int, str]":
    """Run cpctl with a pseudo-terminal as stdout and stderr; everything it drew, and its exit
    code. ``interrupt_when``: send SIGINT to it as soon as that text was drawn."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "cpctl", *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave)
    os.close(slave)
    drawn, deadline = b"", time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:          # EIO: the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
            if interrupt_when and interrupt_when.encode() in drawn and proc.poll() is None:
                os.kill(proc.pid, signal.SIGINT)
                interrupt_when = None
    finally:
        os.close(master)
    return proc.wait(timeout=60), drawn.decode("utf-8", "replace")


def test_terminal_line_is_erased_before_result_error_and_interruption(lab_factory: Any) -> None:
    lab = lab_factory(stop_lag=2.0)
    env = lab_env(lab)

    code, drawn = on_terminal(env, "stop", "scheduler")
    assert code == 0, drawn
    assert re.search(r"waiting: pod kube-scheduler-lab-master1 still present \(api\): \ds of 120s", drawn), drawn
    assert CLEAR + "kube-scheduler: stopped (manifest parked) - pod kube-scheduler-lab-master1 gone" in drawn

    code, drawn = on_terminal(env, "stop", "controller-manager", "--timeout", "0.5")
    assert code == 6, drawn
    assert "of 0.5s" in drawn and CLEAR + "cpctl: timed out after " in drawn

    code, drawn = on_terminal(env, "start", "scheduler", "--no-wait")
    assert code == 0 and "waiting:" not in drawn, drawn
    code, drawn = on_terminal(env, "stop", "scheduler", interrupt_when="waiting: pod kube-scheduler-")
    assert code == 130, drawn
    assert CLEAR + "cpctl: interrupted (SIGINT) while waiting for pod kube-scheduler-lab-master1" in drawn
    # after the erase, nothing of the spinner is left on the last line
    assert drawn.rstrip("\r\n").rsplit(CLEAR, 1)[1].startswith("cpctl: interrupted")


def test_heartbeat_without_a_terminal_and_none_in_json(lab_factory: Any) -> None:
    lab = lab_factory(stop_lag=60.0)
    env = lab_env(lab)
    text = subprocess.run([sys.executable, "-m", "cpctl", "stop", "scheduler", "--timeout", "6"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 6 and text.stdout == "", text.stderr
    *beats, error = text.stderr.splitlines()
    assert beats and all(HEARTBEAT.match(line) for line in beats), text.stderr
    assert error.startswith("cpctl: timed out after 6s: pod kube-scheduler-lab-master1 still present (api)")

    data = subprocess.run([sys.executable, "-m", "cpctl", "-o", "json", "stop", "controller-manager",
                           "--timeout", "5.5"], env=env, capture_output=True, text=True, timeout=60)
    assert data.returncode == 6 and data.stdout == "", data.stdout
    assert len(data.stderr.splitlines()) == 1 and "waiting" not in data.stderr, data.stderr


def test_progress_line_text(monkeypatch: Any, capsys: Any) -> None:
    """The waiter's own elapsed time is used; the CLI adds the command's timeout."""
    progress = Progress(tty=False, timeout=120.0, interval=0.0)
    assert progress.line("pod x still present (api), 12.7s") == "waiting: pod x still present (api): 12s of 120s"
    assert Progress(tty=False).line("lease kube-system/x not renewed yet, 3.0s") == \
        "waiting: lease kube-system/x not renewed yet: 3s"
    progress("pod x still present (api), 0.1s")           # the first call starts the heartbeat clock
    progress("pod x still present (api), 0.2s")
    assert capsys.readouterr().err == "cpctl: waiting: pod x still present (api): 0s of 120s\n"


def test_a_line_interrupted_right_after_it_is_written_is_still_erased(monkeypatch: Any) -> None:
    """Ctrl-C lands the instant the line reached the terminal (before the draw returned): the
    error that follows must still start on an erased line (CI once saw it glued to the spinner)."""
    import io

    from cpctl.cli.context import clear_progress

    class Terminal(io.StringIO):
        interrupted = False

        def flush(self) -> None:
            if not self.interrupted:       # the first flush: what the SIGINT handler raises there
                self.interrupted = True
                raise KeyboardInterrupt

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with pytest.raises(KeyboardInterrupt):
        Progress(tty=True, timeout=120.0)("pod x still present (api), 0.1s")
    clear_progress()
    assert terminal.getvalue() == CLEAR + "/ waiting: pod x still present (api): 0s of 120s" + CLEAR

"""Ctrl-C and SIGTERM during a wait (issue #17): exit 130 and one stderr line that says where each
component was left - for stop, start and restart, on this machine and over SSH (fan-out).

Every case is a real ``cpctl`` subprocess against a lab whose kubelet takes long to stop a pod
(``stop_lag``), interrupted with ``os.kill`` on that subprocess's PID once its wait has begun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, Callable, Dict, List

import pytest

from tests.coreutil import check_result
from tests.remoteutil import REPO, clean_env, lab_vars, wait_until, write_inventory
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(180)
SLOW_STOP = 60.0            # the lab's kubelet takes this long to stop a pod: every stop wait is long
SCHEDULER = "kube-scheduler.yaml"
CONTROLLER = "kube-controller-manager.yaml"


def cpctl(env: Dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cpctl", *args], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupt(proc: subprocess.Popen, signum: int, waiting: Callable[[], bool]) -> subprocess.CompletedProcess:
    """Send ``signum`` to ``proc`` once ``waiting()`` says its wait has begun; its result."""
    wait_until(lambda: waiting() or proc.poll() is not None, timeout=60, what="the wait to begin")
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=60)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    check_result(result, 130)                  # exit 130, exactly one "cpctl:" line, no traceback
    return result


def local_env(lab: Any) -> Dict[str, str]:
    env = dict(os.environ, **lab.env)
    env.pop("CPCTL_PROBE", None)
    return env


@pytest.fixture
def slow_lab(lab_factory: Any) -> Any:
    return lab_factory(stop_lag=SLOW_STOP)


def parked(lab: Any, name: str, master: int = 1) -> bool:
    return os.path.exists(os.path.join(lab.state_dir(master), "parked", name))


def present(lab: Any, name: str, master: int = 1) -> bool:
    return os.path.exists(os.path.join(lab.manifests_dir(master), name))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stop_of_two_says_where_both_were_left(slow_lab: Any, signum: int) -> None:
    # stop order: the scheduler first; it is waited for (60 s) while the controller-manager is untouched
    proc = cpctl(local_env(slow_lab), "stop", "scheduler", "controller-manager")
    result = interrupt(proc, signum, lambda: parked(slow_lab, SCHEDULER))
    name = signal.Signals(signum).name
    assert "interrupted (%s)" % name in result.stderr
    assert "left: scheduler parked at %s" % os.path.join(slow_lab.state_dir(), "parked", SCHEDULER) in result.stderr
    assert "controller-manager in %s (not stopped)" % slow_lab.manifests_dir() in result.stderr
    assert parked(slow_lab, SCHEDULER) and present(slow_lab, CONTROLLER)
    assert result.stdout == ""


def test_start_interrupted_says_what_is_still_parked(slow_lab: Any) -> None:
    env = local_env(slow_lab)
    stopped = subprocess.run([sys.executable, "-m", "cpctl", "stop", "scheduler", "controller-manager",
                              "--no-wait"], env=env, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    # Both parks seen by the kubelet before the start (on a busy machine it may take seconds): a start
    # that comes first finds the old pods still running and keeps them, with no wait to interrupt.
    log = slow_lab.dir / "lab.log"
    wait_until(lambda: all("stopping pod kube-system/%s-%s " % (pod, slow_lab.node_name()) in log.read_text()
                           for pod in ("kube-scheduler", "kube-controller-manager")),
               timeout=60, what="the kubelet stopping both pods")
    # The old pods take 60 s to go: the restored manifest's new pod cannot be Ready before that.
    proc = cpctl(env, "start", "--all-parked")
    result = interrupt(proc, signal.SIGINT, lambda: present(slow_lab, CONTROLLER))
    assert "interrupted (SIGINT)" in result.stderr
    assert "kube-controller-manager in %s" % slow_lab.manifests_dir() in result.stderr
    assert "kube-scheduler parked at %s (not started)" % os.path.join(slow_lab.state_dir(), "parked", SCHEDULER) \
        in result.stderr
    assert present(slow_lab, CONTROLLER) and parked(slow_lab, SCHEDULER)


def test_restart_interrupted_puts_the_manifest_back(slow_lab: Any) -> None:
    proc = cpctl(local_env(slow_lab), "restart", "scheduler")
    result = interrupt(proc, signal.SIGTERM, lambda: parked(slow_lab, SCHEDULER))
    assert "restart of scheduler aborted, manifest restored" in result.stderr
    assert "left: scheduler in %s" % slow_lab.manifests_dir() in result.stderr
    assert present(slow_lab, SCHEDULER) and not parked(slow_lab, SCHEDULER)


# --- over SSH: the interruption reaches the host's run, which unwinds and says where it left things --

@pytest.fixture
def slow_fleet(sshd_many: List[SSHServer], lab_factory: Any, tmp_path: Any) -> Any:
    lab = lab_factory(masters=2, stop_lag=SLOW_STOP)
    hosts = {"master%d" % i: dict(host="master%d" % i, **lab_vars(lab, i)) for i in (1, 2)}
    inventory = write_inventory(str(tmp_path / "inventory.yaml"), hosts)
    env = clean_env(str(tmp_path / "home"))
    server = sshd_many[0]
    return lab, ["--ssh-config", server.ssh_config, "--known-hosts", server.known_hosts, "-i", inventory], env


def test_fanout_stop_interrupted(slow_fleet: Any) -> None:
    lab, remote, env = slow_fleet
    proc = cpctl(env, *remote, "stop", "scheduler")
    result = interrupt(proc, signal.SIGINT, lambda: parked(lab, SCHEDULER, 1))
    assert result.stderr.startswith("cpctl: master1: interrupted (SIGINT) while waiting for pod kube-scheduler-")
    assert "left: scheduler parked at %s" % os.path.join(lab.state_dir(1), "parked", SCHEDULER) in result.stderr
    assert "== master1: failed, error below ==" in result.stdout
    assert "== master2: skipped ==\nerror: not run: interrupted (SIGINT)" in result.stdout
    assert present(lab, SCHEDULER, 2) and parked(lab, SCHEDULER, 1)


def test_fanout_restart_terminated_restores_the_master(slow_fleet: Any) -> None:
    lab, remote, env = slow_fleet
    proc = cpctl(env, *remote, "restart", "scheduler")
    result = interrupt(proc, signal.SIGTERM, lambda: parked(lab, SCHEDULER, 1))
    assert "master1: restart of scheduler aborted, manifest restored" in result.stderr
    assert "interrupted (SIGTERM)" in result.stderr
    assert present(lab, SCHEDULER, 1) and not parked(lab, SCHEDULER, 1) and present(lab, SCHEDULER, 2)


def test_interruption_reaches_running_hosts_and_skips_the_rest(monkeypatch: Any) -> None:
    """In-process: the main thread's Ctrl-C is raised in the running host's thread at its next
    progress callback; hosts not started are skipped; no thread dies with a traceback."""
    import threading
    import time

    from cpctl.cli.fanout import _Interruption
    from cpctl.fleet.runner import run_parallel
    deaths: List[Any] = []
    monkeypatch.setattr(threading, "excepthook", deaths.append)
    interruption = _Interruption()
    started = threading.Event()

    def waits_forever(spec: str) -> Dict[str, Any]:
        started.set()
        while True:                       # a waiter polling: progress at every poll
            interruption.check("pod %s still present (api), 1.0s" % spec)
            time.sleep(0.01)

    tracked = interruption.track(waits_forever)
    runner = threading.Thread(target=run_parallel, args=(["a", "b", "c"], tracked), kwargs={"forks": 1}, daemon=True)
    runner.start()
    assert started.wait(10)
    results = interruption.stop(KeyboardInterrupt(), ["a", "b", "c"])
    assert [(r.host, r.status, r.code) for r in results] == [("a", "failed", 130), ("b", "skipped", None),
                                                             ("c", "skipped", None)]
    assert results[0].error == "interrupted (SIGINT)" and results[1].error == "not run: interrupted (SIGINT)"
    runner.join(10)
    assert not runner.is_alive() and deaths == []

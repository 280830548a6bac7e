"""Restart never leaves a component parked; standby instances on other masters; CLI hints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpctl_lab.control import start_lab
from tests.labfixture import FAST, kubectl
from tests.labfixture import run_cpctl as cpctl


def test_restart_restores_the_manifest_when_the_old_pod_does_not_go_away(tmp_path: Path) -> None:
    with start_lab(tmp_path / "lab", timeout=60, **dict(FAST, stop_lag=4.0)) as lab:
        proc = cpctl(lab.env, "restart", "scheduler", "--timeout", "1", "--reason", "certs renewed")
        assert proc.returncode == 6, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "restart of scheduler aborted, manifest restored" in lines[0]
        assert (Path(lab.manifests_dir(1)) / "kube-scheduler.yaml").exists()
        assert not (Path(lab.env["CPCTL_STATE_DIR"]) / "parked" / "kube-scheduler.yaml").exists()
        records = json.loads(cpctl(lab.env, "-o", "json", "history").stdout)["history"]
        assert [r["action"] for r in records] == ["stop", "start"]
        assert records[0]["reason"] == "certs renewed"
        assert records[1]["reason"].startswith("restart aborted: timed out")


def test_restart_records_the_reason_on_both_halves(lab) -> None:
    assert cpctl(lab.env, "restart", "controller-manager", "--reason", "certs renewed").returncode == 0
    records = json.loads(cpctl(lab.env, "-o", "json", "history").stdout)["history"]
    assert [(r["action"], r["reason"]) for r in records] == [("stop", "certs renewed"), ("start", "certs renewed")]


def test_standby_scheduler_is_checked_by_its_health_endpoint(lab3) -> None:
    holder = kubectl(lab3, "-n", "kube-system", "get", "lease", "kube-scheduler", "-o",
                     "jsonpath={.spec.holderIdentity}").stdout.strip()
    leader = holder.split("_")[0]
    standby = next(i for i in (1, 2, 3) if lab3.node_name(i) != leader)
    proc = cpctl(lab3.env_for(standby), "restart", "scheduler")
    assert proc.returncode == 0, proc.stderr
    assert "standby (lease kube-scheduler held by %s" % leader in proc.stdout
    assert "answers 200" in proc.stdout
    leader_index = next(i for i in (1, 2, 3) if lab3.node_name(i) == leader)
    proc = cpctl(lab3.env_for(leader_index), "restart", "scheduler")
    assert proc.returncode == 0, proc.stderr
    # The old leader's restart hands leadership to another master (the Lease moves), or the new
    # process wins it back: either way the gate names what it saw.
    assert "(this node)" in proc.stdout or "standby (lease kube-scheduler held by" in proc.stdout


def _interrupt_restart_while_waiting(tmp_path: Path, signum: int) -> None:
    import os
    import signal as signals
    import subprocess
    import sys
    import time
    # The kubelet takes 60 s to stop the pod: the signal lands inside the stop wait however busy the
    # machine is (it ends the wait; nothing here waits the 60 s).
    with start_lab(tmp_path / "lab", timeout=60, **dict(FAST, stop_lag=60.0)) as lab:
        env = dict(os.environ, **lab.env)
        env.pop("CPCTL_PROBE", None)
        proc = subprocess.Popen([sys.executable, "-m", "cpctl", "restart", "scheduler", "--timeout", "120"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        parked = Path(lab.env["CPCTL_STATE_DIR"]) / "parked" / "kube-scheduler.yaml"
        deadline = time.monotonic() + 20
        while not parked.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert parked.exists(), "the restart never parked the scheduler"
        time.sleep(0.3)                       # inside the wait for the old pod to go away
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        name = "SIGTERM" if signum == signals.SIGTERM else "SIGINT"
        assert proc.returncode == 130, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "restart of scheduler aborted, manifest restored" in lines[0], err
        assert "interrupted (%s)" % name in lines[0]
        assert (Path(lab.manifests_dir(1)) / "kube-scheduler.yaml").exists() and not parked.exists()
        records = json.loads(cpctl(lab.env, "-o", "json", "history").stdout)["history"]
        assert [r["action"] for r in records] == ["stop", "start"]
        assert records[1]["reason"] == "restart aborted: interrupted (%s)" % name


@pytest.mark.lab       # starts a lab (start_lab in _interrupt_restart_while_waiting)
def test_sigterm_during_a_restart_puts_the_manifest_back(tmp_path: Path) -> None:
    import signal
    _interrupt_restart_while_waiting(tmp_path, signal.SIGTERM)


@pytest.mark.lab       # starts a lab (start_lab in _interrupt_restart_while_waiting)
def test_ctrl_c_during_a_restart_puts_the_manifest_back(tmp_path: Path) -> None:
    import signal
    _interrupt_restart_while_waiting(tmp_path, signal.SIGINT)


def test_a_restarts_park_carries_a_deadline_so_a_killed_restart_is_found(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from cpctl.timeutil import parse_iso
    with start_lab(tmp_path / "lab", timeout=60, **dict(FAST, stop_lag=5.0)) as lab:
        env = dict(os.environ, **lab.env)
        env.pop("CPCTL_PROBE", None)
        started = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "cpctl", "restart", "scheduler", "--timeout", "20"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state = Path(lab.env["CPCTL_STATE_DIR"])
        parked, meta = state / "parked" / "kube-scheduler.yaml", state / "meta" / "kube-scheduler.yaml.json"
        deadline = time.monotonic() + 20
        while not parked.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)          # killed while waiting 5 s for the old pod to go
        proc.wait()
        assert parked.exists(), "killed inside the stop phase: the scheduler is parked"
        until = parse_iso(json.loads(meta.read_text())["until"])
        assert started + 2 * 20 + 60 - 2 <= until <= time.time() + 2 * 20 + 60 + 2
        status = json.loads(cpctl(lab.env, "-o", "json", "status", "scheduler").stdout)
        assert status["components"][0]["state"] == "parked" and status["components"][0]["until"]

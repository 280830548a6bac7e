"""Issue #3: a kubelet slower than --timeout -> exit 6, one stderr line with hints, and the
manifest left where cpctl put it (the intended state), with the change in the history.

One slow lab (5 s start and stop lags) is shared by the module: starting it costs the lag once.
Each test brings the scheduler into the state it needs, so either can run alone.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cpctl_lab.control import LabHandle, start_lab
from tests.labfixture import mirror, wait_for
from tests.labfixture import run_cpctl as cpctl

SLOW = {"start_lag": 5.0, "ready_lag": 0.05, "stop_lag": 5.0, "file_check_frequency": 1.0, "lease_renew": 0.2}


@pytest.fixture(scope="module")
def slow_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with start_lab(tmp_path_factory.mktemp("slowlab") / "lab", timeout=90, **SLOW) as handle:
        yield handle


def timed_out(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 6, "rc %d: %s%s" % (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cpctl: timed out after 1s: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def history(handle: LabHandle) -> list:
    proc = cpctl(handle, "-o", "json", "history", "scheduler")
    assert proc.returncode == 0, proc.stderr
    return [r["action"] for r in json.loads(proc.stdout)["history"]]


def scheduler_files(handle: LabHandle) -> tuple:
    live = handle.manifests_dir() / "kube-scheduler.yaml"
    parked = handle.state_dir() / "parked" / "kube-scheduler.yaml"
    return live.is_file(), Path(parked).is_file()


def test_stop_timeout(slow_lab):
    if scheduler_files(slow_lab) != (True, False):
        assert cpctl(slow_lab, "start", "scheduler", "--timeout", "60").returncode == 0
    wait_for(lambda: (mirror(slow_lab, "kube-scheduler") or {}).get("status", {}).get("phase") == "Running",
             30, "scheduler running")
    before = history(slow_lab)

    line = timed_out(cpctl(slow_lab, "stop", "scheduler", "--timeout", "1"))
    assert "pod kube-scheduler-%s still present (api)" % slow_lab.node_name() in line
    assert "(hint: journalctl -u kubelet -n 50; crictl ps -a --name '^kube-scheduler$'" in line
    # the park happened and stays: exit 6 means "the kubelet is slow", not "rolled back"
    assert scheduler_files(slow_lab) == (False, True)
    assert history(slow_lab) == before + ["stop"]
    status = json.loads(cpctl(slow_lab, "-o", "json", "status", "scheduler").stdout)
    assert status["components"][0]["state"] == "parked"
    # the kubelet does get there eventually
    wait_for(lambda: mirror(slow_lab, "kube-scheduler") is None, 30, "scheduler mirror gone")


def test_start_timeout(slow_lab):
    if scheduler_files(slow_lab) != (False, True):
        assert cpctl(slow_lab, "--probe", "none", "stop", "scheduler").returncode == 0
    wait_for(lambda: mirror(slow_lab, "kube-scheduler") is None, 30, "scheduler mirror gone")
    before = history(slow_lab)

    line = timed_out(cpctl(slow_lab, "start", "scheduler", "--timeout", "1"))
    assert "pod kube-scheduler-%s " % slow_lab.node_name() in line
    assert "(hint: journalctl -u kubelet -n 50; crictl ps -a --name '^kube-scheduler$'" in line
    # the manifest is restored (the intended state) and the start is on record
    assert scheduler_files(slow_lab) == (True, False)
    assert history(slow_lab) == before + ["start"]
    wait_for(lambda: (mirror(slow_lab, "kube-scheduler") or {}).get("status", {}).get("phase") == "Running",
             30, "scheduler running after the lag")
    proc = cpctl(slow_lab, "start", "scheduler", "--timeout", "1")
    assert proc.returncode == 0 and "already running" in proc.stdout, proc.stderr

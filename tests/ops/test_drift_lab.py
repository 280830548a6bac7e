"""Mirror pod checks of ``cpctl check`` against the lab (simulated kubelet + API server)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Iterator

import pytest

from cpctl_lab.control import LabHandle, start_lab
from tests.coreutil import CLI
from tests.labfixture import FAST, wait_for

# Slow kubelet reactions so "not Ready yet" and "mirror still there" can be observed.
SLOW = dict(FAST, start_lag=3.0, ready_lag=1.0, stop_lag=3.0)


@pytest.fixture
def slow_lab(tmp_path: Any) -> Iterator[LabHandle]:
    with start_lab(tmp_path / "lab", masters=1, **SLOW) as handle:
        if handle.state_dir().exists():   # older labs created it 0755, which check (rightly) reports
            os.chmod(handle.state_dir(), 0o700)
        yield handle


def cpctl(handle: LabHandle, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **handle.env)
    return subprocess.run(CLI + list(args), env=env, capture_output=True, text=True, timeout=60)


def check(handle: LabHandle) -> tuple:
    proc = cpctl(handle, "--probe", "api", "-o", "json", "check")
    assert "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    return proc.returncode, {f["kind"]: f for f in data["findings"]}


def test_mirror_pod_checks(slow_lab: LabHandle) -> None:
    node = slow_lab.node_name()
    wait_for(lambda: check(slow_lab)[0] == 0, timeout=15, what="a settled lab to check clean")
    rc, found = check(slow_lab)
    assert "check_skipped" not in found and "mirror_not_ready" not in found
    proc = cpctl(slow_lab, "--probe", "none", "-o", "json", "check")
    skipped = [f for f in json.loads(proc.stdout)["findings"] if f["kind"] == "check_skipped"]
    assert proc.returncode == 0 and skipped[0]["severity"] == "info"
    assert cpctl(slow_lab, "stop", "scheduler", "--no-wait").returncode == 0
    rc, found = check(slow_lab)
    assert rc == 1 and found["mirror_of_parked"]["component"] == "kube-scheduler"
    assert "kube-scheduler-%s" % node in found["mirror_of_parked"]["message"]
    wait_for(lambda: check(slow_lab)[0] == 0, timeout=15, what="the old mirror pod gone")
    assert cpctl(slow_lab, "start", "scheduler", "--no-wait").returncode == 0
    rc, found = check(slow_lab)
    assert rc == 1 and found["mirror_not_ready"]["component"] == "kube-scheduler"
    wait_for(lambda: check(slow_lab)[0] == 0, timeout=20, what="the scheduler back and Ready")


def test_a_stray_defining_a_running_pod_is_moved_only_with_allow_restart(tmp_path: Any) -> None:
    """Moving kube-scheduler.yaml.bak (a copy of the manifest) makes the kubelet drop the scheduler
    until its next full re-list; check --fix --remove-strays must not do that unannounced."""
    from tests.labfixture import is_ready, mirror
    with start_lab(tmp_path / "lab", masters=1, **dict(FAST, file_check_frequency=60.0)) as handle:
        manifests = str(handle.manifests_dir())
        with open(os.path.join(manifests, "kube-scheduler.yaml"), "rb") as src:
            data = src.read()
        with open(os.path.join(manifests, "kube-scheduler.yaml.bak"), "wb") as copy:
            copy.write(data)
        refused = cpctl(handle, "-o", "json", "check", "--fix", "--remove-strays")
        assert refused.returncode == 1, refused.stderr
        [action] = [a for a in json.loads(refused.stdout)["actions"] if a["action"] == "move-stray"]
        assert not action["ok"] and "--allow-restart" in action["message"]
        assert "until its next full re-list (up to 60s)" in action["message"]
        assert os.path.exists(os.path.join(manifests, "kube-scheduler.yaml.bak"))

        before = mirror(handle, "kube-scheduler")
        moved = cpctl(handle, "-o", "json", "check", "--fix", "--remove-strays", "--allow-restart", "--timeout", "20")
        [action] = [a for a in json.loads(moved.stdout)["actions"] if a["action"] == "move-stray"]
        assert action["ok"] and "Running and Ready" in action["message"], action
        assert not os.path.exists(os.path.join(manifests, "kube-scheduler.yaml.bak"))
        back = mirror(handle, "kube-scheduler")
        # Back well before the 60 s re-list: the kubelet re-read kube-scheduler.yaml at once.
        assert is_ready(back) and back["metadata"]["uid"] != before["metadata"]["uid"]
        records = json.loads(cpctl(handle, "-o", "json", "history").stdout)["history"]
        assert [r["action"] for r in records] == ["move-stray"]


def _apiserver_findings(handle: Any, *args: str, **env: str) -> tuple:
    """(exit code, data, the findings about kube-apiserver.yaml) of ``check`` with ``args``."""
    from tests.labfixture import run_cpctl
    proc = run_cpctl(handle, *args, "-o", "json", "check", **env)
    assert "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    return proc.returncode, data, [f for f in data["findings"] if f.get("file") == "kube-apiserver.yaml"]


def test_check_never_says_ok_about_a_pod_it_could_not_see(lab_factory: Any) -> None:
    """Issue 49: someone else writes an unknown flag into kube-apiserver.yaml, so the API server
    crash-loops and this (single, local-mode) master's API goes away; cpctl has no crictl
    (``CPCTL_CRICTL`` names a missing file). ``check`` said "OK: no drift" while ``status`` said
    ``absent``: check never marked the API server's view stale (status did), so the API probe could
    not look and the pod was skipped. Now check judges by status's rule (the health endpoint, the
    API's view being stale) and reports it, never OK; a pod nothing can see is ``unknown``
    (tests/ops/test_drift.py)."""
    from tests.labfixture import kubectl, run_cpctl
    lab = lab_factory(local_mode=True, k8s_version="1.33")
    path = os.path.join(str(lab.manifests_dir()), "kube-apiserver.yaml")
    with open(path, "rb") as handle:
        data = handle.read()
    assert b"    - kube-apiserver\n" in data
    with open(path + ".tmp", "wb") as handle:
        handle.write(data.replace(b"    - kube-apiserver\n", b"    - kube-apiserver\n    - --no-such-flag=1\n", 1))
    os.rename(path + ".tmp", path)          # another writer's change, as kubelet-safe as cpctl's
    missing = os.path.join(str(lab.root_dir()), "no-crictl-here")

    def down() -> bool:
        proc = run_cpctl(lab, "-o", "json", "status", "apiserver", CPCTL_CRICTL=missing)
        return proc.returncode == 0 and json.loads(proc.stdout)["components"][0]["pod_state"] != "running" \
            and kubectl(lab, "--request-timeout", "2s", "get", "--raw", "/healthz", check=False).returncode != 0
    # the kubelet replaces the API server with a container that cannot start (the lab checks its
    # flags): this single master's API stops answering once the old one is gone
    wait_for(down, 90, "the API server down and the API not answering")
    variants = ((("--probe", "api"), {"CPCTL_CRICTL": missing}), ((), {"CPCTL_CRICTL": missing}), ((), {}))
    for run in range(9):
        args, env = variants[run % 3]
        rc, data, found = _apiserver_findings(lab, *args, **env)
        kinds = {f["kind"] for f in found}
        for finding in found:
            if finding["kind"] == "unknown":
                assert finding["severity"] == "warning" and finding["why"], finding
                assert finding["message"].startswith("kube-apiserver.yaml: pod kube-apiserver-%s could not be "
                                                     "judged: " % lab.node_name()), finding
        if run % 3 != 2:        # without crictl: judged by the health endpoint (the API's view is stale), never OK
            assert rc != 0 and kinds & {"unknown", "mirror_not_ready"}, (run, args, env, data)
            proc = run_cpctl(lab, *args, "check", **env)
            assert "OK: no drift" not in proc.stdout and proc.returncode != 0, (run, proc.stdout)
        else:                   # crictl sees the container as it stands (it may be between two crashes)
            assert "unknown" not in kinds, (run, args, env, found)
    prom = os.path.join(str(lab.root_dir()), "cpctl.prom")
    run_cpctl(lab, "--probe", "api", "check", "--prometheus-textfile", prom, CPCTL_CRICTL=missing)
    with open(prom) as handle:
        text = handle.read()
    assert "cpctl_api_view_stale 1" in text, text      # the rule status and the waits judge by

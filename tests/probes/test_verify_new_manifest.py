"""The new version is judged by the NEW manifest (issue #21, item 2): its health endpoint, its
Lease and --leader-elect, its own startupProbe budget as the default time limit."""

from __future__ import annotations

import os
import socket
from typing import Any

import yaml

from cpctl.ops import edits
from tests.labfixture import is_ready, mirror, run_cpctl, wait_for


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_new_health_port_and_no_leader_election_are_accepted(lab: Any, tmp_path: Any) -> None:
    """--secure-port and the probes move, --leader-elect=false: the old manifest's Lease and port
    would fail a healthy scheduler; judged by the new one it passes through its own endpoint."""
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    path = os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")
    old_port, new_port = lab.ports()["scheduler"], _free_port()
    with open(path, "rb") as handle:
        text = handle.read().decode()
    new = text.replace(str(old_port), str(new_port)).replace("--leader-elect=true", "--leader-elect=false")
    assert new.count(str(new_port)) == 3
    source = os.path.join(str(tmp_path), "new.yaml")
    with open(source, "w") as handle:
        handle.write(new)
    proc = run_cpctl(lab, "apply", "scheduler", "-f", source, "--timeout", "30", "--settle", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no leader election" in proc.stdout and ":%d/healthz answers 200" % new_port in proc.stdout, proc.stdout
    # and back: the rollback is judged by the manifest it restores (Lease renewed again)
    back = run_cpctl(lab, "rollback", "scheduler", "--timeout", "30", "--settle", "1")
    assert back.returncode == 0, back.stdout + back.stderr
    assert "lease kube-scheduler renewed" in back.stdout, back.stdout


def test_startup_probe_budget_is_the_default_limit_and_timeout_wins() -> None:
    """kubeadm's API server: 10 + 24 x 10 = 250 s; --timeout still decides when given."""
    pod = yaml.safe_load("""
spec:
  containers:
  - name: a
    startupProbe: {initialDelaySeconds: 10, failureThreshold: 24, periodSeconds: 10, httpGet: {port: 1}}
  - name: b
    startupProbe: {httpGet: {port: 2}}
""")
    assert edits.startup_budget(pod) == 250.0
    assert edits.wait_limit(edits.ApplyOptions(), pod) == 250.0
    assert edits.wait_limit(edits.ApplyOptions(timeout=7), pod) == 7
    assert edits.wait_limit(edits.ApplyOptions(), {"spec": {"containers": [{"name": "c"}]}}) == edits.DEFAULT_TIMEOUT
    assert edits.startup_budget({"spec": {"containers": [{"startupProbe": {"httpGet": {}}}]}}) == 30.0


def test_the_progress_line_shows_the_limit_the_wait_uses() -> None:
    """The wait names its own limit (the startupProbe budget when no --timeout was given) and the
    progress line shows that one, not the command's --timeout."""
    from cpctl.cli.context import Progress
    from cpctl.host.local import LocalHost
    from cpctl.probes.gates import Clock
    from cpctl.probes.waiter import VerifyingWaiter
    lines: list = []
    waiter = VerifyingWaiter(LocalHost(), "/nonexistent/kubeconfig", progress=lines.append, poll=0.0)
    waiter._pause(Clock(250.0), "pod kube-apiserver-cp1 not Ready (crictl)")
    assert lines[-1].endswith("s of 250s"), lines
    assert Progress(tty=False, timeout=None).line(lines[-1]) == \
        "waiting: pod kube-apiserver-cp1 not Ready (crictl): 0s of 250s"
    assert Progress(tty=False, timeout=120.0).line("pod x gone, 3.0s") == "waiting: pod x gone: 3s of 120s"

"""Issue #3: ``cpctl bind`` / ``cpctl pending`` against the lab - real CLI, real kubectl.

Every failure must be one ``cpctl:`` line on stderr with the documented exit code: 3 not found,
2 bad names, 10 already bound, 7 bad kubeconfig, 9 API down or answering with an error.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import subprocess

import pytest

from cpctl_lab.httpserve import free_port
from tests.coreutil import failure_line
from tests.labfixture import kubectl, lab  # noqa: F401
from tests.labfixture import run_cpctl as cpctl


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, "rc %d: %s%s" % (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == "", proc.stderr
    return proc.stdout


def fails(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, "rc %d (want %d): %s%s" % (proc.returncode, code, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and failure_line(lines[0], proc.returncode), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


def node_of(handle, pod: str, namespace: str = "default") -> str:
    return kubectl(handle, "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").stdout.strip()


@pytest.fixture
def pending_lab(lab):
    """The lab with its scheduler stopped and one Pending pod ``p1`` in ``default``."""
    ok(cpctl(lab, "stop", "scheduler"))
    kubectl(lab, "run", "p1", "--image=httpd:2.4-alpine")
    return lab


def test_bind_not_found_and_bad_names(pending_lab):
    lab, master = pending_lab, pending_lab.node_name()
    line = fails(cpctl(lab, "bind", "nosuchpod", "--node", master), 3)
    assert "pod default/nosuchpod not found" in line
    line = fails(cpctl(lab, "bind", "p1", "--node", "no-such-node"), 3)
    assert "node 'no-such-node' not found" in line
    for args in (["bad/name", "--node", master], ["p1", "--node", "../etc"], ["p1", "--node", master, "-n", "a b"],
                 ["p1", "--node", master, "-n", ".."]):
        fails(cpctl(lab, "bind", *args), 2)
    fails(cpctl(lab, "bind", "p1"), 2)   # --node is required
    # nothing above touched the pod
    assert node_of(lab, "p1") == ""


def test_bind_wait_then_already_bound(pending_lab):
    lab, master = pending_lab, pending_lab.node_name()
    data = json.loads(ok(cpctl(lab, "-o", "json", "bind", "p1", "--node", master, "--wait", "--timeout", "60")))
    assert data == {"pod": "p1", "namespace": "default", "node": master, "phase": "Running", "changed": True,
                    "dry_run": False, "would_change": True, "host": None}   # host: null on this machine (issue 48)
    phase = kubectl(lab, "get", "pod", "p1", "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Running" and node_of(lab, "p1") == master
    line = fails(cpctl(lab, "bind", "p1", "--node", lab.worker), 10)
    assert "already bound to node %s" % master in line
    assert node_of(lab, "p1") == master


def test_bind_in_a_namespace(pending_lab):
    lab = pending_lab
    kubectl(lab, "create", "namespace", "team")
    kubectl(lab, "-n", "team", "run", "p2", "--image=httpd:2.4-alpine")
    rows = json.loads(ok(cpctl(lab, "-o", "json", "pending", "-n", "team")))["pending"]
    assert [(r["namespace"], r["name"]) for r in rows] == [("team", "p2")]
    every = json.loads(ok(cpctl(lab, "-o", "json", "pending")))["pending"]
    assert sorted((r["namespace"], r["name"]) for r in every) == [("default", "p1"), ("team", "p2")]
    fails(cpctl(lab, "bind", "p2", "--node", lab.worker), 3)   # default namespace has no p2
    out = ok(cpctl(lab, "bind", "p2", "--node", lab.worker, "--namespace", "team"))
    assert out.startswith("pod team/p2 bound to node %s" % lab.worker)
    assert node_of(lab, "p2", "team") == lab.worker
    assert ok(cpctl(lab, "pending", "-n", "team")).strip() == "(no pending pods)"


def test_bind_bad_kubeconfig_and_api_down(lab, tmp_path):
    master = lab.node_name()
    garbage = tmp_path / "garbage.conf"
    garbage.write_text("{{{ not: yaml: [")
    closed = tmp_path / "closed.conf"
    closed.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:%d'}}]\n"
        "contexts: [{name: c, context: {cluster: k}}]\nusers: []\n" % free_port()
    )
    line = fails(cpctl(lab, "bind", "p1", "--node", master, KUBECONFIG=str(tmp_path / "missing.conf")), 7)
    assert "cannot read kubeconfig %s" % (tmp_path / "missing.conf") in line and "hint:" in line
    line = fails(cpctl(lab, "bind", "p1", "--node", master, KUBECONFIG=str(garbage)), 7)
    assert "not valid YAML" in line
    line = fails(cpctl(lab, "bind", "p1", "--node", master, KUBECONFIG=str(closed)), 9)
    assert "unreachable" in line
    fails(cpctl(lab, "pending", KUBECONFIG=str(closed)), 9)
    fails(cpctl(lab, "--kubeconfig", str(garbage), "pending"), 7)   # the option, not only the variable

    # etcd down: the API answers 500
    ok(cpctl(lab, "stop", "etcd"))
    line = fails(cpctl(lab, "bind", "p1", "--node", master), 9)
    assert "500" in line and "etcdserver" in line
    ok(cpctl(lab, "start", "etcd"))
    # the apiserver parked: connection refused
    ok(cpctl(lab, "stop", "apiserver"))
    line = fails(cpctl(lab, "bind", "p1", "--node", master), 9)
    assert "unreachable" in line and "refused" in line.lower()
    fails(cpctl(lab, "pending"), 9)
    ok(cpctl(lab, "start", "apiserver"))
    assert "(no pending pods)" in ok(cpctl(lab, "pending"))

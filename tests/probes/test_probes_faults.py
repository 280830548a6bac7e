"""Issue #13/#16: a wait fails only as a wait - the verifying waiter facing the lab's API faults.

Every probe error, malformed answer or hang is "this probe could not look" for one poll: with
crictl at hand the wait is verified by the runtime (and says the API could not look); with the
API alone it ends "not verified" within its timeout (plus a fraction of a second, measured) -
never "gone" for a pod no probe saw, never an exception (exit 70/9) nor a hang. The waiter is
driven directly (the manifest renamed out and back, as the core's park and restore do) and
through the real CLI.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpctl.agent import rpc
from cpctl.host.local import LocalHost
from cpctl.probes.base import PodTarget
from cpctl.probes.waiter import VerifyingWaiter
from cpctl_lab.control import LabHandle
from tests.labfixture import kubectl, lab, mirror, wait_for  # noqa: F401
from tests.labfixture import run_cpctl as cpctl

SLACK = 0.8   # what a wait may overrun its timeout by on a loaded 2-core machine (measured: ~0.2 s)


def waiter(handle: LabHandle, mode: str = "auto", **options: Any) -> VerifyingWaiter:
    rpc.reset()   # no connection kept alive from an earlier wait
    return VerifyingWaiter(LocalHost(), handle.kubeconfig, crictl=handle.crictl, mode=mode, **options)


def target(handle: LabHandle, component: str = "kube-scheduler") -> PodTarget:
    pod = yaml.safe_load((handle.manifests_dir() / ("%s.yaml" % component)).read_text())
    return PodTarget(component, "kube-system", handle.node_name(), pod, "%s.yaml" % component)


def park(handle: LabHandle, tmp_path: Path, component: str = "kube-scheduler") -> None:
    (handle.manifests_dir() / ("%s.yaml" % component)).rename(tmp_path / ("%s.yaml" % component))


def restore(handle: LabHandle, tmp_path: Path, component: str = "kube-scheduler") -> None:
    (tmp_path / ("%s.yaml" % component)).rename(handle.manifests_dir() / ("%s.yaml" % component))


def mirror_rule(handle: LabHandle, component: str = "kube-scheduler", **rule: Any) -> dict:
    return dict(rule, path="^/api/v1/namespaces/kube-system/pods/%s-%s$" % (component, handle.node_name()))


API_FAULTS = [
    {"action": "status", "code": 403},
    {"action": "status", "code": 429, "retry_after": 1},
    {"action": "html"},
    {"action": "body", "json": ["a", "list"]},
    {"action": "reset"},
]


@pytest.mark.parametrize("fault", API_FAULTS, ids=["403", "429", "html", "list", "reset"])
def test_crictl_verifies_while_the_api_misbehaves(lab, tmp_path, fault):
    lab.inject_faults([mirror_rule(lab, **fault)])
    w, t = waiter(lab), target(lab)
    before = w.before(t)
    park(lab, tmp_path)
    result = w.wait_stopped(t, before, 15)
    assert result.verified and "gone (crictl)" in result.detail and result.detail.endswith("api could not look")
    before = w.before(t)
    assert before["gates"]["lease"].lease is not None
    # the Lease answers 503 three times after the restore: the gate polls on, it does not give up
    lab.inject_faults([mirror_rule(lab, **fault),
                       {"path": "/leases/kube-scheduler$", "action": "status", "code": 503, "times": 3}])
    restore(lab, tmp_path)
    result = w.wait_started(t, before, 15)
    assert result.verified, result.detail
    assert "Running and Ready (crictl), lease kube-scheduler renewed by %s_" % lab.node_name() in result.detail
    assert [r["hits"] for r in lab.faults()][1] == 3


@pytest.mark.parametrize("fault", [
    {"action": "hang"},
    {"action": "drip", "interval": 0.2},
    {"action": "html", "code": 404},                       # a proxy's "not found" page: not the pod's absence
    {"action": "body", "code": 404, "json": {"kind": "Status", "reason": "NotFound",
                                             "details": {"name": "someone-else"}}},
], ids=["hang", "drip", "404-html", "404-other-object"])
def test_the_api_alone_is_not_verified_within_the_timeout(lab, tmp_path, fault):
    w, t = waiter(lab, mode="api"), target(lab)
    before = w.before(t)
    assert before["probe"] == "api" and before["state"].present
    lab.inject_faults([mirror_rule(lab, **fault)])
    park(lab, tmp_path)
    started = time.monotonic()
    result = w.wait_stopped(t, before, 1.0)
    took = time.monotonic() - started
    assert not result.verified and "gone" not in result.detail
    assert result.detail.startswith("not verified: no probe could observe the pod (api: API ")
    assert 0.95 <= took < 1.0 + SLACK, took
    before = w.before(t)
    restore(lab, tmp_path)
    started = time.monotonic()
    result = w.wait_started(t, before, 1.0)
    assert not result.verified and "Running" not in result.detail and time.monotonic() - started < 1.0 + SLACK


def test_a_blind_moment_does_not_end_a_wait(lab, tmp_path):
    """Errors are per poll: the API failing for a while, then answering, is still verified by it."""
    w, t = waiter(lab, mode="api"), target(lab)
    before = w.before(t)
    lab.inject_faults([mirror_rule(lab, action="status", code=503, times=20)])
    park(lab, tmp_path)
    result = w.wait_stopped(t, before, 30)
    assert result.verified and result.detail.startswith("pod %s gone (api)" % t.mirror_name), result.detail
    assert lab.faults()[0]["hits"] == 20


def test_a_canary_that_cannot_be_created_is_not_verified(lab, tmp_path):
    from cpctl.ops.canary import CanaryGate
    w, t = waiter(lab), target(lab)
    w.add_gate(CanaryGate())
    park(lab, tmp_path)
    wait_for(lambda: mirror(lab, "kube-scheduler") is None, 10, "scheduler gone")
    lab.inject_faults([{"method": "POST", "path": "^/api/v1/namespaces/default/pods$", "action": "status",
                        "code": 500}])
    before = w.before(t)
    restore(lab, tmp_path)
    result = w.wait_started(t, before, 15)
    assert not result.verified and "Running and Ready (api)" in result.detail
    assert "canary not verified: pod default/cpctl-canary-" in result.detail and "500" in result.detail
    lab.clear_faults()
    pods = json.loads(kubectl(lab, "get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=cpctl",
                              "-o", "json").stdout)["items"]
    assert pods == []


def test_describe_asks_a_hanging_api_once(lab, monkeypatch):
    # The runtime's view must come within describe's budget: 5 s, of which the hanging API takes 3 s.
    # The lab's crictl is a Python program (a real one is a Go binary): with both cores busy its four
    # answers took over 5 s and describe rightly said it could not look (None). What this test judges
    # is how often the hanging API is asked, so the budget is one no load reaches.
    monkeypatch.setattr("cpctl.probes.waiter.DESCRIBE_BUDGET", 120.0)
    lab.inject_faults([{"path": "^/api/v1/namespaces/kube-system/pods/", "action": "hang"}])
    w = waiter(lab)
    components = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
    states = [w.describe(target(lab, c)) for c in components]
    assert all(s is not None and s["source"] == "crictl" and s["present"] for s in states), states
    # the API is given its 3 s once, then skipped; it used to be asked (3 s) for every pod. Counted by
    # the lab, whatever the load (a wall-clock bound failed on a busy machine)
    assert [rule["hits"] for rule in lab.clear_faults()] == [1]


# --- through the CLI: exit codes ---------------------------------------------------------------------
def test_cli_stop_start_and_status_survive_a_hostile_api(lab):
    lab.inject_faults([mirror_rule(lab, action="status", code=403),
                       mirror_rule(lab, "kube-controller-manager", action="body", json=["a", "list"])])
    proc = cpctl(lab, "stop", "scheduler")
    assert proc.returncode == 0, proc.stderr   # was: exit 9, "API GET ...: 403"
    assert "gone (crictl)" in proc.stdout and "api could not look" in proc.stdout
    # status lists the node's pods first (issue 38): a hostile list leaves each pod to its GET
    lab.inject_faults([mirror_rule(lab, action="status", code=403),
                       mirror_rule(lab, "kube-controller-manager", action="body", json=["a", "list"]),
                       {"path": "^/api/v1/namespaces/kube-system/pods$", "query": "fieldSelector=",
                        "action": "body", "json": {"kind": "PodList", "items": "not a list"}}])
    proc = cpctl(lab, "-o", "json", "status")
    assert proc.returncode == 0, proc.stderr   # was: exit 70, AttributeError on a list
    rows = {c["component"]: c for c in json.loads(proc.stdout)["components"]}
    assert rows["kube-controller-manager"]["observed"]["source"] == "crictl"
    assert [rule["hits"] for rule in lab.faults()][2] == 1
    proc = cpctl(lab, "start", "scheduler")
    assert proc.returncode == 0 and "Running and Ready (crictl)" in proc.stdout, proc.stderr
    lab.inject_faults([mirror_rule(lab, action="drip", interval=0.5)])
    started = time.monotonic()
    proc = cpctl(lab, "--probe", "api", "stop", "scheduler", "--timeout", "2")
    assert proc.returncode == 0, proc.stderr
    assert "not verified: no probe could observe the pod (api: " in proc.stdout
    # bounded: the drip is cut at the deadline (before <= 3 s, the 2 s wait, start-up: ~6 s quiet); a drip
    # that was not cut would run as long as the fault drips. The margin is a busy machine's, not a speed.
    assert time.monotonic() - started < 30, time.monotonic() - started

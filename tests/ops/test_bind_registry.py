"""Issue #13/#16: ``cpctl bind`` tells the pod registry's refusals apart; ``cpctl pending`` shows gated pods.

The registry (pkg/registry/core/pod/storage/storage.go) refuses a binding with 409 when the pod
is being deleted, is already assigned to a node, or still has ``spec.schedulingGates`` (1.27+);
400 when the URL and Binding names differ; 404 when the pod is gone. cpctl checks the same things
first, in the registry's order, and when the registry still refuses (the pod changed between the
checks and the POST: replayed here with the lab's fault injection, in the registry's own words)
each 409 gets its own message. A gated pod waits for its gates, not for a scheduler.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from cpctl.errors import CpctlError, ExitCode
from tests.coreutil import failure_line
from tests.labfixture import api, get_pod, lab  # noqa: F401
from tests.labfixture import run_cpctl as cpctl

PODS = "/api/v1/namespaces/default/pods"


def refused(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, "rc %d (want %d): %s%s" % (proc.returncode, code, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and failure_line(lines[0], proc.returncode), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def pending_pod(handle: Any, name: str, **spec: Any) -> dict:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": dict({"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox:1.36"}]}, **spec)}
    code, pod = api(handle, "POST", PODS, body)
    assert code == 201, pod
    return pod


def binding_409(message: str) -> dict:
    return {"method": "POST", "path": "/pods/p1/binding$", "action": "status", "code": 409, "reason": "Conflict",
            "message": message}


def test_precheck_refusals_in_the_registry_s_order(lab):
    pending_pod(lab, "gated", schedulingGates=[{"name": "example.com/wait"}, {"name": "other"}])
    line = refused(cpctl(lab, "bind", "gated", "--node", lab.worker), 10)
    assert "pod default/gated has scheduling gates (example.com/wait, other)" in line
    assert "spec.schedulingGates" in line
    pending_pod(lab, "dying")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "dying"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "no-such-node"}}
    assert api(lab, "POST", PODS + "/dying/binding", binding)[0] == 201
    assert api(lab, "DELETE", PODS + "/dying", {"gracePeriodSeconds": 30})[0] == 200   # no kubelet: Terminating
    line = refused(cpctl(lab, "bind", "dying", "--node", lab.worker), 10)
    assert "pod default/dying is being deleted" in line   # checked before "already bound", as the registry does
    assert not get_pod(lab, "default", "gated")["spec"].get("nodeName")


@pytest.mark.parametrize("message,code,words", [
    ('Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "lab-master1"', 10,
     "pod default/p1 was bound to node lab-master1 by someone else meanwhile"),
    ('Operation cannot be fulfilled on pods/binding "p1": pod p1 is being deleted, cannot be assigned to a host',
     10, "pod default/p1 is being deleted (since after the checks)"),
    ('Operation cannot be fulfilled on pods/binding "p1": pod p1 has non-empty .spec.schedulingGates', 10,
     "pod default/p1 got scheduling gates meanwhile"),
    ('Operation cannot be fulfilled on pods "p1": StorageError: invalid object, Code: 4, AdditionalErrorMsg: '
     "Precondition failed: UID in precondition: a, UID in object meta: b", 10,
     "pod default/p1 was deleted and re-created meanwhile"),
    ("something else entirely", 10, "the API refused the binding of pod default/p1 (409): something else"),
])
def test_the_registry_s_409s_are_told_apart(lab, message, code, words):
    pending_pod(lab, "p1")
    lab.inject_faults([binding_409(message)])
    line = refused(cpctl(lab, "bind", "p1", "--node", lab.worker), code)
    assert words in line, line


def test_binding_404_and_400(lab):
    pending_pod(lab, "p1")
    lab.inject_faults([{"method": "POST", "path": "/pods/p1/binding$", "action": "status", "code": 404,
                        "message": 'pods "p1" not found'}])
    assert "pod default/p1 was deleted meanwhile" in refused(cpctl(lab, "bind", "p1", "--node", lab.worker), 3)
    lab.inject_faults([{"method": "POST", "path": "/pods/p1/binding$", "action": "status", "code": 400,
                        "message": "name in URL does not match name in Binding object"}])
    line = refused(cpctl(lab, "bind", "p1", "--node", lab.worker), 9)
    assert "refused the binding of pod default/p1 as malformed: name in URL does not match" in line
    lab.clear_faults()
    assert cpctl(lab, "bind", "p1", "--node", lab.worker).returncode == 0   # the real registry: same names
    assert get_pod(lab, "default", "p1")["spec"]["nodeName"] == lab.worker


def test_pending_shows_gated_pods_as_gated(lab):
    pending_pod(lab, "waits")
    pending_pod(lab, "held", schedulerName="default-scheduler", schedulingGates=[{"name": "example.com/hold"}])
    proc = cpctl(lab, "-o", "json", "pending")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["pending"]}
    assert rows["held"]["gated"] is True and rows["held"]["gates"] == ["example.com/hold"]
    assert rows["held"]["waiting_for"] == "scheduling gates: example.com/hold"
    assert rows["waits"]["gated"] is False and rows["waits"]["gates"] == []
    assert rows["waits"]["waiting_for"] == "scheduler nobody" and rows["waits"]["scheduler"] == "nobody"


def test_bind_wait_rides_out_api_errors(lab):
    from cpctl.host.local import LocalHost
    from cpctl.ops import scheduling
    from cpctl.probes.kubeapi import client_for
    pending_pod(lab, "p1")
    client = client_for(LocalHost(), lab.kubeconfig)
    scheduling.bind(client, "default", "p1", lab.worker)
    lab.inject_faults([{"method": "GET", "path": "^%s/p1$" % PODS, "action": "status", "code": 503, "times": 4},
                       {"method": "GET", "path": "^%s/p1$" % PODS, "action": "html", "times": 2}])
    assert scheduling.wait_running(client, "default", "p1", 30) == "Running"   # was: exit 9 at the first 503
    assert [r["hits"] for r in lab.faults()] == [4, 2]
    lab.inject_faults([{"method": "GET", "path": "^%s/p1$" % PODS, "action": "status", "code": 503}])
    with pytest.raises(CpctlError) as excinfo:
        scheduling.wait_running(client, "default", "p1", 1.0)
    assert excinfo.value.code == ExitCode.TIMEOUT
    assert "pod default/p1 could not be read (API GET /api/v1/namespaces/default/pods/p1: 503" in excinfo.value.message

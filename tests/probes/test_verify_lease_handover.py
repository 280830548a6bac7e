"""Lease handover (issue #21, item 6): the controller-manager does not release its Lease when it
stops, and the old instance renews it until it exits, so a renewal by the OLD holder proves nothing
about the new version: the gate waits for a new holder identity."""

from __future__ import annotations

import re
from typing import Any

from tests.labfixture import api, is_ready, mirror, run_cpctl, wait_for

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager"


def _holder(lab: Any) -> str:
    code, body = api(lab, "GET", LEASE)
    assert code == 200, body
    return str(body["spec"].get("holderIdentity") or "")


def test_controller_manager_change_waits_for_a_new_lease_holder(lab: Any) -> None:
    wait_for(lambda: is_ready(mirror(lab, "kube-controller-manager")), 20, "controller-manager Ready")
    old = wait_for(lambda: _holder(lab), 10, "a Lease holder")
    proc = run_cpctl(lab, "flags", "controller-manager", "--set", "v=2", "--timeout", "60", "--settle", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"lease kube-controller-manager renewed by (\S+) \(this node\)", proc.stdout)
    assert found, proc.stdout
    assert found.group(1) != old, "the old instance's last renewal was taken for the new one"
    assert _holder(lab) == found.group(1)

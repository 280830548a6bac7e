"""``--census cluster`` (issue 27): the cluster's view of the other control-plane nodes, built by hand
here from API objects as the lab and a real API server return them (the SSH and API round trips are
tested with Ansible and the lab in test_ansible_fleet.py), fed to the same ``preflight`` rules."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, parse_serial
from cpctl.ops.fleetsafety import _member_view, cluster_results, preflight

STACKED = ["kube-apiserver", "--etcd-servers=https://127.0.0.1:2379"]
OWN = {"components": {"etcd": "present", "kube-apiserver": "present"}, "apiserver_stacked": True}


def mirror(component: str, node: str, ready: bool = True, command: Any = None) -> Dict[str, Any]:
    return {"metadata": {"name": "%s-%s" % (component, node), "labels": {"component": component},
                         "annotations": {"kubernetes.io/config.mirror": "x"}},
            "spec": {"nodeName": node, "containers": [{"name": component, "command": command or [component]}]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def view(node: str, members: Dict[str, Any], api_error: str = "") -> HostResult:
    return HostResult(node, "ok", {"node": node, "own": OWN, "members": members, "cluster": "uid-1",
                                   "api_error": api_error})


def test_a_member_runs_only_with_a_ready_mirror_pod() -> None:
    mirrors: List[Dict[str, Any]] = [mirror("etcd", "m2"), mirror("kube-apiserver", "m2", command=STACKED),
                                     mirror("etcd", "m3", ready=False)]
    assert _member_view("m2", mirrors, True) == {"components": {"etcd": "present", "kube-apiserver": "present"},
                                                 "apiserver_stacked": True}
    # m3: its etcd mirror is not Ready and it has no API server mirror: a member that runs nothing.
    assert _member_view("m3", mirrors, True)["components"] == {"etcd": "not running",
                                                               "kube-apiserver": "not running"}
    # No etcd mirror pod anywhere (external etcd): no node is an etcd member.
    assert "etcd" not in _member_view("m2", [mirror("kube-apiserver", "m2")], False)["components"]


def test_the_same_rules_count_the_cluster_and_this_master() -> None:
    mirrors = [mirror("etcd", "m2"), mirror("kube-apiserver", "m2", command=STACKED)]
    members = {"m2": _member_view("m2", mirrors, True), "m3": _member_view("m3", mirrors, True)}
    census, targets, cluster = cluster_results([view("m1", members)])
    assert [r.host for r in census] == ["m1", "m2", "m3"] and targets == {"m1"} and cluster == "uid-1"
    # m3 runs nothing: stopping m1's etcd would leave 1 of 3; its API server leaves m2's.
    with pytest.raises(CpctlError) as err:
        preflight(census, targets, "stop", ["etcd"], parse_serial(1), False, None)
    assert err.value.code == ExitCode.REFUSED and "1 of 3 etcd running" in err.value.message
    assert preflight(census, targets, "stop", ["apiserver"], parse_serial(1), False, "why") == "why"
    # m2's API server parked too: m1's is the last one serving.
    members["m2"] = _member_view("m2", [mirror("etcd", "m2")], True)
    census, targets, _ = cluster_results([view("m1", members)])
    with pytest.raises(CpctlError) as err:
        preflight(census, targets, "restart", ["apiserver"], parse_serial(1), False, None)
    assert "0 of 3 kube-apiserver running" in err.value.message


def test_an_api_that_cannot_be_asked_or_a_master_that_failed_refuses() -> None:
    with pytest.raises(CpctlError) as err:
        cluster_results([view("m1", {}, api_error="connection refused")])
    assert err.value.code == ExitCode.REFUSED and "connection refused" in err.value.message
    with pytest.raises(CpctlError) as err:
        cluster_results([HostResult("m1", "unreachable", None, "m1: timed out")])
    assert err.value.code == ExitCode.REFUSED and "timed out" in err.value.message

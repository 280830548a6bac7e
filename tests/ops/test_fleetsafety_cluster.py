"""``--census cluster`` (issues 27, 32): every other control-plane node counted from what runs -
etcd's members from etcd's own member list and /health, API servers from their own /readyz - never
from mirror pods. Built by hand here from the answers ``probes.etcdcluster`` parses; the SSH, API and
etcd round trips are tested against the lab's ``ha`` profile in tests/system/test_quorum_ha.py."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, parse_serial
from cpctl.ops.fleetsafety import ClusterView, MemberCensus, _count_etcd, cluster_results, preflight
from cpctl.probes.etcdcluster import EtcdCensus, EtcdMember

URLS = ("https://10.0.0.%d:2379",)


def own(etcd: str = "present") -> MemberCensus:
    return MemberCensus(components={"etcd": etcd, "kube-apiserver": "present"}, apiserver_stacked=True,
                        running={"etcd": etcd == "present", "kube-apiserver": etcd == "present"}, unasked={})


def api_member(serving: bool) -> MemberCensus:
    return MemberCensus(components={"kube-apiserver": "present"}, apiserver_stacked=True,
                        running={"kube-apiserver": serving}, unasked={})


def etcd(*members: EtcdMember) -> EtcdCensus:
    return EtcdCensus(members=members, asked="https://127.0.0.1:2379")


def peer(name: str) -> str:
    """A master's etcd peer URL (m2 -> https://10.0.0.2:2380): how its own member is found."""
    return "https://10.0.0.%s:2380" % name.lstrip("m")


def member(name: str, running: bool, why: str = "", learner: bool = False) -> EtcdMember:
    return EtcdMember(name, ("https://10.0.0.%s:2379" % name.lstrip("m"),), running, why,
                      member_id=str((1 << 63) + int(name.lstrip("m"))), learner=learner, peer_urls=(peer(name),))


def view(node: str, members: Dict[str, MemberCensus], census: EtcdCensus, api_error: str = "",
         own_census: Any = None) -> HostResult:
    data = ClusterView(node=node, own=own_census or own(), members=members, cluster="uid-1", api_error=api_error,
                       etcd_error="", etcd_alarms=[], etcd_blocking=[], etcd_external=[], etcd_answered_by="",
                       etcd_own_by="")
    _count_etcd(data, census, [peer(node)])
    return HostResult(node, "ok", dict(data))


def test_a_parked_member_whose_mirror_pod_stays_ready_is_not_counted() -> None:
    """The issue's case: m3's etcd is parked; its local-mode kubelet cannot update its mirror pod,
    which stays Ready as last heard. etcd itself says m3 does not answer: stopping m2 is refused."""
    members = {"m1": api_member(True), "m3": api_member(False)}
    census, targets, cluster = cluster_results([view("m2", members, etcd(
        member("m1", True), member("m2", True), member("m3", False, "connection refused")))])
    assert [r.host for r in census] == ["m1", "m2", "m3"] and targets == {"m2"} and cluster == "uid-1"
    with pytest.raises(CpctlError) as err:
        preflight(census, targets, "stop", ["etcd"], parse_serial(1), False, None)
    assert err.value.code == ExitCode.REFUSED and "1 of 3 etcd running, 2 now" in err.value.message
    assert "--force" not in err.value.hint
    # With m3 back, m2 may go: 2 of 3 left.
    census, targets, _ = cluster_results([view("m2", members, etcd(
        member("m1", True), member("m2", True), member("m3", True)))])
    assert preflight(census, targets, "stop", ["etcd"], parse_serial(1), False, "why") == "why"


def test_the_membership_is_etcds_member_list() -> None:
    """A member etcd lists that is no control-plane node the API shows (a node deleted from the API,
    an external member) still counts; one that was added and never started counts as not running."""
    members = {"m1": api_member(True)}
    census, targets, _ = cluster_results([view("m2", members, etcd(
        member("m1", True), member("m2", True),
        EtcdMember("", (), False, "no client URL: added but never started", member_id="77")))])
    assert len([r for r in census if "etcd" in r.data["components"]]) == 3
    with pytest.raises(CpctlError) as err:
        preflight(census, targets, "stop", ["etcd"], parse_serial(1), False, None)
    assert "1 of 3 etcd running, 2 now" in err.value.message
    assert "could not ask, counted as not running: etcd member an unstarted member (ID 4d)" in err.value.message


def test_api_servers_count_by_their_own_readyz() -> None:
    members = {"m1": api_member(False), "m3": api_member(False)}
    census, targets, _ = cluster_results([view("m2", members, etcd(
        member("m1", True), member("m2", True), member("m3", True)))])
    with pytest.raises(CpctlError) as err:
        preflight(census, targets, "restart", ["apiserver"], parse_serial(1), False, None)
    assert "0 of 3 kube-apiserver running, 1 now" in err.value.message


def test_an_etcd_that_cannot_be_asked_refuses() -> None:
    data = ClusterView(node="m2", own=own(), members={}, cluster="uid-1", api_error="", etcd_error="", etcd_alarms=[],
                       etcd_blocking=[], etcd_external=[], etcd_answered_by="", etcd_own_by="")
    _count_etcd(data, EtcdCensus(error="no etcd member answered with the member list (https://x: timed out)"))
    with pytest.raises(CpctlError) as err:
        cluster_results([HostResult("m2", "ok", dict(data))])
    assert err.value.code == ExitCode.REFUSED and "cannot count etcd members from m2" in err.value.message
    assert "timed out" in err.value.message and "--force" not in err.value.hint


def test_an_api_that_cannot_be_asked_or_a_master_that_failed_refuses() -> None:
    with pytest.raises(CpctlError) as err:
        cluster_results([view("m1", {}, etcd(), api_error="connection refused")])
    assert err.value.code == ExitCode.REFUSED and "connection refused" in err.value.message
    with pytest.raises(CpctlError) as err:
        cluster_results([HostResult("m1", "unreachable", None, "m1: timed out")])
    assert err.value.code == ExitCode.REFUSED and "timed out" in err.value.message

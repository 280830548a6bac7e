"""The etcd identity gate (issue 45 item 5) against a real etcd: the member that comes back after a
change must be the same member of the same cluster with a revision not gone back.

Measured on etcd 3.5.1 here: a single member restarted on an empty data dir keeps its member ID
and cluster ID (etcd derives them from the name, the peer URLs and the token) - only the revision,
back to 1, tells that it is a brand-new empty cluster."""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

import pytest
import yaml

from cpctl.core.node import Node
from cpctl.errors import ExitCode
from cpctl.host.local import LocalHost
from cpctl.ops.etcdidentity import RECORD, EtcdIdentityGate, IdentityChanged, MemberIdentity, client_urls
from cpctl.probes.base import Clock, PodTarget, ProbeOptions
from cpctl.probes.gates import GateRun
from tests.coreutil import NODE, NodeDirs
from tests.realetcd import RealEtcd


def test_an_identity_is_read_only_from_etcd_s_own_shape() -> None:
    good = {"member_id": "6134072051217116742", "cluster_id": "15756992811865692610", "revision": "12"}
    assert MemberIdentity.from_dict(good) == MemberIdentity("6134072051217116742", "15756992811865692610", 12)
    for bad in ({}, dict(good, member_id=6134072051217116742), dict(good, cluster_id="-1"),
                dict(good, revision="x"), dict(good, revision=-3), dict(good, member_id="1" * 21),
                dict(good, revision=True), "header", None):
        assert MemberIdentity.from_dict(bad) is None, bad
    was = MemberIdentity("1", "2", 10)
    assert was.differs(MemberIdentity("1", "2", 10)) == "" and was.differs(MemberIdentity("1", "2", 11)) == ""
    assert "another member (member ID 3, was 1)" in was.differs(MemberIdentity("3", "2", 10))
    assert "another cluster" in was.differs(MemberIdentity("1", "4", 10))
    assert "went back from revision 10 to 1" in was.differs(MemberIdentity("1", "2", 1))


def test_client_urls_ask_loopback_first_and_never_a_made_up_url() -> None:
    pod = {"spec": {"containers": [{"command": [
        "etcd", "--advertise-client-urls=https://10.0.0.5:2379",
        "--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.5:2379,javascript:alert(1)"]}]}}
    target = PodTarget("etcd", "kube-system", NODE, pod=pod)
    assert client_urls(target) == ["https://127.0.0.1:2379", "https://10.0.0.5:2379"]
    # the same list as the survey's (etcdcare.member_urls): all of 127/8 and [::1] count as loopback
    pod = {"spec": {"containers": [{"command": [
        "etcd", "--advertise-client-urls=https://10.0.0.5:2379,https://[::1]:2379",
        "--listen-client-urls=https://10.0.0.5:2379,https://127.0.0.2:2379"]}]}}
    assert client_urls(PodTarget("etcd", "kube-system", NODE, pod=pod)) == [
        "https://127.0.0.2:2379", "https://[::1]:2379", "https://10.0.0.5:2379"]


def _node(tmp_path: Any) -> Node:
    dirs = NodeDirs(str(tmp_path), files={})
    node = Node(LocalHost(), dirs.manifests, dirs.state, NODE, lock_timeout=0.5)
    node.state.ensure()
    return node


def _target(cluster: RealEtcd) -> PodTarget:
    member = cluster.members["m1"]
    pod = {"metadata": {"name": "etcd"}, "spec": {"containers": [{"name": "etcd", "command": [
        "etcd", "--listen-client-urls=%s" % member.client_url, "--advertise-client-urls=%s" % member.client_url]}]}}
    return PodTarget("etcd", "kube-system", NODE, pod=pod, file="etcd.yaml")


def _run(node: Node, timeout: float = 60.0) -> GateRun:
    def tick(text: str) -> None:
        if clock.expired():
            raise AssertionError("the gate ran out of time: %s" % text)
        time.sleep(0.2)
    clock = Clock(timeout)
    return GateRun(clock, False, ProbeOptions(node.host, ""), lambda text: time.sleep(0.2),
                   tick)


def _gate(node: Node, cluster: RealEtcd) -> EtcdIdentityGate:
    gate = EtcdIdentityGate(node)
    ca, cert, key = cluster.client_pair("m1")
    gate._tls = {"ca_file": ca, "cert_file": cert, "key_file": key}
    return gate


@pytest.mark.real_etcd
def test_a_member_restarted_on_an_empty_data_dir_is_another_member(tmp_path: Any, real_etcd_factory: Any) -> None:
    cluster = real_etcd_factory(members=1)
    for i in range(5):
        assert cluster.put(b"/registry/k%d" % i, b"v")[0] == 200
    node = _node(tmp_path)
    target = _target(cluster)
    gate = _gate(node, cluster)
    before = gate.before(target, _run(node))
    assert isinstance(before, MemberIdentity) and before.revision >= 6
    recorded = json.loads(open(os.path.join(node.state.path, RECORD)).read())
    assert recorded == before.to_dict()

    # the same member back on its own data dir: verified, the revision kept
    cluster.stop("m1")
    cluster.start("m1")
    result = gate.check(target, before, _run(node))
    assert result.verified and "same member %s" % before.member_id in result.text, result.text

    # on an empty data dir: same IDs (measured), revision back to 1 -> the change fails, the reason named
    cluster.stop("m1")
    shutil.rmtree(cluster.members["m1"].data_dir)
    cluster.start("m1")
    after = MemberIdentity.from_dict(cluster.gateway("m1", "/v3/maintenance/status", {})[1]["header"])
    assert after is not None and (after.member_id, after.cluster_id) == (before.member_id, before.cluster_id)
    with pytest.raises(IdentityChanged) as raised:
        gate.check(target, before, _run(node))
    assert "its store went back from revision %d to %d" % (before.revision, after.revision) in raised.value.message
    assert raised.value.code == ExitCode.REFUSED and gate.changed

    # a later run (a start after an earlier run's stop, etcd down now) compares with the record
    cluster.stop("m1")
    later = _gate(node, cluster)
    assert later.before(target, _run(node, timeout=5.0)) == before
    # --new-member: the new member is the intent, said so, and recorded
    cluster.start("m1")
    later.new_member = True
    result = later.check(target, before, _run(node))
    assert result.verified and "a new member as --new-member asked" in result.text
    assert MemberIdentity.from_dict(json.loads(open(os.path.join(node.state.path, RECORD)).read())) == after


def test_an_etcd_that_cannot_say_who_it_is_is_not_checked_and_says_so(tmp_path: Any) -> None:
    """Nothing known before and nothing answers the status call: "not checked", never "same member"."""
    node = _node(tmp_path)
    gate = EtcdIdentityGate(node)
    gate._tls = {"ca_file": "/nonexistent/ca.crt", "cert_file": "/nonexistent/c.crt", "key_file": "/nonexistent/k"}
    pod = yaml.safe_load("spec: {containers: [{command: [etcd, '--listen-client-urls=https://127.0.0.1:1']}]}")
    target = PodTarget("etcd", "kube-system", NODE, pod=pod)
    assert gate.before(target, _run(node)) is None
    result = gate.check(target, None, _run(node))
    assert result.verified and "member identity not checked" in result.text, result.text

"""The shared real-etcd fixture (tests/realetcd.py) does what the census tests rely on: kubeadm's
flags and PKI, a learner that etcdctl sees as one, teardown that leaves no etcd running, and a CI
that fails instead of skipping when no etcd is installed (real-node-facts.md "etcd, measured")."""

from __future__ import annotations

import os

import pytest

from cpctl_lab import etcdbin
from tests import realetcd
from tests.realetcd import Factory, RealEtcd


def test_three_members_with_kubeadms_tls_agree_with_etcdctl(real_etcd: RealEtcd) -> None:
    listed = real_etcd.member_list()
    assert sorted(m["name"] for m in listed) == ["m1", "m2", "m3"]
    assert not any(m["isLearner"] for m in listed)
    health = real_etcd.endpoint_health()
    assert len(health) == 3 and all(h["health"] is True for h in health)
    # --client-cert-auth=true: a client without the etcd CA's certificate is refused
    status, doc = real_etcd.gateway("m1", "/v3/cluster/member/list", {})
    assert status == 200 and len(doc["members"]) == 3
    flags = real_etcd.members["m1"].argv
    assert "--client-cert-auth=true" in flags and "--peer-client-cert-auth=true" in flags


def test_an_unstarted_learner_then_started_and_promoted(real_etcd: RealEtcd) -> None:
    """A member added as a learner and not started has no name and no client URLs; once it runs
    etcdctl calls it unhealthy ("rpc not supported for learner") while its /health says true."""
    new_id = real_etcd.add_member("m4", learner=True, start=False)
    entry = next(m for m in real_etcd.member_list() if m["ID"] == new_id)
    assert entry["isLearner"] and "name" not in entry and "clientURLs" not in entry
    real_etcd.start("m4")
    assert real_etcd.health("m4")[0] == 200
    by_endpoint = {h["endpoint"]: h for h in real_etcd.endpoint_health()}
    assert "learner" in by_endpoint[real_etcd.members["m4"].client_url].get("error", "")
    real_etcd.promote("m4")
    assert not next(m for m in real_etcd.member_list() if m["ID"] == new_id)["isLearner"]


def test_stop_start_and_teardown_kill_by_pid(real_etcd_factory: Factory) -> None:
    cluster = real_etcd_factory(members=1)
    pid = cluster.pids()[0]
    cluster.stop("m1")
    assert not cluster.pids() and not _alive(pid)
    cluster.start("m1")
    pid = cluster.pids()[0]
    cluster.close()
    assert not _alive(pid) and pid not in realetcd._LIVE


def test_nospace_and_corrupt_alarms(real_etcd_factory: Factory) -> None:
    cluster = real_etcd_factory(members=1, quota_backend_bytes=2 << 20)
    cluster.fill_until_nospace()
    assert {a["alarm"] for a in cluster.alarms()} == {"NOSPACE"}
    cluster.activate_alarm("m1", "CORRUPT")
    assert {a["alarm"] for a in cluster.alarms()} == {"NOSPACE", "CORRUPT"}


def test_ipv6_loopback(real_etcd_factory: Factory) -> None:
    cluster = real_etcd_factory(members=1, host="::1")
    assert cluster.members["m1"].client_url.startswith("https://[::1]:")
    assert [h["health"] for h in cluster.endpoint_health()] == [True]


def test_no_etcd_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcdbin, "find", lambda source=None: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="never skip"):
        realetcd.installed()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="cpctl\\[etcd\\]"):
        realetcd.installed()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

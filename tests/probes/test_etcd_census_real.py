"""cpctl's etcd census against a real etcd (issue 45), next to what etcdctl says of the same cluster.

Each scenario runs the census as ``--census cluster`` does on a master (``probes.etcdcluster``
through the node's agent primitives, ``fleetsafety._count_etcd``, ``cluster_results``,
``preflight``), on the real etcd of tests/realetcd.py with kubeadm's flags and PKI, and puts its
count and verdict next to ``etcdctl member list -w json`` / ``endpoint health --cluster -w json``:
quorum is a majority of the voters etcdctl lists, running voters are the ones etcdctl calls
healthy (real-node-facts.md "etcd, measured on the real binaries"). CI never skips these."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pytest
import yaml

from cpctl.core.node import Node
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, parse_serial
from cpctl.host.base import TlsOptions
from cpctl.host.local import LocalHost
from cpctl.ops import wiring
from cpctl.ops.fleetsafety import (
    ClusterView,
    MemberCensus,
    _ask_etcd,
    _count_etcd,
    alarm_notes,
    census_of,
    cluster_results,
    etcd_sources,
    external_notes,
    own_member_id,
    preflight,
    still_external,
)
from cpctl.probes.etcdcluster import EtcdCensus, take_census
from cpctl_lab import pki
from tests import etcdnodes as en
from tests.realetcd import Factory, RealEtcd


@dataclass
class Verdict:
    """The census of one master and what it decides for one change."""

    census: EtcdCensus
    allowed: bool
    message: str            # the refusal, or "" when allowed
    notes: List[str]        # the alarms the run names before it goes on


def tls_of(cluster: RealEtcd, node: str) -> TlsOptions:
    ca, cert, key = cluster.client_pair(node)
    return TlsOptions(ca_file=ca, cert_file=cert, key_file=key)


def census_verdict(cluster: RealEtcd, node: str, verb: str = "stop", tls: Optional[TlsOptions] = None) -> Verdict:
    """What ``cpctl --census cluster VERB etcd`` on master ``node`` decides (its own etcd in place).
    No real API server runs here (the lab's on real etcd is another part of issue 45): the master's
    API server is one that keeps serving, so only etcd's rule decides."""
    member = cluster.members[node]
    endpoints = [member.client_url] + cluster.endpoints(list(cluster.members))
    census = take_census(LocalHost(), endpoints, tls or tls_of(cluster, node))
    own = MemberCensus(components={"etcd": "present", "kube-apiserver": "present"}, apiserver_stacked=False,
                       running={"etcd": member.running, "kube-apiserver": True}, unasked={}, etcd_learner=False,
                       etcd_alarms=[])
    view = ClusterView(node=node, own=own, members={}, cluster="uid", api_error="", etcd_error="", etcd_alarms=[],
                       etcd_blocking=[], etcd_external=[], etcd_answered_by="", etcd_own_by="")
    _count_etcd(view, census, [member.peer_url])
    try:
        results, targets, _ = cluster_results([HostResult(node, "ok", dict(view))])
        preflight(results, targets, verb, ["etcd"], parse_serial(1), False, None)
    except CpctlError as exc:
        assert exc.code == ExitCode.REFUSED and "--force" not in (exc.hint or "")
        return Verdict(census, False, exc.message, [])
    return Verdict(census, True, "", alarm_notes(results))


@dataclass
class Etcdctl:
    """etcdctl's account: voters, learners, healthy voters, and what the rule allows."""

    voters: int
    learners: int
    healthy_voters: int

    def allows_one_down(self, target_healthy: bool = True) -> bool:
        """A majority of the voters still healthy with the target down."""
        return self.healthy_voters - (1 if target_healthy else 0) >= self.voters // 2 + 1


def etcdctl_view(cluster: RealEtcd) -> Etcdctl:
    listed = cluster.member_list()
    health = {h["endpoint"]: h["health"] is True for h in cluster.endpoint_health()}
    voters = [m for m in listed if not m["isLearner"]]
    healthy = [m for m in voters if any(health.get(u) for u in m.get("clientURLs") or [])]
    return Etcdctl(len(voters), len(listed) - len(voters), len(healthy))


def agree(verdict: Verdict, ctl: Etcdctl) -> None:
    """cpctl's count is etcdctl's: as many voters, learners and running voters; the same verdict."""
    census = verdict.census
    assert not census.error, census.error
    assert (len(census.voters), len(census.learners), len(census.running)) == (
        ctl.voters, ctl.learners, ctl.healthy_voters), (census, ctl)
    assert verdict.allowed == ctl.allows_one_down(), (verdict, ctl)


@pytest.mark.parametrize("version", ["3.5", "3.4"])
def test_three_healthy_members_one_may_stop(real_etcd_factory: Factory, version: str) -> None:
    cluster = real_etcd_factory(version=version)
    verdict = census_verdict(cluster, "m1")
    agree(verdict, etcdctl_view(cluster))
    assert verdict.allowed and verdict.census.answered_by and verdict.census.cluster_id
    assert all(int(m.member_id) > 0 for m in verdict.census.members)


def test_one_member_down_a_second_stop_is_refused(real_etcd: RealEtcd) -> None:
    real_etcd.stop("m3")
    verdict = census_verdict(real_etcd, "m1")
    agree(verdict, etcdctl_view(real_etcd))
    assert "would leave 1 of 3 etcd running, 2 now" in verdict.message


def test_a_learner_added_but_not_started_is_no_voter_down(real_etcd: RealEtcd) -> None:
    """The issue's case: 3 healthy voters and an unstarted learner; the old census said 'would leave
    2 of 4'. The learner has no name and no client URLs; it counts by its kind: not at all."""
    real_etcd.add_member("m4", learner=True, start=False)
    verdict = census_verdict(real_etcd, "m1")
    agree(verdict, etcdctl_view(real_etcd))
    assert verdict.allowed
    (learner,) = verdict.census.learners
    assert not learner.started and learner.label.startswith("an unstarted learner (ID ")


def test_a_running_learner_with_two_voters_refuses_a_voters_stop(real_etcd_factory: Factory) -> None:
    """2 voters + 1 running learner: stopping a voter loses quorum (measured: RAFT NO LEADER). The
    learner's /health says true; etcdctl calls it unhealthy ("rpc not supported for learner")."""
    cluster = real_etcd_factory(members=2)
    cluster.add_member("m3", learner=True, start=True)
    verdict = census_verdict(cluster, "m1")
    agree(verdict, etcdctl_view(cluster))
    assert not verdict.allowed
    assert "would leave 1 of 2 etcd running, 2 now" in verdict.message
    assert "learner etcd member m3, not a voter" in verdict.message
    (learner,) = verdict.census.learners
    assert learner.running                    # it runs, and still does not count


@pytest.mark.parametrize("version", ["3.5", "3.4"])
def test_nospace_members_run_and_the_restart_that_fixes_it_is_allowed(real_etcd_factory: Factory,
                                                                       version: str) -> None:
    """A NOSPACE alarm makes a plain /health false on every member (etcdctl: all unhealthy); the
    kubelet's probe (exclude=NOSPACE) keeps them alive, and so does the census: restart allowed,
    alarm named. etcd 3.5.1 may raise one alarm per member (etcd-io/etcd#13467), failing
    exclude=NOSPACE too: the census then asks each member's status for a leader."""
    cluster = real_etcd_factory(quota_backend_bytes=2 << 20, version=version)
    cluster.fill_until_nospace()
    alarms = cluster.alarms()
    assert alarms and {a["alarm"] for a in alarms} == {"NOSPACE"}
    etcdctl_health = [h["health"] for h in cluster.endpoint_health()]
    # etcdctl 3.5 calls every member unhealthy ("Active Alarm(s): NOSPACE"); 3.4's check is a read, which passes
    assert etcdctl_health == [version == "3.4"] * 3
    assert all(cluster.health(name)[0] == 503 for name in cluster.members)   # a plain /health: false everywhere
    verdict = census_verdict(cluster, "m1", verb="restart")
    assert verdict.allowed, verdict.message
    assert len(verdict.census.running) == 3
    ids = {str(a["memberID"]) for a in alarms}
    assert {a.member_id for a in verdict.census.alarms} == ids
    assert verdict.notes and all(n.startswith("NOSPACE (raised by m") for n in verdict.notes)


def test_a_corrupt_alarm_refuses_with_the_alarm_named(real_etcd: RealEtcd) -> None:
    real_etcd.activate_alarm("m2", "CORRUPT")
    assert [a["alarm"] for a in real_etcd.alarms()] == ["CORRUPT"]
    verdict = census_verdict(real_etcd, "m1", verb="restart")
    assert not verdict.allowed
    assert "etcd reports alarm CORRUPT (raised by m2)" in verdict.message


def test_a_wrong_client_certificate_refuses_and_says_so(real_etcd: RealEtcd, tmp_path: object) -> None:
    """A client pair from another CA: etcd ends the handshake (--client-cert-auth=true); etcdctl
    fails the same way; the census cannot count and refuses, naming the TLS failure."""
    from pathlib import Path
    other = pki.make_ca("another-etcd-ca")
    stranger = pki.issue(other, "kube-etcd-healthcheck-client")
    where = Path(str(tmp_path))
    pki.write_pair(where, "stranger", stranger)
    ca = real_etcd.client_pair("m1")[0]
    tls = TlsOptions(ca_file=ca, cert_file=str(where / "stranger.crt"), key_file=str(where / "stranger.key"))
    verdict = census_verdict(real_etcd, "m1", tls=tls)
    assert not verdict.allowed
    assert "cannot count etcd members from m1: no etcd member answered with the member list" in verdict.message
    assert "TLS" in verdict.message or "reset" in verdict.message or "closed" in verdict.message, verdict.message
    ctl = real_etcd.ctl("member", "list")        # the good pair still works: the cluster is fine
    assert ctl.rc == 0


def test_ipv6_loopback(real_etcd_factory: Factory) -> None:
    cluster = real_etcd_factory(host="::1")
    verdict = census_verdict(cluster, "m1")
    agree(verdict, etcdctl_view(cluster))
    assert verdict.allowed and all(u.startswith("https://[::1]:") for m in verdict.census.members
                                   for u in m.client_urls)
    cluster.stop("m2")
    verdict = census_verdict(cluster, "m1")
    agree(verdict, etcdctl_view(cluster))
    assert not verdict.allowed


def test_own_member_found_by_peer_url_not_name(real_etcd: RealEtcd) -> None:
    """A node whose name differs from its etcd --name (m1 runs on node 'cp-a'): its own member is
    found by peer URL and counted once; the old census counted it twice (a false 'safe')."""
    member = real_etcd.members["m1"]
    census = take_census(LocalHost(), [member.client_url], tls_of(real_etcd, "m1"))
    own = MemberCensus(components={"etcd": "present"}, apiserver_stacked=False, running={"etcd": True}, unasked={},
                       etcd_learner=False, etcd_alarms=[])
    view = ClusterView(node="cp-a", own=own, members={}, cluster="uid", api_error="", etcd_error="", etcd_alarms=[],
                       etcd_blocking=[], etcd_external=[], etcd_answered_by="", etcd_own_by="")
    _count_etcd(view, census, [member.peer_url])
    results, targets, _ = cluster_results([HostResult("cp-a", "ok", dict(view))])
    assert sorted(r.host for r in results) == ["cp-a", "etcd member m2", "etcd member m3"]
    assert census.answered_by == str(real_etcd.member_id("m1"))


# --------------------------------------------------------------------------- external etcd (item 2)


def _apiserver_manifest(root: Path, etcd_servers: str) -> None:
    """A kube-apiserver.yaml under node ``root`` storing in ``etcd_servers`` with kubeadm's etcd
    client pair (node paths)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "kube-apiserver", "namespace": "kube-system",
                        "labels": {"component": "kube-apiserver", "tier": "control-plane"}},
           "spec": {"hostNetwork": True, "containers": [{
               "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.30.0",
               "command": ["kube-apiserver", "--etcd-servers=%s" % etcd_servers,
                           "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt",
                           "--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt",
                           "--etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key"]}]}}
    manifests = root / "etc" / "kubernetes" / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    (manifests / "kube-apiserver.yaml").write_text(yaml.safe_dump(pod))


def _node(root: Path, name: str) -> Node:
    settings = Settings(manifests_dir=str(root / "etc/kubernetes/manifests"), state_dir=str(root / "var/lib/cpctl"),
                        node_name=name, node_root=str(root), probe="none")
    return wiring.open_node(settings, LocalHost())


def _external_cluster(real_etcd_factory: Factory, stacked: RealEtcd) -> RealEtcd:
    """A one-member etcd that trusts the same etcd CA as ``stacked`` (the worst case: the stacked
    master's client pair is accepted there, so counting it would look like an answer)."""
    external = real_etcd_factory(members=1, start=False)
    external.cas["etcd/ca"] = stacked.cas["etcd/ca"]
    external.bootstrap(["x1"])
    return external


def test_external_etcd_servers_are_named_and_never_counted_as_the_stacked_cluster(
        real_etcd_factory: Factory) -> None:
    """m1 runs a stacked member of cluster A while its API server's --etcd-servers name another etcd
    (x1): the census asks only A's members, names x1's URL as external, and with m1's own member
    down it refuses rather than count x1's one healthy member as the cluster."""
    stacked = real_etcd_factory()
    external = _external_cluster(real_etcd_factory, stacked)
    root = stacked.members["m1"].root
    en.write_manifest(stacked, "m1")
    _apiserver_manifest(root, external.members["x1"].client_url)
    node = _node(root, "m1")
    census, sources = _ask_etcd(node, [])
    assert sources.external == [external.members["x1"].client_url]
    assert stacked.members["m1"].client_url in sources.clients
    assert not census.error and census.asked == stacked.members["m1"].client_url
    assert sorted(int(m.member_id) for m in census.members) == sorted(m["ID"] for m in stacked.member_list())
    stacked.stop("m1")
    census, _ = _ask_etcd(node, [])
    assert census.error.startswith("no etcd member answered") and external.members["x1"].client_url not in \
        census.error, census
    assert [m["name"] for m in external.member_list()] == ["x1"]      # it answers: it was simply not asked
    view = ClusterView(node="m1", own=MemberCensus(components={"etcd": "present", "kube-apiserver": "present"},
                                                   apiserver_stacked=False, running={"kube-apiserver": True},
                                                   unasked={}, etcd_learner=False, etcd_alarms=[]),
                       members={}, cluster="uid", api_error="", etcd_error="", etcd_alarms=[], etcd_blocking=[],
                       etcd_external=sources.external, etcd_answered_by="", etcd_own_by="")
    _count_etcd(view, census)
    with pytest.raises(CpctlError) as refused:
        cluster_results([HostResult("m1", "ok", dict(view))])
    assert refused.value.code == ExitCode.REFUSED and "--census inventory" in (refused.value.hint or "")


def test_a_master_on_an_external_etcd_names_it(real_etcd_factory: Factory, tmp_path: Path) -> None:
    """kubeadm's etcd.external (no etcd static pod; the API server names the etcd): every URL is
    external, the census names it in a note and counts the API servers only."""
    external = real_etcd_factory(members=1)
    root = tmp_path / "cp-a"
    shutil.copytree(external.members["m1"].pki, root / "etc" / "kubernetes" / "pki")
    _apiserver_manifest(root, external.members["m1"].client_url)
    node = _node(root, "cp-a")
    sources = etcd_sources(node)
    assert (sources.clients, sources.external) == ([], [external.members["m1"].client_url])
    own = MemberCensus(components={"kube-apiserver": "present"}, apiserver_stacked=False,
                       running={"kube-apiserver": True}, unasked={}, etcd_learner=False, etcd_alarms=[])
    view = ClusterView(node="cp-a", own=own, members={}, cluster="uid", api_error="", etcd_error="", etcd_alarms=[],
                       etcd_blocking=[], etcd_external=sources.external, etcd_answered_by="", etcd_own_by="")
    results, targets, _ = cluster_results([HostResult("cp-a", "ok", dict(view))])
    assert external_notes(results) == [
        "kube-apiserver on cp-a stores in an external etcd (%s): not counted here; --census inventory counts what "
        "each master runs, etcdctl endpoint health --cluster the external members" % external.members["m1"].client_url]
    with pytest.raises(CpctlError) as refused:      # the one API server: the census counts API servers alone
        preflight(results, targets, "stop", ["kube-apiserver"], parse_serial(1), False, None)
    assert "would leave 0 of 1 kube-apiserver" in refused.value.message


def test_etcd_servers_naming_every_stacked_member_are_not_external(real_etcd: RealEtcd) -> None:
    """An API server that lists every member of its stacked cluster (not only its own): the other
    members' URLs are not asked as its own member, and once etcd lists them they are not external."""
    root = real_etcd.members["m1"].root
    en.write_manifest(real_etcd, "m1")
    _apiserver_manifest(root, ",".join(real_etcd.endpoints(["m1", "m2", "m3"])))
    census, sources = _ask_etcd(_node(root, "m1"), [])
    assert sources.external == real_etcd.endpoints(["m2", "m3"])
    assert not census.error and still_external(census, sources.external) == []
    assert still_external(census, ["https://127.0.0.1:1"]) == ["https://127.0.0.1:1"]


def test_own_member_found_by_member_id_when_no_peer_url_matches(real_etcd: RealEtcd) -> None:
    """m1's manifest names its peer URL another way (a hostname etcd's list does not hold): its own
    member is the one that answered the member list at its own client URL, by the ID in the answer's
    header (recorded), and it is counted once; without that answer it would be counted twice."""
    member = real_etcd.members["m1"]
    census = take_census(LocalHost(), [member.client_url], tls_of(real_etcd, "m1"))
    assert census.answered_by == str(real_etcd.member_id("m1"))

    def counted(own_clients: List[str]) -> ClusterView:
        own = MemberCensus(components={"etcd": "present"}, apiserver_stacked=False, running={"etcd": True},
                           unasked={}, etcd_learner=False, etcd_alarms=[])
        view = ClusterView(node="cp-a", own=own, members={}, cluster="uid", api_error="", etcd_error="",
                           etcd_alarms=[], etcd_blocking=[], etcd_external=[], etcd_answered_by="", etcd_own_by="")
        _count_etcd(view, census, ["https://cp-a.example:2380"], own_clients)
        return view

    view = counted([member.client_url])
    assert (view["etcd_own_by"], view["etcd_answered_by"]) == ("member ID", str(real_etcd.member_id("m1")))
    results, _, _ = cluster_results([HostResult("cp-a", "ok", dict(view))])
    assert sorted(r.host for r in results) == ["cp-a", "etcd member m2", "etcd member m3"]
    # the answer came from another member's URL: no own member known, m1 is listed as etcd lists it
    view = counted([real_etcd.members["m2"].client_url + "/x"])
    assert view["etcd_own_by"] == "" and "etcd member m1" in view["members"]
    assert own_member_id(census, [member.peer_url], []) == (str(real_etcd.member_id("m1")), "peer URL")


def _with_kubeadm_probe(cluster: RealEtcd, name: str) -> None:
    """Member ``name``'s etcd.yaml with kubeadm's liveness probe on its metrics URL (what a master's
    own census asks, as the kubelet does)."""
    path = en.write_manifest(cluster, name)
    pod = yaml.safe_load(path.read_text())
    pod["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {
        "host": "127.0.0.1", "port": cluster.members[name].metrics_port, "scheme": "HTTP",
        "path": "/health?exclude=NOSPACE&serializable=true"}}
    path.write_text(yaml.safe_dump(pod))


def test_inventory_census_tells_a_learner_from_a_voter(real_etcd_factory: Factory) -> None:
    """--census inventory (each master's own census): 2 voters and a running learner (kubeadm's join).
    Each master asks its own member's entry in etcd's member list; the learner is named and not
    counted, so stopping a voter is refused as etcdctl's arithmetic says (it loses quorum)."""
    cluster = real_etcd_factory(members=2)
    cluster.add_member("m3", learner=True)
    results = []
    for name in ("m1", "m2", "m3"):
        _with_kubeadm_probe(cluster, name)
        census = census_of(_node(cluster.members[name].root, name))
        assert census["running"] == {"etcd": True}, (name, census)
        results.append(HostResult(name, "ok", dict(census)))
    assert [r.data["etcd_learner"] for r in results] == [False, False, True]
    ctl = etcdctl_view(cluster)
    assert (ctl.voters, ctl.learners, ctl.healthy_voters) == (2, 1, 2) and not ctl.allows_one_down()
    with pytest.raises(CpctlError) as refused:
        preflight(results, {"m1"}, "stop", ["etcd"], parse_serial(1), False, None)
    assert "would leave 1 of 2 etcd running" in refused.value.message
    assert "learner m3, not a voter" in refused.value.message
    # the learner may go as far as etcd is concerned (these masters run no API server, which the
    # API server rule counts: that is the only refusal left)
    with pytest.raises(CpctlError) as refused:
        preflight(results, {"m3"}, "stop", ["etcd"], parse_serial(1), False, None)
    assert "kube-apiserver running" in refused.value.message and "etcd running" not in refused.value.message

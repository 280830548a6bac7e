"""Fleet safety: refuse a stop or restart of etcd or the API server that would take the cluster down.

The caller takes a census (``census_of`` on every inventory master, not only the targeted ones)
and hands it here; unreachable masters count as members that run nothing. The rules:

* etcd keeps quorum only while a majority of its members run;
* at least one API server must keep serving. With stacked etcd (kubeadm's default) an API server
  talks to its own node's etcd only (``--etcd-servers=https://127.0.0.1:2379``): it is not serving
  while that etcd is parked, so stopping etcd on a master also takes that master's API server
  out (real-node-facts.md "kubeadm manifests by version", "HA control planes").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypedDict

from cpctl import catalogue
from cpctl.catalogue import ETCD
from cpctl.catalogue import KUBE_APISERVER as APISERVER
from cpctl.core.etcdclient import etcd_client_tls, parked_pods
from cpctl.core.flags import flags_of
from cpctl.core.manifests import Manifest
from cpctl.core.node import Node
from cpctl.core.views import status
from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, Serial

if TYPE_CHECKING:
    from cpctl.probes.etcdcluster import EtcdCensus

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def guarded(components: Sequence[str]) -> List[str]:
    """The components of ``components`` whose loss a fleet can feel (etcd, the API server)."""
    return [catalogue.canonical(c) for c in components if catalogue.quorum_guarded(c)]


def census_of(node: Node) -> "MemberCensus":
    """What one master runs, for the rules: each component's state, whether its API server uses
    only its own node's etcd (stacked), and for each guarded component whose manifest is present
    whether it really runs: its own health endpoint answers (etcd's, the API server's /readyz).
    A manifest in place is what the kubelet was told, not what runs; the rules count only what
    answered (``running``), and say why a component could not be asked (``unasked``)."""
    # one snapshot of the node's files for the view and the looks after it (until a change or a pause)
    node.host.snapshot(node.view_reads())
    view = status(node)
    states = {row["component"]: row["state"] for row in view["components"]}
    scan = node.scan()
    # stacked: the API server's --etcd-servers are this node's own etcd static pod (in place or
    # parked); a host etcd on 127.0.0.1 without one is external, and does not tie the API server
    # to an etcd the rules count
    stacked = ETCD in states and any(_uses_local_etcd(m.pod) for m in scan.valid if m.pod_name == APISERVER)
    running: Dict[str, bool] = {}
    unasked: Dict[str, str] = {}
    for manifest in scan.valid:
        name = catalogue.canonical(manifest.pod_name or "")
        if name in CLUSTER_COMPONENTS and states.get(name) == "present" and name not in running:
            running[name], why = endpoint_answers(node, manifest)
            if why:
                unasked[name] = why
    return MemberCensus(components=states, apiserver_stacked=stacked, running=running, unasked=unasked,
                        etcd_learner=states.get(ETCD) == "present" and own_is_learner(node), etcd_alarms=[])


def own_is_learner(node: Node) -> bool:
    """Whether this master's own etcd member is a learner: ``isLearner`` in the status its own client
    URLs answer (the member list's flag; a learner refuses the list itself). False when it cannot be
    asked: a member that does not answer does not run, and counting it as a voter that is down asks
    for more running voters, never fewer."""
    from cpctl.probes.etcdcluster import own_learner
    sources = etcd_sources(node)
    tls = etcd_client_tls(node)
    if tls is None or not sources.clients:
        return False
    return own_learner(node.host, sources.clients, tls, allow_http=sources.own_http)[0] is True


def endpoint_answers(node: Node, manifest: Manifest) -> Tuple[bool, str]:
    """(answers healthy, why it could not be asked): the component's own endpoint, the one its
    kubelet probes (the API server's /readyz; etcd's /readyz or /health), asked from the node."""
    from cpctl.probes.base import PodTarget, Unavailable
    from cpctl.probes.health import HealthProbe
    target = PodTarget(manifest.pod_name or "", "kube-system", node.node_name, pod=dict(manifest.pod or {}),
                       file=manifest.path.rsplit("/", 1)[-1])
    try:
        seen = HealthProbe(node.host).observe(target)
    except Unavailable as exc:          # ProbeMissing too: no endpoint known
        return False, str(exc)
    if not seen.present:
        return False, "nothing answers on its health endpoint (connection refused)"
    return seen.ready, ""


def _uses_local_etcd(pod: Optional[Dict[str, Any]]) -> bool:
    """True when the API server's --etcd-servers are all on the node itself."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        args = [a for a in (container.get("command") or []) + (container.get("args") or []) if isinstance(a, str)]
        for arg in args:
            if arg.startswith("--etcd-servers="):
                urls = [u for u in arg.split("=", 1)[1].split(",") if u]
                return bool(urls) and all(_host_of(u) in LOCAL_HOSTS for u in urls)
    return False


def _host_of(url: str) -> str:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):
        return rest[: rest.index("]") + 1] if "]" in rest else rest
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


@dataclass
class Member:
    """One master (or an etcd member that is no master cpctl knows) in the census.

    ``running``: per guarded component, whether its own endpoint answered healthy; a component
    not in it was never verified and does not count as running (fail safe). ``unasked``: why a
    component could not be asked, for the refusal's message."""

    host: str
    reachable: bool
    states: Dict[str, str] = field(default_factory=dict)
    stacked: bool = False
    running: Dict[str, bool] = field(default_factory=dict)
    unasked: Dict[str, str] = field(default_factory=dict)
    #: its etcd member is a learner: listed, named, never counted toward quorum
    etcd_learner: bool = False
    #: etcd's active alarms as etcd listed them ("NOSPACE (raised by m1)")
    etcd_alarms: List[str] = field(default_factory=list)
    #: its API server's --etcd-servers that are no stacked member of its own: an external etcd
    etcd_external: List[str] = field(default_factory=list)

    def votes(self, component: str) -> bool:
        """Whether it counts toward ``component``'s rule at all (an etcd learner does not)."""
        return not (component == ETCD and self.etcd_learner)

    def runs(self, component: str, stopped: Set[str]) -> bool:
        """Whether ``component`` keeps running here once ``stopped`` components are stopped."""
        if not self.reachable or component in stopped or self.states.get(component) != "present":
            return False
        if not self.votes(component):
            return False
        if not self.running.get(component, False):
            return False
        if component == APISERVER and self.stacked:
            return self.runs(ETCD, stopped)
        return True


def members(census: List[HostResult]) -> List[Member]:
    """The census as members; a master whose census failed is a member that runs nothing."""
    out = []
    for result in census:
        data = result.data
        if result.failed or not isinstance(data, dict):
            out.append(Member(result.host, False))
            continue
        alarms = data.get("etcd_alarms")
        external = data.get("etcd_external")
        out.append(Member(result.host, True, _text_map(data.get("components")), bool(data.get("apiserver_stacked")),
                          {k: v is True for k, v in _mapping(data.get("running")).items()},
                          _text_map(data.get("unasked")), data.get("etcd_learner") is True,
                          [str(a)[:200] for a in alarms[:MAX_ALARM_TEXTS]] if isinstance(alarms, list) else [],
                          [str(u)[:256] for u in external[:MAX_ALARM_TEXTS]] if isinstance(external, list) else []))
    return out


def external_notes(census: List[HostResult]) -> List[str]:
    """Each master whose API server stores in an external etcd, named with its URLs: that etcd is
    not counted by the census (its members are no static pods on these masters)."""
    return ["kube-apiserver on %s stores in an external etcd (%s): not counted here; --census inventory "
            "counts what each master runs, etcdctl endpoint health --cluster the external members"
            % (m.host, ", ".join(m.etcd_external[:4])) for m in members(census) if m.etcd_external]


MAX_ALARM_TEXTS = 64


def alarm_notes(census: List[HostResult]) -> List[str]:
    """etcd's active alarms as the census saw them, once each: for the operator to read before the
    change goes on (a NOSPACE alarm allows the restarts that fix it; any other alarm refuses)."""
    return alarm_notes_of(members(census))


def _mapping(value: object) -> Mapping[str, object]:
    """``value`` when it is a JSON object, else an empty one (a census or an API answer is untrusted)."""
    return value if isinstance(value, Mapping) else {}


def _text_map(value: object) -> Dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value).items()}


ALARM_HINT = ("see `etcdctl alarm list`; a CORRUPT member is removed and added again from a healthy member's "
              "data or the cluster restored from a snapshot (docs/etcd-restore.md), then the alarm disarmed")
UNASKED_HINT = ("a member that could not be asked counts as not running: make its endpoint answer, or count "
                "through each master's own agent (--census inventory with every master in the inventory)")


def preflight(census: List[HostResult], targets: Set[str], verb: str, components: Sequence[str], serial: Serial,
              force: bool, reason: Optional[str], ansible: bool = False) -> Optional[str]:
    """Refuse (exit 4) what the rules forbid; return the reason to record (marked when forced).
    The hint names the safe ways forward (:func:`quorum_hint`; ``ansible``: the run is one task of
    an Ansible play); ``--force`` stays documented in the help, never offered here: it is exactly
    what loses quorum."""
    stopping = set(guarded(components))
    if not stopping:
        return reason
    fleet = members(census)
    hit = [m.host for m in fleet if m.host in targets]
    at_once = hit if verb == "stop" else hit[: serial.batch(len(targets))]
    problems = [p for p in (_problem(c, verb, fleet, set(at_once), stopping) for c in (ETCD, APISERVER)) if p]
    if problems and not force:
        unasked = any(m.unasked or not m.reachable for m in fleet)
        parallel = verb != "stop" and len(at_once) > 1
        hint = quorum_hint(fleet, [c for c in (ETCD, APISERVER) if _problem(c, verb, fleet, set(at_once), stopping)],
                           parallel, ansible)
        raise CpctlError("refused: %s" % "; ".join(problems), ExitCode.REFUSED,
                         hint="; ".join(filter(None, (hint, UNASKED_HINT if unasked else ""))))
    if problems:
        return "[forced past: %s] %s" % ("; ".join(problems), reason or "")
    return reason


def quorum_hint(fleet: List[Member], components: Sequence[str], parallel: bool, ansible: bool) -> str:
    """What to do about a refusal, from what it is about: the members of ``components`` not
    running now, by name (bring them back first); the masters this run changes at once when it is
    parallel (one at a time: ``--serial 1``, under Ansible the play's ``serial: 1``); and when every
    member runs and the run is not parallel, that the change alone is more than the cluster takes.
    Nothing about waiting when everything runs, and never ``--force``."""
    parts = []
    for component in components:
        is_member = [m for m in fleet if not m.reachable or component in m.states]
        down = sorted(m.host for m in is_member if not m.runs(component, set()))
        if down:
            parts.append("%s does not run on %s: bring it back there first (%s), then run this again"
                         % (component, ", ".join(down), "a static_pod task with state: started" if ansible
                            else "cpctl start %s on that master; cpctl status shows why" % component))
        elif not parallel:
            tolerated = (len(is_member) - 1) // 2 if component == ETCD else len(is_member) - 1
            parts.append("%s runs on all %d members now: this change alone would take down more than the %d "
                         "the cluster can lose" % (component, len(is_member), tolerated))
    if parallel:
        parts.append("change one master at a time (%s)" % ("serial: 1 in the play" if ansible else "--serial 1"))
    return "; ".join(parts)


def _problem(component: str, verb: str, fleet: List[Member], down: Set[str], stopping: Set[str]) -> str:
    """What would be left of ``component`` when ``stopping`` components are down on ``down`` hosts."""
    if component == ETCD and ETCD not in stopping:
        return ""
    if component == APISERVER and not stopping & {APISERVER, ETCD}:
        return ""
    is_member = [m for m in fleet if (not m.reachable or component in m.states) and m.votes(component)]
    learners = [m.host for m in fleet if component in m.states and not m.votes(component)]
    running_now = [m for m in fleet if m.runs(component, set())]
    left = [m for m in fleet if m.runs(component, stopping if m.host in down else set())]
    need = len(is_member) // 2 + 1 if component == ETCD else 1
    if len(left) >= need:
        return ""
    dark = [m.host for m in fleet if not m.reachable]
    unasked = ["%s (%s)" % (m.host, m.unasked[component]) for m in is_member
               if m.reachable and component in m.unasked]
    alarms = alarm_notes_of(fleet) if component == ETCD else []
    what = "%s %s on %s" % (verb, ",".join(sorted(stopping)), ",".join(sorted(down)) or "-")
    return "%s would leave %d of %d %s running, %d now (%s%s%s%s%s)" % (
        what, len(left), len(is_member), component, len(running_now), catalogue.BY_NAME[component].quorum_rule,
        "; unreachable: %s" % ",".join(dark) if dark else "",
        "; could not ask, counted as not running: %s" % ", ".join(unasked) if unasked else "",
        "".join("; learner %s, not a voter" % name for name in sorted(learners)),
        "; etcd alarm %s" % ", ".join(alarms) if alarms else "")


def alarm_notes_of(fleet: List[Member]) -> List[str]:
    seen: List[str] = []
    for member in fleet:
        seen += [a for a in member.etcd_alarms if a not in seen]
    return seen


# --------------------------------------------------------------------------- the cluster's own view

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CLUSTER_COMPONENTS = (APISERVER, ETCD)


ETCD_URLS_ANNOTATION = "kubeadm.kubernetes.io/etcd.advertise-client-urls"
APISERVER_ENDPOINT_ANNOTATION = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"


class MemberCensus(TypedDict):
    """One master in a census (``census_of``'s shape): each guarded component's state, whether its
    API server uses only its own node's etcd, whether each one's own endpoint answered healthy
    (``running``) and why one could not be asked (``unasked``)."""

    components: Dict[str, str]
    apiserver_stacked: bool
    running: Dict[str, bool]
    unasked: Dict[str, str]
    etcd_learner: bool
    etcd_alarms: List[str]


class ClusterView(TypedDict):
    """``cluster_census_of``'s answer from one master."""

    node: str
    own: MemberCensus
    members: Dict[str, MemberCensus]
    cluster: str
    api_error: str
    etcd_error: str
    etcd_alarms: List[str]
    etcd_blocking: List[str]
    #: the API server's --etcd-servers that are not this node's stacked member (kubeadm etcd.external,
    #: a host etcd): named, never offered for the stacked count
    etcd_external: List[str]
    #: the member ID (decimal) of the member that gave the member list, and how this master's own
    #: member was found in it ("peer URL", "member ID": the member that answered at its own client
    #: URL, or "" when not found)
    etcd_answered_by: str
    etcd_own_by: str


def cluster_census_of(node: Node) -> ClusterView:
    """This master's census (read from its own files, its components asked at their own
    endpoints) and every other control-plane node's, for ``--census cluster``.

    For a caller that sees one master at a time (Ansible's ``serial``), counted from what runs,
    never from mirror pods (a parked stacked etcd's mirror pod stays Ready as last heard):

    * etcd's members come from etcd's own member list, and each counts as running when its own
      ``/health`` answers (``probes.etcdcluster``: ``etcdctl endpoint health --cluster``);
    * another node's API server counts as serving when its own ``/readyz`` answers, at the
      endpoint kubeadm's annotation on its mirror pod names (the API gives the address only).

    The API is still asked which nodes are control-plane nodes and for kube-system's uid (the
    cluster's name, for the caller's lock). What cannot be asked is reported: an API that does not
    answer in ``api_error``, an etcd without a readable member list in ``etcd_error`` (the caller
    refuses then), a member that did not answer in its ``unasked`` (it counts as not running)."""
    own = census_of(node)
    view = ClusterView(node=node.node_name, members={}, cluster="", api_error="", etcd_error="", own=own,
                       etcd_alarms=[], etcd_blocking=[], etcd_external=etcd_sources(node).external,
                       etcd_answered_by="", etcd_own_by="")
    try:
        from cpctl.probes.kubeapi import client_for
        client = client_for(node.host, node.kubeconfig)
        uid = _value(_field(client.request("GET", "/api/v1/namespaces/kube-system"), "metadata"), "uid")
        view["cluster"] = uid if isinstance(uid, str) else ""
        masters = [n for n in client.list_nodes() if CONTROL_PLANE_LABEL in _field(_field(n, "metadata"), "labels")]
        mirrors = [p for p in client.list_pods("kube-system")
                   if MIRROR_ANNOTATION in _field(_field(p, "metadata"), "annotations")]
    except CpctlError as exc:
        view["api_error"] = exc.message
        return view
    for master in masters:
        name = _value(_field(master, "metadata"), "name")
        if isinstance(name, str) and name and name != node.node_name:
            view["members"][name] = _member_view(node, name, mirrors)
    if ETCD in own["components"] or any(_component_of(p) == ETCD for p in mirrors):
        census, sources = _ask_etcd(node, mirrors)
        _count_etcd(view, census, sources.peers, sources.clients)
        view["etcd_external"] = still_external(census, view["etcd_external"])
    return view


def _member_view(node: Node, name: str, mirrors: Sequence[Mapping[str, object]]) -> MemberCensus:
    """Another control-plane node's API server: present while the API has its mirror pod, serving
    when its own /readyz answers (asked from ``node``). etcd is added from etcd's member list."""
    member = MemberCensus(components={APISERVER: "not running"}, apiserver_stacked=False, running={}, unasked={},
                          etcd_learner=False, etcd_alarms=[])
    has_etcd = any(_component_of(p) == ETCD and _value(_field(p, "spec"), "nodeName") == name for p in mirrors)
    for pod in mirrors:
        if _component_of(pod) != APISERVER or _value(_field(pod, "spec"), "nodeName") != name:
            continue
        member["components"][APISERVER] = "present"
        member["apiserver_stacked"] = has_etcd and _uses_local_etcd(dict(pod))
        endpoint = _field(_field(pod, "metadata"), "annotations").get(APISERVER_ENDPOINT_ANNOTATION)
        member["running"][APISERVER], why = _readyz(node, endpoint)
        if why:
            member["unasked"][APISERVER] = why
    return member


def _readyz(node: Node, endpoint: object) -> Tuple[bool, str]:
    """(serving, why it could not be asked) of the API server at ``endpoint`` (``host:port``)."""
    from cpctl.probes.etcdcluster import is_url
    from cpctl.probes.kubeapi import node_http
    url = "https://%s/readyz" % endpoint if isinstance(endpoint, str) else ""
    if not is_url(url):
        return False, "no address known (its mirror pod has no %s annotation)" % APISERVER_ENDPOINT_ANNOTATION
    try:
        reply = node_http(node.host, "GET", url, 2.0, 1 << 16, tls={"insecure": True})
    except ConnectionRefusedError:
        return False, ""                # nothing listens: it does not serve, for certain
    except OSError as exc:
        return False, "%s: %s" % (url, exc.strerror or exc)
    if reply["status"] in (401, 403):     # anonymous auth off (a CIS step): not an answer about serving
        return False, "could not ask (%d): %s" % (reply["status"], url)
    return reply["status"] == 200, ""


@dataclass
class EtcdSources:
    """What this node's own manifests (in place or parked) say about etcd: its stacked member's client
    and peer URLs, whether that member uses plain http, and the API server's --etcd-servers that are
    not that member (``external``: kubeadm's etcd.external, or a host etcd with no static pod)."""

    clients: List[str]
    peers: List[str]
    own_http: bool
    external: List[str]


def etcd_sources(node: Node) -> EtcdSources:
    """The node's etcd URLs (``EtcdSources``). An --etcd-servers URL is the stacked member's when the
    node's etcd manifest lists it among its client URLs; every other one is external - asking it
    for the stacked count would count another cluster (or a host etcd) as this one."""
    clients: List[str] = []
    peers: List[str] = []
    servers: List[str] = []
    for pod in [m.pod for m in node.scan().valid if m.pod_name in CLUSTER_COMPONENTS] + parked_pods(node):
        for container in _containers(pod):
            values = {f.name: f.value or "" for f in flags_of(container)}
            if _name_of(pod) == ETCD:
                clients += _urls(values.get("listen-client-urls", ""), loopback_first=True)
                clients += _urls(values.get("advertise-client-urls", ""))
                peers += _urls(values.get("initial-advertise-peer-urls", ""))
                peers += _urls(values.get("listen-peer-urls", ""))
            elif _name_of(pod) == APISERVER:
                servers += _urls(values.get("etcd-servers", ""))
    own = {u.rstrip("/") for u in clients}
    external = [u for u in dict.fromkeys(servers) if u.rstrip("/") not in own]
    return EtcdSources(list(dict.fromkeys(clients)), list(dict.fromkeys(peers)),
                       any(u.startswith("http://") for u in clients), external)


def still_external(census: "EtcdCensus", urls: Sequence[str]) -> List[str]:
    """``urls`` less those a member of ``census`` serves: an --etcd-servers URL naming another member
    of the stacked cluster (an API server that lists every member) is that cluster's, not external."""
    listed = {u.rstrip("/") for m in census.members for u in m.client_urls}
    return [u for u in urls if u.rstrip("/") not in listed]


def _ask_etcd(node: Node, mirrors: Sequence[Mapping[str, object]]) -> Tuple["EtcdCensus", EtcdSources]:
    """etcd's members, alarms and health, asked from ``node`` through its own member first, then
    any member kubeadm's annotations name (addresses only: their health is asked of etcd); and
    this node's etcd sources (its own peer URLs: how its member is found in the list, by peer URL,
    not name). The API server's --etcd-servers are asked only where they are this node's own member
    (an external etcd is not the stacked cluster). Plain http:// URLs are asked only when this
    node's own etcd manifest uses http."""
    from cpctl.probes.etcdcluster import take_census
    sources = etcd_sources(node)
    endpoints = list(sources.clients)
    for pod in mirrors:
        if _component_of(pod) == ETCD:
            endpoints += _urls(str(_field(_field(pod, "metadata"), "annotations").get(ETCD_URLS_ANNOTATION) or ""))
    tls = etcd_client_tls(node)
    if tls is None:
        from cpctl.probes.etcdcluster import EtcdCensus
        return EtcdCensus(error="no etcd client certificate found (neither the API server's --etcd-certfile nor "
                                "kubeadm's etcd/healthcheck-client beside etcd's --trusted-ca-file)"), sources
    return take_census(node.host, endpoints, tls, allow_http=sources.own_http), sources


def _name_of(pod: Optional[Mapping[str, object]]) -> str:
    name = _field(pod, "metadata").get("name")
    return name if isinstance(name, str) else ""


def _containers(pod: Optional[Mapping[str, object]]) -> List[Mapping[str, object]]:
    items = _field(pod, "spec").get("containers")
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def _urls(text: str, loopback_first: bool = False) -> List[str]:
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if loopback_first:
        urls.sort(key=lambda u: _host_of(u) not in LOCAL_HOSTS)
    return urls


def _count_etcd(view: ClusterView, etcd: "EtcdCensus", own_peers: Sequence[str] = (),
                own_clients: Sequence[str] = ()) -> None:
    """Put etcd's own account of its members into the view, keyed by member ID: this node's own
    member is the one whose peer URL its etcd manifest names (not its name: ``--name`` may differ
    from the node name); a control-plane node is an etcd member when etcd lists it under its name
    (kubeadm names a stacked member after its node), a listed member that is no node the API knows
    is a member of its own; each runs when its health answered. A learner is listed and named but
    never counted; alarms go with the view (CORRUPT and other non-NOSPACE ones refuse).
    When no member has a peer URL the manifest names (an address written another way), the own
    member is the one that answered the member list at one of the node's own client URLs (``own_clients``),
    by the member ID in its answer's header."""
    if etcd.error:
        view["etcd_error"] = etcd.error
        return
    view["etcd_alarms"] = etcd.alarm_texts()
    view["etcd_blocking"] = etcd.blocking_alarms
    view["etcd_answered_by"] = etcd.answered_by
    own_id = own_member_id(etcd, own_peers, own_clients)
    view["etcd_own_by"] = own_id[1]
    own = view["own"]
    for member in etcd.members:
        if member.member_id == own_id[0]:
            own["running"][ETCD] = own["running"].get(ETCD, False) and member.running
            own["etcd_learner"] = member.learner
            if member.why_not and own["components"].get(ETCD) == "present":
                own["unasked"][ETCD] = member.why_not
            continue
        named = member.name if member.name in view["members"] and member.name != view["node"] else ""
        key = named or "etcd member %s" % member.label
        entry = view["members"].setdefault(key, MemberCensus(components={}, apiserver_stacked=False, running={},
                                                             unasked={}, etcd_learner=False, etcd_alarms=[]))
        entry["components"][ETCD] = "present"
        entry["running"][ETCD] = member.running
        entry["etcd_learner"] = member.learner
        if member.why_not and member.why_not != "connection refused":
            entry["unasked"][ETCD] = member.why_not


def own_member_id(etcd: "EtcdCensus", own_peers: Sequence[str], own_clients: Sequence[str]) -> Tuple[str, str]:
    """(member ID, how it was found) of this node's own member in ``etcd``'s list: by a peer URL its
    manifest names, else by the ID of the member that answered at one of its own client URLs; ("",
    "") when neither (it then counts as a member of its own, as etcd lists it)."""
    peers = {p.rstrip("/") for p in own_peers}
    for member in etcd.members:
        if peers & set(member.peer_urls):
            return member.member_id, "peer URL"
    clients = {c.rstrip("/") for c in own_clients}
    if etcd.asked.rstrip("/") in clients and any(m.member_id == etcd.answered_by for m in etcd.members):
        return etcd.answered_by, "member ID"
    return "", ""


def _field(obj: object, key: str) -> Mapping[str, object]:
    """``obj[key]`` when both are JSON objects, else an empty one: an API answer is untrusted."""
    return _mapping(_value(obj, key))


def _value(obj: object, key: str) -> object:
    """``obj[key]`` when ``obj`` is a JSON object, else None; the caller checks its type."""
    return obj.get(key) if isinstance(obj, Mapping) else None


def _component_of(pod: Mapping[str, object]) -> str:
    """kubeadm's ``component`` label (kube-apiserver, etcd, ...)."""
    value = _field(_field(pod, "metadata"), "labels").get("component")
    return value if isinstance(value, str) else ""


def cluster_results(views: List[HostResult]) -> Tuple[List[HostResult], Set[str], str]:
    """The census ``preflight`` takes, built from ``cluster_census_of`` on the selected masters:
    each selected master from its own files, every other control-plane node as the API shows it.
    Returns the census, the selected masters' node names, and the cluster's name.

    A master that could not be asked, an API that did not answer or an etcd whose member list could
    not be read refuses (exit 4): the rules cannot be checked, so nothing is counted as running."""
    census: Dict[str, HostResult] = {}
    targets: Set[str] = set()
    cluster = ""
    for result in views:
        if result.failed or not isinstance(result.data, dict):
            raise CpctlError("refused: cannot check etcd quorum and the serving API servers: %s: %s"
                             % (result.host, result.error or result.status), ExitCode.REFUSED, hint=UNASKED_HINT)
        view = result.data
        if view.get("api_error"):
            raise CpctlError("refused: cannot count etcd members and API servers through %s's API server: %s"
                             % (result.host, view["api_error"]), ExitCode.REFUSED, hint=UNASKED_HINT)
        if view.get("etcd_error"):
            raise CpctlError("refused: cannot count etcd members from %s: %s" % (result.host, view["etcd_error"]),
                             ExitCode.REFUSED, hint=UNASKED_HINT)
        blocking = view.get("etcd_blocking")
        if isinstance(blocking, list) and blocking:
            raise CpctlError("refused: etcd reports alarm %s (asked from %s): its data cannot be trusted"
                             % (", ".join(str(b)[:200] for b in blocking[:MAX_ALARM_TEXTS]), result.host),
                             ExitCode.REFUSED, hint=ALARM_HINT)
        cluster = cluster or str(view.get("cluster") or "")
        for name, member in (view.get("members") or {}).items():
            census.setdefault(name, HostResult(name, "ok", member))
        own = str(view["node"])         # a master's own files win over another's API view of it
        targets.add(own)
        census[own] = HostResult(own, "ok", dict(view["own"], etcd_alarms=view.get("etcd_alarms") or [],
                                                 etcd_external=view.get("etcd_external") or []))
    return [census[name] for name in sorted(census)], targets, cluster

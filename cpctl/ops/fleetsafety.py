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
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypedDict

from cpctl import catalogue
from cpctl.catalogue import ETCD
from cpctl.catalogue import KUBE_APISERVER as APISERVER
from cpctl.core.node import Node
from cpctl.core.views import status
from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, Serial

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def guarded(components: Sequence[str]) -> List[str]:
    """The components of ``components`` whose loss a fleet can feel (etcd, the API server)."""
    return [catalogue.canonical(c) for c in components if catalogue.quorum_guarded(c)]


def census_of(node: Node) -> Dict[str, Any]:
    """What one master runs, for the rules: each component's state and whether its API server uses
    only its own node's etcd (stacked)."""
    view = status(node)
    states = {row["component"]: row["state"] for row in view["components"]}
    stacked = any(_uses_local_etcd(m.pod) for m in node.scan().valid if m.pod_name == APISERVER)
    return {"components": states, "apiserver_stacked": stacked}


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
    """One master in the census."""

    host: str
    reachable: bool
    states: Dict[str, str] = field(default_factory=dict)
    stacked: bool = False

    def runs(self, component: str, stopped: Set[str]) -> bool:
        """Whether ``component`` keeps running here once ``stopped`` components are stopped."""
        if not self.reachable or component in stopped or self.states.get(component) != "present":
            return False
        if component == APISERVER and self.stacked:
            return self.runs(ETCD, stopped)
        return True


def members(census: List[HostResult]) -> List[Member]:
    out = []
    for result in census:
        if result.failed or not isinstance(result.data, dict):
            out.append(Member(result.host, False))
        else:
            out.append(Member(result.host, True, dict(result.data.get("components") or {}),
                              bool(result.data.get("apiserver_stacked"))))
    return out


def preflight(census: List[HostResult], targets: Set[str], verb: str, components: Sequence[str], serial: Serial,
              force: bool, reason: Optional[str]) -> Optional[str]:
    """Refuse (exit 4) what the rules forbid; return the reason to record (marked when forced)."""
    stopping = set(guarded(components))
    if not stopping:
        return reason
    fleet = members(census)
    hit = [m.host for m in fleet if m.host in targets]
    at_once = hit if verb == "stop" else hit[: serial.batch(len(targets))]
    problems = [p for p in (_problem(c, verb, fleet, set(at_once), stopping) for c in (ETCD, APISERVER)) if p]
    if problems and not force:
        raise CpctlError("refused: %s (use --force to override; it is recorded)" % "; ".join(problems),
                         ExitCode.REFUSED)
    if problems:
        return "[forced past: %s] %s" % ("; ".join(problems), reason or "")
    return reason


def _problem(component: str, verb: str, fleet: List[Member], down: Set[str], stopping: Set[str]) -> str:
    """What would be left of ``component`` when ``stopping`` components are down on ``down`` hosts."""
    if component == ETCD and ETCD not in stopping:
        return ""
    if component == APISERVER and not stopping & {APISERVER, ETCD}:
        return ""
    is_member = [m for m in fleet if not m.reachable or component in m.states]
    running_now = [m for m in fleet if m.runs(component, set())]
    left = [m for m in fleet if m.runs(component, stopping if m.host in down else set())]
    need = len(is_member) // 2 + 1 if component == ETCD else 1
    if len(left) >= need:
        return ""
    dark = [m.host for m in fleet if not m.reachable]
    what = "%s %s on %s" % (verb, ",".join(sorted(stopping)), ",".join(sorted(down)) or "-")
    return "%s would leave %d of %d %s running, %d now (%s%s)" % (
        what, len(left), len(is_member), component, len(running_now), catalogue.BY_NAME[component].quorum_rule,
        "; unreachable: %s" % ",".join(dark) if dark else "")


# --------------------------------------------------------------------------- the cluster's own view

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CLUSTER_COMPONENTS = (APISERVER, ETCD)


class MemberCensus(TypedDict):
    """One master in a census: each guarded component's state, and whether its API server uses only
    its own node's etcd (``census_of``'s shape)."""

    components: Dict[str, str]
    apiserver_stacked: bool


class ClusterView(TypedDict):
    """``cluster_census_of``'s answer from one master."""

    node: str
    own: MemberCensus
    members: Dict[str, MemberCensus]
    cluster: str
    api_error: str


def cluster_census_of(node: Node) -> ClusterView:
    """This master's census (exact: read from its own files) and the cluster's view of every other
    control-plane node, asked through the master's own kubeconfig (``--census cluster``).

    For a caller that sees one master at a time (Ansible's ``serial``): every control-plane Node is
    a member; an etcd or API server counts as running there while its mirror pod exists and is
    Ready (kubeadm's stacked etcd: a control-plane node is an etcd member once any etcd mirror pod
    exists). ``cluster`` names the cluster (kube-system's uid) for the caller's lock. An API that
    cannot be asked is reported in ``api_error``: the caller refuses a guarded change then."""
    own = census_of(node)
    view = ClusterView(node=node.node_name, members={}, cluster="", api_error="",
                       own=MemberCensus(components=dict(own["components"]),
                                        apiserver_stacked=bool(own["apiserver_stacked"])))
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
    stacked_etcd = any(_component_of(p) == ETCD for p in mirrors)
    for master in masters:
        name = _value(_field(master, "metadata"), "name")
        if isinstance(name, str) and name and name != node.node_name:
            view["members"][name] = _member_view(name, mirrors, stacked_etcd)
    return view


def _member_view(name: str, mirrors: Sequence[Mapping[str, object]], stacked_etcd: bool) -> MemberCensus:
    """One other control-plane node as the API shows it, in ``census_of``'s shape."""
    states = {APISERVER: "not running"}
    if stacked_etcd:
        states[ETCD] = "not running"
    stacked = False
    for pod in mirrors:
        component = _component_of(pod)
        if component not in CLUSTER_COMPONENTS or _value(_field(pod, "spec"), "nodeName") != name:
            continue
        if _ready(pod):
            states[component] = "present"
        if component == APISERVER:
            stacked = _uses_local_etcd(dict(pod))
    return MemberCensus(components=states, apiserver_stacked=stacked)


def _field(obj: object, key: str) -> Mapping[str, object]:
    """``obj[key]`` when both are JSON objects, else an empty one: an API answer is untrusted."""
    value = _value(obj, key)
    return value if isinstance(value, Mapping) else {}


def _value(obj: object, key: str) -> object:
    """``obj[key]`` when ``obj`` is a JSON object, else None; the caller checks its type."""
    return obj.get(key) if isinstance(obj, Mapping) else None


def _component_of(pod: Mapping[str, object]) -> str:
    """kubeadm's ``component`` label (kube-apiserver, etcd, ...)."""
    value = _field(_field(pod, "metadata"), "labels").get("component")
    return value if isinstance(value, str) else ""


def _ready(pod: Mapping[str, object]) -> bool:
    conditions = _value(_field(pod, "status"), "conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def cluster_results(views: List[HostResult]) -> Tuple[List[HostResult], Set[str], str]:
    """The census ``preflight`` takes, built from ``cluster_census_of`` on the selected masters:
    each selected master from its own files, every other control-plane node as the API shows it.
    Returns the census, the selected masters' node names, and the cluster's name.

    A master that could not be asked, or an API that did not answer, refuses (exit 4): the rules
    cannot be checked, and a guarded change without them is what ``--force`` is for."""
    census: Dict[str, HostResult] = {}
    targets: Set[str] = set()
    cluster = ""
    for result in views:
        if result.failed or not isinstance(result.data, dict):
            raise CpctlError("refused: cannot check etcd quorum and the serving API servers: %s: %s (use --force "
                             "to override; it is recorded)" % (result.host, result.error or result.status),
                             ExitCode.REFUSED)
        view = result.data
        if view.get("api_error"):
            raise CpctlError("refused: cannot count etcd members and API servers through %s's API server: %s "
                             "(use --force to override; it is recorded)" % (result.host, view["api_error"]),
                             ExitCode.REFUSED)
        cluster = cluster or str(view.get("cluster") or "")
        for name, member in (view.get("members") or {}).items():
            census.setdefault(name, HostResult(name, "ok", member))
        own = str(view["node"])         # a master's own files win over another's API view of it
        targets.add(own)
        census[own] = HostResult(own, "ok", view["own"])
    return [census[name] for name in sorted(census)], targets, cluster

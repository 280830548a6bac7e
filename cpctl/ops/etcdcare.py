"""etcd care: status, rolling defragmentation, alarms, the NOSPACE runbook and leadership moves,
made from one master through its agent with the node's own etcd client certificate.

Each operation first takes a **survey**: the member list (any member that answers), then each
member's own status and ``/health`` at its client URL, and the cluster's alarms. The rules that
keep the cluster up come from etcd's own account of itself (real-node-facts.md "etcd, measured on
the real binaries"), never from mirror pods:

* quorum is a majority of the **voters**; a learner is never counted (it cannot vote), a member
  that is not healthy counts as down, and a member being defragmented counts as down too (it
  blocks every request while its backend is rewritten);
* a member is healthy when it serves a read of the key ``health`` (linearizable for a voter,
  serializable for a learner), as ``etcdctl endpoint health`` asks: a NOSPACE alarm, which makes
  ``/health`` false on every member, leaves reads served, so NOSPACE never counts as a member down
  (kubeadm's probe excludes it too); a CORRUPT alarm refuses every change, named;
* defragmentation goes one member at a time, followers first (learners, then voters), the leader
  last, after leadership was moved to a healthy voter that was already defragmented, so the
  cluster never waits for an election timeout and never has two members blocked at once (the
  order of ahrtr/etcd-defrag; docs/etcd.md compares it with Talos and OpenShift).

A change writes an **intent** (``etcd-op.json`` in the state dir: which member is being changed, by
which process) before it touches a member and removes it after; the history gets one record per
member. A cpctl killed with SIGKILL leaves the intent; the next etcd command on that node names the
member it was changing, records it in the history, and drops it (etcd itself finishes a
defragmentation whose client went away: nothing of it is half-done on cpctl's side).
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypedDict

from cpctl.catalogue import ETCD, KUBE_APISERVER
from cpctl.core.flags import flags_of
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode, Interrupted, Terminated, interrupted_by
from cpctl.host.base import HttpRequest
from cpctl.probes.etcdmaint import MAX_URLS, Alarm, EtcdError, Gateway, Member, MemberList, Status, hex_id
from cpctl.timeutil import iso

if TYPE_CHECKING:
    from cpctl.core.views import Report

#: etcd's defaults for the rules (OpenShift's etcd operator defragments past 45 % fragmentation and
#: above 100 MiB; ahrtr/etcd-defrag's documented rule uses the same kind of thresholds).
DEFAULT_MIN_FREE = 100 << 20
DEFAULT_MIN_RATIO = 0.45
#: One member's defragmentation: etcd rewrites its whole backend (about 1 s per 100 MiB on a busy
#: disk); a hung one is reported after this, and etcd still finishes it by itself.
DEFRAG_TIMEOUT = 600.0
#: A leadership transfer is done within etcd's election timeout (1 s by default); the wait until the
#: new leader is seen by every member leaves room for 2 busy cores.
LEADER_WAIT = 30.0
#: etcd's --quota-backend-bytes default (2 GiB, etcd server/storage/quota.go DefaultQuotaBytes).
DEFAULT_QUOTA = 2 << 30
#: recover-space calls the space back when every member's database is under this share of the quota.
QUOTA_HEADROOM = 0.95
INTENT = "etcd-op.json"
#: What an intent's operation did to its member, for the line that names a killed run.
INTENT_WORDS = {"defrag": "defragmented", "move-leader": "its leadership handed over",
                "alarm-disarm": "its alarm disarmed"}
CHECK_KEY = b"/cpctl/recover-space/check"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")

Progress = Callable[[str], None]


# --------------------------------------------------------------------------- reaching etcd

def gateway_of(node: Node) -> Tuple[Gateway, List[str]]:
    """The gateway with the node's etcd client pair, and the client URLs to ask first: the node's own
    member (loopback first), then what its API server's --etcd-servers name."""
    from cpctl.core.etcdclient import etcd_client_tls
    scan = node.scan()
    tls = etcd_client_tls(node, scan)
    if tls is None:
        raise CpctlError("no etcd client certificate found on node %s (neither the API server's --etcd-certfile "
                         "nor kubeadm's etcd/healthcheck-client beside etcd's --trusted-ca-file)" % node.node_name,
                         ExitCode.ENVIRONMENT)
    endpoints: List[str] = []
    for manifest in scan.valid:
        if manifest.pod_name == ETCD:
            endpoints += member_urls(manifest.pod)
        elif manifest.pod_name == KUBE_APISERVER:
            for container in _containers(manifest.pod):
                values = {f.name: f.value or "" for f in flags_of(container)}
                endpoints += _split(values.get("etcd-servers", ""))
    return Gateway(node.host, tls), list(dict.fromkeys(endpoints))


def member_urls(pod: Optional[Mapping[str, object]]) -> List[str]:
    """The client URLs of the member an etcd manifest's pod runs, to ask it by: ``--listen-client-urls``
    and ``--advertise-client-urls``, loopback first; only http(s) URLs (``is_url``: never one made up
    of a manifest's text), at most ``MAX_URLS``. One list for every question put to a node's own
    member: the survey's first endpoints, ``own_member``, the identity gate (``ops.etcdidentity``)."""
    from cpctl.probes.etcdcluster import is_url
    loopback: List[str] = []
    others: List[str] = []
    for container in _containers(pod):
        values = {f.name: f.value or "" for f in flags_of(container)}
        for flag in ("listen-client-urls", "advertise-client-urls"):
            for url in _split(values.get(flag, "")):
                if is_url(url) and url not in loopback and url not in others:
                    (loopback if _local(url) else others).append(url)
    return (loopback + others)[:MAX_URLS]


def quota_of(node: Node) -> int:
    """The node's etcd --quota-backend-bytes (etcd's default when its manifest does not say)."""
    for manifest in node.scan().valid:
        if manifest.pod_name != ETCD:
            continue
        for container in _containers(manifest.pod):
            for flag in flags_of(container):
                if flag.name == "quota-backend-bytes" and (flag.value or "").isdigit():
                    return int(flag.value or 0) or DEFAULT_QUOTA
    return DEFAULT_QUOTA


def _containers(pod: Optional[Mapping[str, object]]) -> List[Mapping[str, object]]:
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    items = spec.get("containers") if isinstance(spec, Mapping) else None
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def _split(text: str) -> List[str]:
    return [u.strip() for u in text.split(",") if u.strip()]


def _local(url: str) -> bool:
    """Whether ``url``'s host is this machine's loopback (127.0.0.0/8, ``[::1]``, localhost)."""
    hostport = url.split("://", 1)[-1].split("/", 1)[0]
    host = hostport if hostport.endswith("]") else hostport.rsplit(":", 1)[0]
    return host.startswith("127.") or host in LOCAL_HOSTS


# --------------------------------------------------------------------------- the survey

@dataclass
class MemberView:
    """One member in a survey: as listed, its own status (None: it did not answer) and health."""

    member: Member
    status: Optional[Status] = None
    endpoint: str = ""                  # the client URL that answered
    healthy: bool = False
    why: str = ""                       # why not healthy / why no status

    @property
    def name(self) -> str:
        return self.member.label


@dataclass
class Survey:
    """The cluster as etcd reports it now (see the module docstring)."""

    cluster_id: int
    members: List[MemberView]
    alarms: List[Alarm]
    asked: str
    alarm_error: str = ""

    @property
    def leader(self) -> Optional[MemberView]:
        """The member the answering members name as leader, at the highest raft term they report."""
        seen = [v.status for v in self.members if v.status is not None and v.status.leader]
        if not seen:
            return None
        newest = max(seen, key=lambda s: s.raft_term)
        return next((v for v in self.members if v.member.id == newest.leader), None)

    def by_name(self, name: str) -> Optional[MemberView]:
        return next((v for v in self.members if v.member.name == name or hex_id(v.member.id) == name), None)

    @property
    def voters(self) -> List[MemberView]:
        return [v for v in self.members if not v.member.learner]

    def alarm_kinds(self) -> Set[str]:
        return {a.alarm for a in self.alarms}

    def name_of(self, member_id: int) -> str:
        return next((v.name for v in self.members if v.member.id == member_id), hex_id(member_id))


def survey(gateway: Gateway, endpoints: Sequence[str]) -> Survey:
    """The member list through the first of ``endpoints`` that answers, each member's status and
    health at its own client URLs, and the alarms; ``CpctlError`` (exit 7) when no member listed."""
    listed = _member_list(gateway, endpoints)
    views = [_view(gateway, m) for m in listed.members]
    alarms: List[Alarm] = []
    alarm_error = ""
    for endpoint in [listed.asked] + [v.endpoint for v in views if v.endpoint]:
        try:
            alarms = gateway.alarms(endpoint)
            alarm_error = ""
            break
        except EtcdError as exc:
            alarm_error = str(exc)
    return Survey(listed.cluster_id, views, alarms, listed.asked, alarm_error)


def _member_list(gateway: Gateway, endpoints: Sequence[str]) -> MemberList:
    tried = []
    for endpoint in endpoints:
        try:
            return gateway.member_list(endpoint)
        except EtcdError as exc:
            tried.append(str(exc))
    raise CpctlError("no etcd member answered with the member list (%s)"
                     % ("; ".join(tried) if tried else "no etcd client URL in the node's manifests"),
                     ExitCode.ENVIRONMENT)


def _view(gateway: Gateway, member: Member) -> MemberView:
    view = MemberView(member)
    if not member.client_urls:
        view.why = "no client URL: added but never started"
        return view
    for url in member.client_urls:
        try:
            view.status, view.endpoint = gateway.status(url), url
            break
        except EtcdError as exc:
            view.why = exc.why
    if view.status is not None and view.status.member_id != member.id:
        view.why = "%s answers as member %s, not %s" % (view.endpoint, hex_id(view.status.member_id),
                                                         hex_id(member.id))
        view.status, view.endpoint = None, ""
    if view.endpoint:
        view.healthy, view.why = gateway.health(view.endpoint, learner=member.learner)
    return view


# --------------------------------------------------------------------------- status

class MemberRow(TypedDict):
    """One member of ``etcd status`` (-o json; tests/schemas/etcd-status.json)."""

    id: str
    name: str
    learner: bool
    leader: bool
    version: Optional[str]
    db_size: Optional[int]
    db_size_in_use: Optional[int]
    free: Optional[int]
    fragmentation: Optional[float]
    raft_term: Optional[int]
    raft_index: Optional[int]
    raft_applied_index: Optional[int]
    revision: Optional[int]
    peer_urls: List[str]
    client_urls: List[str]
    endpoint: str
    healthy: bool
    why: str
    alarms: List[str]
    errors: List[str]


class StatusReport(TypedDict):
    """``etcd status``'s result."""

    node: str
    cluster_id: str
    asked: str
    leader: Optional[str]
    members: List[MemberRow]
    alarms: List[Dict[str, str]]
    alarm_error: str
    voters: int
    voters_healthy: int
    quorum: int
    interrupted: List[str]


def status(node: Node) -> StatusReport:
    """``etcdctl endpoint status --cluster`` + ``member list`` + ``alarm list``, without a certificate flag."""
    gateway, endpoints = gateway_of(node)
    interrupted = settle_intent(node, gateway, endpoints)
    seen = survey(gateway, endpoints)
    return report(node, seen, interrupted)


def report(node: Node, seen: Survey, interrupted: Sequence[str] = ()) -> StatusReport:
    leader = seen.leader
    rows = [_row(v, leader, seen.alarms) for v in seen.members]
    voters = seen.voters
    return StatusReport(node=node.node_name, cluster_id=hex_id(seen.cluster_id), asked=seen.asked,
                        leader=leader.name if leader else None, members=rows,
                        alarms=[{"member_id": hex_id(a.member_id), "member": seen.name_of(a.member_id),
                                 "alarm": a.alarm} for a in seen.alarms],
                        alarm_error=seen.alarm_error, voters=len(voters),
                        voters_healthy=sum(1 for v in voters if v.healthy), quorum=len(voters) // 2 + 1,
                        interrupted=list(interrupted))


def _row(view: MemberView, leader: Optional[MemberView], alarms: Sequence[Alarm]) -> MemberRow:
    st = view.status
    free = st.db_size - st.db_size_in_use if st is not None and st.db_size >= st.db_size_in_use else None
    return MemberRow(
        id=hex_id(view.member.id), name=view.member.name, learner=view.member.learner,
        leader=leader is not None and leader.member.id == view.member.id,
        version=st.version if st else None, db_size=st.db_size if st else None,
        db_size_in_use=st.db_size_in_use if st else None, free=free,
        fragmentation=round(free / st.db_size, 4) if st is not None and free is not None and st.db_size else None,
        raft_term=st.raft_term if st else None, raft_index=st.raft_index if st else None,
        raft_applied_index=st.raft_applied_index if st else None, revision=st.revision if st else None,
        peer_urls=list(view.member.peer_urls), client_urls=list(view.member.client_urls), endpoint=view.endpoint,
        healthy=view.healthy, why=view.why,
        alarms=sorted({a.alarm for a in alarms if a.member_id == view.member.id}),
        errors=list(st.errors) if st else [])


# --------------------------------------------------------------------------- the guards

def refuse_corrupt(seen: Survey, what: str) -> None:
    """A CORRUPT alarm refuses every change (exit 4), naming the members that raised it."""
    corrupt = [seen.name_of(a.member_id) for a in seen.alarms if a.alarm == "CORRUPT"]
    if corrupt:
        raise CpctlError("refused: %s: a CORRUPT alarm is active (raised by %s): etcd found members whose data "
                         "differ; find the bad member (etcd's logs) and replace it before any maintenance"
                         % (what, ", ".join(sorted(corrupt))), ExitCode.REFUSED,
                         hint="see docs/etcd.md, \"CORRUPT\"")
    if seen.alarm_error:
        raise CpctlError("refused: %s: the alarms could not be read (%s)" % (what, seen.alarm_error),
                         ExitCode.REFUSED)


def quorum_problem(seen: Survey, down: MemberView, verb: str) -> str:
    """Why making ``down`` unavailable now would lose quorum ("" when it would not): a majority of
    the voters must stay healthy while it is down; a learner's own outage never counts."""
    if not down.healthy:
        return "%s %s: it is not healthy now (%s)" % (verb, down.name, down.why or "no answer")
    if down.member.learner:
        return ""
    voters = seen.voters
    need = len(voters) // 2 + 1
    left = [v for v in voters if v.healthy and v.member.id != down.member.id]
    if len(left) >= need:
        return ""
    sick = ["%s (%s)" % (v.name, v.why or "no answer") for v in voters if not v.healthy]
    return ("%s %s would leave %d of %d voting members healthy, %d needed for quorum%s"
            % (verb, down.name, len(left), len(voters), need, "; not healthy now: " + ", ".join(sick) if sick else ""))


QUORUM_HINT = "wait until every voting member is healthy (cpctl etcd status), then run it again"


# --------------------------------------------------------------------------- intents and history

def _intent_path(node: Node) -> str:
    return node.state.path + "/" + INTENT


def write_intent(node: Node, op: str, member: MemberView, **extra: str) -> None:
    """Before a member is changed: which one, by which process (the next run reports a killed one)."""
    who = node.host.info()
    body = {"op": op, "member": member.name, "member_id": hex_id(member.member.id), "started": iso(),
            "pid": who["pid"], "host": who["hostname"]}
    body.update(extra)
    node.host.write_atomic(_intent_path(node), json.dumps(body, sort_keys=True).encode() + b"\n")


def clear_intent(node: Node) -> None:
    node.host.unlink(_intent_path(node))


def settle_intent(node: Node, gateway: Gateway, endpoints: Sequence[str]) -> List[str]:
    """An intent left by a cpctl that was killed mid-change: name it, record it, drop it. Returns the
    lines to show ([] when none)."""
    from cpctl.core.state import MAX_STATE_FILE
    if not node.state.ensure(create=False):
        return []
    try:
        raw = node.host.read_file(_intent_path(node), MAX_STATE_FILE)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CpctlError("cannot read %s: %s" % (_intent_path(node), exc.strerror or exc), ExitCode.ENVIRONMENT) \
            from None
    try:
        intent = json.loads(raw.decode("utf-8"))
        if not isinstance(intent, dict):
            raise ValueError
    except (UnicodeDecodeError, ValueError):
        intent = {}
    op, member = str(intent.get("op") or "?")[:40], str(intent.get("member") or "?")[:80]
    line = ("a cpctl etcd %s (pid %s) was stopped at %s while member %s was being changed (%s); etcd finishes "
            "its own part by itself, nothing of it was left half-done by cpctl" % (
                op, str(intent.get("pid") or "?")[:12], str(intent.get("started") or "?")[:40], member,
                INTENT_WORDS.get(op, op)))
    record(node, "etcd-%s-killed" % op, member, {"reason": line})
    clear_intent(node)
    return [line]


def record(node: Node, action: str, member: str, extra: Mapping[str, object]) -> None:
    """One history record of an etcd operation (the same fields as a manifest change's)."""
    node.state.ensure(create=True)
    who = node.who()
    entry: Dict[str, object] = {"time": iso(), "user": who.get("sudo_user") or who.get("user"),
                                "host": who.get("hostname"), "node": who.get("node"), "action": action,
                                "component": ETCD, "file": "", "checksum": None, "op": "", "member": member,
                                "origin": str(who.get("origin") or "cpctl etcd")}
    entry.update(extra)
    node.state.append_history(entry)


# --------------------------------------------------------------------------- defrag

@dataclass
class DefragStep:
    """One member in a defragmentation's order: what is done and why."""

    member: str
    member_id: str
    action: str                     # "defrag" or "skip"
    why: str
    db_size: Optional[int] = None
    db_size_in_use: Optional[int] = None
    db_size_after: Optional[int] = None
    seconds: Optional[float] = None
    moved_leader_to: str = ""


class DefragReport(TypedDict):
    """``etcd defrag``'s result."""

    node: str
    dry_run: bool
    changed: bool
    steps: List[Dict[str, object]]
    interrupted: List[str]


def plan_defrag(seen: Survey, names: Sequence[str], min_free: int, min_ratio: float) -> List[DefragStep]:
    """The order: learners, then the followers, then the leader; each member under the thresholds
    (free bytes below ``min_free`` or fragmentation below ``min_ratio``) skipped and said so."""
    chosen = _chosen(seen, names)
    leader = seen.leader
    leader_id = leader.member.id if leader else None

    def rank(view: MemberView) -> Tuple[int, str]:
        return (0 if view.member.learner else 2 if view.member.id == leader_id else 1, view.name)

    steps = []
    for view in sorted(chosen, key=rank):
        st = view.status
        role = "learner" if view.member.learner else "leader" if view.member.id == leader_id else "follower"
        step = DefragStep(view.name, hex_id(view.member.id), "defrag", "", st.db_size if st else None,
                          st.db_size_in_use if st else None)
        if st is None:
            step.action, step.why = "skip", "%s: no status (%s)" % (role, view.why or "no answer")
        else:
            free = max(0, st.db_size - st.db_size_in_use)
            ratio = free / st.db_size if st.db_size else 0.0
            step.why = "%s, %s free of %s (%.0f %%)" % (role, size_text(free), size_text(st.db_size), ratio * 100)
            if free < min_free or ratio < min_ratio:
                step.action = "skip"
                step.why += ": below --min-free %s / --min-ratio %.2f" % (size_text(min_free), min_ratio)
            elif role == "leader":
                step.why += ": last, after leadership moved to a healthy voter"
        steps.append(step)
    return steps


def _chosen(seen: Survey, names: Sequence[str]) -> List[MemberView]:
    if not names:
        return list(seen.members)
    out = []
    for name in names:
        view = seen.by_name(name)
        if view is None:
            raise CpctlError("no etcd member %r (members: %s)" % (
                name, ", ".join(sorted(v.name for v in seen.members))), ExitCode.NOT_FOUND)
        if view not in out:
            out.append(view)
    return out


def defrag(node: Node, names: Sequence[str], min_free: int, min_ratio: float, dry_run: bool,
           timeout: float = DEFRAG_TIMEOUT, progress: Progress = lambda text: None) -> DefragReport:
    """Defragment the chosen members one at a time (see the module docstring); ``dry_run``: the
    order and why, nothing changed."""
    gateway, endpoints = gateway_of(node)
    if dry_run:
        seen = survey(gateway, endpoints)
        steps = plan_defrag(seen, names, min_free, min_ratio)
        return DefragReport(node=node.node_name, dry_run=True, changed=False, steps=[_step_dict(s) for s in steps],
                            interrupted=[])
    with node.session("etcd defrag", changing=False):
        interrupted = settle_intent(node, gateway, endpoints)
        seen = survey(gateway, endpoints)
        refuse_corrupt(seen, "etcd defrag")
        steps = plan_defrag(seen, names, min_free, min_ratio)
        for step in steps:
            if step.action == "defrag":
                _defrag_one(node, gateway, endpoints, step, steps, timeout, progress)
        return DefragReport(node=node.node_name, dry_run=False, changed=any(s.seconds is not None for s in steps),
                            steps=[_step_dict(s) for s in steps], interrupted=interrupted)


def _defrag_one(node: Node, gateway: Gateway, endpoints: Sequence[str], step: DefragStep, steps: List[DefragStep],
                timeout: float, progress: Progress) -> None:
    """One member: census and health checked first, leadership moved off it, the intent written, the
    defragmentation, its size after, the history record."""
    seen = survey(gateway, endpoints)
    refuse_corrupt(seen, "etcd defrag")
    view = seen.by_name(step.member_id)
    assert view is not None, step.member_id
    _guard(seen, view, "defragmenting", steps)
    leader = seen.leader
    if leader is not None and leader.member.id == view.member.id:
        done = [s.member_id for s in steps if s.seconds is not None]
        target = _move_target(seen, view, prefer=done)
        progress("moving leadership from %s to %s before it is defragmented" % (view.name, target.name))
        step.moved_leader_to = target.name
        _move(node, gateway, endpoints, view, target)
        seen = survey(gateway, endpoints)
        view = seen.by_name(step.member_id)
        assert view is not None
        _guard(seen, view, "defragmenting", steps)
    progress("defragmenting %s (%s)" % (view.name, view.endpoint))
    started = time.monotonic()
    node.standing = ("etcd member %s is being defragmented: etcd finishes it by itself; %s"
                     % (view.name, _done_text(steps)))
    try:
        write_intent(node, "defrag", view)
        gateway.defragment(view.endpoint, timeout)
    except EtcdError as exc:
        clear_intent(node)
        record(node, "etcd-defrag-failed", view.name, {"reason": str(exc)})
        raise CpctlError("defragmenting etcd member %s failed: %s; %s" % (view.name, exc, _done_text(steps)),
                         ExitCode.ENVIRONMENT) from None
    except (KeyboardInterrupt, Terminated) as exc:
        signal = interrupted_by(exc)
        line = ("interrupted (%s) while etcd member %s was being defragmented: etcd finishes it by itself; %s"
                % (signal, view.name, _done_text(steps)))
        clear_intent(node)
        record(node, "etcd-defrag-interrupted", view.name, {"reason": line})
        raise Interrupted(signal, line) from None
    finally:
        node.standing = ""
    step.seconds = round(time.monotonic() - started, 3)
    clear_intent(node)
    try:
        step.db_size_after = gateway.status(view.endpoint).db_size
    except EtcdError as exc:
        step.why += "; its size after could not be read (%s)" % exc.why
    record(node, "etcd-defrag", view.name, {"db_size_before": step.db_size, "db_size_after": step.db_size_after,
                                             "seconds": step.seconds, "reason": step.why})
    progress("defragmented %s: %s -> %s in %.1f s" % (view.name, size_text(step.db_size or 0),
                                                      size_text(step.db_size_after or 0), step.seconds))


def _guard(seen: Survey, view: MemberView, verb: str, steps: List[DefragStep]) -> None:
    problem = quorum_problem(seen, view, verb)
    if problem:
        raise CpctlError("refused: %s; %s" % (problem, _done_text(steps)), ExitCode.REFUSED, hint=QUORUM_HINT)


def _done_text(steps: List[DefragStep]) -> str:
    done = [s.member for s in steps if s.seconds is not None]
    left = [s.member for s in steps if s.action == "defrag" and s.seconds is None]
    return "defragmented: %s; not yet: %s" % (", ".join(done) or "none", ", ".join(left) or "none")


def _step_dict(step: DefragStep) -> Dict[str, object]:
    return dict(step.__dict__)


def size_text(value: int) -> str:
    """Bytes as etcdctl prints them (``25 MB``), binary units."""
    number = float(value)
    for unit in ("B", "kB", "MB", "GB"):
        if number < 1024 or unit == "GB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (number, unit)
        number /= 1024
    return "%d B" % value


# --------------------------------------------------------------------------- leadership

def _move_target(seen: Survey, leader: MemberView, prefer: Sequence[str] = (), to: str = "") -> MemberView:
    """A healthy voter other than ``leader`` to hand leadership to: ``to`` when named; else one of
    ``prefer`` (already defragmented), else the one with the highest applied raft index."""
    if to:
        chosen = seen.by_name(to)
        if chosen is None:
            raise CpctlError("no etcd member %r (members: %s)" % (to, ", ".join(sorted(v.name for v in seen.members))),
                             ExitCode.NOT_FOUND)
        if chosen.member.learner or not chosen.healthy or chosen.member.id == leader.member.id:
            raise CpctlError("refused: cannot move leadership to %s: %s" % (
                chosen.name, "a learner cannot lead" if chosen.member.learner else "it leads already"
                if chosen.member.id == leader.member.id else "it is not healthy (%s)" % chosen.why),
                ExitCode.REFUSED)
        return chosen
    candidates = [v for v in seen.voters if v.healthy and v.member.id != leader.member.id and v.status is not None]
    if not candidates:
        raise CpctlError("refused: no other healthy voting member to move leadership of %s to" % leader.name,
                         ExitCode.REFUSED, hint=QUORUM_HINT)
    return max(candidates, key=lambda v: (hex_id(v.member.id) in prefer,
                                          v.status.raft_applied_index if v.status else 0, v.name))


def _move(node: Node, gateway: Gateway, endpoints: Sequence[str], leader: MemberView, target: MemberView,
          why: str = "") -> None:
    """Hand leadership from ``leader`` to ``target`` and wait until the members agree on it."""
    write_intent(node, "move-leader", leader, to=target.name)
    try:
        gateway.move_leader(leader.endpoint, target.member.id, LEADER_WAIT)
    except EtcdError as exc:
        clear_intent(node)
        raise CpctlError("moving etcd leadership from %s to %s failed: %s" % (leader.name, target.name, exc),
                         ExitCode.ENVIRONMENT) from None
    except (KeyboardInterrupt, Terminated) as exc:
        signal = interrupted_by(exc)
        line = ("interrupted (%s) while etcd leadership was being handed from %s to %s: etcd completes or "
                "abandons the transfer by itself (within its election timeout); see who leads with cpctl etcd "
                "status" % (signal, leader.name, target.name))
        clear_intent(node)
        record(node, "etcd-move-leader-interrupted", leader.name, {"to": target.name, "reason": line})
        raise Interrupted(signal, line) from None
    clear_intent(node)
    record(node, "etcd-move-leader", leader.name, {"to": target.name, "reason": "leadership moved to %s%s"
                                                   % (target.name, why and " " + why)})
    deadline = time.monotonic() + LEADER_WAIT
    while True:
        now = survey(gateway, endpoints).leader
        if now is not None and now.member.id == target.member.id:
            return
        if time.monotonic() > deadline:
            raise CpctlError("etcd leadership was handed from %s to %s but after %.0f s the members name %s as leader"
                             % (leader.name, target.name, LEADER_WAIT, now.name if now else "no member"),
                             ExitCode.TIMEOUT)
        time.sleep(0.2)


class MoveReport(TypedDict):
    node: str
    changed: bool
    dry_run: bool
    from_member: Optional[str]
    to_member: Optional[str]
    message: str


def move_leader(node: Node, to: str, dry_run: bool) -> MoveReport:
    """``etcd move-leader [--to NAME]``: leadership to ``to`` or the most up-to-date healthy voter."""
    gateway, endpoints = gateway_of(node)
    with node.session("etcd move-leader", changing=False) if not dry_run else nullcontext(node):
        if not dry_run:
            settle_intent(node, gateway, endpoints)
        seen = survey(gateway, endpoints)
        leader = seen.leader
        if leader is None:
            raise CpctlError("refused: no etcd member names a leader now (%s)" % _health_text(seen), ExitCode.REFUSED,
                             hint=QUORUM_HINT)
        if to and seen.by_name(to) is leader:
            return MoveReport(node=node.node_name, changed=False, dry_run=dry_run, from_member=leader.name,
                              to_member=leader.name, message="%s leads already: nothing to do" % leader.name)
        target = _move_target(seen, leader, to=to)
        if dry_run:
            return MoveReport(node=node.node_name, changed=False, dry_run=True, from_member=leader.name,
                              to_member=target.name, message="would move leadership from %s to %s"
                              % (leader.name, target.name))
        _move(node, gateway, endpoints, leader, target)
        return MoveReport(node=node.node_name, changed=True, dry_run=False, from_member=leader.name,
                          to_member=target.name, message="leadership moved from %s to %s" % (leader.name, target.name))


def leads_here(node: Node) -> bool:
    """True when ``node`` runs etcd from a loadable manifest (the member a stop, restart or manifest
    change of etcd takes down)."""
    return any(m.pod_name == ETCD for m in node.scan().valid)


def move_off_before(node: Node, what: str, move: bool = True) -> str:
    """Before ``what`` (``restart of etcd``, ...) takes this node's etcd member down: when that member
    leads, hand leadership to a healthy voter first (as ``etcd move-leader`` does, recorded in the
    history), so the cluster does not wait for an election timeout. Whatever stands in the way (no
    client certificate, the member does not answer, a single member, no healthy voter, a failed
    transfer) is no refusal - the change goes on, as it would without this, and the returned line
    says why nothing moved. "" when the member does not lead (nothing to say); nothing in a dry run."""
    if node.dry_run or not leads_here(node):
        return ""
    if not move:
        return "etcd leadership not checked before %s (--no-move-leader)" % what
    try:
        gateway, endpoints = gateway_of(node)
        for line in settle_intent(node, gateway, endpoints):      # a killed etcd command's, named first
            node.log(line)
        own = own_member(node, gateway)
        if own is None:
            return ""
        seen = survey(gateway, endpoints)
        leader = seen.leader
        if leader is None or leader.member.id != own:
            return ""
        if len(seen.voters) == 1:
            return ("etcd member %s is the only voting member: no leadership to move before %s; going on"
                    % (leader.name, what))
        target = _move_target(seen, leader)
        _move(node, gateway, endpoints, leader, target, "before %s" % what)
    except Interrupted:
        raise
    except CpctlError as exc:
        return "etcd leadership not moved before %s (%s); going on: the cluster elects a new leader " \
               "after etcd's election timeout" % (what, exc.message)
    return "etcd leadership moved from %s to %s before %s" % (leader.name, target.name, what)


def own_member(node: Node, gateway: Gateway) -> Optional[int]:
    """The member ID of the etcd this node runs, asked at its own client URLs (its manifest's
    --listen-client-urls, loopback first, then --advertise-client-urls); None when none answers."""
    for manifest in node.scan().valid:
        if manifest.pod_name != ETCD:
            continue
        for url in member_urls(manifest.pod):
            try:
                return gateway.status(url).member_id
            except EtcdError:
                continue
    return None


def _health_text(seen: Survey) -> str:
    return ", ".join("%s %s" % (v.name, "healthy" if v.healthy else "not healthy: %s" % v.why) for v in seen.members)


# --------------------------------------------------------------------------- alarms

#: What each alarm kind means for the cluster and how it is repaired (status, check and the metrics
#: say the same; real-node-facts.md "etcd, measured": an alarm is cluster-wide).
ALARM_MEANING = {
    "NOSPACE": "etcd's database reached its quota (--quota-backend-bytes): the whole cluster refuses writes",
    "CORRUPT": "etcd found members whose data differ: find the bad member (etcd's logs) and replace it "
               "before any maintenance",
}
#: status and check stop asking further etcd URLs for the alarms after this (one silent URL costs
#: the gateway's timeout; the next ones are not asked once it is spent).
ALARMS_DEADLINE = 5.0
#: The kinds the metrics always export (0 when not active): an absent series cannot be alerted on.
ALARM_KINDS = ("NOSPACE", "CORRUPT")


@dataclass
class AlarmsSeen:
    """The cluster's active alarms as this node's etcd client reads them (``status``, ``check``, the
    metrics): each ``{"member_id", "member", "alarm"}``; ``error`` why they could not be read."""

    alarms: List[Dict[str, str]]
    error: str = ""
    asked: str = ""

    def kinds(self) -> Dict[str, List[str]]:
        """alarm kind -> the members that raised it (sorted)."""
        out: Dict[str, List[str]] = {}
        for alarm in self.alarms:
            out.setdefault(alarm["alarm"], []).append(alarm["member"])
        return {kind: sorted(members) for kind, members in sorted(out.items())}

    def lines(self, command: Callable[..., str]) -> List[str]:
        """One line per active alarm kind: what it means and the command that repairs it."""
        out = []
        for kind, members in self.kinds().items():
            line = "etcd alarm %s active (raised by %s): %s" % (kind, ", ".join(members),
                                                               ALARM_MEANING.get(kind, "see etcd's logs"))
            if kind == "NOSPACE":
                line += "; fix: %s" % command(ETCD, "recover-space")
            out.append(line)
        return out

    def to_dict(self) -> Dict[str, object]:
        return {"alarms": list(self.alarms), "error": self.error, "asked": self.asked}


def alarms_seen(node: Node) -> Optional[AlarmsSeen]:
    """The active alarms through the first etcd URL of the node's manifests that answers (the member
    list first, for the members' names); None when the node has nothing to ask etcd with (no etcd
    client pair or no etcd URL in its manifests): a node without etcd has no alarm to show."""
    try:
        gateway, endpoints = gateway_of(node)
    except CpctlError:
        return None
    if not endpoints:
        return None
    tried = []
    deadline = time.monotonic() + ALARMS_DEADLINE
    for index, endpoint in enumerate(endpoints):
        if time.monotonic() > deadline:     # a view stays quick when etcd's URLs are silent
            tried.append("%d more URL(s) not asked within %.0f s" % (len(endpoints) - index, ALARMS_DEADLINE))
            break
        try:
            listed, alarms = gateway.members_and_alarms(endpoint)      # one request from the node
        except EtcdError as exc:
            tried.append(str(exc))
            continue
        names = {m.id: m.label for m in listed.members}
        return AlarmsSeen([{"member_id": hex_id(a.member_id), "member": names.get(a.member_id, hex_id(a.member_id)),
                            "alarm": a.alarm} for a in alarms], asked=endpoint)
    return AlarmsSeen([], error="; ".join(tried[:3] + tried[3:][-1:]))


def alarms_ahead(node: Node) -> List[HttpRequest]:
    """The first request pair ``alarms_seen`` makes (its node's first etcd URL), for ``Host.http_ahead``:
    ``status`` asks it with the view's other requests from the node."""
    try:
        gateway, endpoints = gateway_of(node)
    except CpctlError:
        return []
    return gateway.members_and_alarms_requests(endpoints[0]) if endpoints else []


def status_alarms(node: Node, data: "Report") -> None:
    """``cpctl status``: the cluster's active alarms (``etcd_alarms``, when the node has an etcd to ask)
    and one warning line per alarm kind, with its fix."""
    seen = alarms_seen(node)
    if seen is None:
        return
    data["etcd_alarms"] = seen.to_dict()
    data["warnings"] += seen.lines(node.command)



class AlarmReport(TypedDict):
    node: str
    changed: bool
    dry_run: bool
    alarms: List[Dict[str, str]]
    disarmed: List[Dict[str, str]]
    message: str


def alarm_list(node: Node) -> AlarmReport:
    gateway, endpoints = gateway_of(node)
    seen = survey(gateway, endpoints)
    if seen.alarm_error:
        raise CpctlError("the etcd alarms could not be read: %s" % seen.alarm_error, ExitCode.ENVIRONMENT)
    rows = _alarm_rows(seen, seen.alarms)
    return AlarmReport(node=node.node_name, changed=False, dry_run=False, alarms=rows, disarmed=[],
                       message="%d active alarm(s)" % len(rows) if rows else "no active alarm")


def _alarm_rows(seen: Survey, alarms: Sequence[Alarm]) -> List[Dict[str, str]]:
    return [{"member_id": hex_id(a.member_id), "member": seen.name_of(a.member_id), "alarm": a.alarm} for a in alarms]


def alarm_disarm(node: Node, kinds: Sequence[str], dry_run: bool) -> AlarmReport:
    """Deactivate the active alarms of ``kinds`` (NOSPACE by default; CORRUPT only when named)."""
    gateway, endpoints = gateway_of(node)
    with node.session("etcd alarm disarm", changing=False) if not dry_run else nullcontext(node):
        if not dry_run:
            settle_intent(node, gateway, endpoints)
        seen = survey(gateway, endpoints)
        if seen.alarm_error:
            raise CpctlError("the etcd alarms could not be read: %s" % seen.alarm_error, ExitCode.ENVIRONMENT)
        chosen = [a for a in seen.alarms if a.alarm in kinds]
        left = [a for a in seen.alarms if a.alarm not in kinds]
        if not dry_run:
            _disarm(node, gateway, seen, chosen)
        message = "%s %d alarm(s)" % ("would disarm" if dry_run else "disarmed", len(chosen)) if chosen \
            else "no %s alarm to disarm" % "/".join(kinds)
        if left:
            message += "; still active: %s" % ", ".join("%s (%s)" % (a.alarm, seen.name_of(a.member_id)) for a in left)
        return AlarmReport(node=node.node_name, changed=bool(chosen) and not dry_run, dry_run=dry_run,
                           alarms=_alarm_rows(seen, left if not dry_run else seen.alarms),
                           disarmed=_alarm_rows(seen, chosen), message=message)


def _disarm(node: Node, gateway: Gateway, seen: Survey, alarms: Sequence[Alarm]) -> None:
    """Deactivate each alarm, one request each, an intent around each (the member that raised it)."""
    done: List[str] = []
    for alarm in alarms:
        member = next((v for v in seen.members if v.member.id == alarm.member_id), None)
        if member is not None:
            write_intent(node, "alarm-disarm", member, alarm=alarm.alarm)
        try:
            gateway.disarm(seen.asked, alarm)
        except EtcdError as exc:
            clear_intent(node)
            raise CpctlError("disarming the %s alarm of %s failed: %s" % (
                alarm.alarm, seen.name_of(alarm.member_id), exc), ExitCode.ENVIRONMENT) from None
        except (KeyboardInterrupt, Terminated) as exc:
            signal = interrupted_by(exc)
            line = ("interrupted (%s) while the %s alarm of etcd member %s was being disarmed: etcd applies the "
                    "request whole or not at all; disarmed before: %s; see what is active with cpctl etcd alarm "
                    "list" % (signal, alarm.alarm, seen.name_of(alarm.member_id), ", ".join(done) or "none"))
            clear_intent(node)
            record(node, "etcd-alarm-disarm-interrupted", seen.name_of(alarm.member_id),
                   {"alarm": alarm.alarm, "reason": line})
            raise Interrupted(signal, line) from None
        clear_intent(node)
        done.append("%s (%s)" % (alarm.alarm, seen.name_of(alarm.member_id)))
        record(node, "etcd-alarm-disarm", seen.name_of(alarm.member_id),
               {"alarm": alarm.alarm, "reason": "alarm %s disarmed" % alarm.alarm})


# --------------------------------------------------------------------------- recover-space

class RecoverReport(TypedDict):
    node: str
    changed: bool
    dry_run: bool
    compacted_to: Optional[int]
    steps: List[Dict[str, object]]
    disarmed: List[Dict[str, str]]
    write_revision: Optional[int]
    quota: int
    message: str


def recover_space(node: Node, dry_run: bool, timeout: float = DEFRAG_TIMEOUT,
                  progress: Progress = lambda text: None) -> RecoverReport:
    """The NOSPACE runbook: compact to the current revision, rolling defrag of every member, disarm
    the NOSPACE alarms, verify that a write succeeds. It runs when a NOSPACE alarm is active **or**
    a member's database is at its quota without one (an alarm disarmed by hand before the space came
    back: the next writes raise it again); nothing to do only when neither holds. Refused when the
    alarm is CORRUPT, or when the space did not come back (the live data itself fills the quota)."""
    gateway, endpoints = gateway_of(node)
    quota = quota_of(node)
    seen = survey(gateway, endpoints)
    refuse_corrupt(seen, "etcd recover-space")
    nospace = "NOSPACE" in seen.alarm_kinds()
    full = at_quota(seen, quota)
    if not any(v.status is not None for v in seen.members):
        raise CpctlError(_unread_text(seen, nospace), ExitCode.ENVIRONMENT)
    if not nospace and not full:
        return RecoverReport(node=node.node_name, changed=False, dry_run=dry_run, compacted_to=None, steps=[],
                             disarmed=[], write_revision=None, quota=quota,
                             message="no NOSPACE alarm is active and %s: nothing to recover" % _room_text(seen, quota))
    why = "a NOSPACE alarm is active" if nospace else \
        "no NOSPACE alarm is active, but %s: the next writes raise it" % _full_text(full)
    if dry_run:
        steps = plan_defrag(seen, (), 0, 0.0)
        return RecoverReport(node=node.node_name, changed=False, dry_run=True, compacted_to=None,
                             steps=[_step_dict(s) for s in steps], disarmed=[], write_revision=None, quota=quota,
                             message="%s: would compact to the current revision, defragment %s in this order, %s "
                                     "and write a check key" % (why, ", ".join(s.member for s in steps),
                                                                "disarm NOSPACE" if nospace else "no alarm to disarm"))
    with node.session("etcd recover-space", changing=False):
        settle_intent(node, gateway, endpoints)
        progress(why)
        revision, steps = _compact_and_defrag(node, gateway, endpoints, seen, timeout, progress)
        after = survey(gateway, endpoints)
        _refuse_if_full(after, quota, "NOSPACE" in after.alarm_kinds())
        _refuse_if_unseen(after, revision, steps)
        nospace_alarms = [a for a in after.alarms if a.alarm == "NOSPACE"]
        _disarm(node, gateway, after, nospace_alarms)
        disarmed = _alarm_rows(after, nospace_alarms)
        write_revision = _check_write(gateway, after)
        done = "NOSPACE recovered" if disarmed else "space recovered before a NOSPACE alarm"
        record(node, "etcd-recover-space", "", {"revision": write_revision, "reason": "%s (%s): a write succeeded"
                                                % (done, why)})
        return RecoverReport(node=node.node_name, changed=True, dry_run=False, compacted_to=revision,
                             steps=[_step_dict(s) for s in steps], disarmed=disarmed, write_revision=write_revision,
                             quota=quota, message="space recovered (%s): compacted, %d member(s) defragmented, %d "
                             "alarm(s) disarmed, a write succeeded at revision %d" % (
                                 why, sum(1 for s in steps if s.seconds is not None), len(disarmed), write_revision))


def _refuse_if_unseen(after: Survey, revision: int, steps: Sequence[DefragStep]) -> None:
    """Exit 7 before the disarm when a member's database size cannot be read after compaction and
    defragmentation (it was skipped, as defrag skips a member without status): its space was not
    seen back, and a member still at its quota raises NOSPACE again at the next write (measured: the
    check write did, right after the disarm) - so neither a disarm nor "space recovered"."""
    unread = ["%s (%s)" % (v.name, v.why or "no answer") for v in after.members if v.status is None]
    if unread:
        done = [s.member for s in steps if s.seconds is not None]
        raise CpctlError("compacted to revision %d and defragmented %s, but the database size of %s could not be "
                         "read: its space was not seen back, so no alarm was disarmed" % (
                             revision, ", ".join(done) or "no member", ", ".join(unread)), ExitCode.ENVIRONMENT,
                         hint="make each member's status readable (cpctl etcd status shows why not), then run it "
                              "again")


def _unread_text(seen: Survey, nospace: bool) -> str:
    """Why recover-space does nothing when no member's database size (nor quota) can be read: it
    could neither tell whether a database is at its quota nor see the space come back - so it does
    not compact, defragment or disarm blind (it disarmed NOSPACE and then failed its check write)."""
    if nospace:
        return ("a NOSPACE alarm is active, but no member's database size could be read (%s): recover-space would "
                "not see whether the space comes back, so it neither compacts, defragments nor disarms"
                % _health_text(seen))
    return ("no NOSPACE alarm is active, but no member's database size could be read (%s): cannot tell whether a "
            "database is at its quota" % _health_text(seen))


def member_quota(view: MemberView, quota: int) -> int:
    """The quota a member's database is held to: what the member itself reports (etcd 3.6+'s
    ``dbSizeQuota``), else ``quota`` (the acting master's manifest, etcd's default when it says none)."""
    return view.status.db_size_quota if view.status is not None and view.status.db_size_quota else quota


def at_quota(seen: Survey, quota: int) -> List[Tuple[str, int, int]]:
    """(name, DB size, quota) of each member whose database (the file, what etcd's quota counts) is
    at or above ``QUOTA_HEADROOM`` of its quota: where the next writes raise NOSPACE."""
    out = []
    for view in seen.members:
        limit = member_quota(view, quota)
        if view.status is not None and view.status.db_size >= limit * QUOTA_HEADROOM:
            out.append((view.name, view.status.db_size, limit))
    return sorted(out)


def _full_text(full: Sequence[Tuple[str, int, int]]) -> str:
    return "%s at or above %d %% of the quota" % (", ".join("%s %s of %s" % (name, size_text(size), size_text(limit))
                                                           for name, size, limit in full), QUOTA_HEADROOM * 100)


def _room_text(seen: Survey, quota: int) -> str:
    """Why there is nothing to recover: the fullest member against its quota, and the members whose
    size could not be read (said, not guessed)."""
    known = [v for v in seen.members if v.status is not None]
    unread = ["%s (%s)" % (v.name, v.why or "no answer") for v in seen.members if v.status is None]
    top = max(known, key=lambda v: (v.status.db_size if v.status else 0) / member_quota(v, quota))
    text = "%s is below %d %% of its quota (fullest: %s, %s of %s)" % (
        "the database of every member that answered" if unread else "every member's database",
        QUOTA_HEADROOM * 100, top.name, size_text(top.status.db_size if top.status else 0),
        size_text(member_quota(top, quota)))
    return text + ("; size not read: %s" % ", ".join(unread) if unread else "")


def _compact_and_defrag(node: Node, gateway: Gateway, endpoints: Sequence[str], seen: Survey, timeout: float,
                        progress: Progress) -> Tuple[int, List[DefragStep]]:
    """Compact to the current revision (physically), then defragment every member, rolling."""
    revision = gateway.revision(seen.asked)
    progress("compacting to revision %d" % revision)
    _compact(gateway, seen.asked, revision, timeout)
    record(node, "etcd-compact", "", {"revision": revision, "reason": "recover-space: compacted to %d" % revision})
    steps = plan_defrag(survey(gateway, endpoints), (), 0, 0.0)
    for step in steps:
        if step.action == "defrag":
            _defrag_one(node, gateway, endpoints, step, steps, timeout, progress)
    return revision, steps


def _refuse_if_full(after: Survey, quota: int, nospace: bool) -> None:
    """Refused (exit 4) when a member is still at its quota after compaction and defragmentation:
    the live data itself fills it; a disarm would be raised again by the next write."""
    full = at_quota(after, quota)
    if not full:
        return
    what = "refused to disarm NOSPACE" if nospace else "refused: no NOSPACE alarm is active yet, but"
    raise CpctlError(
        "%s: the space did not come back after compaction and defragmentation: %s: the live data itself fills it"
        % (what, _full_text(full)), ExitCode.REFUSED,
        hint="raise etcd's --quota-backend-bytes (cpctl flags etcd --set quota-backend-bytes=BYTES, one master at "
             "a time) or delete data, then run it again")


def _compact(gateway: Gateway, endpoint: str, revision: int, timeout: float) -> None:
    try:
        gateway.compact(endpoint, revision, timeout)
    except EtcdError as exc:
        if "compacted" not in exc.why:          # "required revision has been compacted": done already
            raise CpctlError("compacting etcd to revision %d failed: %s" % (revision, exc),
                             ExitCode.ENVIRONMENT) from None


def _check_write(gateway: Gateway, seen: Survey) -> int:
    """A write through the cluster succeeds (and is removed again): the proof NOSPACE is gone."""
    endpoints = [v.endpoint for v in seen.members if v.endpoint and not v.member.learner]
    why = ""
    for endpoint in endpoints:
        try:
            revision = gateway.put(endpoint, CHECK_KEY, iso().encode())
            gateway.delete(endpoint, CHECK_KEY)
            return revision
        except EtcdError as exc:
            why = str(exc)
    raise CpctlError("NOSPACE was disarmed but a check write still fails: %s" % (why or "no voting member answers"),
                     ExitCode.ENVIRONMENT)


"""Ask etcd itself which members it has, which of them vote, which run, and which alarms it holds:
what ``etcdctl member list``, ``etcdctl endpoint health --cluster`` and ``etcdctl alarm list`` do,
made from the node through its agent.

The quorum guard counts etcd members here, never from mirror pods: a mirror pod is the API
server's memory of what a kubelet once said, and on a stacked-etcd master whose etcd is parked the
local-mode kubelet cannot update it, so it stays Ready as last heard (real-node-facts.md "Counting
etcd members and API servers"). What etcd answers is as measured on the real binaries
(real-node-facts.md "etcd, measured on the real binaries"):

* The membership is etcd's member list (``POST /v3/cluster/member/list``, the gRPC gateway's JSON
  form of ``MemberList``; any running member serves it from its own copy). Members are keyed by
  their ID (a uint64, as a decimal string in JSON and often above 2^63); ``isLearner: true`` marks a
  learner (absent when false); a member added and never started has no ``name`` and no
  ``clientURLs``. Quorum is a majority of the **voters**: a learner is listed and named but never
  counted, an unstarted member counts by its kind.
* A member runs when ``GET <client URL>/health?exclude=NOSPACE&serializable=true`` answers 200
  ``{"health": "true"}``: kubeadm's liveness probe, so a member the kubelet keeps running counts as
  running. A NOSPACE alarm is cluster-wide and makes a plain ``/health`` false on every member; etcd
  3.5.1 sometimes raises one NOSPACE alarm per member and then fails ``exclude=NOSPACE`` too
  (etcd-io/etcd#13467): when the alarms are NOSPACE only, a member whose health names nothing else
  runs when its ``/v3/maintenance/status`` names a leader.
* Alarms: ``POST /v3/maintenance/alarm {"action": "GET"}``.
* Plain ``http://`` client URLs are refused unless the caller says the node's own etcd uses http.
* Every member is asked at once (``Host.http_many``) under one deadline: 64 silent members cost
  one timeout, not 64.

A member that cannot be asked - no client URL (added, never started), refused, timed out, a TLS
error, an answer that is not etcd's - counts as not running: the guard fails safe and says which
members it could not ask. Everything here is an answer from a master: bounded (size, count, text)
and validated before it is used.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from cpctl.host.base import Host, HttpManyAnswer, HttpRequest, TlsOptions

MEMBER_LIST_PATH = "/v3/cluster/member/list"
ALARM_PATH = "/v3/maintenance/alarm"
STATUS_PATH = "/v3/maintenance/status"
#: kubeadm's etcd liveness probe (phases/etcd/local.go): a member with only a NOSPACE alarm is alive.
HEALTH_PATH = "/health?exclude=NOSPACE&serializable=true"
ASK_TIMEOUT = 2.0
#: One deadline for each round of questions (the member list and alarms, then every member's health).
CENSUS_DEADLINE = 5.0
ANSWER_LIMIT = 256 << 10          # a member list of a few members is a few KiB
MAX_MEMBERS = 64                  # etcd advises at most 7; anything past this is not an answer from etcd
MAX_URLS = 8
MAX_ENDPOINTS = 16
MAX_ALARMS = 256
TEXT_LIMIT = 128
NOSPACE, CORRUPT = "NOSPACE", "CORRUPT"
#: etcd's AlarmType (api/etcdserverpb/rpc.proto): the gateway writes names, some clients numbers.
ALARM_TYPES = {0: "NONE", 1: NOSPACE, 2: CORRUPT}
_JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class EtcdMember:
    """One member as etcd lists it, and whether its own endpoint answered healthy."""

    name: str                      # "" for a member that was added and never started
    client_urls: Tuple[str, ...]
    running: bool
    why_not: str = ""              # why it does not count as running ("" when it runs)
    member_id: str = ""            # etcd's member ID, a uint64 in decimal
    learner: bool = False          # a learner: listed, never counted toward quorum
    peer_urls: Tuple[str, ...] = ()

    @property
    def started(self) -> bool:
        """A member that has started once has a name (etcd lists neither name nor client URLs before)."""
        return bool(self.name or self.client_urls)

    @property
    def label(self) -> str:
        """How a message names it: its name, else its first client URL, else its ID."""
        if self.name or self.client_urls:
            return self.name or self.client_urls[0]
        return "an unstarted %s (ID %s)" % ("learner" if self.learner else "member", hex_id(self.member_id))


@dataclass(frozen=True)
class EtcdAlarm:
    """One active alarm: the member that raised it (ID) and its kind (NOSPACE, CORRUPT)."""

    member_id: str
    alarm: str


@dataclass(frozen=True)
class EtcdCensus:
    """etcd's members as etcd itself reports them (``members`` empty with ``error`` set when no
    endpoint gave a member list)."""

    members: Tuple[EtcdMember, ...] = ()
    asked: str = ""                # the endpoint that gave the member list
    error: str = ""
    answered_by: str = ""          # the member ID of the member that gave the list (its header)
    cluster_id: str = ""
    alarms: Tuple[EtcdAlarm, ...] = ()

    @property
    def voters(self) -> List[EtcdMember]:
        return [m for m in self.members if not m.learner]

    @property
    def learners(self) -> List[EtcdMember]:
        return [m for m in self.members if m.learner]

    @property
    def running(self) -> List[str]:
        """The voters that run (a learner never counts)."""
        return [m.label for m in self.voters if m.running]

    @property
    def unasked(self) -> List[str]:
        """Voters counted as not running because they could not be asked, with the reason."""
        return ["%s (%s)" % (m.label, m.why_not) for m in self.voters if not m.running and m.why_not]

    def alarm_texts(self) -> List[str]:
        """Each alarm as a message says it: ``NOSPACE (raised by m1)``."""
        names = {m.member_id: m.label for m in self.members}
        return ["%s (raised by %s)" % (a.alarm, names.get(a.member_id, "member ID %s" % hex_id(a.member_id)))
                for a in self.alarms]

    @property
    def blocking_alarms(self) -> List[str]:
        """Alarms other than NOSPACE (CORRUPT): the cluster's data cannot be trusted; change nothing."""
        return [t for a, t in zip(self.alarms, self.alarm_texts()) if a.alarm != NOSPACE]


def take_census(host: Host, endpoints: Sequence[str], tls: TlsOptions, timeout: float = CENSUS_DEADLINE,
                allow_http: bool = False) -> EtcdCensus:
    """The member list and alarms through the first of ``endpoints`` that answers (all asked at
    once), then every member's health (all at once): two round trips, each within ``timeout``."""
    chosen = [e for e in _unique(endpoints) if allow_http or urlsplit(e).scheme == "https"][:MAX_ENDPOINTS]
    if not chosen:
        return EtcdCensus(error="no etcd client URL known" + ("" if allow_http or not endpoints else
                                                               " (plain http:// URLs are not asked)"))
    asks: List[HttpRequest] = []
    for endpoint in chosen:
        asks.append(_post(endpoint + MEMBER_LIST_PATH, b"{}", tls))
        asks.append(_post(endpoint + ALARM_PATH, b'{"action":"GET"}', tls))
    answers = _ask_all(host, asks, timeout)
    tried: List[str] = []
    for index, endpoint in enumerate(chosen):
        listed, error = parse_member_list(*_reply_of(answers[2 * index]), allow_http=allow_http)
        if listed is None:
            tried.append("%s: %s" % (endpoint, error))
            continue
        alarms, alarm_error = parse_alarms(*_reply_of(answers[2 * index + 1]))
        if alarms is None:
            return EtcdCensus(error="%s answered the member list but not its alarms (%s)" % (endpoint, alarm_error))
        members, header = listed
        checked = _with_health(host, members, tls, timeout, alarms)
        return EtcdCensus(checked, endpoint, answered_by=header[0], cluster_id=header[1], alarms=tuple(alarms))
    return EtcdCensus(error="no etcd member answered with the member list (%s)" % "; ".join(tried))


def own_learner(host: Host, endpoints: Sequence[str], tls: TlsOptions, timeout: float = ASK_TIMEOUT,
                allow_http: bool = False) -> Tuple[Optional[bool], str]:
    """(whether the member at ``endpoints`` - one member's own client URLs - is a learner, "") from
    its ``/v3/maintenance/status`` (``isLearner``, absent when false; a learner answers Status but
    refuses the member list with 503), all URLs asked at once; (None, why) when none answered."""
    chosen = [e for e in _unique(endpoints) if allow_http or urlsplit(e).scheme == "https"][:MAX_ENDPOINTS]
    answers = _ask_all(host, [_post(e + STATUS_PATH, b"{}", tls) for e in chosen], timeout) if chosen else []
    tried = []
    for endpoint, answer in zip(chosen, answers):
        doc, why = _json_answer(*_reply_of(answer))
        learner = doc.get("isLearner", False) if isinstance(doc, dict) else None
        if not why and isinstance(learner, bool):
            return learner, ""
        tried.append("%s: %s" % (endpoint, why or "an answer that is not etcd's status"))
    return None, "; ".join(tried) or "no etcd client URL known"


Listed = Tuple[Tuple[EtcdMember, ...], Tuple[str, str]]


def parse_member_list(status: int, body: bytes, error: str = "", allow_http: bool = False) -> \
        Tuple[Optional[Listed], str]:
    """((members, (answering member ID, cluster ID)), "") from a member list answer, or (None, why
    not). Members are keyed by ID (a repeated ID is not etcd's answer), health not yet asked."""
    doc, why = _json_answer(status, body, error)
    raw = doc.get("members") if isinstance(doc, dict) else None
    if why or not isinstance(doc, dict) or not isinstance(raw, list) or not raw or len(raw) > MAX_MEMBERS:
        return None, why or "an answer that is not etcd's member list"
    header = doc.get("header")
    header = header if isinstance(header, dict) else {}
    members: Dict[str, EtcdMember] = {}
    for entry in raw:
        member = _member_of(entry, allow_http)
        if member is None or member.member_id in members:
            return None, "an answer that is not etcd's member list"
        members[member.member_id] = member
    return (tuple(members.values()), (uint64_text(header.get("member_id")) or "",
                                      uint64_text(header.get("cluster_id")) or "")), ""


def _member_of(entry: object, allow_http: bool) -> Optional[EtcdMember]:
    """One member list entry, validated (None: not etcd's)."""
    if not isinstance(entry, dict):
        return None
    member_id = uint64_text(entry.get("ID"))
    learner = entry.get("isLearner", False)
    name = entry.get("name", "")
    if member_id is None or not isinstance(learner, bool) or not isinstance(name, str):
        return None
    urls = _url_list(entry.get("clientURLs"))
    peers = _url_list(entry.get("peerURLs"))
    if urls is None or peers is None:
        return None
    usable = tuple(u for u in urls if allow_http or urlsplit(u).scheme == "https")
    why = ""
    if urls and not usable:
        why = "only plain http:// client URLs (%s), not asked: this node's etcd uses https" % urls[0]
    return EtcdMember(_clean(name), usable, False, why, member_id, learner, peers)


def parse_alarms(status: int, body: bytes, error: str = "") -> Tuple[Optional[List[EtcdAlarm]], str]:
    """The active alarms from a ``/v3/maintenance/alarm`` GET answer ([] when none), or (None, why)."""
    doc, why = _json_answer(status, body, error)
    if why or not isinstance(doc, dict):
        return None, why or "an answer that is not etcd's alarm list"
    raw = doc.get("alarms", [])
    if not isinstance(raw, list) or len(raw) > MAX_ALARMS:
        return None, "an answer that is not etcd's alarm list"
    out = []
    for entry in raw:
        kind = entry.get("alarm") if isinstance(entry, dict) else None
        kind = ALARM_TYPES.get(kind, "") if isinstance(kind, int) and not isinstance(kind, bool) else kind
        member_id = uint64_text(entry.get("memberID", "0")) if isinstance(entry, dict) else None
        if not isinstance(kind, str) or not kind or member_id is None:
            return None, "an answer that is not etcd's alarm list"
        if kind != "NONE":
            out.append(EtcdAlarm(member_id, _clean(kind)))
    return out, ""


def judge_health(status: int, body: bytes, error: str = "") -> Tuple[bool, str]:
    """(True, "") when a ``/health`` answer says healthy; else (False, why)."""
    if error:
        return False, error
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None
    health = doc.get("health") if isinstance(doc, dict) else None
    if status == 200 and health == "true":
        return True, ""
    reason = doc.get("reason") if isinstance(doc, dict) else None
    detail = _clean(reason) if isinstance(reason, str) and reason else "HTTP %d" % status
    return False, "unhealthy: %s" % detail


def endpoint_healthy(host: Host, url: str, tls: TlsOptions, timeout: float = ASK_TIMEOUT) -> Tuple[bool, str]:
    """(True, "") when etcd's health at ``url`` (kubeadm's liveness probe) says healthy; else (False, why)."""
    return judge_health(*_reply_of(_ask_all(host, [_get(url + HEALTH_PATH, tls)], timeout)[0]))


def _with_health(host: Host, members: Sequence[EtcdMember], tls: TlsOptions, timeout: float,
                 alarms: Sequence[EtcdAlarm]) -> Tuple[EtcdMember, ...]:
    """``members`` with the health of each: every client URL of every member asked at once; a member
    runs when one of its URLs answers healthy. With NOSPACE the only alarm, a member whose health
    named nothing else runs when its status names a leader (etcd-io/etcd#13467)."""
    asks = [(m.member_id, _get(url + HEALTH_PATH, tls)) for m in members for url in m.client_urls[:MAX_URLS]]
    answers = _ask_all(host, [a for _, a in asks], timeout) if asks else []
    verdicts: Dict[str, List[Tuple[bool, str]]] = {}
    for (member_id, _), answer in zip(asks, answers):
        verdicts.setdefault(member_id, []).append(judge_health(*_reply_of(answer)))
    nospace_only = bool(alarms) and all(a.alarm == NOSPACE for a in alarms)
    out: List[EtcdMember] = []
    second: List[int] = []
    for member in members:
        found = verdicts.get(member.member_id, [])
        if any(ok for ok, _ in found):
            out.append(_set(member, True, ""))
            continue
        why = next((w for _, w in found), member.why_not or "no client URL: added but never started")
        if nospace_only and found and all(_nospace_reason(w) for _, w in found):
            second.append(len(out))
        out.append(_set(member, False, why))
    if second:
        _judge_by_status(host, out, second, tls, timeout)
    return tuple(out)


def _nospace_reason(why: str) -> bool:
    """A health answer that names nothing but a NOSPACE alarm (3.4 says no reason at all)."""
    return why in ("unhealthy: ALARM NOSPACE", "unhealthy: HTTP 503")


def _judge_by_status(host: Host, members: List[EtcdMember], indexes: Sequence[int], tls: TlsOptions,
                     timeout: float) -> None:
    """Members whose health named only NOSPACE: running when ``/v3/maintenance/status`` names a leader."""
    asks = [_post(members[i].client_urls[0] + STATUS_PATH, b"{}", tls) for i in indexes]
    for index, answer in zip(indexes, _ask_all(host, asks, timeout)):
        doc, why = _json_answer(*_reply_of(answer))
        leader = uint64_text(doc.get("leader")) if isinstance(doc, dict) else None
        if not why and leader not in (None, "0"):
            members[index] = _set(members[index], True, "")
        else:
            members[index] = _set(members[index], False, "%s; no leader known (%s)" % (
                members[index].why_not, why or "status names none"))


def _set(member: EtcdMember, running: bool, why: str) -> EtcdMember:
    return EtcdMember(member.name, member.client_urls, running, why, member.member_id, member.learner,
                      member.peer_urls)


# --------------------------------------------------------------------------- asking and parsing


def _post(url: str, body: bytes, tls: TlsOptions) -> HttpRequest:
    return HttpRequest(method="POST", url=url, headers=_JSON, body=body, tls=tls, limit=ANSWER_LIMIT)


def _get(url: str, tls: TlsOptions) -> HttpRequest:
    return HttpRequest(method="GET", url=url, tls=tls, limit=ANSWER_LIMIT)


def _ask_all(host: Host, requests: List[HttpRequest], timeout: float) -> List[HttpManyAnswer]:
    """``requests`` asked at once from the node; a failure of the whole call is each one's failure."""
    try:
        return host.http_many(requests, timeout)
    except OSError as exc:
        return [HttpManyAnswer(errno=exc.errno or 0, error=_oserror_text(exc)) for _ in requests]


def _reply_of(answer: HttpManyAnswer) -> Tuple[int, bytes, str]:
    """(status, body, "") of an answer, or (0, b"", why there is none)."""
    reply = answer.get("reply")
    if reply is None:
        error = answer.get("error") or "no answer"
        return 0, b"", "connection refused" if answer.get("errno") == errno.ECONNREFUSED else _clean(str(error))
    return reply["status"], reply["body"], ""


def _json_answer(status: int, body: bytes, error: str = "") -> Tuple[object, str]:
    if error:
        return None, error
    if status != 200:
        return None, "HTTP %d" % status
    try:
        return json.loads(body.decode("utf-8")), ""
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "an answer that is not JSON"


def uint64_text(value: object) -> Optional[str]:
    """An etcd ID (uint64: a decimal string in the gateway's JSON, a number elsewhere) as decimal
    text; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, int) and 0 <= value < 1 << 64:
        return str(value)
    return None


def hex_id(member_id: str) -> str:
    """A member ID as etcdctl prints it (hex)."""
    return "%x" % int(member_id) if member_id.isdigit() else member_id


def _url_list(value: object) -> Optional[Tuple[str, ...]]:
    if value is None:
        return ()
    if not isinstance(value, list):
        return None
    return tuple(u.rstrip("/") for u in value[:MAX_URLS] if is_url(u))


def _unique(endpoints: Sequence[str]) -> List[str]:
    seen: List[str] = []
    for endpoint in endpoints:
        endpoint = endpoint.rstrip("/") if isinstance(endpoint, str) else endpoint
        if is_url(endpoint) and endpoint not in seen:
            seen.append(endpoint)
    return seen


def is_url(value: object) -> bool:
    """An http(s) URL with a host and nothing a terminal or a request line could be tricked by."""
    if not isinstance(value, str) or not value or len(value) > 256 or not value.isprintable() or " " in value:
        return False
    try:
        parts = urlsplit(value)
        parts.port                                    # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _clean(text: str) -> str:
    """``text`` as a message may quote it: printable, bounded."""
    return "".join(c if c.isprintable() else "?" for c in text[:TEXT_LIMIT])


def _oserror_text(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return _clean(str(exc.strerror or exc))

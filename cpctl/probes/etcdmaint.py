"""etcd's maintenance API, typed: what ``etcdctl endpoint status``, ``member list``, ``alarm``,
``defrag``, ``compaction`` and ``move-leader`` ask, made from the node through its agent.

Every call is a ``POST`` to etcd's v3 JSON gateway (the gRPC gateway's JSON form of
api/etcdserverpb/rpc.proto, served on the client URL) with the node's own etcd client certificate
(``TlsOptions`` naming node files), as ``probes.etcdcluster`` asks for the member list
(real-node-facts.md "etcd, measured on the real binaries"):

=====================================  ==========================================================
``/v3/cluster/member/list``            members: ID, name, peer/client URLs, ``isLearner``
``/v3/maintenance/status``             one member: version, dbSize(InUse), leader, raft term/index
                                       (and dbSizeQuota from etcd 3.6 on)
``/v3/maintenance/alarm``              ``GET`` the alarms; ``DEACTIVATE`` one (memberID, alarm)
``/v3/maintenance/defragment``         defragment the member asked (it blocks while it runs)
``/v3/maintenance/transfer-leadership``  sent to the leader: hand leadership to ``targetID``
``/v3/kv/compaction``                  compact the key space up to a revision
``/v3/kv/range``, ``put``, ``deleterange``  the revision (a count-only range), a check write
=====================================  ==========================================================

Everything etcd answers is untrusted: a uint64 comes as a decimal string (often above 2^63) and is
checked to be one; sizes, counts, texts and URLs are bounded; an answer that is not what etcd
sends is an ``EtcdError`` naming the endpoint, never a guess.
"""

from __future__ import annotations

import base64
import errno
import json
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from cpctl.host.base import Host, HttpReply, HttpRequest, TlsOptions
from cpctl.probes.etcdcluster import is_url
from cpctl.probes.kubeapi import node_http

MEMBER_LIST = "/v3/cluster/member/list"
STATUS = "/v3/maintenance/status"
ALARM = "/v3/maintenance/alarm"
DEFRAGMENT = "/v3/maintenance/defragment"
MOVE_LEADER = "/v3/maintenance/transfer-leadership"
COMPACTION = "/v3/kv/compaction"
RANGE = "/v3/kv/range"
PUT = "/v3/kv/put"
DELETE_RANGE = "/v3/kv/deleterange"

ASK_TIMEOUT = 3.0                 # one read-only question to one member
ANSWER_LIMIT = 256 << 10          # a member list, a status or an alarm list is a few KiB
MAX_MEMBERS = 64                  # etcd advises at most 7; more is not an answer from etcd
MAX_URLS = 8
MAX_ALARMS = 256                  # one alarm per member and kind at most
MAX_ERRORS = 16                   # StatusResponse.errors: etcd's own list of what is wrong
TEXT_LIMIT = 160
UINT64_MAX = (1 << 64) - 1

#: etcd's AlarmType enum (api/etcdserverpb/rpc.proto): the gateway names it, etcdctl -w json numbers it.
ALARM_TYPES = ("NONE", "NOSPACE", "CORRUPT")


class EtcdError(Exception):
    """An etcd call that did not give etcd's answer: nothing answered, an error status, or a body
    that is not what etcd sends. ``endpoint`` is the URL asked; the text is one printable line."""

    def __init__(self, endpoint: str, why: str, status: int = 0) -> None:
        super().__init__("%s: %s" % (endpoint, why))
        self.endpoint = endpoint
        self.why = why
        self.status = status


@dataclass(frozen=True)
class Member:
    """One member as the member list gives it (``name`` "" and no client URL: added, never started)."""

    id: int
    name: str
    peer_urls: Tuple[str, ...]
    client_urls: Tuple[str, ...]
    learner: bool

    @property
    def label(self) -> str:
        """How a message names it: its name, else its ID in hex (etcdctl's form)."""
        return self.name or hex_id(self.id)


@dataclass(frozen=True)
class MemberList:
    """``MemberListResponse``: the cluster ID and the members, from the member at ``asked``."""

    cluster_id: int
    members: Tuple[Member, ...]
    asked: str


@dataclass(frozen=True)
class Status:
    """``StatusResponse`` of one member (what ``etcdctl endpoint status`` prints)."""

    member_id: int
    cluster_id: int
    version: str
    db_size: int
    db_size_in_use: int
    leader: int
    raft_term: int
    raft_index: int
    raft_applied_index: int
    revision: int
    learner: bool
    errors: Tuple[str, ...]
    db_size_quota: int = 0          # etcd 3.6+ reports its --quota-backend-bytes; 0: not said


@dataclass(frozen=True)
class Alarm:
    """One active alarm: the member that raised it and its kind (NOSPACE, CORRUPT)."""

    member_id: int
    alarm: str


def hex_id(value: int) -> str:
    """A member or cluster ID as etcdctl prints it in tables and takes it as an argument."""
    return "%x" % value


def clean(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` as a message may quote it: printable, one line, bounded."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def uint64(value: object, what: str) -> int:
    """A uint64 as the gateway sends it (a decimal string; a JSON number from an older etcd)."""
    if isinstance(value, bool):
        raise ValueError("%s is not a number" % what)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isdigit() and len(value) <= 20 and value.isascii():
        number = int(value)
    else:
        raise ValueError("%s is not an unsigned 64-bit number" % what)
    if not 0 <= number <= UINT64_MAX:
        raise ValueError("%s is out of range" % what)
    return number


def _opt_uint64(doc: Mapping[str, object], key: str) -> int:
    """``doc[key]`` as a uint64; absent is 0 (proto3 JSON leaves zero values out)."""
    return uint64(doc[key], key) if key in doc and doc[key] is not None else 0


def _urls(value: object) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_URLS or not all(is_url(u) for u in value):
        raise ValueError("a URL list that is not etcd's")
    return tuple(value)


def _mapping(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ValueError("%s is not a JSON object" % what)
    return value


def _doc(endpoint: str, reply: HttpReply) -> Mapping[str, object]:
    """The JSON object of etcd's answer ``reply``, else ``EtcdError``."""
    try:
        doc = json.loads(reply["body"].decode("utf-8")) if reply["body"] else {}
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise EtcdError(endpoint, "HTTP %d with a body that is not JSON" % reply["status"],
                        reply["status"]) from None
    if reply["status"] != 200:
        raise EtcdError(endpoint, "HTTP %d: %s" % (reply["status"], _error_text(doc)), reply["status"])
    if not isinstance(doc, dict):
        raise EtcdError(endpoint, "an answer that is not a JSON object")
    if "error" in doc:          # a streamed call reports its failure in the body
        raise EtcdError(endpoint, _error_text(doc), 200)
    return doc


def _member_list(endpoint: str, doc: Mapping[str, object]) -> MemberList:
    """etcd's member list answer ``doc``, checked."""
    try:
        cluster_id = uint64(_mapping(doc.get("header"), "header").get("cluster_id"), "cluster_id")
        raw = doc.get("members")
        if not isinstance(raw, list) or not raw or len(raw) > MAX_MEMBERS:
            raise ValueError("no member list")
        members = tuple(_member(_mapping(entry, "a member")) for entry in raw)
    except ValueError as exc:
        raise EtcdError(endpoint, "not etcd's member list (%s)" % exc) from None
    if len({m.id for m in members}) != len(members):
        raise EtcdError(endpoint, "not etcd's member list (a member ID twice)")
    return MemberList(cluster_id, members, endpoint)


def _alarms(endpoint: str, doc: Mapping[str, object]) -> List[Alarm]:
    """etcd's alarm list answer ``doc``, checked."""
    raw = doc.get("alarms") or []
    if not isinstance(raw, list) or len(raw) > MAX_ALARMS:
        raise EtcdError(endpoint, "not etcd's alarm list")
    out = []
    try:
        for entry in raw:
            entry = _mapping(entry, "an alarm")
            kind = entry.get("alarm", "NONE")
            if isinstance(kind, int) and not isinstance(kind, bool) and 0 <= kind < len(ALARM_TYPES):
                kind = ALARM_TYPES[kind]
            if kind not in ALARM_TYPES:
                raise ValueError("an alarm of no known kind")
            out.append(Alarm(_opt_uint64(entry, "memberID"), str(kind)))
    except ValueError as exc:
        raise EtcdError(endpoint, "not etcd's alarm list (%s)" % exc) from None
    return out


#: ``members_and_alarms``' two reads: (gateway path, body).
_MEMBERS_AND_ALARMS: Tuple[Tuple[str, Mapping[str, object]], ...] = ((MEMBER_LIST, {}), (ALARM, {"action": "GET"}))


class Gateway:
    """etcd's v3 JSON gateway on any member's client URL, asked from the node with ``tls``."""

    def __init__(self, host: Host, tls: TlsOptions, timeout: float = ASK_TIMEOUT) -> None:
        self.host = host
        self.tls = tls
        self.timeout = timeout

    def call(self, endpoint: str, path: str, body: Mapping[str, object], timeout: Optional[float] = None,
             limit: int = ANSWER_LIMIT) -> Mapping[str, object]:
        """``POST endpoint+path`` with ``body``; the JSON object etcd answered, else ``EtcdError``."""
        request = self._request(endpoint, path, body, limit)
        try:
            reply = node_http(self.host, "POST", request["url"], timeout or self.timeout, limit,
                              headers=request["headers"], body=request["body"], tls=self.tls)
        except ConnectionRefusedError:
            raise EtcdError(endpoint, "connection refused") from None
        except OSError as exc:
            raise EtcdError(endpoint, clean(str(exc.strerror or exc))) from None
        return _doc(endpoint, reply)

    def calls(self, endpoint: str, asked: List[Tuple[str, Mapping[str, object]]]) -> List[Mapping[str, object]]:
        """Several reads (``(path, body)``) of the member at ``endpoint`` in one request from the node
        (``Host.http_many``: one round trip over SSH): etcd's JSON objects in order, else the first
        ``EtcdError``."""
        requests = [self._request(endpoint, path, body, ANSWER_LIMIT) for path, body in asked]
        docs = []
        for answer in self.host.http_many(requests, self.timeout):
            if "reply" not in answer:
                error = clean(str(answer.get("error") or "no answer"))
                raise EtcdError(endpoint, "connection refused" if answer.get("errno") == errno.ECONNREFUSED else error)
            docs.append(_doc(endpoint, answer["reply"]))
        return docs

    def _request(self, endpoint: str, path: str, body: Mapping[str, object], limit: int) -> HttpRequest:
        if not is_url(endpoint):
            raise EtcdError(clean(str(endpoint)), "not an http(s) URL")
        return {"method": "POST", "url": endpoint.rstrip("/") + path, "headers": {"Content-Type": "application/json"},
                "body": json.dumps(body).encode(), "tls": self.tls, "limit": limit}

    # ----------------------------------------------------------------- reads

    def member_list(self, endpoint: str) -> MemberList:
        """The member list as the member at ``endpoint`` knows it."""
        return _member_list(endpoint, self.call(endpoint, MEMBER_LIST, {}))

    def members_and_alarms(self, endpoint: str) -> Tuple[MemberList, List[Alarm]]:
        """``member_list`` and ``alarms`` of the member at ``endpoint``, asked in one request from the node."""
        listed, alarmed = self.calls(endpoint, list(_MEMBERS_AND_ALARMS))
        return _member_list(endpoint, listed), _alarms(endpoint, alarmed)

    def members_and_alarms_requests(self, endpoint: str) -> List[HttpRequest]:
        """What ``members_and_alarms(endpoint)`` sends (two reads, by POST as etcd's gateway reads), for
        ``Host.http_ahead``; none for an endpoint that is no URL (it asks nothing either)."""
        try:
            requests = [self._request(endpoint, path, body, ANSWER_LIMIT) for path, body in _MEMBERS_AND_ALARMS]
        except EtcdError:
            return []
        for request in requests:
            request["timeout"] = self.timeout
        return requests

    def status(self, endpoint: str, timeout: Optional[float] = None) -> Status:
        """``etcdctl endpoint status`` of the member at ``endpoint``."""
        doc = self.call(endpoint, STATUS, {}, timeout)
        try:
            header = _mapping(doc.get("header"), "header")
            version = doc.get("version")
            if not isinstance(version, str) or not version or len(version) > 32 or not version.isprintable():
                raise ValueError("no version")
            errors = doc.get("errors") or []
            if not isinstance(errors, list) or len(errors) > MAX_ERRORS:
                raise ValueError("errors is not a short list")
            return Status(
                member_id=uint64(header.get("member_id"), "member_id"),
                cluster_id=uint64(header.get("cluster_id"), "cluster_id"),
                version=version, db_size=_opt_uint64(doc, "dbSize"), db_size_in_use=_opt_uint64(doc, "dbSizeInUse"),
                leader=_opt_uint64(doc, "leader"), raft_term=_opt_uint64(doc, "raftTerm"),
                raft_index=_opt_uint64(doc, "raftIndex"), raft_applied_index=_opt_uint64(doc, "raftAppliedIndex"),
                revision=_opt_uint64(header, "revision"), learner=doc.get("isLearner") is True,
                errors=tuple(clean(e) for e in errors if isinstance(e, str)),
                db_size_quota=_opt_uint64(doc, "dbSizeQuota"))
        except ValueError as exc:
            raise EtcdError(endpoint, "not etcd's status (%s)" % exc) from None

    def alarms(self, endpoint: str) -> List[Alarm]:
        """The cluster's active alarms (``etcdctl alarm list``)."""
        return _alarms(endpoint, self.call(endpoint, ALARM, {"action": "GET"}))

    def revision(self, endpoint: str) -> int:
        """The store's current revision (the header of a count-only range of one key)."""
        doc = self.call(endpoint, RANGE, {"key": _b64(b"\0"), "count_only": True})
        try:
            return uint64(_mapping(doc.get("header"), "header").get("revision"), "revision")
        except ValueError as exc:
            raise EtcdError(endpoint, "not etcd's range answer (%s)" % exc) from None

    def health(self, endpoint: str, learner: bool = False, timeout: Optional[float] = None) -> Tuple[bool, str]:
        """(True, "") when the member at ``endpoint`` serves a read of the key ``health`` - what
        ``etcdctl endpoint health`` asks: linearizable for a voter (it needs a leader and a quorum),
        serializable for a learner (which refuses linearizable reads); else (False, why).

        Not ``GET /health``: an active NOSPACE alarm makes it false on every member although each
        serves reads (real-node-facts.md), and a learner answers it "true". A read writes nothing
        (the raft index stays; ``alarms`` does not: etcd applies an alarm GET through raft, as
        ``etcdctl alarm list`` does - measured on 3.5.1)."""
        body: Dict[str, object] = {"key": _b64(b"health"), "count_only": True}
        if learner:
            body["serializable"] = True
        try:
            self.call(endpoint, RANGE, body, timeout)
        except EtcdError as exc:
            if "permission denied" in exc.why:        # etcd auth on: the member answered (etcdctl's rule)
                return True, ""
            return False, exc.why
        return True, ""

    # ----------------------------------------------------------------- changes

    def defragment(self, endpoint: str, timeout: float) -> None:
        """Defragment the member at ``endpoint`` (it blocks reads and writes while it runs; etcd
        finishes it even when the client goes away)."""
        self.call(endpoint, DEFRAGMENT, {}, timeout)

    def move_leader(self, leader_endpoint: str, target_id: int, timeout: float) -> None:
        """Ask the leader at ``leader_endpoint`` to hand leadership to member ``target_id``."""
        self.call(leader_endpoint, MOVE_LEADER, {"targetID": str(target_id)}, timeout)

    def compact(self, endpoint: str, revision: int, timeout: float) -> None:
        """Compact the key space up to ``revision``, physically (the answer comes once it is done)."""
        self.call(endpoint, COMPACTION, {"revision": str(revision), "physical": True}, timeout)

    def disarm(self, endpoint: str, alarm: Alarm) -> None:
        """Deactivate one alarm (``etcdctl alarm disarm`` does it for each listed alarm)."""
        self.call(endpoint, ALARM, {"action": "DEACTIVATE", "memberID": str(alarm.member_id), "alarm": alarm.alarm})

    def put(self, endpoint: str, key: bytes, value: bytes, timeout: Optional[float] = None) -> int:
        """Write ``key``; the revision of the write."""
        doc = self.call(endpoint, PUT, {"key": _b64(key), "value": _b64(value)}, timeout)
        try:
            return uint64(_mapping(doc.get("header"), "header").get("revision"), "revision")
        except ValueError as exc:
            raise EtcdError(endpoint, "not etcd's put answer (%s)" % exc) from None

    def delete(self, endpoint: str, key: bytes, timeout: Optional[float] = None) -> None:
        self.call(endpoint, DELETE_RANGE, {"key": _b64(key)}, timeout)


def _member(entry: Mapping[str, object]) -> Member:
    name = entry.get("name", "")
    if not isinstance(name, str) or len(name) > TEXT_LIMIT or not name.isprintable():
        raise ValueError("a member name that is not etcd's")
    return Member(uint64(entry.get("ID"), "ID"), name, _urls(entry.get("peerURLs")), _urls(entry.get("clientURLs")),
                  entry.get("isLearner") is True)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _error_text(doc: object) -> str:
    """The gateway's error (``{"error": ..., "code": N, "message": ...}``; a stream: ``{"error": {...}}``)."""
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        doc = doc["error"]
    if isinstance(doc, dict):
        for key in ("message", "error"):
            if isinstance(doc.get(key), str) and doc[key]:
                return clean(str(doc[key]))
    return "no reason given"


def by_id(members: Tuple[Member, ...]) -> Dict[int, Member]:
    return {m.id: m for m in members}

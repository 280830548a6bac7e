"""Ask etcd itself which members it has and which of them answer: what ``etcdctl member list`` and
``etcdctl endpoint health --cluster`` do, made from the node through its agent.

The quorum guard counts etcd members here, never from mirror pods: a mirror pod is the API
server's memory of what a kubelet once said, and on a stacked-etcd master whose etcd is parked the
local-mode kubelet cannot update it, so it stays Ready as last heard (real-node-facts.md "how etcd
members are counted").

* The membership comes from etcd's member list (``POST /v3/cluster/member/list`` on a client URL,
  the gRPC gateway's JSON form of ``MemberList``; a member serves it from its own copy of the
  cluster's membership, so any running member answers), asked through the first endpoint that
  answers.
* A member runs when ``GET <its client URL>/health`` answers 200 with ``{"health": "true"}``
  (etcd's own health handler: a running member with a leader). A member that cannot be asked - no
  client URL (added, never started), refused, timed out, a TLS error, an answer that is not etcd's -
  counts as not running: the guard fails safe and says which members it could not ask.

Everything here is an answer from a master: bounded (size, count, text) before it is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from cpctl.host.base import Host, TlsOptions
from cpctl.probes.kubeapi import node_http

MEMBER_LIST_PATH = "/v3/cluster/member/list"
ASK_TIMEOUT = 2.0
ANSWER_LIMIT = 256 << 10          # a member list of a few members is a few KiB
MAX_MEMBERS = 64                  # etcd advises at most 7; anything past this is not an answer from etcd
MAX_URLS = 8
TEXT_LIMIT = 128


@dataclass(frozen=True)
class EtcdMember:
    """One member as etcd lists it, and whether its own endpoint answered healthy."""

    name: str                      # "" for a member that was added and never started
    client_urls: Tuple[str, ...]
    running: bool
    why_not: str = ""              # why it does not count as running ("" when it runs)

    @property
    def label(self) -> str:
        """How a message names it: its name, else its first client URL, else "an unstarted member"."""
        return self.name or (self.client_urls[0] if self.client_urls else "an unstarted member")


@dataclass(frozen=True)
class EtcdCensus:
    """etcd's members as etcd itself reports them (``members`` empty with ``error`` set when no
    endpoint gave a member list)."""

    members: Tuple[EtcdMember, ...] = ()
    asked: str = ""                # the endpoint that gave the member list
    error: str = ""

    @property
    def running(self) -> List[str]:
        return [m.label for m in self.members if m.running]

    @property
    def unasked(self) -> List[str]:
        """Members counted as not running because they could not be asked, with the reason."""
        return ["%s (%s)" % (m.label, m.why_not) for m in self.members if not m.running and m.why_not]


def take_census(host: Host, endpoints: Sequence[str], tls: TlsOptions,
                timeout: float = ASK_TIMEOUT) -> EtcdCensus:
    """The member list through the first of ``endpoints`` that answers, then each member's health."""
    tried: List[str] = []
    for endpoint in _unique(endpoints):
        listed, error = member_list(host, endpoint, tls, timeout)
        if listed is None:
            tried.append("%s: %s" % (endpoint, error))
            continue
        members = tuple(_with_health(host, name, urls, tls, timeout) for name, urls in listed)
        return EtcdCensus(members, endpoint)
    why = "; ".join(tried) if tried else "no etcd client URL known"
    return EtcdCensus(error="no etcd member answered with the member list (%s)" % why)


def member_list(host: Host, endpoint: str, tls: TlsOptions,
                timeout: float = ASK_TIMEOUT) -> Tuple[Optional[List[Tuple[str, Tuple[str, ...]]]], str]:
    """[(name, client URLs), ...] from the member at ``endpoint``, or (None, why not)."""
    try:
        reply = node_http(host, "POST", endpoint.rstrip("/") + MEMBER_LIST_PATH, timeout, ANSWER_LIMIT,
                          headers={"Content-Type": "application/json"}, body=b"{}", tls=tls)
    except OSError as exc:
        return None, _oserror_text(exc)
    if reply["status"] != 200:
        return None, "HTTP %d" % reply["status"]
    try:
        doc = json.loads(reply["body"].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "an answer that is not JSON"
    raw = doc.get("members") if isinstance(doc, dict) else None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_MEMBERS:
        return None, "an answer that is not etcd's member list"
    members = []
    for entry in raw:
        if not isinstance(entry, dict):
            return None, "an answer that is not etcd's member list"
        name = entry.get("name")
        urls = entry.get("clientURLs")
        members.append((_clean(name) if isinstance(name, str) else "",
                        tuple(u for u in (urls if isinstance(urls, list) else [])[:MAX_URLS] if is_url(u))))
    return members, ""


def endpoint_healthy(host: Host, url: str, tls: TlsOptions, timeout: float = ASK_TIMEOUT) -> Tuple[bool, str]:
    """(True, "") when etcd's ``/health`` at ``url`` says healthy; else (False, why)."""
    try:
        reply = node_http(host, "GET", url.rstrip("/") + "/health", timeout, ANSWER_LIMIT, tls=tls)
    except OSError as exc:
        return False, _oserror_text(exc)
    try:
        doc = json.loads(reply["body"].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None
    health = doc.get("health") if isinstance(doc, dict) else None
    if reply["status"] == 200 and health == "true":
        return True, ""
    reason = doc.get("reason") if isinstance(doc, dict) else None
    detail = _clean(reason) if isinstance(reason, str) and reason else "HTTP %d" % reply["status"]
    return False, "unhealthy: %s" % detail


def _with_health(host: Host, name: str, urls: Tuple[str, ...], tls: TlsOptions, timeout: float) -> EtcdMember:
    """The member with the health of its first client URL that answers."""
    if not urls:
        return EtcdMember(name, urls, False, "no client URL: added but never started")
    why = ""
    for url in urls:
        ok, why = endpoint_healthy(host, url, tls, timeout)
        if ok:
            return EtcdMember(name, urls, True)
    return EtcdMember(name, urls, False, why)


def _unique(endpoints: Sequence[str]) -> List[str]:
    seen: List[str] = []
    for endpoint in endpoints:
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

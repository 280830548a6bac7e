"""The cluster's own lock for guarded changes: a Lease in kube-system that every cpctl run which
may stop etcd or an API server holds while it counts and changes, wherever it runs.

A lock file on one machine makes the runs of that machine take turns; two operators (or an AWX
node and a laptop) changing the same cluster from two machines would both count three running
etcd members and both stop one. The Lease lives in the cluster, so every run sees it:

* taken by creating it, or by updating it (resourceVersion precondition: of two runs, one gets
  409 Conflict and waits) once its holder has released it or it expired;
* "expired" is judged as client-go's leader election does: by how long THIS run has seen the same
  resourceVersion (a monotonic clock here), never by comparing the holder's clock with ours;
* released at the end of the run (holder cleared); a run killed with SIGKILL leaves it to expire
  after ``LEASE_SECONDS`` - the waiting run says who holds it and since when.

Everything read back is an answer from the cluster: bounded and printable before it is quoted.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Dict, Mapping

from cpctl.core.node import Node
from cpctl.probes.kubeapi import ApiError, client_for

LEASE_NAME = "cpctl-control-plane-changes"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
#: How long a holder that never released it keeps it: longer than a guarded change on one master
#: (each kubelet wait is bounded by --timeout, 120 s by default; etcd and the API server both move).
LEASE_SECONDS = 600


def holder_identity() -> str:
    """Who holds it, as an operator reads it: user, machine, process, and a random suffix."""
    user = os.environ.get("USER") or str(os.geteuid())
    return "cpctl %s@%s pid %d %s" % (user, socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8])


@dataclass(frozen=True)
class LeaseSeen:
    """One look at the Lease: taken by us, or who holds it (``holder`` "" when free)."""

    taken: bool
    holder: str = ""
    version: str = ""
    since: str = ""


def try_take(node: Node, me: str, expired_version: str = "") -> LeaseSeen:
    """Take the Lease through ``node``'s API server unless another run holds it; ``expired_version``
    is a resourceVersion the caller has seen unchanged for longer than the lease lasts (its holder
    is gone), which may be taken over."""
    client = client_for(node.host, node.kubeconfig)
    now = _micro_time()
    try:
        lease = client.request("GET", "%s/%s" % (LEASE_PATH, LEASE_NAME))
    except ApiError as exc:
        if not exc.is_not_found(LEASE_NAME):
            raise
        new = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": LEASE_NAME, "namespace": "kube-system"}, "spec": _spec(me, now, now)}
        return _attempt(lambda: client.request("POST", LEASE_PATH, new), me)
    meta, spec = _object(lease.get("metadata")), _object(lease.get("spec"))
    version = _text(meta.get("resourceVersion"))
    holder = _text(spec.get("holderIdentity"))
    if holder and holder != me and version != expired_version:
        return LeaseSeen(False, holder, version, _text(spec.get("acquireTime")))
    body: Dict[str, object] = dict(lease)
    body["spec"] = _spec(me, now, now)
    return _attempt(lambda: client.request("PUT", "%s/%s" % (LEASE_PATH, LEASE_NAME), body), me)


def release(node: Node, me: str) -> None:
    """Clear the holder if it is still us (a run that took it over after expiry keeps it)."""
    client = client_for(node.host, node.kubeconfig)
    lease = client.request("GET", "%s/%s" % (LEASE_PATH, LEASE_NAME))
    spec = _object(lease.get("spec"))
    if _text(spec.get("holderIdentity")) != me:
        return
    body: Dict[str, object] = dict(lease)
    body["spec"] = dict(spec, holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time())
    client.request("PUT", "%s/%s" % (LEASE_PATH, LEASE_NAME), body)


def _attempt(send: Callable[[], Mapping[str, object]], me: str) -> LeaseSeen:
    """A create or update: taken, or (409) another run got there first."""
    try:
        taken = send()
    except ApiError as exc:
        if exc.status == 409:
            return LeaseSeen(False, "another cpctl run (it took the lease at the same moment)")
        raise
    return LeaseSeen(True, me, _text(_object(taken.get("metadata")).get("resourceVersion")))


def _spec(me: str, acquired: str, renewed: str) -> Dict[str, object]:
    return {"holderIdentity": me, "leaseDurationSeconds": LEASE_SECONDS, "acquireTime": acquired,
            "renewTime": renewed}


def _micro_time() -> str:
    """A MicroTime as the API wants it (RFC 3339 with microseconds, UTC)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % int((now % 1) * 1e6)


def _object(value: object) -> Dict[str, object]:
    return dict(value) if isinstance(value, Mapping) else {}


def _text(value: object, limit: int = 160) -> str:
    if not isinstance(value, str):
        return ""
    return "".join(c if c.isprintable() else "?" for c in value[:limit])


class Waiting:
    """The waiting side: when the same resourceVersion has been seen for longer than the lease
    lasts, its holder is gone and it may be taken over."""

    def __init__(self) -> None:
        self.version = ""
        self.first_seen = 0.0

    def expired_version(self, seen: LeaseSeen) -> str:
        """``seen``'s resourceVersion when its holder is gone: unchanged for longer than the lease
        lasts, or held by a cpctl process of this machine that no longer exists."""
        if seen.version != self.version:
            self.version, self.first_seen = seen.version, time.monotonic()
        if time.monotonic() - self.first_seen > LEASE_SECONDS or _gone_here(seen.holder):
            return self.version
        return ""


def _gone_here(holder: str) -> bool:
    """Whether ``holder`` (``holder_identity``'s words) names a process of this machine that is
    gone: a run killed before it gave the lease back (its pid is looked up, never signalled)."""
    words = holder.split()
    if len(words) != 5 or words[0] != "cpctl" or words[2] != "pid" or not words[3].isdigit():
        return False
    if words[1].rpartition("@")[2] != socket.gethostname():
        return False
    return not os.path.exists("/proc/%s" % words[3])


def describe(seen: LeaseSeen) -> str:
    """The waiting line: who holds it and since when."""
    return "%s%s" % (seen.holder or "another cpctl run", " since %s" % seen.since if seen.since else "")

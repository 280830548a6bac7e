"""The cluster's own lock for guarded changes: a Lease in kube-system that every cpctl run which
may stop etcd or an API server holds while it counts and changes, wherever it runs.

A lock file on one machine makes the runs of that machine take turns; two operators (or an AWX
node and a laptop) changing the same cluster from two machines would both count three running
etcd members and both stop one. The Lease lives in the cluster, so every run sees it:

* taken by creating it, or by updating it (resourceVersion precondition: of two runs, one gets
  409 Conflict and waits) once its holder has released it or it expired;
* "expired" is judged as client-go's leader election does: by how long THIS run has seen the same
  resourceVersion (a monotonic clock here), never by comparing the holder's clock with ours;
* renewed while the run lasts (``Holder``: a thread, every ``RETRY_PERIOD`` seconds, through any
  master whose API server answers), as client-go's leader election renews a leader's Lease, so that
  an alive holder is never taken over however long its rolling run takes; a holder that finds the
  Lease held by another run, or could not renew it for ``RENEW_DEADLINE`` seconds, stops before its
  next master (``Holder.check``), says so, and exits non-zero;
* released at the end of the run (holder cleared; a release that fails is reported); a run killed
  with SIGKILL leaves it to expire after its ``leaseDurationSeconds`` - the waiting run says who
  holds it and since when;
* "its process is gone, take it over at once" only for a holder whose identity carries this
  machine's /etc/machine-id, boot id and PID namespace (hashed) and whose PID is not there: never by
  the host name alone (two machines may share one).

Everything read back is an answer from the cluster: bounded and printable before it is quoted.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from dataclasses import replace as dataclasses_replace
from typing import Callable, Dict, Mapping, Optional, Tuple

from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.probes.kubeapi import ApiError, KubeClient, client_for

LEASE_NAME = "cpctl-control-plane-changes"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
#: The Lease's leaseDurationSeconds: how long a waiting run must see it unchanged before it takes it
#: over. A holder stops only between two masters, so this is longer than a guarded change on one
#: master (each kubelet wait is bounded by --timeout, 120 s by default, a startupProbe's budget 250 s;
#: etcd and the API server both move) plus ``RENEW_DEADLINE``.
LEASE_SECONDS = 600
#: client-go's leader election (tools/leaderelection, the core components' defaults: LeaseDuration
#: 15 s, RenewDeadline 10 s, RetryPeriod 2 s): the holder renews every RETRY_PERIOD; one that has not
#: renewed for RENEW_DEADLINE no longer knows that it holds the Lease and acts no further.
RETRY_PERIOD = 2.0
RENEW_DEADLINE = 10.0
MAX_LEASE_SECONDS = 3600          # a leaseDurationSeconds read back is bounded before a waiter trusts it
IDENTITY_FILES = {"machine": ("/etc/machine-id", "/var/lib/dbus/machine-id"),
                  "boot": ("/proc/sys/kernel/random/boot_id",)}
PID_NAMESPACE = "/proc/self/ns/pid"


def holder_identity() -> str:
    """Who holds it, as an operator reads it: user, host, process, this machine's tags
    (``machine_tags``: machine-id/boot id/PID namespace, hashed) and a random suffix."""
    user = (os.environ.get("USER") or str(os.geteuid()))[:32]
    return "cpctl %s@%s pid %d machine %s %s" % (user, socket.gethostname()[:64], os.getpid(), "/".join(machine_tags()),
                                                 uuid.uuid4().hex[:8])


def machine_tags() -> Tuple[str, str, str]:
    """(machine, boot, PID namespace) of this process, each the first 8 hex digits of a sha256 ("-"
    when unknown): the machine-id is not published as it is (machine-id(5) asks for a hash), and
    only a process of the same machine, boot and PID namespace can look a PID up."""
    return (_tag(_first_line(IDENTITY_FILES["machine"])), _tag(_first_line(IDENTITY_FILES["boot"])),
            _tag(_readlink(PID_NAMESPACE)))


def _tag(value: str) -> str:
    return hashlib.sha256(b"cpctl change lease\0" + value.encode()).hexdigest()[:8] if value else "-"


def _first_line(paths: Tuple[str, ...]) -> str:
    for path in paths:
        try:
            with open(path, "rb") as handle:
                value = handle.read(128).decode("ascii", "replace").strip()
        except OSError:
            continue
        if value:
            return value
    return ""


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


@dataclass(frozen=True)
class LeaseSeen:
    """One look at the Lease: taken by us, or who holds it (``holder`` "" when free)."""

    taken: bool
    holder: str = ""
    version: str = ""
    since: str = ""
    duration: float = LEASE_SECONDS      # its leaseDurationSeconds (bounded): how long a waiter waits


#: The API client of each node a run takes, renews and releases the Lease through: its kubeconfig read
#: once per run (a renewal every few seconds would read it again, a round trip each over SSH).
_CLIENTS: "weakref.WeakKeyDictionary[Node, KubeClient]" = weakref.WeakKeyDictionary()


def _client(node: Node) -> "KubeClient":
    client = _CLIENTS.get(node)
    if client is None:
        client = _CLIENTS[node] = client_for(node.host, node.kubeconfig)
    return client


def try_take(node: Node, me: str, expired_version: str = "") -> LeaseSeen:
    """Take the Lease through ``node``'s API server unless another run holds it; ``expired_version``
    is a resourceVersion the caller has seen unchanged for longer than the lease lasts (its holder
    is gone), which may be taken over."""
    client = _client(node)
    now = _micro_time()
    try:
        lease = client.request("GET", "%s/%s" % (LEASE_PATH, LEASE_NAME))
    except ApiError as exc:
        if not exc.is_not_found(LEASE_NAME):
            raise
        new = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": LEASE_NAME, "namespace": "kube-system"}, "spec": _spec(me, now, now)}
        return _attempt(lambda: client.request("POST", LEASE_PATH, new), me)
    seen = _seen(lease)
    if seen.holder and seen.holder != me and seen.version != expired_version:
        return seen
    body: Dict[str, object] = dict(lease)
    body["spec"] = _spec(me, now, now)
    return _attempt(lambda: client.request("PUT", "%s/%s" % (LEASE_PATH, LEASE_NAME), body), me)


def renew(node: Node, me: str) -> LeaseSeen:
    """Renew the Lease through ``node``'s API server while ``me`` holds it (its renewTime now, the
    resourceVersion read as the precondition): ``taken`` when renewed; else who holds it now - another
    run's holder is a lost Lease, and so is a Lease deleted meanwhile ("" holder: nobody kept it for
    this run). A 409 means another writer came between the read and the write: not renewed this time,
    the next try reads again."""
    client = _client(node)
    try:
        lease = client.request("GET", "%s/%s" % (LEASE_PATH, LEASE_NAME))
    except ApiError as exc:
        if exc.is_not_found(LEASE_NAME):
            return LeaseSeen(False, "nobody (the Lease was deleted)")
        raise
    seen = _seen(lease)
    if seen.holder != me:
        return dataclasses_replace(seen, holder=seen.holder or "nobody (the Lease was released by another writer)")
    spec = _object(lease.get("spec"))
    body: Dict[str, object] = dict(lease)
    body["spec"] = dict(spec, holderIdentity=me, leaseDurationSeconds=LEASE_SECONDS, renewTime=_micro_time())
    try:
        renewed = client.request("PUT", "%s/%s" % (LEASE_PATH, LEASE_NAME), body)
    except ApiError as exc:
        if exc.status == 409:
            return LeaseSeen(False, me, seen.version)
        raise
    return LeaseSeen(True, me, _text(_object(renewed.get("metadata")).get("resourceVersion")))


def release(node: Node, me: str) -> str:
    """Clear the holder if it is still us; "" when given back, else who holds it now (a run that
    took it over keeps it: this run had lost it)."""
    client = _client(node)
    lease = client.request("GET", "%s/%s" % (LEASE_PATH, LEASE_NAME))
    spec = _object(lease.get("spec"))
    holder = _text(spec.get("holderIdentity"))
    if holder != me:
        return holder or "nobody (released by another writer)"
    body: Dict[str, object] = dict(lease)
    body["spec"] = dict(spec, holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time())
    client.request("PUT", "%s/%s" % (LEASE_PATH, LEASE_NAME), body)
    return ""


def _seen(lease: Mapping[str, object]) -> LeaseSeen:
    """The Lease as read: holder, resourceVersion, since when, and its leaseDurationSeconds (bounded,
    LEASE_SECONDS when missing or not a whole number of seconds from 1 to MAX_LEASE_SECONDS)."""
    meta, spec = _object(lease.get("metadata")), _object(lease.get("spec"))
    duration = spec.get("leaseDurationSeconds")
    seconds = float(LEASE_SECONDS)
    if isinstance(duration, int) and not isinstance(duration, bool) and 1 <= duration <= MAX_LEASE_SECONDS:
        seconds = float(duration)
    return LeaseSeen(False, _text(spec.get("holderIdentity")), _text(meta.get("resourceVersion")),
                     _text(spec.get("acquireTime")), seconds)


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
    """The waiting side: when the same resourceVersion has been seen for longer than the Lease's own
    leaseDurationSeconds (as client-go judges it: by this run's monotonic clock), its holder is gone
    and it may be taken over. An alive holder renews it (``Holder``): a new resourceVersion every
    ``RETRY_PERIOD``, a new clock here each time."""

    def __init__(self) -> None:
        self.version = ""
        self.first_seen = 0.0

    def expired_version(self, seen: LeaseSeen) -> str:
        """``seen``'s resourceVersion when its holder is gone: unchanged for longer than the lease
        lasts, or held by a cpctl process of this machine that no longer exists."""
        if seen.version != self.version:
            self.version, self.first_seen = seen.version, time.monotonic()
        if time.monotonic() - self.first_seen > seen.duration or gone_here(seen.holder):
            return self.version
        return ""


def gone_here(holder: str, tags: Optional[Tuple[str, str, str]] = None) -> bool:
    """Whether ``holder`` (``holder_identity``'s words) names a process of this machine that is gone:
    a run killed before it gave the lease back (its pid is looked up, never signalled). Only a holder
    with this machine's machine-id tag: one from an earlier boot is gone; one of this boot is looked
    up when it runs in this PID namespace, else kept (it cannot be looked up from here). A host name
    alone proves nothing (two machines may share one), nor does an identity without the tags."""
    words = holder.split()
    if len(words) != 7 or words[0] != "cpctl" or words[2] != "pid" or not words[3].isdigit() \
            or words[4] != "machine":
        return False
    theirs = words[5].split("/")
    mine = tags or machine_tags()
    if len(theirs) != 3 or mine[0] == "-" or theirs[0] != mine[0]:
        return False
    if "-" not in (mine[1], theirs[1]) and theirs[1] != mine[1]:
        return True                        # this machine booted since: every process of then is gone
    if theirs[1:] != list(mine[1:]) or "-" in theirs[1:]:
        return False
    return not os.path.exists("/proc/%s" % words[3])


class Holder:
    """This run's hold on the Lease, renewed while the run lasts (client-go's leader election: a
    renewal every RETRY_PERIOD; a holder that has not renewed for RENEW_DEADLINE no longer knows it
    holds it). ``renew_once`` renews it once through some master (``renew``), or raises (``CpctlError``
    or ``OSError``: no API server answered). ``check`` is asked before each next master."""

    def __init__(self, me: str, renew_once: Callable[[], LeaseSeen]) -> None:
        self.me = me
        self.renew_once = renew_once
        self.renewed = time.monotonic()       # taken just now
        self.lost = ""                        # who holds it instead, once seen
        self.error = ""                       # why the last renewal failed ("" when it worked)
        self._lock = threading.Lock()         # one renewal at a time: the thread's or ``check``'s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cpctl-change-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No more renewals (before the release: a renewal in flight finishes first, so the release
        reads the last version)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(RENEW_DEADLINE + RETRY_PERIOD)

    def _run(self) -> None:
        while not self._stop.wait(RETRY_PERIOD) and not self.lost:
            self.renew_now()

    def renew_now(self) -> None:
        """One renewal; what it found is kept (``renewed``, ``lost``, ``error``)."""
        with self._lock:
            if self.lost:
                return
            try:
                seen = self.renew_once()
            except (CpctlError, OSError) as exc:
                self.error = getattr(exc, "message", None) or str(exc)
                return
            if seen.taken:
                self.renewed, self.error = time.monotonic(), ""
            elif seen.holder != self.me:
                self.lost = describe(seen)
            else:
                self.error = "another writer changed the Lease meanwhile (409)"

    def check(self, before: str) -> None:
        """Before ``before`` (the next master): go on only while this run surely holds the Lease. It is
        renewed here first (who holds it now, not what the thread saw last); not renewed for
        RENEW_DEADLINE: tried again every RETRY_PERIOD for up to RENEW_DEADLINE. Lost, or still not
        renewed: LOCKED, saying so."""
        deadline = time.monotonic() + RENEW_DEADLINE
        self.renew_now()
        while not self.lost and time.monotonic() - self.renewed > RENEW_DEADLINE and time.monotonic() < deadline:
            time.sleep(min(RETRY_PERIOD, max(0.0, deadline - time.monotonic())))
            self.renew_now()
        if self.lost:
            raise CpctlError("not started on %s: this run lost the cluster's change lease (kube-system/%s) to %s; "
                             "another run may be changing the cluster's etcd/API servers now"
                             % (before, LEASE_NAME, self.lost), ExitCode.LOCKED)
        if time.monotonic() - self.renewed > RENEW_DEADLINE:
            raise CpctlError("not started on %s: this run could not renew the cluster's change lease (kube-system/%s) "
                             "for %.0fs (%s), so it cannot tell whether another run took it over"
                             % (before, LEASE_NAME, time.monotonic() - self.renewed, self.error or "no answer"),
                             ExitCode.LOCKED)


def describe(seen: LeaseSeen) -> str:
    """The waiting line: who holds it and since when."""
    return "%s%s" % (seen.holder or "another cpctl run", " since %s" % seen.since if seen.since else "")

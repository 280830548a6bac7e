"""etcd's member identity across a change (issue 45 item 5): the member that comes back after a
stop, restart, start or manifest change of etcd must be the same member of the same cluster, with
a store that did not go back in time.

etcd answers ``POST /v3/maintenance/status`` with a header that names the member (``member_id``),
its cluster (``cluster_id``) and the store's ``revision`` (uint64 values as JSON strings). A member
started on an empty or another data dir is a new member: on a single master it even gets the same
member and cluster ID (etcd derives both from the name, the peer URLs and the cluster token), but its
revision starts again at 1 - a brand-new empty cluster under the API server. So the gate compares
all three: the IDs must be equal and the revision not lower than before (real-node-facts.md "etcd,
measured on the real binaries"; measured on etcd 3.5.1).

The identity is read before the change (``before``), kept for the whole run (a rollback is judged
against the member before the change, not against the failed one) and recorded in the state dir
(``etcd-member.json``), so that the ``start`` of an etcd parked by an earlier run compares with what
its ``stop`` saw. ``--new-member`` (a restore, a member replaced on purpose) accepts a new identity
and records it.

Everything etcd answers is untrusted: the IDs must be decimal uint64 strings, the revision a
non-negative integer, the answer bounded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional

from cpctl import catalogue
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import TlsOptions
from cpctl.probes.base import PodTarget
from cpctl.probes.etcdmaint import STATUS as STATUS_PATH
from cpctl.probes.gates import Blindness, GateResult, GateRun

if TYPE_CHECKING:
    from cpctl.core.node import Node

ASK_TIMEOUT = 2.0
RECORD = "etcd-member.json"
#: With nothing known before the change, how long a member that answers healthy may take to answer
#: the status call too before the gate says "not checked": the call needs no more than /health did.
UNKNOWN_GRACE = 3.0
_UINT64 = re.compile(r"^[0-9]{1,20}$")


@dataclass(frozen=True)
class MemberIdentity:
    """Who an etcd member is: its member ID and cluster ID (decimal uint64 strings, as etcd's JSON
    gateway writes them) and its store's revision when it was read."""

    member_id: str
    cluster_id: str
    revision: int

    def to_dict(self) -> Dict[str, object]:
        return {"member_id": self.member_id, "cluster_id": self.cluster_id, "revision": self.revision}

    @classmethod
    def from_dict(cls, value: object) -> Optional["MemberIdentity"]:
        """The identity in ``value`` (a status header, or this module's record), None when it is not one."""
        if not isinstance(value, dict):
            return None
        member, cluster, revision = value.get("member_id"), value.get("cluster_id"), value.get("revision")
        if not (isinstance(member, str) and _UINT64.match(member) and isinstance(cluster, str)
                and _UINT64.match(cluster)):
            return None
        if isinstance(revision, str) and _UINT64.match(revision):
            revision = int(revision)
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
            return None
        return cls(member, cluster, revision)

    def differs(self, after: "MemberIdentity") -> str:
        """Why ``after`` is not this member any more ("" when it is)."""
        if after.cluster_id != self.cluster_id:
            return "it is a member of another cluster (cluster ID %s, was %s)" % (after.cluster_id, self.cluster_id)
        if after.member_id != self.member_id:
            return "it is another member (member ID %s, was %s)" % (after.member_id, self.member_id)
        if after.revision < self.revision:
            return ("its store went back from revision %d to %d (an empty or older data dir: a new, empty member)"
                    % (self.revision, after.revision))
        return ""


class IdentityChanged(CpctlError):
    """etcd came back as another member, in another cluster, or with a store that went back."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.REFUSED)


def read_identity(run: GateRun, target: PodTarget, tls: Optional[TlsOptions]) -> Optional[MemberIdentity]:
    """The identity of the member the target's manifest runs, asked on its own client URLs through
    etcd's gateway (``probes.etcdmaint.Gateway.status``, as ``etcd status`` asks it); None when it
    cannot be asked or its answer is not etcd's."""
    from cpctl.probes.etcdmaint import EtcdError, Gateway
    if tls is None:
        return None
    gateway = Gateway(run.host, tls, ASK_TIMEOUT)
    for url in client_urls(target):
        try:
            status = gateway.status(url, min(ASK_TIMEOUT, run.clock.budget()))
        except EtcdError:
            continue
        return MemberIdentity(str(status.member_id), str(status.cluster_id), status.revision)
    return None


def client_urls(target: PodTarget) -> List[str]:
    """The member's client URLs from its manifest (``ops.etcdcare.member_urls``: loopback first,
    only http(s) URLs)."""
    from cpctl.ops.etcdcare import member_urls
    return member_urls(target.pod)


class EtcdIdentityGate:
    """The gate (``cpctl.probes.gates``) that holds an etcd change to its member's identity."""

    name = "etcd-identity"

    def __init__(self, node: "Node") -> None:
        self.node = node
        self.first: Optional[MemberIdentity] = None     # the member before this run's first etcd change
        self.new_member = False                         # --new-member: a new identity is the intent
        self.changed = ""                               # why the member that came back is another one
        self._tls: Optional[TlsOptions] = None

    def applies(self, target: PodTarget) -> bool:
        return catalogue.canonical(target.component) == catalogue.ETCD

    def before(self, target: PodTarget, run: GateRun) -> object:
        """The member before this run's first etcd change: asked live, else as an earlier run recorded
        it (a ``start`` after a ``stop``); later calls (a rollback's) keep the first."""
        if self.first is None:
            self.first = read_identity(run, target, self.tls()) or self._recorded()
            if self.first is not None:
                self._record(self.first)
        return self.first

    def check(self, target: PodTarget, before: object, run: GateRun) -> GateResult:
        was = before if isinstance(before, MemberIdentity) else self.first
        blind = Blindness()
        while True:
            now = read_identity(run, target, self.tls())
            if now is not None:
                break
            where = "%s on %s" % (STATUS_PATH, ", ".join(client_urls(target)) or "no client URL")
            if was is None and (run.clock.expired() or blind.seconds() >= min(run.clock.timeout, UNKNOWN_GRACE)):
                # nothing known before either (an etcd without the maintenance API, no client certificate)
                return GateResult(", member identity not checked (%s could not be read)" % where, True)
            if run.clock.expired():
                return GateResult(", but not verified: the member's identity could not be read (%s)" % where, False)
            run.pause("etcd member identity (%s) could not be read" % STATUS_PATH)
        if was is None:
            self._record(now)
            return GateResult(", member %s (nothing recorded before to compare with)" % now.member_id, True)
        why = was.differs(now)
        if why and not self.new_member:
            self.changed = why
            raise IdentityChanged("etcd on %s came back, but %s; the data dir in its manifest is not the one it "
                                  "ran on" % (target.node, why))
        self._record(now)
        if why:
            return GateResult(", a new member as --new-member asked (%s)" % why, True)
        return GateResult(", same member %s of cluster %s, revision %d (was %d)"
                          % (now.member_id, now.cluster_id, now.revision, was.revision), True)

    def tls(self) -> Optional[TlsOptions]:
        if self._tls is None:
            from cpctl.core.etcdclient import etcd_client_tls
            self._tls = etcd_client_tls(self.node)
        return self._tls

    def _path(self) -> str:
        return self.node.state.path + "/" + RECORD

    def _recorded(self) -> Optional[MemberIdentity]:
        try:
            return MemberIdentity.from_dict(self.node.state.read_json(self._path()))
        except CpctlError:            # a corrupt record is no identity: nothing to compare with
            return None

    def _record(self, identity: MemberIdentity) -> None:
        try:
            if self.node.state.ensure(create=False):
                data = (json.dumps(identity.to_dict(), sort_keys=True) + "\n").encode("utf-8")
                self.node.host.write_atomic(self._path(), data, 0o600)
        except (OSError, CpctlError):  # a record is a help for the next run, never a reason to fail this one
            pass


def accept_new_member(node: "Node", new_member: bool) -> None:
    """``--new-member``: the etcd that comes back may be a new member (a restore, a replaced member)."""
    gate = gate_of(node)
    if gate is not None:
        gate.new_member = new_member


def changed_member(node: "Node") -> str:
    """Why the etcd that came back in this run is another member ("" when it is not)."""
    gate = gate_of(node)
    return gate.changed if gate is not None else ""


def gate_of(node: "Node") -> Optional[EtcdIdentityGate]:
    """The node's etcd identity gate (None when its waiter verifies nothing)."""
    for gate in getattr(node.waiter, "gates", []) or []:
        if isinstance(gate, EtcdIdentityGate):
            return gate
    return None

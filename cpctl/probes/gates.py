"""Gates: what must hold after a started pod is Ready before a wait calls it verified.

A ``Gate`` is an object the verifying waiter runs in order (``VerifyingWaiter.gates``) for each
target it ``applies`` to: it may take a snapshot before the change (``before``) and judges after
Ready (``check``), through a ``GateRun`` - the wait's clock, its pauses and TIMEOUT, the node's
host and API client. The built-in gates, in this order:

* ``LeaseGate`` - a leader-elected component (scheduler, controller-manager, a second scheduler)
  must renew its Lease from this node, or, as a standby or while the API's view of the node is
  stale, answer on its own health endpoint;
* ``HealthGate`` - the API server and etcd, and a leader-electable component started with
  ``--leader-elect=false``, must answer on their own health endpoint.

Others are added by the layer that wants them (``VerifyingWaiter.add_gate``): the canary that creates a pod
lives in ``cpctl/ops/canary.py``, outside the read-only probes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Protocol, Tuple

from cpctl import catalogue
from cpctl.host.base import Host
from cpctl.probes.base import API_TIMEOUT, Clock, PodTarget, ProbeOptions, Unavailable
from cpctl.probes.health import HealthProbe, health_url
from cpctl.probes.kubeapi import ApiError, ApiFailure, KubeClient
from cpctl.probes.lease import lease_name, uses_lease
from cpctl.probes.shape import ShapeError, get_object, get_str
from cpctl.timeutil import parse_rfc3339

BLIND_GRACE = 10.0      # seconds of "no probe can look" after which a wait says "not verified"
API_CALL = API_TIMEOUT  # the most one API request of a gate (Lease, canary) may take


class Blindness:
    """How long, without a break, no probe (or no API call of a gate) could look."""

    def __init__(self) -> None:
        self.since: Optional[float] = None

    def seconds(self) -> float:
        """Blind now: how long it has lasted (0 at its first moment)."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        return now - self.since

    def end(self) -> None:
        self.since = None


@dataclass
class GateRun:
    """What a gate may use while it runs: the wait's clock, the waiter's pause (``pause``: wait one
    poll, showing what is awaited) and TIMEOUT (``tick``: the TIMEOUT error once the clock expired,
    else a pause), whether the target's API view is ``stale``, and the run's probe options (host,
    shared API client)."""

    clock: Clock
    stale: bool
    options: ProbeOptions
    pause: Callable[[str], None]
    tick: Callable[[str], None]
    poll: float = 0.05

    @property
    def host(self) -> Host:
        return self.options.host

    def client(self) -> KubeClient:
        """The API client (``ProbeMissing``, an ``Unavailable``, when the kubeconfig is unusable)."""
        return self.options.client()


@dataclass
class GateResult:
    """A gate's verdict: ``text`` is appended to the wait's detail (", lease ... renewed")."""

    text: str
    verified: bool


class Gate(Protocol):
    """One check after a started pod is Ready (see the module doc)."""

    name: str

    def applies(self, target: PodTarget) -> bool:
        """Whether this gate judges ``target`` at all."""

    def before(self, target: PodTarget, run: GateRun) -> object:
        """A snapshot before the change (None: nothing to remember)."""

    def check(self, target: PodTarget, before: object, run: GateRun) -> GateResult:
        """The verdict after Ready; ``before`` is this gate's snapshot, or None when the wait had
        none (no ``Waiter.before`` was taken)."""


class HealthGate:
    """The component's own endpoint must answer 200 (API server, etcd, ``--leader-elect=false``)."""

    name = "health"

    def applies(self, target: PodTarget) -> bool:
        return not uses_lease(target) and (catalogue.carries_api(target.component)
                                           or catalogue.leader_elected(target.component))

    def before(self, target: PodTarget, run: GateRun) -> object:
        return None

    def check(self, target: PodTarget, before: object, run: GateRun) -> GateResult:
        if catalogue.carries_api(target.component):
            return self.require(target, run, "")
        # --leader-elect=false: no Lease proves it works, its own endpoint (from the manifest) must
        return self.require(target, run, ", no leader election (--leader-elect=false)")

    @staticmethod
    def require(target: PodTarget, run: GateRun, prefix: str, waiting: str = "") -> GateResult:
        """The component's own endpoint must answer 200: TIMEOUT (saying ``waiting``) when it
        answers otherwise until the deadline, "not verified" when it could not be read then."""
        url = health_url(target)
        if url is None:
            return GateResult(prefix + " (no health endpoint)", True)
        probe = HealthProbe(run.host)
        while True:
            try:
                state = probe.observe(target, timeout=run.clock.budget())
            except Unavailable as exc:
                if run.clock.expired():
                    return GateResult(prefix + ", but not verified: %s could not be read (%s)" % (url, exc), False)
                run.pause("%s could not be read" % url)
                continue
            if state.ready:
                return GateResult(prefix + ", %s answers 200" % url, True)
            run.tick(waiting or "%s not ready" % url)


class _TryAgain(Unavailable):
    """The API answered "try again later" (429, 5xx)."""


@dataclass
class LeaseBefore:
    """The Lease before the change: (renewTime, holderIdentity), or None when the API could not say."""

    lease: Optional[Tuple[float, str]]


class LeaseGate:
    """A leader-elected component must renew its Lease from this node (or, as a standby or while
    the API's view of the node is stale, answer on its own health endpoint)."""

    name = "lease"

    def applies(self, target: PodTarget) -> bool:
        return uses_lease(target)

    def before(self, target: PodTarget, run: GateRun) -> object:
        """The Lease before the change; its ``lease`` None when the API cannot say. An API that
        answers "try again" (429, 5xx) is asked up to three times: a None here makes the gate give
        up at once."""
        if run.stale:
            return LeaseBefore(None)
        for _attempt in range(3):
            try:
                return LeaseBefore(self.read(target, run))
            except _TryAgain:
                if run.clock.expired():
                    return LeaseBefore(None)
                time.sleep(min(run.poll, run.clock.left()))
            except Unavailable:
                return LeaseBefore(None)
        return LeaseBefore(None)

    @staticmethod
    def read(target: PodTarget, run: GateRun) -> Tuple[float, str]:
        """(renewTime as epoch seconds or 0, holderIdentity) of the target's Lease; (0, "") when it
        does not exist; ``Unavailable`` when the API cannot say."""
        try:
            lease = run.client().get_lease("kube-system", lease_name(target, run.host),
                                           timeout=min(API_CALL, run.clock.budget()))
        except ApiError as exc:
            if exc.status == 429 or exc.status >= 500:
                raise _TryAgain(exc.message) from None
            raise Unavailable(exc.message) from None
        except ApiFailure as exc:
            raise Unavailable(exc.message) from None
        try:
            spec = get_object(lease or {}, "spec", "lease")
            return parse_rfc3339(get_str(spec, "renewTime", "lease.spec")) or 0.0, get_str(
                spec, "holderIdentity", "lease.spec")
        except ShapeError as exc:
            raise Unavailable("API answered a malformed Lease: %s" % exc) from None

    def check(self, target: PodTarget, before: object, run: GateRun) -> GateResult:
        if run.stale:
            return HealthGate.require(target, run, ", lease not checked (the API's view of node %s is stale)"
                                      % target.node)
        name = lease_name(target, run.host)
        old = before.lease if isinstance(before, LeaseBefore) else None
        old_renew = old[0] if old is not None else 0.0
        # The instance that held the Lease before the change may renew it a few more times while it
        # shuts down; the controller-manager does not even release it (no ReleaseOnCancel), so its
        # identity stays the holder until the Lease expires. A renewal by that identity proves
        # nothing about the new instance (identities are <host>_<uuid>: new for every process).
        old_holder = old[1] if old is not None and holds(old[1], target, run.host) else ""
        read_before = before is None or old is not None
        blind = Blindness()
        while True:
            try:
                renew, holder = self.read(target, run)
            except Unavailable:
                # The API could not be read before the change either: do not wait for it now.
                if not read_before or run.clock.expired() or blind.seconds() >= min(run.clock.timeout, BLIND_GRACE):
                    return GateResult(", lease not checked (API unavailable)", True)
                run.pause("lease kube-system/%s: API unavailable" % name)
                continue
            blind.end()
            if old_holder and holder == old_holder:
                run.tick("lease kube-system/%s still held by the old instance %s (it expires after "
                         "its leaseDurationSeconds)" % (name, holder))
                continue
            if renew > old_renew and holder:
                if holds(holder, target, run.host):
                    return GateResult(", lease %s renewed by %s (this node)" % (name, holder), True)
                return self._standby(target, name, holder, run)
            run.tick("lease kube-system/%s not renewed yet" % name)

    @staticmethod
    def _standby(target: PodTarget, lease: str, holder: str, run: GateRun) -> GateResult:
        """Another master leads: a renewed Lease says nothing about *this* instance, so its own
        health endpoint must answer (a standby never renews the Lease)."""
        if health_url(target) is None:
            return GateResult(", lease %s held by %s on another node; this instance is a standby "
                              "(no health endpoint)" % (lease, holder), True)
        return HealthGate.require(target, run, ", standby (lease %s held by %s)" % (lease, holder),
                                  "standby %s: %s not ready" % (target.component, health_url(target)))


def holds(holder: str, target: PodTarget, host: Host) -> bool:
    """Whether ``holder`` (``<kernel host name>_<uuid>``) is an instance on this node: the
    host name may differ from the node name in case, or entirely (--hostname-override)."""
    prefix = holder.rsplit("_", 1)[0].lower() if "_" in holder else ""
    names = {target.node.lower(), str(host.info().get("hostname") or "").lower()}
    return bool(prefix) and prefix in names


def builtin_gates() -> List[Gate]:
    """The gates every verifying waiter runs, in order."""
    return [LeaseGate(), HealthGate()]

"""Verifying waiters: did the kubelet really stop or start the static pod?

Three probes look at a static pod from different sides, each through the ``Host`` so they run
on the master itself:

* ``api``    - the mirror pod ``<pod>-<node>`` in the API server (present, phase, Ready, uid,
  config.hash, container IDs);
* ``crictl`` - the runtime's sandbox and containers (works while the API server or etcd is
  the component being parked);
* ``health`` - the component's own health endpoint, taken from the manifest's probes.

Restoring identical content brings back the same config.hash, so "it came back" means a pod
that is Ready *and new*: a different mirror uid, different container IDs, or a later start.
After a start, components get a health gate: scheduler and controller-manager must renew
their Lease, the API server and etcd must answer /readyz.

A wait fails only as a wait. Every probe error - an API answering 403/429/5xx, HTML or garbage, a
reset, a server that hangs or drips - is "this probe could not look" for that one poll; the
waiter asks the next probe and keeps polling. Each probe call gets at most the time left (so a
wait ends within ``timeout`` plus a fraction of a second), and the verdict follows the last
observation: seen gone or new and Ready -> verified; seen still there -> the TIMEOUT error; seen
by nobody for BLIND_GRACE seconds or at the deadline -> "not verified: <why>", never "gone" nor
"still present" for a pod no probe could see. A probe that can never look in this run (crictl not
installed, no health endpoint, no usable kubeconfig) is not asked again.

HA and local mode: when the API's view of this node is stale (``Waiter.stale_api`` or
``PodTarget.stale_api``: this node's apiserver or etcd is parked, or its local-mode kubelet lost
its own apiserver), the mirror pods of this node are frozen while the other apiservers keep
serving them. The api probe is then not used for this node's pods (crictl, then health), the Lease
gate becomes the component's own health endpoint, and ``describe`` marks an API view as stale.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from cpctl import catalogue
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
from cpctl.probes.api import ApiProbe
from cpctl.probes.base import PodState, PodTarget, ProbeMissing, Unavailable, Waiter, WaitResult
from cpctl.probes.crictl import CrictlProbe
from cpctl.probes.health import HealthProbe, health_url
from cpctl.probes.kubeapi import ApiError, ApiFailure, KubeClient
from cpctl.probes.lease import lease_name, uses_lease
from cpctl.probes.shape import ShapeError, get_object, get_str
from cpctl.timeutil import parse_rfc3339

BLIND_GRACE = 10.0      # seconds of "no probe can look" after which a wait says "not verified"
BEFORE_BUDGET = 5.0     # seconds the snapshot before a change may take (a hanging API costs ~3 s)
DESCRIBE_BUDGET = 5.0   # seconds one ``describe`` may take
HINT_BUDGET = 1.0       # seconds the events of a timeout's hint may take
CLEANUP_BUDGET = 2.0    # seconds the canary's deletion may take
MIN_CALL = 0.2          # the least time one probe call gets, even at the very end of a wait
API_CALL = 3.0          # the most one API request of a gate (Lease, canary) may take
SLOW_CALL = 1.0         # a call that failed after its whole budget, and this long at least, hung
SLOW_PAUSE = 2.0        # a hanging probe is asked again only this often by a wait...
SLOW_RETRY = 1.0        # ...and then gets this long (an API that recovered answers in milliseconds)
SLOW_SKIP = 30.0        # ``describe`` (many pods in a row: status, watch) skips it this long
GIVE_UP_EVERY = 1.0     # seconds between two questions to a wait's ``give_up`` (each runs crictl)


class _TryAgain(Unavailable):
    """The API answered "try again later" (429, 5xx)."""


class _Clock:
    """One wait's deadline: what is elapsed and left, and how long the next call may take."""

    def __init__(self, timeout: float) -> None:
        self.start = time.monotonic()
        self.timeout = timeout
        self.deadline = self.start + timeout

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def budget(self) -> float:
        """The time one probe call may take: what is left, but at least MIN_CALL."""
        return max(MIN_CALL, self.left())


class _Blindness:
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


class VerifyingWaiter(Waiter):
    """Polls the probes (every ``poll`` seconds) until the pod is gone or new and Ready."""

    def __init__(self, host: Host, kubeconfig: str, crictl: str = "crictl", mode: str = "auto",
                 poll: float = 0.05, progress: Optional[Callable[[str], None]] = None, canary: bool = False,
                 stale_api: bool = False, **_: Any) -> None:
        self.name = mode
        self.canary = canary
        self.mode = mode
        self.poll = poll
        self.stale_api = stale_api
        self.progress = progress or (lambda text: None)
        self.api = ApiProbe(host, kubeconfig)
        self.crictl = CrictlProbe(host, crictl)
        self.health = HealthProbe(host)
        self._missing: Dict[Tuple[str, str], str] = {}   # (probe, pod) -> why it can never look
        self._errors: Dict[str, str] = {}                 # probe -> why its last call could not look
        self._slow: Dict[str, float] = {}                 # hanging probe -> when its last call hung

    # --- which probes, and one look through one of them --------------------------------------
    def is_stale(self, target: PodTarget) -> bool:
        """True when the API's view of the target's node must not be trusted (see the module doc)."""
        return self.stale_api or target.stale_api

    def probes_for(self, target: PodTarget) -> List[Any]:
        if self.is_stale(target):
            stale: Dict[str, List[Any]] = {"api": [], "crictl": [self.crictl], "health": [self.health]}
            return stale.get(self.mode, [self.crictl, self.health])
        by_name: Dict[str, List[Any]] = {"api": [self.api], "crictl": [self.crictl], "health": [self.health]}
        chosen = by_name.get(self.mode)
        if chosen:
            return chosen
        if catalogue.carries_api(target.component):
            return [self.crictl, self.health]
        return [self.api, self.crictl, self.health]

    def _look(self, probe: Any, target: PodTarget, clock: _Clock) -> Optional[PodState]:
        """One probe's view within the clock's budget, or None when it cannot look.

        A probe whose last call hung (failed after its whole budget, SLOW_CALL seconds or more) is
        asked again only every SLOW_PAUSE seconds and for SLOW_RETRY seconds, so that a hanging API
        server does not hold up the probes after it at every poll."""
        key = (probe.name, target.pod_name)
        if key in self._missing:
            return None
        budget = min(clock.budget(), probe.max_call)
        if probe.name in self._slow:
            if time.monotonic() < self._slow[probe.name] + SLOW_PAUSE:
                return None
            budget = min(budget, SLOW_RETRY)
        started = time.monotonic()
        try:
            state = probe.observe(target, timeout=budget)
        except ProbeMissing as exc:
            self._missing[key] = self._errors[probe.name] = str(exc)
            return None
        except Unavailable as exc:
            self._errors[probe.name] = str(exc)
            if probe.name in self._slow or time.monotonic() - started >= max(SLOW_CALL, 0.9 * budget):
                self._slow[probe.name] = time.monotonic()
            return None
        self._errors.pop(probe.name, None)
        self._slow.pop(probe.name, None)
        return state

    def _round(self, target: PodTarget, clock: _Clock, probes: Optional[List[Any]] = None
               ) -> Tuple[Any, Optional[PodState], List[Any]]:
        """(probe, state) of the first probe that can look, and the probes after it (not asked yet);
        (None, None, []) when none can."""
        chosen = self.probes_for(target) if probes is None else probes
        for n, probe in enumerate(chosen):
            state = self._look(probe, target, clock)
            if state is not None:
                return probe, state, chosen[n + 1:]
        return None, None, []

    def _never_looks(self, target: PodTarget) -> bool:
        """True when no probe for this target can look at all in this run."""
        return all((p.name, target.pod_name) in self._missing for p in self.probes_for(target))

    # --- the waiter interface -----------------------------------------------------------------
    def before(self, target: PodTarget) -> Any:
        clock = _Clock(BEFORE_BUDGET)
        probe, state, _ = self._round(target, clock)
        lease = self._lease_before(target, clock) if uses_lease(target) and not self.is_stale(target) else None
        return {"probe": probe.name if probe else None, "state": state, "lease": lease}

    def _lease_before(self, target: PodTarget, clock: _Clock) -> Optional[Tuple[float, str]]:
        """The Lease before the change; None when the API cannot say. An API that answers "try
        again" (429, 5xx) is asked up to three times: a None here makes the gate give up at once."""
        for _attempt in range(3):
            try:
                return self._lease(target, clock)
            except _TryAgain:
                if clock.expired():
                    return None
                time.sleep(min(self.poll, clock.left()))
            except Unavailable:
                return None
        return None

    def describe(self, target: PodTarget) -> Optional[dict]:
        """For status: the mirror pod when the API answers, else the runtime's view. When the API's
        view of this node is stale: the runtime's or the health endpoint's view, else the API's
        marked ``stale``. A probe that hung before is not asked again (a status lists many pods)."""
        clock = _Clock(DESCRIBE_BUDGET)
        if self.is_stale(target):
            probe, state, _ = self._round(target, clock, self._quick([self.crictl, self.health]))
            if state is None:
                probe, state, _ = self._round(target, clock, self._quick([self.api]))
                if state is not None:
                    state.stale = True
            return state.to_dict() if state is not None else None
        probe, state, _ = self._round(target, clock, self._quick([self.api, self.crictl]))
        if state is not None and probe is self.api and not state.present and catalogue.carries_api(target.component):
            # the API server's own stale mirror may be gone while the runtime still runs it
            state = self._look(self.crictl, target, clock) or state
        return state.to_dict() if state is not None else None

    def settle_view(self, target: PodTarget) -> Optional[dict]:
        """The pod as the waits see it: through the same probes in the same order. For the API
        server, etcd, or any pod while the node's API view is stale, that is crictl and the health
        endpoint - never a mirror pod the kubelet cannot have replaced yet (after the API server's
        own restart the API shows the old, frozen mirror pod until the kubelet's next sync)."""
        clock = _Clock(DESCRIBE_BUDGET)
        probe, state, _ = self._round(target, clock, self._quick(self.probes_for(target)))
        if state is None:
            return None
        return dict(state.to_dict(), source=probe.name)

    def mirror_note(self, target: PodTarget) -> str:
        """When the waits judged the pod without the API (API server, etcd, stale view): what the
        API's mirror pod shows now, as information - the kubelet replaces it at its next sync."""
        if self.api in self.probes_for(target) or self.mode != "auto":
            return ""
        try:
            state = self.api.observe(target, timeout=min(API_CALL, DESCRIBE_BUDGET))
        except Unavailable as exc:
            return "; info: the API cannot show its mirror pod yet (%s)" % exc
        later = "(the kubelet updates it at its next sync)"
        if not state.present or not state.ready:
            return "; info: its mirror pod is %s in the API yet %s" % (
                "not created" if not state.present else "not Ready", later)
        try:
            running = self.crictl.observe(target, timeout=min(API_CALL, DESCRIBE_BUDGET))
        except Unavailable:
            return ""
        shown = {c.split("://", 1)[-1] for c in state.containers}
        if running.containers and shown and not shown & set(running.containers):
            return "; info: its mirror pod in the API still shows the previous container %s" % later
        return ""

    def _quick(self, probes: List[Any]) -> List[Any]:
        """``probes`` without those that hung in the last SLOW_SKIP seconds."""
        now = time.monotonic()
        return [p for p in probes if now >= self._slow.get(p.name, -SLOW_SKIP) + SLOW_SKIP]

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        """Poll the first usable probe until the pod is gone, then confirm with the others."""
        def judge(clock: _Clock, probe: Any, state: PodState, rest: List[Any]) -> Union[WaitResult, str]:
            if state.present:
                return "pod %s still present (%s)" % (target.pod_name, probe.name)
            still = [p.name for p in rest if (self._look(p, target, clock) or PodState(False)).present]
            if still:
                return "pod %s gone for %s, still seen by %s" % (target.pod_name, probe.name, ",".join(still))
            return WaitResult(True, "pod %s gone (%s) after %.1fs%s" % (
                target.pod_name, probe.name, clock.elapsed(), self._blind_note(target, probe)), clock.elapsed())
        return self._poll(target, timeout, judge)

    def wait_started(self, target: PodTarget, before: Any, timeout: float,
                     give_up: Optional[Callable[[], Optional[str]]] = None) -> WaitResult:
        """Poll until a Ready pod that is not the one seen before the change, then the gate;
        ``give_up`` (asked every GIVE_UP_EVERY seconds) can end the wait at once with its reason."""
        earlier = before or {}
        gone_seen: set = set()
        asked = [time.monotonic()]

        def check_give_up() -> None:
            if give_up is None or time.monotonic() < asked[0] + GIVE_UP_EVERY:
                return
            asked[0] = time.monotonic()
            reason = give_up()
            if reason:
                raise CpctlError(reason, ExitCode.TIMEOUT, hint=self._hints(target))

        def judge(clock: _Clock, probe: Any, state: PodState, rest: List[Any]) -> Union[WaitResult, str]:
            if not state.present:
                # Seen gone after the restore: whatever this probe sees next is a new pod. The
                # health probe has no uid or container IDs, so this is its only proof of "new".
                gone_seen.add(probe.name)
            old = earlier.get("state") if earlier.get("probe") == probe.name and probe.name not in gone_seen else None
            if state.present and state.ready and state.is_new_since(old):
                gate, verified = self._gate(target, before, clock)
                return WaitResult(verified, "pod %s Running and Ready (%s)%s after %.1fs"
                                  % (target.pod_name, probe.name, gate, clock.elapsed()), clock.elapsed(),
                                  state.to_dict())
            what = "not yet created" if not state.present else ("not Ready" if not state.ready else "still the old pod")
            check_give_up()
            return "pod %s %s (%s)" % (target.pod_name, what, probe.name)
        return self._poll(target, timeout, judge)

    def wait_kept(self, target: PodTarget, before: object, seconds: float) -> Optional[WaitResult]:
        """See ``Waiter.wait_kept``: judged by the probe that saw the pod before, every poll."""
        earlier = before.get("state") if isinstance(before, dict) else None
        name = before.get("probe") if isinstance(before, dict) else None
        probe = next((p for p in self.probes_for(target) if p.name == name), None)
        if probe is None or not isinstance(earlier, PodState) or not (earlier.present and earlier.ready):
            return None
        clock = _Clock(seconds)
        seen = 0
        while not clock.expired():
            state = self._look(probe, target, clock)
            if state is not None:
                if not state.present or not state.ready or state.is_new_since(earlier):
                    return None
                seen += 1
            self._pause(clock, "pod %s still the running pod (%s): did the kubelet see the park?"
                        % (target.pod_name, probe.name))
        if not seen:
            return None
        return WaitResult(True, "pod %s kept running (%s): the kubelet never stopped it (it did not see the park); "
                                "the running pod is kept, unchanged for %.0fs" % (target.pod_name, probe.name, seconds),
                          clock.elapsed(), earlier.to_dict())

    def _poll(self, target: PodTarget, timeout: float,
              judge: Callable[[_Clock, Any, PodState, List[Any]], Union[WaitResult, str]]) -> WaitResult:
        """The polling loop of both waits. Each round the first usable probe looks; ``judge`` gets
        what it saw (and the probes after it) and returns the result, or what is still awaited (the
        progress line, and the TIMEOUT message once the deadline passed). A round in which no probe
        can look is the blindness rule's (``_blind_verdict``)."""
        clock, blind = _Clock(timeout), _Blindness()
        while True:
            probe, state, rest = self._round(target, clock)
            if probe is None or state is None:
                verdict = self._blind_verdict(target, clock, blind)
                if verdict is not None:
                    return verdict
                continue
            blind.end()
            outcome = judge(clock, probe, state, rest)
            if isinstance(outcome, WaitResult):
                return outcome
            self._tick(clock, target, outcome)

    # --- blindness, ticks, hints --------------------------------------------------------------
    def _blind_verdict(self, target: PodTarget, clock: _Clock, blind: _Blindness) -> Optional[WaitResult]:
        """No probe could look this round: "not verified" when none ever can, when the deadline
        passed or when it lasted BLIND_GRACE seconds; else None after a pause (poll again)."""
        if self._never_looks(target):
            return self._unverified(target, clock)
        if clock.expired() or blind.seconds() >= min(clock.timeout, BLIND_GRACE):
            return self._unverified(target, clock)
        self._pause(clock, "no probe can observe %s yet" % target.pod_name)
        return None

    def _unverified(self, target: PodTarget, clock: _Clock) -> WaitResult:
        reasons = []
        for probe in self.probes_for(target):
            why = self._missing.get((probe.name, target.pod_name)) or self._errors.get(probe.name)
            if why:
                reasons.append("%s: %s" % (probe.name, why))
        if self.is_stale(target) and not self.probes_for(target):
            reasons.append("the API's view of node %s is stale and --probe %s uses only the API"
                           % (target.node, self.mode))
        return WaitResult(False, "not verified: no probe could observe the pod (%s)" % "; ".join(reasons),
                          clock.elapsed())

    def _blind_note(self, target: PodTarget, seen_by: Any) -> str:
        """", api could not look" when a probe before the deciding one was blind (not missing)."""
        blind = [p.name for p in self.probes_for(target) if p is not seen_by and p.name in self._errors
                 and (p.name, target.pod_name) not in self._missing]
        return ", %s could not look" % ",".join(blind) if blind else ""

    def _tick(self, clock: _Clock, target: PodTarget, waiting_for: str) -> None:
        """The TIMEOUT error once the deadline passed, else a pause before the next poll."""
        if clock.expired():
            raise CpctlError("timed out after %.0fs: %s" % (clock.timeout, waiting_for), ExitCode.TIMEOUT,
                             hint=self._hints(target))
        self._pause(clock, waiting_for)

    def _pause(self, clock: _Clock, waiting_for: str) -> None:
        self.progress("%s, %.1fs of %gs" % (waiting_for, clock.elapsed(), clock.timeout))
        time.sleep(max(0.0, min(self.poll, clock.left())))

    def _hints(self, target: PodTarget) -> str:
        hints = ["journalctl -u kubelet -n 50", "crictl ps -a --name '^%s$'" % target.component]
        if not catalogue.carries_api(target.component) and not self.is_stale(target) and "api" not in self._errors:
            try:
                events = self.api.client.events_for(target.namespace, target.pod_name, limit=3, timeout=HINT_BUDGET)
            except Unavailable:
                events = []
            for event in events:
                reason, message = (self.api.client.clean(v if isinstance(v, str) else "")
                                   for v in (event.get("reason"), event.get("message")))
                hints.append("event %s: %s" % (reason, message[:120]))
        return "; ".join(hints)

    # --- health gates -------------------------------------------------------------------------
    def _gate(self, target: PodTarget, before: Any, clock: _Clock) -> Tuple[str, bool]:
        """(text, verified) of the component's health gate after its pod is Ready."""
        if uses_lease(target):
            text, verified = self._lease_gate(target, before, clock)
            if self.canary and target.component != catalogue.KUBE_CONTROLLER_MANAGER:
                more, canary_ok = self._canary_gate(target, clock)
                text, verified = text + more, verified and canary_ok
            return text, verified
        if catalogue.carries_api(target.component):
            return self._own_health_gate(target, clock, "")
        if catalogue.leader_elected(target.component):
            # --leader-elect=false: no Lease proves it works, its own endpoint (from the manifest) must
            return self._own_health_gate(target, clock, ", no leader election (--leader-elect=false)")
        return "", True

    def _lease(self, target: PodTarget, clock: _Clock) -> Tuple[float, str]:
        """(renewTime as epoch seconds or 0, holderIdentity) of the target's Lease; (0, "") when it
        does not exist; ``Unavailable`` when the API cannot say."""
        try:
            lease = self.api.client.get_lease("kube-system", lease_name(target, self.api.host),
                                              timeout=min(API_CALL, clock.budget()))
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

    def _lease_gate(self, target: PodTarget, before: Any, clock: _Clock) -> Tuple[str, bool]:
        if self.is_stale(target):
            return self._own_health_gate(target, clock, ", lease not checked (the API's view of node %s is stale)"
                                         % target.node)
        name = lease_name(target, self.api.host)
        old = (before or {}).get("lease")
        old_renew = old[0] if isinstance(old, tuple) else 0.0
        # The instance that held the Lease before the change may renew it a few more times while it
        # shuts down; the controller-manager does not even release it (no ReleaseOnCancel), so its
        # identity stays the holder until the Lease expires. A renewal by that identity proves
        # nothing about the new instance (identities are <host>_<uuid>: new for every process).
        old_holder = old[1] if isinstance(old, tuple) and self._holds(old[1], target) else ""
        read_before = before is None or isinstance(old, tuple)
        blind = _Blindness()
        while True:
            try:
                renew, holder = self._lease(target, clock)
            except Unavailable:
                # The API could not be read before the change either: do not wait for it now.
                if not read_before or clock.expired() or blind.seconds() >= min(clock.timeout, BLIND_GRACE):
                    return ", lease not checked (API unavailable)", True
                self._pause(clock, "lease kube-system/%s: API unavailable" % name)
                continue
            blind.end()
            if old_holder and holder == old_holder:
                self._tick(clock, target, "lease kube-system/%s still held by the old instance %s (it expires after "
                                          "its leaseDurationSeconds)" % (name, holder))
                continue
            if renew > old_renew and holder:
                if self._holds(holder, target):
                    return ", lease %s renewed by %s (this node)" % (name, holder), True
                return self._standby_gate(target, name, holder, clock)
            self._tick(clock, target, "lease kube-system/%s not renewed yet" % name)

    def _holds(self, holder: str, target: PodTarget) -> bool:
        """Whether ``holder`` (``<kernel host name>_<uuid>``) is an instance on this node: the
        host name may differ from the node name in case, or entirely (--hostname-override)."""
        prefix = holder.rsplit("_", 1)[0].lower() if "_" in holder else ""
        names = {target.node.lower(), str(self.api.host.info().get("hostname") or "").lower()}
        return bool(prefix) and prefix in names

    def _standby_gate(self, target: PodTarget, lease: str, holder: str, clock: _Clock) -> Tuple[str, bool]:
        """Another master leads: a renewed Lease says nothing about *this* instance, so its own
        health endpoint must answer (a standby never renews the Lease)."""
        if health_url(target) is None:
            return (", lease %s held by %s on another node; this instance is a standby (no health endpoint)"
                    % (lease, holder), True)
        return self._own_health_gate(target, clock, ", standby (lease %s held by %s)" % (lease, holder),
                                     "standby %s: %s not ready" % (target.component, health_url(target)))

    def _own_health_gate(self, target: PodTarget, clock: _Clock, prefix: str, waiting: str = "") -> Tuple[str, bool]:
        """The component's own endpoint must answer 200: TIMEOUT (saying ``waiting``) when it
        answers otherwise until the deadline, "not verified" when it could not be read then."""
        url = health_url(target)
        if url is None:
            return prefix + " (no health endpoint)", True
        while True:
            try:
                state = self.health.observe(target, timeout=clock.budget())
            except Unavailable as exc:
                if clock.expired():
                    return prefix + ", but not verified: %s could not be read (%s)" % (url, exc), False
                self._pause(clock, "%s could not be read" % url)
                continue
            if state.ready:
                return prefix + ", %s answers 200" % url, True
            self._tick(clock, target, waiting or "%s not ready" % url)

    def _canary_gate(self, target: PodTarget, clock: _Clock) -> Tuple[str, bool]:
        """--verify: a throw-away pod must get a node from this scheduler; always deleted.

        A cpctl-generated second scheduler serves the schedulerName equal to its pod name."""
        import secrets
        if self.is_stale(target):
            return ", canary not run (the API's view of node %s is stale)" % target.node, False
        name = "cpctl-canary-%s" % secrets.token_hex(4)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "cpctl"}},
               "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
                        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                        "schedulerName": catalogue.DEFAULT_SCHEDULER_NAME
                        if target.component == catalogue.KUBE_SCHEDULER else target.component}}
        try:
            client = self.api.client
            client.create_pod("default", pod, timeout=min(API_CALL, clock.budget()))
        except (Unavailable, ApiFailure) as exc:
            return ", canary not verified: pod default/%s not created (%s)" % (name, _why(exc)), False
        try:
            text, verified = self._canary_scheduled(client, name, target, clock)
        finally:
            cleanup = self._delete_canary(client, name)
        return text + cleanup, verified

    def _canary_scheduled(self, client: KubeClient, name: str, target: PodTarget, clock: _Clock) -> Tuple[str, bool]:
        while True:
            try:
                pod = client.get_pod("default", name, timeout=min(API_CALL, clock.budget()))
                node = get_str(get_object(pod or {}, "spec", "pod"), "nodeName", "pod.spec")
            except (ApiFailure, ShapeError) as exc:
                if clock.expired():
                    return ", canary not verified: pod default/%s could not be read (%s)" % (name, _why(exc)), False
                self._pause(clock, "canary pod default/%s could not be read" % name)
                continue
            if node:
                return ", canary pod %s scheduled to %s" % (name, node), True
            self._tick(clock, target, "canary pod default/%s not scheduled yet" % name)

    @staticmethod
    def _delete_canary(client: KubeClient, name: str) -> str:
        try:
            client.delete_pod("default", name, timeout=CLEANUP_BUDGET)
        except ApiFailure as exc:
            return " (canary pod default/%s NOT deleted: %s; delete it by hand)" % (name, exc.message)
        return ""


def _why(exc: Exception) -> str:
    return exc.message if isinstance(exc, CpctlError) else str(exc)

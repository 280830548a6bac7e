"""Verifying waiters: did the kubelet really stop or start the static pod?

The waiter is a composition: the probes of ``cpctl.probes.registry`` (built from the run's
``ProbeOptions``, asked in the registry's order), and the gates of ``cpctl.probes.gates`` run in
order once a started pod is Ready (plus any added with ``add_gate``, such as the canary of
``cpctl/ops/canary.py``). The built-in probes look at a static pod from different sides, each
through the ``Host`` so they run on the master itself:

* ``api``    - the mirror pod ``<pod>-<node>`` in the API server (present, phase, Ready, uid,
  config.hash, container IDs);
* ``crictl`` - the runtime's sandbox and containers (works while the API server or etcd is
  the component being parked);
* ``health`` - the component's own health endpoint, taken from the manifest's probes.

``--probe NAME`` asks only that probe; ``auto`` asks all of them in order, leaving out those that
look through the API (``Probe.via_api``) for the pods that carry the API (the API server, etcd).

Restoring identical content brings back the same config.hash, so "it came back" means a pod
that is Ready *and new*: a different mirror uid, different container IDs, or a later start.
After a start, components get their gates: scheduler and controller-manager must renew
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
serving them. Probes that look through the API are then not used for this node's pods (crictl,
then health), the Lease gate becomes the component's own health endpoint, and ``describe`` marks
an API view as stale.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from cpctl import catalogue
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host, HttpRequest
from cpctl.probes import registry
from cpctl.probes.base import (
    API_TIMEOUT,
    Clock,
    PodState,
    PodTarget,
    Probe,
    ProbeMissing,
    ProbeOptions,
    Unavailable,
    Waiter,
    WaitResult,
)

if TYPE_CHECKING:   # the gates load with a wait's first gate, not with a view (status, describe)
    from cpctl.probes.gates import Blindness, Gate, GateRun

BEFORE_BUDGET = 5.0     # seconds the snapshot before a change may take (a hanging API costs ~3 s)
DESCRIBE_BUDGET = 5.0   # seconds one ``describe`` may take
HINT_BUDGET = 1.0       # seconds the events of a timeout's hint may take
SLOW_CALL = 1.0         # a call that failed after its whole budget, and this long at least, hung
SLOW_PAUSE = 2.0        # a hanging probe is asked again only this often by a wait...
SLOW_RETRY = 1.0        # ...and then gets this long (an API that recovered answers in milliseconds)
SLOW_SKIP = 30.0        # ``describe`` (many pods in a row: status, watch) skips it this long
GIVE_UP_EVERY = 1.0     # seconds between two questions to a wait's ``give_up`` (each runs crictl)


class VerifyingWaiter(Waiter):
    """Polls the probes (every ``poll`` seconds) until the pod is gone or new and Ready, then runs
    the gates. ``probes``: every registered probe (``registry.build_probes``) unless given;
    ``gates``: the built-in ones unless given (``add_gate`` appends more)."""

    def __init__(self, host: Host, kubeconfig: str, crictl: str = "crictl", mode: str = "auto",
                 poll: float = 0.05, progress: Optional[Callable[[str], None]] = None,
                 stale_api: bool = False, probes: Optional[List[Probe]] = None,
                 gates: Optional[List[Gate]] = None) -> None:
        self.name = mode
        self.mode = mode
        self.poll = poll
        self.stale_api = stale_api
        self.progress = progress or (lambda text: None)
        self.options = ProbeOptions(host, kubeconfig, crictl)
        self.probes: List[Probe] = registry.build_probes(self.options) if probes is None else list(probes)
        self._gates: Optional[List[Gate]] = None if gates is None else list(gates)
        self._later: List[Callable[[], Gate]] = []        # gates made with the others (add_gate_later)
        self._missing: Dict[Tuple[str, str], str] = {}   # (probe, pod) -> why it can never look
        self._errors: Dict[str, str] = {}                 # probe -> why its last call could not look
        self._slow: Dict[str, float] = {}                 # hanging probe -> when its last call hung

    # --- which probes, and one look through one of them --------------------------------------
    def is_stale(self, target: PodTarget) -> bool:
        """True when the API's view of the target's node must not be trusted (see the module doc)."""
        return self.stale_api or target.stale_api

    def probe(self, name: str) -> Optional[Probe]:
        return next((p for p in self.probes if p.name == name), None)

    @property
    def gates(self) -> List[Gate]:
        """The gates, in order: the given ones, else the built-in ones, made (and their module
        imported) when a wait first needs them: a view (``status``, ``describe``) never does."""
        if self._gates is None:
            from cpctl.probes.gates import builtin_gates
            self._gates = builtin_gates() + [make() for make in self._later]
        return self._gates

    def add_gate(self, gate: Gate) -> None:
        """Run ``gate`` after the others once a started pod is Ready (the canary of --verify)."""
        self.gates.append(gate)

    def add_gate_later(self, make: Callable[[], Gate]) -> None:
        """Run the gate ``make`` returns after the others, made only when a wait first needs the gates
        (a view never loads it: the etcd identity gate of every waiter)."""
        if self._gates is None:
            self._later.append(make)
        else:
            self._gates.append(make())

    def probes_for(self, target: PodTarget) -> List[Probe]:
        """The probes a wait asks about ``target``, in order: the one ``--probe`` named, or all in
        ``auto`` mode; never one that looks through the API while the node's API view is stale,
        nor in ``auto`` mode for a pod that carries the API itself."""
        chosen = [p for p in self.probes if self.mode in ("auto", p.name)]
        if self.is_stale(target) or (self.mode == "auto" and catalogue.carries_api(target.component)):
            return [p for p in chosen if not p.via_api]
        return chosen

    def _via_api(self, via_api: bool, identifies: bool = False) -> List[Probe]:
        """The probes that do (or do not) look through the API; only those that tell one
        instance from the next when ``identifies``."""
        return [p for p in self.probes if p.via_api == via_api and (p.identifies or not identifies)]

    def _look(self, probe: Probe, target: PodTarget, clock: Clock) -> Optional[PodState]:
        """One probe's view within the clock's budget, or None when it cannot look.

        A probe whose last call hung (failed after its whole budget, SLOW_CALL seconds or more) is
        asked again only every SLOW_PAUSE seconds and for SLOW_RETRY seconds, so that a hanging API
        server does not hold up the probes after it at every poll."""
        key = (probe.name, target.mirror_name)
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

    def _round(self, target: PodTarget, clock: Clock, probes: Optional[List[Probe]] = None
               ) -> Tuple[Optional[Probe], Optional[PodState], List[Probe]]:
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
        return all((p.name, target.mirror_name) in self._missing for p in self.probes_for(target))

    # --- the waiter interface -----------------------------------------------------------------
    def before(self, target: PodTarget) -> Any:
        clock = Clock(BEFORE_BUDGET)
        probe, state, _ = self._round(target, clock)
        run = self._gate_run(target, clock)
        gates = {g.name: g.before(target, run) for g in self.gates if g.applies(target)}
        return {"probe": probe.name if probe else None, "state": state, "gates": gates}

    def describe(self, target: PodTarget) -> Optional[dict]:
        """For status: the mirror pod when the API answers, else the runtime's view. When the API's
        view of this node is stale: the runtime's or the health endpoint's view, else the API's
        marked ``stale``. A probe that hung before is not asked again (a status lists many pods)."""
        clock = Clock(DESCRIBE_BUDGET)
        if self.is_stale(target):
            probe, state, _ = self._round(target, clock, self._quick(self._via_api(False)))
            if state is None:
                probe, state, _ = self._round(target, clock, self._quick(self._via_api(True)))
                if state is not None:
                    state.stale = True
            return state.to_dict() if state is not None else None
        probe, state, _ = self._round(target, clock, self._quick([p for p in self.probes if p.identifies]))
        if state is not None and probe is not None and probe.via_api and not state.present \
                and catalogue.carries_api(target.component):
            # the API server's own stale mirror may be gone while the runtime still runs it
            _, seen, _ = self._round(target, clock, self._via_api(False, identifies=True))
            state = seen or state
        return state.to_dict() if state is not None else None

    def prepare_describe(self, targets: Sequence[PodTarget]) -> None:
        """The first probe ``describe`` asks about fresh targets, if it can look at several at
        once (the api probe's ``prefetch``), looks at them now."""
        fresh, prefetch = self._prefetcher(targets, "prefetch")
        if prefetch is not None:
            prefetch(fresh)

    def describe_ahead(self, targets: Sequence[PodTarget]) -> List[HttpRequest]:
        """The HTTP requests ``prepare_describe(targets)`` makes (the api probe's list), for
        ``Host.http_ahead``; none when its probe asks nothing ahead."""
        fresh, requests = self._prefetcher(targets, "prefetch_requests")
        return list(requests(fresh)) if requests is not None else []

    def _prefetcher(self, targets: Sequence[PodTarget], method: str) -> Tuple[List[PodTarget], Any]:
        """The fresh targets and ``method`` of the first probe ``describe`` asks, when it has one."""
        fresh = [t for t in targets if not self.is_stale(t)]
        chosen = self._quick([p for p in self.probes if p.identifies])
        return fresh, getattr(chosen[0], method, None) if fresh and chosen else None

    def settle_view(self, target: PodTarget) -> Optional[dict]:
        """The pod as the waits see it: through the same probes in the same order. For the API
        server, etcd, or any pod while the node's API view is stale, that is crictl and the health
        endpoint - never a mirror pod the kubelet cannot have replaced yet (after the API server's
        own restart the API shows the old, frozen mirror pod until the kubelet's next sync)."""
        clock = Clock(DESCRIBE_BUDGET)
        probe, state, _ = self._round(target, clock, self._quick(self.probes_for(target)))
        if probe is None or state is None:
            return None
        return dict(state.to_dict(), source=probe.name)

    def mirror_note(self, target: PodTarget) -> str:
        """When the waits judged the pod without the API (API server, etcd, stale view): what the
        API's mirror pod shows now, as information - the kubelet replaces it at its next sync."""
        mirrors, runtimes = self._via_api(True, identifies=True), self._via_api(False, identifies=True)
        if self.mode != "auto" or not mirrors or any(p in self.probes_for(target) for p in mirrors):
            return ""
        try:
            state = mirrors[0].observe(target, timeout=min(API_TIMEOUT, DESCRIBE_BUDGET))
        except Unavailable as exc:
            return "; info: the API cannot show its mirror pod yet (%s)" % exc
        later = "(the kubelet updates it at its next sync)"
        if not state.present or not state.ready:
            return "; info: its mirror pod is %s in the API yet %s" % (
                "not created" if not state.present else "not Ready", later)
        if not runtimes:
            return ""
        try:
            running = runtimes[0].observe(target, timeout=min(API_TIMEOUT, DESCRIBE_BUDGET))
        except Unavailable:
            return ""
        shown = {c.split("://", 1)[-1] for c in state.containers}
        if running.containers and shown and not shown & set(running.containers):
            return "; info: its mirror pod in the API still shows the previous container %s" % later
        return ""

    def _quick(self, probes: List[Probe]) -> List[Probe]:
        """``probes`` without those that hung in the last SLOW_SKIP seconds."""
        now = time.monotonic()
        return [p for p in probes if now >= self._slow.get(p.name, -SLOW_SKIP) + SLOW_SKIP]

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        """Poll the first usable probe until the pod is gone, then confirm with the others."""
        def judge(clock: Clock, probe: Probe, state: PodState, rest: List[Probe]) -> Union[WaitResult, str]:
            if state.present:
                return "pod %s still present (%s)" % (target.mirror_name, probe.name)
            still = [p.name for p in rest if (self._look(p, target, clock) or PodState(False)).present]
            if still:
                return "pod %s gone for %s, still seen by %s" % (target.mirror_name, probe.name, ",".join(still))
            return WaitResult(True, "pod %s gone (%s) after %.1fs%s" % (
                target.mirror_name, probe.name, clock.elapsed(), self._blind_note(target, probe)), clock.elapsed())
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

        def judge(clock: Clock, probe: Probe, state: PodState, rest: List[Probe]) -> Union[WaitResult, str]:
            if not state.present:
                # Seen gone after the restore: whatever this probe sees next is a new pod. The
                # health probe has no uid or container IDs, so this is its only proof of "new".
                gone_seen.add(probe.name)
            old = earlier.get("state") if earlier.get("probe") == probe.name and probe.name not in gone_seen else None
            if state.present and state.ready and state.is_new_since(old):
                gate, verified = self._gate(target, before, clock, check_give_up)
                return WaitResult(verified, "pod %s Running and Ready (%s)%s after %.1fs"
                                  % (target.mirror_name, probe.name, gate, clock.elapsed()), clock.elapsed(),
                                  state.to_dict())
            what = "not yet created" if not state.present else ("not Ready" if not state.ready else "still the old pod")
            check_give_up()
            return "pod %s %s (%s)" % (target.mirror_name, what, probe.name)
        return self._poll(target, timeout, judge)

    def wait_kept(self, target: PodTarget, before: object, seconds: float) -> Optional[WaitResult]:
        """See ``Waiter.wait_kept``: judged by the probe that saw the pod before, every poll."""
        earlier = before.get("state") if isinstance(before, dict) else None
        name = before.get("probe") if isinstance(before, dict) else None
        probe = next((p for p in self.probes_for(target) if p.name == name), None)
        if probe is None or not isinstance(earlier, PodState) or not (earlier.present and earlier.ready):
            return None
        clock = Clock(seconds)
        seen = 0
        while not clock.expired():
            state = self._look(probe, target, clock)
            if state is not None:
                if not state.present or not state.ready or state.is_new_since(earlier):
                    return None
                seen += 1
            self._pause(clock, "pod %s still the running pod (%s): did the kubelet see the park?"
                        % (target.mirror_name, probe.name))
        if not seen:
            return None
        return WaitResult(True, "pod %s kept running (%s): the kubelet never stopped it (it did not see the park); "
                                "the running pod is kept, unchanged for %.0fs"
                          % (target.mirror_name, probe.name, seconds),
                          clock.elapsed(), earlier.to_dict())

    def _poll(self, target: PodTarget, timeout: float,
              judge: Callable[[Clock, Probe, PodState, List[Probe]], Union[WaitResult, str]]) -> WaitResult:
        """The polling loop of both waits. Each round the first usable probe looks; ``judge`` gets
        what it saw (and the probes after it) and returns the result, or what is still awaited (the
        progress line, and the TIMEOUT message once the deadline passed). A round in which no probe
        can look is the blindness rule's (``_blind_verdict``)."""
        from cpctl.probes.gates import Blindness
        clock, blind = Clock(timeout), Blindness()
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
    def _blind_verdict(self, target: PodTarget, clock: Clock, blind: Blindness) -> Optional[WaitResult]:
        """No probe could look this round: "not verified" when none ever can, when the deadline
        passed or when it lasted BLIND_GRACE seconds; else None after a pause (poll again)."""
        if self._never_looks(target):
            return self._unverified(target, clock)
        from cpctl.probes.gates import BLIND_GRACE
        if clock.expired() or blind.seconds() >= min(clock.timeout, BLIND_GRACE):
            return self._unverified(target, clock)
        self._pause(clock, "no probe can observe %s yet" % target.mirror_name)
        return None

    def _unverified(self, target: PodTarget, clock: Clock) -> WaitResult:
        return WaitResult(False, "not verified: no probe could observe the pod (%s)" % self.blind_reason(target),
                          clock.elapsed())

    def blind_reason(self, target: PodTarget) -> str:
        """Why no probe could look at ``target`` (each probe's last error; the stale API view), for an
        unverified wait and for ``check``'s "unknown" finding."""
        reasons = []
        for probe in self.probes_for(target):
            why = self._missing.get((probe.name, target.mirror_name)) or self._errors.get(probe.name)
            if why:
                reasons.append("%s: %s" % (probe.name, why))
        if self.is_stale(target) and not self.probes_for(target):
            reasons.append("the API's view of node %s is stale and --probe %s uses only the API"
                           % (target.node, self.mode))
        return "; ".join(reasons)

    def _blind_note(self, target: PodTarget, seen_by: Probe) -> str:
        """", api could not look" when a probe before the deciding one was blind (not missing)."""
        blind = [p.name for p in self.probes_for(target) if p is not seen_by and p.name in self._errors
                 and (p.name, target.mirror_name) not in self._missing]
        return ", %s could not look" % ",".join(blind) if blind else ""

    def _tick(self, clock: Clock, target: PodTarget, waiting_for: str) -> None:
        """The TIMEOUT error once the deadline passed, else a pause before the next poll."""
        if clock.expired():
            raise CpctlError("timed out after %.0fs: %s" % (clock.timeout, waiting_for), ExitCode.TIMEOUT,
                             hint=self._hints(target))
        self._pause(clock, waiting_for)

    def _pause(self, clock: Clock, waiting_for: str) -> None:
        """One poll's pause. Time passes: what a snapshot of the node's files said before it is no
        longer what the next round must read (``Host.forget``)."""
        self.progress("%s, %.1fs of %gs" % (waiting_for, clock.elapsed(), clock.timeout))
        self.options.host.forget()
        time.sleep(max(0.0, min(self.poll, clock.left())))

    def _hints(self, target: PodTarget) -> str:
        hints = ["journalctl -u kubelet -n 50", "crictl ps -a --name '^%s$'" % target.component]
        api_blind = any(p.via_api and p.name in self._errors for p in self.probes)
        if not catalogue.carries_api(target.component) and not self.is_stale(target) and not api_blind:
            try:
                client = self.options.client()
                events = client.events_for(target.namespace, target.mirror_name, limit=3, timeout=HINT_BUDGET)
            except Unavailable:
                events = []
            for event in events:
                reason, message = (client.clean(v if isinstance(v, str) else "")
                                   for v in (event.get("reason"), event.get("message")))
                hints.append("event %s: %s" % (reason, message[:120]))
        return "; ".join(hints)

    # --- gates --------------------------------------------------------------------------------
    def _gate_run(self, target: PodTarget, clock: Clock, check: Callable[[], None] = lambda: None) -> GateRun:
        """What the gates get for one target and clock: this waiter's pauses and TIMEOUT; each
        TIMEOUT tick first runs ``check`` (the wait's fail-fast question)."""
        from cpctl.probes.gates import GateRun

        def tick(text: str) -> None:
            check()
            self._tick(clock, target, text)
        return GateRun(clock, self.is_stale(target), self.options, lambda text: self._pause(clock, text), tick,
                       self.poll)

    def _gate(self, target: PodTarget, before: Any, clock: Clock,
              check: Callable[[], None] = lambda: None) -> Tuple[str, bool]:
        """(text, verified) of the gates that apply to the target, run in order after its pod is
        Ready; each gets its own snapshot from ``before`` (None when no snapshot was taken).
        ``check`` runs at each of their ticks: a new API server or etcd that the runtime shows
        crash-looping while its gate waits for /readyz is a verdict at once (issue 32), not after
        the whole startup budget."""
        from cpctl.probes.gates import GateResult
        run = self._gate_run(target, clock, check)
        taken = before.get("gates") if isinstance(before, dict) else None
        result = GateResult("", True)
        for gate in self.gates:
            if gate.applies(target):
                one = gate.check(target, taken.get(gate.name) if isinstance(taken, dict) else None, run)
                result = GateResult(result.text + one.text, result.verified and one.verified)
        return result.text, result.verified

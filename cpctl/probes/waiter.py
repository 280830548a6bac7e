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
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
from cpctl.probes.api import ApiProbe
from cpctl.probes.base import API_LESS, PodState, PodTarget, Unavailable, Waiter, WaitResult
from cpctl.probes.crictl import CrictlProbe
from cpctl.probes.health import HealthProbe, health_url
from cpctl.probes.lease import lease_name, uses_lease
from cpctl.timeutil import parse_rfc3339

BLIND_GRACE = 10.0   # seconds to keep polling when every probe that worked before the change is blind



class VerifyingWaiter(Waiter):
    """Polls the probes (every ``poll`` seconds) until the pod is gone or new and Ready."""

    def __init__(self, host: Host, kubeconfig: str, crictl: str = "crictl", mode: str = "auto",
                 poll: float = 0.05, progress: Optional[Callable[[str], None]] = None, canary: bool = False,
                 **_: Any) -> None:
        self.name = mode
        self.canary = canary
        self.mode = mode
        self.poll = poll
        self.progress = progress or (lambda text: None)
        self.api = ApiProbe(host, kubeconfig)
        self.crictl = CrictlProbe(host, crictl)
        self.health = HealthProbe(host)
        self._dead: dict = {}
        self._last_error = ""

    def probes_for(self, target: PodTarget) -> List[Any]:
        by_name: Dict[str, List[Any]] = {"api": [self.api], "crictl": [self.crictl], "health": [self.health]}
        chosen = by_name.get(self.mode)
        if chosen:
            return chosen
        if target.component in API_LESS:
            return [self.crictl, self.health]
        return [self.api, self.crictl, self.health]

    def _observe(self, probe: Any, target: PodTarget) -> Optional[PodState]:
        """One probe's view, or None when it cannot look (a missing crictl is remembered)."""
        if probe.name in self._dead:
            return None
        try:
            return probe.observe(target)
        except Unavailable as exc:
            if probe is self.crictl:
                self._dead[probe.name] = str(exc)   # a missing crictl will not appear mid-run
            self._last_error = "%s: %s" % (probe.name, exc)
            return None

    def _first(self, target: PodTarget, probes: Optional[list] = None) -> tuple:
        """(probe, state) of the first probe that can look; (None, None) when none can."""
        for probe in probes or self.probes_for(target):
            state = self._observe(probe, target)
            if state is not None:
                return probe, state
        return None, None

    def before(self, target: PodTarget) -> Any:
        probe, state = self._first(target)
        lease = self._lease(target) if uses_lease(target) else None
        return {"probe": probe.name if probe else None, "state": state, "lease": lease}

    def describe(self, target: PodTarget) -> Optional[dict]:
        """For status: the mirror pod when the API answers, else the runtime's view."""
        probe, state = self._first(target, [self.api, self.crictl])
        if probe is self.api and not state.present and target.component in API_LESS:
            # the API server's own stale mirror may be gone while the runtime still runs it
            state = self._observe(self.crictl, target) or state
        return state.to_dict() if state is not None else None

    def _blind(self, start: float, timeout: float, target: PodTarget, before: Any, starting: bool = False) -> bool:
        """No probe can look right now. Keep polling for a while when one could look before the
        change, or when the API itself is what is being started (it answers a moment after its
        own restore); otherwise give up at once and say "not verified"."""
        could_see = bool((before or {}).get("probe")) or (starting and target.component in API_LESS)
        if could_see and time.monotonic() - start < min(timeout, BLIND_GRACE):
            self._tick(start, timeout, target, "no probe can observe %s yet" % target.pod_name)
            return True
        return False

    def _unverified(self) -> WaitResult:
        reasons = "; ".join("%s: %s" % kv for kv in self._dead.items()) or self._last_error
        return WaitResult(False, "not verified: no probe could observe the pod (%s)" % reasons)

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        """Poll the first usable probe until the pod is gone, then confirm with the others."""
        start = time.monotonic()
        while True:
            probe, state = self._first(target)
            if probe is None:
                if self._blind(start, timeout, target, before):
                    continue
                return self._unverified()
            if not state.present:
                others = [p for p in self.probes_for(target) if p is not probe]
                still = [p.name for p in others if (self._observe(p, target) or PodState(False)).present]
                if not still:
                    elapsed = time.monotonic() - start
                    return WaitResult(True, "pod %s gone (%s) after %.1fs" % (target.pod_name, probe.name, elapsed),
                                      elapsed)
                waiting = "pod %s gone for %s, still seen by %s" % (target.pod_name, probe.name, ",".join(still))
            else:
                waiting = "pod %s still present (%s)" % (target.pod_name, probe.name)
            self._tick(start, timeout, target, waiting)

    def wait_started(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        """Poll until a Ready pod that is not the one seen before the change, then the gate."""
        start = time.monotonic()
        earlier = before or {}
        gone_seen: set = set()
        while True:
            probe, state = self._first(target)
            if probe is None:
                if self._blind(start, timeout, target, before, starting=True):
                    continue
                return self._unverified()
            if not state.present:
                # Seen gone after the restore: whatever this probe sees next is a new pod. The
                # health probe has no uid or container IDs, so this is its only proof of "new".
                gone_seen.add(probe.name)
            old = earlier.get("state") if earlier.get("probe") == probe.name and probe.name not in gone_seen else None
            if state.present and state.ready and state.is_new_since(old):
                gate = self._gate(target, before, start, timeout)
                elapsed = time.monotonic() - start
                return WaitResult(True, "pod %s Running and Ready (%s)%s after %.1fs"
                                  % (target.pod_name, probe.name, gate, elapsed), elapsed, state.to_dict())
            what = "not yet created" if not state.present else ("not Ready" if not state.ready else "still the old pod")
            self._tick(start, timeout, target, "pod %s %s (%s)" % (target.pod_name, what, probe.name))

    def _tick(self, start: float, timeout: float, target: PodTarget, waiting_for: str) -> None:
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            raise CpctlError("timed out after %.0fs: %s" % (timeout, waiting_for), ExitCode.TIMEOUT,
                             hint=self._hints(target))
        self.progress("%s, %.1fs" % (waiting_for, elapsed))
        time.sleep(self.poll)

    def _hints(self, target: PodTarget) -> str:
        hints = ["journalctl -u kubelet -n 50", "crictl ps -a --name '^%s$'" % target.component]
        if target.component not in API_LESS:
            try:
                events = self.api.client.events_for(target.namespace, target.pod_name, limit=3)
            except Unavailable:
                events = []
            for event in events:
                hints.append("event %s: %s" % (event.get("reason"), (event.get("message") or "")[:120]))
        return "; ".join(hints)

    # --- health gates -------------------------------------------------------------------------
    def _gate(self, target: PodTarget, before: Any, start: float, timeout: float) -> str:
        if uses_lease(target):
            gate = self._lease_gate(target, (before or {}).get("lease"), start, timeout)
            if self.canary and target.component != "kube-controller-manager":
                gate += self._canary_gate(target, start, timeout)
            return gate
        if target.component in API_LESS:
            return self._readyz_gate(target, start, timeout)
        return ""

    def _lease(self, target: PodTarget) -> Optional[dict]:
        try:
            lease = self.api.client.get_lease("kube-system", lease_name(target, self.api.host))
        except (Unavailable, CpctlError):
            return None
        return (lease or {}).get("spec") or {}

    def _lease_gate(self, target: PodTarget, old: Optional[dict], start: float, timeout: float) -> str:
        name = lease_name(target, self.api.host)
        old_renew = parse_rfc3339((old or {}).get("renewTime")) or 0.0
        while True:
            spec = self._lease(target)
            if spec is None:
                return ", lease not checked (API unavailable)"
            renew = parse_rfc3339(spec.get("renewTime")) or 0.0
            holder = spec.get("holderIdentity") or ""
            if renew > old_renew and holder:
                if holder.startswith(target.node.lower() + "_") or holder.startswith(target.node + "_"):
                    return ", lease %s renewed by %s (this node)" % (name, holder)
                return self._standby_gate(target, name, holder, start, timeout)
            self._tick(start, timeout, target, "lease kube-system/%s not renewed yet" % name)

    def _standby_gate(self, target: PodTarget, lease: str, holder: str, start: float, timeout: float) -> str:
        """Another master leads: a renewed Lease says nothing about *this* instance, so its own
        health endpoint must answer (a standby never renews the Lease)."""
        if health_url(target) is None:
            return ", lease %s held by %s on another node; this instance is a standby (no health endpoint)" % (
                lease, holder)
        while True:
            if self.health.observe(target).ready:
                return ", standby (lease %s held by %s), %s answers 200" % (lease, holder, health_url(target))
            self._tick(start, timeout, target, "standby %s: %s not ready" % (target.component, health_url(target)))

    def _canary_gate(self, target: PodTarget, start: float, timeout: float) -> str:
        """--verify: a throw-away pod must get a node from this scheduler; always deleted.

        A cpctl-generated second scheduler serves the schedulerName equal to its pod name."""
        import secrets
        client = self.api.client
        name = "cpctl-canary-%s" % secrets.token_hex(4)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "cpctl"}},
               "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
                        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                        "schedulerName": "default-scheduler" if target.component == "kube-scheduler"
                        else target.component}}
        client.create_pod("default", pod)
        try:
            while True:
                node = ((client.get_pod("default", name) or {}).get("spec") or {}).get("nodeName")
                if node:
                    return ", canary pod %s scheduled to %s" % (name, node)
                self._tick(start, timeout, target, "canary pod default/%s not scheduled yet" % name)
        finally:
            client.delete_pod("default", name)

    def _readyz_gate(self, target: PodTarget, start: float, timeout: float) -> str:
        url = health_url(target)
        while True:
            state = self.health.observe(target)
            if state.ready:
                return ", %s answers 200" % url
            self._tick(start, timeout, target, "%s not ready" % url)

"""How cpctl learns that the kubelet really stopped or started a static pod: the shared types.

A ``Probe`` looks at one static pod from one side (the mirror pod in the API, the runtime through
crictl, the component's health endpoint) and returns a ``PodState``, or raises ``Unavailable``
when it cannot look right now. The core calls a ``Waiter`` after every change: ``NoWait`` trusts
the file move alone (``--no-wait`` / ``--probe none``); ``cpctl.probes.waiter.VerifyingWaiter``
polls the probes. ``cpctl.probes.registry`` builds them by name, so the core never imports them.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Protocol

API_LESS = ("kube-apiserver", "etcd")   # the API cannot watch these go away and come back


class PodTarget:
    """The static pod a manifest defines on a node, as the kubelet names it."""

    def __init__(self, component: str, namespace: str, node: str, pod: Optional[dict] = None,
                 file: str = "") -> None:
        self.component = component          # metadata.name in the manifest
        self.namespace = namespace
        self.node = node
        self.pod = pod or {}
        self.file = file

    @property
    def pod_name(self) -> str:
        """``<metadata.name>-<lowercase node name>``: the kubelet's static pod name."""
        return "%s-%s" % (self.component, self.node.lower())


class WaitResult:
    """What a wait established; ``verified`` is False when nothing was actually observed."""

    def __init__(self, verified: bool, detail: str, elapsed: float = 0.0, state: Any = None) -> None:
        self.verified = verified
        self.detail = detail
        self.elapsed = elapsed
        self.state = state

    def to_dict(self) -> dict:
        return {"verified": self.verified, "detail": self.detail, "elapsed": round(self.elapsed, 3)}


class Waiter:
    """Observe a target before a change, then wait for the kubelet to act on it."""

    name = "none"

    def before(self, target: PodTarget) -> Any:
        """A snapshot taken before the file moves, so "came back" can mean "is new"."""
        return None

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        raise NotImplementedError

    def wait_started(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        raise NotImplementedError

    def describe(self, target: PodTarget) -> Optional[dict]:
        """The pod's current state for ``status`` (None: this waiter cannot tell)."""
        return None


class NoWait(Waiter):
    """Trust the file move: used with ``--no-wait`` and ``--probe none``."""

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        return WaitResult(False, "not verified (no probe)")

    def wait_started(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        return WaitResult(False, "not verified (no probe)")


class Unavailable(Exception):
    """The probe cannot look right now (API down, crictl missing, no endpoint)."""


class PodState:
    """One observation of a static pod."""

    def __init__(self, present: bool, ready: bool = False, phase: str = "", uid: str = "",
                 containers: tuple = (), started: Optional[float] = None, created: Optional[float] = None,
                 source: str = "") -> None:
        self.present = present
        self.ready = ready
        self.phase = phase
        self.uid = uid
        self.containers = containers
        self.started = started
        self.created = created
        self.source = source

    def is_new_since(self, before: Optional["PodState"]) -> bool:
        """True when this pod cannot be the one observed in ``before``."""
        if before is None or not before.present:
            return True
        if self.uid and before.uid and self.uid != before.uid:
            return True
        if self.containers and before.containers and not set(self.containers) & set(before.containers):
            return True
        return bool(self.started and before.started and self.started > before.started)

    def to_dict(self) -> dict:
        age = time.time() - self.created if self.created else None
        return {"present": self.present, "ready": self.ready, "phase": self.phase, "uid": self.uid,
                "age": age, "source": self.source}


class Probe(Protocol):
    """One way of looking at a static pod; ``name`` is its ``--probe`` name."""

    name: str

    def observe(self, target: PodTarget) -> PodState:
        """The pod as this probe sees it now; ``Unavailable`` when it cannot look."""

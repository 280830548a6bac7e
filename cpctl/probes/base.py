"""How cpctl learns that the kubelet really stopped or started a static pod.

The core calls a ``Waiter`` after every park or restore. ``NoWait`` trusts the file move
alone (``--no-wait`` / ``--probe none``); the verifying waiters live in :mod:`cpctl.probes.waiter`
and are chosen by name through ``make_waiter`` so the core never imports them.
"""

from __future__ import annotations

from typing import Any, Optional


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


def make_waiter(kind: str, **options: Any) -> Waiter:
    """Build the waiter named ``kind`` (none, auto, api, crictl, health)."""
    if kind == "none":
        return NoWait()
    from cpctl.probes import waiter as verify
    return verify.make(kind, **options)

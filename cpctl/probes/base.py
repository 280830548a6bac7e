"""How cpctl learns that the kubelet really stopped or started a static pod: the shared types.

A ``Probe`` looks at one static pod from one side (the mirror pod in the API, the runtime through
crictl, the component's health endpoint) and returns a ``PodState``, or raises ``Unavailable``
when it cannot look right now (``ProbeMissing`` when it cannot look at all in this run). The
core calls a ``Waiter`` after every change: ``NoWait`` trusts the file move alone (``--no-wait`` /
``--probe none``); ``cpctl.probes.waiter.VerifyingWaiter`` polls the probes.
``cpctl.probes.registry`` builds them by name, so the core never imports them: a probe is made
from ``ProbeOptions`` (``Class.from_options``) and declares what it can see (``via_api``,
``identifies``), which is all a waiter needs to choose it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from cpctl.agent.crictlread import is_new_since
from cpctl.host.base import HttpRequest, PodIdentity
from cpctl.timeutil import iso

if TYPE_CHECKING:
    from cpctl.host.base import Host
    from cpctl.probes.kubeapi import KubeClient


@dataclass
class PodTarget:
    """The static pod a manifest defines on a node, as the kubelet names it.

    ``stale_api``: the API's view of this node's pods cannot be trusted right now - this node's
    apiserver or its etcd is parked, or the kubelet runs in local mode (ControlPlaneKubeletLocalMode,
    kubeadm 1.33+) and its own apiserver is down - so its mirror pods are frozen while the other
    apiservers keep serving them. A verifying waiter then judges this pod by the runtime and the
    health endpoint only, and ``describe`` marks an API view as stale.
    """

    component: str                          # metadata.name in the manifest
    namespace: str
    node: str
    pod: Dict[str, Any] = field(default_factory=dict)   # the manifest's pod ({} when unknown)
    file: str = ""
    stale_api: bool = False

    @property
    def mirror_name(self) -> str:
        """``<metadata.name>-<lowercase node name>``: the name of the mirror pod (and of the
        runtime's sandbox) the kubelet makes for this static pod. ``component`` is the
        ``metadata.name`` itself (what ``Manifest.pod_name`` holds)."""
        return "%s-%s" % (self.component, self.node.lower())


@dataclass
class WaitResult:
    """What a wait established; ``verified`` is False when nothing was actually observed."""

    verified: bool
    detail: str
    elapsed: float = 0.0
    state: Any = None

    def to_dict(self) -> dict:
        return {"verified": self.verified, "detail": self.detail, "elapsed_seconds": round(self.elapsed, 3)}


class Waiter:
    """Observe a target before a change, then wait for the kubelet to act on it.

    ``stale_api``: set (by the core) when the API's view of every pod of this node is stale (see
    ``PodTarget.stale_api``, the same hint for one target); waiters that use the API honour it.
    """

    name = "none"
    stale_api: bool = False

    def before(self, target: PodTarget) -> Any:
        """A snapshot taken before the file moves, so "came back" can mean "is new"."""
        return None

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        raise NotImplementedError

    def wait_started(self, target: PodTarget, before: Any, timeout: float,
                     give_up: Optional[Callable[[], Optional[str]]] = None) -> WaitResult:
        """Wait for a Ready pod that is not the one seen ``before``. ``give_up``, asked about once
        a second while waiting: a reason to stop now (the TIMEOUT error with it), or None."""
        raise NotImplementedError

    def describe(self, target: PodTarget) -> Optional[dict]:
        """The pod's current state for ``status`` (None: this waiter cannot tell)."""
        return None

    def blind_reason(self, target: PodTarget) -> str:
        """Why ``describe`` could not look at ``target`` just now (after it returned None, or only
        a stale view): each probe's error, "" when nothing is known."""
        return ""

    def prepare_describe(self, targets: Sequence[PodTarget]) -> None:
        """``describe`` will be asked about each of ``targets`` next: a chance to look at them
        together (one API list instead of a GET each). Default: nothing."""

    def describe_ahead(self, targets: Sequence[PodTarget]) -> List[HttpRequest]:
        """The HTTP requests ``prepare_describe(targets)`` will make from the node, for
        ``Host.http_ahead``. Default: none."""
        return []

    def wait_kept(self, target: PodTarget, before: object, seconds: float) -> Optional[WaitResult]:
        """After a restore of unchanged bytes while the pod seen ``before`` still ran: that pod,
        still the same and Ready for ``seconds`` (the kubelet never stopped it), or None when it
        went away or was replaced (wait for the new one as usual). Default: None (no probe)."""
        return None

    def settle_view(self, target: PodTarget) -> Optional[dict]:
        """The pod's current state as the waits judge it (the settle check after a start); by
        default ``describe``."""
        return self.describe(target)

    def mirror_note(self, target: PodTarget) -> str:
        """Information on the API's mirror pod when the waits did not look at it ("" when none)."""
        return ""

    def probe(self, name: str) -> Optional["Probe"]:
        """This waiter's probe called ``name`` (whatever ``--probe`` chose for the waits), for a
        feature that needs one look of its own; None when the waiter has none."""
        return None


class NoWait(Waiter):
    """Trust the file move: used with ``--no-wait`` and ``--probe none``."""

    def wait_stopped(self, target: PodTarget, before: Any, timeout: float) -> WaitResult:
        return WaitResult(False, "not verified (no probe)")

    def wait_started(self, target: PodTarget, before: Any, timeout: float,
                     give_up: Optional[Callable[[], Optional[str]]] = None) -> WaitResult:
        return WaitResult(False, "not verified (no probe)")


class Unavailable(Exception):
    """The probe cannot look right now (API down or answering errors or garbage, crictl failing,
    an endpoint timing out): this observation is missing, the next one may work."""


class ProbeMissing(Unavailable):
    """The probe cannot look at this pod at all in this run (crictl not installed, no health
    endpoint known, no usable kubeconfig): a waiter stops asking it instead of polling it."""


@dataclass
class PodState:
    """One observation of a static pod."""

    present: bool
    ready: bool = False
    phase: str = ""
    uid: str = ""
    containers: Tuple[str, ...] = field(default_factory=tuple)
    started: Optional[float] = None
    created: Optional[float] = None
    source: str = ""
    stale: bool = False         # the API's view of a node whose API view is stale (PodTarget.stale_api)
    restarts: Optional[int] = None   # container restarts (crictl: attempt; API: restartCount), None: unknown

    def is_new_since(self, before: Optional["PodState"]) -> bool:
        """True when this pod cannot be the one observed in ``before``: the rule of
        ``agent.crictlread.is_new_since``, which the node-side revert's check applies too."""
        return bool(is_new_since(self.identity(), before.identity() if before is not None else None))

    def identity(self) -> PodIdentity:
        """What tells this pod from another one (the shape ``agent.crictlread.is_new_since`` compares)."""
        return {"present": self.present, "uid": self.uid, "containers": list(self.containers),
                "started": self.started}

    def to_dict(self) -> dict:
        age = time.time() - self.created if self.created else None
        up = time.time() - self.started if self.started else None
        return {"present": self.present, "ready": self.ready, "phase": self.phase, "uid": self.uid,
                "age_seconds": age, "source": self.source, "stale": self.stale,
                "container_started": iso(self.started) if self.started else None, "container_age_seconds": up,
                "restarts": self.restarts}


API_TIMEOUT = 3.0   # seconds one API request takes at most, however long the wait has left
MIN_CALL = 0.2      # the least time one probe call gets, even at the very end of a wait


class Clock:
    """One wait's (or one look's) deadline: what is elapsed and left, and how long the next call may take."""

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


class ProbeOptions:
    """What every probe is made from: the node's ``Host``, the kubeconfig and the crictl binary on
    it. It keeps the one API client of a run (made on first use) that the ``api`` probe and the
    gates share."""

    def __init__(self, host: "Host", kubeconfig: str, crictl: str = "crictl") -> None:
        self.host = host
        self.kubeconfig = kubeconfig
        self.crictl = crictl
        self._client: Optional["KubeClient"] = None

    def client(self) -> "KubeClient":
        """The API client; ``ProbeMissing`` when the kubeconfig is unusable (it stays so this run)."""
        if self._client is None:
            from cpctl.errors import CpctlError, ExitCode
            from cpctl.probes.kubeapi import KubeClient, load_kubeconfig
            try:
                self._client = KubeClient(self.host, load_kubeconfig(self.host, self.kubeconfig),
                                          timeout=API_TIMEOUT)
            except CpctlError as exc:
                if exc.code != ExitCode.ENVIRONMENT:   # e.g. the connection to the master is lost
                    raise
                raise ProbeMissing(exc.message) from None
        return self._client


class Probe(Protocol):
    """One way of looking at a static pod; ``name`` is its ``--probe`` name.

    ``via_api``: it looks through the API server, so it is not asked about a node whose API view
    is stale, nor (in ``auto`` mode) about the pods that carry the API (the API server, etcd).
    ``identifies``: what it sees tells one instance of a pod from the next (a uid, container IDs);
    ``status`` describes pods only through such probes (unless the API view is stale).
    """

    name: str
    max_call: float     # seconds one observation takes at most, whatever ``timeout`` allows
    via_api: bool
    identifies: bool

    def observe(self, target: PodTarget, timeout: Optional[float] = None) -> PodState:
        """The pod as this probe sees it now, within ``timeout`` seconds (None: the probe's own
        default); ``Unavailable`` when it cannot look, ``ProbeMissing`` when it never can."""


class ProbeClass(Protocol):
    """A probe's class as the registry holds it: made from the run's ``ProbeOptions``."""

    def from_options(self, options: ProbeOptions) -> Probe:
        """A probe looking at the pods of ``options.host``."""

"""How long things take on a simulated node: fast fixed lags, or a real kubelet's periods scaled down.

Default (``realistic_timing`` off): the lab's historical lags (``--start-lag``, ``--ready-lag``,
``--stop-lag``), a re-list every ``--file-check-frequency`` seconds, orphaned mirror pods deleted
at once. Realistic (every figure multiplied by ``time_scale``):

* re-list (fileCheckFrequency) every 20 s (pkg/kubelet/apis/config/v1beta1/defaults.go);
* Ready only after the probes: the startup probe first runs after its ``initialDelaySeconds``
  (10 on kubeadm's manifests, util/staticpod/utils.go) and then every ``periodSeconds`` until the
  component answers; a readiness probe then needs one more period. A restarted kubeadm component
  therefore spends about 10 s Running but not Ready (real-node-facts.md, "Mirror pods and timing");
* a stopping container gets SIGTERM and is killed after ``terminationGracePeriodSeconds`` (default
  30); the control-plane components exit about a second after SIGTERM, while a PID 1 without signal
  handlers (``sleep``, a shell) ignores it and runs out the whole grace period;
* orphaned mirror pods are deleted by housekeeping, every 2 s, once termination has finished
  (pkg/kubelet/kubelet.go, ``housekeepingPeriod``).

CrashLoopBackOff (both modes, scaled): the first restart is immediate, then 10 s, 20 s, 40 s ...
capped at 300 s (pkg/kubelet/kubelet.go ``MaxContainerBackOff``, flowcontrol.Backoff).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from .profiles import LabSettings

RELIST_PERIOD = 20.0
HOUSEKEEPING_PERIOD = 2.0
SANDBOX_START = 1.0
SIGTERM_EXIT = 1.0
CRASH_AFTER = 1.0
BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0
MOUNT_RETRY = 2.0
DEFAULT_GRACE = 30.0
#: Seconds from container start until each component answers its health endpoint.
BOOT = {"kube-apiserver": 4.0, "etcd": 1.0, "kube-controller-manager": 1.0, "kube-scheduler": 1.0}
#: The same on a busy real master (``real_master``): the API server loads many CRDs and waits for
#: etcd to catch up (30-60 s), etcd replays its WAL (5-10 s).
BOOT_REAL_MASTER = {"kube-apiserver": 45.0, "etcd": 7.0}
#: After the API answers again, the kubelet fixes a static pod's outdated mirror pod at the pod
#: worker's next try: a failed sync is retried after backOffPeriod, 10 s (pkg/kubelet/pod_workers.go);
#: the new mirror pod's status follows at the status manager's next sync (syncPeriod 10 s,
#: pkg/kubelet/status/status_manager.go). Until then the API shows the old, frozen mirror pod.
MIRROR_RETRY = 10.0
STATUS_SYNC = 10.0
#: The API server re-reads its serving certificate at least every minute (dynamiccertificates'
#: FileRefreshDuration; its file watch is usually faster): the lab takes the whole minute, scaled.
CERT_REREAD = 60.0
#: PID 1 programs that install no SIGTERM handler: the kernel ignores the signal for them.
IGNORES_SIGTERM = ("sleep", "sh", "bash", "tail")


class Timing:
    """Delays for one lab, from its settings and the lag options."""

    def __init__(
        self,
        settings: LabSettings,
        start_lag: float,
        ready_lag: float,
        stop_lag: float,
        file_check_frequency: Optional[float],
    ) -> None:
        self.realistic = settings.realistic_timing
        self.boot = dict(BOOT, **(BOOT_REAL_MASTER if settings.real_master else {}))
        self.scale = settings.time_scale
        self.start_lag, self.ready_lag, self.stop_lag = start_lag, ready_lag, stop_lag
        if file_check_frequency is not None:
            self.relist = file_check_frequency
        else:
            self.relist = RELIST_PERIOD * (self.scale if self.realistic else 1.0)

    def scaled(self, seconds: float) -> float:
        """A real-world duration in lab seconds."""
        return seconds * self.scale

    @property
    def housekeeping(self) -> Optional[float]:
        """Seconds between housekeeping passes; None: orphaned mirrors go at once."""
        return self.scaled(HOUSEKEEPING_PERIOD) if self.realistic else None

    def start_delay(self) -> float:
        """From pod admission to its containers running (sandbox, image, create)."""
        return self.scaled(SANDBOX_START) if self.realistic else self.start_lag

    def boot_delay(self, role: str) -> float:
        """From container start until the component answers its health endpoints."""
        return self.scaled(self.boot.get(role, 0.5)) if self.realistic else self.ready_lag

    def startup_delay(self, spec: dict[str, Any], role: str) -> float:
        """From container start until the startup probe first succeeds (``started: true``)."""
        if not self.realistic:
            return self.ready_lag
        probe = spec.get("startupProbe")
        if not probe:
            return 0.0
        boot = self.boot.get(role, 0.5)
        at = float(probe.get("initialDelaySeconds") or 0)
        period = float(probe.get("periodSeconds") or 10)
        while at < boot:
            at += period
        return self.scaled(at)

    def readiness_delay(self, spec: dict[str, Any]) -> float:
        """From ``started`` until the readiness probe first reports Ready."""
        if not self.realistic:
            return 0.0
        probe = spec.get("readinessProbe")
        if not probe:
            return 0.0
        return self.scaled(float(probe.get("periodSeconds") or 10))

    def stop_delay(self, pod_spec: dict[str, Any], container_spec: dict[str, Any]) -> float:
        """From SIGTERM until the container has exited (at most the grace period)."""
        if not self.realistic:
            return self.stop_lag
        grace = pod_spec.get("terminationGracePeriodSeconds")
        grace_s = DEFAULT_GRACE if grace is None else float(grace)
        exit_after = grace_s if _pid1(container_spec) in IGNORES_SIGTERM else min(grace_s, SIGTERM_EXIT)
        return self.scaled(exit_after)

    def sigkilled(self, container_spec: dict[str, Any]) -> bool:
        """Whether stopping this container ends in SIGKILL (exit code 137) after the grace period."""
        return self.realistic and _pid1(container_spec) in IGNORES_SIGTERM

    def mirror_retry(self) -> float:
        """Seconds from the API's return until the kubelet replaces an outdated mirror pod (0: at once)."""
        return self.scaled(MIRROR_RETRY) if self.realistic else 0.0

    def status_sync(self) -> float:
        """Seconds from a mirror pod's creation until the kubelet first writes its status (0: at once)."""
        return self.scaled(STATUS_SYNC) if self.realistic else 0.0

    def mount_retry(self) -> float:
        """Seconds until the kubelet retries a volume that could not be set up."""
        return self.scaled(MOUNT_RETRY) if self.realistic else min(0.5, self.start_lag + 0.1)

    def crash_after(self) -> float:
        """How long a container that cannot start runs before it exits."""
        return self.scaled(CRASH_AFTER)

    @staticmethod
    def backoff_nominal(crashes: int) -> float:
        """Real seconds of CrashLoopBackOff after the ``crashes``-th exit in a row: 0, 10, 20, 40 ... 300."""
        if crashes <= 1:
            return 0.0
        return min(BACKOFF_INITIAL * 2 ** (crashes - 2), BACKOFF_MAX)


def _pid1(container_spec: dict[str, Any]) -> str:
    """The program that runs as PID 1 (command, else args -- the image entrypoint is not modelled)."""
    argv = list(container_spec.get("command") or []) + list(container_spec.get("args") or [])
    return os.path.basename(str(argv[0])) if argv else ""

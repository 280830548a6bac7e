"""The ``crictl`` probe: the runtime's sandbox and containers (works while the API server is down).

Only "crictl is not installed" (exit 127, ENOENT) is ``ProbeMissing`` - it will not appear
mid-run. Every other failure (the runtime socket busy or refused, permission denied, a timeout,
output that is not the JSON crictl prints) is ``Unavailable`` for this one call: the next poll
asks again.
"""

from __future__ import annotations

from typing import Optional, Tuple

from cpctl.agent import crictlread
from cpctl.host.base import Host
from cpctl.probes.base import PodState, PodTarget, ProbeMissing, ProbeOptions, Unavailable

DEFAULT_TIMEOUT = 10.0
JSON_LIMIT = crictlread.CRICTL_JSON_LIMIT    # bytes of one crictl JSON answer read (on the node, bounded)
MIN_CALL = 0.2      # the least time one crictl run gets, even at the very end of a wait


class CrictlProbe:
    """The runtime's sandbox and containers (sees the pod without the API; container IDs identify it).
    What crictl printed is read by ``agent.crictlread.crictl_pod``, the reading the node-side revert's
    check shares."""

    name = "crictl"
    max_call = DEFAULT_TIMEOUT
    via_api = False
    identifies = True

    def __init__(self, host: Host, crictl: str) -> None:
        self.host = host
        self.crictl = crictl

    @classmethod
    def from_options(cls, options: ProbeOptions) -> "CrictlProbe":
        """The probe running ``options.crictl`` on ``options.host``."""
        return cls(options.host, options.crictl)

    def _run(self, argv: list, timeout: float, limit: int) -> Tuple[int, bytes, bytes]:
        res = self.host.run(argv, timeout=timeout, limit=limit)
        return res.rc, res.stdout, res.stderr

    def observe(self, target: PodTarget, timeout: Optional[float] = None) -> PodState:
        try:
            seen = crictlread.crictl_pod(self._run, self.crictl, target.mirror_name, target.namespace,
                                      DEFAULT_TIMEOUT if timeout is None else timeout, MIN_CALL)
        except crictlread.PodLookError as exc:
            raise (ProbeMissing if exc.missing else Unavailable)(exc.message) from None
        return PodState(seen["present"], seen["ready"], seen["phase"], seen["uid"], tuple(seen["containers"]),
                        seen["started"], seen["created"], self.name, restarts=seen["restarts"])

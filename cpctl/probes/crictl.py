"""The ``crictl`` probe: the runtime's sandbox and containers (works while the API server is down)."""

from __future__ import annotations

import re

from cpctl.host.base import Host
from cpctl.probes.base import PodState, PodTarget, Unavailable


class CrictlProbe:
    name = "crictl"

    def __init__(self, host: Host, crictl: str) -> None:
        self.host = host
        self.crictl = crictl

    def _json(self, *args: str) -> dict:
        import json
        res = self.host.run([self.crictl, *args, "-o", "json"], timeout=10)
        if res.rc == 127:
            raise Unavailable("%s not found" % self.crictl)
        if not res.ok:
            raise Unavailable("crictl %s failed: %s" % (args[0], res.stderr.decode("utf-8", "replace").strip()[:200]))
        try:
            return json.loads(res.stdout.decode("utf-8"))
        except ValueError:
            raise Unavailable("crictl %s printed no JSON" % args[0]) from None

    def observe(self, target: PodTarget) -> PodState:
        # --name/--namespace are regexes: anchor them, or kube-apiserver would match more.
        sandboxes = self._json("pods", "--name", "^%s$" % re.escape(target.pod_name),
                               "--namespace", "^%s$" % re.escape(target.namespace)).get("items") or []
        live = [s for s in sandboxes if s.get("state") == "SANDBOX_READY"]
        if not live:
            return PodState(False, source=self.name)
        sandbox = max(live, key=lambda s: int(s.get("createdAt") or 0))
        containers = self._json("ps", "--pod", sandbox["id"]).get("containers") or []
        running = [c for c in containers if c.get("state") == "CONTAINER_RUNNING"]
        created = [int(c.get("createdAt") or 0) / 1e9 for c in running]
        return PodState(True, bool(running) and len(running) == len(containers), "Running" if running else "Pending",
                        (sandbox.get("metadata") or {}).get("uid", ""), tuple(c["id"] for c in running),
                        max(created, default=None), int(sandbox.get("createdAt") or 0) / 1e9, self.name)

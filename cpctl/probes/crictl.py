"""The ``crictl`` probe: the runtime's sandbox and containers (works while the API server is down).

Only "crictl is not installed" (exit 127, ENOENT) is ``ProbeMissing`` - it will not appear
mid-run. Every other failure (the runtime socket busy or refused, permission denied, a timeout,
output that is not the JSON crictl prints) is ``Unavailable`` for this one call: the next poll
asks again.
"""

from __future__ import annotations

import errno
import json
import re
import time
from typing import Any, Dict, List, Optional

from cpctl.host.base import Host
from cpctl.probes.base import PodState, PodTarget, ProbeMissing, ProbeOptions, Unavailable
from cpctl.probes.shape import ShapeError, get_object, get_objects, get_str

DEFAULT_TIMEOUT = 10.0
JSON_LIMIT = 8 << 20    # bytes of one crictl JSON answer read (on the node, bounded): kilobytes in practice
MIN_CALL = 0.2      # the least time one crictl run gets, even at the very end of a wait


def _one_line(data: bytes) -> str:
    """crictl's stderr as one printable line of at most 200 characters."""
    text = data.decode("utf-8", "replace")
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]


def _nanos(value: Any) -> int:
    """A crictl ``createdAt`` (nanoseconds, a string in JSON; 0 when it is not a number)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _restarts(containers: List[Dict[str, object]]) -> Optional[int]:
    """Restarts of the running containers: the kubelet's restartCount annotation, else the CRI
    attempt number (the kubelet counts attempts from 0 in each sandbox); None when neither says."""
    total, known = 0, False
    for c in containers:
        notes, meta = c.get("annotations"), c.get("metadata")
        note = notes.get("io.kubernetes.container.restartCount") if isinstance(notes, dict) else None
        attempt = meta.get("attempt") if isinstance(meta, dict) else None
        if isinstance(note, str) and note.isdigit():
            total, known = total + int(note), True
        elif isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0:
            total, known = total + attempt, True
    return total if known else None


class CrictlProbe:
    """The runtime's sandbox and containers (sees the pod without the API; container IDs identify it)."""

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

    def _json(self, args: tuple, deadline: float) -> Dict[str, Any]:
        """``crictl ARGS -o json`` as an object, within ``deadline`` (time.monotonic())."""
        timeout = max(MIN_CALL, deadline - time.monotonic())
        try:
            res = self.host.run([self.crictl, *args, "-o", "json"], timeout=timeout, limit=JSON_LIMIT + 1)
        except OSError as exc:   # e.g. EACCES: the binary is not executable
            if exc.errno == errno.ENOENT:
                raise ProbeMissing("%s not found" % self.crictl) from None
            raise Unavailable("cannot run %s: %s" % (self.crictl, exc.strerror or exc)) from None
        if res.rc == 127:
            raise ProbeMissing("%s not found" % self.crictl)
        if res.rc == 124 and res.stderr.strip() == b"timed out":
            raise Unavailable("crictl %s timed out after %.1fs" % (args[0], timeout))
        if not res.ok:
            raise Unavailable("crictl %s failed (exit %d): %s" % (args[0], res.rc, _one_line(res.stderr)))
        if len(res.stdout) > JSON_LIMIT:
            raise Unavailable("crictl %s printed more than %d bytes" % (args[0], JSON_LIMIT))
        try:
            value = json.loads(res.stdout.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Unavailable("crictl %s printed no JSON" % args[0]) from None
        if not isinstance(value, dict):
            raise Unavailable("crictl %s printed JSON that is not an object" % args[0])
        return value

    def observe(self, target: PodTarget, timeout: Optional[float] = None) -> PodState:
        deadline = time.monotonic() + (DEFAULT_TIMEOUT if timeout is None else timeout)
        try:
            return self._observe(target, deadline)
        except ShapeError as exc:
            raise Unavailable("crictl printed malformed JSON: %s" % exc) from None

    def _observe(self, target: PodTarget, deadline: float) -> PodState:
        # --name/--namespace are regexes: anchor them, or kube-apiserver would match more.
        listing = self._json(("pods", "--name", "^%s$" % re.escape(target.mirror_name),
                              "--namespace", "^%s$" % re.escape(target.namespace)), deadline)
        if "items" not in listing:
            raise Unavailable("crictl pods printed no items list")
        live = [s for s in get_objects(listing, "items", "pods") if get_str(s, "state", "sandbox") == "SANDBOX_READY"]
        if not live:
            return PodState(False, source=self.name)
        sandbox = max(live, key=lambda s: _nanos(s.get("createdAt")))
        sandbox_id = get_str(sandbox, "id", "sandbox")
        if not sandbox_id:
            raise Unavailable("crictl pods printed a sandbox without an id")
        found = self._json(("ps", "--pod", sandbox_id), deadline)
        if "containers" not in found:
            raise Unavailable("crictl ps printed no containers list")
        containers = get_objects(found, "containers", "ps")
        running = [c for c in containers if get_str(c, "state", "container") == "CONTAINER_RUNNING"]
        created = [_nanos(c.get("createdAt")) / 1e9 for c in running]
        return PodState(True, bool(running) and len(running) == len(containers), "Running" if running else "Pending",
                        get_str(get_object(sandbox, "metadata", "sandbox"), "uid", "sandbox.metadata"),
                        tuple(get_str(c, "id", "container") for c in running), max(created, default=None),
                        _nanos(sandbox.get("createdAt")) / 1e9, self.name, restarts=_restarts(running))

"""``cpctl logs COMPONENT``: what a static pod's container wrote, from the runtime first, else the API.

The runtime answers while the API server is down - exactly when the logs of an API server, an etcd
or a scheduler matter most - so crictl comes first: the newest sandbox of the kubelet's pod
``<metadata.name>-<node>``, the newest attempt of the container, ``crictl logs --tail N`` (with
``--previous``: the attempt before it, the one that crashed). When crictl is missing or cannot
answer, the API server's ``pods/NAME/log`` through the node's kubeconfig (the API server asks the
kubelet, which reads the same log). Which of the two answered is said on stderr and in ``source``.
``--previous`` through the API is the kubelet's choice: its last terminated attempt, which during a
CrashLoopBackOff (no attempt running) is the newest one, not the one before it.

Exit codes: 3 when there is nothing to show (the component is parked - "not running: parked since
..." -, unknown, not started by the kubelet yet, or has no earlier attempt for ``--previous``,
whether crictl or the API server says so); 2 for
a container the pod does not have, or none named when it has several; when crictl cannot answer,
the API step's own code: 7 (no usable kubeconfig), 9 (API unreachable or refused), 3 (no mirror pod).

Log lines are the container's words, never trusted: the data keeps them exact (JSON output), text
output escapes them (``cli.context.printable``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import quote

from cpctl.core import manifests
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.probes.base import PodTarget
from cpctl.probes.diagnose import Diagnosis, LogsUnavailable, NoLogs

DEFAULT_TAIL = 50
API_TIMEOUT = 15.0           # seconds for the API answer (the API server asks the kubelet in turn)
API_LOG_LIMIT = 16 << 20     # bytes of one log answer: the kubelet rotates a container log at 10 MiB


@dataclass(frozen=True)
class LogRequest:
    """What ``cpctl logs`` asks for: the component, how many lines from the end (0: all), the
    attempt before the newest one, and the container (None: the pod's only one)."""

    component: str
    tail: int = DEFAULT_TAIL
    previous: bool = False
    container: Optional[str] = None


def component_logs(node: Node, request: LogRequest, say: Callable[[str], None]) -> Dict[str, Any]:
    """The log lines of ``request.component``'s container on ``node``, and where they came from
    (``say`` gets that one line, for stderr)."""
    target = running_target(node, request.component)
    container = pick_container(target, request.container)
    data: Dict[str, Any] = {"node": node.node_name, "component": target.component, "pod": target.mirror_name,
                            "container": container, "previous": request.previous}
    try:
        found = Diagnosis(node.host, node.crictl).log_lines(target, container, request.tail, request.previous)
    except NoLogs as exc:
        raise CpctlError("no logs of %s on %s: %s" % (target.mirror_name, node.node_name, exc),
                         ExitCode.NOT_FOUND) from None
    except LogsUnavailable as exc:
        lines = api_log_lines(node, target, container, request, str(exc))
        say("%s: %s of container %s from the API server (crictl could not answer: %s)"
            % (target.mirror_name, _count(lines), container, exc))
        return dict(data, source="api", lines=lines)
    which = "previous attempt %d" if request.previous else "attempt %d"
    say("%s: %s of container %s (%s) from crictl" % (target.mirror_name, _count(found.lines), container,
                                                      which % found.attempt))
    return dict(data, source="crictl", lines=found.lines)


def follow(node: Node, request: LogRequest, say: Callable[[str], None], show: Callable[[str], None]) -> None:
    """``logs -f``: the last ``request.tail`` lines of the newest attempt, then each new line as the
    container writes it (``crictl logs --follow``), until it exits or the caller is interrupted.
    Only on this machine and only through crictl: the agent answers a request with one bounded
    reply, so a stream over SSH (or the API server's ``follow``) is not offered."""
    import subprocess
    if node.host.is_remote:
        raise CpctlError("logs -f follows a log on this machine only: run it on the master", ExitCode.USAGE)
    target = running_target(node, request.component)
    container = pick_container(target, request.container)
    try:
        found = Diagnosis(node.host, node.crictl).log_lines(target, container, 1)
    except NoLogs as exc:
        raise CpctlError("no logs of %s on %s: %s" % (target.mirror_name, node.node_name, exc),
                         ExitCode.NOT_FOUND) from None
    except LogsUnavailable as exc:
        raise CpctlError("cannot follow the log of %s: crictl could not answer (%s); %s without -f "
                         "asks the API server" % (target.mirror_name, exc, node.command("logs", request.component)),
                         ExitCode.ENVIRONMENT) from None
    say("%s: following container %s (attempt %d) through crictl; Ctrl-C ends"
        % (target.mirror_name, container, found.attempt))
    argv = [node.crictl, "logs", "--follow"] + (["--tail", str(request.tail)] if request.tail > 0 else [])
    proc = subprocess.Popen(argv + [found.container_id], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            show(raw.decode("utf-8", "replace").rstrip("\n"))
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.returncode:
        raise CpctlError("crictl logs --follow of %s ended with exit %d" % (target.mirror_name, proc.returncode),
                         ExitCode.ENVIRONMENT)
    say("%s: container %s exited (attempt %d); %s follows the next one"
        % (target.mirror_name, container, found.attempt, node.command("logs", "-f", request.component)))


def running_target(node: Node, component: str) -> PodTarget:
    """The pod the component's manifest makes the kubelet run; a parked or unknown component has
    none (exit 3), an invalid manifest neither (exit 4, as for every command)."""
    manifests.validate_component_name(component)
    scan, parked = node.scan(), node.parked()
    present, parked_hits = node.resolve(component, scan, parked)
    if present:
        manifest = node.single(component, present, "it has no pod whose logs could be shown")
        assert manifest.pod is not None
        return node.target_for(manifest.pod, manifest.file)
    if parked_hits:
        meta = parked[parked_hits[0]]
        why = "; reason: %s" % meta["reason"] if meta.get("reason") else ""
        raise CpctlError("%s is not running on %s: parked since %s by %s%s (`%s` brings it back)"
                         % (meta.get("component") or component, node.node_name, meta.get("parked_at", "?"),
                            meta.get("parked_by", "?"), why, node.command("start", component)), ExitCode.NOT_FOUND)
    raise node.not_found(component)


def pick_container(target: PodTarget, wanted: Optional[str]) -> str:
    """``wanted`` when the pod has such a container, else the pod's only container (exit 2 otherwise)."""
    spec = target.pod.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or [] if isinstance(c, dict)]
    init_names = [str(c.get("name")) for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    if wanted:
        if wanted not in names + init_names:
            raise CpctlError("pod %s has no container %r (its containers: %s)"
                             % (target.mirror_name, wanted, ", ".join(names + init_names) or "none"), ExitCode.USAGE)
        return wanted
    if len(names) == 1:
        return names[0]
    raise CpctlError("pod %s has %d containers (%s): choose one with --container"
                     % (target.mirror_name, len(names), ", ".join(names) or "none"), ExitCode.USAGE)


def api_log_lines(node: Node, target: PodTarget, container: str, request: LogRequest, crictl_failure: str) -> List[str]:
    """The lines through the API server's ``pods/NAME/log``; when that fails too, one error that
    says why neither could answer, with the API step's exit code (7, 9 or 3)."""
    from cpctl.probes.kubeapi import KubeClient, load_kubeconfig
    path = "/api/v1/namespaces/%s/pods/%s/log" % (quote(target.namespace, safe=""), quote(target.mirror_name, safe=""))
    query = {"container": container, "tailLines": request.tail or None,
             "previous": "true" if request.previous else None}
    try:
        client = KubeClient(node.host, load_kubeconfig(node.host, node.kubeconfig), timeout=API_TIMEOUT)
        text = client.request_text(path, query, limit=API_LOG_LIMIT)
    except CpctlError as exc:
        code = ExitCode.NOT_FOUND if request.previous and _no_previous(exc) else exc.code
        raise CpctlError("no logs of %s on %s: crictl could not answer (%s), nor the API server (%s)"
                         % (target.mirror_name, node.node_name, crictl_failure, exc.message), code,
                         hint=exc.hint) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines[-request.tail:] if request.tail > 0 else lines


def _no_previous(exc: CpctlError) -> bool:
    """The API server's answer to ``previous=true`` for a container with no terminated attempt: a
    400 whose Status says ``previous terminated container "X" in pod "Y" not found`` (the kubelet's
    words) -- nothing to show, exit 3 like crictl's answer, not an API failure."""
    from cpctl.probes.kubeapi import ApiError
    return isinstance(exc, ApiError) and exc.status == 400 and "previous terminated container" in exc.message \
        and "not found" in exc.message


def _count(lines: List[str]) -> str:
    return "1 line" if len(lines) == 1 else "%d lines" % len(lines)

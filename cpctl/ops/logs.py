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
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import quote

from cpctl.core import manifests
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.probes.base import PodTarget
from cpctl.probes.diagnose import ContainerLog, Diagnosis, LogsUnavailable, NoLogs

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


FOLLOW_POLL = 1.0            # seconds between two looks for the next attempt once the followed one ended


def follow(node: Node, request: LogRequest, say: Callable[[str], None], show: Callable[[str], None],
           poll: float = FOLLOW_POLL) -> None:
    """``logs -f``: the last ``request.tail`` lines of the newest attempt, then each new line as the
    container writes it (``crictl logs --follow``); when the attempt ends, the next one - a restart,
    or the container of a new pod after a manifest change - from its first line, after a marker line
    that names it (``restart_marker``), until the component is parked or removed or the caller is
    interrupted. Only on this machine and only through crictl: the agent answers a request with one
    bounded reply, so a stream over SSH (or the API server's ``follow``) is not offered."""
    if node.host.is_remote:
        raise CpctlError("logs -f follows a log on this machine only: run it on the master", ExitCode.USAGE)
    target = running_target(node, request.component)
    container = pick_container(target, request.container)
    diagnosis = Diagnosis(node.host, node.crictl)
    try:
        found = diagnosis.newest(target, container)
    except NoLogs as exc:
        raise CpctlError("no logs of %s on %s: %s" % (target.mirror_name, node.node_name, exc),
                         ExitCode.NOT_FOUND) from None
    except LogsUnavailable as exc:
        raise CpctlError("cannot follow the log of %s: crictl could not answer (%s); %s without -f "
                         "asks the API server" % (target.mirror_name, exc, node.command("logs", request.component)),
                         ExitCode.ENVIRONMENT) from None
    say("%s: following container %s (attempt %d) through crictl, across its restarts; Ctrl-C ends"
        % (target.mirror_name, container, found.attempt))
    tail = request.tail
    while True:
        _stream(node, target, found.container_id, tail, show)
        tail = 0                                    # a next attempt: every line it wrote, none lost
        following = _next_attempt(node, diagnosis, (request.component, container), found, say, poll)
        if following is None:
            return
        show(restart_marker(target.mirror_name, found, following))
        found = following


def _stream(node: Node, target: PodTarget, container_id: str, tail: int, show: Callable[[str], None]) -> None:
    """``crictl logs --follow`` of one attempt, each line to ``show``, until it ends (the attempt
    exited); a crictl failure is an error (exit 7)."""
    import subprocess
    argv = [node.crictl, "logs", "--follow"] + (["--tail", str(tail)] if tail > 0 else [])
    proc = subprocess.Popen(argv + [container_id], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
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


def _next_attempt(node: Node, diagnosis: Diagnosis, which: Tuple[str, str], ended: ContainerLog,
                  say: Callable[[str], None], poll: float) -> Optional[ContainerLog]:
    """The attempt after ``ended`` (of ``which``: the component, its container) once the runtime has
    it (polled every ``poll`` seconds: the kubelet's crash-loop back-off is up to 5 minutes); None
    when there will be none to follow - the component parked or its manifest gone (said on stderr)."""
    import time
    component, container = which
    waiting = False
    while True:
        try:
            target = running_target(node, component)
        except CpctlError as exc:
            if exc.code != ExitCode.NOT_FOUND:
                raise
            say("container %s exited (attempt %d); nothing more to follow: %s" % (container, ended.attempt,
                                                                                   exc.message))
            return None
        if not waiting:
            say("%s: container %s exited (attempt %d); waiting for its next attempt (Ctrl-C ends)"
                % (target.mirror_name, container, ended.attempt))
            waiting = True
        try:
            found: Optional[ContainerLog] = diagnosis.newest(target, container)
        except (NoLogs, LogsUnavailable):        # no new sandbox yet, crictl busy: look again
            found = None
        if found is not None and found.container_id != ended.container_id:
            return found
        if found is not None and found.state == "CONTAINER_RUNNING":
            raise CpctlError("crictl logs --follow of %s ended while attempt %d still runs: %s follows it again"
                             % (target.mirror_name, ended.attempt, node.command("logs", "-f", component)),
                             ExitCode.ENVIRONMENT)
        time.sleep(poll)


def restart_marker(pod: str, ended: ContainerLog, following: ContainerLog) -> str:
    """The line between two attempts in ``logs -f``'s output: which container the next lines are of
    (its attempt and id, as ``crictl ps`` shortens it), and which attempts ended unseen."""
    how = "restarted" if following.attempt > ended.attempt else "started again in a new pod (manifest changed)"
    skipped = following.attempt - ended.attempt - 1
    unseen = "" if skipped <= 0 else "; %s ended before %s could be followed" % (
        "attempt %d" % (ended.attempt + 1) if skipped == 1 else "attempts %d-%d" % (ended.attempt + 1,
                                                                                  following.attempt - 1),
        "it" if skipped == 1 else "they")
    return "--- %s: container %s %s: attempt %d, container %s; its lines from the first%s ---" % (
        pod, following.container, how, following.attempt, following.container_id[:13], unseen)


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

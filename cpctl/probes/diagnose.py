"""Why a static pod does not come up: its containers' state, exit code, restarts and last log lines.

Asked after a failed wait (``apply``'s rollback report, a timeout) and by ``cpctl logs``. The
runtime answers while the API server is down, so it comes first: ``crictl pods`` finds the newest
sandbox of the pod, ``crictl ps -a`` its containers (every attempt), ``crictl inspect`` the exit
code of the newest attempt, ``crictl logs --tail N`` what it wrote. Without crictl the mirror pod's
``containerStatuses`` (through the API) give state, reason, exit code and restarts.

Nothing here raises: what cannot be found is said in the lines it returns - except
``Diagnosis.log_lines`` (``cpctl logs``), whose caller decides: ``NoLogs`` (the runtime has nothing
to show) ends the command, ``LogsUnavailable`` (crictl cannot answer) sends it to the API server.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Set, Tuple

from cpctl.agent import crictlread
from cpctl.host.base import Host
from cpctl.probes.base import PodTarget
from cpctl.probes.shape import ShapeError, get_list, get_object, get_str

CALL_TIMEOUT = 5.0
LOG_LINE_CHARS = 240


@dataclass
class Attempt:
    """The newest attempt of one container of the pod."""

    name: str
    container_id: str
    state: str
    attempt: int
    exit_code: Optional[int] = None
    reason: str = ""
    logs: List[str] = field(default_factory=list)

    def summary(self) -> str:
        text = "container %s %s" % (self.name, self.state.replace("CONTAINER_", "").lower() or "unknown")
        if self.exit_code is not None:
            text += ", exit code %d%s" % (self.exit_code, " (%s)" % self.reason if self.reason else "")
        if self.attempt:
            text += ", %d restart%s" % (self.attempt, "" if self.attempt == 1 else "s")
        if self.logs:
            text += ", last log lines: %s" % " | ".join(self.logs)
        return text


class _Failed(Exception):
    pass


class LogsUnavailable(Exception):
    """crictl could not answer (not installed, failing, printing what it must not): ask elsewhere."""


class NoLogs(Exception):
    """crictl answered, and there is nothing to show: no sandbox for the pod, the container not
    created in it yet, or no attempt before the first one. The message says which."""


@dataclass
class ContainerLog:
    """What one attempt of one container wrote, as ``crictl logs`` printed it (oldest line first)."""

    container: str
    container_id: str
    attempt: int                 # the attempt the lines are of (the previous one with ``previous``)
    state: str                   # the newest attempt's state (CONTAINER_RUNNING, CONTAINER_EXITED...)
    lines: List[str] = field(default_factory=list)


def _one_line(text: str, limit: int = LOG_LINE_CHARS) -> str:
    clean = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return clean if len(clean) <= limit else clean[:limit - 3] + "..."


def _nanos(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else 0


_ERROR_LINE = re.compile(r'^(E\d{4} |F\d{4} |Error:|error:|panic:|.*"level":"(error|fatal|panic)")')


def _telling(lines: List[str], tail: int) -> List[str]:
    """The last ``tail`` lines, but the error lines first when the container wrote some (a
    command line it rejects is followed by pages of usage text)."""
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    return (errors or lines)[-tail:] if not errors else errors[-min(tail, 3):]


LOGS_TIMEOUT = 30.0             # seconds for one ``crictl logs`` (a whole log may be megabytes)
JSON_LIMIT = 8 << 20            # bytes of one crictl JSON answer (pods, ps, inspect of one pod: kilobytes)
LOG_BYTES = 16 << 20            # the last bytes of each log stream read (the kubelet rotates a log at 10 MiB)
LOG_LINE_CHARS_MAX = 64 << 10   # characters of one log line shown; the rest is cut and said so
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


def _stamped(data: bytes) -> List[Tuple[int, str]]:
    """(nanoseconds since the epoch, line) for each line ``crictl logs --timestamps`` printed on one
    stream, the stamp cut off. A line without a stamp keeps the time of the line before it; an
    empty line is a line (usage texts have them), only the final newline ends the last one."""
    pieces = data.decode("utf-8", "replace").split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()
    found: List[Tuple[int, str]] = []
    seconds: Dict[str, int] = {}
    last = 0
    for piece in pieces:
        match = _STAMP.match(piece)
        if match:
            base, fraction, zone = match.groups()
            if base not in seconds:
                seconds[base] = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
            offset = 0 if zone == "Z" else (1 if zone[0] == "-" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:]) * 60)
            last = (seconds[base] + offset) * 10 ** 9 + int((fraction or "0").ljust(9, "0"))
            piece = piece[match.end():]
        found.append((last, piece))
    return found


def merged_log_lines(stdout: bytes, stderr: bytes) -> List[str]:
    """The lines of both streams of ``crictl logs --timestamps`` in the order they were written
    (crictl prints each line on the stream the container wrote it to; the control-plane
    components write to stderr, a rejected command line's usage text may go to either)."""
    both = sorted(_stamped(stdout) + _stamped(stderr), key=lambda item: item[0])
    return [cut_line(line) for _, line in both]


def cut_line(line: str, limit: int = LOG_LINE_CHARS_MAX) -> str:
    """A log line of at most ``limit`` characters, plus a note of how many were cut."""
    return line if len(line) <= limit else "%s [... %d more characters]" % (line[:limit], len(line) - limit)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class Diagnosis:
    """Runs crictl on a node (through its Host) to explain one pod."""

    def __init__(self, host: Host, crictl: str) -> None:
        self.host = host
        self.crictl = crictl

    def _run(self, args: List[str], timeout: float = CALL_TIMEOUT, limit: int = JSON_LIMIT) -> Tuple[bytes, bytes]:
        """crictl's (stdout, stderr), at most the last ``limit`` bytes of each (read bounded on the
        node: a container may have written a 300 MB line)."""
        try:
            res = self.host.run([self.crictl] + args, timeout=timeout, limit=limit)
        except OSError as exc:
            raise _Failed("cannot run %s: %s" % (self.crictl, exc.strerror or exc)) from None
        if res.rc == 127:
            raise _Failed("%s not found" % self.crictl)
        if not res.ok:
            why = _one_line(res.stderr.decode("utf-8", "replace"))
            raise _Failed("crictl %s failed (exit %d): %s" % (args[0], res.rc, why))
        return res.stdout, res.stderr

    def _json(self, args: List[str]) -> Dict[str, object]:
        """``crictl ARGS -o json`` as an object, as the crictl probe reads it (``agent.crictlread.crictl_json``)."""
        def run(argv: List[str], timeout: float, limit: int) -> Tuple[int, bytes, bytes]:
            res = self.host.run(argv, timeout=timeout, limit=limit)
            return res.rc, res.stdout, res.stderr
        try:
            value: Dict[str, object] = crictlread.crictl_json(run, self.crictl, args, time.monotonic() + CALL_TIMEOUT,
                                                           CALL_TIMEOUT)
        except crictlread.PodLookError as exc:
            raise _Failed(exc.message) from None
        return value

    def attempts(self, target: PodTarget, tail: int = 5, previous: bool = False) -> List[Attempt]:
        """The newest attempt of each container of the pod's newest sandbox (``previous``: the one
        before it), with ``tail`` log lines; raises _Failed."""
        try:
            sandbox = self._newest_sandbox(target)
            if not sandbox:
                return []
            found = self._json(["ps", "-a", "--pod", sandbox])
            by_name: Dict[str, List[Dict[str, object]]] = {}
            for item in get_list(found, "containers", "ps"):
                if isinstance(item, dict):
                    by_name.setdefault(get_str(get_object(item, "metadata", "ps"), "name", "ps"), []).append(item)
            result = []
            for name, items in sorted(by_name.items()):
                items.sort(key=lambda c: _nanos(c.get("createdAt")))
                chosen = items[-2] if previous and len(items) > 1 else items[-1]
                result.append(self._attempt(name, chosen, tail))
            return result
        except ShapeError as exc:
            raise _Failed("crictl printed malformed JSON: %s" % exc) from None

    def sandboxes(self, target: PodTarget) -> Optional[Set[str]]:
        """The ids of every sandbox the runtime has for the pod now; None when crictl cannot say."""
        try:
            listing = self._json(["pods", "--name", "^%s$" % re.escape(target.mirror_name),
                                  "--namespace", "^%s$" % re.escape(target.namespace)])
            return {get_str(s, "id", "pods") for s in get_list(listing, "items", "pods") if isinstance(s, dict)}
        except (_Failed, ShapeError):
            return None

    def crash_loop(self, target: PodTarget, old: Set[str], tail: int = 5) -> Optional[str]:
        """Why the NEW pod (a sandbox not in ``old``) is already a failure: a container of it that
        exited with an error and was restarted at least once - the kubelet has put it in
        CrashLoopBackOff (restartCount >= 1 and waiting) or restarted it twice - with its last
        log lines; None when not (or when crictl cannot say)."""
        try:
            sandbox = self._newest_sandbox(target)
            if not sandbox or sandbox in old:
                return None
            for attempt in self.attempts(target, tail):
                if attempt.state == "CONTAINER_EXITED" and attempt.exit_code and attempt.attempt >= 1:
                    return "the new container crash-loops (CrashLoopBackOff): %s" % attempt.summary()
                if attempt.attempt >= 2:
                    before = self.attempts(target, tail, previous=True)
                    failed = [a for a in before if a.name == attempt.name and a.exit_code]
                    if failed:
                        return "the new container crash-loops (restarted %d times): %s" % (
                            attempt.attempt, failed[0].summary())
        except (_Failed, ShapeError):
            return None
        return None

    def _newest_sandbox(self, target: PodTarget) -> str:
        listing = self._json(["pods", "--name", "^%s$" % re.escape(target.mirror_name),
                              "--namespace", "^%s$" % re.escape(target.namespace)])
        items = [s for s in get_list(listing, "items", "pods") if isinstance(s, dict)]
        if not items:
            return ""
        return get_str(max(items, key=lambda s: _nanos(s.get("createdAt"))), "id", "pods")

    def _attempt(self, name: str, item: Mapping[str, object], tail: int) -> Attempt:
        container_id = get_str(item, "id", "ps")
        metadata = get_object(item, "metadata", "ps")
        attempt = metadata.get("attempt")
        found = Attempt(name, container_id, get_str(item, "state", "ps"),
                        attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0)
        if found.state == "CONTAINER_EXITED":
            try:
                status = get_object(self._json(["inspect", container_id]), "status", "inspect")
                code = status.get("exitCode")
                found.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
                found.reason = _one_line(get_str(status, "reason", "inspect.status"), 60)
            except (_Failed, ShapeError):
                pass
        if tail > 0 and container_id:
            try:
                out, err = self._run(["logs", "--tail", str(tail), container_id], limit=LOG_BYTES)
                text = (out + err).decode("utf-8", "replace")
                found.logs = _telling([_one_line(line) for line in text.splitlines() if line.strip()], tail)
            except _Failed:
                pass
        return found

    def log_lines(self, target: PodTarget, container: str, tail: int = 50, previous: bool = False) -> ContainerLog:
        """The last ``tail`` lines (0: every line) that the newest attempt of ``container`` in the
        pod's newest sandbox wrote (``previous``: the attempt before it), both streams in the
        order written. Raises ``NoLogs`` when the runtime has nothing to show, ``LogsUnavailable``
        when crictl cannot say."""
        try:
            newest = self._newest_attempt(target, container)
            attempt = _int(get_object(newest, "metadata", "ps").get("attempt"))
            container_id, state = get_str(newest, "id", "ps"), get_str(newest, "state", "ps")
            if previous and attempt == 0:
                raise NoLogs('previous terminated container "%s" in pod "%s" not found (the container has not '
                             "restarted)" % (container, target.mirror_name))
            args = ["logs", "--timestamps"] + (["--tail", str(tail)] if tail > 0 else [])
            out, err = self._run(args + (["--previous"] if previous else []) + [container_id], timeout=LOGS_TIMEOUT,
                                 limit=LOG_BYTES)
        except _Failed as exc:
            raise LogsUnavailable(str(exc)) from None
        except ShapeError as exc:
            raise LogsUnavailable("crictl printed malformed JSON: %s" % exc) from None
        lines = merged_log_lines(out, err)
        return ContainerLog(container, container_id, attempt - 1 if previous else attempt, state,
                            lines[-tail:] if tail > 0 else lines)

    def newest(self, target: PodTarget, container: str) -> ContainerLog:
        """Which attempt of ``container`` is the newest in the pod's newest sandbox (its id, number
        and state, no lines): what ``logs -f`` polls for after an attempt ended. ``NoLogs`` when
        there is none yet, ``LogsUnavailable`` when crictl cannot say."""
        try:
            newest = self._newest_attempt(target, container)
            attempt = _int(get_object(newest, "metadata", "ps").get("attempt"))
            return ContainerLog(container, get_str(newest, "id", "ps"), attempt, get_str(newest, "state", "ps"))
        except _Failed as exc:
            raise LogsUnavailable(str(exc)) from None
        except ShapeError as exc:
            raise LogsUnavailable("crictl printed malformed JSON: %s" % exc) from None

    def _newest_attempt(self, target: PodTarget, container: str) -> Dict[str, object]:
        """``crictl ps -a`` entry of the newest attempt of ``container`` in the pod's newest sandbox."""
        sandbox = self._newest_sandbox(target)
        if not sandbox:
            raise NoLogs("the runtime has no sandbox for pod %s (the kubelet has not started it)" % target.mirror_name)
        found = self._json(["ps", "-a", "--pod", sandbox])
        items = [item for item in get_list(found, "containers", "ps") if isinstance(item, dict)
                 and get_str(get_object(item, "metadata", "ps"), "name", "ps") == container]
        if not items:
            raise NoLogs("container %s of pod %s has not been created yet" % (container, target.mirror_name))
        return max(items, key=lambda c: _nanos(c.get("createdAt")))

    def explain(self, target: PodTarget, tail: int = 5) -> List[str]:
        """One line per container of the pod, or why nothing could be found out."""
        started = time.monotonic()
        try:
            found = self.attempts(target, tail)
        except _Failed as exc:
            return ["crictl could not tell (%s)" % exc]
        if not found:
            return ["the runtime has no sandbox for pod %s (checked in %.1fs)" % (target.mirror_name,
                                                                             time.monotonic() - started)]
        return [a.summary() for a in found]


def explain(host: Host, crictl: str, target: PodTarget, tail: int = 5) -> List[str]:
    """``Diagnosis(host, crictl).explain(target, tail)``."""
    return Diagnosis(host, crictl).explain(target, tail)


def why_not_running(host: Host, crictl: str, kubeconfig: str, target: PodTarget, tail: int = 5) -> List[str]:
    """Why ``target`` does not come up: the runtime's account (crictl), else the mirror pod's."""
    found = explain(host, crictl, target, tail)
    if found and not found[0].startswith("crictl could not tell"):
        return found
    from cpctl.errors import CpctlError
    from cpctl.probes.kubeapi import KubeClient, load_kubeconfig
    try:
        client = KubeClient(host, load_kubeconfig(host, kubeconfig), timeout=3.0)
        return from_mirror(client.get_pod(target.namespace, target.mirror_name)) or found
    except (CpctlError, OSError):
        return found


def from_mirror(pod: Optional[Mapping[str, object]]) -> List[str]:
    """The same summary from a mirror pod's ``containerStatuses`` (when crictl cannot answer)."""
    if not isinstance(pod, dict):
        return []
    lines = []
    try:
        statuses = get_list(get_object(pod, "status", "pod"), "containerStatuses", "pod.status")
        for status in [s for s in statuses if isinstance(s, dict)]:
            state = get_object(status, "state", "containerStatus")
            last = get_object(get_object(status, "lastState", "containerStatus"), "terminated", "lastState")
            waiting = get_object(state, "waiting", "state")
            text = "container %s %s" % (get_str(status, "name", "containerStatus"),
                                        get_str(waiting, "reason", "waiting") or next(iter(state), "unknown"))
            code = last.get("exitCode")
            if isinstance(code, int) and not isinstance(code, bool):
                text += ", last exit code %d" % code
            restarts = status.get("restartCount")
            if isinstance(restarts, int) and not isinstance(restarts, bool):
                text += ", %d restarts" % restarts
            lines.append(text)
    except ShapeError:
        return []
    return lines

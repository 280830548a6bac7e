"""Fan work out over many masters: in parallel, or rolling in batches, with an Ansible-like recap.

Independent of what is run: ``fn(spec)`` does the work for one host and returns its data. A
returned dict with ``"changed": True`` (or an object whose ``changed`` attribute is true) marks
the host "changed", anything else "ok". Exceptions are captured per host: ``CpctlError`` with
``ExitCode.UNREACHABLE`` makes the host "unreachable", anything else "failed" (so one bad master
never hides the others' results). ``ConnectionPool`` gives each host one SSH connection per run.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from cpctl.errors import CpctlError, ExitCode

STATUSES = ("ok", "changed", "unreachable", "failed", "skipped")
_POLL = 0.05
FAST_SWITCH = 0.0005


@dataclass
class HostResult:
    """What happened on one host; ``code`` is the ExitCode of a captured CpctlError."""

    host: str
    status: str
    data: Any = None
    error: Optional[str] = None
    elapsed: float = 0.0
    code: Optional[int] = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "unreachable")


def _name(spec: Any) -> str:
    return str(getattr(spec, "name", spec))


def _is_changed(data: Any) -> bool:
    if isinstance(data, dict):
        return bool(data.get("changed"))
    return bool(getattr(data, "changed", False))


def _error_result(name: str, exc: BaseException, elapsed: float) -> HostResult:
    from cpctl.host.base import LockBusy
    if isinstance(exc, CpctlError):
        status = "unreachable" if exc.code == ExitCode.UNREACHABLE else "failed"
        return HostResult(name, status, None, exc.message, elapsed, int(exc.code))
    if isinstance(exc, LockBusy):
        return HostResult(name, "failed", None, "node locked by %s" % exc.holder, elapsed,
                          int(ExitCode.LOCKED))
    if isinstance(exc, OSError):
        text = "%s: %s" % (exc.filename, exc.strerror) if exc.filename else (exc.strerror or str(exc))
        return HostResult(name, "failed", None, text, elapsed, int(ExitCode.ENVIRONMENT))
    return HostResult(name, "failed", None, "internal error: %s: %s" % (type(exc).__name__, exc), elapsed,
                      int(ExitCode.INTERNAL))


def run_one(spec: Any, fn: Callable[[Any], Any]) -> HostResult:
    """Run ``fn(spec)`` and turn its outcome, whatever it is, into a HostResult."""
    started = time.monotonic()
    try:
        data = fn(spec)
    except Exception as exc:  # noqa: BLE001 (captured per host by design, reported in the recap)
        return _error_result(_name(spec), exc, time.monotonic() - started)
    status = "changed" if _is_changed(data) else "ok"
    return HostResult(_name(spec), status, data, None, time.monotonic() - started)


def run_parallel(specs: Sequence[Any], fn: Callable[[Any], Any], forks: int = 10,
                 timeout: Optional[float] = None,
                 on_timeout: Optional[Callable[[Any], None]] = None) -> List[HostResult]:
    """``fn`` on every host, at most ``forks`` at a time; results in the order of ``specs``.

    ``timeout`` bounds each host's run (from when it started): a host still running then is
    reported "failed" (exit code 6) and abandoned; ``on_timeout(spec)`` may unblock it (the
    remote runner closes that host's connection). Workers are daemon threads, so an abandoned
    host never keeps cpctl from exiting: its agent then reads EOF and stops, as after a kill.
    """
    specs = list(specs)
    if not specs:
        return []
    if len(specs) > 1:
        # Host threads mostly wait on sockets and hand small answers around; with the default 5 ms
        # GIL switch interval each hand-over can wait that long (measured: -25% on 20 hosts).
        sys.setswitchinterval(min(sys.getswitchinterval(), FAST_SWITCH))
    runs = _ParallelRun(specs, fn)
    for _ in range(max(1, min(forks, len(specs)))):
        threading.Thread(target=runs.work, name="cpctl-host", daemon=True).start()
    return runs.collect(timeout, on_timeout)


class _ParallelRun:
    """The shared state of one ``run_parallel``: a queue of hosts, their start times, results."""

    def __init__(self, specs: List[Any], fn: Callable[[Any], Any]) -> None:
        self.specs, self.fn = specs, fn
        self.results: List[Optional[HostResult]] = [None] * len(specs)
        self.starts: Dict[int, float] = {}
        self.next = 0
        self.changed = threading.Condition()

    def work(self) -> None:
        while True:
            with self.changed:
                if self.next >= len(self.specs):
                    return
                index, self.next = self.next, self.next + 1
                self.starts[index] = time.monotonic()
            result = run_one(self.specs[index], self.fn)
            with self.changed:
                if self.results[index] is None:       # not already reported as timed out
                    self.results[index] = result
                self.changed.notify_all()

    def collect(self, timeout: Optional[float], on_timeout: Optional[Callable[[Any], None]]) -> List[HostResult]:
        while True:
            with self.changed:
                if all(r is not None for r in self.results):
                    return list(self.results)  # type: ignore[arg-type]
                self.changed.wait(_POLL if timeout is not None else None)
                expired = self._expire(timeout) if timeout is not None else []
            for index in expired:
                if on_timeout is not None:
                    try:
                        on_timeout(self.specs[index])
                    except Exception:  # noqa: BLE001 (best effort: the host is reported already)
                        pass

    def _expire(self, timeout: float) -> List[int]:
        now, expired = time.monotonic(), []
        for index, started in self.starts.items():
            if self.results[index] is None and now - started > timeout:
                self.results[index] = HostResult(_name(self.specs[index]), "failed", None,
                                                 "timed out after %gs" % timeout, now - started,
                                                 int(ExitCode.TIMEOUT))
                expired.append(index)
        return expired


def _batch_size(serial: Union[int, str], total: int) -> int:
    """``serial`` as a count, or as a percentage of the hosts like Ansible's ``serial: 30%``."""
    if isinstance(serial, str) and serial.strip().endswith("%"):
        try:
            percent = float(serial.strip()[:-1])
        except ValueError:
            raise CpctlError("bad serial %r" % serial, ExitCode.USAGE) from None
        return max(1, int(total * percent / 100))
    try:
        size = int(serial)
    except (TypeError, ValueError):
        raise CpctlError("bad serial %r: a count or a percentage" % (serial,), ExitCode.USAGE) from None
    if size < 1:
        raise CpctlError("serial must be at least 1", ExitCode.USAGE)
    return size


def run_rolling(specs: Sequence[Any], fn: Callable[[Any], Any], serial: Union[int, str] = 1,
                keep_going: bool = False, timeout: Optional[float] = None,
                on_timeout: Optional[Callable[[Any], None]] = None) -> List[HostResult]:
    """``fn`` on ``serial`` hosts at a time, batch after batch.

    A batch with a failed or unreachable host stops the roll (a broken control plane must not
    spread to the next masters) unless ``keep_going``; the hosts not reached are "skipped".
    """
    specs = list(specs)
    size = _batch_size(serial, len(specs))
    results: List[HostResult] = []
    for start in range(0, len(specs), size):
        batch = specs[start:start + size]
        results += run_parallel(batch, fn, forks=len(batch), timeout=timeout, on_timeout=on_timeout)
        if not keep_going and any(r.failed for r in results[-len(batch):]):
            results += [HostResult(_name(s), "skipped", None, "not run: an earlier batch failed")
                        for s in specs[start + size:]]
            break
    return results


def stats(results: Sequence[HostResult]) -> Dict[str, Dict[str, int]]:
    """Per host counters, Ansible style: a "changed" host also counts as ok."""
    out: Dict[str, Dict[str, int]] = {}
    for res in results:
        counts = out.setdefault(res.host, dict.fromkeys(STATUSES, 0))
        counts[res.status] += 1
        if res.status == "changed":
            counts["ok"] += 1
    return out


def recap(results: Sequence[HostResult], header: bool = True) -> str:
    """``PLAY RECAP``-like text: ``host : ok=1 changed=0 unreachable=0 failed=0 skipped=0``."""
    table = stats(results)
    width = max((len(h) for h in table), default=0)
    lines = ["PLAY RECAP"] if header else []
    for host, counts in table.items():
        lines.append("%-*s : %s" % (width, host, " ".join("%s=%d" % (k, counts[k]) for k in STATUSES)))
    for res in results:
        if res.error and res.status != "skipped":
            # connect errors already start with the host name: do not say it twice
            named = res.error.startswith(res.host + ": ")
            lines.append(res.error if named else "%s: %s" % (res.host, res.error))
    return "\n".join(lines) + "\n"


def recap_json(results: Sequence[HostResult]) -> str:
    """Machine-readable recap: per-host result and counters, plus an overall ``ok``."""
    doc = {
        "ok": not any(r.failed for r in results),
        "stats": stats(results),
        "hosts": [{"host": r.host, "status": r.status, "data": r.data, "error": r.error, "code": r.code,
                   "elapsed": round(r.elapsed, 3)} for r in results],
    }
    return json.dumps(doc, indent=2, sort_keys=True, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


class ConnectionPool:
    """One SSHHost per host per run, opened lazily and thread-safely, all closed at the end.

    Connections to different hosts open in parallel; two threads asking for the same host share
    one connect. A failed connect is remembered, so a run does not retry (and re-prompt) per step.
    ``connector(spec) -> Host`` defaults to ``cpctl.host.ssh.connect`` with per-host become and
    python taken from the spec; paramiko is imported once, on the first connect. With
    ``options.persist`` the connections come from the keeper (``cpctl.host.keeper``) instead.
    """

    def __init__(self, options: Any = None, connector: Optional[Callable[[Any], Any]] = None) -> None:
        self._options = options
        self._connector = connector or self._ssh_connect
        self._lock = threading.Lock()
        self._slots: Dict[str, "_Slot"] = {}

    def _ssh_connect(self, spec: Any) -> Any:
        import dataclasses

        from cpctl.host.sshconfig import SSHOptions
        with self._lock:
            if self._options is None:
                self._options = SSHOptions()
        options = self._options
        if hasattr(spec, "vars"):
            options = dataclasses.replace(options, become=spec.become, python=spec.python)
        target = getattr(spec, "target", _name(spec))
        if options.persist > 0 and options.become_password is None:
            from cpctl.host import keeper  # no paramiko in this process: the keeper has it
            return keeper.attach(target, options)
        from cpctl.host import ssh
        return ssh.connect(target, options)

    def get(self, spec: Any) -> Any:
        """The open Host for ``spec`` (connecting on first use); raises its connect error."""
        with self._lock:
            slot = self._slots.setdefault(_name(spec), _Slot())
        return slot.get(lambda: self._connector(spec))

    def connect_all(self, specs: Sequence[Any], forks: int = 10) -> List[HostResult]:
        """Open every connection in parallel up front; the results say who is unreachable."""
        return run_parallel(specs, lambda spec: {"changed": False, "host": self.get(spec).name}, forks=forks)

    def close(self) -> None:
        with self._lock:
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            slot.close()

    def abandon(self, spec: Any) -> None:
        """Close the connection of a host given up on (timed out): a request blocked on it fails
        at once, and the agent on the master reads EOF and exits, releasing its lock. A connect
        still in progress is left to its own timeouts; the run does not wait for it."""
        with self._lock:
            slot = self._slots.get(_name(spec))
        if slot is not None and slot.host is not None:
            _quietly_close(slot.host)

    def __enter__(self) -> "ConnectionPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Slot:
    """One host's connection: connected once, by whichever thread comes first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.host: Any = None
        self.error: Optional[BaseException] = None
        self.closed = False

    def get(self, opener: Callable[[], Any]) -> Any:
        with self._lock:
            if self.host is None and self.error is None:
                try:
                    host = opener()
                except Exception as exc:
                    self.error = exc
                    raise
                if self.closed:               # the run gave up while we connected
                    _quietly_close(host)
                    self.error = CpctlError("connection closed: the run gave up on this host",
                                            ExitCode.UNREACHABLE)
                else:
                    self.host = host
            if self.error is not None:
                raise self.error
            return self.host

    def close(self) -> None:
        """Close the connection; one still being made is not waited for (``get`` closes it)."""
        self.closed = True
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.host is not None:
                _quietly_close(self.host)
                self.host = None
        finally:
            self._lock.release()


def _quietly_close(host: Any) -> None:
    try:
        host.close()
    except (OSError, EOFError, CpctlError):
        pass

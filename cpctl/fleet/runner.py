"""Fan work out over many masters: in parallel, or rolling in batches, with an Ansible-like recap.

Independent of what is run: ``fn(spec)`` does the work for one host and returns its data. A
returned dict with ``"changed": True`` (or an object whose ``changed`` attribute is true) marks
the host "changed", anything else "ok". Exceptions are captured per host: ``CpctlError`` with
``ExitCode.UNREACHABLE`` makes the host "unreachable", anything else "failed" (so one bad master
never hides the others' results). ``cpctl.fleet.pool.ConnectionPool`` gives each host one
connection per run. Nothing here knows what a master or a manifest is.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Generic, List, NamedTuple, Optional, Sequence, TypeVar, Union

from cpctl.errors import CpctlError, ExitCode, failure_of

STATUSES = ("ok", "changed", "unreachable", "failed", "skipped")
S = TypeVar("S")            # what names a host: an inventory HostSpec, a target string...
T = TypeVar("T")            # what ``fn`` returns for one host
_POLL = 0.05


@dataclass
class HostResult(Generic[T]):
    """What happened on one host; ``data`` is what ``fn`` returned (None when it did not return),
    ``code`` the ExitCode of a captured CpctlError."""

    host: str
    status: str
    data: Optional[T] = None
    error: Optional[str] = None
    elapsed: float = 0.0
    code: Optional[int] = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "unreachable")


def host_name(spec: object) -> str:
    """The name a host is reported under: ``spec.name``, else the spec itself."""
    return str(getattr(spec, "name", spec))


def _is_changed(data: object) -> bool:
    if isinstance(data, dict):
        return bool(data.get("changed"))
    return bool(getattr(data, "changed", False))


def _error_result(name: str, exc: BaseException, elapsed: float) -> HostResult[T]:
    failure = failure_of(exc)
    status = "unreachable" if failure.code == ExitCode.UNREACHABLE else "failed"
    return HostResult(name, status, None, failure.message, elapsed, int(failure.code))


def run_one(spec: S, fn: Callable[[S], T]) -> HostResult[T]:
    """Run ``fn(spec)`` and turn its outcome, whatever it is, into a HostResult."""
    started = time.monotonic()
    try:
        data = fn(spec)
    except Exception as exc:  # noqa: BLE001 (captured per host by design, reported in the recap)
        return _error_result(host_name(spec), exc, time.monotonic() - started)
    status = "changed" if _is_changed(data) else "ok"
    return HostResult(host_name(spec), status, data, None, time.monotonic() - started)


def run_parallel(specs: Sequence[S], fn: Callable[[S], T], forks: int = 10,
                 timeout: Optional[float] = None,
                 on_timeout: Optional[Callable[[S], None]] = None) -> List[HostResult[T]]:
    """``fn`` on every host, at most ``forks`` at a time; results in the order of ``specs``.

    ``timeout`` bounds each host's run (from when it started): a host still running then is
    reported "failed" (exit code 6) and abandoned; ``on_timeout(spec)`` may unblock it (the
    remote runner closes that host's connection). Workers are daemon threads, so an abandoned
    host never keeps cpctl from exiting: its agent then reads EOF and stops, as after a kill.
    """
    specs = list(specs)
    if not specs:
        return []
    runs = _ParallelRun(specs, fn)
    for _ in range(max(1, min(forks, len(specs)))):
        threading.Thread(target=runs.work, name="cpctl-host", daemon=True).start()
    return runs.collect(timeout, on_timeout)


class _ParallelRun(Generic[S, T]):
    """The shared state of one ``run_parallel``: a queue of hosts, their start times, results."""

    def __init__(self, specs: List[S], fn: Callable[[S], T]) -> None:
        self.specs, self.fn = specs, fn
        self.results: List[Optional[HostResult[T]]] = [None] * len(specs)
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

    def collect(self, timeout: Optional[float], on_timeout: Optional[Callable[[S], None]]) -> List[HostResult[T]]:
        while True:
            with self.changed:
                done = [r for r in self.results if r is not None]
                if len(done) == len(self.results):
                    return done
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
                self.results[index] = HostResult(host_name(self.specs[index]), "failed", None,
                                                 "timed out after %gs" % timeout, now - started,
                                                 int(ExitCode.TIMEOUT))
                expired.append(index)
        return expired


class Serial(NamedTuple):
    """How many hosts a rolling change takes at a time: a count, or a percentage of the hosts."""

    size: int
    percent: bool

    def batch(self, total: int) -> int:
        """The batch size for ``total`` hosts (at least 1)."""
        return max(1, int(total * self.size / 100)) if self.percent else self.size


def parse_serial(value: Union[int, str, "Serial"]) -> Serial:
    """``--serial``: ``N`` hosts or ``N%`` of them (like Ansible's ``serial: 30%``); the one parser."""
    if isinstance(value, Serial):
        return value
    text = str(value).strip()
    number, percent = (text[:-1], True) if text.endswith("%") else (text, False)
    if not number.isdigit() or int(number) < 1 or (percent and int(number) > 100):
        raise CpctlError("--serial %r: a positive number or a percentage like 30%%" % (value,), ExitCode.USAGE)
    return Serial(int(number), percent)


def run_rolling(specs: Sequence[S], fn: Callable[[S], T], serial: Union[int, str, Serial] = 1,
                keep_going: bool = False, timeout: Optional[float] = None,
                on_timeout: Optional[Callable[[S], None]] = None) -> List[HostResult[T]]:
    """``fn`` on ``serial`` hosts at a time, batch after batch.

    A batch with a failed or unreachable host stops the roll (a broken control plane must not
    spread to the next masters) unless ``keep_going``; the hosts not reached are "skipped".
    """
    specs = list(specs)
    size = parse_serial(serial).batch(len(specs))
    results: List[HostResult[T]] = []
    for start in range(0, len(specs), size):
        batch = specs[start:start + size]
        results += run_parallel(batch, fn, forks=len(batch), timeout=timeout, on_timeout=on_timeout)
        if not keep_going and any(r.failed for r in results[-len(batch):]):
            results += [HostResult(host_name(s), "skipped", None, "not run: an earlier batch failed")
                        for s in specs[start + size:]]
            break
    return results


def stats(results: Sequence[HostResult[T]]) -> Dict[str, Dict[str, int]]:
    """Per host counters, Ansible style: a "changed" host also counts as ok."""
    out: Dict[str, Dict[str, int]] = {}
    for res in results:
        counts = out.setdefault(res.host, dict.fromkeys(STATUSES, 0))
        counts[res.status] += 1
        if res.status == "changed":
            counts["ok"] += 1
    return out


def recap(results: Sequence[HostResult[T]], header: bool = True) -> str:
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


def recap_json(results: Sequence[HostResult[T]]) -> str:
    """Machine-readable recap: per-host result and counters, plus an overall ``ok``."""
    doc = {
        "ok": not any(r.failed for r in results),
        "stats": stats(results),
        "hosts": [{"host": r.host, "status": r.status, "data": r.data, "error": r.error, "code": r.code,
                   "elapsed_seconds": round(r.elapsed, 3)} for r in results],
    }
    return json.dumps(doc, indent=2, sort_keys=True, default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)

"""One connection per host for a whole run, opened lazily and in parallel, closed at the end.

Domain-free: what a connection is (SSH, the keeper, a test double) is the ``connector``'s business
(``cpctl.host.connect.open_host`` in cpctl).
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Generic, List, Optional, Protocol, Sequence, TypeVar

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, host_name, run_parallel


class Connection(Protocol):
    """What the pool needs of a connection (a ``Host`` in cpctl): a name, and close."""

    name: str

    def close(self) -> None: ...


S = TypeVar("S")                            # what names a host (an inventory HostSpec)
C = TypeVar("C", bound=Connection)


class ConnectionPool(Generic[S, C]):
    """One connection per host per run, opened lazily and thread-safely, all closed at the end.

    Connections to different hosts open in parallel; two threads asking for the same host share
    one connect. A failed connect is remembered, so a run does not retry (and re-prompt) per step.
    ``connector(spec) -> Host`` opens one.
    """

    def __init__(self, connector: Callable[[S], C]) -> None:
        self._connector = connector
        self._lock = threading.Lock()
        self._slots: Dict[str, _Slot[C]] = {}

    def get(self, spec: S) -> C:
        """The open Host for ``spec`` (connecting on first use); raises its connect error."""
        with self._lock:
            slot: _Slot[C] = self._slots.setdefault(host_name(spec), _Slot())
        return slot.get(lambda: self._connector(spec))

    def connect_all(self, specs: Sequence[S], forks: int = 10) -> List[HostResult[Dict[str, object]]]:
        """Open every connection in parallel up front; the results say who is unreachable."""
        return run_parallel(specs, lambda spec: {"changed": False, "host": self.get(spec).name}, forks=forks)

    def close(self) -> None:
        with self._lock:
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            slot.close()

    def abandon(self, spec: S) -> None:
        """Close the connection of a host given up on (timed out): a request blocked on it fails
        at once, and the agent on the master reads EOF and exits, releasing its lock. A connect
        still in progress is left to its own timeouts; the run does not wait for it."""
        with self._lock:
            slot = self._slots.get(host_name(spec))
        if slot is not None and slot.host is not None:
            _quietly_close(slot.host)

    def __enter__(self) -> "ConnectionPool[S, C]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Slot(Generic[C]):
    """One host's connection: connected once, by whichever thread comes first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.host: Optional[C] = None
        self.error: Optional[BaseException] = None
        self.closed = False

    def get(self, opener: Callable[[], C]) -> C:
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
            assert self.host is not None          # opened above, or the error was raised
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


def _quietly_close(host: Connection) -> None:
    try:
        host.close()
    except (OSError, EOFError, CpctlError):
        pass

"""``MockHost``: this machine's real primitives, in-process, with injected failures - for tests.

The core only ever talks to a ``Host``. A test that wants to know what the core does when the disk
fills up after the manifest moved, when a rename crosses filesystems, or when the node lock is busy
at the third attempt, builds a ``MockHost`` with ``Fault``s and drives the core in-process: no
subprocess, no root, and the files it checks afterwards are real files in a temporary directory.

Every call is recorded in ``calls`` (op name and arguments) so a test can also assert what was NOT
done (nothing written after a refusal, no read of a local path in a remote run, ...).
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from cpctl.agent import fileops
from cpctl.host.base import HostInfo
from cpctl.host.local import LocalHost

# What a fault can be: an errno name (raised as OSError by the call), "lock-busy" (the node lock is
# held by someone else), "EXDEV" on "move" (the rename crosses filesystems: the move then takes the
# real copy path instead of failing, exactly as on a node whose state dir is another mount), or
# "SIGKILL": the process kills itself just before the call (crash tests run it in a child process).
# "EXDEV+<errno>" on "move": the copy across filesystems is made, then removing the source fails
# (a read-only mount, an immutable file). "<errno>-after": the call does its work, then fails (an
# fsync after a rename reporting EIO): the caller must undo a step that failed half way.
# "SIGINT"/"SIGTERM": the process sends itself that signal just before the call (Ctrl-C, a shutdown),
# delivered by Python as the running code sees it (KeyboardInterrupt, or the entry point's handler).
ERRORS = ("ENOSPC", "EXDEV", "EIO", "EACCES", "EPERM", "EROFS", "ENAMETOOLONG", "lock-busy", "SIGKILL", "SIGINT",
          "SIGTERM")
ERRNOS = ("ENOSPC", "EIO", "EACCES", "EPERM", "EROFS", "ENAMETOOLONG")
ANY_OP = "*"


@dataclass
class Fault:
    """Fail the ``at``-th call (1-based) of ``op`` (``"*"``: of any op) - and the next ``times - 1``
    ones - whose path arguments contain ``path`` (any call when ``path`` is empty)."""

    op: str
    error: str
    at: int = 1
    times: int = 1
    path: str = ""
    seen: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.error.startswith("EXDEV+") and self.error[6:] in ERRNOS:
            return
        if self.error.endswith("-after") and self.error[:-6] in ERRNOS:
            return
        if self.error not in ERRORS:
            raise ValueError("unknown fault %r (one of %s)" % (self.error, ", ".join(ERRORS)))

    def hits(self, op: str, args: Mapping[str, object]) -> bool:
        """Count this call if it matches; True when it is one of the calls that must fail."""
        if self.op not in (op, ANY_OP):
            return False
        if self.path and not any(self.path in str(args.get(k, "")) for k in ("path", "src", "dst")):
            return False
        self.seen += 1
        return self.at <= self.seen < self.at + self.times


def _failing(name: str) -> Callable[[str], None]:
    """A remove function that fails with errno ``name``."""
    def remove(path: str) -> None:
        number = getattr(errno, name)
        raise OSError(number, os.strerror(number), path)
    return remove


class MockHost(LocalHost):
    """``LocalHost`` plus a call log and ``Fault``s; ``hostname``/``user`` fake who runs cpctl."""

    name = "mock"

    def __init__(self, faults: Sequence[Fault] = (), hostname: str = "mock-node", user: str = "root") -> None:
        self.faults: List[Fault] = list(faults)
        self.calls: List[Tuple[str, Dict[str, object]]] = []
        self._hostname, self._user = hostname, user
        self._mutex = threading.Lock()

    def fail(self, op: str, error: str, at: int = 1, times: int = 1, path: str = "") -> Fault:
        """Add a fault (counted from now on) and return it."""
        fault = Fault(op, error, at, times, path)
        with self._mutex:
            self.faults.append(fault)
        return fault

    def ops_called(self) -> List[str]:
        return [op for op, _ in self.calls]

    def _call(self, op: str, **args: object) -> Any:
        with self._mutex:
            self.calls.append((op, dict(args)))
            fault = next((f for f in self.faults if f.hits(op, args)), None)
        if fault is None:
            return super()._call(op, **args)
        if fault.error in ("SIGKILL", "SIGINT", "SIGTERM"):
            import signal
            os.kill(os.getpid(), getattr(signal, fault.error))
            if fault.error != "SIGKILL":           # held (signals deferred): the call goes on
                return super()._call(op, **args)
        if fault.error == "lock-busy":
            raise fileops.LockBusy("pid 1 since 2026-01-01T00:00:00Z (injected by MockHost)")
        if fault.error == "EXDEV" and op == "move":
            return fileops.move_across(str(args["src"]), str(args["dst"]))
        if fault.error.startswith("EXDEV+") and op == "move":
            return fileops.move_across(str(args["src"]), str(args["dst"]), remove=_failing(fault.error[6:]))
        if fault.error.endswith("-after"):
            super()._call(op, **args)
            fault = Fault(op, fault.error[:-6])
        number = getattr(errno, fault.error)
        raise OSError(number, os.strerror(number), args.get("path") or args.get("dst") or args.get("src"))

    def info(self) -> HostInfo:
        real = super().info().copy()
        real["hostname"], real["user"], real["sudo_user"] = self._hostname, self._user, None
        return real

    def last(self, op: str) -> Optional[Dict[str, object]]:
        """Arguments of the last call of ``op`` (None: never called)."""
        for name, args in reversed(self.calls):
            if name == op:
                return args
        return None

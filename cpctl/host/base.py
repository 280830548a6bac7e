"""The ``Host`` interface: the same file, lock, exec and HTTP operations locally and remotely.

The core never touches ``os`` for node state; it asks a ``Host``. ``LocalHost`` runs the
primitives of :mod:`cpctl.agent` in-process; ``AgentHost`` sends them to a copy of that
package running as an agent at the other end of a byte stream (an SSH channel, or a local
subprocess in tests). Both raise the same exceptions, so the core cannot tell them apart.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import (
    Any,
    Callable,
    ContextManager,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    cast,
)

from cpctl.agent import fileops, txn

# The shapes of what crosses the agent boundary live with the agent (one source); the product names them here.
from cpctl.agent.shapes import (  # noqa: F401 - named here for the product
    ClockReading,
    DirEntry,
    HistoryBounds,
    HostInfo,
    HttpManyAnswer,
    HttpReply,
    HttpRequest,
    JournalEntry,
    JournalStep,
    NodeApiAccess,
    PeerCert,
    PlanPatch,
    PlanVerdict,
    PlanVerify,
    PodIdentity,
    RevertPlan,
    SnapshotInfo,
    Stat,
    TlsOptions,
    TransactionOutcome,
    TransactionRequest,
)

LockBusy = fileops.LockBusy

# Threads that mostly wait on sockets and hand small answers around (a fan-out's host threads, the
# keeper's relays) wait up to the GIL switch interval at each hand-over: 5 ms by default; measured
# -25% on 20 hosts with this one. Entry points set it (process-wide state is not a library's).
FAST_SWITCH = 0.0005
# SSH handshakes are the opposite: CPU in Python (paramiko's packets, its key exchange) in many
# threads at once, where a switch every 0.5 ms only adds switches. While any runs, the process
# uses Python's default (``HandshakeSwitch``, installed by the entry point): 50 masters, --persist 0: -5% of CPU.
HANDSHAKE_SWITCH = 0.005


class HandshakeSwitch:
    """Counts the SSH handshakes under way in this process; while there is one, the GIL switch
    interval is ``HANDSHAKE_SWITCH``, and what it was before once the last ends. An entry point that
    switched fast for a fan-out installs it (``use_handshake_switch``): the interval is process-wide
    state, which a library never changes by itself (issue 47)."""

    def __init__(self) -> None:
        import threading
        self._lock = threading.Lock()
        self._running = 0
        self._before = 0.0

    @contextmanager
    def running(self) -> Iterator[None]:
        import sys
        with self._lock:
            self._running += 1
            if self._running == 1:
                self._before = sys.getswitchinterval()
                sys.setswitchinterval(max(self._before, HANDSHAKE_SWITCH))
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    sys.setswitchinterval(self._before)


@contextmanager
def _no_switch() -> Iterator[None]:
    yield


#: What an SSH handshake runs under (``cpctl.host.ssh``): nothing, unless an entry point installed
#: ``HandshakeSwitch`` with ``use_handshake_switch``.
handshake_guard: Callable[[], ContextManager[None]] = _no_switch


def use_handshake_switch() -> None:
    """The entry point's choice (a fan-out's CLI, the keeper): handshakes at ``HANDSHAKE_SWITCH``."""
    global handshake_guard
    if handshake_guard is _no_switch:
        handshake_guard = HandshakeSwitch().running


class LineReader(Protocol):
    """What the agent protocol reads from: a pipe, an SSH channel, a keeper's socket."""

    def readline(self, limit: int = -1, /) -> bytes:
        """One line, at most ``limit`` bytes of it (-1: no bound)."""
        ...


class ByteWriter(Protocol):
    """What the agent protocol writes to."""

    def write(self, data: bytes) -> object: ...

    def flush(self) -> object: ...


#: A read-only call the agent may answer ahead (``Host.prefetched``): (op, its arguments).
Call = Tuple[str, Mapping[str, object]]


class RunResult:
    """Outcome of ``Host.run``: exit status and captured output."""

    __slots__ = ("rc", "stdout", "stderr", "cut")

    def __init__(self, rc: int, stdout: bytes, stderr: bytes, cut: int = 0) -> None:
        self.rc, self.stdout, self.stderr, self.cut = rc, stdout, stderr, cut

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Host:
    """Operations cpctl needs on a node. Subclasses implement only ``_call``."""

    name = "localhost"
    is_remote = False

    def _call(self, op: str, **args: object) -> Any:
        """The result of ``op(**args)`` on the node. The one untyped seam: its shape depends on
        ``op``; ``replies.RESULTS`` checks it per op before the typed methods below return it."""
        raise NotImplementedError

    def lstat(self, path: str) -> Optional[Stat]:
        """Metadata of ``path`` (a symlink is reported, not followed), None when absent."""
        return self._call("lstat", path=path)

    def listdir(self, path: str) -> List[str]:
        return self._call("listdir", path=path)

    def scan_dir(self, path: str, limit: int) -> List[DirEntry]:
        """All entries of ``path`` with lstat fields and, for files up to ``limit``, ``data``."""
        return self._call("scan_dir", path=path, limit=limit)

    def read_file(self, path: str, limit: int, follow: bool = False) -> bytes:
        """The bytes of the regular file ``path`` (at most ``limit``, else EFBIG); through a
        symlink only with ``follow`` (kubelet-client-current.pem is one on every node)."""
        if follow:
            return self._call("read_file", path=path, limit=limit, follow=True)
        return self._call("read_file", path=path, limit=limit)

    def read_tail(self, path: str, limit: int) -> bytes:
        """The last ``limit`` bytes of a regular file."""
        return self._call("read_tail", path=path, limit=limit)

    def compress(self, src: str, dst: str) -> None:
        """gzip ``src`` into the new file ``dst`` on the node (``src`` stays)."""
        self._call("compress", src=src, dst=dst)

    def write_atomic(self, path: str, data: bytes, mode: int = 0o600, uid: Optional[int] = None,
                     gid: Optional[int] = None, expect: Optional[str] = None) -> None:
        """Replace ``path`` by ``data`` through a dot-temp file and rename; with ``expect`` (sha256
        hex or "absent") only if ``path`` still holds that (OSError EEXIST/ESTALE otherwise)."""
        if expect is None:
            self._call("write_atomic", path=path, data=data, mode=mode, uid=uid, gid=gid)
        else:
            self._call("write_atomic", path=path, data=data, mode=mode, uid=uid, gid=gid, expect=expect)

    def move(self, src: str, dst: str) -> str:
        """Move a regular file; never replaces ``dst`` (OSError EEXIST). "rename" or "copy"."""
        return self._call("move", src=src, dst=dst)

    def unlink(self, path: str, missing_ok: bool = True) -> bool:
        return self._call("unlink", path=path, missing_ok=missing_ok)

    def makedirs(self, path: str, mode: int = 0o700) -> None:
        self._call("makedirs", path=path, mode=mode)

    def chmod(self, path: str, mode: int) -> None:
        self._call("chmod", path=path, mode=mode)

    def append(self, path: str, data: bytes) -> None:
        self._call("append", path=path, data=data)

    def lock(self, path: str, timeout: float, holder: str) -> None:
        self._call("lock", path=path, timeout=timeout, holder=holder)

    def lock_dir(self, path: str, timeout: float) -> None:
        """flock the directory ``path`` itself (``LockBusy`` after ``timeout`` s); ``unlock`` frees it."""
        self._call("lock_dir", path=path, timeout=timeout)

    def unlock(self, path: str) -> None:
        self._call("unlock", path=path)

    def run(self, argv: Sequence[str], timeout: float = 60.0, stdin: bytes = b"",
            env: Optional[Mapping[str, str]] = None, limit: Optional[int] = None) -> RunResult:
        """Run ``argv`` without a shell on the node; with ``limit`` only the last ``limit`` bytes of
        each output stream are kept (``RunResult.cut`` says how many were dropped)."""
        if limit is None:
            res = self._call("run", argv=list(argv), timeout=timeout, stdin=stdin, env=env)
        else:
            res = self._call("run", argv=list(argv), timeout=timeout, stdin=stdin, env=env, limit=limit)
        return RunResult(res["rc"], res["stdout"], res["stderr"], res.get("cut", 0))

    def http(self, method: str, url: str, headers: Optional[Mapping[str, str]] = None,
             body: Optional[bytes] = None, timeout: float = 5.0,
             tls: Optional[TlsOptions] = None, limit: Optional[int] = None) -> HttpReply:
        """An HTTP request made from the node itself (health endpoints bind to 127.0.0.1), within
        ``timeout`` seconds in total; an answer over ``limit`` bytes is an OSError (EFBIG)."""
        args: Dict[str, object] = {"method": method, "url": url, "headers": headers, "body": body, "timeout": timeout,
                                "tls": tls}
        if limit is not None:
            args["limit"] = limit
        return self._call("http", **args)

    def http_ahead(self, requests: Sequence[HttpRequest]) -> None:
        """These read-only HTTP requests from the node come next in this view (the caller vouches:
        GETs, or etcd's POSTs that read), each with the ``timeout`` it will be asked with: over a
        network round trip they are asked now, together (one ``http_many``), and each answer serves
        the one ``http`` - or ``http_many`` of them all - with exactly those arguments, once, while
        the snapshot lasts. Here: nothing (each is asked when it comes)."""

    def etcd_snapshot(self, url: str, path: str, tls: Optional[TlsOptions], timeout: float,
                      limit: int) -> SnapshotInfo:
        """etcd's snapshot stream at ``url`` written to the new file ``path`` on the node, checked
        (its appended sha256, a bbolt database) before it gets its name (``ops.etcd_snapshot``)."""
        return self._call("etcd_snapshot", url=url, path=path, tls=tls, timeout=timeout, limit=limit)

    def http_many(self, requests: Sequence[HttpRequest], timeout: float) -> List[HttpManyAnswer]:
        """Several HTTP requests made from the node at once, all ending within ``timeout`` seconds:
        one answer per request, in order (``reply``, or ``errno`` and ``error``)."""
        return cast(List[HttpManyAnswer], self._call("http_many", requests=list(requests), timeout=timeout))

    def peer_cert(self, host: str, port: int, timeout: float = 3.0, tls: Optional[TlsOptions] = None) -> PeerCert:
        """The certificate (DER) the TLS server at ``host``:``port`` presents to the node itself,
        unverified (compare it with a file); an OSError when none could be had. ``tls``: a client
        certificate to present (etcd's client and peer ports refuse a handshake without one)."""
        if tls:
            return cast(PeerCert, self._call("peer_cert", host=host, port=port, timeout=timeout, tls=tls))
        return cast(PeerCert, self._call("peer_cert", host=host, port=port, timeout=timeout))

    def transaction(self, request: TransactionRequest) -> TransactionOutcome:
        """Apply or recover one journaled change as a whole on the node (``agent.txn.Transaction``):
        here in-process, through this host's own primitives; a remote host sends it as ONE request."""
        from cpctl.errors import CpctlError
        return txn.transaction(request.copy(), fs=self, tolerated=(OSError, CpctlError))

    @contextmanager
    def prefetched(self, calls: Sequence[Call]) -> Iterator[None]:
        """Within the block, these read-only calls ``[(op, args), ...]`` may be answered from
        one round trip made up front, until the block makes a change; then, and at its end,
        those answers are dropped.

        A host behind a network round trip asks them all at once; this machine answers each
        call when it comes, so here the hint costs nothing and changes nothing. Within a snapshot
        already served (an outer block, a change session's), the calls join it and the block ends
        nothing: the outer one still holds.
        """
        if self._serving():
            self.read_ahead(calls)
            yield
            return
        self._prefetch(calls)
        try:
            yield
        finally:
            self._prefetch([])

    def _serving(self) -> bool:
        """Whether a snapshot is being served (never here)."""
        return False

    def snapshot(self, calls: Sequence[Call]) -> None:
        """``prefetched`` without a block: these reads are asked now, in one round trip, and answered
        from that until this run changes something on the node or calls ``forget`` (a change session
        takes one right after the node lock: what it reads there is what the lock holds)."""
        self._prefetch(calls)

    def read_ahead(self, calls: Sequence[Call]) -> None:
        """These reads will come next: over a network round trip, ask the ones the current snapshot
        does not hold in one go and add them to it (beginning one when none is served). Here: nothing."""

    def forget(self) -> None:
        """Drop what is left of a ``snapshot``: the next reads ask the node again."""
        self._prefetch([])

    def _prefetch(self, calls: Sequence[Call]) -> None:
        """Answer ``calls`` ahead (an empty list forgets what is left); nothing to gain locally."""

    def info(self) -> HostInfo:
        """hostname, user, sudo_user, pid, euid of the process acting on the node (cached)."""
        cached = getattr(self, "_info", None)
        if cached is None:
            cached = self._info = self._call("info")
        return cached

    def clock(self) -> ClockReading:
        """The node's own clocks now (never cached): what decides when an arm is overdue."""
        return cast(ClockReading, self._call("clock"))

    def close(self) -> None:
        """Release the connection, if any (and with it every lock the agent holds)."""

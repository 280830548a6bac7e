"""``AgentHost``: a node reached through a byte stream to the agent, and how an agent starts.

The agent is the package :mod:`cpctl.agent`, assembled into one program (``agent_source``), shipped as
zlib-compressed source over the stream and run
with ``python3 -S -c <loader>`` on the node: nothing is installed there. Requests and answers are
JSON lines; errors come back as the exceptions the local call would raise.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union, cast

import cpctl.agent as agent_package
from cpctl.agent import rpc
from cpctl.agent.shapes import Request
from cpctl.errors import CpctlError, ExitCode
from cpctl.host import replies
from cpctl.host.base import (
    ByteWriter,
    Call,
    Host,
    HttpRequest,
    LineReader,
    LockBusy,
    TransactionOutcome,
    TransactionRequest,
)
from cpctl.host.replies import MAX_REPLY_BYTES, BadReply

HELLO_LIMIT = 512          # bytes of the agent's ready line (or of what a shell printed instead)

#: ``CPCTL_TRACE_ROUNDTRIPS=FILE``: the process counts the agent requests it writes (``RoundTrips``) and
#: writes them as JSON to FILE at exit (tests and benchmarks/changelatency.py read it). Unset: nothing
#: is counted, and ``_request`` pays one test of a None.
TRACE_ENV = "CPCTL_TRACE_ROUNDTRIPS"

#: What identifies a read among the prefetched answers (``_call_key``).
CallKey = Union[str, Tuple[str, Tuple[Tuple[str, Union[str, int]], ...]]]


def raise_remote_error(response: Mapping[str, object]) -> None:
    """Re-raise an agent's (checked) error response as the exception the local call would raise.
    An unexpected error on the master is that host's failure (exit 7), not a bug of this process."""
    kind = response.get("kind")
    if kind == "lock":
        raise LockBusy(str(response["holder"]))
    if kind == "os":
        raise OSError(response["errno"], response["strerror"], response.get("filename"))
    raise CpctlError("agent error: %s" % str(response.get("message"))[:500], ExitCode.ENVIRONMENT)


class RoundTrips:
    """The round trips this process made to agents: one per request written (a ``batch`` is one),
    counted per op, with the ops a batch carried and each request's op and path in order (the first
    ``KEPT`` of them: enough to see where a flow's trips come from)."""

    KEPT = 2000

    def __init__(self) -> None:
        self.ops: Dict[str, int] = {}
        self.batched: Dict[str, int] = {}
        self.calls: List[str] = []
        self.load_bytes = 0
        self.lock = threading.Lock()

    def count(self, op: str, args: Mapping[str, object]) -> None:
        """One request of ``op`` (with ``args``) written to an agent."""
        with self.lock:
            self.ops[op] = self.ops.get(op, 0) + 1
            if op == "batch":
                for request in args.get("requests") or ():       # type: ignore[attr-defined]
                    inner = str(request.get("op"))
                    self.batched[inner] = self.batched.get(inner, 0) + 1
            if len(self.calls) < self.KEPT:
                where = args.get("path") or args.get("src") or args.get("argv") or args.get("url") or ""
                self.calls.append(("%s %s" % (op, where)).strip()[:300])

    def shipped(self, size: int) -> None:
        """``size`` bytes of (compressed) agent modules sent with a request (``agent_load``)."""
        with self.lock:
            self.load_bytes += size

    def report(self) -> Dict[str, object]:
        """What the trace file holds: the total, per op, the batched reads, the calls in order, and the
        bytes of agent modules sent with requests (not the new connection's ``agent_payload``)."""
        with self.lock:
            return {"total": sum(self.ops.values()), "ops": dict(self.ops), "batched": dict(self.batched),
                    "calls": list(self.calls), "load_bytes": self.load_bytes}

    def write(self, path: str) -> None:
        """The report as JSON in ``path`` (at exit; a file that cannot be written is not the run's failure).
        A process that made no request (a keeper started by a traced run) leaves the file alone."""
        if not self.ops:
            return
        try:
            with open(path, "w") as handle:
                json.dump(self.report(), handle, indent=1)
        except OSError:
            pass


def _start_trace() -> Optional[RoundTrips]:
    """A ``RoundTrips`` written at exit to ``$CPCTL_TRACE_ROUNDTRIPS``, or None when that is unset."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return None
    import atexit
    trips = RoundTrips()
    atexit.register(trips.write, path)
    return trips


#: This process's round-trip counter (``CPCTL_TRACE_ROUNDTRIPS``), None when not traced.
TRACE: Optional[RoundTrips] = _start_trace()


class AgentHost(Host):
    """A node reached through a byte stream to ``python3 -c <loader>`` running the agent.

    Requests are serialised with a lock so one stream can serve threads (parallel probes).
    The agent holds the node lock; when the stream closes the agent exits and releases it.
    """

    is_remote = True

    def __init__(self, name: str, reader: LineReader, writer: ByteWriter) -> None:
        self.name = name
        self._reader, self._writer = reader, writer
        self._mutex = threading.Lock()
        self._prefetched: Dict[CallKey, Mapping[str, object]] = {}
        self._ahead: Dict[CallKey, Mapping[str, object]] = {}      # HTTP answered ahead (``http_ahead``)
        self._snapshot = False             # a snapshot is being served (``_prefetch``)
        self._broken: Optional[BadReply] = None
        hello = self._reader.readline(HELLO_LIMIT)
        check_hello(name, hello)
        # ops of AGENT_NEEDS whose modules the agent holds: sent in this session, or (a kept agent) before
        held = hello_loaded(hello)           # (a new agent's names none: no digest computed for it)
        self._loaded: Set[str] = {op for op in AGENT_NEEDS if load_digest(op) in held} if held else set()

    def _prefetch(self, calls: Sequence[Call]) -> None:
        """Ask every call in one ``batch`` round trip. The answers are a snapshot: served again
        to repeated reads, and dropped at the first call that may change the node's files (a write,
        a lock, a command; not an HTTP GET), so no read is answered with what it was before this
        run's own change. While it lasts, a read it did not hold is asked and joins it: asked twice,
        it is one round trip. An empty ``calls`` ends it."""
        reads = [(op, args) for op, args in calls if op in rpc.READ_OPS]
        requests = [{"op": op, "args": args} for op, args in reads]
        answers = self._request("batch", {"requests": requests}) if requests else []
        with self._mutex:
            self._prefetched = {_call_key(op, args): a for (op, args), a in zip(reads, answers)}
            self._snapshot, self._ahead = bool(calls), {}

    def _serving(self) -> bool:
        return self._snapshot

    def read_ahead(self, calls: Sequence[Call]) -> None:
        with self._mutex:
            missing = [(op, args) for op, args in calls
                       if op in rpc.READ_OPS and _call_key(op, args) not in self._prefetched]
        if not missing:
            return
        answers = self._request("batch", {"requests": [{"op": op, "args": args} for op, args in missing]})
        with self._mutex:
            self._prefetched.update((_call_key(op, args), a) for (op, args), a in zip(missing, answers))
            self._snapshot = True

    def http_ahead(self, requests: Sequence[HttpRequest]) -> None:
        """Ask them in ONE ``http_many`` (each within its own timeout) while a snapshot is served;
        each checked answer is kept for the one call that asks it (``_from_ahead``), and dropped with
        the snapshot. Outside a snapshot, or with nothing to ask, nothing is asked."""
        wanted = [dict(r) for r in requests if str(r.get("method", "GET")).upper() in _AHEAD_METHODS]
        if not wanted or not self._serving() or len(wanted) > _AHEAD_LIMIT:
            return
        timeout = max(_seconds(r.get("timeout")) for r in wanted)
        answers = self._request("http_many", {"requests": wanted, "timeout": timeout})
        with self._mutex:
            if self._snapshot:                 # not when another thread's change ended it meanwhile
                self._ahead.update((_http_key(r, timeout), _as_response(a)) for r, a in zip(wanted, answers))

    def _from_ahead(self, op: str, args: Mapping[str, object]) -> Optional[Mapping[str, object]]:
        """The answer ``http_ahead`` holds for this ``http`` (or every request of this ``http_many``),
        taken out: each is served once; None when it holds none (then it is asked as usual)."""
        if op == "http":
            with self._mutex:
                return self._ahead.pop(_http_key(args, None), None)
        requests = args.get("requests")
        if not isinstance(requests, list) or not requests:
            return None
        keys = [_http_key(r, args.get("timeout")) for r in requests]
        with self._mutex:
            if not all(k in self._ahead for k in keys):
                return None
            taken = [self._ahead.pop(k) for k in keys]
        return {"ok": True, "result": [_as_many_answer(t) for t in taken]}

    def _call(self, op: str, **args: object) -> Any:
        if self._snapshot and op == "makedirs" and self._is_dir(str(args.get("path"))):
            return None              # the agent's makedirs leaves an existing dir alone: nothing to ask
        if self._ahead and op in ("http", "http_many"):
            early = self._from_ahead(op, args)
            if early is not None:
                return _result(early)
        if self._snapshot:
            with self._mutex:
                key = _call_key(op, args) if op in rpc.READ_OPS else None
                response = self._prefetched.get(key) if key is not None else None
                if key is None and not _leaves_files(op, args):
                    self._prefetched, self._snapshot, self._ahead = {}, False, {}
            if response is not None:
                return _result(response)
            if key is not None:
                return self._read_into_snapshot(key, op, args)
        return self._request(op, args)

    def transaction(self, request: TransactionRequest) -> TransactionOutcome:
        """The whole transaction in ONE request: the agent runs it on the node (``agent.txn.transaction``)."""
        return cast(TransactionOutcome, self._call("transaction", request=request))

    def _is_dir(self, path: str) -> bool:
        """Whether the snapshot saw a directory at ``path`` (its lstat asked)."""
        with self._mutex:
            seen = self._prefetched.get(_call_key("lstat", {"path": path}))
        result = seen.get("result") if seen is not None and seen.get("ok") else None
        return isinstance(result, Mapping) and result.get("kind") == "dir"

    def _read_into_snapshot(self, key: CallKey, op: str, args: Mapping[str, object]) -> Any:
        """A read the snapshot did not hold: asked now, and its answer (or OSError) kept with the others."""
        try:
            result = self._request(op, args)
        except OSError as exc:
            self._keep(key, {"ok": False, "kind": "os", "errno": exc.errno, "strerror": exc.strerror,
                             "filename": exc.filename})
            raise
        self._keep(key, {"ok": True, "result": result})
        return result

    def _keep(self, key: CallKey, response: Mapping[str, object]) -> None:
        with self._mutex:
            if self._snapshot:                 # not when another thread's change ended it meanwhile
                self._prefetched[key] = response

    def _request(self, op: str, args: Mapping[str, object]) -> Any:
        request: Request = {"op": op, "args": {name: rpc.encode(value) for name, value in args.items()}}
        if TRACE is not None:
            TRACE.count(op, args)
        with self._mutex:
            if self._broken is not None:        # the stream is out of step since a bad reply
                raise self._broken
            if op in AGENT_NEEDS and op not in self._loaded:     # an agent that has them already skips them
                request["load"] = rpc.encode(agent_load(op))
                self._loaded.add(op)
                if TRACE is not None:
                    TRACE.shipped(len(agent_load(op)))
            line = json.dumps(request).encode("utf-8") + b"\n"
            try:
                self._writer.write(line)
                self._writer.flush()
                answer = self._reader.readline(MAX_REPLY_BYTES + 1)
            except (OSError, EOFError) as exc:
                raise CpctlError("%s: connection lost: %s" % (self.name, exc), ExitCode.UNREACHABLE) from None
            if not answer:
                raise CpctlError("%s: connection lost (agent exited)" % self.name, ExitCode.UNREACHABLE)
            try:
                response = replies.checked(self.name, op, args, answer)
            except BadReply as exc:
                self._broken = exc
                raise
        return _result(response)


#: Requests that change nothing on the node's disk, though they are no reads a batch could answer ahead.
_FILE_NEUTRAL_OPS = frozenset(("clock", "http_many"))
_SAFE_METHODS = frozenset(("GET", "HEAD"))


def _leaves_files(op: str, args: Mapping[str, object]) -> bool:
    """Whether ``op`` leaves the node's files as they were, so a snapshot of them stays what this run
    would read: the node's clock, HTTP GETs from the node (health endpoints, the API's pods: what a
    view and a wait ask between their file reads). A write, a move, a lock, a command run, an HTTP
    request that may change something (a PUT of the kubeadm ConfigMap) all end the snapshot."""
    if op in _FILE_NEUTRAL_OPS:
        return op != "http_many" or all(
            isinstance(r, Mapping) and str(r.get("method", "GET")).upper() in _SAFE_METHODS
            for r in args.get("requests") or ())        # type: ignore[attr-defined]
    return op == "http" and str(args.get("method", "")).upper() in _SAFE_METHODS


#: What ``http_ahead`` asks early: reads only (etcd's gateway reads by POST; its caller vouches), at most
#: a view's handful, within ``_AHEAD_TIMEOUT`` when a request names no timeout.
_AHEAD_METHODS = frozenset(("GET", "HEAD", "POST"))
_AHEAD_LIMIT = 64
_AHEAD_TIMEOUT = 5.0
#: ``http``'s arguments and their defaults: what makes two requests the same (``_http_key``).
_HTTP_ARGS: Tuple[Tuple[str, object], ...] = (("method", "GET"), ("url", None), ("headers", None), ("body", None),
                                              ("tls", None), ("limit", None), ("timeout", None))


def _http_key(request: Mapping[str, object], timeout: object) -> CallKey:
    """An HTTP request as a key: ``http``'s arguments with their defaults filled in (``timeout``: the
    request's own, else the one given: an ``http_many``'s), so ``http_ahead``'s request and the call
    that asks it again meet exactly when they would send the same request."""
    args = {name: request.get(name, default) for name, default in _HTTP_ARGS}
    if args["timeout"] is None:
        args["timeout"] = timeout
    args["method"] = str(args["method"]).upper()
    args["timeout"] = float(args["timeout"]) if isinstance(args["timeout"], (int, float)) else None
    args["tls"] = args["tls"] or None
    return _call_key("http", args)


def _seconds(timeout: object) -> float:
    """A request's own timeout, ``_AHEAD_TIMEOUT`` when it names none."""
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else _AHEAD_TIMEOUT


def _as_response(answer: Mapping[str, object]) -> Mapping[str, object]:
    """An (already checked) ``http_many`` answer as the response ``http`` would have had: its reply,
    or its error raised as the same OSError."""
    if "reply" in answer:
        return {"ok": True, "result": answer["reply"]}
    return {"ok": False, "kind": "os", "errno": answer.get("errno"), "strerror": answer.get("error"), "filename": None}


def _as_many_answer(response: Mapping[str, object]) -> Mapping[str, object]:
    """The reverse of ``_as_response``: one answer of ``http_many``."""
    if response.get("ok"):
        return {"reply": response["result"]}
    return {"errno": response.get("errno"), "error": response.get("strerror")}


def _call_key(op: str, args: Mapping[str, object]) -> CallKey:
    """The op and its arguments, as a dict key: two calls get the same key exactly when they send
    the same request. When every argument is a string or an integer (a read's path and limit)
    that is the op and the sorted items (``"1"`` is not ``1``; a bool, which would equal 1, is no
    integer here); otherwise the JSON text of the encoded arguments with sorted keys. (A status
    of 50 masters makes ~1900 keys: the JSON text for each cost ~4 us, ~7 ms of the run's CPU.)"""
    items: List[Tuple[str, Union[str, int]]] = []
    for name, value in sorted(args.items()):
        if not isinstance(value, str) and (not isinstance(value, int) or isinstance(value, bool)):
            return json.dumps([op, rpc.encode(args)], sort_keys=True)
        items.append((name, value))
    return op, tuple(items)


def _result(response: Mapping[str, object]) -> Any:
    """An agent's (decoded) answer: its result, or its error raised as the local call would."""
    if not response.get("ok"):
        raise_remote_error(response)
    return response["result"]


#: How many loaded programs a ready line may name (``AGENT_NEEDS`` has two), so it stays within HELLO_LIMIT.
MAX_LOADED = 4


@functools.cache
def load_digest(op: str) -> str:
    """The sha256 (hex) of the program ``agent_load(op)`` carries (an op of ``AGENT_NEEDS``), as the
    agent names what it loaded (``rpc.load``)."""
    import hashlib
    return hashlib.sha256(assemble(AGENT_NEEDS[op], loaded=AGENT_BASE)).hexdigest()


def _digest_list(value: object) -> Optional[List[str]]:
    """``value`` when it is a list of at most MAX_LOADED sha256 hex digests (what an agent reports loaded),
    else None: it comes from the master."""
    if not isinstance(value, list) or len(value) > MAX_LOADED:
        return None
    if not all(isinstance(d, str) and len(d) == 64 and all(c in "0123456789abcdef" for c in d) for d in value):
        return None
    return list(value)


def hello_loaded(line: bytes) -> Set[str]:
    """The programs a ready line says the agent holds (``kept_hello``); none when it names none or
    says it in any other shape (then the modules are sent again, and an agent that has them skips them)."""
    try:
        hello = json.loads(line[:HELLO_LIMIT])
    except ValueError:
        return set()
    return set(_digest_list(hello.get("loaded")) or ()) if isinstance(hello, dict) else set()


def kept_hello(hello: bytes, reset_answer: bytes) -> bytes:
    """The ready line the keeper replays to the next run of a kept agent: ``hello`` with what the agent's
    ``reset`` answer (one checked line from the master) says it has loaded; ``hello`` as it was when that
    answer says nothing usable."""
    try:
        answer = json.loads(reset_answer[:4096])
        ready = json.loads(hello[:HELLO_LIMIT])
    except ValueError:
        return hello
    result = answer.get("result") if isinstance(answer, dict) else None
    loaded = _digest_list(result.get("loaded")) if isinstance(result, dict) else None
    if not loaded or not isinstance(ready, dict) or ready.get("ready") is not True:
        return hello
    line = json.dumps({"ready": True, "pid": ready.get("pid"), "loaded": loaded}).encode("ascii") + b"\n"
    return line if len(line) <= HELLO_LIMIT else hello


def check_hello(name: str, line: bytes) -> None:
    """The agent's first line says it runs; anything else (a shell error, sudo's prompt) is reported."""
    if not line.startswith(b'{"ready"'):
        line = "".join(c if c.isprintable() else " " for c in line[:200].decode("utf-8", "replace")).encode()
        raise CpctlError("%s: agent did not start: %s" % (name, line[:200].decode("utf-8", "replace")
                                                       or "no answer"), ExitCode.UNREACHABLE)


#: The modules of ``cpctl.agent`` in the order the program defines them: each after those it imports
#: (``assemble`` checks it). The armed revert (``ops.confirm``) is all of them, one file.
AGENT_MODULES = ("shapes", "fileops", "httpops", "rpc", "etcdio", "journalseal", "txn", "tinyyaml", "putback",
                 "crictlread", "revertplan", "noderevert")
#: What a new connection ships (``agent_payload``): the files, HTTP and the protocol - every read of a view.
AGENT_BASE = ("shapes", "fileops", "httpops", "rpc")
#: The ops whose modules are not shipped at the start: sent with the op's first request in a session
#: (``AgentHost._request``; ``rpc.load`` runs them on the node when it lacks the op): no extra round trip.
AGENT_NEEDS: Dict[str, Tuple[str, ...]] = {"transaction": ("journalseal", "txn"), "etcd_snapshot": ("etcdio",)}


@functools.cache
def agent_source() -> bytes:
    """The agent program shipped to remote nodes, and armed next to a revert plan: the modules of
    ``cpctl.agent`` as ONE program (``assemble``)."""
    return assemble(AGENT_MODULES)


@functools.cache
def agent_load(op: str) -> bytes:
    """The modules ``op`` needs beyond ``AGENT_BASE`` (``AGENT_NEEDS``), zlib-compressed: what its first
    request of a session carries (``rpc.load``)."""
    import zlib
    return zlib.compress(assemble(AGENT_NEEDS[op], loaded=AGENT_BASE), 9)


def assemble(names: Sequence[str], loaded: Sequence[str] = ()) -> bytes:
    """The modules ``names`` of ``cpctl.agent`` as one program (to run after ``loaded``), in that order,
    each without its ``from cpctl.agent.X import ...`` lines: the modules were cut from one namespace and no two define
    the same name, so the program needs no importer on the node (nothing from importlib to load, no
    module objects, one ``compile``), and the armed revert stays one file verified by one sha256.
    Each module is shipped without its typing (``agentcut.untyped``): no ``typing`` import on the master.
    A module that imports a sibling not before it, or cpctl outside the package, is a bug: ValueError."""
    from cpctl.host import agentcut  # ast: only where a program is assembled
    directory = os.path.dirname(os.path.abspath(agent_package.__file__))
    parts: List[str] = []
    seen: Set[str] = set(loaded)
    for name in names:
        with open(os.path.join(directory, name + ".py"), "rb") as handle:
            parts.append(agentcut.untyped(name, handle.read(), seen))
        seen.add(name)
    return "\n\n".join(parts).encode("utf-8")


#: Bytes of agent source the loader accepts (after decompression), and of the compressed program it reads.
AGENT_SOURCE_LIMIT = 4 << 20
AGENT_PACKED_LIMIT = 1 << 20


@functools.cache
def agent_payload() -> bytes:
    """What a new agent reads first on stdin: ``"LEN\n"`` and the agent's base (``AGENT_BASE``: what a
    view reads with; a change's modules follow with its first request, ``agent_load``), zlib-compressed
    (LEN bytes). The master compiles it: shipping compiled code too (marshal, ~250 KB, ~110 KB
    compressed) would put a new connection over its 100 KB; the source compresses to ~48 KB, and
    compiling it is CPU an agent pays once per connection, which the keeper keeps open
    (benchmarks/RESULTS.md §15 has both measured). Built once per process."""
    import zlib
    packed = zlib.compress(assemble(AGENT_BASE), 9)
    return b"%d\n" % len(packed) + packed


def agent_bootstrap(python: str = "python3") -> List[str]:
    """argv that starts an agent reading its program first, then requests, from stdin.

    The first stdin line gives the length of the compressed source (see ``agent_payload``); the
    loader reads exactly that (at most ``AGENT_PACKED_LIMIT``), inflates at most
    ``AGENT_SOURCE_LIMIT`` bytes, compiles and runs it. Nothing is written to the node's disk.
    """
    loader = ("import sys,zlib;r=sys.stdin.buffer;n=int(r.readline(32));0<n<=%d or sys.exit('cpctl: bad agent');"
              "z=zlib.decompressobj();s=z.decompress(r.read(n),%d);"
              "(z.unconsumed_tail or not z.eof) and sys.exit('cpctl: bad agent');"
              "g={'__name__':'cpctl_agent'};exec(compile(s,'cpctl-agent','exec'),g);"
              "g['agent_main']();sys.stdout.flush();import os;os._exit(0)") % (AGENT_PACKED_LIMIT, AGENT_SOURCE_LIMIT)
    # -S: the agent is standard-library only, so skip site (and any .pth hooks) on the master.
    # os._exit once served (locks released, answers flushed): interpreter teardown is CPU the
    # master spends per run for nothing.
    return [python, "-S", "-c", loader]


class SubprocessAgentHost(AgentHost):
    """An agent in a local child process: the remote protocol without SSH (tests, sudo)."""

    def __init__(self, argv_prefix: Optional[Sequence[str]] = None) -> None:
        argv = list(argv_prefix or []) + agent_bootstrap(sys.executable)
        import subprocess  # not at module level: remote runs import this module, and never need it
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env=dict(os.environ))
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(agent_payload())
        self._proc.stdin.flush()
        super().__init__("agent:%d" % self._proc.pid, self._proc.stdout, self._proc.stdin)

    def close(self) -> None:
        import subprocess
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()

"""The agent's request protocol: the node's clocks, ``OPS`` (what a request may name), ``batch`` of reads,
bytes as base64, ``handle`` and the JSON-lines loop ``agent_main``.

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import binascii
import os
import sys
import time
from typing import BinaryIO, Callable, Dict, Iterable, List, NoReturn, Optional, Tuple

from cpctl.agent.fileops import (
    _HELD_LOCKS,
    LockBusy,
    append,
    chmod,
    compress,
    fsync_dir,
    info,
    listdir,
    lock,
    lock_dir,
    lstat,
    makedirs,
    move,
    read_file,
    read_tail,
    run,
    scan_dir,
    unlink,
    unlock,
    write_atomic,
)
from cpctl.agent.httpops import _CONNECTIONS, _b64, http, http_many, peer_cert
from cpctl.agent.shapes import ClockReading, Reply, Request, ResetAnswer

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boottime() -> float:
    """CLOCK_BOOTTIME in seconds: monotonic (a wall-clock step does not move it), counting suspend,
    restarting at boot (``time.CLOCK_BOOTTIME``, Linux; CLOCK_MONOTONIC where Python lacks it)."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


def clock() -> ClockReading:
    """The node's clocks at one instant: wall time, CLOCK_BOOTTIME and the boot id they belong to
    ("" where the kernel does not say): what decides when an unconfirmed change is overdue."""
    try:
        with open(BOOT_ID_PATH, "rb") as handle:
            boot_id = handle.read(64).decode("ascii", "replace").strip()
    except OSError:
        boot_id = ""
    return {"time": time.time(), "boottime": boottime(), "boot_id": boot_id}


def reset() -> ResetAnswer:
    """Forget the run this agent served: release its locks, close its HTTP connections; say which
    programs it has loaded (``load``: their digests), which the next run need not send.

    The connection keeper sends it when a run hangs up with every request answered, before
    the same agent serves the next run; the next run then finds the node as after an exit.
    """
    for path in list(_HELD_LOCKS):
        unlock(path)
    for conn in _CONNECTIONS.values():
        conn.close()
    _CONNECTIONS.clear()
    return {"pid": os.getpid(), "loaded": list(_LOADED)}


# Operations that change nothing on the node: the only ones a ``batch`` may carry.
READ_OPS = ("lstat", "listdir", "scan_dir", "read_file", "read_tail", "info", "peer_cert")


def batch(requests: List[Request]) -> List[Reply]:
    """Answer several read-only requests in one round trip, in order, each as ``handle`` would.

    A view (status, check) reads a handful of paths before it decides anything; over SSH each
    separate read would cost a network round trip, and through the keeper a relay as well.
    Changes are never batched: each one is a separate, acknowledged step of the protocol.
    """
    answers: List[Reply] = []
    for request in requests:
        if request.get("op") not in READ_OPS:
            answers.append({"ok": False, "kind": "error", "message": "not batchable: %r" % request.get("op")})
        else:
            answers.append(handle(request))
    return answers


#: Every op a request may name (its arguments differ from op to op: what ``handle`` calls them with is
#: the request's, checked by each op)
OPS: Dict[str, Callable[..., object]] = {  # type: ignore[explicit-any]  # one registry of differing signatures
    "lstat": lstat, "listdir": listdir, "scan_dir": scan_dir, "read_file": read_file, "read_tail": read_tail,
    "compress": compress,
    "write_atomic": write_atomic, "move": move, "unlink": unlink, "makedirs": makedirs,
    "chmod": chmod, "append": append, "lock": lock, "lock_dir": lock_dir, "unlock": unlock, "run": run,
    "http": http, "http_many": http_many, "peer_cert": peer_cert,
    "info": info, "clock": clock, "fsync_dir": fsync_dir, "batch": batch, "reset": reset,
}

# Values of these keys travel base64-encoded over the agent protocol.
BYTES_KEYS = ("data", "stdin", "stdout", "stderr", "body", "cert_data", "key_data", "ca_data", "der")


def encode(value: object) -> object:
    """JSON-safe form of an op's arguments or result (bytes become {"b64": ...})."""
    if isinstance(value, bytes):
        return {"b64": _b64(value)}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value: object) -> object:
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            return binascii.a2b_base64(value["b64"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def handle(request: object) -> Reply:
    """Run one request dict {"op", "args"} and return the response dict. A request may carry ``load``:
    the (compressed) modules that define its op, run first when this agent does not have the op yet.
    A line that is no request, or a request whose ``args`` or ``load`` have another shape, is an error."""
    try:
        op, fields = _op_of(request)
        if fields.get("load") is not None and op not in OPS:
            source = decode(fields["load"])
            if not isinstance(source, bytes):
                raise TypeError("what to load is not bytes")
            load(source)
        args = decode(fields.get("args") or {})
        if not isinstance(args, dict):
            raise TypeError("the arguments of %s are not an object" % op)
        result = OPS[op](**args)
        return {"ok": True, "result": encode(result)}
    except LockBusy as exc:
        return {"ok": False, "kind": "lock", "holder": exc.holder}
    except OSError as exc:
        return {"ok": False, "kind": "os", "errno": exc.errno, "strerror": exc.strerror or str(exc),
                "filename": exc.filename}
    except Exception as exc:  # noqa: BLE001 - report, keep serving: the caller decides what is fatal
        return {"ok": False, "kind": "error", "message": "%s: %s" % (type(exc).__name__, exc)}


def _op_of(request: object) -> Tuple[str, Dict[str, object]]:
    """The op ``request`` names, and the request as an object; TypeError when it is no object naming one."""
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        raise TypeError("not a request (an object with an op)")
    return request["op"], request


LOAD_LIMIT = 4 << 20     # bytes of program text one ``load`` may inflate to


def load(source: bytes) -> List[str]:
    """Add modules the client did not ship when the agent started (``host.agent.AGENT_NEEDS``):
    ``source`` is their program text, zlib-compressed, as ``host.agent.assemble`` joins modules; it runs
    in this program's own namespace, where each module's ops add themselves to ``OPS``. Bounded: at
    most ``LOAD_LIMIT`` bytes inflated, one whole compressed stream. Returns the ops served now."""
    import zlib
    inflate = zlib.decompressobj()
    text = inflate.decompress(source, LOAD_LIMIT)
    if inflate.unconsumed_tail or not inflate.eof:
        raise ValueError("what to load is not one compressed program of at most %d bytes" % LOAD_LIMIT)
    exec(compile(text, "cpctl-agent", "exec"), globals())   # the client's own code, as at the start
    import hashlib
    _LOADED.append(hashlib.sha256(text).hexdigest())
    return sorted(OPS)


#: The sha256 (hex) of each program ``load`` ran, in order: ``reset`` reports them, so the keeper's next
#: run sends none of them again (``host.agent.AgentHost``: "cached in the keeper by digest").
_LOADED: List[str] = []


OPS["load"] = load


class _ScanContext:
    """What ``_json.make_scanner`` reads from ``json.JSONDecoder``: its default settings."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_JSON_WHITESPACE = " \t\n\r"
_CODEC_SAMPLE = {"ok": True, "result": [1, -2.5, None, False, "\u00e9\n\"", {"b64": "AA=="}], "n": 10 ** 20}
_CODEC_SAMPLE_TEXT = ('{"ok": true, "result": [1, -2.5, null, false, "\\u00e9\\n\\"", {"b64": "AA=="}], '
                      '"n": 100000000000000000000}')


def _unencodable(value: object) -> NoReturn:
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


def _json_codec() -> Tuple[Callable[[str], object], Callable[[object], str]]:
    """``(loads, dumps)`` for the agent's JSON lines, the same text as ``json.dumps`` writes.

    ``import json`` costs a master ~13 ms of CPU at every agent start (it imports ``re`` and
    ``enum`` to compile patterns it only uses without its C accelerator), a third of the start.
    That accelerator, ``_json``, is used here directly. It is CPython's private module, so the
    codec first checks itself on a sample and falls back to ``json`` if anything differs.
    """
    try:
        import _json
        scan = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]  # duck-typed like JSONDecoder
        write = _json.make_encoder(None, _unencodable, _json.encode_basestring_ascii, None, ": ", ", ",
                                   False, False, True)

        def loads(text: str) -> object:
            start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
            try:
                value, end = scan(text, start)
            except StopIteration as exc:
                raise ValueError("not JSON at character %s" % exc.value) from None
            if text[end:].strip(_JSON_WHITESPACE):
                raise ValueError("extra data after JSON at character %d" % end)
            return value

        def dumps(value: object) -> str:
            return "".join(write(value, 0))

        if dumps(_CODEC_SAMPLE) == _CODEC_SAMPLE_TEXT and loads(_CODEC_SAMPLE_TEXT) == _CODEC_SAMPLE:
            return loads, dumps
    except Exception:  # noqa: BLE001 - any surprise in a private module: use the public one
        pass
    import json
    return json.loads, json.dumps


def agent_main(stdin: Optional[Iterable[bytes]] = None, stdout: Optional[BinaryIO] = None) -> None:
    """Serve requests, one JSON object per line, until EOF; then release every lock."""
    lines = stdin or sys.stdin.buffer
    out = stdout or sys.stdout.buffer
    loads, dumps = _json_codec()
    out.write(b'{"ready": true, "pid": %d}\n' % os.getpid())
    out.flush()
    try:
        for line in lines:
            if not line.strip():
                continue
            response = handle(loads(line.decode("utf-8")))
            out.write(dumps(response).encode("utf-8") + b"\n")
            out.flush()
    finally:
        for path in list(_HELD_LOCKS):
            unlock(path)

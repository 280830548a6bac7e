"""What an agent may answer: every reply line is bounded, parsed and type-checked before use.

The agent runs on a master, and a compromised master controls what it says. A reply that is too
long, not JSON, nested too deeply, not an object, or whose result has the wrong shape for the
request (a listing whose names hold ``/``, a read longer than its limit, a stat without a size)
is that host's failure - ``BadReply``, exit 8 like a broken connection, one line naming the host -
never an ``AttributeError`` deep in a command (exit 70), and never a reason to read a line of any
length into memory: ``MAX_REPLY_BYTES`` bounds it before it is parsed.
"""

from __future__ import annotations

import json
from typing import Callable, Dict, Mapping, Optional

from cpctl.agent import httpops, rpc
from cpctl.errors import CpctlError, ExitCode

# The largest answer cpctl asks for is a batch of view reads: a scan of the manifests dir (each
# manifest at most 10 MiB) with the history's tail (64 MiB), base64 on the wire (4/3).
MAX_REPLY_BYTES = 128 << 20
STAT_KINDS = ("file", "dir", "symlink", "other")


class BadReply(CpctlError):
    """The agent answered something that is not a valid reply to the request."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__("%s: bad reply from the agent (%s): the master may be compromised or broken"
                         % (host, why), ExitCode.UNREACHABLE)


class _Shape(Exception):
    """A reply field of the wrong type; the message names the field, never its value."""


def parse_reply(line: bytes, limit: int = MAX_REPLY_BYTES) -> Dict[str, object]:
    """One reply line as the decoded response object; ``_Shape`` for anything else."""
    if len(line) > limit:
        raise _Shape("longer than %d bytes" % limit)
    if not line.endswith(b"\n"):
        raise _Shape("cut off before its end")
    try:
        value = rpc.decode(json.loads(line.decode("utf-8")))
    except RecursionError:
        raise _Shape("nested too deeply") from None
    except (ValueError, TypeError, UnicodeDecodeError):
        raise _Shape("not JSON") from None
    if not isinstance(value, dict):
        raise _Shape("not an object")
    return value


def check_response(op: str, args: Mapping[str, object], response: object) -> Dict[str, object]:
    """``response`` checked as the answer to ``op(**args)``; raises ``_Shape``."""
    if not isinstance(response, dict) or not isinstance(response.get("ok"), bool):
        raise _Shape("no ok field")
    if not response["ok"]:
        _check_error(response)
        return response
    if "result" not in response:
        raise _Shape("no result")
    checker = RESULTS.get(op)
    if checker is not None:
        checker(response["result"], args)
    return response


def _check_error(response: Mapping[str, object]) -> None:
    kind = response.get("kind")
    if kind == "lock":
        _text(response.get("holder"), "holder")
    elif kind == "os":
        _int(response.get("errno"), "errno", allow_none=True)
        _text(response.get("strerror"), "strerror")
        if response.get("filename") is not None:
            _text(response.get("filename"), "filename")
    elif kind == "error":
        _text(response.get("message"), "message")
    else:
        raise _Shape("an error of unknown kind")


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise _Shape("%s is not text" % what)
    return value


def _int(value: object, what: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Shape("%s is not an integer" % what)


def _bytes(value: object, what: str, limit: Optional[int] = None) -> None:
    if not isinstance(value, bytes):
        raise _Shape("%s is not bytes" % what)
    if limit is not None and len(value) > limit:
        raise _Shape("%s is longer than the %d bytes asked for" % (what, limit))


def file_name(value: object, what: str) -> str:
    """A name from a directory listing: one path component, as the kernel returns them."""
    name = _text(value, what)
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise _Shape("%s is not a file name" % what)
    return name


def _stat(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise _Shape("%s is not an object" % what)
    if value.get("kind") not in STAT_KINDS:
        raise _Shape("%s.kind is not a file kind" % what)
    for key in ("mode", "uid", "gid", "size", "dev"):
        _int(value.get(key), "%s.%s" % (what, key))
    if value["size"] < 0:
        raise _Shape("%s.size is negative" % what)
    mtime = value.get("mtime")
    if not isinstance(mtime, (int, float)) or isinstance(mtime, bool):
        raise _Shape("%s.mtime is not a number" % what)
    return value


def _lstat(result: object, args: Mapping[str, object]) -> None:
    if result is not None:
        _stat(result, "lstat")


def _listdir(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, list):
        raise _Shape("listdir is not a list")
    for name in result:
        file_name(name, "a listed name")


def _scan_dir(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, list):
        raise _Shape("scan_dir is not a list")
    limit = args.get("limit")
    for entry in result:
        _stat(entry, "an entry")
        file_name(entry.get("name"), "an entry's name")
        if "data" in entry:
            _bytes(entry["data"], "an entry's data", limit if isinstance(limit, int) else None)
        for key in ("target", "error"):
            if key in entry:
                _text(entry[key], "an entry's " + key)
        if entry.get("target_kind") is not None and entry["target_kind"] not in STAT_KINDS:
            raise _Shape("an entry's target_kind is not a file kind")
        if "target_size" in entry:
            _int(entry["target_size"], "an entry's target_size")


def _read(result: object, args: Mapping[str, object]) -> None:
    limit = args.get("limit")
    _bytes(result, "the file's bytes", limit if isinstance(limit, int) else None)


def _move(result: object, args: Mapping[str, object]) -> None:
    if result not in ("rename", "copy"):
        raise _Shape("move did not say rename or copy")


def _unlink(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, bool):
        raise _Shape("unlink did not say true or false")


def _run(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("run is not an object")
    _int(result.get("rc"), "rc")
    limit = args.get("limit")
    for key in ("stdout", "stderr"):
        _bytes(result.get(key), key, limit if isinstance(limit, int) else None)
    if "cut" in result:
        _int(result["cut"], "cut")


def _http(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("http is not an object")
    _int(result.get("status"), "status")
    headers = result.get("headers")
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise _Shape("headers are not text")
    limit = args.get("limit")
    _bytes(result.get("body"), "body", limit if isinstance(limit, int) else httpops.HTTP_BODY_LIMIT)


def _http_many(result: object, args: Mapping[str, object]) -> None:
    requests = args.get("requests")
    if not isinstance(requests, list) or not isinstance(result, list) or len(result) != len(requests):
        raise _Shape("http_many is not one answer per request")
    for request, answer in zip(requests, result):
        if not isinstance(answer, dict):
            raise _Shape("an http_many answer is not an object")
        if "reply" in answer:
            _http(answer["reply"], request if isinstance(request, dict) else {})
        else:
            _int(answer.get("errno"), "errno")
            _text(answer.get("error"), "error")
            if len(str(answer["error"])) > 200:
                raise _Shape("an http_many error is too long")


def _peer_cert(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("peer_cert is not an object")
    _bytes(result.get("der"), "der", httpops.PEER_CERT_LIMIT)
    stamp = result.get("time")
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or stamp != stamp:
        raise _Shape("time is not a number")


def _info(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("info is not an object")
    for key in ("hostname", "user", "python"):
        _text(result.get(key), key)
    if result.get("sudo_user") is not None:
        _text(result["sudo_user"], "sudo_user")
    _int(result.get("pid"), "pid")
    _int(result.get("euid"), "euid")


def _clock(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("clock is not an object")
    for key in ("time", "boottime"):
        stamp = result.get(key)
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or stamp != stamp or not 0 <= stamp < 1e12:
            raise _Shape("%s is not a number" % key)
    _text(result.get("boot_id"), "boot_id")
    if len(str(result["boot_id"])) > 64:
        raise _Shape("boot_id is too long")


def _etcd_snapshot(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("etcd_snapshot is not an object")
    for key in ("size", "revision", "keys", "total_size"):
        _int(result.get(key), key)
    digest = result.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise _Shape("sha256 is not a hex digest")


def _batch(result: object, args: Mapping[str, object]) -> None:
    requests = args.get("requests")
    if not isinstance(requests, list):
        requests = []
    if not isinstance(result, list) or len(result) != len(requests):
        raise _Shape("batch is not one answer per request")
    for request, answer in zip(requests, result):
        check_response(request["op"], request.get("args") or {}, answer)


def _reset(result: object, args: Mapping[str, object]) -> None:
    if not isinstance(result, dict):
        raise _Shape("reset is not an object")
    _int(result.get("pid"), "pid")
    loaded = result.get("loaded", [])
    if not isinstance(loaded, list) or len(loaded) > 16 or not all(isinstance(d, str) and len(d) == 64
                                                                   for d in loaded):
        raise _Shape("reset's loaded is not a short list of digests")


TRANSACTION_STATES = ("completed", "aborted", "rolled_back", "nowhere", "unrecordable", "bad_key", "no_key",
                      "conflict", "unstaged")
MAX_STEP_WORDS = 64           # failed/not undone steps named in one outcome (a change has a handful)


def _transaction(result: object, args: Mapping[str, object]) -> None:
    """A ``TransactionOutcome``: a known state, short texts, at most one word per step."""
    if not isinstance(result, dict) or result.get("state") not in TRANSACTION_STATES:
        raise _Shape("transaction is not an outcome")
    if not isinstance(result.get("kept"), bool):
        raise _Shape("transaction.kept is not true or false")
    for key in ("failed", "not_undone"):
        words = result.get(key, [])
        if not isinstance(words, list) or len(words) > MAX_STEP_WORDS or \
                not all(isinstance(w, str) and len(w) <= 4096 for w in words):
            raise _Shape("transaction.%s is not a list of step texts" % key)
    for key in ("why", "path"):
        if key in result and (not isinstance(result[key], str) or len(result[key]) > 4096):
            raise _Shape("transaction.%s is not text" % key)
    if result.get("state") in ("aborted",) and not result.get("failed"):
        raise _Shape("an aborted transaction names no failed step")
    if result.get("state") in ("bad_key", "no_key", "unstaged", "unrecordable") and "why" not in result:
        raise _Shape("transaction.why is missing")
    if result.get("state") == "conflict" and "path" not in result:
        raise _Shape("transaction.path is missing")
    _int(result.get("errno"), "transaction.errno", allow_none=True)


# The results cpctl uses; the other ops (writes, locks) answer null, and cpctl never reads it.
RESULTS: Dict[str, Callable[[object, Mapping[str, object]], None]] = {
    "lstat": _lstat, "listdir": _listdir, "scan_dir": _scan_dir, "read_file": _read, "read_tail": _read,
    "move": _move, "unlink": _unlink, "run": _run, "http": _http, "http_many": _http_many, "peer_cert": _peer_cert,
    "etcd_snapshot": _etcd_snapshot,
    "info": _info, "clock": _clock, "batch": _batch, "reset": _reset, "transaction": _transaction,
}


def checked(host: str, op: str, args: Mapping[str, object], line: bytes) -> Dict[str, object]:
    """The reply ``line`` to ``op(**args)``, parsed and checked; ``BadReply`` naming ``host``."""
    try:
        return check_response(op, args, parse_reply(line))
    except _Shape as exc:
        raise BadReply(host, str(exc)) from None

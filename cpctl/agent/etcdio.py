"""etcd snapshots streamed from the member's JSON gateway (checked against etcd's sha256) and a
bbolt database's revision and key count (``bolt_status``).

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import binascii
import errno
import os
import time
from typing import TYPE_CHECKING, Iterator, Optional, Set, Tuple, TypedDict

from cpctl.agent.fileops import _unlink_quiet, _write_all, fsync_dir, lstat, rename_noreplace, temp_name
from cpctl.agent.httpops import (
    _CHUNKED,
    _UNTIL_CLOSE,
    _host_header,
    _http_body,
    _http_chunk_end,
    _http_chunk_size,
    _http_connect,
    _http_failure,
    _http_head,
    _http_headers,
    _http_request,
    _http_target,
    _HttpConnection,
    _HttpError,
    _printable,
)
from cpctl.agent.rpc import OPS
from cpctl.agent.shapes import SnapshotInfo, TlsOptions

if TYPE_CHECKING:
    import hashlib
    import types


class _Streamed(TypedDict):
    """What ``_snapshot_message`` keeps between messages: the running sha256, the last 32 bytes seen
    (etcd's sha256 of them all when the stream ends), bytes written, their limit, the file written."""

    hash: "hashlib._Hash"
    held: bytes
    size: int
    limit: int
    fd: int


class _BoltMeta(TypedDict):
    """The meta page ``bolt_status`` reads the tree from: its root page, page count, txid, page size."""

    root: int
    pgid: int
    txid: int
    page_size: int


class _BoltWalk(TypedDict):
    """What a walk of the bbolt tree keeps: keys and revision counted, the file, its meta, pages seen."""

    keys: int
    revision: int
    fd: int
    meta: _BoltMeta
    struct: "types.ModuleType"
    seen: Set[int]


class _BoltCount(TypedDict):
    """What ``bolt_status`` counts (``etcdutl snapshot status``): revision, totalKey, totalSize."""

    revision: int
    keys: int
    total_size: int

# --------------------------------------------------------------------------- etcd snapshots

SNAPSHOT_MESSAGE_LIMIT = 4 << 20   # one streamed message: etcd 3.5 sends 32 KiB blobs (~44 KiB as JSON)
SNAPSHOT_HASH_SIZE = 32            # etcd appends the sha256 of the database to the stream
BOLT_MAGIC = 0xED0CDAED
BOLT_PAGE_LIMIT = 1 << 16          # bbolt's page size is the OS page size (4 KiB; 64 KiB at most)
BOLT_DEPTH_LIMIT = 64


def etcd_snapshot(url: str, path: str, tls: Optional[TlsOptions] = None, timeout: float = 3600.0,
                  limit: int = 1 << 40) -> SnapshotInfo:
    """``POST url`` (etcd's ``/v3/maintenance/snapshot`` on its v3 JSON gateway) streamed into a
    new file ``path`` here on the node, never held in memory: each message's base64 ``blob`` is
    written to a dot-temp sibling (0600) as it arrives. The stream is etcd's database followed by
    the sha256 of it (etcd server/etcdserver/api/v3rpc/maintenance.go); the file keeps those 32
    bytes, as ``etcdctl snapshot save`` does, and ``etcdutl snapshot restore`` checks them.

    Called done only when the HTTP body ended properly, the appended sha256 matches, the size is
    what etcd's ``hasChecksum`` expects (a multiple of 512 plus 32) and the file reads as a bbolt
    database (its revision and key count as ``etcdutl snapshot status`` counts them); then fsynced,
    renamed into place without replacing a name, the directory fsynced. Any failure, a signal
    included, removes the temp file: no partial file ever has the final name. ``timeout`` bounds
    the whole stream, ``limit`` its size (EFBIG). Returns size, sha256, revision, keys."""
    deadline = time.monotonic() + timeout
    if lstat(path) is not None:
        raise OSError(errno.EEXIST, "exists already", path)
    tmp = temp_name(path)
    _unlink_quiet(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            try:
                size, digest = _snapshot_stream(url, tls, deadline, limit, fd)
                os.fchmod(fd, 0o600)
                os.fsync(fd)
            finally:
                os.close(fd)
            stats = bolt_status(tmp)
        except Exception as exc:  # noqa: BLE001 - every failure leaves as an OSError with cpctl's own text
            raise _http_failure(exc, timeout) from None
        rename_noreplace(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")
    return {"revision": stats["revision"], "keys": stats["keys"], "total_size": stats["total_size"], "size": size,
            "sha256": digest}


def _snapshot_stream(url: str, tls: Optional[TlsOptions], deadline: float, limit: int, fd: int) -> Tuple[int, str]:
    """(bytes written, the sha256 hex etcd appended) of the snapshot stream at ``url``, checked."""
    import hashlib
    scheme, host, port, target = _http_target(url)
    headers = _http_headers({"Content-Type": "application/json"})
    request = _http_request("POST", target, _host_header(scheme, host, port), headers, b"{}")
    conn = _http_connect(scheme, host, port, tls, deadline)
    try:
        conn.deadline = deadline
        conn.send(request)
        status, _fields, framing, _close = _http_head(conn, "POST")
        if status != 200:
            raise _HttpError(errno.EPROTO, "HTTP %d: %s" % (status, _gateway_error(
                _http_body(conn, framing, 64 << 10))))
        state: _Streamed = {"hash": hashlib.sha256(), "held": b"", "size": 0, "limit": limit, "fd": fd}
        pending = bytearray()
        for piece in _http_pieces(conn, framing):
            pending += piece
            while True:
                end = pending.find(b"\n")
                if end < 0:
                    break
                _snapshot_message(bytes(pending[:end]), state)
                del pending[:end + 1]
            if len(pending) > SNAPSHOT_MESSAGE_LIMIT:
                raise _HttpError(errno.EFBIG, "a snapshot message over %d bytes" % SNAPSHOT_MESSAGE_LIMIT)
        _snapshot_message(bytes(pending), state)
    finally:
        conn.close()
    size = state["size"]
    if size < 2 * SNAPSHOT_HASH_SIZE or size % 512 != SNAPSHOT_HASH_SIZE:
        raise _HttpError(errno.EPROTO, "the snapshot stream is not a database and its sha256 (%d bytes)" % size)
    if state["hash"].digest() != state["held"]:
        raise _HttpError(errno.EPROTO, "the snapshot's sha256 does not match its data (cut short or corrupted)")
    return size, binascii.hexlify(state["held"]).decode("ascii")


def _http_pieces(conn: _HttpConnection, framing: int) -> Iterator[bytes]:
    """The body of an answer piece by piece (chunked, a Content-Length or until the server closes);
    a body cut short is an EPROTO error, never a shorter body."""
    if framing == _CHUNKED:
        while True:
            left = _http_chunk_size(conn)
            if left == 0:
                return
            while left:
                chunk = conn.read(min(1 << 16, left))
                if not chunk:
                    raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % left)
                left -= len(chunk)
                yield chunk
            _http_chunk_end(conn)
    left = framing
    while framing == _UNTIL_CLOSE or left > 0:
        chunk = conn.read(1 << 16 if framing == _UNTIL_CLOSE else min(1 << 16, left))
        if not chunk:
            if framing != _UNTIL_CLOSE:
                raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % left)
            return
        left -= len(chunk)
        yield chunk


def _snapshot_message(line: bytes, state: _Streamed) -> None:
    """One streamed ``{"result": {"blob": BASE64, ...}}`` (or ``{"error": ...}``) written out;
    every byte but the last 32 seen so far goes into the running sha256."""
    import json
    line = line.strip()
    if not line:
        return
    try:
        doc = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _HttpError(errno.EPROTO, "a snapshot message that is not JSON") from None
    if not isinstance(doc, dict) or "error" in doc:
        raise _HttpError(errno.EPROTO, "etcd ended the snapshot with an error: %s" % _gateway_error(line))
    result = doc.get("result")
    blob = result.get("blob", "") if isinstance(result, dict) else None
    if not isinstance(blob, str):
        raise _HttpError(errno.EPROTO, "a snapshot message without a blob")
    try:
        data = binascii.a2b_base64(blob)
    except (binascii.Error, ValueError):
        raise _HttpError(errno.EPROTO, "a snapshot blob that is not base64") from None
    state["size"] += len(data)
    if state["size"] > state["limit"]:
        raise _HttpError(errno.EFBIG, "the snapshot is over the limit of %d bytes" % state["limit"])
    _write_all(state["fd"], data)
    joined = state["held"] + data
    if len(joined) > SNAPSHOT_HASH_SIZE:
        state["hash"].update(joined[:-SNAPSHOT_HASH_SIZE])
        joined = joined[-SNAPSHOT_HASH_SIZE:]
    state["held"] = joined


def _gateway_error(body: bytes) -> str:
    """The gateway's error message (``{"error": {"message": ...}}`` or ``{"message": ...}``), printable."""
    import json
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "an answer that is not JSON"
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        doc = doc["error"]
    if isinstance(doc, dict):
        for key in ("message", "error"):
            if isinstance(doc.get(key), str) and doc[key]:
                return _printable(doc[key])
    return "no reason given"


def bolt_status(path: str) -> _BoltCount:
    """What ``etcdutl snapshot status`` counts in the bbolt database at ``path``: the revision (the
    main revision of the last key of bucket ``key``) and the keys of every bucket (``totalKey``),
    and bbolt's own size (``totalSize``: its page count times its page size). The file is read a
    page at a time and is untrusted: a page number past the database, a loop, an element outside
    its page is EPROTO ("not an etcd database")."""
    import struct
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        meta = _bolt_meta(fd, struct)
        state: _BoltWalk = {"keys": 0, "revision": 0, "fd": fd, "meta": meta, "struct": struct, "seen": set()}
        for name, value, flags in _bolt_items(state, meta["root"], None, 0):
            if not flags & 1:
                raise _HttpError(errno.EPROTO, "not an etcd database (a key outside a bucket)")
            keys = list(_bolt_bucket(state, value, 1))
            state["keys"] += len(keys)
            if name == b"key" and keys:
                last = keys[-1]
                if len(last) < 8:
                    raise _HttpError(errno.EPROTO, "not an etcd database (a revision key)")
                state["revision"] = struct.unpack(">Q", last[:8])[0]
    finally:
        os.close(fd)
    return {"revision": state["revision"], "keys": state["keys"], "total_size": meta["pgid"] * meta["page_size"]}


def _bolt_meta(fd: int, struct: "types.ModuleType") -> _BoltMeta:
    """The newer valid one of bbolt's two meta pages (magic, version 2, FNV-1a checksum)."""
    best: Optional[_BoltMeta] = None
    head = os.pread(fd, 16 + 64, 0)
    if len(head) < 80:
        raise _HttpError(errno.EPROTO, "not an etcd database (too short)")
    page_size = struct.unpack_from("<I", head, 16 + 8)[0]
    if page_size < 512 or page_size > BOLT_PAGE_LIMIT or page_size & (page_size - 1):
        raise _HttpError(errno.EPROTO, "not an etcd database (its page size)")
    for number in (0, 1):
        raw = os.pread(fd, 64, number * page_size + 16)
        if len(raw) < 64:
            continue
        magic, version, size, _flags, root, _seq, _free, pgid, txid, checksum = struct.unpack("<IIIIQQQQQQ", raw)
        if magic != BOLT_MAGIC or version != 2 or size != page_size or checksum != _fnv64a(raw[:56]):
            continue
        if best is None or txid > best["txid"]:
            best = {"root": root, "pgid": pgid, "txid": txid, "page_size": page_size}
    if best is None:
        raise _HttpError(errno.EPROTO, "not an etcd database (no valid bbolt meta page)")
    return best


def _fnv64a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in bytearray(data):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def _bolt_bucket(state: _BoltWalk, value: bytes, depth: int) -> Iterator[bytes]:
    """The keys of one bucket (its value: root page id and sequence, an inline page after them)."""
    if len(value) < 16:
        raise _HttpError(errno.EPROTO, "not an etcd database (a bucket header)")
    root = state["struct"].unpack_from("<Q", value, 0)[0]
    inline = value[16:] if root == 0 else None
    for key, _value, _flags in _bolt_items(state, root, inline, depth):
        yield key


def _bolt_items(state: _BoltWalk, pgid: int, inline: Optional[bytes], depth: int) -> Iterator[Tuple[bytes, bytes, int]]:
    """(key, value, flags) of every leaf element under page ``pgid`` (or the ``inline`` page), in order."""
    struct = state["struct"]
    meta = state["meta"]
    if depth > BOLT_DEPTH_LIMIT:
        raise _HttpError(errno.EPROTO, "not an etcd database (a tree too deep)")
    if inline is not None:
        page = inline
    else:
        if not 2 <= pgid < meta["pgid"] or pgid in state["seen"]:
            raise _HttpError(errno.EPROTO, "not an etcd database (a page past its end or seen twice)")
        state["seen"].add(pgid)
        head = os.pread(state["fd"], 16, pgid * meta["page_size"])
        if len(head) < 16:
            raise _HttpError(errno.EPROTO, "not an etcd database (cut short)")
        overflow = struct.unpack_from("<I", head, 12)[0]
        if pgid + overflow >= meta["pgid"]:
            raise _HttpError(errno.EPROTO, "not an etcd database (a page past its end)")
        page = os.pread(state["fd"], (overflow + 1) * meta["page_size"], pgid * meta["page_size"])
    if len(page) < 16:
        raise _HttpError(errno.EPROTO, "not an etcd database (a page)")
    flags, count = struct.unpack_from("<HH", page, 8)
    if 16 + 16 * count > len(page) or not flags & 0x03:
        raise _HttpError(errno.EPROTO, "not an etcd database (a page of no known kind)")
    for index in range(count):
        at = 16 + 16 * index
        if flags & 0x01:           # branch: pos, ksize, child page id
            pos, _ksize, child = struct.unpack_from("<IIQ", page, at)
            for item in _bolt_items(state, child, None, depth + 1):
                yield item
            continue
        eflags, pos, ksize, vsize = struct.unpack_from("<IIII", page, at)
        start = at + pos
        if start + ksize + vsize > len(page):
            raise _HttpError(errno.EPROTO, "not an etcd database (an element outside its page)")
        yield page[start:start + ksize], page[start + ksize:start + ksize + vsize], eflags


OPS["etcd_snapshot"] = etcd_snapshot

"""Primitive file, lock, exec and HTTP operations on the node, standard library only.

This one module is the only code that touches a node's filesystem. ``LocalHost`` calls these
functions in-process; ``SSHHost`` ships this very source to the master and runs it there as a
small agent (``agent_main``) speaking JSON lines over an SSH channel. One implementation means
the atomicity, fsync and locking rules are the same locally and remotely, and the master needs
nothing installed beyond python3 (>= 3.8): keep this file free of third-party imports and of
syntax newer than 3.8.

Errors are raised as ``OSError`` (with errno) or ``LockBusy``; the agent transports both.
"""

import binascii
import errno
import fcntl
import os
import stat
import sys
import time

# base64 and json (both import re), socket and subprocess are left out on purpose: every remote
# run starts this agent on every master, and each of them adds to its start-up (see _json_codec).

TEMP_MARK = ".cpctl-tmp"
_HELD_LOCKS = {}  # type: dict


class LockBusy(Exception):
    """The node lock is held by another cpctl run; ``holder`` says by whom."""

    def __init__(self, holder):
        Exception.__init__(self, holder)
        self.holder = holder


def _kind(mode):
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def lstat(path):
    """Return the file's metadata without following a symlink, or None when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return {
        "kind": _kind(st.st_mode), "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid,
        "gid": st.st_gid, "size": st.st_size, "mtime": st.st_mtime, "dev": st.st_dev,
    }


def listdir(path):
    """Sorted names in a directory (kubelet also works on a sorted listing)."""
    return sorted(os.listdir(path))


def scan_dir(path, limit):
    """One round trip for a whole directory: each entry's lstat and, for small regular files,
    its bytes. Remote status and drift checks need the whole manifests dir at once."""
    entries = []
    for name in listdir(path):
        full = os.path.join(path, name)
        info = lstat(full)
        if info is None:
            continue
        info["name"] = name
        if info["kind"] == "file" and info["size"] <= limit:
            try:
                info["data"] = read_file(full, limit)
            except OSError as exc:
                info["error"] = exc.strerror or str(exc)
        entries.append(info)
    return entries


def read_file(path, limit):
    """Read a regular file, never through a symlink; refuse files over ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks = []
        total = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise OSError(errno.EFBIG, "file larger than %d bytes" % limit, path)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_tail(path, limit):
    """The last ``limit`` bytes of a regular file (never through a symlink): a log's newest lines
    without reading all of it."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        start = max(0, st.st_size - limit)
        chunks = []
        while True:
            chunk = os.pread(fd, min(1 << 20, limit), start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
            if sum(len(c) for c in chunks) >= limit:
                break
        return b"".join(chunks)[:limit]
    finally:
        os.close(fd)


def compress(src, dst):
    """gzip ``src`` into a new file ``dst`` (dot-temp + fsync + no-replace rename, 0600); ``src``
    stays. Runs where the file is, so a large log never travels over SSH to be compressed."""
    import zlib
    tmp = temp_name(dst)
    _unlink_quiet(tmp)
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)   # 31: gzip container
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                _write_all(out, packer.compress(chunk))
            _write_all(out, packer.flush())
            os.fsync(out)
        finally:
            os.close(out)
        rename_noreplace(tmp, dst)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(dst) or ".")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path):
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temp_name(name):
    """True for the dot-temp files ``temp_name`` makes (left behind only by a killed writer)."""
    return name.startswith(".") and TEMP_MARK in name


def temp_name(path):
    """Dot-prefixed sibling used while writing ``path``: kubelet ignores dot files."""
    directory, name = os.path.split(path)
    return os.path.join(directory, ".%s%s-%d" % (name, TEMP_MARK, os.getpid()))


def _write_new(path, data, mode, uid, gid):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if uid is not None and gid is not None and (uid, gid) != (os.geteuid(), os.getegid()):
            os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quiet(path)
        raise
    os.close(fd)


def _unlink_quiet(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path, data, mode=0o600, uid=None, gid=None, expect=None):
    """Write ``data`` to a dot-temp sibling, fsync it, rename it over ``path``, fsync the dir.

    A reader (the kubelet) sees either the old file or the complete new one, never a part.
    ``expect`` (a sha256 hex digest, or "absent") is what ``path`` must hold right before the
    rename: a file someone else changed meanwhile is never overwritten (EEXIST/ESTALE).
    """
    tmp = temp_name(path)
    _unlink_quiet(tmp)
    _write_new(tmp, data, mode, uid, gid)
    try:
        if expect is not None:
            _check_current(path, expect)
        os.rename(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")


def _check_current(path, expect):
    """Raise unless ``path`` holds the bytes whose sha256 is ``expect`` ("absent": no file)."""
    import hashlib
    info = lstat(path)
    if expect == "absent":
        if info is not None:
            raise OSError(errno.EEXIST, "appeared meanwhile", path)
        return
    if info is None or info["kind"] != "file":
        raise OSError(errno.ESTALE, "changed meanwhile (gone or not a file)", path)
    if hashlib.sha256(read_file(path, info["size"] + 1)).hexdigest() != expect:
        raise OSError(errno.ESTALE, "changed meanwhile", path)


def move(src, dst):
    """Move a regular file, never replacing ``dst``; return "rename" or "copy".

    Same filesystem: one atomic no-replace rename. Across filesystems (EXDEV): ``move_across``.
    At every instant the bytes exist completely in at least one of the two places, and a name
    that exists at ``dst`` (another cpctl's, an operator's) is never overwritten: EEXIST instead.
    """
    info = lstat(src)
    if info is None:
        raise OSError(errno.ENOENT, "no such file", src)
    if info["kind"] != "file":
        raise OSError(errno.EINVAL, "refusing to move a %s" % info["kind"], src)
    try:
        rename_noreplace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return move_across(src, dst)
    fsync_dir(os.path.dirname(dst) or ".")
    fsync_dir(os.path.dirname(src) or ".")
    return "rename"


def move_across(src, dst):
    """The EXDEV half of ``move``: copy to a dot-temp in the target dir keeping bytes, mode and
    owner, fsync, no-replace rename into place, fsync, then remove the source; return "copy"."""
    info = lstat(src)
    if info is None or info["kind"] != "file":
        raise OSError(errno.ENOENT, "no such file", src)
    data = read_file(src, info["size"] + 1)
    tmp = temp_name(dst)
    _unlink_quiet(tmp)
    _write_new(tmp, data, info["mode"], info["uid"], info["gid"])
    try:
        rename_noreplace(tmp, dst)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    fsync_dir(os.path.dirname(dst) or ".")
    os.unlink(src)
    fsync_dir(os.path.dirname(src) or ".")
    return "copy"


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
# [the C function, or None], looked up on the first move (ctypes costs the agent ~2 ms)
_RENAMEAT2 = []  # type: list


def _renameat2():
    if not _RENAMEAT2:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            _RENAMEAT2.append(getattr(libc, "renameat2", None))
        except (OSError, AttributeError, ImportError):
            _RENAMEAT2.append(None)
    return _RENAMEAT2[0]


def rename_noreplace(src, dst):
    """rename(2) that fails with EEXIST instead of replacing ``dst``.

    renameat2(RENAME_NOREPLACE) where the C library and the filesystem have it; else link(2) then
    unlink(2) of the source, which never replaces either (both names exist for a moment; the
    journal's recovery treats "same bytes in both places" as a finished move).
    """
    function = _renameat2()
    if function is not None:
        if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        import ctypes
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), dst)
    os.link(src, dst)
    os.unlink(src)


def unlink(path, missing_ok=True):
    """Remove a file and make the removal durable."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise
        return False
    fsync_dir(os.path.dirname(path) or ".")
    return True


def makedirs(path, mode=0o700):
    """Create ``path`` (and parents) with ``mode`` when missing; never chmod an existing dir."""
    if lstat(path) is None:
        try:
            os.makedirs(path, mode)
        except FileExistsError:
            return  # a concurrent cpctl created it first; the caller checks kind, mode and owner
        os.chmod(path, mode)


def chmod(path, mode):
    os.chmod(path, mode)


def append(path, data):
    """Append one record durably (history); the file is created 0600."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # A crash tore the last record: end it, or this record would be glued to it and lost.
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def lock(path, timeout, holder):
    """Take an exclusive flock on ``path``, waiting at most ``timeout`` seconds.

    The lock lives as long as this process holds the descriptor, so a killed cpctl (or a
    dropped SSH session, which ends the agent) can never leave a stale lock behind.
    """
    if path in _HELD_LOCKS:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if not _flock_within(fd, timeout):
        current = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        os.close(fd)
        raise LockBusy(current or "another process")
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode("utf-8"), 0)
    _HELD_LOCKS[path] = fd


def unlock(path):
    fd = _HELD_LOCKS.pop(path, None)
    if fd is not None:
        if path not in _DIR_LOCKS:
            os.ftruncate(fd, 0)
        _DIR_LOCKS.discard(path)
        os.close(fd)


_DIR_LOCKS = set()  # type: set


def lock_dir(path, timeout):
    """Take an exclusive flock on the directory ``path`` itself, waiting at most ``timeout`` s.

    It covers the manifests dir whatever state dir a cpctl run uses: two runs with different
    state dirs must not move files into the same manifests dir at once. Nothing is written into
    the directory (the kubelet would see it), and flock does not touch it: no inotify event.
    """
    if path in _HELD_LOCKS:
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not _flock_within(fd, timeout):
        os.close(fd)
        raise LockBusy("another cpctl run working in %s (its --state-dir may differ)" % path)
    _HELD_LOCKS[path] = fd
    _DIR_LOCKS.add(path)


def _flock_within(fd, timeout):
    """Exclusive flock on ``fd``, retried until ``timeout``; False when still busy then."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def run(argv, timeout=60.0, stdin=b"", env=None):
    """Run a program without a shell (arguments are never parsed by a shell)."""
    import subprocess
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, env=full_env)
    except FileNotFoundError:
        return {"rc": 127, "stdout": b"", "stderr": ("%s: not found" % argv[0]).encode()}
    except subprocess.TimeoutExpired as exc:
        return {"rc": 124, "stdout": exc.stdout or b"", "stderr": b"timed out"}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _ssl_context(tls):
    import ssl
    import tempfile
    if tls.get("insecure"):
        # No CA bundle to load when nothing is verified (health endpoints use self-signed
        # certificates); create_default_context() would spend ~40 ms loading system CAs.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif tls.get("ca_data"):
        ctx = ssl.create_default_context(cadata=tls["ca_data"].decode("ascii", "replace"))
    else:
        ctx = ssl.create_default_context(cafile=tls.get("ca_file"))
    cert_file, key_file = tls.get("cert_file"), tls.get("key_file")
    if tls.get("cert_data") or tls.get("key_data"):
        # ssl wants files: write the inline credentials to a private temp file, then drop it.
        with tempfile.NamedTemporaryFile(prefix=".cpctl-cred-", suffix=".pem") as handle:
            os.chmod(handle.name, 0o600)
            handle.write(tls.get("cert_data") or b"")
            handle.write(b"\n")
            handle.write(tls.get("key_data") or b"")
            handle.flush()
            ctx.load_cert_chain(handle.name)
    elif cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


_CONNECTIONS = {}  # type: dict


def http(method, url, headers=None, body=None, timeout=5.0, tls=None):
    """One HTTP(S) request with a kept-alive connection per (scheme, host, port).

    Returns status, headers and body; a transport failure is an OSError (connection refused,
    timeout) so that callers can tell "API down" from an HTTP error.
    """
    import http.client
    import json
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    key = (parts.scheme, parts.hostname, parts.port, json.dumps(_tls_key(tls), sort_keys=True))
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    for attempt in (0, 1):
        conn = _CONNECTIONS.get(key)
        if conn is None:
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(parts.hostname, parts.port or 443,
                                                   timeout=timeout, context=_ssl_context(tls or {}))
            else:
                conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
            _CONNECTIONS[key] = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return {"status": resp.status, "headers": dict(resp.getheaders()), "body": data}
        except (http.client.HTTPException, OSError) as exc:
            conn.close()
            _CONNECTIONS.pop(key, None)
            reused = attempt == 0 and isinstance(exc, (http.client.RemoteDisconnected,
                                                       ConnectionResetError, BrokenPipeError))
            if not reused:
                if isinstance(exc, OSError):
                    raise
                raise OSError(errno.EPROTO, str(exc) or type(exc).__name__) from None
    raise OSError(errno.EPROTO, "connection closed")


def _tls_key(tls):
    if not tls:
        return None
    return {k: (_b64(v) if isinstance(v, bytes) else v) for k, v in tls.items()}


def info():
    """Who and where we are: for history records, lock holders and the default node name."""
    import pwd
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    # os.uname().nodename is what gethostname(2) returns, without importing socket
    return {"hostname": os.uname().nodename, "user": user, "sudo_user": os.environ.get("SUDO_USER"),
            "pid": os.getpid(), "euid": os.geteuid(), "python": sys.version.split()[0]}


def reset():
    """Forget the run this agent served: release its locks, close its HTTP connections.

    The connection keeper sends it when a run hangs up with every request answered, before
    the same agent serves the next run; the next run then finds the node as after an exit.
    """
    for path in list(_HELD_LOCKS):
        unlock(path)
    for conn in _CONNECTIONS.values():
        conn.close()
    _CONNECTIONS.clear()
    return {"pid": os.getpid()}


# Operations that change nothing on the node: the only ones a ``batch`` may carry.
READ_OPS = ("lstat", "listdir", "scan_dir", "read_file", "read_tail", "info")


def batch(requests):
    """Answer several read-only requests in one round trip, in order, each as ``handle`` would.

    A view (status, check) reads a handful of paths before it decides anything; over SSH each
    separate read would cost a network round trip, and through the keeper a relay as well.
    Changes are never batched: each one is a separate, acknowledged step of the protocol.
    """
    answers = []
    for request in requests:
        if request.get("op") not in READ_OPS:
            answers.append({"ok": False, "kind": "error", "message": "not batchable: %r" % request.get("op")})
        else:
            answers.append(handle(request))
    return answers


OPS = {  # type: dict
    "lstat": lstat, "listdir": listdir, "scan_dir": scan_dir, "read_file": read_file, "read_tail": read_tail,
    "compress": compress,
    "write_atomic": write_atomic, "move": move, "unlink": unlink, "makedirs": makedirs,
    "chmod": chmod, "append": append, "lock": lock, "lock_dir": lock_dir, "unlock": unlock, "run": run,
    "http": http,
    "info": info, "fsync_dir": fsync_dir, "batch": batch, "reset": reset,
}

# Values of these keys travel base64-encoded over the agent protocol.
BYTES_KEYS = ("data", "stdin", "stdout", "stderr", "body", "cert_data", "key_data", "ca_data")


def _b64(data):
    """Standard base64 text of ``data`` (base64.b64encode without importing base64)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def encode(value):
    """JSON-safe form of an op's arguments or result (bytes become {"b64": ...})."""
    if isinstance(value, bytes):
        return {"b64": _b64(value)}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value):
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            return binascii.a2b_base64(value["b64"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def handle(request):
    """Run one request dict {"op", "args"} and return the response dict."""
    try:
        result = OPS[request["op"]](**decode(request.get("args") or {}))
        return {"ok": True, "result": encode(result)}
    except LockBusy as exc:
        return {"ok": False, "kind": "lock", "holder": exc.holder}
    except OSError as exc:
        return {"ok": False, "kind": "os", "errno": exc.errno, "strerror": exc.strerror or str(exc),
                "filename": exc.filename}
    except Exception as exc:  # noqa: BLE001 - report, keep serving: the caller decides what is fatal
        return {"ok": False, "kind": "error", "message": "%s: %s" % (type(exc).__name__, exc)}


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


def _unencodable(value):
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


def _json_codec():
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

        def loads(text):
            start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
            try:
                value, end = scan(text, start)
            except StopIteration as exc:
                raise ValueError("not JSON at character %s" % exc.value) from None
            if text[end:].strip(_JSON_WHITESPACE):
                raise ValueError("extra data after JSON at character %d" % end)
            return value

        def dumps(value):
            return "".join(write(value, 0))

        if dumps(_CODEC_SAMPLE) == _CODEC_SAMPLE_TEXT and loads(_CODEC_SAMPLE_TEXT) == _CODEC_SAMPLE:
            return loads, dumps
    except Exception:  # noqa: BLE001 - any surprise in a private module: use the public one
        pass
    import json
    return json.loads, json.dumps


def agent_main(stdin=None, stdout=None):
    """Serve requests, one JSON object per line, until EOF; then release every lock."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    loads, dumps = _json_codec()
    stdout.write(b'{"ready": true, "pid": %d}\n' % os.getpid())
    stdout.flush()
    try:
        for line in stdin:
            if not line.strip():
                continue
            response = handle(loads(line.decode("utf-8")))
            stdout.write(dumps(response).encode("utf-8") + b"\n")
            stdout.flush()
    finally:
        for path in list(_HELD_LOCKS):
            unlock(path)


if __name__ == "__main__":
    agent_main()

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
    """One round trip for a whole directory: each entry's lstat and, for regular files of at most
    ``limit`` bytes, its bytes. Remote status and drift checks need the whole manifests dir at once.

    A symlink is read the way the kubelet reads it (it follows links): the entry stays the
    link's own lstat ("kind": "symlink", so that nobody moves or writes through it) and gains
    "target" (the link's text), "target_kind" (None when dangling or looping, with "error") and
    "target_size", plus the target's bytes when that is a regular file of at most ``limit`` bytes."""
    entries = []
    for name in listdir(path):
        full = os.path.join(path, name)
        info = lstat(full)
        if info is None:
            continue
        info["name"] = name
        size = info["size"]
        if info["kind"] == "symlink":
            size = _link_target(full, info)
        if info.get("target_kind", info["kind"]) == "file" and size <= limit:
            try:
                info["data"] = read_file(full, limit, follow=info["kind"] == "symlink")
            except OSError as exc:
                info["error"] = exc.strerror or str(exc)
        entries.append(info)
    return entries


def _link_target(path, info):
    """Add what the symlink ``path`` points to (its text, kind and size) to its ``info``; the
    target's size."""
    try:
        info["target"] = os.fsdecode(os.readlink(path))
        st = os.stat(path)
    except OSError as exc:
        info["target_kind"] = None
        info["error"] = exc.strerror or str(exc)
        return 0
    info["target_kind"] = _kind(st.st_mode)
    info["target_size"] = st.st_size
    return st.st_size


def read_file(path, limit, follow=False):
    """Read a regular file, never through a symlink unless ``follow``; refuse files over ``limit``
    bytes. Opened non-blocking, so that a FIFO put in its place is refused instead of waited on."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
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


def move_across(src, dst, remove=None):
    """The EXDEV half of ``move``: copy to a dot-temp in the target dir keeping bytes, mode and
    owner, fsync, no-replace rename into place, fsync, then remove the source; return "copy".

    When removing the source fails (a read-only mount, an immutable file) the copy is removed
    again before the error is raised: a failed move leaves the bytes where they were, once.
    ``remove``: how the source is removed (tests inject a failing one)."""
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
    try:
        (remove or os.unlink)(src)
    except OSError:
        _unlink_quiet(dst)
        fsync_dir(os.path.dirname(dst) or ".")
        raise
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


def run(argv, timeout=60.0, stdin=b"", env=None, limit=None):
    """Run a program without a shell (arguments are never parsed by a shell). With ``limit``, only
    the last ``limit`` bytes of each of stdout and stderr are kept (``cut``: how many were dropped),
    so a program printing without end costs bounded memory here and on the wire."""
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    if _not_found(argv[0], full_env):      # what the exec would say, without forking to hear it
        missing = {"rc": 127, "stdout": b"", "stderr": ("%s: not found" % argv[0]).encode()}
        return missing if limit is None else dict(missing, cut=0)
    import subprocess
    if limit is not None:
        return _run_bounded(argv, timeout, stdin, full_env, limit)
    try:
        proc = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, env=full_env)
    except FileNotFoundError:
        return {"rc": 127, "stdout": b"", "stderr": ("%s: not found" % argv[0]).encode()}
    except subprocess.TimeoutExpired as exc:
        return {"rc": 124, "stdout": exc.stdout or b"", "stderr": b"timed out"}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _not_found(program, env):
    """True only when running ``program`` would fail with "not found" (ENOENT): no file of that name
    in any dir of the PATH the child would search (``env``'s, else ours), or no such path. A probe
    of a missing crictl then costs a few stat calls, not a fork of this process and an import of
    subprocess. Anything else (a file that is there but not executable...) is left to the exec."""
    if os.sep in program:
        return not os.path.lexists(program)
    return not any(os.path.lexists(os.path.join(directory, program)) for directory in os.get_exec_path(env))


def _run_bounded(argv, timeout, stdin, env, limit):
    """``run`` keeping the last ``limit`` bytes of each output stream, within ``timeout`` seconds."""
    import selectors
    import subprocess
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except FileNotFoundError:
        return {"rc": 127, "stdout": b"", "stderr": ("%s: not found" % argv[0]).encode(), "cut": 0}
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()  # type: ignore[union-attr]  # PIPEs
    if stdin:
        try:
            proc.stdin.write(stdin)  # type: ignore[union-attr]  # a PIPE when stdin is given
            proc.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    cut = 0
    deadline = time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as selector:
        for fd in kept:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and not timed_out:
            left = deadline - time.monotonic()
            timed_out = left <= 0
            for key, _ in selector.select(max(left, 0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buf = kept[key.fd]
                buf += chunk
                if len(buf) > limit:
                    cut += len(buf) - limit
                    del buf[:len(buf) - limit]
    try:
        rc = 124 if timed_out else proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:         # closed its output, still running
        timed_out, rc = True, 124
    if timed_out:
        proc.kill()
        proc.wait()
    proc.stdout.close()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    return {"rc": rc, "stdout": bytes(kept[out_fd]), "stderr": b"timed out" if timed_out else bytes(kept[err_fd]),
            "cut": cut}


def _ssl_context(tls):
    """The TLS context for kubeconfig material ``tls`` (see ``cpctl.probes.kubeapi``).

    Errors are ``_HttpError`` texts that name the kind of material, never its bytes. A client key
    protected by a passphrase is refused: OpenSSL would otherwise prompt for it on the terminal (or
    hang an agent that has none).
    """
    import ssl
    import tempfile
    try:
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
    except (ssl.SSLError, ValueError, UnicodeError):
        raise _HttpError(errno.EINVAL, "certificate authority: not a valid PEM certificate") from None
    except OSError as exc:
        raise _HttpError(exc.errno, "certificate authority %s: %s" % (tls.get("ca_file"), exc.strerror)) from None
    asked = []

    def no_passphrase():
        asked.append(True)
        return b""

    try:
        if tls.get("cert_data") or tls.get("key_data"):
            # ssl wants files: write the inline credentials to a private temp file, then drop it.
            with tempfile.NamedTemporaryFile(prefix=".cpctl-cred-", suffix=".pem") as handle:
                os.chmod(handle.name, 0o600)
                handle.write(tls.get("cert_data") or b"")
                handle.write(b"\n")
                handle.write(tls.get("key_data") or b"")
                handle.flush()
                ctx.load_cert_chain(handle.name, password=no_passphrase)
        elif tls.get("cert_file"):
            ctx.load_cert_chain(tls["cert_file"], tls.get("key_file"), password=no_passphrase)
    except OSError as exc:
        if not isinstance(exc, ssl.SSLError):
            raise _HttpError(exc.errno, "client certificate %s or key %s: %s" % (
                tls.get("cert_file"), tls.get("key_file"), exc.strerror)) from None
        if asked:
            raise _HttpError(errno.EINVAL, "client key: protected by a passphrase (not supported)") from None
        raise _HttpError(errno.EINVAL, "client certificate/key: not valid PEM, or the key does not "
                                        "match the certificate") from None
    except (ValueError, UnicodeError):
        raise _HttpError(errno.EINVAL, "client certificate/key: not valid PEM") from None
    return ctx


class _HttpError(OSError):
    """An ``http`` failure raised by cpctl's own code, with cpctl's own words: it never quotes a
    header, a body, a server's words or TLS material (tokens, passwords and keys must not reach a
    message). ``http`` re-raises it as a plain ``OSError`` with the same errno and text."""


class _NoAnswer(_HttpError):
    """The connection ended before the first byte of an answer (a kept-alive one the server
    closed while it was idle: the request is sent again, once, on a new connection)."""


HTTP_BODY_LIMIT = 32 << 20   # default cap on an answer's body (callers pass their own ``limit``)
HTTP_LINE_LIMIT = 64 << 10   # a status, header or chunk-size line (http.client's bound)
HTTP_HEADER_LIMIT = 100      # header (or trailer) lines in one answer (http.client's bound)
_CONNECTIONS = {}  # type: dict


class _HttpConnection(object):
    """One HTTP/1.1 connection over a connected (TLS) socket, with the bytes read past what was
    consumed. Every send and receive ends by ``deadline`` (``time.monotonic()``): each call gets
    the time that is left as its timeout, so a server that drips one byte a second cannot stretch
    a request past its deadline.

    The answer is read here rather than by ``http.client``: that module imports the ``email``
    parser (and ``ssl`` even for plain HTTP), ~8 ms of every ``status`` that asks an API server.
    """

    def __init__(self, sock):
        self.sock = sock
        self.deadline = 0.0
        self.buffer = bytearray()

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, data):
        self.sock.settimeout(_time_left(self.deadline))
        self.sock.sendall(data)

    def _fill(self):
        """Receive more bytes into the buffer; False at the end of the stream."""
        self.sock.settimeout(_time_left(self.deadline))
        data = self.sock.recv(1 << 16)
        self.buffer += data
        return bool(data)

    def readline(self):
        """The next line without its CRLF (or LF); None when the stream ended before any byte of
        it. A line longer than ``HTTP_LINE_LIMIT`` is refused before it is read whole."""
        start = 0
        while True:
            end = self.buffer.find(b"\n", start)
            if end >= 0:
                break
            start = len(self.buffer)
            if start > HTTP_LINE_LIMIT:
                raise _HttpError(errno.EPROTO, "malformed HTTP answer (a line too long)")
            if not self._fill():
                if self.buffer:
                    raise _HttpError(errno.EPROTO, "answer cut short (in a line of its head)")
                return None
        if end > HTTP_LINE_LIMIT:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a line too long)")
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def read(self, size):
        """At most ``size`` (> 0) bytes; b"" at the end of the stream."""
        if not self.buffer and not self._fill():
            return b""
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


def _time_left(deadline):
    """Seconds until ``deadline``; a timeout error once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _HttpError(errno.ETIMEDOUT, "deadline reached")
    return left


def http(method, url, headers=None, body=None, timeout=5.0, tls=None, limit=None):
    """One HTTP(S) request with a kept-alive connection per (scheme, host, port, TLS material).

    ``timeout`` bounds the whole request - connect, TLS handshake, send, status, headers and
    body - not each socket operation; ``limit`` (default ``HTTP_BODY_LIMIT``) bounds the body: a
    larger answer is an EFBIG error, never read into memory. Returns status, headers and body.
    Every failure is an ``OSError`` (refused, reset, timed out, TLS, a malformed answer) so that
    callers can tell "no usable answer" from an HTTP error status; its text never quotes a header,
    a body or TLS material. An IPv6 literal needs brackets: ``http://[::1]:2381/readyz``.
    """
    deadline = time.monotonic() + timeout
    try:
        target = _http_target(url)
        lines = _http_headers(headers)
        return _http_exchange(method, target, lines, body, tls, deadline,
                              HTTP_BODY_LIMIT if limit is None else limit)
    except Exception as exc:  # noqa: BLE001 - every failure leaves as an OSError with cpctl's own text
        raise _http_failure(exc, timeout) from None


def _http_target(url):
    """(scheme, host, port, path with query) of ``url``; EINVAL for anything but http(s)://host."""
    simple = split_url(url)
    if simple is not None:
        scheme, host, port, path = simple
        return scheme, host, port or (443 if scheme == "https" else 80), path
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _HttpError(errno.EINVAL, "not an http(s) URL with a host (an IPv6 address needs brackets)")
    try:
        port = parts.port
    except ValueError:
        raise _HttpError(errno.EINVAL, "invalid port in URL (an IPv6 address needs brackets: "
                                        "http://[::1]:2381/)") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


_URL_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


def split_url(url):
    """(scheme, host, port, path with query) of a plain http(s) URL - ``scheme://host[:port]``,
    then a ``/path`` and a ``?query`` - exactly as ``urllib.parse.urlsplit`` reads it (scheme and
    host in lower case, port None when not given, "/" for no path, no "?" for an empty query), but
    without importing urllib.parse and ipaddress (~1.5 ms of every status); None for any other URL
    (user info, an IPv6 literal, a fragment, a character outside printable ASCII, a port out of
    range...): callers hand those to urllib.parse, whose reading and checks they keep."""
    head, sep, rest = url.partition("://")
    scheme = head.lower()
    if not sep or scheme not in ("http", "https"):
        return None
    cut = len(rest)
    for mark in ("/", "?"):
        found = rest.find(mark)
        if 0 <= found < cut:
            cut = found
    host, colon, port_text = rest[:cut].partition(":")
    host = host.lower()
    if not host or not set(host) <= _URL_HOST_CHARS:
        return None
    port = None
    if colon:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5) or int(port_text) > 65535:
            return None
        port = int(port_text)
    target = rest[cut:]
    if "#" in target or not all("!" <= c <= "~" for c in target):
        return None
    path, _mark, query = target.partition("?")
    return scheme, host, port, (path or "/") + ("?" + query if query else "")


def packed_address(text):
    """The packed bytes of an IPv4 or IPv6 address (``inet_pton``: strict, no leading zeros), None
    for anything else, a host name included; ``ipaddress`` costs ~1 ms to import."""
    import _socket
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            return _socket.inet_pton(family, text)
        except (OSError, ValueError):
            continue
    return None


_HEADER_NAME_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _http_headers(headers):
    """``headers`` with UTF-8 values, checked as Go's net/http checks them (no control character
    but tab): an invalid one is refused by NAME, its value (a token?) is never quoted."""
    checked = {}
    for name, value in (headers or {}).items():
        if not name or not set(name.encode("ascii", "replace")) <= _HEADER_NAME_CHARS:
            raise _HttpError(errno.EINVAL, "invalid HTTP header name")
        data = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
        if any((byte < 0x20 and byte != 0x09) or byte == 0x7F for byte in bytearray(data)):
            raise _HttpError(errno.EINVAL, "HTTP header %s: its value has a control character (not sent)" % name)
        checked[name] = data
    return checked


def _http_exchange(method, target, headers, body, tls, deadline, limit):
    """Send on a kept-alive connection (checked out of the pool while in use); a reused one the
    server closed meanwhile is replaced once, within the same deadline."""
    scheme, host, port, path = target
    # TLS material tells connections apart only for HTTPS (a plain one serves any request to it)
    key = (scheme, host, port, _tls_pool_key(tls) if scheme == "https" else ())
    request = _http_request(method, path, _host_header(scheme, host, port), headers, body)   # before any connection
    for attempt in (0, 1):
        conn = _CONNECTIONS.pop(key, None)
        reused = conn is not None and conn.sock is not None
        if not reused:
            if conn is not None:
                conn.close()
            conn = _http_connect(scheme, host, port, tls, deadline)
        try:
            conn.deadline = deadline
            conn.send(request)
            status, fields, framing, will_close = _http_head(conn, method)
            data = _http_body(conn, framing, limit)
        except Exception as exc:
            conn.close()
            if attempt == 0 and reused and _closed_while_idle(exc) and deadline > time.monotonic():
                continue
            raise
        if will_close or conn.buffer:   # bytes beyond the answer: nothing more is read on it
            conn.close()
        else:
            old = _CONNECTIONS.pop(key, None)
            if old is not None:
                old.close()
            _CONNECTIONS[key] = conn
        return {"status": status, "headers": fields, "body": data}
    raise _HttpError(errno.ECONNRESET, "connection closed without an answer")


def _host_name(host):
    """The host name as ASCII bytes, for the resolver, TLS and the Host header (as text, each of
    them would load the ``idna`` codec for nothing)."""
    try:
        return host.encode("ascii")
    except UnicodeError:
        return host.encode("idna")


def _host_header(scheme, host, port):
    name = _host_name(host)
    shown = b"[" + name + b"]" if b":" in name else name
    if port != (443 if scheme == "https" else 80):
        shown += b":%d" % port
    return shown


def _http_connect(scheme, host, port, tls, deadline):
    """A new connection whose connect and TLS handshake end by ``deadline``."""
    name = _host_name(host)
    sock = _tcp_connect(name, port, deadline)
    try:
        if scheme == "https":
            import socket
            context = _ssl_context(tls or {})
            sock = socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach())
            sock.settimeout(_time_left(deadline))   # CPython bounds the whole handshake by it
            sock = context.wrap_socket(sock, server_hostname=name)   # ASCII bytes: no idna codec either
    except BaseException:
        sock.close()
        raise
    return _HttpConnection(sock)


def _tcp_connect(name, port, deadline):
    """A TCP connection (no Nagle delay) to the first address of ``name`` that takes one, each
    attempt within what is left of ``deadline``: ``socket.create_connection`` made with the C
    module ``_socket``, as ``socket`` (its enums, ``selectors``) costs ~2 ms to import and a plain
    HTTP request needs none of it."""
    import _socket
    error = None
    for family, kind, proto, _canonical, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(_time_left(deadline))
            sock.connect(address)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            if isinstance(exc, _HttpError):   # the deadline has passed
                raise
            error = exc
    if error is None:
        raise _HttpError(errno.EHOSTUNREACH, "host name not resolved")
    raise error


_CHUNKED, _UNTIL_CLOSE = -2, -1   # an answer's framing when it is not a Content-Length
_METHOD_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _http_request(method, path, host_header, headers, body):
    """The request's bytes: its line, Host, Accept-Encoding: identity (no compressed answer), a
    Content-Length for a body (or for a POST, PUT or PATCH without one), then ``headers``."""
    verb = method.encode("ascii", "replace")
    target = path.encode("utf-8", "replace")
    if not verb or not set(verb) <= _METHOD_CHARS:
        raise _HttpError(errno.EINVAL, "invalid HTTP method")
    if any(byte <= 0x20 or byte == 0x7F for byte in bytearray(target)):
        raise _HttpError(errno.EINVAL, "invalid URL (a control character or space in it?)")
    given = set(name.lower() for name in headers)
    lines = [b"%s %s HTTP/1.1" % (verb, target)]
    if "host" not in given:
        lines.append(b"Host: " + host_header)
    if "accept-encoding" not in given:
        lines.append(b"Accept-Encoding: identity")
    if "content-length" not in given and (body is not None or method in ("POST", "PUT", "PATCH")):
        lines.append(b"Content-Length: %d" % len(body or b""))
    for name, value in headers.items():
        lines.append(name.encode("ascii") + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def _http_head(conn, method):
    """(status, headers, framing, will_close) of the answer: interim (1xx) answers are skipped;
    ``framing`` is the body's length, ``_CHUNKED`` or ``_UNTIL_CLOSE`` (the server closes)."""
    while True:
        line = conn.readline()
        if line is None:
            raise _NoAnswer(errno.ECONNRESET, "connection closed without an answer")
        parts = line.split(None, 2)
        if (len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3
                or not parts[1].isdigit() or parts[1][:1] == b"0"):
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (its status line)")
        status = int(parts[1])
        fields = _http_fields(conn)
        if status >= 200 or status == 101:
            break
    if status == 101:
        raise _HttpError(errno.EPROTO, "malformed HTTP answer (a protocol switch that was not asked for)")
    found = {}  # type: dict
    for name, value in fields:
        found.setdefault(name.lower(), []).append(value)
    tokens = set(t.strip().lower() for v in found.get("connection", []) for t in v.split(","))
    will_close = "close" in tokens or (parts[0] == b"HTTP/1.0" and "keep-alive" not in tokens)
    if method == "HEAD" or status in (204, 304):
        framing = 0
    elif "transfer-encoding" in found:
        codings = [t.strip().lower() for v in found["transfer-encoding"] for t in v.split(",")]
        if codings[-1] != "chunked":
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a transfer coding other than chunked)")
        framing = _CHUNKED
    elif "content-length" in found:
        sizes = set(t.strip() for v in found["content-length"] for t in v.split(","))
        size = sizes.pop() if len(sizes) == 1 else ""
        if not size.isdigit() or len(size) > 18:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (its Content-Length)")
        framing = int(size)
    else:
        framing = _UNTIL_CLOSE
    if framing == _UNTIL_CLOSE:
        will_close = True
    return status, dict(fields), framing, will_close


def _http_fields(conn):
    """The header (or trailer) lines up to the empty line, as (name, value) text pairs."""
    fields = []  # type: list
    while True:
        line = conn.readline()
        if line is None:
            raise _HttpError(errno.EPROTO, "answer cut short (in its head)")
        if not line:
            return fields
        if len(fields) >= HTTP_HEADER_LIMIT:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (over %d header lines)" % HTTP_HEADER_LIMIT)
        if line[:1] in (b" ", b"\t"):
            if not fields:    # an obsolete folded line continues the previous one
                raise _HttpError(errno.EPROTO, "malformed HTTP answer (a header line)")
            name, value = fields.pop()
            fields.append((name, (value + " " + line.strip(b" \t").decode("latin-1")).strip()))
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or not set(name) <= _HEADER_NAME_CHARS:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a header line)")
        fields.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))


def _http_body(conn, framing, limit):
    """The whole body, refused (EFBIG) as soon as it is known to be over ``limit`` bytes."""
    if framing == _CHUNKED:
        return _http_chunked(conn, limit)
    until_close = framing == _UNTIL_CLOSE
    if not until_close and framing > limit:
        raise _HttpError(errno.EFBIG, "answer of %d bytes is over the limit of %d bytes" % (framing, limit))
    chunks = []  # type: list
    total = 0
    while until_close or total < framing:
        chunk = conn.read(min(1 << 16, (limit + 1 if until_close else framing) - total))
        if not chunk:
            if not until_close:
                raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % (framing - total))
            break
        total += len(chunk)
        if total > limit:
            raise _HttpError(errno.EFBIG, "answer larger than the limit of %d bytes" % limit)
        chunks.append(chunk)
    return b"".join(chunks)


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


def _http_chunked(conn, limit):
    """A chunked body (RFC 9112 7.1), its chunk extensions and trailers read and dropped."""
    chunks = []  # type: list
    total = 0
    while True:
        line = conn.readline()
        if line is None:
            raise _HttpError(errno.EPROTO, "answer cut short (its chunked body unfinished)")
        digits = line.split(b";", 1)[0].strip(b" \t")
        if not digits or len(digits) > 15 or not set(digits) <= _HEX_DIGITS:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a chunk size)")
        size = int(digits, 16)
        if size == 0:
            _http_fields(conn)
            return b"".join(chunks)
        if total + size > limit:
            raise _HttpError(errno.EFBIG, "answer larger than the limit of %d bytes" % limit)
        left = size
        while left:
            chunk = conn.read(min(1 << 16, left))
            if not chunk:
                raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % left)
            chunks.append(chunk)
            left -= len(chunk)
        total += size
        end = conn.readline()
        if end is None:
            raise _HttpError(errno.EPROTO, "answer cut short (its chunked body unfinished)")
        if end:
            raise _HttpError(errno.EPROTO, "malformed HTTP answer (a chunk longer than its size)")


def _closed_while_idle(exc):
    """True for the failures of a kept-alive connection the server had closed while it was idle."""
    return isinstance(exc, (_NoAnswer, ConnectionResetError, BrokenPipeError, ConnectionAbortedError))


def _http_failure(exc, timeout):
    """``exc`` as a plain ``OSError`` (of the errno's subclass: ConnectionRefusedError...) with
    cpctl's own words or the system's errno text (see ``_HttpError``)."""
    socket = sys.modules.get("_socket")   # neither is imported before a connection is made
    ssl = sys.modules.get("ssl")
    if isinstance(exc, TimeoutError) or (socket is not None and isinstance(exc, socket.timeout)) \
            or getattr(exc, "errno", None) == errno.ETIMEDOUT:
        return OSError(errno.ETIMEDOUT, "no complete answer within %.3gs" % timeout)
    if isinstance(exc, _HttpError):
        return OSError(exc.errno, exc.strerror)
    if ssl is not None and isinstance(exc, ssl.SSLCertVerificationError):
        return OSError(errno.EPROTO, "TLS: server certificate not accepted (%s)"
                       % _printable(getattr(exc, "verify_message", "") or "verification failed"))
    if ssl is not None and isinstance(exc, ssl.SSLError):
        return OSError(errno.EPROTO, "TLS error (%s)" % _printable(getattr(exc, "reason", "") or "handshake"))
    if socket is not None and isinstance(exc, socket.gaierror):
        return OSError(errno.EHOSTUNREACH, "host name not resolved")
    if isinstance(exc, OSError) and exc.errno:
        return OSError(exc.errno, os.strerror(exc.errno))
    return OSError(errno.EPROTO, "HTTP request failed (%s)" % type(exc).__name__)


PEER_CERT_LIMIT = 64 << 10   # a leaf certificate is a few KiB; more is refused, never returned


def peer_cert(host, port, timeout=3.0, limit=PEER_CERT_LIMIT, tls=None):
    """The DER bytes of the certificate the TLS server at ``host``:``port`` presents, from a
    handshake made here on the node (serving certificates often bind to 127.0.0.1). Nothing is
    verified - the caller compares the bytes with a file - and nothing is sent after the
    handshake. ``timeout`` bounds connect and handshake together; every failure (refused, timed
    out, not TLS, no certificate, larger than ``limit``) is an ``OSError`` with cpctl's own words.
    ``time``: this node's clock when the handshake was made (its files' mtimes are on that clock).

    ``tls``: a client certificate to present (``cert_file``/``key_file``): etcd 3.5 caps TLS at 1.2
    and, with ``--client-cert-auth=true``, ends a handshake without one before a TLS 1.2 client has
    seen its certificate (real-node-facts.md "etcd, measured"). TLS 1.2 and 1.3 are both offered."""
    import socket
    import ssl
    deadline = time.monotonic() + timeout
    try:
        if tls:
            ctx = _ssl_context({"insecure": True, "cert_file": tls.get("cert_file"), "key_file": tls.get("key_file")})
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        sock = socket.create_connection((host, int(port)), _time_left(deadline))
        try:
            sock.settimeout(_time_left(deadline))   # CPython bounds the whole handshake by it
            named = None if (":" in host or host.replace(".", "").isdigit()) else host
            with ctx.wrap_socket(sock, server_hostname=named) as tls:
                der = tls.getpeercert(binary_form=True)
        finally:
            sock.close()
    except Exception as exc:  # noqa: BLE001 - every failure leaves as an OSError with cpctl's own text
        raise _http_failure(exc, timeout) from None
    if not der:
        raise OSError(errno.EPROTO, "the server presented no certificate")
    if len(der) > limit:
        raise OSError(errno.EFBIG, "certificate of %d bytes is over the limit of %d bytes" % (len(der), limit))
    return {"der": der, "time": time.time()}


HTTP_MANY_LIMIT = 512      # requests in one http_many (64 etcd members x 8 client URLs)
HTTP_MANY_THREADS = 32     # asked at once; the rest wait for a free thread, within the same deadline


def http_many(requests, timeout=5.0):
    """Several ``http`` requests at once, all ending by one deadline ``timeout`` seconds from now:
    a census of 64 etcd members whose URLs stay silent costs one ``timeout``, not 64 in a row.

    ``requests``: [{"method", "url", "headers", "body", "tls", "limit"}, ...]. One answer per request,
    in order: {"reply": <http's answer>} or {"errno": n, "error": cpctl's own text} (a request still
    unanswered at the deadline: ETIMEDOUT)."""
    import threading
    if not isinstance(requests, list) or len(requests) > HTTP_MANY_LIMIT:
        raise OSError(errno.EINVAL, "http_many takes a list of at most %d requests" % HTTP_MANY_LIMIT)
    deadline = time.monotonic() + timeout
    answers = [None] * len(requests)
    pending = list(enumerate(requests))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                index, request = pending.pop(0)
            answers[index] = _one_of_many(request, deadline)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(HTTP_MANY_THREADS, len(requests)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
    with lock:
        del pending[:]
    return [a if a is not None else {"errno": errno.ETIMEDOUT, "error": "timed out"} for a in list(answers)]


def _one_of_many(request, deadline):
    """One request of ``http_many`` within what is left of its deadline."""
    left = deadline - time.monotonic()
    if not isinstance(request, dict) or left <= 0:
        return {"errno": errno.ETIMEDOUT if left <= 0 else errno.EINVAL,
                "error": "timed out" if left <= 0 else "not a request"}
    try:
        return {"reply": http(request.get("method") or "GET", request.get("url"), request.get("headers"),
                              request.get("body"), left, request.get("tls"), request.get("limit"))}
    except OSError as exc:
        return {"errno": exc.errno or 0, "error": _printable(exc.strerror or exc)}


def _printable(text):
    """At most 120 printable ASCII characters of ``text`` (OpenSSL's fixed reason words)."""
    return "".join(c if " " <= c <= "~" else "?" for c in str(text))[:120]


def _tls_key(tls):
    if not tls:
        return None
    return {k: (_b64(v) if isinstance(v, bytes) else v) for k, v in tls.items()}


def _tls_pool_key(tls):
    """``tls`` as a hashable pool key (the same material reuses the same connection); without
    ``json``, whose import the agent avoids."""
    return tuple(sorted((_tls_key(tls) or {}).items()))


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


BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boottime():
    """CLOCK_BOOTTIME in seconds: monotonic (a wall-clock step does not move it), counting suspend,
    restarting at boot (``time.CLOCK_BOOTTIME``, Linux; CLOCK_MONOTONIC where Python lacks it)."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


def clock():
    """The node's clocks at one instant: wall time, CLOCK_BOOTTIME and the boot id they belong to
    ("" where the kernel does not say): what decides when an unconfirmed change is overdue."""
    try:
        with open(BOOT_ID_PATH, "rb") as handle:
            boot_id = handle.read(64).decode("ascii", "replace").strip()
    except OSError:
        boot_id = ""
    return {"time": time.time(), "boottime": boottime(), "boot_id": boot_id}


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


# --------------------------------------------------------------------------- etcd snapshots

SNAPSHOT_MESSAGE_LIMIT = 4 << 20   # one streamed message: etcd 3.5 sends 32 KiB blobs (~44 KiB as JSON)
SNAPSHOT_HASH_SIZE = 32            # etcd appends the sha256 of the database to the stream
BOLT_MAGIC = 0xED0CDAED
BOLT_PAGE_LIMIT = 1 << 16          # bbolt's page size is the OS page size (4 KiB; 64 KiB at most)
BOLT_DEPTH_LIMIT = 64


def etcd_snapshot(url, path, tls=None, timeout=3600.0, limit=1 << 40):
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
    stats.update({"size": size, "sha256": digest})
    return stats


def _snapshot_stream(url, tls, deadline, limit, fd):
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
        state = {"hash": hashlib.sha256(), "held": b"", "size": 0, "limit": limit, "fd": fd}
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


def _http_pieces(conn, framing):
    """The body of an answer piece by piece (chunked, a Content-Length or until the server closes);
    a body cut short is an EPROTO error, never a shorter body."""
    if framing == _CHUNKED:
        while True:
            line = conn.readline()
            if line is None:
                raise _HttpError(errno.EPROTO, "answer cut short (its chunked body unfinished)")
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not digits or len(digits) > 15 or not set(digits) <= _HEX_DIGITS:
                raise _HttpError(errno.EPROTO, "malformed HTTP answer (a chunk size)")
            left = int(digits, 16)
            if left == 0:
                _http_fields(conn)
                return
            while left:
                chunk = conn.read(min(1 << 16, left))
                if not chunk:
                    raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % left)
                left -= len(chunk)
                yield chunk
            if conn.readline():
                raise _HttpError(errno.EPROTO, "malformed HTTP answer (a chunk longer than its size)")
    left = framing
    while framing == _UNTIL_CLOSE or left > 0:
        chunk = conn.read(1 << 16 if framing == _UNTIL_CLOSE else min(1 << 16, left))
        if not chunk:
            if framing != _UNTIL_CLOSE:
                raise _HttpError(errno.EPROTO, "answer cut short (%d bytes of its body missing)" % left)
            return
        left -= len(chunk)
        yield chunk


def _snapshot_message(line, state):
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


def _gateway_error(body):
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


def bolt_status(path):
    """What ``etcdutl snapshot status`` counts in the bbolt database at ``path``: the revision (the
    main revision of the last key of bucket ``key``) and the keys of every bucket (``totalKey``),
    and bbolt's own size (``totalSize``: its page count times its page size). The file is read a
    page at a time and is untrusted: a page number past the database, a loop, an element outside
    its page is EPROTO ("not an etcd database")."""
    import struct
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        meta = _bolt_meta(fd, struct)
        state = {"keys": 0, "revision": 0, "fd": fd, "meta": meta, "struct": struct, "seen": set()}
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


def _bolt_meta(fd, struct):
    """The newer valid one of bbolt's two meta pages (magic, version 2, FNV-1a checksum)."""
    best = None
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


def _fnv64a(data):
    value = 0xCBF29CE484222325
    for byte in bytearray(data):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def _bolt_bucket(state, value, depth):
    """The keys of one bucket (its value: root page id and sequence, an inline page after them)."""
    if len(value) < 16:
        raise _HttpError(errno.EPROTO, "not an etcd database (a bucket header)")
    root = state["struct"].unpack_from("<Q", value, 0)[0]
    inline = value[16:] if root == 0 else None
    for key, _value, _flags in _bolt_items(state, root, inline, depth):
        yield key


def _bolt_items(state, pgid, inline, depth):
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


# Operations that change nothing on the node: the only ones a ``batch`` may carry.
READ_OPS = ("lstat", "listdir", "scan_dir", "read_file", "read_tail", "info", "peer_cert")


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
    "http": http, "http_many": http_many, "peer_cert": peer_cert, "etcd_snapshot": etcd_snapshot,
    "info": info, "clock": clock, "fsync_dir": fsync_dir, "batch": batch, "reset": reset,
}

# Values of these keys travel base64-encoded over the agent protocol.
BYTES_KEYS = ("data", "stdin", "stdout", "stderr", "body", "cert_data", "key_data", "ca_data", "der")


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


# --- the journal's seal: ONE rule for cpctl's journal (``core.journal``) and the node-side revert ----------
# A journal names files to write, move and remove; only a journal cpctl wrote on this node may be acted
# on, with exactly the paths its change recorded when it was made. Each entry carries ``seal``: an
# HMAC-SHA256, under this node's key (STATE/journal.key: 32 random bytes as hex, 0600, created on first
# use, never replaced), of the entry's canonical JSON without ``seal``. A journal whose seal is missing
# or wrong (crafted, copied from another node, edited) is refused before any of it is read as steps.
JOURNAL_KEY = "journal.key"


class JournalKeyError(Exception):
    """STATE/journal.key is not a key cpctl wrote (the text says why)."""


def journal_key(state_dir, fs=None, create=False):
    """This node's journal key (bytes) from STATE/journal.key, None when there is none (and not
    ``create``). ``fs`` offers ``lstat``, ``read_file``, ``write_atomic`` (a ``Host``; this module's by
    default). A key that is not a 0600 regular file holding 64 hex digits: ``JournalKeyError``."""
    import types
    fs = fs or types.SimpleNamespace(lstat=lstat, read_file=read_file, write_atomic=write_atomic)
    path = state_dir.rstrip("/") + "/" + JOURNAL_KEY
    info = fs.lstat(path)
    if info is None and create:
        try:
            fs.write_atomic(path, binascii.hexlify(os.urandom(32)) + b"\n", mode=0o600, expect="absent")
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
        info = fs.lstat(path)
    if info is None:
        return None
    if info["kind"] != "file" or info["mode"] & 0o077:
        raise JournalKeyError("%s is not a regular file of mode 0600" % path)
    text = fs.read_file(path, 256).strip()
    try:
        key = binascii.unhexlify(text)
    except (binascii.Error, TypeError, ValueError):
        key = b""
    if len(key) != 32:
        raise JournalKeyError("%s does not hold a key cpctl wrote" % path)
    return key


def journal_seal(entry, key):
    """The seal of journal ``entry`` (a dict) under ``key``: HMAC-SHA256 of its canonical JSON
    (sorted keys, no spaces, ASCII) without the ``seal`` field itself."""
    import hashlib
    import hmac
    import json
    body = dict((name, value) for name, value in entry.items() if name != "seal")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def sealed(entry, key):
    """``entry`` with its seal, as it is written to the journal."""
    return dict(entry, seal=journal_seal(entry, key))


def seal_problem(entry, key):
    """Why journal ``entry`` may not be acted on on this node ("" when its seal is this node's)."""
    import hmac
    if not isinstance(entry, dict):
        return "it is not a JSON object"
    seal = entry.get("seal")
    if not isinstance(seal, str) or not seal:
        return "it carries no seal"
    if key is None:
        return "this node has no journal key (%s), so no journal here was written by cpctl" % JOURNAL_KEY
    if not hmac.compare_digest(seal.encode("utf-8"), journal_seal(entry, key).encode("utf-8")):
        return "its seal does not match this node's key: written elsewhere, or edited"
    return ""


# --- the node-side revert of an unconfirmed change (cpctl confirm, remote mode) -----------------
# ``python3 <this file> revert-plan PLAN [--within SECONDS]``: nothing of cpctl is installed on a
# master, so ``--confirm-within`` over SSH writes this file and a plan into the master's state dir, and
# a persistent systemd timer (or a detached process) runs it when the arm is due by the master's own
# clock (CLOCK_BOOTTIME within the boot it was armed in, the UTC deadline after a reboot). The plan holds the
# journaled change cpctl itself built (the rollback to the revision before the armed change,
# manifest and companion files, and the removal of the arm record); this applies it the way
# cpctl.core.journal does - journal first, each step idempotent, dot-temp files renamed into place -
# so a kill at any instant is finished or rolled back by the next cpctl run. Exit codes as cpctl's:
# 0 reverted and verified (or nothing armed), 12 reverted but not verified, 10 another writer
# replaced the armed version (nothing changed), 7 a refused agent or plan. An environment error (the
# lock held, EROFS, EIO, a pending journal) keeps the arm and is retried with back-off.

def _utc_now():
    """Now as the records cpctl writes give it (``cpctl.timeutil.iso``; the agent imports no cpctl)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _plan_log(message, loud=False):
    """One line to syslog (journald) and stderr: no terminal is left to tell."""
    try:
        import syslog
        syslog.openlog("cpctl", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_ERR if loud else syslog.LOG_NOTICE, ("ERROR: " if loud else "") + message)
    except Exception:  # noqa: BLE001 - logging never stops the revert
        pass
    sys.stderr.write("cpctl: %s%s\n" % ("ERROR: " if loud else "", message))
    sys.stderr.flush()


def _sha_of(path):
    import hashlib
    info = lstat(path)
    if info is None or info["kind"] != "file":
        return None
    return hashlib.sha256(read_file(path, info["size"] + 1)).hexdigest()


class StepOutcome(object):
    """What ``StepRunner.run`` or ``recover`` did: ``state`` is ``completed``, ``aborted`` (run: a step
    up to the commit failed, what was done is undone), ``rolled_back`` or ``nowhere`` (recover);
    ``failed``: [(step index, error)] of steps that could not be done; ``not_undone``: the same for
    steps an undo could not put back."""

    __slots__ = ("state", "failed", "not_undone")

    def __init__(self, state):
        self.state = state
        self.failed = []
        self.not_undone = []


class StepRunner(object):
    """THE executor of a journaled change's steps (wire form: dicts with ``kind``, ``path``, ``src``,
    ``checksum``, ``staged``, ``before``, ``kept``, ``mode``, ``uid``, ``gid``), standard library only:
    cpctl's journal runs it through a ``Host`` (``core.journal.ChangePath``: locally, or each call over
    SSH), and the node-side revert of a remote ``--confirm-within`` runs it on this module's own
    functions. Every step is idempotent: ``do`` a done step does nothing, ``undo`` an undone one either.

    ``fs`` offers ``lstat``, ``read_file``, ``write_atomic``, ``move``, ``unlink``, ``chmod`` with this
    module's signatures (``Host`` has the same); ``limit`` bounds what is read back; ``tolerated``:
    the errors an undo or a roll-forward notes and goes on after (OSError; through a Host also its
    own error for a lost connection).

    ``run`` and ``recover`` are THE loops over a change's steps - how a change is applied and how an
    interrupted one is finished or rolled back - for every caller: the journal (locally or over
    SSH) and the node-side revert alike. They return a ``StepOutcome``; the caller words it and
    records the history."""

    def __init__(self, fs, limit, tolerated=(OSError,)):
        self.fs = fs
        self.limit = limit
        self.tolerated = tuple(tolerated)

    def run(self, steps, commit, data=None):
        """Do ``steps`` in order (new bytes of a write: ``data[index]``, else its staged copy). A step
        up to the commit that fails (it may be half done) is undone with all done before it, in
        reverse: ``completed`` False, nothing changed unless ``not_undone`` says otherwise. A step
        after the commit that fails is noted and the rest still done: the change has happened."""
        outcome = StepOutcome("aborted")
        done = []  # type: list
        for index, step in enumerate(steps):
            try:
                self.do(step, (data or {}).get(index))
            except OSError as exc:
                outcome.failed.append((index, exc))
                if index <= commit:
                    outcome.not_undone = self.undo_all(steps, done + [index])
                    return outcome
                continue
            done.append(index)
        outcome.state = "completed"
        return outcome

    def recover(self, steps, commit):
        """Finish or roll back a change interrupted at any instant, from the files alone: the commit
        step is done -> redo every step that is not (and the commit step: it finishes an interrupted
        copy across filesystems), ``completed``; its starting point is still there -> undo the steps
        before it, ``rolled_back``; neither -> ``nowhere`` (the file is in neither form: touch nothing)."""
        if self.is_done(steps[commit]):
            outcome = StepOutcome("completed")
            for index, step in enumerate(steps):
                try:
                    if index == commit or not self.is_done(step):
                        self.do(step)
                except self.tolerated as exc:
                    outcome.failed.append((index, exc))
            return outcome
        if not self.before_state(steps[commit]):
            return StepOutcome("nowhere")
        outcome = StepOutcome("rolled_back")
        outcome.not_undone = self.undo_all(steps, list(range(commit)))
        return outcome

    def undo_all(self, steps, indexes):
        """Undo these steps in reverse order: [(index, error)] of those that could not be undone."""
        left = []
        for index in sorted(indexes, reverse=True):
            try:
                self.undo(steps[index])
            except self.tolerated as exc:
                left.append((index, exc))
        return left

    def holds(self, path, checksum):
        """``path`` is a regular file whose sha256 is ``checksum``."""
        import hashlib
        info = self.fs.lstat(path) if path else None
        if info is None or info["kind"] != "file" or not checksum:
            return False
        return hashlib.sha256(self.fs.read_file(path, info["size"] + 1)).hexdigest() == checksum

    def do(self, step, data=None):
        """Make the step's change (its new bytes: ``data``, else its staged copy)."""
        kind, path = step["kind"], step["path"]
        if kind == "move":
            if self.holds(path, step.get("checksum")) and self.holds(step["src"], step.get("checksum")):
                self.fs.unlink(step["src"])    # a copy across filesystems had finished but its unlink had not
            elif not self.holds(path, step.get("checksum")):
                self.fs.move(step["src"], path)
        elif kind == "write":
            if not self.holds(path, step.get("checksum")):
                payload = data if data is not None else self.fs.read_file(step["staged"], self.limit)
                self.fs.write_atomic(path, payload, step.get("mode", 0o600), step.get("uid"), step.get("gid"),
                                     expect=step.get("before") or "absent")
        elif kind == "remove":
            if self.fs.lstat(path) is None:
                return
            self.fs.unlink(step["kept"])
            self.fs.move(path, step["kept"])
        elif kind == "touch":
            info = self.fs.lstat(path)
            if info is not None and info["kind"] == "file":
                self.fs.chmod(path, info["mode"])

    def is_done(self, step):
        if step["kind"] in ("move", "write"):
            return self.holds(step["path"], step.get("checksum"))
        if step["kind"] == "remove":
            return self.fs.lstat(step["path"]) is None
        return False

    def undo(self, step):
        """Put back what the step changed (a write's replaced bytes wait in ``kept``)."""
        kind, path = step["kind"], step["path"]
        if kind == "move" and self.holds(path, step.get("checksum")):
            if self.holds(step["src"], step.get("checksum")):
                self.fs.unlink(path)           # both copies exist (interrupted copy): drop the new one
            else:
                self.fs.move(path, step["src"])
        elif kind == "write" and self.holds(path, step.get("checksum")):
            if step.get("before"):
                self.fs.write_atomic(path, self.fs.read_file(step["kept"], self.limit), step.get("mode", 0o600),
                                     step.get("uid"), step.get("gid"), expect=step.get("checksum"))
            else:
                self.fs.unlink(path)
        elif kind == "remove" and self.fs.lstat(path) is None and self.fs.lstat(step["kept"]) is not None:
            self.fs.move(step["kept"], path)

    def before_state(self, step):
        """The step's starting point is still there (so undoing it loses nothing)."""
        if step["kind"] == "move":
            return self.holds(step["src"], step.get("checksum"))
        if step["kind"] == "write":
            return self.holds(step["path"], step["before"]) if step.get("before") else \
                self.fs.lstat(step["path"]) is None
        return True


# --- the state dir's history file: ONE format and ONE rotation, for ``core.state.StateDir`` and the agent ----
HISTORY = "history.jsonl"
HISTORY_SEGMENT_PREFIX = "history."
HISTORY_ROTATE_BYTES = 4 << 20        # the current history file never grows past this
HISTORY_SEGMENTS = 20                 # compressed older segments kept (about 80 MiB of records)
HISTORY_TAIL_BYTES = 256 << 10        # what recovery reads to find a record it may have written


def history_line(record):
    """One history record as it is written: canonical JSON (sorted keys, no spaces) and a newline."""
    import json
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def journal_bytes(entry):
    """A journal entry as it is written (``STATE/journal.json``)."""
    import json
    return (json.dumps(entry, indent=2, sort_keys=True) + "\n").encode("utf-8")


def history_segments(fs, state_dir):
    """Names of the older history files in ``state_dir``, oldest first (time-stamped names sort in order)."""
    return sorted(n for n in fs.listdir(state_dir)
                  if n.startswith(HISTORY_SEGMENT_PREFIX) and n.endswith((".jsonl.gz", ".jsonl")) and n != HISTORY)


def append_history(fs, state_dir, line, rotate=HISTORY_ROTATE_BYTES, keep=HISTORY_SEGMENTS):
    """Append one record line durably to ``state_dir``'s history; first, when it would grow past
    ``rotate`` bytes, move the file aside (one no-replace rename), compress it, keep the newest
    ``keep`` segments - each step leaves every record complete somewhere. ``fs``: a ``Host``, or this
    module's functions (``_node_fs``)."""
    path = state_dir.rstrip("/") + "/" + HISTORY
    info = fs.lstat(path)
    if info is not None and info["size"] + len(line) > rotate:
        segment = "%s/%s%s.jsonl" % (state_dir.rstrip("/"), HISTORY_SEGMENT_PREFIX,
                                     time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        if fs.lstat(segment) is not None:
            segment = segment[:-len(".jsonl")] + "-%d.jsonl" % fs.info()["pid"]
        fs.move(path, segment)
        fs.compress(segment, segment + ".gz")
        fs.unlink(segment)
        for old in history_segments(fs, state_dir)[:-keep]:
            fs.unlink(state_dir.rstrip("/") + "/" + old)
    fs.append(path, line)


def parse_records(data):
    """History lines as records; a torn or foreign line is skipped (the records around it stand)."""
    import json
    records = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def tail_records(fs, path, limit=HISTORY_TAIL_BYTES):
    """The records of the last ``limit`` bytes of the history file ``path`` (its first, cut line
    dropped when the file is longer); [] when there is none."""
    try:
        data = fs.read_tail(path, limit)
    except FileNotFoundError:
        return []
    return parse_records(data)[1:] if len(data) == limit else parse_records(data)


def step_words(steps, failures, suffix=""):
    """A runner's [(step index, error)] as text: "<what the step does><suffix>: <why>"."""
    words = []
    for index, exc in failures:
        step = steps[index]
        what = "move %s to %s" % (step["src"], step["path"]) if step["kind"] == "move" else \
            "%s %s" % (step["kind"], step["path"])
        why = getattr(exc, "message", None) or (getattr(exc, "strerror", None) if isinstance(exc, OSError) else None)
        words.append("%s%s: %s" % (what, suffix, why or str(exc)))
    return words


class Transaction(object):
    """THE transaction around a journaled change, standard library only: staging, the sealed journal
    entry, the steps (``StepRunner``), the history record, clearing the journal and the staged files,
    the undo of a change that cannot be recorded, and the recovery of an interrupted one. cpctl's
    journal (``core.journal.ChangePath``) runs it in ONE call on the node (``Host.transaction``: the
    ``transaction`` op of the agent, or in-process through a local ``Host``); the node-side revert of
    a remote ``--confirm-within`` runs it on this module's own functions.

    The caller gives the entry (``core.journal.entry_of``: version, op, action, component, file,
    checksum, commit, steps, record, companions) and the history record's fields but its time (user,
    host, node, origin, action, component, file, checksum, op, the change's own fields); this fills in
    the start, the pid and the time on the node. Each method returns an outcome dict
    (``host.base.TransactionOutcome``): ``state`` (completed, aborted, rolled_back, nowhere,
    unrecordable; before anything changed: bad_key, no_key, conflict, unstaged), ``failed`` and
    ``not_undone`` (step words), ``kept`` (the journal stays), ``why`` and ``path``. The caller words it.

    Files a change stages itself lie in STATE/staged; bytes staged elsewhere beforehand (a revert plan's)
    are dropped only once the change is done: a change that did not happen is tried again from them."""

    def __init__(self, state_dir, runner, rotate=HISTORY_ROTATE_BYTES, keep=HISTORY_SEGMENTS,
                 tail=HISTORY_TAIL_BYTES):
        self.state_dir = state_dir.rstrip("/") or "/"
        self.runner = runner
        self.fs = runner.fs
        self.journal = self.state_dir + "/journal.json"
        self.staged_dir = self.state_dir + "/staged/"
        self.bounds = (rotate, keep, tail)

    def handle(self, request):
        """The ``transaction`` op's request: ``do`` apply (with ``data``: the new bytes of each write,
        by step index, or None) or recover."""
        if request["do"] == "apply":
            return self.apply(request["entry"], request.get("data") or [], request["record"])
        return self.recover(request["entry"], request["record"])

    def apply(self, entry, data, record):
        """Stage, write the sealed journal, run the steps, record: the change done, or undone."""
        try:
            key = journal_key(self.state_dir, self.fs, create=True)
        except JournalKeyError as exc:
            return {"state": "bad_key", "why": str(exc), "kept": False}
        except OSError as exc:
            return {"state": "no_key", "why": exc.strerror or str(exc), "errno": exc.errno, "kept": False}
        steps = entry["steps"]
        new = dict((i, b) for i, b in enumerate(data) if b is not None)
        problem = self._stage(entry["op"], steps, new)
        if problem is not None:
            return problem
        entry = dict(entry, started=_utc_now(), pid=self.fs.info()["pid"])
        self.fs.write_atomic(self.journal, journal_bytes(sealed(entry, key)))
        outcome = self.runner.run(steps, entry["commit"], new)
        failed = step_words(steps, outcome.failed)
        if outcome.state == "aborted":       # a step up to the commit failed; the runner undid what was done
            left = step_words(steps, outcome.not_undone, " not undone")
            if not left:
                self.forget(steps, done=False)
            return {"state": "aborted", "failed": failed, "not_undone": left, "kept": bool(left)}
        return self._close(entry, record, failed, recovered=False)

    def recover(self, entry, record):
        """Finish or roll back the change a killed run left in the journal ``entry`` (checked by the
        caller: sealed here, its paths allowed), from the files alone."""
        steps = entry["steps"]
        outcome = self.runner.recover(steps, entry["commit"])
        if outcome.state == "completed":
            return self._close(entry, record, step_words(steps, outcome.failed), recovered=True)
        if outcome.state == "nowhere":
            return {"state": "nowhere", "kept": True}
        left = step_words(steps, outcome.not_undone, " not undone")
        if not left:
            self.forget(steps, done=False)
        return {"state": "rolled_back", "not_undone": left, "kept": bool(left)}

    def _stage(self, op, steps, new):
        """Keep the new bytes of each write (and the bytes it replaces, still the ``before`` it was
        planned from) in the state dir first, and name the place a removed file waits until the
        change is over. None, or the outcome of a change that could not start (nothing changed)."""
        written = []
        try:
            for index, step in enumerate(steps):
                if step["kind"] == "remove" and not step.get("kept"):
                    step["kept"] = "%s%s.%d.removed" % (self.staged_dir, op, index)
                if step["kind"] != "write":
                    continue
                if index in new:
                    step["staged"] = "%s%s.%d.new" % (self.staged_dir, op, index)
                    self.fs.write_atomic(step["staged"], new[index])
                    written.append(step["staged"])
                if step.get("before"):
                    step["kept"] = step.get("kept") or "%s%s.%d.old" % (self.staged_dir, op, index)
                    old = self.fs.read_file(step["path"], self.runner.limit)
                    if _sha256(old) != step["before"]:
                        self._drop(written)
                        return {"state": "conflict", "path": step["path"], "kept": False}
                    self.fs.write_atomic(step["kept"], old)
                    written.append(step["kept"])
        except OSError as exc:
            self._drop(written)
            return {"state": "unstaged", "why": exc.strerror or str(exc), "kept": False}
        return None

    def _close(self, entry, record, unfinished, recovered):
        """The history record (unless a recovered change has one already), then forget the journal.
        No history -> no change: undo it."""
        try:
            if not (recovered and any(r.get("op") == entry["op"] for r in
                                      tail_records(self.fs, self.state_dir + "/" + HISTORY, self.bounds[2]))):
                append_history(self.fs, self.state_dir, history_line(self._record(entry, record, unfinished,
                                                                                   recovered)), *self.bounds[:2])
        except OSError as exc:
            left = step_words(entry["steps"], self.runner.undo_all(entry["steps"], list(range(len(entry["steps"])))),
                              " not undone")
            if not left:
                self.forget(entry["steps"], done=False)
            return {"state": "unrecordable", "why": exc.strerror or str(exc), "not_undone": left, "kept": bool(left)}
        self.forget(entry["steps"], done=True)
        return {"state": "completed", "failed": unfinished, "kept": False}

    @staticmethod
    def _record(entry, record, unfinished, recovered):
        """The history record: the caller's fields, the op, the time on this node; a recovered change
        says so (and by whom), an unfinished one what is left."""
        record = dict(record, time=_utc_now())
        record.setdefault("op", entry["op"])
        if recovered:
            record["recovered"] = True
            if record.get("origin"):
                record["origin"] = "recovered by %s" % record["origin"]
        if unfinished:
            record["unfinished"] = unfinished
        return record

    def forget(self, steps, done):
        """Remove the journal, then the bytes kept for an undo and the change's own staged bytes (all
        staged bytes once it is ``done``)."""
        self.fs.unlink(self.journal)
        for step in steps:
            if step.get("staged") and (done or step["staged"].startswith(self.staged_dir)):
                self.fs.unlink(step["staged"])
            if step.get("kept"):
                self.fs.unlink(step["kept"])

    def _drop(self, paths):
        for path in paths:
            self.fs.unlink(path)


def _sha256(data):
    import hashlib
    return hashlib.sha256(data).hexdigest()


def transaction(request, fs=None, tolerated=(OSError,)):
    """The ``transaction`` op: apply or recover one journaled change as a whole, on the node
    (``Transaction``; ``fs`` a local ``Host`` when run in-process, else this module's functions)."""
    bounds = request.get("history") or {}
    runner = StepRunner(fs or _node_fs(), request.get("limit") or 64 << 20, tolerated)
    return Transaction(request["state_dir"], runner, bounds.get("rotate", HISTORY_ROTATE_BYTES),
                       bounds.get("keep", HISTORY_SEGMENTS), bounds.get("tail", HISTORY_TAIL_BYTES)).handle(request)


OPS["transaction"] = transaction


def _node_fs():
    """This node's primitives as a ``Host``-like object (looked up now: a test may wrap them)."""
    import types
    return types.SimpleNamespace(lstat=lstat, read_file=read_file, read_tail=read_tail, write_atomic=write_atomic,
                                 move=move, unlink=unlink, chmod=chmod, append=append, compress=compress,
                                 listdir=listdir, info=info)


def _node_runner():
    """The journal's own executor (``StepRunner``) on this node's primitives (also when exec'd)."""
    return StepRunner(_node_fs(), 64 << 20)


def _plan_transaction(plan, runner):
    """The journal's transaction in the plan's state dir, on ``runner``."""
    return Transaction(os.path.dirname(plan["journal"]), runner)


def _read_json(path, limit):
    """The JSON object at ``path`` (None: none, or not readable as one)."""
    import json
    try:
        with open(path, "rb") as handle:
            value = json.loads(handle.read(limit).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _append_record(plan, record):
    """One history record in the plan's state dir, as cpctl writes it (``append_history``)."""
    append_history(_node_fs(), os.path.dirname(plan["journal"]), history_line(record))


def _not_done(result):
    """Why a transaction of the plan did not happen, as one line (exit 7); a journal key that is not
    cpctl's, or none that can be made, as the exception ``_plan_attempt`` words."""
    state = result["state"]
    if state == "bad_key":
        raise JournalKeyError(result["why"])
    if state == "no_key":
        raise OSError(result.get("errno") or errno.EIO, result["why"])
    if state == "conflict":
        return "%s changed since the plan was made (nothing changed)" % result["path"]
    if state == "unstaged":
        return "cannot keep its files: %s (nothing changed)" % result["why"]
    if state == "unrecordable":
        why = "cannot write the history record (%s)" % result["why"]
    else:
        why = (result.get("failed") or ["its file is in neither form"])[0]
    if result.get("not_undone"):             # the journal stays: the next try (or cpctl) finishes it
        return "%s, and undoing it failed: %s" % (why, "; ".join(result["not_undone"]))
    return "%s (nothing changed)" % why


def _run_entry(plan, entry, record, runner):
    """Run one of the plan's journaled changes (the revert, or a patch file's undo) as cpctl's journal
    runs it (``Transaction``): (0, "done") or (7, why). A step that fails before the change has happened
    leaves everything as it was; the plan's staged bytes stay for the next try."""
    import json  # a copy: the transaction names its files in the steps it is given
    result = _plan_transaction(plan, runner).apply(json.loads(json.dumps(entry)), [], record)
    return (0, "done") if result["state"] == "completed" else (7, _not_done(result))


def _plan_apply(plan):
    """Apply the plan's journaled change under the node lock (``_run_entry``): (exit code, message).
    A step that fails before the change has happened leaves everything as it was (exit 7: the arm
    stays, the revert is tried again)."""
    runner = _node_runner()
    entry = plan["entry"]
    steps = entry["steps"]
    if lstat(plan["journal"]) is not None:
        code, message = _pending_journal(plan, runner)
        if code is not None:
            return code, message
    arm = _arm_record(plan["arm"])
    if arm is None or arm.get("op") != plan["op"]:
        return 0, "nothing armed for %s any more (confirmed or reverted already)" % entry["component"]
    commit = steps[entry["commit"]]
    if _sha_of(commit["path"]) != plan["armed"]:
        return 10, ("unconfirmed change of %s NOT reverted: %s no longer holds the armed version (another writer "
                    "replaced it); it stays as it is" % (entry["component"], commit["path"]))
    for step in steps:                       # the bytes each write replaces are still the expected ones
        if step["kind"] == "write" and step.get("before") and _sha_of(step["path"]) != step["before"]:
            return 10, "unconfirmed change of %s NOT reverted: %s changed since the arm" % (
                entry["component"], step["path"])
    code, message = _run_entry(plan, entry, plan["record"], runner)
    return (0, "reverted") if code == 0 else (code, message)


def _own_entries(plan):
    """[(journal entry, history record, keep-in record path or "")] of the changes the plan runs."""
    return [(plan["entry"], plan["record"], "")] + [(item["entry"], item["history"], item["record"])
                                                    for item in plan["patches"]]


def _plan_patches(plan, runner):
    """After the revert, under the node lock: put back the kubeadm patch file the reverted change wrote
    (``--keep-in patches``) with cpctl's rule (``patch_undo``: only over cpctl's own bytes) and the
    journaled change cpctl built for it at arm time (``core.keptin.patch_undo_change``), its record
    dropped - what ``core.keptin.settle`` does at the next cpctl command. One line per record."""
    lines = []
    for item in plan["patches"]:
        if lstat(item["record"]) is None:    # settled already
            continue
        path = item["entry"]["steps"][0]["path"]
        decision = patch_undo(_sha_of(path), item["was"], item["after"])
        if decision == "write":
            code, why = _run_entry(plan, item["entry"], item["history"], runner)
            if code:
                lines.append("%s NOT put back yet (%s): the next cpctl command tries again" % (path, why))
                continue
            lines.append(kept_patch_said("put-back", path, item["entry"]["component"], removed=not item["was"]))
        elif decision == "theirs":
            lines.append(kept_patch_said("theirs", path, item["entry"]["component"]))
        unlink(item["record"])
    return lines


def _pending_journal(plan, runner):
    """A journal is pending. When it is this plan's own - its revert, interrupted; or the arm that
    started it (cpctl killed right after writing the arm, before its history record) - the journal's
    recovery (``Transaction.recover``) finishes or rolls it back and records it as cpctl's would:
    (None, "") to go on, or (0, "reverted") when it finished the revert itself. Anything else is
    cpctl's to recover (exit 7 and why)."""
    import pwd
    entry = _read_json(plan["journal"], 1 << 20)
    own = plan["entry"]
    state_dir = os.path.dirname(plan["journal"]) + "/"
    try:
        problem = seal_problem(entry, journal_key(state_dir))
    except JournalKeyError as exc:
        problem = str(exc)
    if problem:                              # never acted on: the operator's to inspect
        return 7, ("%s is not a journal cpctl wrote on this node (%s): nothing of it runs and the unconfirmed "
                   "change of %s is NOT reverted; inspect it, then remove it by hand" % (plan["journal"], problem,
                                                                                         own["component"]))
    transaction = _plan_transaction(plan, runner)
    for mine, record, kept in _own_entries(plan):
        if not isinstance(entry, dict) or entry.get("op") != mine["op"] or entry.get("steps") != mine["steps"] \
                or entry.get("commit") != mine["commit"]:
            continue
        result = transaction.recover(mine, record)
        if result["state"] == "completed":
            if kept:
                unlink(kept)
            return (0, "reverted") if mine is own else (None, "")
        if result["state"] == "rolled_back" and not result["not_undone"]:
            return None, ""
        return 7, ("the interrupted %s of %s (%s) can be neither completed nor rolled back: %s" % (
            mine["action"], mine["component"], plan["journal"], _not_done(result)))
    steps = entry.get("steps") if isinstance(entry, dict) else None
    arm_step = steps[0] if isinstance(steps, list) and len(steps) == 1 and isinstance(steps[0], dict) else {}
    if not isinstance(entry, dict) or entry.get("action") != "armed" or entry.get("op") != plan["op"] + "-arm" \
            or entry.get("commit") != 0 or arm_step.get("kind") != "write" or arm_step.get("path") != plan["arm"] \
            or not all(not arm_step.get(key) or str(arm_step[key]).startswith(state_dir) for key in ("staged", "kept")):
        return 7, ("an interrupted cpctl change is pending (%s): the unconfirmed change of %s is NOT reverted; run any "
                   "cpctl command on this node (it finishes that change, then reverts)" % (plan["journal"],
                                                                                          own["component"]))
    record = dict(entry.get("record") or {}, user=pwd.getpwuid(os.geteuid()).pw_name, host=os.uname().nodename,
                  node=plan["verdict"]["node"], action="armed", component=entry.get("component"),
                  file=entry.get("file"), checksum=entry.get("checksum"), op=entry["op"],
                  origin="the node-side revert")
    if transaction.recover(entry, record)["state"] == "nowhere":
        transaction.forget(steps, done=True)
    return None, ""


# --- putting back a --keep-in write to a ConfigMap: ONE rule, for cpctl (``core.keptin.undo``) and for
# the node-side revert of a master without cpctl (``_plan_keepin``) ------------------------------------------
# The undo is a three-way merge, the way ``kubectl apply`` uses its last-applied configuration: what cpctl
# wrote (``after``) against what was there before it (``before``) names exactly cpctl's own keys; each is
# put back in the ClusterConfiguration as it is NOW, and only where it still holds cpctl's value. A key
# someone else changed since is a conflict: nothing is written, the record stays until it is resolved.
# Everything else anyone changed since (another flag, another section, the metadata) stays as it is.
class YamlPlain(str):
    """A plain (unquoted) YAML scalar, as written: it stays plain when written back, so that its type (a
    number, a bool, null) is the one its writer meant, without resolving it here."""

    __slots__ = ()


class _Named(object):
    """A step into a list of mappings keyed by ``name`` (v1beta4 ``extraArgs``, ``extraVolumes``): all
    the items of that name, in order (a v1beta4 argument may repeat)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


_ABSENT = object()          # a key a document does not have
_OTHER = object()           # a place whose parent has another shape now: never anyone's value
_YAML_DEPTH = 64
_YAML_LIMIT = 4 << 20


def config_undo(text, before, after, load=None, dump=None):
    """Undo cpctl's write of ``after`` over ``before`` on the ConfigMap key as found now (``text``;
    None: no such ConfigMap). ``load``/``dump`` read and write the YAML (cpctl passes its YAML library;
    the node side uses ``yaml_load``/``yaml_dump``, the subset kubeadm and cpctl write). Returns
    (decision, text to write, keys): ``gone`` (nothing to put back), ``done`` (every key cpctl changed
    holds its value before already), ``write`` (the text with exactly cpctl's keys put back; ``before``
    itself when nobody else wrote the text), ``conflict`` (the keys someone else changed since: nothing
    written) or ``unreadable`` (the text cannot be read here: the keys hold why)."""
    load, dump = load or yaml_load, dump or yaml_dump
    if text is None:
        return "gone", "", []
    if text == before:
        return "done", "", []
    if text == after:
        return "write", before, []
    try:
        docs = [load(t) for t in (before, after, text)]
    except (ValueError, TypeError) as exc:
        return "unreadable", "", [str(exc)[:200]]
    if not all(isinstance(d, dict) for d in docs):
        return "unreadable", "", ["the ClusterConfiguration is not a mapping"]
    old, ours, now = docs
    undo, conflicts = [], []
    for path, was, wrote in _config_changes(old, ours, ()):
        found = _config_get(now, path)
        if _same(found, wrote):
            undo.append((path, was))
        elif not _same(found, was):
            conflicts.append(config_key_name(path))
    if conflicts:
        return "conflict", "", conflicts
    if not undo:
        return "done", "", []
    for path, was in undo:
        _config_put(now, path, was)
        _config_prune(now, old, path)
    return "write", dump(now), [config_key_name(p) for p, _ in undo]


def config_key_name(path):
    """A key of the ClusterConfiguration for a person: ``scheduler.extraArgs.v`` (a map) or
    ``apiServer.extraVolumes[name=audit]`` (a list keyed by name)."""
    out = ""
    for step in path:
        out += "[name=%s]" % step.name if isinstance(step, _Named) else ("." if out else "") + str(step)
    return out


def _same(a, b):
    """Equal, type for type (a bool is no int, a plain scalar no quoted one); a mapping's keys in any order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and _same(a[k], b[k]) for k in a)    # in any order
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is _ABSENT or a is _OTHER:
        return a is b
    return a == b


def _named(value):
    """{name: [items]} of a list of mappings that each have a string ``name`` (None: not one)."""
    if not isinstance(value, list) or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in value):
        return None
    out = {}  # type: dict
    for item in value:
        out.setdefault(item["name"], []).append(item)
    return out


def _config_changes(was, now, path):
    """[(path, value before, value after)]: every key cpctl's write changed, as finely as kubeadm keys
    it (a mapping by key, a list of named mappings by name; anything else whole)."""
    if _same(was, now):
        return []
    if isinstance(was, dict) or isinstance(now, dict):
        if not all(isinstance(v, dict) or v is _ABSENT for v in (was, now)):
            return [(path, was, now)]
        a, b = (was if was is not _ABSENT else {}), (now if now is not _ABSENT else {})
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            out += _config_changes(a.get(key, _ABSENT), b.get(key, _ABSENT), path + (key,))
        return out
    keyed = [{} if v is _ABSENT else _named(v) for v in (was, now)]
    if None in keyed or not path or isinstance(path[-1], _Named):
        return [(path, was, now)]
    out = []
    for name in list(keyed[0]) + [n for n in keyed[1] if n not in keyed[0]]:
        items = [k.get(name, _ABSENT) for k in keyed]
        if not _same(items[0], items[1]):
            out.append((path + (_Named(name),), items[0], items[1]))
    return out


def _config_get(doc, path):
    """The value at ``path`` now (_ABSENT: not there; _OTHER: a parent has another shape)."""
    for step in path:
        if doc is _ABSENT:
            return _ABSENT
        if isinstance(step, _Named):
            keyed = _named(doc)
            if keyed is None:
                return _OTHER
            doc = keyed.get(step.name, _ABSENT)
        elif isinstance(doc, dict):
            doc = doc.get(step, _ABSENT)
        else:
            return _OTHER
    return doc


def _config_put(doc, path, value):
    """Set ``path`` to ``value`` (_ABSENT: remove it), making the mappings on the way; the items of a
    name go where its first one was (else at the end)."""
    for i, step in enumerate(path[:-1]):
        nxt = doc.get(step, _ABSENT)
        if nxt is _ABSENT:
            nxt = doc[step] = [] if isinstance(path[i + 1], _Named) else {}
        doc = nxt
    last = path[-1]
    if not isinstance(last, _Named):
        if value is _ABSENT:
            doc.pop(last, None)
        else:
            doc[last] = value
        return
    items = [] if value is _ABSENT else list(value)
    out, placed = [], False
    for item in doc:
        if item.get("name") != last.name:
            out.append(item)
        elif not placed:
            out.extend(items)
            placed = True
    if not placed:
        out.extend(items)
    doc[:] = out


def _config_prune(doc, before, path):
    """Drop the mappings and lists on ``path`` that are empty now and that ``before`` did not have
    (cpctl made them)."""
    for end in range(len(path) - 1, 0, -1):
        parent, key = _config_get(doc, path[:end - 1]), path[end - 1]
        here = _config_get(doc, path[:end])
        if isinstance(key, _Named) or not isinstance(parent, dict) or here not in ({}, []) or \
                _config_get(before, path[:end]) is not _ABSENT:
            return
        del parent[key]


# The YAML kubeadm (go-yaml) and cpctl (PyYAML) write a ClusterConfiguration in: block mappings and
# sequences, plain, single- and double-quoted scalars on one line, {} and [], comments. Anything else
# (flow collections, anchors, tags, block or multi-line scalars, several documents) is refused with
# ValueError: the node side then leaves the undo to the next cpctl command, which reads any YAML.
def yaml_load(text):
    """The value of a YAML document in that subset (plain scalars as ``YamlPlain``); ValueError."""
    if len(text) > _YAML_LIMIT:
        raise ValueError("more than %d bytes" % _YAML_LIMIT)
    lines = []  # type: list
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        content = line.lstrip(" ")
        if content.startswith("\t"):
            raise ValueError("line %d: a tab in the indentation" % number)
        if not content.strip() or content.startswith("#"):
            continue
        if content.rstrip() in ("---", "...") or content.startswith("--- "):
            if lines or content.rstrip() != "---":
                raise ValueError("line %d: several documents" % number)
            continue
        lines.append([len(line) - len(content), content.rstrip(" \t"), number])
    if not lines:
        raise ValueError("an empty document")
    value, at = _yaml_block(lines, 0, lines[0][0], 0)
    if at != len(lines):
        raise ValueError("line %d: indented where no value can start" % lines[at][2])
    return value


def _yaml_item_start(content):
    return content == "-" or content.startswith("- ")


def _yaml_block(lines, i, indent, depth):
    if depth > _YAML_DEPTH:
        raise ValueError("line %d: nested deeper than %d" % (lines[i][2], _YAML_DEPTH))
    if _yaml_item_start(lines[i][1]):
        return _yaml_seq(lines, i, indent, depth)
    return _yaml_map(lines, i, indent, depth)


def _yaml_nested(lines, i, indent, depth, same_level_seq):
    """The value on the lines after a key or a dash with nothing after it: a block further in (a
    mapping's sequence may also start at the key's own column), else null."""
    if i < len(lines) and (lines[i][0] > indent or (same_level_seq and lines[i][0] == indent and
                                                    _yaml_item_start(lines[i][1]))):
        return _yaml_block(lines, i, lines[i][0], depth + 1)
    return YamlPlain(""), i


def _yaml_seq(lines, i, indent, depth):
    out = []
    while i < len(lines) and lines[i][0] == indent and _yaml_item_start(lines[i][1]):
        rest = lines[i][1][1:]
        content = rest.lstrip(" ")
        if not content:
            value, i = _yaml_nested(lines, i + 1, indent, depth, False)
        elif _yaml_item_start(content) or _yaml_split_key(content, lines[i][2]) is not None:
            lines[i] = [indent + 1 + len(rest) - len(content), content, lines[i][2]]   # the item's block
            value, i = _yaml_block(lines, i, lines[i][0], depth + 1)
        else:
            value = _yaml_scalar(content, lines[i][2])
            i += 1
            if i < len(lines) and lines[i][0] > indent:
                raise ValueError("line %d: a multi-line value" % lines[i][2])
        out.append(value)
    return out, i


def _yaml_map(lines, i, indent, depth):
    out = {}
    while i < len(lines) and lines[i][0] == indent and not _yaml_item_start(lines[i][1]):
        number = lines[i][2]
        split = _yaml_split_key(lines[i][1], number)
        if split is None:
            raise ValueError("line %d: not a 'key: value' line" % number)
        key, rest = split
        if key in out:
            raise ValueError("line %d: the key %r twice" % (number, str(key)[:40]))
        if rest:
            out[key] = _yaml_scalar(rest, number)
            i += 1
            if i < len(lines) and lines[i][0] > indent:
                raise ValueError("line %d: a multi-line value" % lines[i][2])
        else:
            out[key], i = _yaml_nested(lines, i + 1, indent, depth, True)
    if i < len(lines) and lines[i][0] > indent:
        raise ValueError("line %d: indented where no value can start" % lines[i][2])
    return out, i


def _yaml_split_key(content, number):
    """(key, the rest after ``: ``) of a ``key: value`` line, None when it is none."""
    if content[:1] in ("'", '"'):
        key, end = _yaml_quoted(content, number)
        after = content[end:].lstrip(" ")
        if not after.startswith(":") or after[1:2] not in ("", " "):
            return None
        return key, after[1:].strip(" ")
    at = content.find(": ")
    if at < 0 and content.endswith(":"):
        at = len(content) - 1
    if at <= 0 or content[0] in "?&*!|>%@`[{#," or " #" in content[:at]:
        return None
    return YamlPlain(content[:at].rstrip(" ")), content[at + 1:].strip(" ")


def _yaml_scalar(text, number):
    """One scalar on one line (a trailing comment dropped)."""
    if text[:1] in ("'", '"'):
        value, end = _yaml_quoted(text, number)
        tail = text[end:]
        if tail.strip(" ") and not tail.lstrip(" ").startswith("#") or tail[:1] not in ("", " "):
            raise ValueError("line %d: text after a quoted value" % number)
        return value
    cut = text.find(" #")
    text = (text[:cut] if cut >= 0 else text).rstrip(" ")
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[:1] in "[{&*!|>%@`#" or text.startswith("- ") or ": " in text or text.endswith(":"):
        raise ValueError("line %d: YAML the node side does not read (%s...)" % (number, text[:12]))
    return YamlPlain(text)


_YAML_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f",
                 "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
                 "L": "\u2028", "P": "\u2029"}


def _yaml_quoted(text, number):
    """(value, index after the closing quote) of a quoted scalar at the start of ``text``."""
    quote, out, i = text[0], [], 1
    while i < len(text):
        char = text[i]
        if char == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        if char == "\\" and quote == '"':
            code = text[i + 1:i + 2]
            size = {"x": 2, "u": 4, "U": 8}.get(code, 0)
            if size:
                try:
                    out.append(chr(int(text[i + 2:i + 2 + size], 16)))
                except ValueError:
                    raise ValueError("line %d: a bad escape" % number) from None
                i += 2 + size
                continue
            if code not in _YAML_ESCAPES:
                raise ValueError("line %d: a bad escape" % number)
            out.append(_YAML_ESCAPES[code])
            i += 2
            continue
        out.append(char)
        i += 1
    raise ValueError("line %d: a quoted value that does not end on its line" % number)


def yaml_dump(value):
    """``value`` (read by ``yaml_load``, or made of dicts, lists and strings) as block YAML: plain
    scalars as they were written, other strings double-quoted."""
    if not isinstance(value, dict) or not value:
        raise TypeError("only a non-empty mapping is written")
    return "".join(line + "\n" for line in _yaml_lines(value, 0))


def _yaml_inline(value):
    """The text of a value that fits after ``key: `` or ``- ``, None for a block."""
    if isinstance(value, (dict, list)):
        return None if value else ("{}" if isinstance(value, dict) else "[]")
    if isinstance(value, YamlPlain):
        return str(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if not isinstance(value, str):
        raise TypeError("a %s is not written" % type(value).__name__)
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\n\t":
            out.append("\\n" if char == "\n" else "\\t")
        elif ord(char) < 0x20 or 0x7f <= ord(char) <= 0x9f or char in "\u2028\u2029\ufeff" or \
                0xd800 <= ord(char) <= 0xdfff:
            out.append("\\u%04x" % ord(char))
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def _yaml_lines(value, indent):
    pad = " " * indent
    pairs = [(str(k) if isinstance(k, YamlPlain) else _yaml_inline(k), v) for k, v in value.items()] \
        if isinstance(value, dict) else [(None, v) for v in value]
    for key, item in pairs:
        head = pad + "-" if key is None else pad + key + ":"
        text = _yaml_inline(item)
        if text is not None:
            yield head + (" " + text if text else "")
        elif key is not None:
            yield head
            for line in _yaml_lines(item, indent + 2):
                yield line
        else:
            inner = list(_yaml_lines(item, indent + 2))
            inner[0] = pad + "- " + inner[0][indent + 2:]
            for line in inner:
                yield line


def kept_config_said(what, where, component, op="", version="", keys=(), hint="", why="", record=""):
    """The one line cpctl (``core.keptin.undo``) and the node-side revert (``_plan_keepin``) say about
    putting a ``--keep-in`` write to ConfigMap ``where`` back (``config_undo``): ``what`` is ``gone``,
    ``conflict`` (someone else changed ``keys`` too: nothing written, the change stays recorded in
    ``record``), ``busy`` (written by someone else while cpctl put it back, twice), ``put-back``
    (``keys``: cpctl's keys put back into a text others changed too - none: the text before
    itself; ``version`` the write produced) or ``not-yet`` (``why``); ``hint``: how to run ``check
    --kubeadm`` on that master."""
    if what == "gone":
        return "%s is gone: its change by the %s of %s was not put back" % (where, op, component)
    if what == "conflict":
        return ("%s NOT put back: someone else changed %s too since cpctl's --keep-in change of %s, so the next "
                "kubeadm upgrade renders their value; the change stays recorded (%s) and every cpctl command on this "
                "node tries again: resolve it - put %s back to the value before the change (kubectl -n kube-system "
                "edit cm kubeadm-config), or remove that record to keep theirs - and check it (%s)"
                % (where, ", ".join(keys), component, record or "?", "it" if len(keys) == 1 else "them", hint))
    if what == "busy":
        return ("%s changed while cpctl put its --keep-in change of %s back (someone else writes it): NOT put back "
                "yet; the change stays recorded and the next cpctl command tries again; check it (%s)"
                % (where, component, hint))
    if what == "put-back":
        if keys:
            return ("%s: cpctl's %s put back as before the change, what others changed since kept (resourceVersion "
                    "%s)" % (where, ", ".join(keys), version or "?"))
        return "%s put back as it was before the change (resourceVersion %s)" % (where, version or "?")
    return ("%s NOT put back yet (%s): the --keep-in change of %s stays recorded; the next cpctl command tries again"
            % (where, why, component))


def config_undone_record(who, kept, where, version, text=None, keys=()):
    """The history record ``keep-in-undone`` of putting ``kept`` (a keep-in record's fields: component,
    file, op, before) back, by ``who`` (user, host, node, origin): one shape for cpctl and the node-side
    revert. ``text``: what was written (the text before, unless merged), ``keys``: cpctl's keys merged."""
    import hashlib
    written = kept["before"] if text is None else text
    record = {"time": _utc_now(), "user": who["user"], "host": who["host"], "node": who["node"],
              "action": "keep-in-undone", "component": kept["component"], "file": kept["file"],
              "checksum": hashlib.sha256(written.encode("utf-8")).hexdigest(), "op": kept["op"],
              "configmap": where, "resource_version": version, "origin": who["origin"] or "",
              "reason": "the manifest is back at the version before the change"}
    if keys:
        record["keys"] = list(keys)
    return record


def kept_patch_said(what, path, component, removed=False):
    """The one line about putting a ``--keep-in patches`` file back: ``theirs`` or ``put-back``
    (``removed``: there was none before)."""
    if what == "theirs":
        return ("%s was changed by someone else since cpctl's --keep-in change of %s: left as it is - it may still "
                "hold what was undone" % (path, component))
    return "%s put back as it was before the change%s" % (path, " (removed: there was none)" if removed else "")


#: kubeadm's patch file as cpctl writes it (``--keep-in patches``): ``<component>+json.yaml``
PATCH_FILE_NAME = r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\+json\.yaml$"


def patch_undo(now, was, after):
    """What undoing cpctl's write of a kubeadm patch file does, given the sha256 of the file now
    (None: no file), before the change (None: there was none) and of cpctl's bytes: ``done`` (it
    is as before already), ``theirs`` (someone else's bytes: leave them, say so) or ``write`` (put
    the bytes before back, or remove the file). One rule for ``core.keptin.undo_patch`` and the
    node-side revert (``_plan_patches``)."""
    if now == was:
        return "done"
    return "write" if now == after else "theirs"


def _api_from(ref):
    """(server, tls) for the node-side revert to reach the API server: the credentials read from the
    node's kubeconfig itself, at the byte offsets of their base64 text cpctl recorded at arm time
    (``probes.kubeapi.node_access``: no copy of a credential anywhere), and only while the file is
    the one cpctl read (its sha256; ``kubeadm certs renew`` rewrites admin.conf). None when not."""
    import base64
    import hashlib
    raw = read_file(ref["kubeconfig"], 4 << 20)
    if hashlib.sha256(raw).hexdigest() != ref["sha256"]:
        return None
    tls = dict(ref["tls"])
    for key, (start, end) in ref["slices"].items():
        tls[key] = base64.b64decode(raw[start:end], validate=True)
    return ref["server"], tls


_K8S_NAME = "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
KEPT_OP = "^[0-9a-f]{8,64}$"     #: the change id in a keep-in record's name (``core.keptin`` checks it too)


def kept_record_name(manifest_file, op, patch=False):
    """The file name of a keep-in record in ``STATE/keepin``: ``<file>.<op>.json`` for a ClusterConfiguration
    write, ``<file>.<op>.patch.json`` for a patch file; ``core.keptin`` writes it, the node side finds it."""
    return "%s.%s.%s" % (manifest_file, op, "patch.json" if patch else "json")
_KEPT_FIELDS = ("op", "component", "file", "previous", "checksum", "namespace", "name", "key", "before", "after",
                "resource_version", "time")


def _kept_record(path, state_dir, manifest_file=None):
    """A ``--keep-in kubeadm-config`` record (``STATE/keepin/<file>.<op>.json``, as ``core.keptin`` writes
    it) - of ``manifest_file`` when given -, checked like cpctl checks it; None when gone or not one."""
    import re
    if os.path.dirname(path) != state_dir + "/keepin":
        return None
    kept = _read_json(path, 4 << 20)
    if kept is None or any(not isinstance(kept.get(f), str) for f in _KEPT_FIELDS) or \
            not re.match(KEPT_OP, kept["op"]) or manifest_file not in (None, kept["file"]) or \
            os.path.basename(path) != kept_record_name(kept["file"], kept["op"]) or \
            not re.match(_K8S_NAME, kept["namespace"]) or not re.match(_K8S_NAME, kept["name"]):
        return None
    return kept


def _plan_keepin(plan):
    """After the revert, under the node lock: put back the ClusterConfiguration the reverted change
    wrote (``--keep-in kubeadm-config``), with cpctl's own rule (``config_undo``: exactly cpctl's keys,
    merged into what is there now; a key someone else changed too is a conflict, named, and keeps the
    record), its record dropped, history ``keep-in-undone`` - what ``core.keptin.settle`` does at the
    next cpctl command, done here at once because a master managed over SSH may see none for a long
    time. What cannot be done now (no API, the kubeconfig changed, YAML this agent does not read, a
    conflict) stays recorded for that next command. One line per record handled."""
    state_dir = os.path.dirname(plan["journal"])
    records = [(p, r) for p, r in ((p, _kept_record(p, state_dir, plan["entry"]["file"]))
                                   for p in plan["keepin"]) if r]
    if not records:
        return []
    try:
        access = _api_from(plan["api"]) if plan["api"] else None
        why = "" if access else "the node's kubeconfig is not the one cpctl read at arm time, or cannot be used"
    except (OSError, ValueError) as exc:     # not readable, or not base64 where it was (plan_problem: the rest)
        access, why = None, "the node's kubeconfig: %s" % (getattr(exc, "strerror", None) or type(exc).__name__)
    lines = []
    for path, kept in records:
        where = "%s/%s" % (kept["namespace"], kept["name"])
        try:
            if access is None:
                raise OSError(errno.EACCES, why)
            line, settled = _put_back_config(plan, kept, access, path)
            if settled:
                unlink(path)
        except (OSError, ValueError) as exc:
            line = kept_config_said("not-yet", where, kept["component"], why=getattr(exc, "strerror", None) or exc)
        if line:
            lines.append(line)
    return lines


def _api_json(method, url, access, body=None):
    """(status, the JSON object answered, or None) of one request to the API server."""
    import json
    server, tls = access
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
        body = json.dumps(body).encode("utf-8")
    reply = http(method, server + url, headers=headers, body=body, timeout=10.0, tls=tls, limit=4 << 20)
    if reply["status"] != 200:
        return reply["status"], None
    found = json.loads(reply["body"].decode("utf-8"))
    if not isinstance(found, dict):
        raise ValueError("%s %s: the answer is not an object" % (method, url))
    return 200, found


def _put_back_config(plan, kept, access, record=""):
    """One record (at ``record``): GET the ConfigMap, merge with ``config_undo`` (cpctl's keys only),
    PUT the result over the resourceVersion read (a write by someone else in between: read and merge
    again, once). (line, settled): what happened ("" when nothing to say), and whether the record is
    done with - a conflict keeps it until resolved. OSError/ValueError: the API could not be asked
    (the record stays)."""
    where = "%s/%s" % (kept["namespace"], kept["name"])
    url = "/api/v1/namespaces/%s/configmaps/%s" % (kept["namespace"], kept["name"])
    hint = plan["check_hint"]
    for _attempt in (1, 2):
        status, found = _api_json("GET", url, access)
        if status not in (200, 404):
            raise OSError(errno.EIO, "GET %s answered HTTP %d" % (where, status))
        data = (found or {}).get("data")
        data = data if isinstance(data, dict) else {}
        text = data.get(kept["key"])
        decision, new_text, keys = config_undo(None if found is None else text if isinstance(text, str) else "",
                                               kept["before"], kept["after"])
        if decision == "unreadable":
            raise ValueError("the ClusterConfiguration is YAML the master's revert does not read (%s); cpctl "
                             "reads any" % "; ".join(keys))
        if decision == "gone":
            return kept_config_said(decision, where, kept["component"], kept["op"]), True
        if decision == "conflict":
            return kept_config_said(decision, where, kept["component"], keys=keys, hint=hint, record=record), False
        if decision != "write":
            return "", True
        status, written = _api_json("PUT", url, access, dict(found or {}, data=dict(data, **{kept["key"]: new_text})))
        if status != 409:
            break
    else:
        return kept_config_said("busy", where, kept["component"], hint=hint), False
    if status != 200:
        raise OSError(errno.EIO, "PUT %s answered HTTP %d" % (where, status))
    meta = (written or {}).get("metadata")
    version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
    _kept_ours_again(os.path.dirname(plan["journal"]), kept, version)
    _append_record(plan, config_undone_record(plan["verdict"], kept, where, version, new_text, keys))
    return kept_config_said("put-back", where, kept["component"], version=version, keys=keys), True


def _kept_ours_again(state_dir, kept, version):
    """An older recorded change whose text is back now: cpctl's write again, at ``version`` (as
    ``core.keptin.undo`` re-saves it)."""
    import json
    folder = state_dir + "/keepin"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = folder + "/" + name
        if not name.endswith(".json") or name.endswith(".patch.json") or name.startswith("."):
            continue
        other = _kept_record(path, state_dir)
        if other is None or other["op"] == kept["op"] or other["after"] != kept["before"] or \
                other["namespace"] != kept["namespace"] or other["name"] != kept["name"]:
            continue
        other["resource_version"] = version
        write_atomic(path, (json.dumps(other, indent=2, sort_keys=True) + "\n").encode("utf-8"))


# --- the runtime's view of a static pod: ONE reading of crictl's JSON, for cpctl's crictl probe
# (``cpctl.probes.crictl``, through a Host) and for the node-side revert's verification (here) ----------
CRICTL_JSON_LIMIT = 8 << 20    # bytes of one crictl JSON answer read: kilobytes in practice


class PodLookError(Exception):
    """crictl could not tell (busy or refused socket, a timeout, output that is not its JSON);
    ``missing``: it is not installed - it will not appear later in the run."""

    def __init__(self, message, missing=False):
        Exception.__init__(self, message)
        self.message = message
        self.missing = missing


def _one_line(data):
    """A program's stderr as one printable line of at most 200 characters."""
    text = data.decode("utf-8", "replace")
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]


def _nanos(value):
    """A crictl ``createdAt`` (nanoseconds, a string in JSON; 0 when it is not a number)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _crictl_restarts(containers):
    """Restarts of the running containers: the kubelet's restartCount annotation, else the CRI
    attempt number (the kubelet counts attempts from 0 in each sandbox); None when neither says."""
    total, known = 0, False
    for c in containers:
        notes, meta = c.get("annotations"), c.get("metadata")
        note = notes.get("io.kubernetes.container.restartCount") if isinstance(notes, dict) else None
        attempt = meta.get("attempt") if isinstance(meta, dict) else None
        if isinstance(note, str) and note.isdigit():
            total, known = total + int(note), True
        elif isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0:
            total, known = total + attempt, True
    return total if known else None


def crictl_json(run, crictl, args, deadline, least):
    """``crictl ARGS -o json`` as an object, within ``deadline`` (time.monotonic()); ``run(argv,
    timeout, limit)`` -> (rc, stdout, stderr) runs it where the pod is."""
    import json
    timeout = max(least, deadline - time.monotonic())
    try:
        rc, out, err = run([crictl] + list(args) + ["-o", "json"], timeout, CRICTL_JSON_LIMIT + 1)
    except OSError as exc:   # e.g. EACCES: the binary is not executable
        if exc.errno == errno.ENOENT:
            raise PodLookError("%s not found" % crictl, missing=True) from None
        raise PodLookError("cannot run %s: %s" % (crictl, exc.strerror or exc)) from None
    if rc == 127:
        raise PodLookError("%s not found" % crictl, missing=True)
    if rc == 124 and err.strip() == b"timed out":
        raise PodLookError("crictl %s timed out after %.1fs" % (args[0], timeout))
    if rc != 0:
        raise PodLookError("crictl %s failed (exit %d): %s" % (args[0], rc, _one_line(err)))
    if len(out) > CRICTL_JSON_LIMIT:
        raise PodLookError("crictl %s printed more than %d bytes" % (args[0], CRICTL_JSON_LIMIT))
    try:
        value = json.loads(out.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise PodLookError("crictl %s printed no JSON" % args[0]) from None
    if not isinstance(value, dict):
        raise PodLookError("crictl %s printed JSON that is not an object" % args[0])
    return value


def _crictl_list(value, key, what):
    """``value[key]``: a list of objects (crictl's JSON, untrusted), else PodLookError."""
    if key not in value:
        raise PodLookError("crictl %s printed no %s list" % (what, key))
    items = value[key]
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise PodLookError("crictl printed malformed JSON: %s.%s is not a list of objects" % (what, key))
    return items


def _crictl_text(value, key, what):
    found = value.get(key, "")
    if found is None:
        return ""
    if not isinstance(found, str):
        raise PodLookError("crictl printed malformed JSON: %s.%s is not text" % (what, key))
    return found


def crictl_pod(run, crictl, name, namespace, timeout, least=0.2):
    """The static pod ``namespace/name`` as the runtime sees it: its newest ready sandbox and the
    containers running in it - a dict with ``present``, ``ready`` (every container of the sandbox
    running), ``phase``, ``uid`` (the sandbox's pod uid), ``containers`` (running IDs), ``started``
    (newest container start, epoch seconds), ``created`` (the sandbox's) and ``restarts``. The one
    reading of crictl's output: cpctl's crictl probe and the node-side revert's check both use it.
    PodLookError when crictl cannot tell."""
    import re
    deadline = time.monotonic() + timeout
    # --name/--namespace are regexes: anchor them, or kube-apiserver would match more.
    listing = crictl_json(run, crictl, ("pods", "--name", "^%s$" % re.escape(name), "--namespace",
                                         "^%s$" % re.escape(namespace)), deadline, least)
    live = [s for s in _crictl_list(listing, "items", "pods") if _crictl_text(s, "state", "sandbox") == "SANDBOX_READY"]
    if not live:
        return {"present": False, "ready": False, "phase": "", "uid": "", "containers": [], "started": None,
                "created": None, "restarts": None}
    sandbox = max(live, key=lambda s: _nanos(s.get("createdAt")))
    sandbox_id = _crictl_text(sandbox, "id", "sandbox")
    if not sandbox_id:
        raise PodLookError("crictl pods printed a sandbox without an id")
    meta = sandbox.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise PodLookError("crictl printed malformed JSON: sandbox.metadata is not an object")
    found = crictl_json(run, crictl, ("ps", "--pod", sandbox_id), deadline, least)
    containers = _crictl_list(found, "containers", "ps")
    running = [c for c in containers if _crictl_text(c, "state", "container") == "CONTAINER_RUNNING"]
    created = [_nanos(c.get("createdAt")) / 1e9 for c in running]
    return {"present": True, "ready": bool(running) and len(running) == len(containers),
            "phase": "Running" if running else "Pending", "uid": _crictl_text(meta or {}, "uid", "sandbox.metadata"),
            "containers": [_crictl_text(c, "id", "container") for c in running],
            "started": max(created) if created else None, "created": _nanos(sandbox.get("createdAt")) / 1e9,
            "restarts": _crictl_restarts(running)}


def is_new_since(now, before):
    """True when the pod seen ``now`` cannot be the one seen ``before`` (dicts as ``crictl_pod``
    gives; ``before`` None or not present: anything is new): another pod uid, no container in
    common, or a later container start. cpctl's waiter (``PodState.is_new_since``) and the
    node-side revert's check judge "new" with this one rule."""
    if not before or not before.get("present"):
        return True
    if now.get("uid") and before.get("uid") and now["uid"] != before["uid"]:
        return True
    if now.get("containers") and before.get("containers") and not set(now["containers"]) & set(before["containers"]):
        return True
    return bool(now.get("started") and before.get("started") and now["started"] > before["started"])


def _run_here(argv, timeout, limit):
    """``run`` on this node as ``crictl_pod`` calls it: (rc, stdout, stderr)."""
    done = run(argv, timeout=timeout, limit=limit)
    return done["rc"], done["stdout"], done["stderr"]


def _plan_verify(check):
    """The reverted version runs, judged as cpctl's waiter judges it when it looks through crictl and
    the health endpoint: the pod as ``crictl_pod`` reads it (cpctl's crictl probe's reading),
    Ready and new since the one seen at arm time (``is_new_since``, the waiter's rule; no crictl on
    the node: the endpoint alone), and the version's own health endpoint answering 200 - still so
    ``settle`` seconds later. (ok, why)."""
    deadline = time.time() + check["timeout"]
    before = check["before"]
    healthy_since = None
    why = "not seen yet"
    seen_why = ""        # the last reading crictl gave: a last look cut short by the deadline does not hide it
    while time.time() < deadline:
        fresh = True
        if check["crictl"]:
            try:
                seen = crictl_pod(_run_here, check["crictl"], check["pod"], check["namespace"],
                                  min(10.0, max(0.2, deadline - time.time())))
            except PodLookError as exc:
                fresh = False
                why = "crictl: %s%s" % (seen_why + "; then " if seen_why else "", exc.message)
            else:
                fresh = seen["present"] and seen["ready"] and is_new_since(seen, before)
                seen_why = ("not yet created" if not seen["present"] else
                            "not Ready" if not seen["ready"] else "still the old pod" if not fresh else "new")
                why = "crictl: %s" % seen_why
        ok = fresh
        if fresh and check["url"]:
            try:
                ok = http("GET", check["url"], timeout=3.0, tls={"insecure": True}, limit=1 << 16)["status"] == 200
            except Exception as exc:  # noqa: BLE001 - not answering yet
                ok = False
                why = "%s: %s" % (check["url"], getattr(exc, "strerror", None) or exc)
            else:
                why = why if ok else "%s does not answer 200" % check["url"]
        if ok:
            healthy_since = healthy_since or time.time()
            if time.time() - healthy_since >= check["settle"]:
                return True, "a new %s pod runs%s" % (check["pod"], " and %s answers 200" % check["url"]
                                                     if check["url"] else " (crictl)")
        else:
            healthy_since = None
        time.sleep(1)
    return False, "no new healthy pod within %ds (%s)" % (check["timeout"], why)


# How the timer starts this file (``ops.confirm._start_remote``): ``python3 -c VERIFY_LOADER AGENT SHA256
# revert-plan PLAN --plan-sha256 SHA256 [--at EPOCH]``. The loader reads the agent file once, runs it only
# when its sha256 is the one recorded at arm time (in the timer's own command line, not in the state
# dir), and the agent applies the plan only when ITS sha256 is the one recorded. No ``%``, ``$`` or
# backslash: a unit's command line would expand or unescape them.
VERIFY_LOADER = (
    "import hashlib,sys;p,h=sys.argv[1],sys.argv[2];d=open(p,'rb').read();"
    "ok=hashlib.sha256(d).hexdigest()==h;"
    "ok or sys.stderr.write('cpctl: '+p+' is not the agent cpctl armed (sha256 differs): not run (exit 7)'+chr(10));"
    "ok or sys.exit(7);sys.argv=[p]+sys.argv[3:];exec(compile(d,p,'exec'),{'__name__':'__main__','__file__':p})")


def link_below(path, top, look=None):
    """The first directory between ``top`` (excluded) and ``path`` (excluded) that is a symlink, or
    None: a write or removal below it would land elsewhere (``look``: an lstat returning a dict with
    ``kind``, this module's by default)."""
    look = look or lstat
    top = top.rstrip("/")
    if not path.startswith(top + "/"):
        return None
    current = top
    for part in path[len(top) + 1:].split("/")[:-1]:
        current += "/" + part
        found = look(current)
        if found is None:
            return None
        if found["kind"] == "symlink":
            return current
    return None


# --- the revert plan (``host.base.RevertPlan``): its every field checked before any of it is used -----------
_PLAN_TEXT = 4096          # characters of one text field (a path, a name, a reason, a URL)
_PLAN_ITEMS = 64           # steps of one change; companion files, keep-in records, patch files of a plan
_PLAN_RECORD = 4 << 20     # bytes of one history record as JSON (a diff is in it)
_HEX64 = "^[0-9a-f]{64}$"
_PLAN_NAME = "^[A-Za-z0-9][-A-Za-z0-9_.+]*$"     # a component, a manifest or patch file's name, an action


def _text(pattern=None):
    """A plan field's check: text of at most ``_PLAN_TEXT`` characters (matching ``pattern``)."""
    def check(value, where):
        import re
        if not isinstance(value, str):
            return "%s is not text" % where
        if len(value) > _PLAN_TEXT:
            return "%s is longer than %d characters" % (where, _PLAN_TEXT)
        if pattern and not re.fullmatch(pattern, value):
            return "%s is not of the form %s: %r" % (where, pattern, value[:80])
        return ""
    return check


def _path(value, where):
    """An absolute, clean path (no ``.``, ``..``, ``//``, trailing slash or NUL)."""
    problem = _text()(value, where)
    if not problem and (not value.startswith("/") or os.path.normpath(value) != value or value.startswith("//")
                        or "\0" in value):
        return "%s is not an absolute clean path: %r" % (where, value[:80])
    return problem


def _absolute(value, where):
    """An absolute path the revert only reads or runs (the kubeconfig, its TLS files, crictl)."""
    problem = _text()(value, where)
    return problem or ("" if value.startswith("/") and "\0" not in value else
                       "%s is not an absolute path: %r" % (where, value[:80]))


def _number(top):
    """A plan field's check: a whole number from 0 to ``top``."""
    def check(value, where):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
            return "%s is not a whole number from 0 to %d" % (where, top)
        return ""
    return check


def _flag(value, where):
    return "" if isinstance(value, bool) else "%s is not true or false" % where


def _seconds(value, where):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12
    return "" if ok else "%s is not a time in seconds" % where


def _maybe(check):
    """``check``, or null."""
    return lambda value, where: "" if value is None else check(value, where)


def _either(first, second):
    """``first``'s check, or else ``second``'s."""
    return lambda value, where: first(value, where) and second(value, where)


def _list(check, least=0, most=_PLAN_ITEMS):
    """A list of ``least`` to ``most`` items, each passing ``check``."""
    def checked(value, where):
        if not isinstance(value, list) or not least <= len(value) <= most:
            return "%s is not a list of %d to %d items" % (where, least, most)
        for index, item in enumerate(value):
            problem = check(item, "%s[%d]" % (where, index))
            if problem:
                return problem
        return ""
    return checked


def _record(value, where):
    """A history record: a JSON object of at most ``_PLAN_RECORD`` bytes."""
    import json
    if not isinstance(value, dict):
        return "%s is not an object" % where
    if len(json.dumps(value)) > _PLAN_RECORD:
        return "%s is larger than %d bytes" % (where, _PLAN_RECORD)
    return ""


def _object(fields, optional=None):
    """A plan field's check: an object with exactly ``fields`` (name: check) and any of ``optional``."""
    optional = optional or {}

    def check(value, where):
        if not isinstance(value, dict):
            return "%s is not an object" % where
        for key in value:
            if key not in fields and key not in optional:
                return "%s.%s is not a field of a revert plan" % (where, str(key)[:80])
        for key in fields:
            if key not in value:
                return "%s.%s is missing" % (where, key)
        for key, field in list(fields.items()) + list(optional.items()):
            problem = key in value and field(value[key], "%s.%s" % (where, key))
            if problem:
                return problem
        return ""
    return check


_STEP_NEEDS = {"move": ("src", "checksum"), "write": ("checksum", "staged"), "remove": ("kept",), "touch": ()}
_step_fields = _object({"kind": _text("^(move|write|remove|touch)$"), "path": _path, "mode": _number(0o7777)},
                       {"src": _path, "checksum": _text(_HEX64), "staged": _path, "before": _text(_HEX64),
                        "kept": _path, "uid": _number(1 << 32), "gid": _number(1 << 32)})


def _step(value, where):
    """A step as ``StepRunner`` runs it from a plan: its kind's paths and sha256 there (a write's new
    bytes staged, the bytes it replaces kept)."""
    problem = _step_fields(value, where)
    if problem:
        return problem
    for key in _STEP_NEEDS[value["kind"]] + (("kept",) if value.get("before") else ()):
        if not value.get(key):
            return "%s.%s is missing (a %s step)" % (where, key, value["kind"])
    return ""


def _entry(value, where):
    """A journal entry (``core.journal.entry_of``) whose commit step is one of its steps."""
    problem = _entry_fields(value, where)
    if not problem and value["commit"] >= len(value["steps"]):
        return "%s.commit is not one of its steps" % where
    return problem


_entry_fields = _object({
    "version": _number(1 << 16), "op": _text(KEPT_OP), "action": _text(_PLAN_NAME), "component": _text(_PLAN_NAME),
    "file": _text(_PLAN_NAME), "checksum": _maybe(_text(_HEX64)), "commit": _number(_PLAN_ITEMS),
    "steps": _list(_step, 1), "record": _record, "started": _text(), "pid": _number(1 << 32),
    "companions": _list(_path)})
_identity = _object({"present": _flag, "uid": _text(), "containers": _list(_text()), "started": _maybe(_seconds)})
_api = _object({"server": _text("^https?://[^\\s]+$"), "kubeconfig": _absolute, "sha256": _text(_HEX64),
                "tls": _object({}, {"insecure": _flag, "ca_file": _absolute, "cert_file": _absolute,
                                    "key_file": _absolute}),
                "slices": _object({}, dict((k, _list(_number(4 << 20), 2, 2)) for k in ("ca_data", "cert_data",
                                                                                       "key_data")))})
_plan_shape = _object({
    "version": _number(1), "op": _text(KEPT_OP), "armed": _text(_HEX64), "arm": _path, "lock": _path,
    "journal": _path, "entry": _entry, "record": _record,
    "verdict": _object(dict([(k, _text()) for k in ("user", "host", "node", "reason", "armed_op", "origin")] + [
        ("component", _text(_PLAN_NAME)), ("file", _text(_PLAN_NAME)), ("checksum", _text(_HEX64)),
        ("revision", _number(1 << 32))])),
    "verify": _object({"url": _text("^(https?://[^\\s]+)?$"), "crictl": _either(_absolute, _text("^[-A-Za-z0-9_.]*$")),
                       "pod": _text(), "namespace": _text(), "before": _maybe(_identity),
                       "timeout": _number(86400), "settle": _number(3600)}),
    "keepin": _list(_path), "api": _maybe(_api), "check_hint": _text(),
    "patches": _list(_object({"entry": _entry, "history": _record, "record": _path, "after": _text(_HEX64),
                              "was": _maybe(_text(_HEX64))}))})


def plan_problem(plan):
    """Why the revert plan cannot be run ("" when it can), in one line: checked in full before any of
    it is used - every field of ``host.base.RevertPlan`` present with its type and within its bounds,
    each step as ``StepRunner`` runs it, and every path where a revert may touch (``_plan_paths_problem``).
    The rest of the node-side revert reads the plan as that shape."""
    return _plan_shape(plan, "plan") or _plan_state_problem(plan) or _plan_paths_problem(plan)


def _plan_state_problem(plan):
    """Why the plan's state files are not where cpctl keeps them ("" when they are): the journal
    (``STATE/journal.json``), the lock, the arm record of its manifest (``STATE/confirm/<file>.json``)
    and the keep-in records (``STATE/keepin/*.json``), STATE never ``/``."""
    state_dir = os.path.dirname(plan["journal"])
    wanted = (("journal", state_dir + "/journal.json"), ("lock", state_dir + "/lock"),
              ("arm", "%s/confirm/%s.json" % (state_dir, plan["entry"]["file"])))
    for key, path in wanted:
        if plan[key] != path or state_dir == "/":
            return "plan.%s is %s, not the state dir's %s" % (key, plan[key], path)
    for path in plan["keepin"]:
        if os.path.dirname(path) != state_dir + "/keepin" or not path.endswith(".json"):
            return "the plan names %r as a keep-in record" % path
    return ""


def _plan_paths_problem(plan):
    """Why the plan names a path outside its allowance ("" when it does not; part of ``plan_problem``):
    each step's paths lie in the manifests dir (the file itself), below the state dir, or are one of
    its recorded companion files below the kube dir, or - in a patch file's undo - that kubeadm patch
    file below the kube dir; nothing below a symlinked directory (checked now, on this node)."""
    import re
    entry = plan["entry"]
    manifests_dir = os.path.dirname(entry["steps"][entry["commit"]]["path"])
    state_dir = os.path.dirname(plan["journal"])
    kube_dir = os.path.dirname(manifests_dir)

    def outside(path, allowed, manifest_ok=True):       # absolute and clean (``plan_problem``)
        if (manifest_ok and path == manifests_dir + "/" + entry["file"]) or path.startswith(state_dir + "/"):
            return ""
        if allowed(path) and kube_dir != "/" and path.startswith(kube_dir + "/") \
                and not path.startswith(manifests_dir + "/") and link_below(path, kube_dir) is None:
            return ""
        return "the plan names %s, outside what a revert of %s may touch" % (path, entry["file"])

    companions = set(entry["companions"])
    for step in entry["steps"]:
        for key in ("path", "src", "staged", "kept"):
            problem = step.get(key) and outside(step[key], lambda p, k=key: k == "path" and p in companions)
            if problem:
                return problem
    for item in plan["patches"]:
        record = item["record"]
        if os.path.dirname(record) != state_dir + "/keepin" or not record.endswith(".patch.json"):
            return "the plan names %r as a keep-in record" % record
        for step in item["entry"]["steps"]:
            for key in ("path", "src", "staged", "kept"):
                problem = step.get(key) and outside(step[key], lambda p, k=key: k == "path" and re.match(
                    PATCH_FILE_NAME, os.path.basename(p)) is not None, manifest_ok=False)
                if problem:
                    return problem
    return ""


RETRY_FIRST, RETRY_MAX = 5.0, 300.0    # a revert that meets an environment error: again after 5 s, 10 s, ... 5 min


def _arm_record(path):
    """The arm record at ``path`` as a dict (None: none, or not readable as one)."""
    return _read_json(path, 1 << 16)


def arm_due_in(arm, now=None):
    """Seconds until ``arm`` is due by this node's clocks (``cpctl.core.confirmations.Arm.due_in``):
    CLOCK_BOOTTIME within the boot it was armed in, the wall-clock deadline after a reboot."""
    import calendar
    now = now or clock()
    due = arm.get("due_boottime")
    if arm.get("boot_id") and isinstance(due, (int, float)) and due > 0 and arm.get("boot_id") == now["boot_id"]:
        return float(due) - now["boottime"]
    try:
        deadline = calendar.timegm(time.strptime(str(arm.get("deadline")), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return 0.0
    return deadline - now["time"]


def _plan_wait(plan, within):
    """Wait until the plan's arm is due (``arm_due_in``); False when it went away meanwhile (an arm
    never seen ends the wait after ``within`` seconds, or at once without it: the timer fired)."""
    started = boottime()
    seen = False
    while True:
        arm = _arm_record(plan["arm"])
        if arm is not None and arm.get("op") == plan["op"]:
            seen = True
            left = arm_due_in(arm)
        elif seen:
            return False
        else:
            left = started + within - boottime() if within is not None else 0.0
        if left <= 0:
            return True
        time.sleep(min(1.0, left))


def _plan_failed(plan, why, pause):
    """Note in the arm record why the revert failed, the attempt count and the next try (one atomic
    rewrite, only while the record holds the bytes just read: a confirm in between wins)."""
    import hashlib
    import json
    try:
        data = read_file(plan["arm"], 1 << 16)
        arm = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(arm, dict) or arm.get("op") != plan["op"]:
        return
    attempts = arm.get("attempts")
    arm["attempts"] = (attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0) + 1
    arm["failing"] = " ".join(why.split())[:500]
    arm["next_try"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + pause))
    try:
        write_atomic(plan["arm"], (json.dumps(arm, indent=2, sort_keys=True) + "\n").encode("utf-8"), 0o600,
                     expect=hashlib.sha256(data).hexdigest())
    except OSError:
        pass


def _plan_cleanup(plan_path):
    """Remove the plan's files (``<file>.<op>.agent.py``, ``.plan``, staged copies): the revert is
    over, they must not pile up in the state dir."""
    base = plan_path[:-len(".plan")] if plan_path.endswith(".plan") else plan_path
    folder, prefix = os.path.dirname(base), os.path.basename(base) + "."
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            _unlink_quiet(os.path.join(folder, name))


def _plan_kept_parts(plan):
    """The revert is done: put its ``--keep-in`` parts back and log each line. Whatever goes wrong
    here never stops the revert's verification: the records stay for the next cpctl command."""
    try:
        lines = _plan_keepin(plan) + _plan_patches(plan, _node_runner())
    except Exception as exc:  # noqa: BLE001 - the revert itself is done and recorded
        lines = ["the --keep-in part of the reverted change is NOT put back yet (%s: %s): the next cpctl command "
                 "tries again" % (type(exc).__name__, getattr(exc, "strerror", None) or exc)]
    for line in lines:
        _plan_log(line, "NOT" in line or "someone else" in line)


def _plan_attempt(plan):
    """One try under the node lock: (exit code, message); 5 and 7 are retried."""
    component = plan["entry"]["component"]
    try:
        lock(plan["lock"], 120, "pid %d (cpctl revert-plan %s)" % (os.getpid(), component))
    except Exception as exc:  # noqa: BLE001 - LockBusy, or an I/O error
        return 5, "the node lock: %s" % exc
    try:
        code, message = _plan_apply(plan)
        if code == 0 and message == "reverted":
            _plan_kept_parts(plan)
        return code, message
    except OSError as exc:
        return 7, ("%s; the journal (if written) is finished or rolled back by the next cpctl run"
                   % (exc.strerror or exc))
    except JournalKeyError as exc:           # nothing written: the journal is sealed before it is written
        return 7, "%s: inspect it (cpctl creates it when it is absent)" % exc
    finally:
        unlock(plan["lock"])


def revert_plan_main(argv):
    """``revert-plan PLAN --plan-sha256 SHA256 [--within SECONDS]``: wait until the arm is due by
    this node's clock, then revert (see above) - only a plan whose bytes are the ones recorded at
    arm time, naming only paths it may touch. An environment error (the lock held, EROFS, EIO, a
    pending journal) keeps the arm: it is noted in the arm record and tried again with back-off."""
    import hashlib
    import json
    options = dict(zip(argv[1::2], argv[2::2]))
    with open(argv[0], "rb") as handle:
        data = handle.read(64 << 20)
    if hashlib.sha256(data).hexdigest() != options.get("--plan-sha256"):
        _plan_log("the revert plan %s is not the one cpctl armed (sha256 differs): not applied (exit 7)" % argv[0],
                  True)
        return 7
    try:
        plan = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        plan, problem = None, "it is not JSON (%s)" % exc
    else:
        problem = plan_problem(plan)
    if problem:
        _plan_log("revert plan %s refused: %s; nothing done, the arm stays for the operator (exit 7)"
                  % (argv[0], " ".join(problem.split())), True)
        return 7
    within = float(options["--within"]) if "--within" in options else None
    if within is None and "--at" in options:       # a timer armed by an older cpctl
        within = max(0.0, float(options["--at"]) - time.time())
    component = plan["entry"]["component"]
    if not _plan_wait(plan, within):
        _plan_log("nothing armed for %s any more (confirmed)" % component)
        _plan_cleanup(argv[0])
        return 0
    while True:
        code, message = _plan_attempt(plan)
        if code not in (5, 7):
            break
        arm = _arm_record(plan["arm"])
        if arm is None or arm.get("op") != plan["op"]:
            code, message = 0, "nothing armed for %s any more (confirmed)" % component
            break
        attempts = arm.get("attempts") if isinstance(arm.get("attempts"), int) else 0
        pause = min(RETRY_MAX, RETRY_FIRST * 2 ** min(attempts, 10))
        _plan_failed(plan, message, pause)
        _plan_log("revert of the unconfirmed change of %s failed (attempt %d): %s; the arm stays, next try in %ds"
                  % (component, attempts + 1, message, pause), True)
        end = boottime() + pause
        while boottime() < end and (_arm_record(plan["arm"]) or {}).get("op") == plan["op"]:
            time.sleep(min(1.0, max(0.0, end - boottime())))
    if message != "reverted":
        _plan_log("%s (exit %d)" % (message, code), code != 0)
        _plan_cleanup(argv[0])
        return code
    ok, why = _plan_verify(plan["verify"])
    verdict = dict(plan["verdict"], time=_utc_now(), action="reverted",
                   outcome="verified" if ok else "NOT healthy: " + why)
    if ok:
        _plan_log("unconfirmed change of %s reverted to revision %s: %s" % (component, plan["verdict"]["revision"],
                                                                           why))
    else:
        _plan_log("unconfirmed change of %s reverted to revision %s, but the reverted version is NOT verified "
                  "healthy: %s; act now (exit 12)" % (component, plan["verdict"]["revision"], why), True)
    _append_record(plan, verdict)
    _plan_cleanup(argv[0])
    return 0 if ok else 12


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "revert-plan":
        sys.exit(revert_plan_main(sys.argv[2:]))
    agent_main()

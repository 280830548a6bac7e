"""The node's files: lstat, reads, atomic writes, moves (``renameat2`` without replacing), locks,
bounded command runs and who this process is (``info``).

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import errno
import fcntl
import os
import stat
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set

from cpctl.agent.shapes import DirEntry, HostInfo, RunAnswer, Stat

# base64 and json (both import re), socket and subprocess are left out on purpose: every remote
# run starts this agent on every master, and each of them adds to its start-up (see _json_codec).

TEMP_MARK = ".cpctl-tmp"
_HELD_LOCKS: Dict[str, int] = {}


class LockBusy(Exception):
    """The node lock is held by another cpctl run; ``holder`` says by whom."""

    def __init__(self, holder: str) -> None:
        Exception.__init__(self, holder)
        self.holder = holder


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def lstat(path: str) -> Optional[Stat]:
    """Return the file's metadata without following a symlink, or None when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return {
        "kind": _kind(st.st_mode), "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid,
        "gid": st.st_gid, "size": st.st_size, "mtime": st.st_mtime, "dev": st.st_dev,
    }


def listdir(path: str) -> List[str]:
    """Sorted names in a directory (kubelet also works on a sorted listing)."""
    return sorted(os.listdir(path))


def scan_dir(path: str, limit: int) -> List[DirEntry]:
    """One round trip for a whole directory: each entry's lstat and, for regular files of at most
    ``limit`` bytes, its bytes. Remote status and drift checks need the whole manifests dir at once.

    A symlink is read the way the kubelet reads it (it follows links): the entry stays the
    link's own lstat ("kind": "symlink", so that nobody moves or writes through it) and gains
    "target" (the link's text), "target_kind" (None when dangling or looping, with "error") and
    "target_size", plus the target's bytes when that is a regular file of at most ``limit`` bytes."""
    entries: List[DirEntry] = []
    for name in listdir(path):
        full = os.path.join(path, name)
        seen = lstat(full)
        if seen is None:
            continue
        info = _dir_entry(seen, name)
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


def _dir_entry(seen: Stat, name: str) -> DirEntry:
    """The lstat ``seen`` of the entry ``name`` as an entry of ``scan_dir``."""
    return {"kind": seen["kind"], "mode": seen["mode"], "uid": seen["uid"], "gid": seen["gid"], "size": seen["size"],
            "mtime": seen["mtime"], "dev": seen["dev"], "name": name}


def _link_target(path: str, info: DirEntry) -> int:
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


def read_file(path: str, limit: int, follow: bool = False) -> bytes:
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


def read_tail(path: str, limit: int) -> bytes:
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


def compress(src: str, dst: str) -> None:
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


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: str) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temp_name(name: str) -> bool:
    """True for the dot-temp files ``temp_name`` makes (left behind only by a killed writer)."""
    return name.startswith(".") and TEMP_MARK in name


def temp_name(path: str) -> str:
    """Dot-prefixed sibling used while writing ``path``: kubelet ignores dot files."""
    directory, name = os.path.split(path)
    return os.path.join(directory, ".%s%s-%d" % (name, TEMP_MARK, os.getpid()))


def _write_new(path: str, data: bytes, mode: int, uid: Optional[int], gid: Optional[int]) -> None:
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


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path: str, data: bytes, mode: int = 0o600, uid: Optional[int] = None, gid: Optional[int] = None,
                 expect: Optional[str] = None) -> None:
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


def _check_current(path: str, expect: str) -> None:
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


def move(src: str, dst: str) -> str:
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


def move_across(src: str, dst: str, remove: Optional[Callable[[str], None]] = None) -> str:
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


#: renameat2(olddirfd, oldpath, newdirfd, newpath, flags) of the C library
_Renameat2 = Callable[[int, bytes, int, bytes, int], int]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
# [the C function, or None], looked up on the first move (ctypes costs the agent ~2 ms)
_RENAMEAT2: List[Optional[_Renameat2]] = []


def _renameat2() -> Optional[_Renameat2]:
    if not _RENAMEAT2:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            _RENAMEAT2.append(getattr(libc, "renameat2", None))
        except (OSError, AttributeError, ImportError):
            _RENAMEAT2.append(None)
    return _RENAMEAT2[0]


def rename_noreplace(src: str, dst: str) -> None:
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


def unlink(path: str, missing_ok: bool = True) -> bool:
    """Remove a file and make the removal durable."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise
        return False
    fsync_dir(os.path.dirname(path) or ".")
    return True


def makedirs(path: str, mode: int = 0o700) -> None:
    """Create ``path`` (and parents) with ``mode`` when missing; never chmod an existing dir."""
    if lstat(path) is None:
        try:
            os.makedirs(path, mode)
        except FileExistsError:
            return  # a concurrent cpctl created it first; the caller checks kind, mode and owner
        os.chmod(path, mode)


def chmod(path: str, mode: int) -> None:
    os.chmod(path, mode)


def append(path: str, data: bytes) -> None:
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


def lock(path: str, timeout: float, holder: str) -> None:
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


def unlock(path: str) -> None:
    fd = _HELD_LOCKS.pop(path, None)
    if fd is not None:
        if path not in _DIR_LOCKS:
            os.ftruncate(fd, 0)
        _DIR_LOCKS.discard(path)
        os.close(fd)


_DIR_LOCKS: Set[str] = set()


def lock_dir(path: str, timeout: float) -> None:
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


def _flock_within(fd: int, timeout: float) -> bool:
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


def run(argv: Sequence[str], timeout: float = 60.0, stdin: bytes = b"", env: Optional[Mapping[str, str]] = None,
        limit: Optional[int] = None) -> RunAnswer:
    """Run a program without a shell (arguments are never parsed by a shell). With ``limit``, only
    the last ``limit`` bytes of each of stdout and stderr are kept (``cut``: how many were dropped),
    so a program printing without end costs bounded memory here and on the wire."""
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    if _not_found(argv[0], full_env):      # what the exec would say, without forking to hear it
        missing: RunAnswer = {"rc": 127, "stdout": b"", "stderr": ("%s: not found" % argv[0]).encode()}
        if limit is not None:
            missing["cut"] = 0
        return missing
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


def _not_found(program: str, env: Optional[Mapping[str, str]]) -> bool:
    """True only when running ``program`` would fail with "not found" (ENOENT): no file of that name
    in any dir of the PATH the child would search (``env``'s, else ours), or no such path. A probe
    of a missing crictl then costs a few stat calls, not a fork of this process and an import of
    subprocess. Anything else (a file that is there but not executable...) is left to the exec."""
    if os.sep in program:
        return not os.path.lexists(program)
    return not any(os.path.lexists(os.path.join(directory, program)) for directory in os.get_exec_path(env))


def _run_bounded(argv: Sequence[str], timeout: float, stdin: bytes, env: Optional[Mapping[str, str]],
                 limit: int) -> RunAnswer:
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
            proc.stdin.close()  # type: ignore[union-attr]  # a PIPE when stdin is given
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
    proc.stdout.close()  # type: ignore[union-attr]  # a PIPE
    proc.stderr.close()  # type: ignore[union-attr]  # a PIPE
    return {"rc": rc, "stdout": bytes(kept[out_fd]), "stderr": b"timed out" if timed_out else bytes(kept[err_fd]),
            "cut": cut}


def info() -> HostInfo:
    """Who and where we are: for history records, lock holders and the default node name."""
    import pwd
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    # os.uname().nodename is what gethostname(2) returns, without importing socket
    return {"hostname": os.uname().nodename, "user": user, "sudo_user": os.environ.get("SUDO_USER"),
            "pid": os.getpid(), "euid": os.geteuid(), "python": sys.version.split()[0]}

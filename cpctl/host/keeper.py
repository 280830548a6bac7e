"""Persistent connections: a per-user keeper process holds SSH connections and ready agents.

Why: a cold remote run pays Python start-up, paramiko's import (~0.4 s of CPU) and, per master,
a TCP + SSH handshake and an agent start (~40 ms of the master's CPU). With ``--persist 60s``
(or ``CPCTL_PERSIST=60s``) the first run starts a keeper (``python -m cpctl.host.keeperd``)
that owns the connections. Runs within the persist time talk to it over a Unix socket and are
handed an agent that is already running; they never import paramiko. It is OpenSSH's
ControlMaster + ControlPersist, for cpctl's agents.

What stays true through the keeper:

* an agent serves one run at a time (never two at once), so the node lock still excludes two
  runs. When a run hangs up, even killed, the keeper knows from the lines it relayed whether
  every request was answered: then it resets the agent (locks released, as on exit) and keeps
  it for the next run; else it closes the channel and the agent finishes, reads EOF, exits
  and releases the lock, exactly as when an SSH connection drops;
* host keys: the keeper connects with the run's options and checks host keys as a direct run
  does; when ssh_config, a known_hosts file or an identity file changes, the next run gets a new
  connection checked against the new files;
* the keeper dir is 0700 and ours (a dir owned by someone else, or open to others, is refused),
  the socket is 0600 and both ends check the peer's uid (SO_PEERCRED);
* passphrase prompts are relayed to the run that needs the key; runs with a sudo password
  (``--ask-become-pass``) are never persisted: the keeper keeps no passwords.

This module is the client side and imports no paramiko; the keeper itself is ``keeperd``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import stat
import struct
import sys
import time
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Set

from cpctl import __version__
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.agent import AgentHost
from cpctl.host.base import ByteWriter, LineReader

if TYPE_CHECKING:
    import subprocess

    from cpctl.host.sshconfig import SSHOptions

ENV_DIR = "CPCTL_KEEPER_DIR"


def _build_id() -> str:
    """A digest of the code a run and its keeper must share: the agent the keeper starts on the
    masters (``cpctl.agent``) and the keeper protocol. Same version, different code (an editable
    checkout, a patched install) must not meet an agent that lacks an op the run sends.
    (A checksum, not a defence: the keeper dir is private and both ends check the peer uid.)"""
    import binascii

    import cpctl.agent as agent_package
    agent_dir = os.path.dirname(os.path.abspath(agent_package.__file__))
    agent = [os.path.join(agent_dir, name) for name in sorted(os.listdir(agent_dir)) if name.endswith(".py")]
    crc = 0
    for path in agent + [__file__, os.path.join(os.path.dirname(__file__), "keeperd.py")]:
        with open(path, "rb") as handle:
            crc = binascii.crc32(handle.read(), crc)
    return "%08x" % crc


# One keeper per cpctl build: after an upgrade the new cpctl starts its own keeper (the old one
# ends when idle) instead of speaking a protocol, or shipping an agent, the old one may not know.
BUILD_ID = _build_id()
SOCKET_NAME = "keeper-%s-%s.sock" % (__version__, BUILD_ID)
LOCK_NAME = "keeper.lock"
LOG_NAME = "keeper.log"
START_TIMEOUT = 30.0
# Without --persist a remote run keeps its connections this long (seconds after its end), like
# OpenSSH's ControlPersist: an operator's next command within it is warm. Short, so that logged-in
# connections (as root, or root through sudo) do not outlive a maintenance by much.
DEFAULT_PERSIST = 60.0
MAX_SOCKET_PATH = 100            # sun_path is 108 bytes on Linux
NOT_WIRED = ("prompt", "become_password", "keyring", "persist")


def keeper_dir() -> str:
    """Where the keeper's socket lives: $CPCTL_KEEPER_DIR, else $XDG_RUNTIME_DIR/cpctl, else
    /tmp/cpctl-UID (checked by ``ensure_private_dir`` before use)."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return explicit
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _ours(runtime):      # (sudo may pass on another user's: never share theirs)
        return os.path.join(runtime, "cpctl")
    import tempfile  # only here: it costs a warm run ~7 ms of imports (random, shutil)
    return os.path.join(tempfile.gettempdir(), "cpctl-%d" % os.geteuid())


def _ours(path: str) -> bool:
    """A real directory owned by this process's effective user."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def _refuse(path: str, why: str) -> CpctlError:
    return CpctlError("refusing keeper dir %s: %s" % (path, why), ExitCode.ENVIRONMENT,
                      "remove it, or set %s to a private directory" % ENV_DIR)


def ensure_private_dir(path: str) -> str:
    """Create ``path`` 0700 or check it: a real directory, ours, closed to group and others.
    (A /tmp path another user made first must not receive our socket.)"""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise CpctlError("keeper dir %s: %s" % (path, exc.strerror), ExitCode.ENVIRONMENT) from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse(path, "not a directory (a symlink?)")
    if info.st_uid != os.geteuid():
        raise _refuse(path, "owned by uid %d, not %d" % (info.st_uid, os.geteuid()))
    if info.st_mode & 0o077:
        raise _refuse(path, "mode %04o, must be 0700" % stat.S_IMODE(info.st_mode))
    if len(os.path.join(path, SOCKET_NAME)) > MAX_SOCKET_PATH:
        raise CpctlError("keeper dir %s: path too long for a Unix socket" % path, ExitCode.ENVIRONMENT,
                         "set %s to a shorter path" % ENV_DIR)
    return path


_CHECKED_DIRS: Set[str] = set()      # keeper dirs found private in this run


def unusable_dir(directory: Optional[str] = None) -> Optional[str]:
    """Why the keeper dir cannot be used (not private, not creatable), or None when it can: the
    default persistence then connects directly instead of failing the run."""
    directory = directory or keeper_dir()
    if directory in _CHECKED_DIRS:
        return None
    try:
        _CHECKED_DIRS.add(ensure_private_dir(directory))
    except CpctlError as exc:
        return exc.message
    return None


def peer_uid(sock: socket.socket) -> Optional[int]:
    """The uid of the process at the other end of a Unix socket (None where the OS cannot say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def error_to_wire(exc: CpctlError) -> Dict[str, object]:
    """A CpctlError as JSON, to cross the socket (keeper to run, or a refused prompt back)."""
    return {"message": exc.full_message, "code": int(exc.code), "hint": exc.hint}


def error_from_wire(wire: object) -> CpctlError:
    """The CpctlError a keeper message describes (``error_to_wire``); anything else is a keeper error."""
    fields = wire if isinstance(wire, dict) else {}
    message, code, hint = fields.get("message"), fields.get("code", ExitCode.UNREACHABLE), fields.get("hint")
    return CpctlError(message if isinstance(message, str) and message else "connection keeper error",
                      ExitCode(code if isinstance(code, int) else ExitCode.UNREACHABLE),
                      hint if isinstance(hint, str) else "")


def send_message(writer: ByteWriter, message: Mapping[str, object]) -> None:
    writer.write(json.dumps(message).encode("utf-8") + b"\n")
    writer.flush()


def read_message(reader: LineReader) -> Optional[Dict[str, object]]:
    """The next JSON line, or None at EOF; a line that is not an object is a ValueError."""
    line = reader.readline()
    if not line:
        return None
    message = json.loads(line.decode("utf-8"))
    if not isinstance(message, dict):
        raise ValueError("a keeper message is not a JSON object")
    return message


def dial(directory: str) -> socket.socket:
    """Connect to the keeper in ``directory``; FileNotFoundError / ConnectionRefusedError when none runs."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.path.join(directory, SOCKET_NAME))
        uid = peer_uid(sock)
    except OSError:
        sock.close()
        raise
    if uid is not None and uid != os.geteuid():
        sock.close()
        raise _refuse(directory, "its socket is served by uid %d" % uid)
    return sock


def connect(persist: float, directory: Optional[str] = None) -> socket.socket:
    """A socket to the running keeper, starting one first when none answers.

    Two runs starting at once must not start two keepers: the start is serialised by a lock
    file, and a socket nobody answers on (a keeper killed hard) is removed before the start.
    """
    directory = directory or keeper_dir()
    if directory not in _CHECKED_DIRS:      # once per run, not once per master
        _CHECKED_DIRS.add(ensure_private_dir(directory))
    try:
        return dial(directory)
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    lock_fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            return dial(directory)
        except (FileNotFoundError, ConnectionRefusedError):
            pass
        try:
            os.unlink(os.path.join(directory, SOCKET_NAME))
        except FileNotFoundError:
            pass
        _start(directory, persist)
        return dial(directory)
    finally:
        os.close(lock_fd)


def _start(directory: str, persist: float) -> None:
    """Start the keeper and wait until its socket listens (it says "ready", then detaches)."""
    if not _ready(_spawn(directory, persist)):
        raise CpctlError("the connection keeper did not start (see %s)" % os.path.join(directory, LOG_NAME),
                         ExitCode.ENVIRONMENT)


def _spawn(directory: str, persist: float) -> "subprocess.Popen[bytes]":
    import subprocess  # only when a keeper is started, not on every run through one
    log_fd = os.open(os.path.join(directory, LOG_NAME), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
    try:
        return subprocess.Popen([sys.executable, "-m", "cpctl.host.keeperd", directory, "%g" % persist],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_fd,
                                start_new_session=True)
    finally:
        os.close(log_fd)


def _ready(proc: "subprocess.Popen[bytes]") -> bool:
    """Wait until the starting keeper said "ready" (its first process exits then; the keeper
    itself has detached); False when it failed or did not say so in time."""
    import subprocess
    try:
        out, _ = proc.communicate(timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        out = b""
    return proc.returncode == 0 and out == b"ready\n"


def start_soon(persist: float) -> None:
    """Start the keeper now, if none is there, without waiting for it: its start and its import
    of paramiko (~0.1-0.3 s) then run on another core while this run loads the command's code;
    the first ``attach`` waits for it on the start lock (held until the keeper said ready, by a
    thread of this run). Anything odd (a dir not private, the lock taken by another run that is
    starting one) is left to ``connect``, which reports it."""
    directory = keeper_dir()
    if unusable_dir(directory) is not None or os.path.exists(os.path.join(directory, SOCKET_NAME)):
        return                  # a keeper runs (a stale socket is replaced by ``connect``)
    try:
        lock_fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.path.exists(os.path.join(directory, SOCKET_NAME)):
            raise BlockingIOError()     # started meanwhile
        proc = _spawn(directory, persist)
    except OSError:
        os.close(lock_fd)
        return
    import threading

    def wait_ready() -> None:
        try:
            _ready(proc)
        finally:
            os.close(lock_fd)           # ``connect`` goes on: dials it, or starts one and reports

    threading.Thread(target=wait_ready, name="cpctl-keeper-start", daemon=True).start()


def request(op: str, directory: Optional[str] = None) -> Optional[Dict[str, object]]:
    """Ask a running keeper ``status`` or ``stop``; None when no keeper runs (none is started)."""
    directory = directory or keeper_dir()
    if not os.path.isdir(directory):
        return None
    ensure_private_dir(directory)
    answer = None
    for _ in range(2):          # unanswered once: that keeper was exiting, ask whoever listens now
        try:
            sock = dial(directory)
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        with sock, sock.makefile("rb") as reader, sock.makefile("wb") as writer:
            try:
                send_message(writer, {"op": op})
                answer = read_message(reader)
            except (BrokenPipeError, ConnectionResetError):
                answer = None
        if answer is not None:
            break
    if answer is None or not answer.get("ok"):
        raise CpctlError("the connection keeper did not answer %r" % op, ExitCode.ENVIRONMENT)
    status = answer.get("keeper")
    return status if isinstance(status, dict) else {}


def wire_options(options: SSHOptions) -> Dict[str, object]:
    """The options a connection is made with, as JSON: what identifies it in the keeper.
    Secrets and the prompt function never leave this process. (Field by field: the values are
    strings, numbers and lists of strings, and ``dataclasses.asdict`` deep-copies each one.)"""
    data: Dict[str, object] = {}
    for item in dataclasses.fields(options):
        if item.name not in NOT_WIRED:
            value = getattr(options, item.name)
            if item.name in PATH_FIELDS:
                value = [_from_here(v) for v in value] if isinstance(value, list) else _from_here(value)
            data[item.name] = list(value) if isinstance(value, list) else value
    return data


#: The options that name files: the keeper runs in "/" (a daemon keeps no directory busy), so a path
#: relative to where cpctl was started is made absolute here, on the caller's side (issue 47: a relative
#: ``--ssh-config ssh/config`` was "no such file" through the keeper only).
PATH_FIELDS = ("ssh_config", "identity_files", "known_hosts", "global_known_hosts")


def _from_here(path: object) -> object:
    """``path`` absolute from this process's directory; ``~`` (the keeper expands it as ssh does),
    ``none`` and non-strings stay as they are."""
    if not isinstance(path, str) or not path or path == "none" or path.startswith(("/", "~")):
        return path
    return os.path.abspath(path)


class KeeperHost(AgentHost):
    """A master's agent reached through the keeper: the agent protocol over the Unix socket."""

    def __init__(self, name: str, sock: socket.socket, reader: LineReader, writer: ByteWriter) -> None:
        self._sock = sock
        super().__init__(name, reader, writer)

    def close(self) -> None:
        """Hang up: the keeper closes this run's channel, the agent exits and releases its locks."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for stream in (self._reader, self._writer):
            try:
                getattr(stream, "close", lambda: None)()
            except OSError:
                pass
        self._sock.close()


class _Unanswered(Exception):
    """The keeper closed a connection without a word: it was exiting (idle past its persist
    time) when this request reached it. Asked again, a new keeper answers."""


def attach(target: str, options: SSHOptions) -> KeeperHost:
    """An agent on ``target`` from the keeper (started if needed), as a Host of this run."""
    for _ in range(2):          # unanswered once: that keeper was exiting, a new one answers
        try:
            return _attach_once(target, options)
        except _Unanswered:
            pass
    raise _hung_up(target)


def _hung_up(target: str) -> CpctlError:
    return CpctlError("%s: the connection keeper hung up (see %s)" % (
        target, os.path.join(keeper_dir(), LOG_NAME)), ExitCode.UNREACHABLE)


def _attach_once(target: str, options: SSHOptions) -> KeeperHost:
    sock = connect(options.persist)
    reader, writer = sock.makefile("rb"), sock.makefile("wb")
    answered = False
    try:
        try:
            send_message(writer, {"op": "attach", "target": target, "options": wire_options(options),
                                  "persist": options.persist})
        except (BrokenPipeError, ConnectionResetError):
            raise _Unanswered() from None
        while True:
            message = read_message(reader)
            if message is None:
                if not answered:
                    raise _Unanswered()
                raise _hung_up(target)
            answered = True
            if "prompt" in message:
                send_message(writer, _answer(options, message))
            elif message.get("ok"):
                return KeeperHost(target, sock, reader, writer)
            else:
                raise error_from_wire(message.get("error") or {"message": "%s: keeper error" % target})
    except BaseException:
        for stream in (reader, writer):
            stream.close()
        sock.close()
        raise


def _answer(options: SSHOptions, message: Mapping[str, object]) -> Dict[str, object]:
    """Ask the user what the keeper needs (a key's passphrase); a refusal travels back as an error."""
    if options.prompt is None:
        return {"answer": None}
    try:
        return {"answer": options.prompt(message["prompt"], secret=bool(message.get("secret", True)))}
    except CpctlError as exc:
        return {"abort": error_to_wire(exc)}


def wait_gone(directory: Optional[str] = None, timeout: float = 10.0) -> bool:
    """After ``stop``: True once the keeper's socket no longer answers."""
    directory = directory or keeper_dir()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            dial(directory).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False

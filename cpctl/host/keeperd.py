"""The connection keeper (``python -m cpctl.host.keeperd DIR PERSIST``): see :mod:`cpctl.host.keeper`.

Started by ``keeper.connect`` and never by hand. It binds ``DIR/keeper-VERSION-BUILD.sock``, says "ready" on
stdout and detaches (the starting run need not reap it). For every distinct (target, options) it
keeps one SSH connection (``Slot``) and, between runs, one agent already running on the master.
A run's ``attach`` takes that agent (or starts one), and the keeper relays bytes between the run's
socket and the agent's channel until either side hangs up. An agent the run left idle is reset
and kept for the next run (no process start or exit on the master per run); any other is closed
(it exits, releasing its locks) and replaced off the runs' critical path. It exits PERSIST seconds
after the last run ended, on ``stop``, on SIGTERM, or when its socket is removed.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from cpctl.errors import CpctlError, ExitCode
from cpctl.host import keeper
from cpctl.host.agent import kept_hello
from cpctl.host.base import FAST_SWITCH, use_handshake_switch
from cpctl.host.sshconfig import (
    Endpoint,
    Mark,
    SSHOptions,
    marks_vouch,
    read_config_text,
    remember_login_name,
    ssh_config_path,
    stat_mark,
)

if TYPE_CHECKING:                   # paramiko is imported only when a connection is made
    from paramiko import Channel, SSHClient

    from cpctl.host.ssh import KeyRing

ACCEPT_POLL = 0.5
PING_TIMEOUT = 5.0
VERIFY_EVERY = 10.0      # spare agents are pinged this often, off the runs' critical path
QUIET = 0.3              # spare agents start once no run has been attached for this long


def log(message: str) -> None:
    sys.stderr.write("%s keeper[%d]: %s\n" % (datetime.datetime.now().isoformat(timespec="seconds"),
                                              os.getpid(), message))
    sys.stderr.flush()


def _ssh() -> Any:
    from cpctl.host import ssh
    return ssh


class ConfigDigests:
    """The digest of an ssh_config (Includes inlined), read again only when one of the files it
    came from, or a directory an Include globs in, changed (inode, size or mtime_ns): every
    attach checks it, and 20 masters attached at once would otherwise read and hash the same
    text 20 times on the keeper's one interpreter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: Dict[str, Tuple[Tuple[Mark, ...], str]] = {}

    def digest(self, path: str) -> str:
        with self._lock:
            cached = self._cached.get(path)
        if cached is not None and tuple(stat_mark(mark[0]) for mark in cached[0]) == cached[0]:
            return cached[1]
        sources: List[str] = []
        try:
            text = read_config_text(path, sources=sources).encode("utf-8")
        except (OSError, CpctlError):
            return "?"
        marks = tuple(stat_mark(p) for p in sources)
        digest = hashlib.sha256(text).hexdigest()
        if marks_vouch(marks):
            with self._lock:
                self._cached[path] = (marks, digest)
        return digest


CONFIG_DIGESTS = ConfigDigests()


def close_channel(chan: "Channel") -> None:
    """Close an agent's channel that a selector has watched, without killing its connection.

    ``chan.fileno()`` gives the channel an OS pipe that its buffers set and clear as data
    arrives. ``Channel.close()`` closes that pipe under the channel's lock, but the transport
    thread feeds the buffers under theirs: data arriving as a killed run's channel is closed
    then writes to a closed (or reused) descriptor, the transport thread dies with "Bad file
    descriptor", and every agent on that SSH connection with it. Swapping the buffers' events
    for plain ones first (under the buffers' own locks) leaves nothing that can touch the pipe.
    """
    for buffer in (chan.in_buffer, chan.in_stderr_buffer):
        buffer.set_event(threading.Event())
    chan.close()


def _closed(chan: "Channel") -> bool:
    """The agent's channel ended (seen without a round trip)."""
    return chan.closed or chan.exit_status_ready() or bool(chan.eof_received)


def _ask(chan: "Channel", op: str) -> bool:
    """Send the idle agent ``op`` (no arguments); True when it answers ok within PING_TIMEOUT."""
    return _answer(chan, op) is not None


def _answer(chan: "Channel", op: str) -> Optional[bytes]:
    """The idle agent's ok answer line to ``op`` (no arguments) within PING_TIMEOUT; None otherwise."""
    if _closed(chan):
        return None
    try:
        chan.settimeout(PING_TIMEOUT)
        chan.sendall(b'{"op": "%s", "args": {}}\n' % op.encode("ascii"))
        answer = _read_answer(chan)
        chan.settimeout(None)
    except (OSError, EOFError):
        return None
    return answer if answer.startswith(b'{"ok": true') and answer.endswith(b"\n") else None


def _read_answer(chan: "Channel", limit: int = 4096) -> bytes:
    """The idle agent's one answer line, read in chunks: it sends nothing unasked, so nothing
    after the line can be consumed by mistake (and one recv per byte cost ~0.5 ms per agent)."""
    answer = b""
    while not answer.endswith(b"\n") and len(answer) < limit:
        data = chan.recv(limit)
        if not data:
            break
        answer += data
    return answer


def _alive(chan: "Channel") -> bool:
    """Is the idle agent still there and answering? (A master may have rebooted meanwhile.)"""
    return _ask(chan, "info")


class Slot:
    """One connection (target + options) and the agent waiting on it for the next run."""

    def __init__(self, target: str, wired: Mapping[str, Any], keyring: Optional["KeyRing"]) -> None:
        self.target = target
        self.options = SSHOptions(**wired)
        self.options.keyring = keyring          # one passphrase prompt per key, for every host
        self.lock = threading.Lock()
        self.clients: List[SSHClient] = []
        self.ep: Optional[Endpoint] = None
        self.mark: Optional[Tuple[str, Tuple[Mark, ...]]] = None
        self.idle: Optional[Tuple[Channel, bytes]] = None
        self.verified_at = 0.0                  # when the idle agent last answered
        self.connects = self.sessions = 0
        self.connected_at: Optional[float] = None

    def _files_mark(self) -> Tuple[str, Tuple[Mark, ...]]:
        """What the connection was checked against: ssh_config text, known_hosts and key files."""
        config = ssh_config_path(self.options.ssh_config)
        digest = CONFIG_DIGESTS.digest(config) if config is not None else ""
        paths = list(self.options.global_known_hosts) + list(self.ep.known_hosts if self.ep else [])
        paths += list(self.ep.identity_files if self.ep else [])
        return digest, tuple(stat_mark(p) for p in paths)

    def _connected(self) -> bool:
        if not self.clients:
            return False
        transport = self.clients[-1].get_transport()
        return transport is not None and transport.is_active()

    def _drop(self) -> None:
        if self.idle is not None:
            close_channel(self.idle[0])
            self.idle = None
        for client in reversed(self.clients):
            client.close()
        self.clients, self.ep, self.mark = [], None, None

    def _connect(self) -> None:
        self._drop()
        self.clients, self.ep = _ssh().open_connection(self.target, self.options)
        self.mark = self._files_mark()
        self.connects += 1
        self.connected_at = time.time()

    def _new_agent(self) -> Tuple["Channel", bytes]:
        return _ssh().open_agent_channel(self.target, self.clients[-1].get_transport(), self.ep, self.options)

    def take(self, prompt: Callable[..., str]) -> Tuple["Channel", bytes]:
        """An agent for one run: the waiting one when it still answers, else a new one (on a new
        connection when the old one died or the files it was checked against changed)."""
        with self.lock:
            self.options.prompt = prompt
            try:
                if not self._connected() or self._files_mark() != self.mark:
                    if self.clients:
                        log("%s: connecting again (%s)" % (self.target, "connection lost" if not self._connected()
                                                           else "ssh_config, known_hosts or a key changed"))
                    self._connect()
                idle, self.idle = self.idle, None
                if idle is not None and self._still_alive(idle[0]):
                    agent = idle
                else:
                    if idle is not None:
                        close_channel(idle[0])
                    agent = self._new_agent()
                self.sessions += 1
                return agent
            finally:
                self.options.prompt = None

    def _still_alive(self, chan: "Channel") -> bool:
        """No round trip when the spare answered a ping recently (``verify``); a closed channel
        or connection is seen without one."""
        if time.monotonic() - self.verified_at < VERIFY_EVERY:
            return not _closed(chan)
        return _alive(chan)

    def verify(self) -> None:
        """Ping the idle agent; a dead one (a master rebooted) is dropped with its connection, so
        the next run connects afresh instead of failing on the old connection."""
        if not self.lock.acquire(blocking=False):
            return                               # a run or a replenish is using the slot
        try:
            if self.idle is None:
                return
            if _alive(self.idle[0]):
                self.verified_at = time.monotonic()
            else:
                log("%s: the spare agent stopped answering; dropping the connection" % self.target)
                self._drop()
        finally:
            self.lock.release()

    def give_back(self, chan: "Channel", hello: bytes) -> bool:
        """Keep the agent a run left idle (every request answered) for the next run, once it has
        forgotten that run (``reset``: its locks released, as if it had exited), with the ready line
        the next run reads saying which modules it holds (``kept_hello``: that run sends them no more).
        False, and the channel closed, when it cannot serve again: it fails the reset, its connection
        was replaced meanwhile, or another agent already waits."""
        while chan.recv_stderr_ready():       # nobody reads an agent's stderr: do not let it fill the window
            chan.recv_stderr(1 << 16)
        answer = _answer(chan, "reset")
        if answer is not None:
            with self.lock:
                if (self.idle is None and self._connected()
                        and chan.get_transport() is self.clients[-1].get_transport()):
                    self.idle = (chan, kept_hello(hello, answer))
                    self.verified_at = time.monotonic()
                    return True
        close_channel(chan)
        return False

    def replenish(self) -> None:
        """Start the next run's agent now, off that run's critical path."""
        with self.lock:
            if self.idle is not None or not self._connected():
                return
            try:
                self.idle = self._new_agent()
                self.verified_at = time.monotonic()
            except Exception as exc:  # noqa: BLE001 (the next run starts one itself and reports)
                log("%s: could not start a spare agent: %s" % (self.target, exc))

    def describe(self) -> Dict[str, object]:
        ep = self.ep
        return {"target": self.target, "user": ep.user if ep else None, "hostname": ep.hostname if ep else None,
                "port": ep.port if ep else None, "connected": self._connected(), "connects": self.connects,
                "sessions": self.sessions, "agent_ready": self.idle is not None,
                "connected_at": self.connected_at}

    def close(self) -> None:
        """Drop the connection. A run's connect stuck on it (a master that does not answer) holds
        the lock for up to its timeouts: the exiting keeper waits 2 s at most, then closes the
        connection under it, which ends that connect too (``keeper stop`` means now)."""
        locked = self.lock.acquire(timeout=2.0)
        try:
            self._drop()
        finally:
            if locked:
                self.lock.release()


class RunSocket:
    """A run's Unix socket, read a line at a time for the keeper's own messages (attach, prompt
    answers); what the run sent beyond them is handed to the relay (``rest``)."""

    MAX_LINE = 1 << 20

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self._buffer = b""

    def readline(self, limit: int = -1) -> bytes:
        """One message line (``limit`` is not used: ``MAX_LINE`` bounds every line here)."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > self.MAX_LINE:
                raise ValueError("message longer than %d bytes" % self.MAX_LINE)
            data = self.conn.recv(1 << 16)
            if not data:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def write(self, data: bytes) -> None:
        self.conn.sendall(data)

    def flush(self) -> None:
        """Nothing to flush: ``write`` sends at once."""

    def rest(self) -> bytes:
        data, self._buffer = self._buffer, b""
        return data


class _Traffic:
    """Requests relayed to the agent and answers relayed back, counted in lines (one answer line
    per request line): equal counts, with no request cut short, mean the agent is idle."""

    def __init__(self) -> None:
        self.requests = self.answers = 0
        self.cut = False

    def up(self, data: bytes) -> None:
        self.requests += data.count(b"\n")
        self.cut = not data.endswith(b"\n")

    def down(self, data: bytes) -> None:
        self.answers += data.count(b"\n")

    def idle(self) -> bool:
        return self.requests == self.answers and not self.cut


def relay(run: RunSocket, chan: "Channel") -> bool:
    """Copy bytes both ways, in this one thread, until either side hangs up.

    True when the run hung up with every request answered: the agent waits for its next
    request and may serve another run (``Slot.give_back``). Otherwise the channel is closed:
    the agent reads EOF, finishes what it was doing, exits and releases its locks.
    """
    traffic = _Traffic()
    with selectors.DefaultSelector() as selector:
        selector.register(run.conn, selectors.EVENT_READ, "run")
        selector.register(chan, selectors.EVENT_READ, "agent")
        try:
            pending = run.rest()
            if pending:
                traffic.up(pending)
                chan.sendall(pending)
            while True:
                for key, _ in selector.select():
                    if key.data == "run":
                        data = _recv(run.conn.recv)
                        if not data:
                            return _run_left(traffic, chan)
                        traffic.up(data)
                        chan.sendall(data)
                    else:
                        data = _recv(chan.recv)
                        if not data:
                            close_channel(chan)
                            return False
                        traffic.down(data)
                        run.conn.sendall(data)
        except (OSError, EOFError):
            # The run's socket broke while answers were relayed to it, or the channel did.
            return _run_left(traffic, chan)


def _recv(read: Callable[[int], bytes]) -> bytes:
    try:
        return read(1 << 16)
    except (OSError, EOFError):
        return b""


def _run_left(traffic: _Traffic, chan: "Channel") -> bool:
    if traffic.idle() and not _closed(chan):
        return True
    close_channel(chan)
    return False


class Keeper:
    def __init__(self, listener: socket.socket, directory: str, persist: float) -> None:
        self.listener, self.directory, self.persist = listener, directory, persist
        self.path = os.path.join(directory, keeper.SOCKET_NAME)
        self.inode = os.stat(self.path).st_ino
        self.slots: Dict[str, Slot] = {}
        self.lock = threading.Lock()
        self.active = 0                  # runs attached (relaying)
        self.in_flight = 0               # accepted connections not yet handled to the end
        self.deadline = time.monotonic() + persist
        self.started = time.time()
        self.stopping = threading.Event()
        self.keyring: Optional[KeyRing] = None
        self.spares_wanted: List[Slot] = []
        self.quiet = threading.Condition(self.lock)
        self.last_detach = 0.0

    def serve(self) -> None:
        threading.Thread(target=self._preload, daemon=True).start()
        threading.Thread(target=self._start_spares, daemon=True).start()
        self.listener.settimeout(ACCEPT_POLL)
        while not (self.stopping.is_set() or self._expired() or self._socket_gone()):
            try:                      # (checked on every turn: `keeper status` polls are not use)
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            with self.lock:
                self.in_flight += 1   # counted before the loop looks at the deadline again
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        self.shutdown()

    def _preload(self) -> None:
        """Import paramiko while the first run is still sending its request."""
        ssh = _ssh()
        with self.lock:
            if self.keyring is None:
                self.keyring = ssh.KeyRing()

    def _start_spares(self) -> None:
        """Start the agents the next run will take, and ping the waiting ones every VERIFY_EVERY,
        but only when no run is attached: on a small machine starting 20 agents would otherwise
        compete with the run for CPU."""
        next_verify = time.monotonic() + VERIFY_EVERY
        while not self.stopping.is_set():
            with self.quiet:
                quiet = self.active == 0 and time.monotonic() - self.last_detach >= QUIET
                slot = self.spares_wanted.pop(0) if quiet and self.spares_wanted else None
                due = quiet and time.monotonic() >= next_verify
                slots = list(self.slots.values()) if due else []
                if slot is None and not due:
                    self.quiet.wait(QUIET)
                    continue
            if slot is not None:
                slot.replenish()
            for each in slots:
                each.verify()
            if due:
                next_verify = time.monotonic() + VERIFY_EVERY

    def _expired(self) -> bool:
        """Idle past the deadline, and no request accepted but not yet answered (exiting then
        would drop it: a run asking for its agents at that moment would be hung up on)."""
        with self.lock:
            return self.active == 0 and self.in_flight == 0 and time.monotonic() > self.deadline

    def _socket_gone(self) -> bool:
        try:
            return os.lstat(self.path).st_ino != self.inode
        except OSError:
            return True

    def _handle(self, conn: socket.socket) -> None:
        try:
            uid = keeper.peer_uid(conn)
            if uid is not None and uid != os.geteuid():
                return
            run = RunSocket(conn)
            request = keeper.read_message(run) or {}
            op = request.get("op")
            if op == "attach":
                self._attach(run, request)
            elif op == "status":
                keeper.send_message(run, {"ok": True, "keeper": self.describe()})
            elif op == "stop":
                keeper.send_message(run, {"ok": True, "keeper": self.describe()})
                self.stopping.set()
            else:
                keeper.send_message(run, {"error": keeper.error_to_wire(
                    CpctlError("unknown request %r" % op, ExitCode.INTERNAL))})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log("request failed: %s: %s" % (type(exc).__name__, exc))
        finally:
            conn.close()
            with self.lock:
                self.in_flight -= 1

    def _slot(self, request: Mapping[str, Any]) -> Slot:
        target, wired = str(request["target"]), dict(request["options"])
        key = json.dumps([target, wired], sort_keys=True)
        self._preload()
        with self.lock:
            if key not in self.slots:
                self.slots[key] = Slot(target, wired, self.keyring)
            return self.slots[key]

    def _attach(self, run: RunSocket, request: Mapping[str, Any]) -> None:
        persist = float(request.get("persist") or self.persist)
        with self.lock:
            self.active += 1
        slot, kept = None, False
        try:
            slot = self._slot(request)
            try:
                chan, hello = slot.take(self._prompter(run))
            except CpctlError as exc:
                keeper.send_message(run, {"error": keeper.error_to_wire(exc)})
                return
            except Exception as exc:  # noqa: BLE001 (paramiko and socket errors: the host is unreachable)
                unreachable = CpctlError("%s: unreachable: %s" % (slot.target, str(exc) or type(exc).__name__),
                                         ExitCode.UNREACHABLE)
                keeper.send_message(run, {"error": keeper.error_to_wire(unreachable)})
                return
            try:
                keeper.send_message(run, {"ok": True})
                run.write(hello)
            except OSError:
                close_channel(chan)            # the run went away while we connected: its agent goes too
                raise
            kept = relay(run, chan) and slot.give_back(chan, hello)
        finally:
            with self.lock:
                self.active -= 1
                self.last_detach = time.monotonic()
                self.deadline = max(self.deadline, self.last_detach + persist)
                if slot is not None and not kept and slot not in self.spares_wanted:
                    self.spares_wanted.append(slot)
                self.quiet.notify_all()

    @staticmethod
    def _prompter(run: RunSocket) -> Callable[..., str]:
        """A prompt that asks the attaching run (the keeper has no terminal)."""

        def prompt(text: str, secret: bool = True) -> str:
            keeper.send_message(run, {"prompt": text, "secret": secret})
            answer = keeper.read_message(run) or {}
            if "abort" in answer:
                raise keeper.error_from_wire(answer["abort"])
            reply = answer.get("answer")
            return reply if isinstance(reply, str) else ""

        return prompt

    def describe(self) -> Dict[str, object]:
        with self.lock:
            slots = list(self.slots.values())
            active, left = self.active, self.deadline - time.monotonic()
        return {"pid": os.getpid(), "started_at": self.started, "persist": self.persist, "runs_attached": active,
                "expires_in": None if active else max(0.0, round(left, 1)),
                "connections": [slot.describe() for slot in slots]}

    def shutdown(self) -> None:
        self.listener.close()
        if not self._socket_gone():
            try:
                os.unlink(self.path)
            except OSError:
                pass
        with self.lock:
            slots = list(self.slots.values())
        for slot in slots:
            slot.close()


def _bind(directory: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(os.path.join(directory, keeper.SOCKET_NAME))
    finally:
        os.umask(old)
    listener.listen(128)
    return listener


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -m cpctl.host.keeperd DIR PERSIST_SECONDS\n")
        return 2
    directory, persist = args[0], float(args[1])
    try:
        keeper.ensure_private_dir(directory)
        listener = _bind(directory)
    except (CpctlError, OSError) as exc:
        log("cannot listen in %s: %s" % (directory, getattr(exc, "message", exc)))
        return 1
    if os.fork():                         # the parent tells the starting run, which reaps it
        os.write(1, b"ready\n")
        os._exit(0)
    os.chdir("/")                         # a daemon keeps no directory busy
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)                   # stderr stays the log file
    os.close(devnull)
    sys.setswitchinterval(FAST_SWITCH)    # many threads hand bytes to each other: switch fast ...
    use_handshake_switch()                # ... but not while paramiko handshakes (CPU in many threads)
    remember_login_name()                 # still one thread
    server = Keeper(listener, directory, persist)
    signal.signal(signal.SIGTERM, lambda *_: server.stopping.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log("listening on %s (persist %gs)" % (server.path, persist))
    server.serve()
    log("exiting")
    return 0


if __name__ == "__main__":
    sys.exit(main())

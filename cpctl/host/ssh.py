"""``SSHHost``: a master reached over one paramiko SSH connection, agentless and strict.

``connect(target, options)`` resolves TARGET through ssh_config (ProxyJump hops included),
verifies the server's host key like OpenSSH before authenticating (so nothing can run on a
server we have not identified), authenticates with agent / IdentityFile / default keys, then
execs the agent (``python3 -c <loader>``, under ``sudo`` when the login user is not
root) on one channel and speaks the agent protocol over it. The agent on the master holds the
node lock; when the connection drops it reads EOF and exits, which releases the lock.

This is the only cpctl module that imports paramiko (~0.45 s): import it lazily.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shlex
import socket
import threading
from typing import Any, ContextManager, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple, Union

from cpctl.host.sshconfig import import_paramiko_without_invoke

import_paramiko_without_invoke()   # before paramiko's first import (see there)
import paramiko  # noqa: E402
import paramiko.config  # noqa: E402
from paramiko.auth_strategy import AuthFailure, AuthStrategy, InMemoryPrivateKey  # noqa: E402

from cpctl.errors import CpctlError, ExitCode  # noqa: E402
from cpctl.host import base  # noqa: E402
from cpctl.host.agent import AgentHost, agent_bootstrap, agent_payload, check_hello  # noqa: E402
from cpctl.host.sshconfig import (  # noqa: E402
    DEFAULT_IDENTITIES,
    DEFAULT_PORT,
    Endpoint,
    Mark,
    Prompt,
    SSHOptions,
    Target,
    marks_vouch,
    parse_target,
    read_config_text,
    resolve,
    ssh_config_path,
    stat_mark,
)

# paramiko logs transport failures at ERROR; without a handler Python would print them raw.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

MAX_JUMP_DEPTH = 8
PASSPHRASE_TRIES = 3
_KNOWN_HOSTS_WRITE = threading.Lock()


class KeyRing:
    """Private keys loaded once per run: an encrypted key's passphrase is asked only once,
    even when many hosts connect in parallel (the lock also serialises the prompts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: Dict[str, Optional[paramiko.PKey]] = {}

    def load(self, path: str, prompt: Optional[Prompt]) -> Optional[paramiko.PKey]:
        with self._lock:
            if path not in self._keys:
                self._keys[path] = _load_key(path, prompt)
            return self._keys[path]


_KEYRING_INIT = threading.Lock()


def keyring_of(options: SSHOptions) -> KeyRing:
    """The options' KeyRing, made on first use (SSHOptions itself must not import paramiko)."""
    with _KEYRING_INIT:
        if options.keyring is None:
            options.keyring = KeyRing()
        return options.keyring


def _load_key(path: str, prompt: Optional[Prompt]) -> Optional[paramiko.PKey]:
    """The decrypted key, or None when unusable (unreadable, unknown type, no passphrase)."""
    try:
        return paramiko.PKey.from_path(path)
    except TypeError:            # cryptography: "password-protected, but password was not provided"
        pass
    except (OSError, ValueError, paramiko.SSHException):
        return None
    if prompt is None:
        return None
    for _ in range(PASSPHRASE_TRIES):
        secret = prompt("Enter passphrase for key '%s': " % path, secret=True)
        if not secret:
            return None
        try:
            return paramiko.PKey.from_path(path, secret.encode("utf-8"))  # type: ignore[arg-type]  # bytes work
        except (ValueError, TypeError):
            continue
        except (OSError, paramiko.SSHException):
            return None
    return None


class _ChannelReader:
    """readline() over a channel in O(n): paramiko's ChannelFile re-scans long lines."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel
        self._buf = bytearray()

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front of what the channel sends next."""
        self._buf[:0] = data

    def readline(self, limit: int = -1) -> bytes:
        """One line; with ``limit`` >= 0 at most that many bytes of it (the rest stays unread), so a
        line of any length never takes more memory than ``limit`` plus one chunk."""
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end >= 0 and (limit < 0 or end < limit):
                line = bytes(self._buf[:end + 1])
                del self._buf[:end + 1]
                return line
            if 0 <= limit <= len(self._buf):
                line = bytes(self._buf[:limit])
                del self._buf[:limit]
                return line
            start = len(self._buf)
            chunk = self._channel.recv(1 << 18)
            if not chunk:
                line = bytes(self._buf)
                self._buf.clear()
                return line
            self._buf += chunk


class _ChannelWriter:
    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel

    def write(self, data: bytes) -> None:
        self._channel.sendall(data)

    def flush(self) -> None:
        """sendall already handed everything to the transport."""


class SSHHost(AgentHost):
    """A master behind one SSH connection (plus its jump hosts), serving the Host interface.

    ``channel`` runs an agent whose ready line has been read already (``open_agent_channel``);
    it is replayed to AgentHost, which checks it.
    """

    def __init__(self, name: str, clients: List[paramiko.SSHClient], channel: paramiko.Channel,
                 hello: bytes) -> None:
        self._clients, self._channel = clients, channel
        reader = _ChannelReader(channel)
        reader.unread(hello)
        super().__init__(name, reader, _ChannelWriter(channel))

    @property
    def transport(self) -> paramiko.Transport:
        """The authenticated transport: more channels can be opened on it for parallel work."""
        return transport_of(self._clients[-1])

    def close(self) -> None:
        """Close the agent channel (the agent exits, releasing its locks), then every hop."""
        try:
            self._channel.close()
        finally:
            for client in reversed(self._clients):
                client.close()


def transport_of(client: paramiko.SSHClient) -> paramiko.Transport:
    """The transport of a connected client (paramiko types it as optional: None before connect)."""
    transport = client.get_transport()
    if transport is None:
        raise CpctlError("SSH connection is not open", ExitCode.UNREACHABLE)
    return transport


def _unreachable(name: str, reason: str) -> CpctlError:
    return CpctlError("%s: unreachable: %s" % (name, reason), ExitCode.UNREACHABLE)


def _socket_reason(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, socket.gaierror):
        return "cannot resolve host name (%s)" % (exc.strerror or exc)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "connection timed out after %gs" % timeout
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _open_socket(ep: Endpoint) -> socket.socket:
    """TCP to the server with Nagle off: the handshake and the agent's request/answer pattern are
    small writes, and Nagle + delayed ACK stalled each connect by ~40 ms (as OpenSSH, we set NODELAY)."""
    try:
        sock = socket.create_connection((ep.hostname, ep.port), timeout=ep.connect_timeout)
    except OSError as exc:
        raise _unreachable(ep.name, _socket_reason(exc, ep.connect_timeout)) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _tunnel(via: paramiko.SSHClient, ep: Endpoint) -> paramiko.Channel:
    """A direct-tcpip channel from the previous hop to ``ep`` (what ssh -J does)."""
    try:
        return transport_of(via).open_channel("direct-tcpip", (ep.hostname, ep.port), ("127.0.0.1", 0),
                                              timeout=ep.connect_timeout)
    except paramiko.ChannelException as exc:
        raise _unreachable(ep.name, "jump host could not connect: %s" % exc.text.lower()) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise _unreachable(ep.name, "through jump host: %s" % (str(exc) or type(exc).__name__)) from None


def _key_desc(key: paramiko.PKey) -> str:
    return "%s %s" % (key.get_name(), key.fingerprint)


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host keys: refused unless accept-new (or an explicit config ``no``), then recorded."""

    def __init__(self, ep: Endpoint) -> None:
        self._ep = ep

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        ep = self._ep
        if ep.strict == "yes":
            keyscan = "ssh-keyscan%s %s" % ("" if ep.port == 22 else " -p %d" % ep.port, ep.hostname)
            raise CpctlError(
                "%s: unknown host key for %s (%s): verify it, then rerun with --accept-new-host-key "
                "or add it with `%s >> %s`" % (ep.name, ep.known_hosts_name, _key_desc(key), keyscan,
                                                _home_short(ep.known_hosts[0])), ExitCode.UNREACHABLE)
        record_host_key(ep.known_hosts[0], ep.known_hosts_name, key)


def _home_short(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def record_host_key(path: str, name: str, key: paramiko.PKey) -> None:
    """Append one known_hosts line (never rewrite the file: comments and hashes stay intact)."""
    with _KNOWN_HOSTS_WRITE:
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
        line = "%s %s %s\n" % (name, key.get_name(), key.get_base64())
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("ascii"))
        finally:
            os.close(fd)


def _changed(ep: Endpoint, exc: paramiko.BadHostKeyException) -> CpctlError:
    return CpctlError(
        "%s: REMOTE HOST IDENTIFICATION HAS CHANGED for %s: got %s, known_hosts has %s; someone "
        "could be eavesdropping, or the host key was replaced: check it, then fix %s"
        % (ep.name, ep.known_hosts_name, _key_desc(exc.key), _key_desc(exc.expected_key),
           _home_short(ep.known_hosts[0])), ExitCode.UNREACHABLE)


class _KeyAuth(AuthStrategy):
    """Public-key auth in OpenSSH's order: agent keys, then IdentityFile (or default) keys."""

    def __init__(self, ep: Endpoint, options: SSHOptions) -> None:
        super().__init__(ssh_config=None)  # type: ignore[arg-type]  # paramiko only stores it
        self._ep, self._options = ep, options
        self.agent: Optional[paramiko.Agent] = None
        self.tried: List[str] = []

    def _paths(self) -> List[str]:
        paths = list(self._ep.identity_files)
        if not paths and self._options.look_for_keys:
            paths = [os.path.expanduser(p) for p in DEFAULT_IDENTITIES]
        return [p for p in dict.fromkeys(paths) if os.path.isfile(p)]

    def get_sources(self) -> Iterator[InMemoryPrivateKey]:
        user = self._ep.user
        if self._options.use_agent and not self._ep.identities_only and os.environ.get("SSH_AUTH_SOCK"):
            self.agent = paramiko.Agent()
            for agent_key in self.agent.get_keys():
                self.tried.append("agent " + agent_key.get_name())
                yield InMemoryPrivateKey(user, agent_key)
        for path in self._paths():
            key = keyring_of(self._options).load(path, self._options.prompt)
            if key is None:
                self.tried.append(_home_short(path) + " (unusable)")
                continue
            self.tried.append(_home_short(path))
            yield InMemoryPrivateKey(user, key)


def _auth_failed(ep: Endpoint, auth: _KeyAuth) -> CpctlError:
    tried = ", ".join(auth.tried) or "no key found (no agent, no IdentityFile, no ~/.ssh/id_*)"
    return _unreachable(ep.name, "authentication failed as %s (tried: %s)" % (ep.user, tried))


class KnownHosts:
    """known_hosts files parsed once per process, shared read-only by every connection that
    checks against the same files (paramiko only looks keys up in them).

    paramiko parses a file line by line, building each line's key and checking it against
    every entry before it: ~0.6 ms of CPU per connection with 20 lines, quadratic in the lines,
    and 20 masters parsed the same file 20 times. A file is parsed again when its inode, size or
    mtime changed, and always while it was modified within the last RACY seconds (``accept-new``
    appends to it; an operator may fix it between two runs of the keeper)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: Dict[Tuple[str, ...], Tuple[Tuple[Mark, ...], paramiko.HostKeys]] = {}

    def keys(self, paths: Sequence[str]) -> paramiko.HostKeys:
        files = tuple(paths)
        with self._lock:
            marks = tuple(stat_mark(path) for path in files)
            cached = self._cached.get(files)
            if cached is not None and cached[0] == marks:
                return cached[1]
            keys = paramiko.HostKeys()
            for path in files:
                if os.path.isfile(path):
                    try:
                        keys.load(path)
                    except (OSError, UnicodeDecodeError):
                        continue    # OpenSSH too ignores an unreadable known_hosts file
            if marks_vouch(marks) and tuple(stat_mark(path) for path in files) == marks:
                self._cached[files] = (marks, keys)
            return keys


KNOWN_HOSTS = KnownHosts()


class _Client(paramiko.SSHClient):
    """An SSHClient checking host keys against the shared, already parsed known_hosts files."""

    def __init__(self, known: paramiko.HostKeys) -> None:
        super().__init__()
        self._system_host_keys = known


def _client_for(ep: Endpoint, options: SSHOptions) -> paramiko.SSHClient:
    client = _Client(KNOWN_HOSTS.keys(list(options.global_known_hosts) + ep.known_hosts))
    client.set_missing_host_key_policy(_HostKeyPolicy(ep))
    return client


def handshaking() -> ContextManager[None]:
    """What a handshake runs under: the entry point's choice (``base.handshake_guard``: nothing, or
    ``HandshakeSwitch`` where a fan-out switches the GIL fast)."""
    return base.handshake_guard()


def connect_endpoint(ep: Endpoint, options: SSHOptions,
                     sock: Optional[Union[socket.socket, paramiko.Channel]] = None) -> paramiko.SSHClient:
    """Handshake, verify the host key (paramiko does it before any auth), then authenticate."""
    sock = sock if sock is not None else _open_socket(ep)
    client = _client_for(ep, options)
    auth = _KeyAuth(ep, options)
    connected = False
    try:
        # With ``sock`` given, paramiko uses hostname/port only to name the key in known_hosts.
        with handshaking():
            client.connect(ep.host_key_alias or ep.hostname, port=DEFAULT_PORT if ep.host_key_alias else ep.port,
                           username=ep.user, sock=sock,
                           timeout=ep.connect_timeout, banner_timeout=ep.connect_timeout,
                           auth_timeout=ep.connect_timeout, auth_strategy=auth)
        connected = True
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise _connect_error(ep, auth, exc) from None
    finally:
        if auth.agent is not None:
            auth.agent.close()
        if not connected:
            client.close()
            sock.close()
    transport_of(client).set_keepalive(30)
    return client


def _connect_error(ep: Endpoint, auth: _KeyAuth, exc: BaseException) -> CpctlError:
    if isinstance(exc, paramiko.BadHostKeyException):
        return _changed(ep, exc)
    if isinstance(exc, (AuthFailure, paramiko.AuthenticationException)):
        return _auth_failed(ep, auth)
    if isinstance(exc, paramiko.SSHException):
        return _unreachable(ep.name, "SSH handshake failed: %s" % (str(exc).strip() or type(exc).__name__))
    if isinstance(exc, (OSError, EOFError)):
        return _unreachable(ep.name, _socket_reason(exc, ep.connect_timeout))
    return _unreachable(ep.name, "%s: %s" % (type(exc).__name__, exc))


_MATCH_EXEC = re.compile(r"^[ \t]*match[ \t=].*\bexec\b", re.IGNORECASE | re.MULTILINE)


def _load_invoke() -> None:
    """Give paramiko the invoke it needs to run ``Match exec`` commands (see the import above)."""
    config: Any = paramiko.config      # ``invoke`` is an optional attribute its stubs do not name
    if config.invoke is not None:
        return
    try:
        import invoke
    except ImportError as exc:
        config.invoke_import_error = exc
        return
    config.invoke = invoke


class SSHConfigLookups:
    """A parsed ssh_config that remembers its lookups, when their answers cannot change.

    paramiko walks every Host/Match block twice per lookup and asks the login name for each
    block (an NSS lookup when LOGNAME and USER are unset, as under cron or systemd); a fan-out
    resolves each master twice. 20 masters behind a 20-block config made ~1,700 such calls per
    run. A config with ``Match exec`` is looked up afresh every time: a command decides.
    """

    def __init__(self, parsed: paramiko.SSHConfig, remember: bool) -> None:
        self._parsed, self._remember = parsed, remember
        self._answers: Dict[str, dict] = {}
        self._index = _block_index(parsed)

    def lookup(self, host: str) -> dict:
        found = self._answers.get(host) if self._remember else None
        if found is None:
            found = dict(self._for_host(host).lookup(host))
            if self._remember:
                self._answers[host] = found
        return {key: list(value) if isinstance(value, list) else value for key, value in found.items()}

    def _for_host(self, host: str) -> paramiko.SSHConfig:
        """The config paramiko looks ``host`` up in: the whole of it, less the Host blocks whose
        names are all plain and none is ``host``. paramiko would walk those too, only to find
        they do not match (its fnmatch of a plain name is equality): with one block per master,
        a fan-out's lookups were quadratic in the masters (50: ~5 ms of CPU; 500: ~0.5 s)."""
        if self._index is None:
            return self._parsed
        view = paramiko.SSHConfig()
        blocks = [block for block, names in self._index if names is None or host in names]
        view._config = blocks  # type: ignore[attr-defined]  # paramiko's own parse (_block_index)
        return view


def _block_index(parsed: paramiko.SSHConfig) -> Optional[List[Tuple[dict, Optional[FrozenSet[str]]]]]:
    """Each block of ``parsed`` with the only names it can match (None: it must be evaluated);
    None for a config whose lookups cannot be narrowed: one that canonicalizes host names
    (paramiko's second pass then matches another name), or a parse not shaped as expected."""
    blocks = getattr(parsed, "_config", None)
    if not isinstance(blocks, list) or not all(isinstance(block, dict) for block in blocks):
        return None
    if any("canonicalizehostname" in block.get("config", {}) for block in blocks):
        return None
    return [(block, _plain_names(block)) for block in blocks]


def _plain_names(block: dict) -> Optional[FrozenSet[str]]:
    """The names a ``Host`` block matches when every pattern is a plain name; None for a Match
    block, a wildcard (``*``, ``?``, ``[``) or a negated (``!``) pattern: paramiko decides those."""
    patterns = block.get("host")
    if block.get("matches") or not isinstance(patterns, list) or not patterns:
        return None
    if not all(isinstance(p, str) and not p.startswith("!") and not _WILDCARDS.intersection(p) for p in patterns):
        return None
    return frozenset(patterns)


_WILDCARDS = frozenset("*?[")


_CONFIGS: Dict[str, SSHConfigLookups] = {}     # ssh_config text -> its parse, for this process
_CONFIGS_MAX = 8
_CONFIGS_LOCK = threading.Lock()


_CONFIG_TEXTS: Dict[str, Tuple[Tuple[Mark, ...], str]] = {}   # path -> the files it came from, its text
_CONFIG_TEXTS_LOCK = threading.Lock()


def _config_text(path: str) -> str:
    """The config's text (Include inlined), read again only when a file it came from, or a
    directory an Include globs in, changed (or changed within the last RACY seconds): 20 masters
    of one run read it once, and an edit still counts at once for the keeper."""
    with _CONFIG_TEXTS_LOCK:
        cached = _CONFIG_TEXTS.get(path)
    if cached is not None and tuple(stat_mark(mark[0]) for mark in cached[0]) == cached[0]:
        return cached[1]
    sources: List[str] = []
    text = read_config_text(path, sources=sources)
    marks = tuple(stat_mark(source) for source in sources)
    if marks_vouch(marks):
        with _CONFIG_TEXTS_LOCK:
            _CONFIG_TEXTS[path] = (marks, text)
    return text


def load_ssh_config(path: Optional[str]) -> Optional[SSHConfigLookups]:
    """The parsed ssh_config (Include inlined), or None when there is none to read. Checked on
    every call (the keeper lives long: an edit counts at once), parsed once per distinct text."""
    path = ssh_config_path(path)
    if path is None:
        return None
    text = _config_text(path)
    known = _CONFIGS.get(text)
    if known is not None:
        return known
    with _CONFIGS_LOCK:            # the masters of a fan-out ask at once: one parse for them all
        known = _CONFIGS.get(text)
        return known if known is not None else _parse_config(path, text)


def _parse_config(path: str, text: str) -> SSHConfigLookups:
    """Parse ``text`` (read from ``path``) and keep it for the next runs of this process."""
    match_exec = bool(_MATCH_EXEC.search(text))
    if match_exec:
        _load_invoke()
    try:
        known = SSHConfigLookups(paramiko.SSHConfig.from_text(text), remember=not match_exec)
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise CpctlError("ssh_config %s: %s" % (path, exc), ExitCode.USAGE) from None
    if len(_CONFIGS) >= _CONFIGS_MAX:
        _CONFIGS.clear()
    _CONFIGS[text] = known
    return known


def _hop_options(options: SSHOptions) -> SSHOptions:
    """Jump hosts use their own config entries: -l/-p/-J apply to the final target only."""
    return dataclasses.replace(options, user=None, port=None, proxy_jump=None)


def open_chain(target: Target, options: SSHOptions, config: Optional[SSHConfigLookups], depth: int = 0
               ) -> List[paramiko.SSHClient]:
    """Connected clients for every ProxyJump hop then ``target``, each hop through the previous."""
    return _open_chain(target, options, config, depth)[0]


def _open_chain(target: Target, options: SSHOptions, config: Optional[SSHConfigLookups], depth: int = 0
                ) -> Tuple[List[paramiko.SSHClient], Endpoint]:
    """``open_chain`` and the target's resolved endpoint."""
    if depth > MAX_JUMP_DEPTH:
        raise CpctlError("%s: ProxyJump nested too deeply (a loop?)" % target.raw, ExitCode.USAGE)
    ep = resolve(target, config.lookup if config else None, options)
    clients: List[paramiko.SSHClient] = []
    try:
        _open_hops(ep.proxy_jump, clients, options, config, depth)
    except BaseException as exc:
        for client in reversed(clients):
            client.close()
        if isinstance(exc, CpctlError):      # name the final target first, then the failing hop
            raise CpctlError("%s: via %s" % (target.raw, exc.message), exc.code, exc.hint) from None
        raise
    try:
        clients.append(connect_endpoint(ep, options, _tunnel(clients[-1], ep) if clients else None))
    except BaseException:
        for client in reversed(clients):
            client.close()
        raise
    return clients, ep


def _open_hops(hops: List[str], clients: List[paramiko.SSHClient], options: SSHOptions,
               config: Optional[SSHConfigLookups],
               depth: int) -> None:
    """Connect the ProxyJump hops into ``clients``; the first hop honours its own ProxyJump."""
    lookup = config.lookup if config else None
    for index, hop in enumerate(hops):
        hop_target = parse_target(hop)
        if index == 0:
            clients += open_chain(hop_target, _hop_options(options), config, depth + 1)
            continue
        hop_ep = resolve(hop_target, lookup, dataclasses.replace(_hop_options(options), proxy_jump="none"))
        clients.append(connect_endpoint(hop_ep, options, _tunnel(clients[-1], hop_ep)))


def _exec_status(transport: paramiko.Transport, argv: List[str], timeout: float, stdin: bytes = b""
                 ) -> Tuple[int, str]:
    """Run a short command on its own channel; (rc, stderr). Used only for the sudo probes."""
    chan = transport.open_session(timeout=timeout)
    try:
        chan.settimeout(timeout)
        chan.exec_command(shlex.join(argv))
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        err = b""
        while True:
            chunk = chan.recv_stderr(4096)
            if not chunk:
                break
            err += chunk
        return chan.recv_exit_status(), err.decode("utf-8", "replace")
    finally:
        chan.close()


def _agent_argv(transport: paramiko.Transport, name: str, ep: Endpoint, options: SSHOptions
                ) -> Tuple[List[str], bytes]:
    """(argv, password_line): sudo only for non-root logins; the password travels on stdin.

    With a become password, two probes first: ``sudo -n true`` (is a password needed at all? if
    not, it must not be sent, python would read it) and ``sudo -S true`` with the password and
    EOF, so a wrong password fails in one attempt instead of sudo eating the agent's source.
    """
    argv = agent_bootstrap(options.python)
    if not options.become or ep.user == "root":
        return argv, b""
    if options.become_password is None:
        return ["sudo", "-n", "--"] + argv, b""
    rc, _err = _exec_status(transport, ["sudo", "-n", "true"], ep.connect_timeout)
    if rc == 0:
        return ["sudo", "-n", "--"] + argv, b""
    line = options.become_password.encode("utf-8") + b"\n"
    sudo_s = ["sudo", "-S", "-p", "", "--"]
    rc, err = _exec_status(transport, sudo_s + ["true"], max(ep.connect_timeout, 15.0), line)
    if rc != 0:
        raise _agent_failure(name, ep, options, err or "sudo: incorrect password")
    return sudo_s + argv, line


def _read_stderr(chan: paramiko.Channel, wait: float = 5.0) -> str:
    chan.status_event.wait(wait)
    err = b""
    while chan.recv_stderr_ready() and len(err) < 8192:
        err += chan.recv_stderr(4096)
    return err.decode("utf-8", "replace")


def _agent_failure(name: str, ep: Endpoint, options: SSHOptions, stderr: str) -> CpctlError:
    """Turn the agent's death rattle into one actionable line (never echoing the password)."""
    if options.become_password:
        stderr = stderr.replace(options.become_password, "***")
    low = stderr.lower()
    if "password is required" in low:
        return CpctlError("sudo on %s needs a password: use --ask-become-pass or NOPASSWD" % name,
                          ExitCode.ENVIRONMENT)
    if "incorrect password" in low or "sorry, try again" in low:
        return CpctlError("sudo on %s: the become password was rejected" % name, ExitCode.ENVIRONMENT)
    if "sudoers" in low or "not allowed to execute" in low:
        return CpctlError("sudo on %s: %s may not run %s as root" % (name, ep.user, options.python),
                          ExitCode.ENVIRONMENT)
    if "not found" in low or "no such file" in low:
        return CpctlError("%s: %s not found on the node (cpctl needs python3 >= 3.8 there)"
                          % (name, options.python), ExitCode.ENVIRONMENT)
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    return CpctlError("%s: agent did not start: %s" % (name, last[-1] if last else "no answer"),
                      ExitCode.ENVIRONMENT)


def read_hello(chan: paramiko.Channel, limit: int = 512) -> bytes:
    """The agent's ready line, read in chunks: the agent sends nothing unasked, so nothing after
    the line is there to be consumed (one recv per byte cost ~0.5 ms of CPU per agent). Whatever
    came with it is returned too, so no byte of the stream can be lost."""
    data = b""
    while b"\n" not in data and len(data) < limit:
        chunk = chan.recv(limit)
        if not chunk:
            break
        data += chunk
    return data


def _exec_with_input(chan: paramiko.Channel, command: str, data: bytes) -> None:
    """Ask the server to exec ``command`` and send ``data`` (its stdin) right behind the request,
    without waiting for the server's answer as ``Channel.exec_command`` does: the agent's start
    then costs one round trip (its program out, its ready line back) after the channel's
    opening, not two. The server handles a channel's messages in order and keeps the data
    until the command runs; a refused request closes the channel, which the ready line's read
    sees (the agent "did not start", with the server's stderr if any)."""
    from paramiko.common import cMSG_CHANNEL_REQUEST
    raw: Any = chan                  # the request as exec_command builds it (paramiko's private API)
    message = paramiko.Message()
    message.add_byte(cMSG_CHANNEL_REQUEST)
    message.add_int(raw.remote_chanid)
    message.add_string("exec")
    message.add_boolean(True)
    message.add_string(command)
    raw._event_pending()
    raw.transport._send_user_message(message)
    chan.sendall(data)


def open_agent_channel(name: str, transport: paramiko.Transport, ep: Endpoint,
                       options: SSHOptions) -> Tuple[paramiko.Channel, bytes]:
    """Exec the agent on a new channel of ``transport``, send (password line and) its program and
    wait for its ready line: (channel, ready line). The connection keeper uses it directly."""
    argv, password_line = _agent_argv(transport, name, ep, options)
    chan = transport.open_session(timeout=ep.connect_timeout)
    try:
        chan.settimeout(max(3 * ep.connect_timeout, 30.0))   # a wedged sudo must not hang us
        _exec_with_input(chan, shlex.join(argv), password_line + agent_payload())
        hello = read_hello(chan)
        check_hello(name, hello)
        chan.settimeout(None)
        return chan, hello
    except (CpctlError, OSError, EOFError, paramiko.SSHException) as exc:
        stderr = _read_stderr(chan)
        chan.close()
        if not stderr and isinstance(exc, CpctlError):
            raise
        raise _agent_failure(name, ep, options, stderr) from None


def start_agent(name: str, clients: List[paramiko.SSHClient], ep: Endpoint, options: SSHOptions) -> SSHHost:
    """The agent on the last client's connection, as a Host."""
    chan, hello = open_agent_channel(name, transport_of(clients[-1]), ep, options)
    return SSHHost(name, clients, chan, hello)


def open_connection(target: str, options: SSHOptions) -> Tuple[List[paramiko.SSHClient], Endpoint]:
    """(clients, endpoint): the authenticated chain to ``target`` (ProxyJump hops first)."""
    return _open_chain(parse_target(target), options, load_ssh_config(options.ssh_config))


def connect(target: str, options: Optional[SSHOptions] = None) -> SSHHost:
    """Open the SSH connection to ``target`` and start the agent there; the caller closes it."""
    options = options or SSHOptions()
    clients, ep = open_connection(target, options)
    try:
        return start_agent(target, clients, ep, options)
    except BaseException as exc:
        for client in reversed(clients):
            client.close()
        if isinstance(exc, (paramiko.SSHException, OSError, EOFError)):
            raise _unreachable(target, "cannot start the agent: %s" % exc) from None
        raise

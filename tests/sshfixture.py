"""pytest fixtures running REAL OpenSSH servers on loopback, so SSH tests exercise the real thing.

Each server is ``/usr/sbin/sshd -D -e -f <config>`` with its own ed25519 host key, key-only auth
and every file (authorized keys, pid, log) in a private temp dir; it listens on an ephemeral
port of 127.0.0.x and is killed at teardown. Nothing depends on the user's ~/.ssh: every test
gets explicit key, known_hosts and ssh_config paths through ``SSHServer.options()``.

Use in a test module::

    from tests.sshfixture import *  # noqa: F401,F403  (fixtures: sshd, sshd_many, sshd_factory, ...)

    def test_x(sshd):
        host = sshd.connect()            # an SSHHost as root, key verified
        ...

(Star-imported session fixtures are instantiated once per importing module; a conftest with
``pytest_plugins = ["tests.sshfixture"]`` would share them across modules.)

Fixtures: ``ssh_session`` (client key, shared dirs), ``sshd`` (one server, session scope),
``sshd_many`` (3 servers on 127.0.0.1/.2/.3), ``sshd_factory`` (fresh servers for a test, e.g.
with another host key), ``sudo_users`` (non-root users with and without NOPASSWD sudo).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Optional

import pytest

from cpctl_lab.httpserve import free_port

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
START_TIMEOUT = 5.0

__all__ = ["SSHServer", "SSHSession", "SudoUsers", "ssh_session", "sshd", "sshd_many", "sshd_factory",
           "sudo_users", "start_sshd", "keygen", "free_port"]


def keygen(path: str, passphrase: str = "", kind: str = "ed25519") -> str:
    """Make a key pair at ``path``; return the public key line."""
    rounds = ["-a", "2"] if passphrase else []     # cheap KDF: tests need encryption, not strength
    subprocess.run([SSH_KEYGEN, "-q", "-t", kind, "-N", passphrase, "-C", "cpctl-test", "-f", path] + rounds,
                   check=True, stdin=subprocess.DEVNULL)
    with open(path + ".pub") as handle:
        return handle.read().strip()


def locked_key(session: "SSHSession", directory: str, passphrase: str = "open sesame") -> tuple:
    """(path, prompt, calls): an encrypted client key authorised for root, and a prompt that
    answers its passphrase and records every question in ``calls``."""
    path = os.path.join(directory, "locked_key")
    session.authorize("root", keygen(path, passphrase=passphrase))
    calls: list = []

    def prompt(text: str, secret: bool = True) -> str:
        calls.append((text, secret))
        return passphrase

    return path, prompt, calls


@dataclass
class SSHSession:
    """Per-test-session material: a world-readable base dir (sshd reads authorized keys as the
    login user), one unencrypted client key, and ``auth/<user>`` authorized_keys files."""

    base: str
    client_key: str
    client_pub: str

    @property
    def auth_dir(self) -> str:
        return os.path.join(self.base, "auth")

    def authorize(self, user: str, pub: str) -> None:
        path = os.path.join(self.auth_dir, user)
        with open(path, "a") as handle:
            handle.write(pub.strip() + "\n")
        os.chmod(path, 0o644)


@dataclass
class SSHServer:
    """One running sshd and the client-side files that trust it."""

    session: SSHSession
    address: str
    port: int
    dir: str
    host_pub: str
    proc: subprocess.Popen
    alias: str = "master"
    extra_config: List[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        """The address sshd listens on (also ``address``)."""
        return self.address

    @property
    def client_key(self) -> str:
        return self.session.client_key

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.dir, "known_hosts")

    @property
    def ssh_config(self) -> str:
        return os.path.join(self.dir, "ssh_config")

    @property
    def log(self) -> str:
        return os.path.join(self.dir, "sshd.log")

    @property
    def known_hosts_line(self) -> str:
        return "[%s]:%d %s\n" % (self.address, self.port, " ".join(self.host_pub.split()[:2]))

    def target(self, user: str = "root") -> str:
        return "%s@%s:%d" % (user, self.address, self.port)

    def write_client_files(self) -> None:
        with open(self.known_hosts, "w") as handle:
            handle.write(self.known_hosts_line)
        with open(self.ssh_config, "w") as handle:
            handle.write(self.config_block(self.alias))
            handle.write("".join(line + "\n" for line in self.extra_config))

    def config_block(self, alias: str, user: str = "root") -> str:
        return ("Host %s\n  HostName %s\n  Port %d\n  User %s\n  IdentityFile %s\n  UserKnownHostsFile %s\n"
                % (alias, self.address, self.port, user, self.client_key, self.known_hosts))

    def options(self, **overrides: Any) -> Any:
        """SSHOptions that use only this server's files (never ~/.ssh, never an ssh-agent)."""
        from cpctl.host.ssh import SSHOptions
        base = dict(ssh_config=self.ssh_config, identity_files=[self.client_key],
                    known_hosts=[self.known_hosts], global_known_hosts=[], use_agent=False,
                    look_for_keys=False, connect_timeout=5.0)
        base.update(overrides)
        return SSHOptions(**base)

    def connect(self, target: Optional[str] = None, **overrides: Any) -> Any:
        from cpctl.host.ssh import connect
        return connect(target or self.target(), self.options(**overrides))

    def log_text(self) -> str:
        with open(self.log, errors="replace") as handle:
            return handle.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


def _sshd_config(session: SSHSession, server_dir: str, address: str, port: int) -> str:
    return "\n".join([
        "Port %d" % port, "ListenAddress %s" % address,
        "HostKey %s" % os.path.join(server_dir, "host_key"),
        "PidFile %s" % os.path.join(server_dir, "sshd.pid"),
        "AuthorizedKeysFile %s/%%u" % session.auth_dir,
        "StrictModes no", "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "AllowTcpForwarding yes",
        "LogLevel VERBOSE", "MaxStartups 100:30:200", "MaxSessions 50", "LoginGraceTime 20",
        # bash sources ~/.bashrc for ssh commands unless SHLVL says it is nested; a developer's
        # bashrc (pyenv init: ~0.4 s) would otherwise dominate every test's agent start.
        "SetEnv SHLVL=1", "",
    ])


def _wait_listening(proc: subprocess.Popen, address: str, port: int) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def start_sshd(session: SSHSession, address: str = "127.0.0.1", host_key: Optional[str] = None,
               alias: str = "master") -> SSHServer:
    """Start one sshd with its own host key (or a copy of ``host_key``) on a free port."""
    server_dir = tempfile.mkdtemp(prefix="sshd-", dir=session.base)
    os.chmod(server_dir, 0o755)
    key_path = os.path.join(server_dir, "host_key")
    if host_key:
        shutil.copy(host_key, key_path)
        shutil.copy(host_key + ".pub", key_path + ".pub")
        os.chmod(key_path, 0o600)
    if host_key:
        with open(key_path + ".pub") as handle:
            host_pub = handle.read().strip()
    else:
        host_pub = keygen(key_path)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    for _ in range(5):
        port = free_port(address)
        cfg = os.path.join(server_dir, "sshd_config")
        with open(cfg, "w") as handle:
            handle.write(_sshd_config(session, server_dir, address, port))
        log = open(os.path.join(server_dir, "sshd.log"), "ab")
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", cfg], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log)
        log.close()
        if _wait_listening(proc, address, port):
            server = SSHServer(session, address, port, server_dir, host_pub, proc, alias)
            server.write_client_files()
            return server
        proc.kill()
        proc.wait()
    with open(os.path.join(server_dir, "sshd.log"), errors="replace") as handle:
        raise RuntimeError("sshd did not start: %s" % handle.read()[-2000:])


def _require_sshd() -> None:
    if not os.path.exists(SSHD):
        pytest.skip("OpenSSH server not installed (%s)" % SSHD)
    if os.geteuid() != 0:
        pytest.skip("sshd fixtures need root (privilege separation, other users)")


@pytest.fixture(scope="session")
def ssh_session() -> Iterator[SSHSession]:
    _require_sshd()
    session = new_session()
    yield session
    shutil.rmtree(session.base, ignore_errors=True)


def new_session() -> SSHSession:
    """A session's material (see ``SSHSession``) in a new temp dir; root may log in with its key."""
    base = tempfile.mkdtemp(prefix="cpctl-sshd-")
    os.chmod(base, 0o755)
    os.makedirs(os.path.join(base, "auth"), mode=0o755)
    client_key = os.path.join(base, "client_key")
    session = SSHSession(base, client_key, keygen(client_key))
    session.authorize("root", session.client_pub)
    return session


@pytest.fixture(scope="session")
def sshd(ssh_session: SSHSession) -> Iterator[SSHServer]:
    """One sshd on 127.0.0.1 for the whole session; root logs in with ``client_key``."""
    server = start_sshd(ssh_session)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sshd_many(ssh_session: SSHSession) -> Iterator[List[SSHServer]]:
    """Three sshd on 127.0.0.1, .2 and .3, sharing one ssh_config (aliases master1..3) and one
    known_hosts (each server's ``ssh_config``/``known_hosts`` are rewritten to the shared ones)."""
    servers = start_many(ssh_session)
    yield servers
    for server in servers:
        server.stop()


def start_many(session: SSHSession, count: int = 3) -> List[SSHServer]:
    """``count`` sshd on 127.0.0.1, .2, ... sharing one ssh_config (aliases master1..N) and one
    known_hosts (each server's ``ssh_config``/``known_hosts`` are rewritten to the shared ones)."""
    servers = [start_sshd(session, "127.0.0.%d" % i, alias="master%d" % i) for i in range(1, count + 1)]
    shared_dir = tempfile.mkdtemp(prefix="many-", dir=session.base)
    known = os.path.join(shared_dir, "known_hosts")
    config = os.path.join(shared_dir, "ssh_config")
    with open(known, "w") as handle:
        handle.write("".join(s.known_hosts_line for s in servers))
    for server in servers:
        shutil.copy(known, server.known_hosts)
    with open(config, "w") as handle:
        handle.write("".join(s.config_block(s.alias) for s in servers))
    for server in servers:
        shutil.copy(config, server.ssh_config)
    return servers


@pytest.fixture
def sshd_factory(ssh_session: SSHSession) -> Iterator[Callable[..., SSHServer]]:
    """``sshd_factory(address="127.0.0.1", host_key=None)`` starts a server stopped after the test."""
    started: List[SSHServer] = []

    def make(address: str = "127.0.0.1", host_key: Optional[str] = None, alias: str = "master") -> SSHServer:
        server = start_sshd(ssh_session, address, host_key, alias)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@dataclass
class SudoUsers:
    nopasswd: str          # may run anything as root without a password
    password_user: str     # sudo needs ``password``
    password: str


def _run(argv: List[str]) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def _ensure_sudo() -> None:
    if shutil.which("sudo"):
        return
    subprocess.run(["apt-get", "install", "-y", "-q", "sudo"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    if not shutil.which("sudo"):
        pytest.skip("sudo is not installed (apt-get install sudo)")


_USER_TAGS: List[int] = []


@pytest.fixture(scope="session")
def sudo_users(ssh_session: SSHSession) -> Iterator[SudoUsers]:
    """Two throwaway users (names unique per run, removed at teardown) authorised with the
    client key: one with NOPASSWD sudo (drop-in in /etc/sudoers.d), one whose sudo asks."""
    _ensure_sudo()
    if not shutil.which("useradd"):
        pytest.skip("useradd missing")
    # Session fixtures star-imported into several modules are instantiated once per module:
    # keep names unique per instance as well as per run.
    _USER_TAGS.append(len(_USER_TAGS))
    tag = "%x%d" % (os.getpid(), _USER_TAGS[-1])
    users = SudoUsers("cpct%s-np" % tag, "cpct%s-pw" % tag, "pw-%s-secret" % tag)
    dropin = "/etc/sudoers.d/cpctl-test-%s" % tag
    try:
        for name in (users.nopasswd, users.password_user):
            _run(["useradd", "-m", "-s", "/bin/sh", name])
            ssh_session.authorize(name, ssh_session.client_pub)
        # "*" (not "!") so that sshd with UsePAM=no does not treat the account as locked.
        _run(["usermod", "-p", "*", users.nopasswd])
        subprocess.run(["chpasswd"], input=("%s:%s\n" % (users.password_user, users.password)).encode(),
                       check=True, stdout=subprocess.DEVNULL)
        os.makedirs("/etc/sudoers.d", mode=0o750, exist_ok=True)
        with open(dropin, "w") as handle:
            handle.write("%s ALL=(ALL:ALL) NOPASSWD: ALL\n%s ALL=(ALL:ALL) ALL\n"
                         % (users.nopasswd, users.password_user))
        os.chmod(dropin, 0o440)
        yield users
    finally:
        if os.path.exists(dropin):
            os.unlink(dropin)
        for name in (users.nopasswd, users.password_user):
            subprocess.run(["userdel", "-r", "-f", name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


def _exits(pid: int, timeout: float) -> bool:
    """True once process ``pid`` is gone (or a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def keeper_dir(monkeypatch: Any) -> Iterator[str]:
    """A private keeper dir for this test, in $CPCTL_KEEPER_DIR (short: a Unix socket path has
    ~100 bytes); the keeper started in it is stopped afterwards (killed if it does not exit)."""
    from cpctl.errors import CpctlError
    from cpctl.host import keeper
    directory = tempfile.mkdtemp(prefix="cpk-")
    monkeypatch.setenv(keeper.ENV_DIR, directory)
    yield directory
    try:
        info = keeper.request("stop", directory)
        if info and not (keeper.wait_gone(directory) and _exits(info["pid"], 15.0)):
            os.kill(info["pid"], signal.SIGKILL)
    except (CpctlError, OSError):
        pass
    shutil.rmtree(directory, ignore_errors=True)

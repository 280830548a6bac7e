"""Reaching masters: unreachable hosts, jump hosts, key passphrases, sudo."""

from __future__ import annotations

import os
import socket
import time
from typing import Callable, Iterator

import pytest

from cpctl.errors import CpctlError, ExitCode
from tests.sshfixture import *  # noqa: F403
from tests.sshfixture import SSHServer, SudoUsers, free_port, keygen, locked_key

pytestmark = pytest.mark.timeout(30)


def _fails(fn: Callable[[], object]) -> CpctlError:
    with pytest.raises(CpctlError) as err:
        fn()
    assert "\n" not in err.value.message
    return err.value


def test_closed_port_is_unreachable_quickly(sshd: SSHServer) -> None:
    port = free_port("127.0.0.1")
    started = time.monotonic()
    err = _fails(lambda: sshd.connect("root@127.0.0.1:%d" % port))
    assert time.monotonic() - started < 2
    assert err.code == ExitCode.UNREACHABLE
    assert err.message == "root@127.0.0.1:%d: unreachable: connection refused" % port


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """Accepts TCP connections and never says a word: an SSH banner timeout."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(5)
    yield sock.getsockname()[1]
    sock.close()


def test_silent_server_times_out(sshd: SSHServer, silent_listener: int) -> None:
    started = time.monotonic()
    err = _fails(lambda: sshd.connect("127.0.0.1:%d" % silent_listener, connect_timeout=1.0))
    assert time.monotonic() - started < 5
    assert err.code == ExitCode.UNREACHABLE and "unreachable" in err.message


def test_auth_failure_is_one_line(sshd: SSHServer, tmp_path) -> None:
    stranger = str(tmp_path / "stranger")
    keygen(stranger)
    err = _fails(lambda: sshd.connect(identity_files=[stranger]))
    assert err.code == ExitCode.UNREACHABLE
    assert "authentication failed as root" in err.message and "stranger" in err.message


def test_alias_from_ssh_config(sshd: SSHServer) -> None:
    host = sshd.connect("master", identity_files=[], known_hosts=None)
    try:
        assert host.name == "master" and host.info()["euid"] == 0
    finally:
        host.close()


def test_passphrase_prompted_once_per_run(sshd: SSHServer, ssh_session, tmp_path) -> None:
    key, prompt, calls = locked_key(ssh_session, str(tmp_path))
    options = sshd.options(identity_files=[key], prompt=prompt)
    from cpctl.host.ssh import connect
    for _ in range(2):
        connect(sshd.target(), options).close()
    assert calls == [("Enter passphrase for key '%s': " % key, True)]


def test_passphrase_prompted_once_with_per_host_inventory_vars(sshd: SSHServer, ssh_session, tmp_path) -> None:
    """An inventory's per-host ``become``/``python`` give each master its own copy of the options;
    the copies share the run's key ring, so the key is read and its passphrase asked once."""
    key, prompt, calls = locked_key(ssh_session, str(tmp_path))
    options = sshd.options(identity_files=[key], prompt=prompt, persist=0)
    from cpctl.host.connect import open_host
    for become, python in ((False, None), (None, "python3"), (False, "python3")):
        open_host(sshd.target(), options, become=become, python=python).close()
    assert calls == [("Enter passphrase for key '%s': " % key, True)]


def test_encrypted_key_without_prompt_is_skipped(sshd: SSHServer, tmp_path) -> None:
    key = str(tmp_path / "locked_key")
    keygen(key, passphrase="pw")
    err = _fails(lambda: sshd.connect(identity_files=[key]))
    assert "unusable" in err.message


def _jump_config(path, jump: SSHServer, *hops: SSHServer) -> str:
    """ssh_config with ``jump`` reachable directly and each hop reachable only through the previous."""
    text = jump.config_block("jump0")
    for index, hop in enumerate(hops, 1):
        text += hop.config_block("jump%d" % index) + "  ProxyJump jump%d\n" % (index - 1)
    path.write_text(text)
    return str(path)


def _accepted(server: SSHServer) -> int:
    return server.log_text().count("Accepted publickey")


def test_proxy_jump_one_hop(sshd: SSHServer, sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    inner = sshd_factory(address="127.0.0.2")
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line + inner.known_hosts_line)
    config = _jump_config(tmp_path / "config", sshd, inner)
    before = _accepted(sshd)
    host = sshd.connect("jump1", ssh_config=config, known_hosts=[str(known)])
    try:
        assert host.run(["true"]).ok
    finally:
        host.close()
    assert _accepted(sshd) == before + 1 and _accepted(inner) == 1


def test_proxy_jump_two_hops_list(sshd: SSHServer, sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    middle, inner = sshd_factory(address="127.0.0.2"), sshd_factory(address="127.0.0.3")
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line + middle.known_hosts_line + inner.known_hosts_line)
    config = tmp_path / "config"
    config.write_text(sshd.config_block("j1") + middle.config_block("j2") + inner.config_block("target")
                      + "  ProxyJump j1,j2\n")
    before = _accepted(sshd)
    host = sshd.connect("target", ssh_config=str(config), known_hosts=[str(known)])
    host.close()
    assert (_accepted(sshd), _accepted(middle), _accepted(inner)) == (before + 1, 1, 1)


def test_jump_host_key_checked_too(sshd: SSHServer, sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    inner = sshd_factory(address="127.0.0.2")
    known = tmp_path / "known_hosts"
    known.write_text(inner.known_hosts_line)                  # the jump host is unknown
    config = _jump_config(tmp_path / "config", sshd, inner)
    err = _fails(lambda: sshd.connect("jump1", ssh_config=config, known_hosts=[str(known)]))
    assert err.message.startswith("jump1: via jump0: unknown host key")
    assert _accepted(inner) == 0


def test_jump_to_closed_port(sshd: SSHServer, tmp_path) -> None:
    config = tmp_path / "config"
    config.write_text(sshd.config_block("jump0") + "Host dead\n  HostName 127.0.0.1\n  Port %d\n"
                      "  ProxyJump jump0\n" % free_port("127.0.0.1"))
    err = _fails(lambda: sshd.connect("dead", ssh_config=str(config)))
    assert err.code == ExitCode.UNREACHABLE and err.message.startswith("dead: unreachable: jump host")


def test_sudo_nopasswd_user(sshd: SSHServer, sudo_users: SudoUsers) -> None:
    host = sshd.connect(sshd.target(sudo_users.nopasswd))
    try:
        info = host.info()
        assert (info["euid"], info["sudo_user"]) == (0, sudo_users.nopasswd)
    finally:
        host.close()


def test_no_become_stays_unprivileged(sshd: SSHServer, sudo_users: SudoUsers) -> None:
    host = sshd.connect(sshd.target(sudo_users.nopasswd), become=False)
    try:
        assert host.info()["user"] == sudo_users.nopasswd
    finally:
        host.close()


def test_sudo_password_required(sshd: SSHServer, sudo_users: SudoUsers) -> None:
    err = _fails(lambda: sshd.connect(sshd.target(sudo_users.password_user)))
    assert err.message == ("sudo on %s needs a password: use --ask-become-pass or NOPASSWD"
                           % sshd.target(sudo_users.password_user))
    assert err.code == ExitCode.ENVIRONMENT


def test_sudo_with_become_password(sshd: SSHServer, sudo_users: SudoUsers, monkeypatch) -> None:
    import paramiko
    commands: list = []
    original = paramiko.Channel.exec_command

    def spy(self: paramiko.Channel, command: str) -> None:
        commands.append(command)
        original(self, command)

    monkeypatch.setattr(paramiko.Channel, "exec_command", spy)
    host = sshd.connect(sshd.target(sudo_users.password_user), become_password=sudo_users.password)
    try:
        assert host.info()["euid"] == 0
    finally:
        host.close()
    assert commands and all(sudo_users.password not in c for c in commands)
    assert "sudo -S -p ''" in commands[-1]
    assert sudo_users.password not in repr(sshd.options(become_password=sudo_users.password))


@pytest.fixture
def ssh_agent(tmp_path, monkeypatch) -> Iterator[str]:
    """A private ssh-agent (its socket in tmp), exported as SSH_AUTH_SOCK for the test."""
    import subprocess
    sock = str(tmp_path / "agent.sock")
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.02)
    monkeypatch.setenv("SSH_AUTH_SOCK", sock)
    yield sock
    proc.kill()
    proc.wait()


def test_auth_with_ssh_agent_key(sshd: SSHServer, ssh_agent: str) -> None:
    import subprocess
    subprocess.run(["ssh-add", "-q", sshd.client_key], check=True, capture_output=True)
    host = sshd.connect(identity_files=[], use_agent=True, look_for_keys=False)
    host.close()
    err = _fails(lambda: sshd.connect(identity_files=[], use_agent=False, look_for_keys=False))
    assert "no key found" in err.message


def test_unresolvable_host_is_unreachable(sshd: SSHServer, monkeypatch) -> None:
    def no_dns(*args: object, **kw: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", no_dns)
    err = _fails(lambda: sshd.connect("root@master9.invalid"))
    assert err.code == ExitCode.UNREACHABLE
    assert err.message == ("root@master9.invalid: unreachable: cannot resolve host name "
                           "(Name or service not known)")


def test_host_key_alias(sshd: SSHServer, tmp_path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("cp-alias " + " ".join(sshd.host_pub.split()[:2]) + "\n")
    config = tmp_path / "config"
    config.write_text(sshd.config_block("aliased").replace(sshd.known_hosts, str(known))
                      + "  HostKeyAlias cp-alias\n")
    sshd.connect("aliased", ssh_config=str(config), known_hosts=None).close()


def test_sudo_wrong_become_password(sshd: SSHServer, sudo_users: SudoUsers) -> None:
    started = time.monotonic()
    err = _fails(lambda: sshd.connect(sshd.target(sudo_users.password_user), become_password="wrong-pw"))
    assert time.monotonic() - started < 8                     # one attempt, not three
    target = sshd.target(sudo_users.password_user)
    assert err.message == "sudo on %s: the become password was rejected" % target
    assert "wrong-pw" not in err.message

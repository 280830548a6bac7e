"""Host key checking is strict, like OpenSSH, and happens before anything runs on the server."""

from __future__ import annotations

import os
from typing import Callable

import pytest

from cpctl.errors import CpctlError, ExitCode
from tests.sshfixture import *  # noqa: F403
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(30)


def _marker_python(tmp_path) -> tuple:
    """A 'python3' that leaves a marker: proves whether the agent command was ever executed."""
    marker = tmp_path / "agent-ran"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text('#!/bin/sh\ntouch %s\nexec python3 "$@"\n' % marker)
    wrapper.chmod(0o755)
    return str(wrapper), marker


def test_unknown_key_refused_and_nothing_runs(sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    server = sshd_factory()
    python, marker = _marker_python(tmp_path)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(CpctlError) as err:
        server.connect(known_hosts=[str(empty)], python=python)
    msg = err.value.message
    assert err.value.code == ExitCode.UNREACHABLE and "\n" not in msg
    assert "unknown host key" in msg and "[127.0.0.1]:%d" % server.port in msg
    assert "ssh-ed25519 SHA256:" in msg and "--accept-new-host-key" in msg and "ssh-keyscan" in msg
    assert not marker.exists()
    assert "Accepted publickey" not in server.log_text()
    assert empty.read_text() == ""
    server.connect(python=python).close()          # positive control: a known key runs the agent
    assert marker.exists()


def test_accept_new_records_the_key(sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    server = sshd_factory()
    known = tmp_path / "sub" / "known_hosts"       # directory created like ssh does
    server.connect(known_hosts=[str(known)], accept_new_host_key=True).close()
    assert known.read_text() == server.known_hosts_line
    server.connect(known_hosts=[str(known)]).close()           # now known: strict mode passes
    assert known.read_text() == server.known_hosts_line        # recorded once


def test_changed_key_refused_even_with_accept_new(sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    server = sshd_factory()
    impostor_known = tmp_path / "known_hosts"
    other = sshd_factory(address="127.0.0.2")                  # same host name, different key
    impostor_known.write_text(server.known_hosts_line.split()[0] + " " + " ".join(other.host_pub.split()[:2]))
    python, marker = _marker_python(tmp_path)
    for accept_new in (False, True):
        with pytest.raises(CpctlError) as err:
            server.connect(known_hosts=[str(impostor_known)], accept_new_host_key=accept_new, python=python)
        msg = err.value.message
        assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in msg and "\n" not in msg
        assert "SHA256:" in msg and err.value.code == ExitCode.UNREACHABLE
    assert not marker.exists()
    assert "Accepted publickey" not in server.log_text()


def test_strict_no_only_when_config_says_so(sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    server = sshd_factory()
    known = tmp_path / "known_hosts"
    config = tmp_path / "ssh_config"
    config.write_text(server.config_block("lax").replace(server.known_hosts, str(known))
                      + "  StrictHostKeyChecking no\n")
    server.connect("lax", ssh_config=str(config), known_hosts=None).close()
    assert known.read_text() == server.known_hosts_line


def test_system_known_hosts_file_is_honoured(sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    server = sshd_factory()
    system = tmp_path / "ssh_known_hosts"
    system.write_text(server.known_hosts_line)
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    server.connect(known_hosts=[str(empty)], global_known_hosts=[str(system)]).close()


def test_hashed_known_hosts_entry(sshd_factory: Callable[..., SSHServer], tmp_path) -> None:
    import subprocess
    server = sshd_factory()
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line)
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert str(server.port) not in known.read_text()
    server.connect(known_hosts=[str(known)]).close()
    assert os.path.exists(str(known) + ".old")


_KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHmx4D4SYSE4Ms7b0Y4tPvT0QpYf8SP7QBrxc9EBCfU0"
_KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBhSx6L3RUrYCy5yLbx3SMOQsw5hiwrQbvMLF1LBEo5q"


def test_known_hosts_are_parsed_once_and_again_when_changed(tmp_path) -> None:
    """Issue 38: every connection of a run (and of the keeper) checks against one parse of the
    known_hosts files; a change to a file (a fixed key, an accept-new append) is parsed again,
    and a file changed within the last RACY seconds is never trusted by its stat."""
    from cpctl.host import ssh
    from cpctl.host.sshconfig import RACY
    known = tmp_path / "known_hosts"
    known.write_text("[10.0.0.1]:22 %s\n" % _KEY_A)
    cache = ssh.KnownHosts()
    fresh = cache.keys([str(known)])
    assert cache.keys([str(known)]) is not fresh            # just written: parsed every time
    old = os.stat(known).st_mtime - 2 * RACY
    os.utime(known, (old, old))
    first = cache.keys([str(known), str(tmp_path / "missing")])
    assert cache.keys([str(known), str(tmp_path / "missing")]) is first       # one parse, shared
    assert first.lookup("[10.0.0.1]:22")["ssh-ed25519"].get_base64() == _KEY_A.split()[1]
    known.write_text("[10.0.0.1]:22 %s\n" % _KEY_B)     # the key replaced in place: same inode, size
    os.utime(known, (old, old))                   # and mtime set back: the ctime still tells
    again = cache.keys([str(known), str(tmp_path / "missing")])
    assert again is not first
    assert again.lookup("[10.0.0.1]:22")["ssh-ed25519"].get_base64() == _KEY_B.split()[1]

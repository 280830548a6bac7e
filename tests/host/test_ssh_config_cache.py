"""ssh_config in a fan-out: parsed once per distinct text, each host looked up once (unless a
``Match exec`` decides), and getpass.getuser() answered from the environment."""

from __future__ import annotations

import getpass
import os
import pwd
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from cpctl.host import ssh
from cpctl.host.sshconfig import LOGIN_NAME_VARS, remember_login_name

pytestmark = pytest.mark.timeout(30)

CONFIG = "Host master*\n  User admin\n  IdentityFile ~/.ssh/a\n  IdentityFile ~/.ssh/b\nHost *\n  Port 2200\n"


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every lookup that reaches paramiko; the process-wide parse cache starts empty."""
    calls: list = []
    real = ssh.paramiko.SSHConfig.lookup
    monkeypatch.setattr(ssh, "_CONFIGS", {})
    monkeypatch.setattr(ssh.paramiko.SSHConfig, "lookup", lambda self, host: calls.append(host) or real(self, host))
    return calls


def test_each_host_is_looked_up_once_and_answers_are_copies(tmp_path: Any, lookups: list) -> None:
    path = tmp_path / "config"
    path.write_text(CONFIG)
    config = ssh.load_ssh_config(str(path))
    first = config.lookup("master1")
    assert first["user"] == "admin" and first["port"] == "2200" and len(first["identityfile"]) == 2
    first["identityfile"].append("mutated")
    first["user"] = "mutated"
    again = ssh.load_ssh_config(str(path)).lookup("master1")
    assert again["user"] == "admin" and len(again["identityfile"]) == 2
    config.lookup("master2")
    assert lookups == ["master1", "master2"]
    assert ssh.load_ssh_config(str(path)) is config          # same text: parsed once


def test_an_edited_config_is_parsed_again(tmp_path: Any, lookups: list) -> None:
    path = tmp_path / "config"
    path.write_text(CONFIG)
    assert ssh.load_ssh_config(str(path)).lookup("master1")["port"] == "2200"
    path.write_text(CONFIG.replace("2200", "2201"))
    assert ssh.load_ssh_config(str(path)).lookup("master1")["port"] == "2201"


def test_match_exec_is_asked_every_time(tmp_path: Any) -> None:
    pytest.importorskip("invoke")
    flag = tmp_path / "on-vpn"
    path = tmp_path / "config"
    path.write_text('Match host master exec "test -e %s"\n  Port 2222\nHost *\n  Port 22\n' % flag)
    code = textwrap.dedent("""
        import pathlib, sys
        from cpctl.host import ssh
        config = ssh.load_ssh_config(%r)
        before = config.lookup("master")["port"]
        pathlib.Path(%r).write_text("")
        print(before, config.lookup("master")["port"])
    """ % (str(path), str(flag)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)    # invoke reads stdin while the command runs
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["22", "2222"]


def test_login_name_is_remembered_only_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LOGIN_NAME_VARS:
        monkeypatch.delenv(name, raising=False)
    expected = pwd.getpwuid(os.getuid()).pw_name
    assert getpass.getuser() == expected          # what paramiko would have got anyway
    remember_login_name()
    assert os.environ["LOGNAME"] == expected and getpass.getuser() == expected
    monkeypatch.delenv("LOGNAME")
    monkeypatch.setenv("USER", "someone-else")
    remember_login_name()
    assert "LOGNAME" not in os.environ and getpass.getuser() == "someone-else"

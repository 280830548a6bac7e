"""ssh_config in a fan-out: parsed once per distinct text, each host looked up once (unless a
``Match exec`` decides), and getpass.getuser() answered from the environment."""

from __future__ import annotations

import getpass
import os
import pwd
import subprocess
import sys
import textwrap
import time
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


NARROWED = """\
Host h1 h2
  HostName 10.0.0.1
  IdentityFile ~/.ssh/one
Host h3,h4
  Port 2203
Host h2
  User second
  IdentityFile ~/.ssh/two
Host !h5 h*
  Port 2299
Host h1?
  User tens
Match originalhost h3 user root
  Port 2233
Match host 10.0.0.1
  ForwardAgent yes
Host [ab]x
  User bracket
Match localuser %s
  ServerAliveInterval 7
Host h5
  Port 2205
  IdentityFile ~/.ssh/five
Host *
  User fallback
  IdentityFile ~/.ssh/all
"""


@pytest.mark.parametrize("host", ["h1", "h2", "h3", "h3,h4", "h4", "h5", "h10", "h6", "ax", "bx", "cx",
                                  "10.0.0.1", "H1", "other"])
def test_a_narrowed_lookup_answers_as_paramiko_walking_every_block(host: str) -> None:
    """Skipping the Host blocks of plain names that are not the host changes no answer: the same
    keys, values and IdentityFile order as paramiko's own lookup over the whole config."""
    text = NARROWED % getpass.getuser()
    parsed = ssh.paramiko.SSHConfig.from_text(text)
    lookups = ssh.SSHConfigLookups(ssh.paramiko.SSHConfig.from_text(text), remember=True)
    assert lookups._index is not None
    assert lookups.lookup(host) == dict(parsed.lookup(host))


def test_only_blocks_that_can_match_are_walked() -> None:
    text = "".join("Host m%d\n  HostName 10.0.1.%d\n" % (i, i) for i in range(200)) + "Host *\n  Port 2200\n"
    lookups = ssh.SSHConfigLookups(ssh.paramiko.SSHConfig.from_text(text), remember=True)
    view = lookups._for_host("m7")
    assert [block.get("host") for block in view._config] == [["*"], ["m7"], ["*"]]
    assert lookups.lookup("m7")["hostname"] == "10.0.1.7" and lookups.lookup("m7")["port"] == "2200"


def test_a_canonicalizing_config_is_walked_whole() -> None:
    """With CanonicalizeHostname, paramiko's second pass matches the canonical name, which a block
    of plain names may be: nothing is skipped."""
    text = ("Host m1\n  CanonicalizeHostname yes\n  CanonicalDomains example.invalid\n"
            "Host m1.example.invalid\n  Port 2\n")
    lookups = ssh.SSHConfigLookups(ssh.paramiko.SSHConfig.from_text(text), remember=True)
    assert lookups._index is None and lookups._for_host("m1") is lookups._parsed


def test_parallel_first_loads_parse_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The masters of a fan-out load the config at the same moment: one parse serves them all."""
    import threading
    path = tmp_path / "config"
    path.write_text(CONFIG)
    os.utime(path, (1, 1))                  # not modified just now: its text may be remembered
    monkeypatch.setattr(ssh, "_CONFIGS", {})
    parses: list = []
    real = ssh.paramiko.SSHConfig.from_text
    start = threading.Barrier(8)

    def slow_parse(text: str) -> Any:
        parses.append(text)
        time.sleep(0.05)                    # a parse long enough for every thread to ask meanwhile
        return real(text)

    monkeypatch.setattr(ssh.paramiko.SSHConfig, "from_text", staticmethod(slow_parse))
    seen: list = []

    def load() -> None:
        start.wait()
        seen.append(ssh.load_ssh_config(str(path)))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(parses) == 1 and len(seen) == 8 and all(config is seen[0] for config in seen)

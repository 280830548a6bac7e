"""Issue #4, persistent connections (``--persist``): the keeper holds SSH connections between runs.

Real sshd on 127.0.0.1, the real CLI as a subprocess, a real keeper process. What must hold:
a later run reuses the connection (sshd sees no new login) and imports no paramiko; an agent
serves one run at a time and is handed on only when its run left it idle, reset (the node lock
still excludes, a killed run frees it); a changed
known_hosts is re-checked; the keeper dir must be private; the keeper ends by itself, on
``keeper stop``, and a keeper killed hard is replaced.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.host import keeper
from cpctl.host.base import LockBusy
from cpctl.host.sshconfig import SSHOptions
from tests.coreutil import NODE, NodeDirs, check_result, snapshot
from tests.remoteutil import CLI, REPO, Cli, accepted, clean_env, wait_until
from tests.sshfixture import SSHServer, free_port, keygen, locked_key

pytestmark = pytest.mark.timeout(120)

# Runs the CLI like ``python -m cpctl`` and reports whether paramiko got imported.
NO_PARAMIKO = """import runpy, sys
sys.argv = ["cpctl"] + sys.argv[1:]
try:
    runpy.run_module("cpctl", run_name="__main__")
except SystemExit as exc:
    code = exc.code
sys.stderr.write("paramiko imported: %s\\n" % ("paramiko" in sys.modules))
sys.exit(code)
"""


class Rig:
    def __init__(self, sshd: SSHServer, tmp: str, directory: str) -> None:
        self.sshd = sshd
        self.node = NodeDirs(os.path.join(tmp, "node"))
        self.env = clean_env(os.path.join(tmp, "home"), CPCTL_MANIFESTS_DIR=self.node.manifests,
                             CPCTL_STATE_DIR=self.node.state, CPCTL_NODE_NAME=NODE, CPCTL_PROBE="none",
                             CPCTL_KEEPER_DIR=directory)
        self.cli = Cli(sshd.ssh_config, sshd.known_hosts, self.env)
        self.directory = directory

    def persisted(self, *args: str, **kw: Any) -> Any:
        return self.cli.json("--persist", "60s", "-H", "master", *args, **kw)

    def keeper_status(self) -> dict:
        return self.cli.json("keeper", "status", ssh=False)

    def snap(self) -> dict:
        return snapshot(self.node.manifests, self.node.state)


@pytest.fixture
def rig(sshd: SSHServer, tmp_path: Any, keeper_dir: str) -> Rig:
    return Rig(sshd, str(tmp_path), keeper_dir)


def _rows(doc: dict) -> list:
    return [(r["component"], r["state"], r["file"]) for r in doc["hosts"][0]["data"]["components"]]


def test_second_run_reuses_the_connection_without_paramiko(rig: Rig) -> None:
    logins = accepted(rig.sshd)
    first = rig.persisted("status")
    assert accepted(rig.sshd) == logins + 1
    assert first["recap"]["master"]["ok"] == 1 and len(_rows(first)) == 4
    # Once the run is over the keeper starts the next run's agent.
    ready = wait_until(lambda: rig.keeper_status()["connections"][0]["agent_ready"], 30, "a spare agent")
    assert ready

    argv = [sys.executable, "-c", NO_PARAMIKO] + rig.cli.argv("--persist", "60s", "-o", "json", "-H", "master",
                                                              "status")[len(CLI):]
    proc = subprocess.run(argv, env=rig.env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "paramiko imported: False\n"
    assert _rows(json.loads(proc.stdout)) == _rows(first)
    assert accepted(rig.sshd) == logins + 1                  # no new SSH login: the kept connection

    status = rig.keeper_status()
    assert status["running"] is True and status["runs_attached"] == 0
    (conn,) = status["connections"]
    assert (conn["target"], conn["connected"], conn["connects"], conn["sessions"]) == ("master", True, 1, 2)
    assert (conn["user"], conn["hostname"], conn["port"]) == ("root", rig.sshd.address, rig.sshd.port)
    text = rig.cli.run("keeper", "status", ssh=False).stdout
    assert "keeper pid %d" % status["pid"] in text and "connects=1 runs=2" in text

    # With --persist 0 a run connects by itself and leaves the keeper alone.
    rig.cli.json("--persist", "0", "-H", "master", "status")
    assert accepted(rig.sshd) == logins + 2
    assert rig.keeper_status()["connections"][0]["sessions"] == 2


def _by_default(rig: Rig) -> Cli:
    """The rig's CLI with neither --persist nor CPCTL_PERSIST: as an operator runs it."""
    env = dict(rig.env)
    del env["CPCTL_PERSIST"]
    return Cli(rig.sshd.ssh_config, rig.sshd.known_hosts, env)


def test_the_second_command_is_warm_without_a_flag(rig: Rig) -> None:
    """Issue 38, persistent by default (ControlPersist's way): the first remote command starts
    a keeper for the default idle time, in a dir and on a socket private to this user, and the
    next command within it goes through that keeper: the same SSH connection (no new login) and
    no paramiko in the second process."""
    cli = _by_default(rig)
    assert keeper.request("status", rig.directory) is None
    logins = accepted(rig.sshd)
    first = cli.json("-H", "master", "status")
    assert first["recap"]["master"]["ok"] == 1 and accepted(rig.sshd) == logins + 1
    started = keeper.request("status", rig.directory)
    assert started is not None, "the first remote command started no keeper"
    assert started["persist"] == keeper.DEFAULT_PERSIST == 60.0
    assert [(c["connects"], c["sessions"]) for c in started["connections"]] == [(1, 1)]

    directory = os.lstat(rig.directory)
    assert stat.S_ISDIR(directory.st_mode) and directory.st_uid == os.geteuid()
    assert stat.S_IMODE(directory.st_mode) == 0o700
    sock = os.lstat(os.path.join(rig.directory, keeper.SOCKET_NAME))
    assert stat.S_ISSOCK(sock.st_mode) and sock.st_uid == os.geteuid() and stat.S_IMODE(sock.st_mode) == 0o600

    argv = [sys.executable, "-c", NO_PARAMIKO] + cli.argv("-o", "json", "-H", "master", "status")[len(CLI):]
    proc = subprocess.run(argv, env=cli.env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "paramiko imported: False\n"
    assert _rows(json.loads(proc.stdout)) == _rows(first)
    assert accepted(rig.sshd) == logins + 1                  # no new login: the kept connection
    warm = keeper.request("status", rig.directory)
    assert warm is not None and warm["pid"] == started["pid"]
    assert [(c["connects"], c["sessions"]) for c in warm["connections"]] == [(1, 2)]


@pytest.mark.parametrize("how", ["--persist 0", "--persist off", "CPCTL_PERSIST=0"])
def test_persist_0_starts_no_keeper(rig: Rig, how: str) -> None:
    cli = _by_default(rig)
    if how.startswith("CPCTL_PERSIST="):
        cli.env["CPCTL_PERSIST"] = how.partition("=")[2]
        args: tuple = ()
    else:
        args = tuple(how.split())
    logins = accepted(rig.sshd)
    assert cli.json(*args, "-H", "master", "status")["recap"]["master"]["ok"] == 1
    assert accepted(rig.sshd) == logins + 1
    assert keeper.request("status", rig.directory) is None
    assert not os.path.exists(os.path.join(rig.directory, keeper.SOCKET_NAME))


def test_a_keeper_dir_not_private_is_not_used_by_default(rig: Rig) -> None:
    """Without --persist, a keeper dir that is not ours alone is not used (never a socket in it)
    and the command still runs, directly, saying once why its connections are not kept; with
    --persist given, test_keeper_dir_must_be_private: refused, exit 7."""
    bad = tempfile.mkdtemp(prefix="cpk-open-")
    try:
        os.chmod(bad, 0o755)
        cli = _by_default(rig)
        cli.env[keeper.ENV_DIR] = bad
        proc = cli.run("-H", "master", "status")
        assert proc.stderr == ("cpctl: connections are not kept after this run: refusing keeper dir %s: mode 0755, "
                               "must be 0700 (--persist 0 turns keeping off without this note)\n" % bad)
        assert "kube-scheduler" in proc.stdout
        assert os.listdir(bad) == []
    finally:
        shutil.rmtree(bad, ignore_errors=True)


def test_another_users_runtime_dir_is_not_shared(tmp_path: Any, monkeypatch: Any) -> None:
    """$XDG_RUNTIME_DIR is used only when it is ours (sudo may keep another user's): else the
    keeper lives in /tmp/cpctl-UID, never beside another user's keeper."""
    monkeypatch.delenv(keeper.ENV_DIR, raising=False)
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert keeper.keeper_dir() == str(runtime / "cpctl")
    os.chown(str(runtime), 65534, 65534)
    assert keeper.keeper_dir() == os.path.join(tempfile.gettempdir(), "cpctl-%d" % os.geteuid())


def test_stop_and_start_through_the_keeper(rig: Rig) -> None:
    node = rig.node
    path = os.path.join(node.manifests, "kube-scheduler.yaml")
    before = open(path, "rb").read()
    stop = rig.persisted("stop", "scheduler", "--reason", "kept connection")
    assert stop["recap"]["master"]["changed"] == 1
    parked = os.path.join(node.parked, "kube-scheduler.yaml")
    assert open(parked, "rb").read() == before and not os.path.exists(path)
    assert os.stat(parked).st_mode & 0o777 == 0o600            # the mode travels with the file
    assert rig.persisted("stop", "scheduler")["recap"]["master"]["changed"] == 0      # idempotent
    rig.persisted("start", "scheduler")
    assert open(path, "rb").read() == before and not os.path.exists(parked)
    history = [json.loads(line) for line in open(node.history_file)]
    assert [h["action"] for h in history] == ["stop", "start"]
    assert history[0]["reason"] == "kept connection"
    assert rig.keeper_status()["connections"][0]["connects"] == 1


def test_each_run_has_its_own_agent_and_the_lock_still_excludes(sshd: SSHServer, keeper_dir: str,
                                                                 tmp_path: Any) -> None:
    options = sshd.options(persist=60.0)
    lock = str(tmp_path / "lock")
    first = keeper.attach(sshd.target(), options)
    second = keeper.attach(sshd.target(), options)
    try:
        assert first.info()["pid"] != second.info()["pid"]
        first.lock(lock, 0, "first run")
        with pytest.raises(LockBusy):
            second.lock(lock, 0, "second run")
        first.close()                               # the run is over: its lock goes with it
        second.lock(lock, 10, "second run")
    finally:
        first.close()
        second.close()
    assert keeper.request("status")["connections"][0]["connects"] == 1


def _agent_after(sshd: SSHServer, options: Any, lock: str) -> tuple:
    """(agent pid, whether ``lock`` is free at once) as the next run sees them."""
    host = keeper.attach(sshd.target(), options)
    try:
        try:
            host.lock(lock, 0, "next run")
            free = True
        except LockBusy:
            free = False
        return host.info()["pid"], free
    finally:
        host.close()


def test_an_idle_agent_is_reset_and_serves_the_next_run(sshd: SSHServer, keeper_dir: str, tmp_path: Any) -> None:
    """A run that hung up with every request answered leaves its agent to the next run, with
    nothing of its own left: its lock is free at once, as after an exit."""
    options = sshd.options(persist=60.0)
    lock = str(tmp_path / "lock")
    run = keeper.attach(sshd.target(), options)
    pid = run.info()["pid"]
    run.lock(lock, 0, "first run")
    run.close()                                         # no unlock: the run just ends
    wait_until(lambda: keeper.request("status")["connections"][0]["agent_ready"], 10, "the agent back")
    assert _agent_after(sshd, options, lock) == (pid, True)
    wait_until(lambda: keeper.request("status")["connections"][0]["agent_ready"], 10, "the agent back")
    conn = keeper.request("status")["connections"][0]
    assert (conn["connects"], conn["sessions"]) == (1, 2)


def test_a_kept_agent_is_not_sent_the_modules_it_holds(rig: Rig, tmp_path: Any) -> None:
    """Issue 47, "cached in the keeper by digest": a change's modules (``AGENT_NEEDS``) go with its first
    transaction request to a new agent; the keeper's next run over that agent, told by the agent's
    ``reset`` which programs it holds (their sha256), sends none of them (counted: bytes, not time)."""
    trace = str(tmp_path / "trips.json")
    cli = Cli(rig.sshd.ssh_config, rig.sshd.known_hosts, dict(rig.env, CPCTL_TRACE_ROUNDTRIPS=trace))

    def shipped(*args: str) -> int:
        cli.json("--persist", "60s", "-H", "master", *args)
        with open(trace) as handle:
            report = json.load(handle)
        os.unlink(trace)
        assert report["ops"].get("transaction"), report["ops"]        # the change went as one transaction
        wait_until(lambda: rig.keeper_status()["connections"][0]["agent_ready"], 10, "the agent back")
        return int(report["load_bytes"])

    assert shipped("stop", "scheduler") > 0                    # a new agent: the change's modules went
    assert shipped("start", "scheduler") == 0                  # the same agent, kept: nothing sent again
    assert shipped("stop", "scheduler") == 0
    conn = rig.keeper_status()["connections"][0]
    assert (conn["connects"], conn["sessions"]) == (1, 3)      # one agent served all three


def test_a_kept_hello_names_only_what_the_agent_reported_in_shape() -> None:
    """The ready line replayed to the next run carries the digests the agent's ``reset`` reported (from
    the master: checked), else stays as it was; a run sends a program again unless its digest is named."""
    from cpctl.host import agent as host_module
    hello = b'{"ready": true, "pid": 7}\n'
    digest = host_module.load_digest("transaction")
    kept = host_module.kept_hello(hello, b'{"ok": true, "result": {"pid": 7, "loaded": ["%s"]}}\n' % digest.encode())
    assert host_module.hello_loaded(kept) == {digest} and kept.startswith(b'{"ready": true')
    for bad in (b'{"ok": true, "result": {"pid": 7, "loaded": ["%s"]}}\n' % digest.upper().encode(),
                b'{"ok": true, "result": {"pid": 7, "loaded": "%s"}}\n' % digest.encode(),
                b'{"ok": true, "result": {"pid": 7, "loaded": [%s]}}\n' % b", ".join([b'"%s"' % digest.encode()] * 5),
                b'{"ok": true, "result": {"pid": 7}}\n', b"not json\n", b'["ok"]\n'):
        assert host_module.kept_hello(hello, bad) == hello, bad
    assert host_module.hello_loaded(hello) == set()
    assert host_module.hello_loaded(b'{"ready": true, "loaded": 1}') == set()


@pytest.mark.parametrize("left", ["mid-request", "cut-line"])
def test_a_run_gone_mid_request_takes_its_agent_along(sshd: SSHServer, keeper_dir: str, tmp_path: Any,
                                                        left: str) -> None:
    """The run hangs up while its agent is busy (or with half a request sent): that agent is
    never handed on; it finishes, reads EOF, exits, and its lock is released then."""
    options = sshd.options(persist=60.0)
    lock = str(tmp_path / "lock")
    run = keeper.attach(sshd.target(), options)
    pid = run.info()["pid"]
    run.lock(lock, 0, "first run")
    if left == "mid-request":
        run._writer.write(b'{"op": "run", "args": {"argv": ["sleep", "2"], "timeout": 10}}\n')
    else:
        run._writer.write(b'{"op": "info", "args"')
    run._writer.flush()
    run.close()
    next_pid, free = _agent_after(sshd, options, lock)
    assert next_pid != pid
    assert free is (left == "cut-line")             # the busy one holds the lock until its sleep ends
    host = keeper.attach(sshd.target(), options)
    try:
        host.lock(lock, 10, "later run")
    finally:
        host.close()


KILLED_RUN = """import sys, time
from cpctl.host import keeper
from cpctl.host.sshconfig import SSHOptions
host = keeper.attach(sys.argv[1], SSHOptions(**__import__("json").loads(sys.argv[2])))
host.lock(sys.argv[3], 0, "doomed run")
print("locked", flush=True)
time.sleep(120)
"""


def test_wired_options_carry_no_secret_and_rebuild_the_options() -> None:
    options = SSHOptions(ssh_config="/x/config", identity_files=["/k1"], known_hosts=["/kh"],
                         prompt=lambda text, secret=True: "pw", become_password="s3cret", keyring=object(),
                         persist=30.0, connect_timeout=3.0, proxy_jump="bastion")
    wired = keeper.wire_options(options)
    assert not set(keeper.NOT_WIRED) & set(wired)
    assert "s3cret" not in json.dumps(wired)             # JSON-able, and no password in it
    assert SSHOptions(**wired) == dataclasses.replace(options, persist=0.0)
    wired["identity_files"].append("/k2")                # a copy: the run's options stay as they were
    assert options.identity_files == ["/k1"]


def test_a_killed_run_frees_the_lock(sshd: SSHServer, keeper_dir: str, tmp_path: Any) -> None:
    lock = str(tmp_path / "lock")
    options = sshd.options(persist=60.0)
    wired = dict(keeper.wire_options(options), persist=60.0)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, sshd.target(), json.dumps(wired), lock],
                            stdout=subprocess.PIPE, cwd=REPO, env=dict(os.environ))
    try:
        assert proc.stdout.readline() == b"locked\n"
        other = keeper.attach(sshd.target(), options)
        with pytest.raises(LockBusy):
            other.lock(lock, 0, "next run")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        other.lock(lock, 10, "next run")             # freed within the timeout, no manual cleanup
        other.close()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_changed_known_hosts_is_checked_again(rig: Rig, tmp_path: Any) -> None:
    known = str(tmp_path / "known_hosts")
    shutil.copy(rig.sshd.known_hosts, known)
    logins = accepted(rig.sshd)
    rig.cli.json("--persist", "60s", "-H", "master", "status", known_hosts=known)
    assert accepted(rig.sshd) == logins + 1
    impostor = keygen(str(tmp_path / "impostor"))
    with open(known, "w") as handle:
        handle.write("[%s]:%d %s\n" % (rig.sshd.address, rig.sshd.port, " ".join(impostor.split()[:2])))
    before = rig.snap()
    proc = rig.cli.run("--persist", "60s", "-H", "master", "stop", "scheduler", known_hosts=known, rc=8)
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in proc.stderr
    assert rig.snap() == before and accepted(rig.sshd) == logins + 1
    shutil.copy(rig.sshd.known_hosts, known)
    rig.cli.json("--persist", "60s", "-H", "master", "status", known_hosts=known)
    assert accepted(rig.sshd) == logins + 2          # a new connection, checked against the new file


def _age(*paths: str, seconds: float = 3600) -> None:
    """Back-date mtimes: files the keeper may trust by their stat (older than sshconfig.RACY)."""
    when = time.time() - seconds
    for path in paths:
        os.utime(path, (when, when))


def test_changed_ssh_config_is_read_again(rig: Rig, tmp_path: Any) -> None:
    """The keeper trusts an old ssh_config by its stat, so it must see every change through it:
    a file added to an Include dir, and a same-size rewrite of the main file."""
    included = tmp_path / "conf.d"
    included.mkdir()
    config = str(tmp_path / "ssh_config")
    with open(rig.sshd.ssh_config) as handle:
        text = "# cpctl test config, revision 1\nInclude %s/*.conf\n" % included + handle.read()
    with open(config, "w") as handle:
        handle.write(text)
    _age(config, str(included))
    cli = Cli(config, rig.sshd.known_hosts, rig.env)
    logins = accepted(rig.sshd)
    for _ in range(2):
        cli.json("--persist", "60s", "-H", "master", "status")
    assert accepted(rig.sshd) == logins + 1              # the second run reused the connection

    with open(included / "extra.conf", "w") as handle:
        handle.write("Host nothing-here\n  Port 2222\n")
    _age(str(included / "extra.conf"), seconds=1800)
    _age(str(included), seconds=1800)
    cli.json("--persist", "60s", "-H", "master", "status")
    cli.json("--persist", "60s", "-H", "master", "status")
    assert accepted(rig.sshd) == logins + 2              # one new connection, then reused

    with open(config, "w") as handle:                    # same size, in place: only mtime tells
        handle.write(text.replace("revision 1", "revision 2"))
    _age(config, seconds=900)
    cli.json("--persist", "60s", "-H", "master", "status")
    assert accepted(rig.sshd) == logins + 3


def test_config_digest_is_cached_only_when_a_stat_can_vouch_for_it(tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from cpctl.host import keeperd
    reads: list = []
    real = keeperd.read_config_text
    monkeypatch.setattr(keeperd, "read_config_text", lambda *a, **kw: reads.append(a[0]) or real(*a, **kw))
    config = tmp_path / "config"
    config.write_text("Host a\n  Port 1\n")
    digests = keeperd.ConfigDigests()
    first = digests.digest(str(config))
    assert digests.digest(str(config)) == first and len(reads) == 2     # just written: read each time
    _age(str(config))
    assert digests.digest(str(config)) == first and len(reads) == 3
    assert digests.digest(str(config)) == first and len(reads) == 3     # old enough: trusted by its stat
    config.write_text("Host a\n  Port 2\n")
    _age(str(config), seconds=60)
    assert digests.digest(str(config)) not in (first, "?") and len(reads) == 4
    config.unlink()
    assert digests.digest(str(config)) == "?"
    wild = tmp_path / "wild"
    (tmp_path / "d1").mkdir()
    wild.write_text("Include %s/*/x.conf\n" % tmp_path)
    _age(str(wild), str(tmp_path / "d1"), str(tmp_path))
    before = len(reads)
    digests.digest(str(wild))
    digests.digest(str(wild))
    assert len(reads) == before + 2                      # a wildcard dir cannot be watched by stat


@pytest.mark.parametrize("problem", ["mode", "symlink", "owner"])
def test_keeper_dir_must_be_private(rig: Rig, tmp_path: Any, problem: str) -> None:
    bad = tempfile.mkdtemp(prefix="cpk-bad-")
    try:
        if problem == "mode":
            os.chmod(bad, 0o755)
            want = "mode 0755, must be 0700"
        elif problem == "owner":
            os.chown(bad, 65534, 65534)
            want = "owned by uid 65534"
        else:
            target, bad = bad, bad + "-link"
            os.symlink(target, bad)
            want = "not a directory (a symlink?)"
        rig.env[keeper.ENV_DIR] = bad
        before = rig.snap()
        proc = rig.cli.run("--persist", "60s", "-H", "master", "stop", "scheduler", rc=7)
        assert "refusing keeper dir %s: %s" % (bad, want) in proc.stderr
        assert rig.snap() == before
        assert not os.path.exists(os.path.join(bad, keeper.SOCKET_NAME))
        rig.cli.run("keeper", "status", ssh=False, rc=7)
    finally:
        if os.path.islink(bad):
            os.unlink(bad)
            bad = bad[:-len("-link")]
        shutil.rmtree(bad, ignore_errors=True)


def test_keeper_ends_when_idle_and_on_stop(rig: Rig) -> None:
    assert rig.cli.run("keeper", "status", ssh=False).stdout.startswith("no keeper running")
    rig.cli.json("--persist", "4s", "-H", "master", "status")
    pid = rig.keeper_status()["pid"]
    wait_until(lambda: not rig.keeper_status()["running"], 30, "the idle keeper to exit")
    assert not os.path.exists(os.path.join(rig.directory, keeper.SOCKET_NAME))
    wait_until(lambda: not os.path.exists("/proc/%d" % pid) or _zombie(pid), 10, "keeper pid gone")

    rig.persisted("status")
    stopped = rig.cli.json("keeper", "stop", ssh=False)
    assert stopped["stopped"] is True and stopped["connections"] == 1
    assert rig.cli.json("keeper", "stop", ssh=False) == {"running": False, "stopped": False, "pid": None,
                                                         "connections": 0}


def _zombie(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_keeper_killed_hard_is_replaced(rig: Rig) -> None:
    rig.persisted("status")
    old = rig.keeper_status()["pid"]
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: _zombie(old), 10, "the keeper to die")
    assert os.path.exists(os.path.join(rig.directory, keeper.SOCKET_NAME))      # stale socket left
    doc = rig.persisted("status")
    assert doc["recap"]["master"]["ok"] == 1
    assert rig.keeper_status()["pid"] != old


def test_unreachable_host_through_the_keeper(rig: Rig) -> None:
    target = "root@127.0.0.1:%d" % free_port("127.0.0.1")
    direct = rig.cli.run("-H", target, "status", rc=8)
    kept = rig.cli.run("--persist", "60s", "-H", target, "status", rc=8)
    assert kept.stderr == direct.stderr and "connection refused" in kept.stderr


def test_bad_persist_value_is_a_usage_error(rig: Rig) -> None:
    before = rig.snap()
    proc = rig.cli.run("--persist", "soon", "-H", "master", "stop", "scheduler", rc=2)
    assert "--persist 'soon': not a duration" in proc.stderr
    assert rig.snap() == before
    assert not os.path.exists(os.path.join(rig.directory, keeper.SOCKET_NAME))
    check_result(subprocess.run(CLI + ["--persist", "0", "--version"], capture_output=True, text=True), 0)


def test_passphrase_prompt_is_relayed_once(sshd: SSHServer, ssh_session: Any, keeper_dir: str,
                                            tmp_path: Any) -> None:
    key, prompt, calls = locked_key(ssh_session, str(tmp_path))
    options = sshd.options(identity_files=[key], prompt=prompt, persist=60.0)
    for _ in range(2):
        host = keeper.attach(sshd.target(), options)
        assert host.info()["euid"] == 0
        host.close()
    assert calls == [("Enter passphrase for key '%s': " % key, True)]


def test_prompt_refusal_travels_back(sshd: SSHServer, ssh_session: Any, keeper_dir: str, tmp_path: Any) -> None:
    key = str(tmp_path / "locked_key")
    ssh_session.authorize("root", keygen(key, passphrase="pw"))

    def no_terminal(text: str, secret: bool = True) -> str:
        raise CpctlError("%s needed but stdin is not a terminal" % text.strip(), ExitCode.USAGE)

    with pytest.raises(CpctlError) as err:
        keeper.attach(sshd.target(), sshd.options(identity_files=[key], prompt=no_terminal, persist=60.0))
    assert err.value.code == ExitCode.USAGE and "not a terminal" in err.value.message
    # the keeper detaches the run right after it sent the refusal (a status asked at that very
    # moment may still count it): detached, and answering, within 5 s
    started = time.monotonic()
    while keeper.request("status")["runs_attached"] != 0:
        assert time.monotonic() - started < 5, "the refused run is still attached after 5 s"
        time.sleep(0.05)


def _children(pid: int) -> list:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def test_a_dead_kept_connection_is_replaced(rig: Rig) -> None:
    """The master side of the kept connection dies (as when a master reboots): the next run is
    served on a new connection instead of failing on the old one."""
    rig.persisted("status")
    wait_until(lambda: rig.keeper_status()["connections"][0]["agent_ready"], 30, "a spare agent")
    sessions = _children(rig.sshd.proc.pid)
    assert sessions, "the kept connection has an sshd process"
    for pid in sessions:
        os.kill(pid, signal.SIGKILL)
    doc = rig.persisted("status")
    assert doc["recap"]["master"]["ok"] == 1 and len(_rows(doc)) == 4
    conn = rig.keeper_status()["connections"][0]
    assert (conn["connects"], conn["connected"]) == (2, True)


# --- a keeper at the end of its persist time ------------------------------------------------

def test_a_request_accepted_at_the_deadline_is_answered(keeper_dir: str) -> None:
    """The keeper does not exit with an accepted connection unanswered (a run attaching right
    at the end of the persist time would be hung up on)."""
    sock = keeper.connect(0.5, keeper_dir)       # starts a keeper that persists 0.5 s
    with sock, sock.makefile("rb") as reader, sock.makefile("wb") as writer:
        time.sleep(2.0)                          # well past its deadline, this request pending
        keeper.send_message(writer, {"op": "status"})
        answer = keeper.read_message(reader)
    assert answer is not None and answer["ok"], answer
    assert keeper.wait_gone(keeper_dir, timeout=10)   # and it still ends once idle


class _ExitingKeeper:
    """A socket where a keeper would listen that hangs up on its first ``hang_ups`` connections
    without a word (what an exiting keeper does), then answers like a keeper (or is gone)."""

    def __init__(self, directory: str, hang_ups: int, answer: Optional[bytes]) -> None:
        import socket
        import threading
        keeper.ensure_private_dir(directory)
        self.path = os.path.join(directory, keeper.SOCKET_NAME)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(8)
        self.hang_ups, self.answer, self.served, self.conns = hang_ups, answer, [], []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            line = conn.makefile("rb").readline()
            if self.hang_ups > 0:
                self.hang_ups -= 1
                if self.hang_ups == 0 and self.answer is None:   # gone before it hangs up, so the
                    self.close()                                 # client's next dial finds no keeper
                conn.close()
                continue
            self.served.append(json.loads(line))
            conn.sendall(self.answer or b"")
            self.conns.append(conn)                                # held open, like a relay

    def close(self) -> None:
        """Stop listening and remove the socket; the serving thread may get there first."""
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def test_status_asks_again_when_an_exiting_keeper_hangs_up(keeper_dir: str) -> None:
    gone = _ExitingKeeper(keeper_dir, hang_ups=1, answer=None)
    assert keeper.request("status", keeper_dir) is None              # it was exiting: none runs
    gone.close()
    answering = _ExitingKeeper(keeper_dir, hang_ups=1, answer=b'{"ok": true, "keeper": {"pid": 7}}\n')
    assert keeper.request("status", keeper_dir) == {"pid": 7}
    answering.close()
    broken = _ExitingKeeper(keeper_dir, hang_ups=2, answer=b"")
    with pytest.raises(CpctlError, match="did not answer 'status'"):
        keeper.request("status", keeper_dir)
    broken.close()


def test_attach_asks_again_when_an_exiting_keeper_hangs_up(keeper_dir: str) -> None:
    fake = _ExitingKeeper(keeper_dir, hang_ups=1, answer=b'{"ok": true}\n{"ready": 1}\n')
    host = keeper.attach("master", SSHOptions(persist=60.0))
    assert fake.served and fake.served[0]["op"] == "attach" and fake.served[0]["target"] == "master"
    host.close()
    fake.close()
    twice = _ExitingKeeper(keeper_dir, hang_ups=2, answer=b'{"ok": true}\n{"ready": 1}\n')
    with pytest.raises(CpctlError, match="the connection keeper hung up") as caught:
        keeper.attach("master", SSHOptions(persist=60.0))
    assert caught.value.code == ExitCode.UNREACHABLE
    twice.close()


def _keepers_in(directory: str) -> list:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    argv = handle.read().split(b"\0")
            except OSError:
                continue
            if b"cpctl.host.keeperd" in argv and directory.encode() in argv and not _zombie(int(entry)):
                pids.append(int(entry))
    return pids


def test_a_keeper_started_early_is_the_one_attached_to(keeper_dir: str) -> None:
    """``start_soon`` (the CLI calls it once the options are read) returns at once; the run's
    first ``connect`` waits on the start lock until that keeper listens, and dials it: one
    keeper, not two. With a keeper already there, it starts none."""
    started = time.monotonic()
    keeper.start_soon(30.0)
    assert time.monotonic() - started < 0.5 * keeper.START_TIMEOUT
    keeper.connect(30.0).close()
    assert len(_keepers_in(keeper_dir)) == 1
    pid = keeper.request("status", keeper_dir)["pid"]
    keeper.start_soon(30.0)
    keeper.connect(30.0).close()
    assert _keepers_in(keeper_dir) == [pid]


def test_relative_paths_mean_the_same_through_the_keeper(rig: Rig, tmp_path: Any) -> None:
    """Issue 47: ``--ssh-config ssh/config`` relative to where cpctl runs is the same file with the
    keeper (which runs in /) as with ``--persist 0``: the caller makes the paths absolute."""
    here = tmp_path / "work"
    (here / "ssh").mkdir(parents=True)
    shutil.copy(rig.sshd.ssh_config, here / "ssh" / "config")
    shutil.copy(rig.sshd.known_hosts, here / "ssh" / "known_hosts")
    for persist in ("0", "60s"):
        proc = subprocess.run(CLI + ["--ssh-config", "ssh/config", "--known-hosts", "ssh/known_hosts", "--persist",
                                     persist, "-o", "json", "-H", "master", "status"], env=rig.env, cwd=str(here),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, (persist, proc.stderr)
        assert json.loads(proc.stdout)["hosts"][0]["status"] == "ok", proc.stdout
    wired = keeper.wire_options(SSHOptions(ssh_config="ssh/config", identity_files=["id", "~/.ssh/id", "/k"],
                                           known_hosts=["kh"]))
    assert wired["ssh_config"] == os.path.abspath("ssh/config")
    assert wired["identity_files"] == [os.path.abspath("id"), "~/.ssh/id", "/k"]
    assert wired["known_hosts"] == [os.path.abspath("kh")]
    assert keeper.wire_options(SSHOptions(ssh_config="none"))["ssh_config"] == "none"

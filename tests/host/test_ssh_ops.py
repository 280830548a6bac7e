"""Every Host operation over a real SSH connection behaves like LocalHost."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

import pytest

from cpctl.host.base import Host, LockBusy
from cpctl.host.local import LocalHost
from tests.coreutil import echo_server
from tests.sshfixture import *  # noqa: F403
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(30)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def remote(sshd: SSHServer) -> Iterator[Host]:
    host = sshd.connect()
    yield host
    host.close()


def _scenario(host: Host, base: str) -> list:
    """A sequence of operations whose observable results must not depend on the Host kind."""
    out: list = []

    def step(fn: Any, *args: Any, **kw: Any) -> None:
        try:
            out.append(fn(*args, **kw))
        except OSError as exc:
            out.append(("OSError", type(exc).__name__, exc.errno))

    a, b, d = os.path.join(base, "a.yaml"), os.path.join(base, "b.yaml"), os.path.join(base, "sub", "dir")
    step(host.makedirs, d, 0o750)
    step(host.write_atomic, a, b"kind: Pod\n", 0o640)
    step(host.read_file, a, 100)
    step(host.read_file, a, 3)
    step(lambda: {k: v for k, v in host.lstat(a).items() if k not in ("mtime", "dev", "uid", "gid")})
    step(host.write_atomic, b, b"other")
    step(host.move, a, b)                        # no clobber: EEXIST
    step(host.unlink, b)
    step(host.move, a, b)
    step(host.lstat, a)
    step(host.chmod, b, 0o600)
    step(host.append, os.path.join(base, "h.log"), b"one\n")
    step(host.append, os.path.join(base, "h.log"), b"two\n")
    step(host.read_file, os.path.join(base, "h.log"), 100)
    os.symlink(b, os.path.join(base, "link"))
    step(host.read_file, os.path.join(base, "link"), 100)      # never through a symlink
    step(host.listdir, base)
    step(lambda: [(e["name"], e["kind"], e.get("data")) for e in host.scan_dir(base, 100)])
    step(host.unlink, os.path.join(base, "missing"))
    step(host.unlink, os.path.join(base, "missing"), missing_ok=False)
    step(lambda: sorted(os.listdir(base)))       # no temp files left behind
    return out


def test_ops_match_localhost(remote: Host, tmp_path) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "remote").mkdir()
    local = _scenario(LocalHost(), str(tmp_path / "local"))
    over_ssh = _scenario(remote, str(tmp_path / "remote"))
    assert over_ssh == local
    assert ("OSError", "FileExistsError", errno.EEXIST) in over_ssh
    assert ("OSError", "FileNotFoundError", errno.ENOENT) in over_ssh
    assert remote.is_remote and remote.name.startswith("root@127.0.0.1:")


def test_large_file_round_trip(remote: Host, tmp_path) -> None:
    data = os.urandom(3 << 20)
    path = str(tmp_path / "big")
    started = time.monotonic()
    remote.write_atomic(path, data)
    assert remote.read_file(path, len(data)) == data
    assert time.monotonic() - started < 10


def test_run_arguments_reach_program_verbatim(remote: Host, tmp_path) -> None:
    marker = tmp_path / "pwned"
    nasty = ["a b", "it's", '"dq"', "$(touch %s)" % marker, "`touch %s`" % marker, "; touch %s" % marker,
             "&& true", "| cat", "\\n", "*", "$HOME", "", "ünï", "-c"]
    code = "import sys, json; print(json.dumps(sys.argv[1:]))"
    res = remote.run(["python3", "-c", code] + nasty, timeout=10)
    assert res.rc == 0, res.stderr
    assert json.loads(res.stdout) == nasty
    assert not marker.exists()
    res = remote.run(["cat"], stdin=b"in\x00put", env={"CPCTL_T": "x y"})
    assert (res.rc, res.stdout) == (0, b"in\x00put")
    assert remote.run(["sh", "-c", "exit 3"]).rc == 3
    assert remote.run(["/nonexistent/prog"]).rc == 127


def test_python_option_is_not_a_shell(sshd: SSHServer, tmp_path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(Exception) as err:
        sshd.connect(python="python3; touch %s" % marker)
    assert "not found" in str(err.value) or "did not start" in str(err.value)
    assert not marker.exists()


def test_http_from_the_node(remote: Host) -> None:
    with echo_server() as url:
        res = remote.http("GET", url + "/healthz?verbose")
        assert (res["status"], res["body"]) == (200, b"ok /healthz?verbose")
        with pytest.raises(OSError):
            remote.http("GET", "http://127.0.0.1:%d/" % free_port("127.0.0.1"), timeout=2)  # noqa: F405


def test_info_is_the_remote_agent(remote: Host) -> None:
    info = remote.info()
    assert info["euid"] == 0 and info["pid"] != os.getpid()


def test_lock_held_by_remote_agent_and_released_on_close(sshd: SSHServer, tmp_path) -> None:
    path = str(tmp_path / "lock")
    first, second = sshd.connect(), sshd.connect()
    try:
        first.lock(path, 1, "first-run pid 1")
        with pytest.raises(LockBusy) as err:
            second.lock(path, 0.3, "second")
        assert err.value.holder == "first-run pid 1"
        first.close()
        second.lock(path, 5, "second")          # the agent saw EOF, exited, lock gone
    finally:
        first.close()
        second.close()


_CHILD = """
import json, sys, time
sys.path.insert(0, %(repo)r)
from cpctl.host.ssh import SSHOptions, connect
host = connect(%(target)r, SSHOptions(**json.loads(%(opts)r)))
host.lock(%(path)r, 5, "child")
print("locked", flush=True)
time.sleep(60)
"""


def test_lock_released_when_local_process_is_killed(sshd: SSHServer, tmp_path) -> None:
    path = str(tmp_path / "lock")
    opts = dict(ssh_config=sshd.ssh_config, identity_files=[sshd.client_key], known_hosts=[sshd.known_hosts],
                global_known_hosts=[], use_agent=False, look_for_keys=False)
    code = _CHILD % dict(repo=REPO, target=sshd.target(), opts=json.dumps(opts), path=path)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"locked\n"
        other = sshd.connect()
        with pytest.raises(LockBusy, match="child"):
            other.lock(path, 0.2, "other")
        child.send_signal(signal.SIGKILL)
        child.wait()
        other.lock(path, 10, "other")
        other.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_threads_share_one_connection(remote: Host) -> None:
    base = tempfile.mkdtemp()
    errors: list = []

    def work(i: int) -> None:
        try:
            path = os.path.join(base, "f%d" % i)
            remote.write_atomic(path, b"x" * i)
            assert remote.read_file(path, 100) == b"x" * i
        except Exception as exc:  # noqa: BLE001 (collected and asserted below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors

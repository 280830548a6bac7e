"""Helpers (no tests) for the issue #4 CLI-level remote tests: the real ``cpctl`` as a subprocess
with explicit ssh_config/known_hosts, a clean environment (own HOME, no ssh-agent), inventories
for the lab's masters, and checks on the master's filesystem (it is this machine)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from tests.coreutil import check_result

CLI = [sys.executable, "-m", "cpctl"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def clean_env(home: str, **extra: str) -> Dict[str, str]:
    """os.environ without cpctl/kube/ssh-agent settings, with an empty HOME (no ~/.ssh), and no
    kept connections (``CPCTL_PERSIST=0``: a keeper test passes its own value, or pops it)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CPCTL_") and k not in ("KUBECONFIG", "SSH_AUTH_SOCK", "SSH_AGENT_PID")}
    os.makedirs(home, exist_ok=True)
    env["HOME"] = home
    env["CPCTL_PERSIST"] = "0"
    env["CPCTL_CONFIRM_BOOT_DIR"] = os.environ["CPCTL_CONFIRM_BOOT_DIR"]      # tests/conftest.py: never /etc/cron.d
    env.update(extra)
    return env


class Cli:
    """``cpctl --ssh-config X --known-hosts Y ARGS`` (remote) or plain ``cpctl ARGS`` (local)."""

    def __init__(self, ssh_config: str, known_hosts: str, env: Dict[str, str]) -> None:
        self.ssh_config, self.known_hosts, self.env = ssh_config, known_hosts, env

    def argv(self, *args: str, ssh: bool = True, known_hosts: Optional[str] = None) -> List[str]:
        pre = ["--ssh-config", self.ssh_config, "--known-hosts", known_hosts or self.known_hosts] if ssh else []
        return CLI + pre + list(args)

    def run(self, *args: str, rc: Optional[int] = 0, ssh: bool = True, known_hosts: Optional[str] = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """Run and check: exit code, no traceback, exactly one ``cpctl:`` stderr line on failure."""
        proc = subprocess.run(self.argv(*args, ssh=ssh, known_hosts=known_hosts), env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        check_result(proc, rc)
        return proc

    def json(self, *args: str, rc: Optional[int] = 0, **kw: Any) -> Any:
        proc = self.run("-o", "json", *args, rc=rc, **kw)
        return json.loads(proc.stdout)

    def popen(self, *args: str, ssh: bool = True, **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args, ssh=ssh), env=self.env, cwd=REPO, stdin=subprocess.DEVNULL,
                                **kw)


def lab_vars(lab: Any, master: int) -> Dict[str, str]:
    """Inventory vars pointing at the lab's master ``master`` (remote paths = local paths here)."""
    env = lab.env_for(master)
    return {"manifests_dir": env["CPCTL_MANIFESTS_DIR"], "state_dir": env["CPCTL_STATE_DIR"],
            "node_name": env["CPCTL_NODE_NAME"], "kubeconfig": env["KUBECONFIG"], "crictl": env["CPCTL_CRICTL"],
            "node_root": env["CPCTL_NODE_ROOT"]}


def write_inventory(path: str, hosts: Dict[str, Dict[str, Any]]) -> str:
    """Ansible-form inventory; JSON is valid YAML, and keeps the host order."""
    with open(path, "w") as handle:
        json.dump({"all": {"hosts": hosts}}, handle, indent=2)
    return path


def lock_holders(path: str) -> List[int]:
    """Pids (other than ours) that have ``path`` open: an agent waiting for or holding the lock."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) == path:
                    pids.append(int(pid))
                    break
            except OSError:
                continue
    return pids


class HeldLock:
    """The node lock taken by the test itself (flock, like cpctl's agent), released on demand."""

    def __init__(self, state_dir: str) -> None:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        self.path = os.path.join(state_dir, "lock")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(self.fd, b"the test", 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = -1


def lock_is_free(state_dir: str, wait: float = 10.0) -> float:
    """Seconds until the node lock could be taken (and was released again); fails after ``wait``."""
    path = os.path.join(state_dir, "lock")
    started = time.monotonic()
    while True:
        if not os.path.exists(path):
            return time.monotonic() - started
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return time.monotonic() - started
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
        assert time.monotonic() - started < wait, "node lock still held %.0fs after the kill" % wait
        time.sleep(0.02)


def wait_until(pred: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("timed out waiting for %s" % what)


def accepted(server: Any) -> int:
    """SSH logins sshd accepted so far (LogLevel VERBOSE logs one line per authenticated connection)."""
    return server.log_text().count("Accepted publickey for ")


def read_history(state_dir: str) -> List[dict]:
    path = os.path.join(state_dir, "history.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]

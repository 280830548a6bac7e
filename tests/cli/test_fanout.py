"""Declared fan-out: every command says how it runs with -H/--inventory, and the CLI holds it to that.

* every command of the CLI (plugins included) has a declared mode, and every declared command exists;
* with ``-H`` pointing at a master that cannot be reached, every command fails (8 unreachable, or 2
  for a local-only command) and nothing on this machine is read or changed: the local Host is
  never used, the local manifests and state dirs stay as they were;
* the commands that ran locally before this rule existed (second scheduler, bind, pending) now run
  on the master, over a real sshd;
* the README's fan-out table is the registry's.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import click
import pytest

from cpctl.cli import main as cli
from cpctl.cli import registry
from cpctl.host.local import LocalHost
from tests.coreutil import MANIFESTS, NODE, NodeDirs, snapshot
from tests.remoteutil import REPO, Cli, clean_env

UNREACHABLE = "root@127.0.0.1:1"      # nothing listens on port 1: connection refused at once
ARGS: Dict[str, List[str]] = {        # the arguments each command needs to get as far as it can
    "status": [], "is-running": ["scheduler"], "history": [], "stop": ["scheduler"], "start": ["scheduler"],
    "restart": ["scheduler"],
    "pending": [], "bind": ["p1", "--node", "n1"], "baseline": [], "check": ["--fix"],
    "scheduler add": ["my-scheduler"], "scheduler remove": ["my-scheduler"], "scheduler list": [],
    "watch": [], "systemd install": ["--prefix", "/nonexistent/units"], "systemd show": [],
    "apply": ["scheduler", "-f", os.path.abspath(__file__)], "edit": ["scheduler", "--yes"],
    "flags": ["scheduler", "--set", "v=2"], "rollback": ["scheduler"], "revisions": ["scheduler"],
    "logs": ["scheduler"], "certs": [],
    "keeper status": [], "keeper stop": [], "completion": ["bash"],
    "confirm": ["scheduler"], "revert-unconfirmed": ["scheduler"], "version": [],
    "etcd status": [], "etcd defrag": ["--all"], "etcd alarm list": [], "etcd alarm disarm": [],
    "etcd recover-space": [], "etcd move-leader": [], "etcd snapshot save": [], "etcd snapshot list": [],
    "etcd snapshot schedule": ["--prefix", "/nonexistent/units"],
}


def leaf_paths() -> List[str]:
    """Every leaf command of the real CLI, as words after ``cpctl``."""
    ctx = click.Context(cli.main)
    paths = []

    def walk(command: click.Command, prefix: List[str]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, prefix + [name])
        else:
            paths.append(" ".join(prefix))
    walk(cli.main, [])
    return paths


def test_every_command_is_declared_and_every_declaration_exists() -> None:
    paths = leaf_paths()
    plugins = set(cli.plugin_entry_points())
    ours = [p for p in paths if p.split()[0] not in plugins]
    undeclared = [p for p in ours if registry.spec_for(p) is None or registry.spec_for(p).mode is None]
    assert not undeclared, "commands without a declared fan-out mode: %s" % undeclared
    declared = [p for p, spec in registry.COMMANDS.items() if spec.mode is not None]
    assert sorted(declared) == sorted(ours)
    assert "lab" in plugins and any(p.startswith("lab ") for p in paths), "the lab comes as a plugin"
    assert sorted(ARGS) == sorted(declared), "a new command needs its case in ARGS"


def _cases() -> List[Any]:
    plugins = [["lab", word] for word in ("up", "down", "env", "run", "demo")]
    return [path.split() + ARGS[path] for path in sorted(ARGS)] + plugins


@pytest.mark.parametrize("argv", _cases(), ids=lambda argv: " ".join(argv[:2]))
def test_unreachable_host_fails_and_nothing_local_is_touched(argv: List[str], node: NodeDirs, tmp_path: Any,
                                                             monkeypatch: Any, capsys: Any) -> None:
    node.run("stop", "etcd")                           # a used node: state dir, parked file, history
    before = snapshot(node.root)
    for key, value in node.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)

    def refuse(self: Any, op: str, **args: Any) -> Any:
        raise AssertionError("this machine was used (%s %s) although -H was given" % (op, args))
    monkeypatch.setattr(LocalHost, "_call", refuse)
    path = next((" ".join(argv[:n]) for n in (3, 2) if " ".join(argv[:n]) in registry.COMMANDS), argv[0])
    local_only = argv[0] == "lab" or registry.COMMANDS[path].mode is registry.Mode.LOCAL
    code = cli.run(["-H", UNREACHABLE, "--ssh-config", "/dev/null"] + argv)
    err = capsys.readouterr().err
    assert code == (2 if local_only else 8), err
    assert err.count("cpctl:") == 1 and "Traceback" not in err, err
    assert ("runs only on this machine" in err) if local_only else ("unreachable" in err)
    assert snapshot(node.root) == before


def test_one_master_commands_refuse_several_masters(capsys: Any) -> None:
    code = cli.run(["-H", "root@127.0.0.1:1,root@127.0.0.2:1", "--ssh-config", "/dev/null",
                    "bind", "p1", "--node", "n1"])
    assert code == 2 and "exactly one master" in capsys.readouterr().err


def test_readme_fanout_table_is_the_registry() -> None:
    with open(os.path.join(REPO, "README.md")) as handle:
        readme = handle.read()
    assert registry.markdown_table() in readme


# --- commands that used to run locally only, now over a real sshd ------------------------------

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]


def test_second_scheduler_over_ssh(sshd: Any, tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path / "master"), files={"kube-scheduler.yaml": SCHEDULER})
    env = clean_env(str(tmp_path / "home"), CPCTL_MANIFESTS_DIR=node.manifests, CPCTL_STATE_DIR=node.state,
                    CPCTL_NODE_NAME=NODE, CPCTL_PROBE="none")
    remote = Cli(sshd.ssh_config, sshd.known_hosts, env)
    added = remote.json("-H", "master", "scheduler", "add", "my-scheduler", "--no-wait")
    [host] = added["hosts"]
    assert host["status"] == "changed" and host["data"]["port"] >= 10260
    assert os.path.exists(os.path.join(node.manifests, "my-scheduler.yaml"))
    assert os.path.exists(os.path.join(node.root, "my-scheduler-config.yaml"))
    listed = remote.json("-H", "master", "scheduler", "list")["hosts"][0]["data"]["schedulers"]
    assert [row["name"] for row in listed] == ["my-scheduler"]
    remote.run("-H", "master", "scheduler", "remove", "my-scheduler", "--no-wait")
    assert not os.path.exists(os.path.join(node.manifests, "my-scheduler.yaml"))
    assert [r["action"] for r in node.history()] == ["scheduler-add", "scheduler-remove"]


def test_pending_and_bind_over_ssh_use_the_masters_kubeconfig(sshd: Any, lab: Any, tmp_path: Any) -> None:
    from tests.labfixture import kubectl, wait_for
    # A pod for a scheduler that does not run stays Pending: only a manual bind places it.
    kubectl(lab, "run", "p1", "--image=registry.k8s.io/pause:3.9",
            '--overrides={"apiVersion": "v1", "spec": {"schedulerName": "nobody"}}')
    env = clean_env(str(tmp_path / "home"), **lab.env_for(1))
    local_kubeconfig = env.pop("KUBECONFIG")
    remote = Cli(sshd.ssh_config, sshd.known_hosts, env)
    # No kubeconfig here: the master's (given as a path on the master) is used, through its agent.
    doc = remote.json("-H", "master", "--kubeconfig", local_kubeconfig, "pending")
    rows = doc["hosts"][0]["data"]["pending"]
    assert [(row["name"], row["scheduler"]) for row in rows] == [("p1", "nobody")]
    remote.run("-H", "master", "--kubeconfig", local_kubeconfig, "bind", "p1", "--node", lab.worker)
    wait_for(lambda: kubectl(lab, "get", "pod", "p1", "-o", "jsonpath={.spec.nodeName}").stdout == lab.worker)


def test_what_a_masters_session_says_reaches_stderr_bounded_and_escaped(capsys: Any) -> None:
    """Issue 49: a master's session says what its recovery put back or could not (``Node.log``: a
    ``--keep-in`` write its own revert left in conflict) on stderr, as a local run does, prefixed with
    the master's name. The line quotes what the master holds: control characters (ESC, a newline that
    would fake a second line, U+202E) escaped, and cut at HOST_NOTE_CHARS_MAX characters, said so."""
    from cpctl.cli.fanout import HOST_NOTE_CHARS_MAX, host_note
    log = host_note("m1")
    log("kube-system/kubeadm-config NOT put back: someone else changed \x1b[2Jx\ny\u202ez too")
    log("w" * (3 * HOST_NOTE_CHARS_MAX))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("cpctl: m1: kube-system/kubeadm-config NOT put back: someone else changed ")
    assert "\x1b" not in lines[0] and "\u202e" not in lines[0] and "\\x1b[2Jx\\x0ay\\u202ez" in lines[0], lines[0]
    assert lines[1].startswith("cpctl: m1: www") and lines[1].endswith(
        "[... %d more characters]" % (3 * HOST_NOTE_CHARS_MAX + 4 - HOST_NOTE_CHARS_MAX)), lines[1][-80:]
    assert len(lines[1]) < HOST_NOTE_CHARS_MAX + 60

"""The lab as a drill ground (issue 48), what needs no running lab: every ``cpctl lab`` command that
acts on a lab takes ``--dir``, a usage error names a command whose ``--help`` exists, and a dir
with no lab in it is one line naming the dir and the command that starts one, with the exit code
docs/lab.md gives (the lab's own commands 7, the stand-ins for real tools 1, a usage error 2).
tests/lab/test_lab_drill.py runs the same against running labs and a real sshd."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import click
import pytest

from cpctl_lab.cli import lab
from tests.remoteutil import clean_env

#: ``demo`` makes a fresh temp lab of its own; ``profiles`` lists what is built in.
NO_DIR = {"demo", "profiles"}


def cpctl(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpctl", *args], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def lab_commands(group: click.Group = lab, words: Tuple[str, ...] = ("lab",)
                 ) -> Iterator[Tuple[Tuple[str, ...], click.Command]]:
    """Every command under ``cpctl lab``, as its words and the click command."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield words + (name,), command
        if isinstance(command, click.Group):
            yield from lab_commands(command, words + (name,))


def test_every_lab_command_that_acts_on_a_lab_takes_dir() -> None:
    without = [" ".join(words) for words, command in lab_commands()
               if words[-1] not in NO_DIR and "--dir" not in {o for p in command.params for o in p.opts}]
    assert not without, "no --dir: %s" % without


def test_a_usage_error_of_every_lab_command_names_a_help_that_exists(tmp_path: Path) -> None:
    env = clean_env(str(tmp_path / "home"))
    for words, _command in lab_commands():
        proc = cpctl(env, *words, "--no-such-option")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (words, proc.stderr)
        (line,) = proc.stderr.splitlines()
        named = re.search(r"\(see: (cpctl [a-z -]+) --help\)$", line)
        assert named is not None and named.group(1) == " ".join(("cpctl",) + words), (words, line)
        assert cpctl(env, *named.group(1).split()[1:], "--help").returncode == 0, named.group(1)


def test_a_usage_error_of_every_cpctl_command_names_a_help_that_exists(capsys: pytest.CaptureFixture) -> None:
    """The same for cpctl's own commands and subcommands (cli/registry.py, ``etcd snapshot save``
    included): the ``(see: ... --help)`` of a usage error is that command's path, whose help answers -
    the issue's "see: cpctl etcdctl --help" named a group that does not exist."""
    from cpctl.cli import registry
    from cpctl.cli.main import run
    for path in registry.COMMANDS:
        capsys.readouterr()
        assert run(path.split() + ["--no-such-option"]) == 2, path
        (line,) = capsys.readouterr().err.splitlines()
        assert line.endswith("(see: cpctl %s --help)" % path), (path, line)
        assert run(path.split() + ["--help"]) == 0, path


def test_a_dir_with_no_lab_is_one_line_with_the_tables_exit_code(tmp_path: Path) -> None:
    env, missing = clean_env(str(tmp_path / "home")), str(tmp_path / "no-lab")
    line = "cpctl lab: no lab in %s (start one with `cpctl lab up --dir %s`)" % (missing, missing)
    cases: List[Tuple[List[str], int]] = [
        (["env", "--dir", missing], 7), (["inventory", "--dir", missing], 7),
        (["etcdctl", "--dir", missing, "member", "list"], 1), (["certs-renew", "--dir", missing], 1)]
    for args, code in cases:
        proc = cpctl(env, "lab", *args)
        assert proc.returncode == code and proc.stderr.splitlines() == [line], (args, proc.returncode, proc.stderr)
    down = cpctl(env, "lab", "down", "--dir", missing)      # nothing to stop is no error
    assert down.returncode == 0 and "nothing to stop" in down.stdout, down.stderr


def test_the_lab_inventory_is_one_cpctls_i_reads_without_a_hand_written_line(tmp_path: Path) -> None:
    """`cpctl lab inventory > lab.yaml` for a three-master lab: cpctl's own inventory loader (`-i`)
    takes it as written, every master with the paths `cpctl lab env --master N` exports, in the
    `masters` group; the ssh_config lines name each master."""
    from cpctl.fleet.inventory import load_inventory
    from cpctl_lab.inventory import ssh_config, yaml_inventory
    lab_dir = tmp_path / "a lab"
    info = {"dir": str(lab_dir), "kubeconfig": str(lab_dir / "admin.conf"), "masters": [
        {"name": "lab-master%d" % n, "manifests_dir": "%s/root-%d/etc/kubernetes/manifests" % (lab_dir, n),
         "state_dir": "%s/state-%d" % (lab_dir, n), "crictl": "%s/bin/crictl-%d" % (lab_dir, n),
         "kubelet_dir": "%s/kubelet-%d" % (lab_dir, n), "root_dir": "%s/root-%d" % (lab_dir, n)} for n in (1, 2, 3)]}
    path = tmp_path / "lab.yaml"
    path.write_text(yaml_inventory(info, True))
    inventory = load_inventory(str(path))
    hosts = inventory.select("masters")
    assert [h.name for h in hosts] == ["lab-master1", "lab-master2", "lab-master3"]
    second = hosts[1]
    assert second.text("manifests_dir") == "%s/root-2/etc/kubernetes/manifests" % lab_dir
    assert second.text("state_dir") == "%s/state-2" % lab_dir and second.text("node_name") == "lab-master2"
    assert second.text("node_root") == "%s/root-2" % lab_dir and second.text("crictl") == "%s/bin/crictl-2" % lab_dir
    lines = ssh_config(info, "127.0.0.1", 2222, "root").splitlines()
    assert "Host lab-master1 lab-master2 lab-master3" in lines and "  Port 2222" in lines, lines


@pytest.mark.lab       # starts a lab through `cpctl lab up` (no fixture says so)
def test_lab_up_not_ready_in_time_exits_6_and_leaves_nothing_running(tmp_path: Path) -> None:
    """README's table: 6 when ``lab up`` is not ready within ``--timeout``. The lab process it
    started is stopped (it went on starting before, detached, and ``lab down`` found nothing to stop
    while it had not written lab.json yet): the line says so, and nothing runs afterwards."""
    env = dict(clean_env(str(tmp_path / "home")), CPCTL_LAB_ETCD="none")
    if os.environ.get("CPCTL_LAB_PORTS"):
        env["CPCTL_LAB_PORTS"] = os.environ["CPCTL_LAB_PORTS"]
    directory = str(tmp_path / "lab")
    try:
        proc = cpctl(env, "lab", "up", "--dir", directory, "--timeout", "0.01")
        assert proc.returncode == 6 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert line == "cpctl lab: lab in %s not ready after 0s (see %s/lab.log): stopped it; a longer --timeout " \
                       "waits longer" % (directory, directory), line
        assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs_lab_in(pid, directory)]
    finally:
        down = cpctl(env, "lab", "down", "--dir", directory)
    assert down.returncode == 0 and "nothing to stop" in down.stdout, (down.stdout, down.stderr)


def _runs_lab_in(pid: str, directory: str) -> bool:
    """Whether process ``pid`` is a lab serving ``directory`` (its command line names the dir)."""
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            words = handle.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    return "cpctl_lab" in " ".join(words) and directory in words

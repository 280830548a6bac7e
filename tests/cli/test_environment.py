"""Environment edge cases (issue #16 item 10): a variable set but empty is an error, and a file
input is a bounded regular file - never a silent default, a hang or a traceback."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import pytest

from tests.coreutil import CLI, NodeDirs, check_result, snapshot


@pytest.mark.parametrize("name", ["CPCTL_STATE_DIR", "CPCTL_MANIFESTS_DIR", "CPCTL_NODE_NAME", "CPCTL_PROBE",
                                  "CPCTL_CRICTL", "CPCTL_INVENTORY", "CPCTL_PERSIST", "CPCTL_KUBELET_DIR",
                                  "CPCTL_NODE_ROOT"])
def test_empty_variable_is_a_usage_error(name: str, node: NodeDirs) -> None:
    before = snapshot(node.root)
    proc = subprocess.run(CLI + ["stop", "scheduler"], env=node.env(**{name: ""}), capture_output=True, text=True,
                          timeout=30)
    check_result(proc, 2)
    assert name in proc.stderr and "empty" in proc.stderr
    assert snapshot(node.root) == before


def _quick(node: NodeDirs, *args: str, **env: str) -> subprocess.CompletedProcess:
    started = time.monotonic()
    proc = subprocess.run(CLI + list(args), env=node.env(**env), capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 10, "%s took too long" % (args,)
    return proc


def test_inventory_that_never_ends_is_refused_at_once(node: NodeDirs) -> None:
    proc = _quick(node, "status", CPCTL_INVENTORY="/dev/zero")
    check_result(proc, 7)
    assert "not a regular file" in proc.stderr


def test_ssh_config_fifo_and_oversized_inventory(node: NodeDirs, tmp_path: Any) -> None:
    fifo = str(tmp_path / "ssh_config")
    os.mkfifo(fifo)                                   # a read would block forever
    proc = _quick(node, "--ssh-config", fifo, "-H", "root@127.0.0.1:1", "status")
    check_result(proc, 7)
    assert "ssh_config" in proc.stderr and "not a regular file" in proc.stderr
    big = tmp_path / "inventory.yaml"
    big.write_bytes(b"# padding\n" * (1 << 20))       # 10 MiB of comments
    proc = _quick(node, "-i", str(big), "status")
    check_result(proc, 7)
    assert "larger than" in proc.stderr


def test_ssh_config_dev_null_means_no_config(node: NodeDirs) -> None:
    """``-F /dev/null`` is ssh's idiom for "read no config": accepted, the host is then unreachable."""
    proc = _quick(node, "--ssh-config", "/dev/null", "-H", "root@127.0.0.1:1", "status")
    check_result(proc, 8)
    assert "ssh_config" not in proc.stderr


def test_an_exported_inventory_leaves_local_only_commands_local(node: NodeDirs, tmp_path: Any) -> None:
    """README's host completion has ``CPCTL_INVENTORY`` exported: ``-i``'s default for the commands
    that reach masters. A local-only command (``completion``, ``keeper``, ``lab ...``) runs here with
    it as without it; ``-i`` on the command line still makes it a usage error (exit 2)."""
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("all:\n  hosts:\n    m1:\n      ansible_host: 127.0.0.1\n")
    completion = node.run("completion", "bash", process=True)
    exported = subprocess.run(CLI + ["completion", "bash"], env=node.env(CPCTL_INVENTORY=str(inventory)),
                              capture_output=True, text=True, timeout=30)
    assert exported.returncode == 0 and exported.stdout == completion.stdout, exported.stderr
    missing_lab = str(tmp_path / "no-lab")
    proc = subprocess.run(CLI + ["lab", "env", "--dir", missing_lab], env=node.env(CPCTL_INVENTORY=str(inventory)),
                          capture_output=True, text=True, timeout=30)
    no_lab = "cpctl lab: no lab in %s (start one with `cpctl lab up --dir %s`)" % (missing_lab, missing_lab)
    assert proc.returncode == 7 and proc.stderr.splitlines() == [no_lab], proc.stderr
    explicit = subprocess.run(CLI + ["-i", str(inventory), "completion", "bash"], env=node.env(), capture_output=True,
                              text=True, timeout=30)
    check_result(explicit, 2)
    assert "runs only on this machine" in explicit.stderr and not explicit.stdout
    # a command that reaches masters still takes the exported inventory (m1 is unreachable here: exit 8)
    remote = subprocess.run(CLI + ["--host-timeout", "5", "status"],
                            env=node.env(CPCTL_INVENTORY=str(inventory), CPCTL_PERSIST="0"),
                            capture_output=True, text=True, timeout=60)
    assert "m1" in remote.stdout + remote.stderr and remote.returncode != 0, (remote.returncode, remote.stderr)

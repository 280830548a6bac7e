"""Issue #4, per-host timeouts: a master that hangs is reported and given up on; the run ends.

The "stuck" master is the same real sshd reached under another inventory name whose python is
a wrapper that sleeps before starting the agent (a master too loaded to answer). Read-only
commands give up on it after ``--host-timeout`` (default 60 s), report it failed with exit 6,
and cpctl exits at once instead of waiting for it, directly and through the keeper.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.coreutil import NODE, NodeDirs
from tests.remoteutil import Cli, clean_env, write_inventory
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(120)


def _inventory(sshd: SSHServer, tmp: str, node: NodeDirs) -> str:
    slow = os.path.join(tmp, "slow-python")
    with open(slow, "w") as handle:
        handle.write('#!/bin/sh\nsleep 40\nexec python3 "$@"\n')
    os.chmod(slow, 0o755)
    os.chmod(tmp, 0o755)
    common = {"host": sshd.alias, "manifests_dir": node.manifests, "state_dir": node.state, "node_name": NODE}
    return write_inventory(os.path.join(tmp, "inventory.yaml"),
                           {"good": common, "stuck": dict(common, python=slow)})


@pytest.mark.parametrize("persist", ["0", "60s"], ids=["direct", "through-keeper"])
def test_stuck_master_is_given_up_on(sshd: SSHServer, tmp_path: Any, keeper_dir: str, persist: str) -> None:
    node = NodeDirs(str(tmp_path / "node"))
    env = clean_env(str(tmp_path / "home"), CPCTL_PROBE="none", CPCTL_KEEPER_DIR=keeper_dir)
    cli = Cli(sshd.ssh_config, sshd.known_hosts, env)
    inventory = _inventory(sshd, str(tmp_path), node)
    started = time.monotonic()
    proc = cli.run("-i", inventory, "--persist", persist, "--host-timeout", "3", "status", rc=6)
    elapsed = time.monotonic() - started
    assert elapsed < 20, "cpctl waited for the stuck host (%.1fs)" % elapsed
    assert "good  : ok=1 changed=0 unreachable=0 failed=0" in proc.stdout
    assert "stuck : ok=0 changed=0 unreachable=0 failed=1" in proc.stdout
    assert proc.stderr.strip() == ("cpctl: stuck: timed out after 3s (1 of 2 hosts failed or unreachable; "
                                   "see above)")
    # The good master's answer is complete, and nothing changed on the node.
    assert "kube-scheduler" in proc.stdout
    assert sorted(os.listdir(node.manifests)) == sorted(node.files)


def test_host_timeout_must_be_positive(sshd: SSHServer, tmp_path: Any) -> None:
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home")))
    proc = cli.run("--host-timeout", "0", "-H", "master", "status", rc=2)
    assert "--host-timeout" in proc.stderr

"""Issue #4: SIGKILL the LOCAL ``cpctl -H master`` at random moments; the master stays safe.

The agent on the master finishes at most the one request in flight, reads EOF and exits, which
frees the node lock. After each kill the master's filesystem (this machine) is inspected
directly, then ``cpctl -H master status`` must finish (or roll back) the interrupted operation.
Seeded: the seed is printed (``CPCTL_REMOTE_CRASH_SEED`` replays it, ``CPCTL_REMOTE_KILLS``
raises the count).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from typing import Any

import pytest

from cpctl.host import keeper
from tests.coreutil import NODE, NodeDirs, assert_bytes_safe, assert_settled, check_result, temp_files
from tests.remoteutil import Cli, clean_env, lock_is_free
from tests.sshfixture import SSHServer

KILLS = int(os.environ.get("CPCTL_REMOTE_KILLS", "30"))

pytestmark = pytest.mark.timeout(600)


def _pending(node: NodeDirs) -> bool:
    return os.path.exists(node.journal)


@pytest.mark.parametrize("persist", [None, "60s"], ids=["direct", "through-keeper"])
def test_sigkill_local_cpctl_over_ssh(sshd: SSHServer, tmp_path: Any, keeper_dir: str, persist: Any) -> None:
    """Through the keeper (``--persist``) the killed run's socket closes, the keeper closes that
    run's channel and the agent exits: the same guarantees, half the kills (the paths are shared)."""
    seed = int(os.environ.get("CPCTL_REMOTE_CRASH_SEED") or random.SystemRandom().randrange(1 << 30))
    print("remote crash test seed: %d (CPCTL_REMOTE_CRASH_SEED=%d replays it)" % (seed, seed))
    rng = random.Random(seed)
    kills = KILLS if persist is None else max(1, KILLS // 2)
    node = NodeDirs(str(tmp_path / "node"))
    env = clean_env(str(tmp_path / "home"), CPCTL_MANIFESTS_DIR=node.manifests, CPCTL_STATE_DIR=node.state,
                    CPCTL_NODE_NAME=NODE)
    if persist:
        env.update(CPCTL_PERSIST=persist, CPCTL_KEEPER_DIR=keeper_dir)
    cli = Cli(sshd.ssh_config, sshd.known_hosts, env)

    # Calibrate: how long one whole remote stop/start takes on this (busy) machine.
    runtimes = []
    for action in ("stop", "start"):
        started = time.monotonic()
        cli.run("--probe", "none", "-H", "master", action, "scheduler")
        runtimes.append(time.monotonic() - started)
    runtime = min(runtimes)

    stats = {"kills": 0, "finished_before_kill": 0, "journal_pending": 0, "completed": 0, "rolled_back": 0,
             "torn_journal_temp": 0, "max_lock_wait": 0.0, "modes": {"uniform": 0, "tail": 0, "journal": 0}}
    while stats["kills"] - stats["finished_before_kill"] < kills:
        assert stats["kills"] < 3 * kills, "too many runs finished before their kill: %r" % stats
        action = "start" if node.parked_files() else "stop"
        mode = rng.choice(["uniform", "tail", "journal", "journal"])
        stats["modes"][mode] += 1
        proc = cli.popen("--probe", "none", "-H", "master", action, "scheduler", stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        if mode == "uniform":
            time.sleep(rng.uniform(0, runtime))
        elif mode == "tail":
            time.sleep(rng.uniform(0.5 * runtime, 0.95 * runtime))
        else:   # right when the journal appears on the master: inside the critical section
            deadline = time.monotonic() + 30
            while proc.poll() is None and not _pending(node) and time.monotonic() < deadline:
                time.sleep(0.0005)
            time.sleep(rng.choice([0, rng.uniform(0, 0.02), rng.uniform(0.02, 0.12)]))
        proc.send_signal(signal.SIGKILL)
        if proc.wait() == 0:
            stats["finished_before_kill"] += 1
        stats["kills"] += 1

        # Bytes are safe at every instant, even while the agent finishes its last request.
        assert_bytes_safe(node)
        # The agent sees EOF and exits: the node lock is free again (a short wait is allowed).
        stats["max_lock_wait"] = max(stats["max_lock_wait"], lock_is_free(node.state, wait=15))
        assert_bytes_safe(node)
        pending = _pending(node)
        torn = any(n.startswith(".") and ".cpctl-tmp" in n for n in os.listdir(node.state)) \
            if os.path.isdir(node.state) else False
        stats["journal_pending"] += pending
        stats["torn_journal_temp"] += torn

        proc = cli.run("--lock-timeout", "20", "--probe", "none", "-o", "json", "-H", "master", "status", rc=None)
        check_result(proc, 0)       # not 5: the killed run left no lock behind
        data = json.loads(proc.stdout)["hosts"][0]["data"]
        recovered = data["recovered"]
        if pending:
            assert len(recovered) == 1, recovered
            assert recovered[0].startswith(("completed interrupted", "rolled back interrupted")), recovered
            stats["completed" if recovered[0].startswith("completed") else "rolled_back"] += 1
        else:
            assert recovered == []
        assert not os.path.exists(node.journal)
        assert temp_files(node.manifests, node.state) == []
        state = assert_settled(node)
        assert {r["file"]: r["state"] for r in data["components"]} == state

    print("remote crash stats (seed %d, calibrated run %.2fs, %s): %s" % (seed, runtime, persist or "direct",
                                                                        json.dumps(stats)))
    if persist:     # one connection served every run, the killed ones included
        assert keeper.request("status", keeper_dir)["connections"][0]["connects"] == 1
    assert stats["kills"] - stats["finished_before_kill"] >= kills
    # Leave the node running, and make sure the whole thing still works end to end.
    if node.parked_files():
        cli.run("--probe", "none", "-H", "master", "start", "scheduler")
    assert assert_settled(node) == {n: "present" for n in node.files}

"""Issue #2 rules 6 and 8: the node lock, and eight concurrent cpctl loops on one node."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.coreutil import NodeDirs, assert_settled, check_result, sha, temp_files

HOLDER = """
import sys, time
from cpctl.host.local import LocalHost
from cpctl.core.state import StateDir
state = StateDir(LocalHost(), sys.argv[1])
state.ensure(create=True)
with state.locked(5, "cpctl stop scheduler (test holder)", sys.argv[3]):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(node: NodeDirs, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, node.state, str(seconds), node.manifests],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_times_out_naming_the_holder_then_lock_is_free_after_sigkill(node):
    holder = _hold(node, 120)
    try:
        t0 = time.monotonic()
        err = node.run("stop", "scheduler", rc=5, lock_timeout=1.5).stderr
        waited = time.monotonic() - t0
        assert re.search(r"locked by pid %d since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ " % holder.pid, err), err
        assert "cpctl stop scheduler (test holder)" in err
        assert waited >= 1.4, "gave up before --lock-timeout: %.2fs" % waited
        assert "kube-scheduler.yaml" in node.present() and node.parked_files() == []
        node.run("start", "scheduler", rc=5, lock_timeout=0)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the kernel dropped the flock with the process: free at once, no stale lock
    node.run("stop", "scheduler", lock_timeout=0)
    assert node.parked_files() == ["kube-scheduler.yaml"]
    assert_settled(node)


def test_waiter_proceeds_when_holder_finishes_within_timeout(node):
    holder = _hold(node, 1.0)
    try:
        node.run("stop", "scheduler", lock_timeout=30)
    finally:
        holder.wait()
    assert node.parked_files() == ["kube-scheduler.yaml"]
    with open(os.path.join(node.state, "lock"), "rb") as handle:
        assert handle.read() == b""    # released: the holder line is cleared


def test_status_and_history_do_not_need_the_lock(node):
    node.run("stop", "etcd")
    holder = _hold(node, 120)
    try:
        assert "etcd" in node.run("status", lock_timeout=0).stdout
        assert "etcd" in node.run("history", lock_timeout=0).stdout
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


LOOP = """
import random, subprocess, sys, time
seed, seconds = int(sys.argv[1]), float(sys.argv[2])
rng = random.Random(seed)
cli = [sys.executable, "-m", "cpctl", "--lock-timeout", "120"]
cmds = [["stop", "scheduler"], ["start", "scheduler"], ["restart", "scheduler"], ["stop", "etcd", "scheduler"],
        ["start", "etcd", "scheduler"], ["restart", "controller-manager"], ["stop", "apiserver"],
        ["start", "apiserver"], ["status"], ["start", "kube-controller-manager"], ["stop", "controller-manager"]]
end = time.monotonic() + seconds
while time.monotonic() < end:
    cmd = rng.choice(cmds)
    p = subprocess.run(cli + cmd, capture_output=True, text=True)
    print("%d %s %r" % (p.returncode, " ".join(cmd), p.stderr.strip()), flush=True)
"""


def test_eight_concurrent_loops(node):
    seed = int(os.environ.get("CPCTL_CONCURRENCY_SEED") or random.randrange(1 << 30))
    print("\nconcurrency seed: %d" % seed)
    procs = [subprocess.Popen([sys.executable, "-c", LOOP, str(seed + i), "6"], env=node.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and not err, err
        results += [line.split(" ", 1) for line in out.splitlines()]
    print("commands run: %d" % len(results))
    assert len(results) >= 8
    # lock timeout is large: every command must succeed (no 5), and nothing else fails either
    bad = [r for r in results if r[0] != "0"]
    assert not bad, bad[:5]
    state = assert_settled(node)   # one copy each, journal empty, meta and history consistent
    history = node.history()
    assert history, "no change was made at all"
    for rec in history:
        assert rec["checksum"] == sha(node.files[rec["file"]])
        assert not rec.get("recovered")
    # the final state agrees with what status reports
    proc = subprocess.run(node.argv("-o", "json", "status"), env=node.env(), capture_output=True, text=True)
    check_result(proc, 0)
    rows = {r["file"]: r["state"] for r in json.loads(proc.stdout)["components"]}
    assert rows == state


@pytest.mark.slow
def test_twenty_concurrent_flags_of_one_component_queue_on_the_lock(node):
    """Issue 33 item 6: concurrent ``flags`` of one component each wait their turn on the node lock and
    make their change from the manifest as it is then (they were exit 10, 'someone else edited it',
    when the other writer was cpctl): every one exits 0 (or with a clear lock timeout, exit 5)."""
    procs = [subprocess.Popen(node.argv("flags", "scheduler", "--set", "v=%d" % n, "--reason", "run %d" % n,
                                        lock_timeout=240),
                              env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(20)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for proc in procs:
        proc.stdout.close()
        proc.stderr.close()
    assert all(rc == 0 or (rc == 5 and "lock" in err) for rc, err in results), results
    done = [r for r in node.history() if r["action"] == "flags"]
    assert len(done) == sum(1 for rc, _ in results if rc == 0), "every run that exited 0 made its change"
    with open(os.path.join(node.manifests, "kube-scheduler.yaml")) as handle:
        text = handle.read()
    assert text.count("--v=") == 1 and "--v=%s" % done[-1]["reason"].split()[-1] in text
    assert not os.path.exists(node.journal) and temp_files(node.manifests, node.state) == []

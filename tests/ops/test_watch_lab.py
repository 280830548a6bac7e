"""cpctl watch follow-up lines against the lab: the simulated kubelet really removes/creates mirror pods."""

from __future__ import annotations

import os
import shutil
from typing import Any, Iterator

import pytest

from cpctl_lab.control import LabHandle, start_lab
from tests.coreutil import NodeDirs
from tests.labfixture import FAST
from tests.ops.test_watch import WatchProc


@pytest.fixture
def lab(tmp_path: Any) -> Iterator[LabHandle]:
    with start_lab(tmp_path / "lab", masters=1, **FAST) as handle:
        yield handle


def test_mirror_pod_follow_up(lab: LabHandle, tmp_path: Any) -> None:
    env = dict(os.environ, **lab.env)
    node = NodeDirs.__new__(NodeDirs)
    node.manifests = str(lab.manifests_dir())
    watcher = WatchProc(node, "--timeout", "15", env=dict(env, CPCTL_PROBE="api"))
    try:
        mirror = "kube-scheduler-%s" % lab.node_name()
        src = os.path.join(node.manifests, "kube-scheduler.yaml")
        os.rename(src, str(tmp_path / "kube-scheduler.yaml"))
        rec = watcher.verdict("kube-scheduler.yaml")
        assert (rec["verdict"], rec["pod"]) == ("stop", mirror)
        follow = watcher.until(lambda r: r["event"] == "mirror")[-1]
        assert follow["verdict"] == "followed" and follow["detail"].startswith("mirror pod %s gone after " % mirror)
        os.rename(str(tmp_path / "kube-scheduler.yaml"), src)
        assert watcher.verdict("kube-scheduler.yaml")["verdict"] == "load"
        follow = watcher.until(lambda r: r["event"] == "mirror")[-1]
        assert follow["verdict"] == "followed" and "appeared and Ready" in follow["detail"]
        rc, rest = watcher.stop()
        assert rc == 0 and rest[-1]["verdict"] == "exit"
    finally:
        watcher.close()


def test_removing_a_duplicate_bounces_the_pod_and_the_relist_brings_it_back(lab: LabHandle) -> None:
    env = dict(os.environ, **lab.env)
    node = NodeDirs.__new__(NodeDirs)
    node.manifests = str(lab.manifests_dir())
    src = os.path.join(node.manifests, "kube-scheduler.yaml")
    shutil.copy(src, src + ".bak")
    # 60 s: the watch's verdict comes as soon as the mirror pod is gone; the margin is a busy machine's
    # (the lab's API server on the real etcd, 15 s was seen to be too short in CI)
    watcher = WatchProc(node, "--timeout", "60", env=dict(env, CPCTL_PROBE="api"))
    try:
        mirror = "kube-scheduler-%s" % lab.node_name()
        os.unlink(src + ".bak")
        rec = watcher.verdict("kube-scheduler.yaml.bak")
        assert (rec["verdict"], rec["pod"], rec.get("bounce")) == ("stop", mirror, True)
        follows = watcher.until(lambda r: r["event"] == "mirror" and "recreated" in r["detail"], timeout=120)
        gone = [r for r in follows if r["event"] == "mirror" and "gone" in r["detail"]]
        assert gone and gone[0]["verdict"] == "followed", follows
        assert follows[-1]["verdict"] == "followed", follows
    finally:
        watcher.close()

"""The state dir is input like any file (issue #16 items 5, 7, 8).

* a manifest name cpctl cannot keep its bookkeeping for is refused before anything changes;
* crafted or corrupt journal and metadata files are one line and exit 7, never a traceback, never
  a file touched outside the manifests and state dirs, and never a node stuck for good: status
  still shows what it can;
* the history is bounded: rotated into compressed segments, still readable whole, and recovery
  never reads more than its tail.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

import pytest

from cpctl.core import state as state_module
from cpctl.core.node import Node
from cpctl.core.settings import Settings
from cpctl.host.mock import MockHost
from cpctl.ops.wiring import open_node
from tests.coreutil import NODE, NodeDirs, sealed, snapshot, stop_killed_after_move

POD = b"""apiVersion: v1
kind: Pod
metadata:
  name: long
  namespace: kube-system
spec:
  containers:
  - image: registry.k8s.io/pause:3.9
    name: long
"""


@pytest.mark.parametrize("length", [251, 255])
def test_a_name_cpctl_cannot_keep_bookkeeping_for_is_refused_first(node: NodeDirs, length: int) -> None:
    name = ("l" * (length - 5)) + ".yaml"
    with open(os.path.join(node.manifests, name), "wb") as handle:
        handle.write(POD)
    before = snapshot(node.root)
    err = node.run("stop", "long", rc=4).stderr
    assert "file name too long for cpctl to park" in err
    assert snapshot(node.root) == before
    node.run("status")                                  # and nothing is stuck afterwards
    node.run("stop", "scheduler")


JOURNALS = {
    "a list": [],
    "a string": "stop",
    "no steps": {"version": 2, "op": "x", "action": "stop", "component": "c", "file": "f", "commit": 0},
    "steps not a list": {"version": 2, "op": "x", "action": "stop", "component": "c", "file": "f", "commit": 0,
                         "steps": "move"},
    "a step of another kind": {"version": 2, "op": "x", "action": "stop", "component": "c", "file": "f",
                               "commit": 0, "steps": [{"kind": "delete", "path": "/etc/passwd"}]},
    "commit out of range": {"version": 2, "op": "x", "action": "stop", "component": "c", "file": "f",
                            "commit": 7, "steps": [{"kind": "touch", "path": "/x"}]},
    "component not text": {"version": 2, "op": "x", "action": "stop", "component": ["c"], "file": "f",
                           "commit": 0, "steps": [{"kind": "touch", "path": "/x"}]},
    "old format, src not text": {"op": "x", "action": "stop", "component": "c", "file": "f", "src": 1, "dst": "/d",
                                 "checksum": "0" * 64},
    "old format, unknown action": {"op": "x", "action": "rm", "component": "c", "file": "f", "src": "/s",
                                   "dst": "/d", "checksum": "0" * 64},
    "a path outside both dirs": {"version": 2, "op": "x", "action": "stop", "component": "c", "file": "f",
                                 "commit": 0, "steps": [{"kind": "move", "src": "/etc/hostname",
                                                         "path": "/tmp/../../evil.json", "checksum": "0" * 64}]},
    "a relative path": {"version": 2, "op": "x", "action": "stop", "component": "c", "file": "f", "commit": 0,
                        "steps": [{"kind": "touch", "path": "manifests/kube-scheduler.yaml"}]},
}


@pytest.mark.parametrize("what", sorted(JOURNALS))
def test_a_crafted_journal_is_one_line_exit_7_and_touches_nothing(node: NodeDirs, what: str) -> None:
    node.run("stop", "etcd")
    crafted = JOURNALS[what]
    with open(node.journal, "w") as handle:     # sealed: the rules below the seal hold on their own
        json.dump(sealed(node.state, crafted) if isinstance(crafted, dict) else crafted, handle)
    said = "journal.json is corrupt"
    before = snapshot(node.root)
    err = node.run("stop", "scheduler", rc=7).stderr
    assert said in err, err
    status = node.run("status", rc=7)                  # shows the node, then says what is wrong
    assert "etcd" in status.stdout and said in status.stderr
    assert snapshot(node.root) == before


@pytest.mark.parametrize("field,value", [("until", "tomorrow"), ("component", ["etcd"]), ("parked_at", 5),
                                         ("mode", "0600"), ("reason", {"why": 1})])
def test_corrupt_metadata_is_one_line_exit_7(node: NodeDirs, field: str, value: Any) -> None:
    node.run("stop", "etcd")
    path = os.path.join(node.state, "meta", "etcd.yaml.json")
    with open(path) as handle:
        meta = json.load(handle)
    meta[field] = value
    with open(path, "w") as handle:
        json.dump(meta, handle)
    err = node.run("status", rc=7).stderr
    assert "etcd.yaml.json is corrupt (%s" % field in err


def test_history_rotates_and_stays_whole(node: NodeDirs, monkeypatch: Any) -> None:
    monkeypatch.setattr(state_module, "HISTORY_ROTATE_BYTES", 4096)
    opened = Node(MockHost(), node.manifests, node.state, NODE)
    for _ in range(12):
        for action in ("stop", "start"):
            with opened.session("test"):
                getattr(opened, action)("scheduler", wait=False)
    segments = opened.state.history_segments()
    assert segments and all(name.endswith(".jsonl.gz") for name in segments)
    assert os.path.getsize(node.history_file) <= 4096
    every = opened.state.read_history()
    assert [r["action"] for r in every] == ["stop", "start"] * 12
    with gzip.open(os.path.join(node.state, segments[0])) as handle:
        assert json.loads(handle.readline())["action"] == "stop"
    assert len(opened.state.read_history(limit=3)) == 3


def test_recovery_reads_only_the_tail_of_a_huge_history(node: NodeDirs) -> None:
    node.run("stop", "scheduler")
    with open(node.history_file, "ab") as handle:      # a legacy history of 20 MiB
        handle.write((b'{"action":"noise","op":"0"}\n') * (20 << 20 // 28))
    # a park of etcd.yaml killed right after its move: recovery completes it and must look in the
    # history whether it was recorded already
    stop_killed_after_move(node)
    host = MockHost()
    opened = open_node(Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none"),
                       host)
    with opened.session("test", changing=False):
        pass
    history_reads = [args for op, args in host.calls if op == "read_file" and args["path"] == node.history_file]
    assert history_reads == [], "recovery read the whole history"
    assert [args["limit"] for op, args in host.calls if op == "read_tail"] == [state_module.HISTORY_TAIL_BYTES]
    assert opened.recovered and "completed interrupted stop of etcd" in opened.recovered[0]
    assert opened.state.read_history(limit=1)[-1]["op"] == "feedc0de"

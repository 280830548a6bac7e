"""Revisions you can read (issue #23 item 2): each version labelled with its own change, identical
versions kept once, the original kept for good, ``revisions COMPONENT [N | --diff N M]`` in text,
``rollback --to`` a failed revision refused without ``--force``, older stores read sensibly."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict, List

import pytest

from cpctl.core.settings import Settings
from cpctl.host.local import LocalHost
from cpctl.ops import edits
from cpctl.ops.wiring import open_node
from tests.coreutil import NODE, NodeDirs, check_result, sha


def _version(node: NodeDirs, number: int) -> bytes:
    return node.files["kube-scheduler.yaml"].replace(b"- --leader-elect=true\n",
                                                     b"- --leader-elect=true\n    - --v=%d\n" % number)


def _apply(node: NodeDirs, data: bytes, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(node.argv("apply", "scheduler", "-f", "-", *args), input=data, env=node.env(),
                          capture_output=True, timeout=60)
    text = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())
    check_result(text, rc)
    return text


def _listed(node: NodeDirs) -> List[Dict[str, Any]]:
    return json.loads(node.run("-o", "json", "revisions", "scheduler").stdout)["revisions"]


def _rows(node: NodeDirs) -> List[List[str]]:
    return [line.split(None, 6) for line in node.run("revisions", "scheduler").stdout.splitlines()[1:]]


def test_each_revision_carries_the_reason_of_its_own_change(node: NodeDirs) -> None:
    _apply(node, _version(node, 1), "--reason", "more scheduler logs")
    _apply(node, _version(node, 2), "--reason", "even more")
    listed = _listed(node)
    assert [(r["number"], r["action"], r["reason"], r["original"], r["current"]) for r in listed] == [
        (1, "original", None, True, False), (2, "apply", "more scheduler logs", False, False),
        (3, "apply", "even more", False, True)]
    assert [r["checksum"] for r in listed] == [sha(node.files["kube-scheduler.yaml"]), sha(_version(node, 1)),
                                               sha(_version(node, 2))]
    rows = _rows(node)
    assert [(r[0], r[3], r[5]) for r in rows] == [("1", "original", "original"), ("2", "apply", "-"),
                                                  ("3", "apply", "current")]
    assert rows[1][6] == "more scheduler logs" and rows[2][6] == "even more"


def test_identical_versions_are_kept_once(node: NodeDirs) -> None:
    original = node.files["kube-scheduler.yaml"]
    for data in (_version(node, 1), original, _version(node, 1), original):
        _apply(node, data)
    assert [(r["number"], r["checksum"], r["current"]) for r in _listed(node)] == [
        (1, sha(original), True), (2, sha(_version(node, 1)), False)]
    proc = node.run("rollback", "scheduler")
    assert "now revision 2, previous version kept as revision 1" in proc.stdout
    assert len(_listed(node)) == 2, "a rollback points back at a kept version"


def test_the_original_is_kept_for_good(node: NodeDirs) -> None:
    for number in range(1, 14):
        _apply(node, _version(node, number))
    listed = _listed(node)
    assert listed[0]["number"] == 1 and listed[0]["original"]
    assert listed[0]["checksum"] == sha(node.files["kube-scheduler.yaml"])
    assert [r["number"] for r in listed] == [1] + list(range(5, 15)), "the original, then the newest 10"
    shown = node.run("revisions", "scheduler", "1").stdout
    assert shown.splitlines()[0].startswith("# revision 1 of kube-scheduler.yaml: original at ")
    assert shown.split("\n", 1)[1].rstrip("\n") == node.files["kube-scheduler.yaml"].decode().rstrip("\n")


def test_show_and_diff_in_text(node: NodeDirs) -> None:
    _apply(node, _version(node, 7), "--reason", "v7")
    diff = node.run("revisions", "scheduler", "--diff", "1", "2").stdout.splitlines()
    assert diff[0].startswith("# from revision 1 of kube-scheduler.yaml: original")
    assert diff[1].startswith("# to   revision 2 of kube-scheduler.yaml: apply") and diff[1].endswith(": v7")
    assert diff[2:4] == ["--- a/kube-scheduler.yaml", "+++ b/kube-scheduler.yaml"]
    assert "+    - --v=7" in diff and not [line for line in diff if line.startswith("-    ")]
    assert node.run("revisions", "scheduler", "--diff", "2", "2").stdout.endswith("(identical)\n")
    proc = node.run("revisions", "scheduler", "9", rc=3)
    assert "has no revision 9 (it has 1, 2)" in proc.stderr
    node.run("revisions", "scheduler", "1", "--diff", "1", "2", rc=2)
    shown = json.loads(node.run("-o", "json", "revisions", "scheduler", "2").stdout)
    assert shown["manifest"] == _version(node, 7).decode() and shown["revision"]["reason"] == "v7"


def _opened(node: NodeDirs) -> Any:
    return open_node(Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none"),
                     LocalHost())


def test_rollback_to_a_failed_revision_needs_force(node: NodeDirs) -> None:
    _apply(node, _version(node, 1), "--reason", "try v1")
    # the automatic rollback's own step: the previous bytes back over the version that failed
    opened = _opened(node)
    now = edits.current(opened, "scheduler", "rollback")
    now.data = node.files["kube-scheduler.yaml"]          # the manifest the apply replaced
    written = edits.Written(now, _version(node, 1),
                            sha(_version(node, 1)), 1, "apply")
    failed = edits._restore(opened, written, "automatic rollback: test", edits.ApplyOptions(settle=0))
    assert failed == 2
    listed = _listed(node)
    assert [(r["number"], r["failed"], r["current"], r["reason"]) for r in listed] == [
        (1, False, True, None), (2, True, False, "try v1")], "the failed version keeps its own label"
    assert _rows(node)[1][5] == "failed"
    proc = node.run("rollback", "scheduler", "--to", "2", rc=4)
    assert "marked failed" in proc.stderr and "--force" in proc.stderr
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == node.files["kube-scheduler.yaml"], "nothing changed"
    node.run("rollback", "scheduler", "--to", "2", "--force")
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == _version(node, 1)


def _legacy(node: NodeDirs, number: int, data: bytes, replaced_by: bytes, action: str, reason: Any,
            failed: bool = False) -> None:
    """A record as cpctl wrote them before: labelled with the change that REPLACED ``data``."""
    path = os.path.join(node.state, "revisions", "kube-scheduler.yaml.%d" % number)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    meta = {"number": number, "file": "kube-scheduler.yaml", "checksum": sha(data), "size": len(data), "mode": 0o600,
            "saved_at": "2026-11-30T10:0%d:00Z" % number, "saved_by": "root", "host": "cp-1", "action": action,
            "reason": reason, "replaced_by": sha(replaced_by), "failed": failed, "op": "0%d" % number}
    with open(path + ".json", "w") as handle:
        json.dump(meta, handle)


def test_a_store_of_the_older_layout_is_read_with_each_version_s_own_label(node: NodeDirs) -> None:
    original, v1, v2 = node.files["kube-scheduler.yaml"], _version(node, 1), _version(node, 2)
    os.makedirs(node.state, mode=0o700, exist_ok=True)
    _legacy(node, 1, original, v1, "flags", "more logs")
    _legacy(node, 2, v1, v2, "edit", "tune")
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "wb") as handle:
        handle.write(v2)
    assert [(r["number"], r["action"], r["reason"], r["original"]) for r in _listed(node)] == [
        (1, "original", None, True), (2, "flags", "more logs", False)]
    _apply(node, _version(node, 3), "--reason", "now")
    assert [(r["number"], r["action"], r["reason"], r["current"]) for r in _listed(node)] == [
        (1, "original", None, False), (2, "flags", "more logs", False), (3, "edit", "tune", False),
        (4, "apply", "now", True)], "the bytes in place take the label of the legacy change that wrote them"


@pytest.mark.parametrize("change", [{"format": 99}, {"original": "yes"}, {"failed": None}])
def test_a_hostile_record_is_one_clear_error(node: NodeDirs, change: Dict[str, Any]) -> None:
    _apply(node, _version(node, 1))
    path = os.path.join(node.state, "revisions", "kube-scheduler.yaml.1.json")
    with open(path) as handle:
        meta = json.load(handle)
    with open(path, "w") as handle:
        json.dump(dict(meta, **change), handle)
    proc = node.run("revisions", "scheduler", rc=7)
    assert "kube-scheduler.yaml.1.json is corrupt" in proc.stderr

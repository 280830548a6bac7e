"""Issue 48: a manifest kubeadm replaced is shown as such by ``status`` (as ``revisions`` shows it),
and ``revisions`` puts the ``outside`` row (the bytes in place, kept by no revision) in its table's
columns, plain and ``-o wide``."""

from __future__ import annotations

import json
import os
from typing import Any, List

from tests.coreutil import NodeDirs

FILE = "kube-scheduler.yaml"


def _upgraded_by_kubeadm(tmp_path: Any) -> NodeDirs:
    """cpctl changed the scheduler's flags, then ``kubeadm upgrade`` moved cpctl's manifest to its backup
    dir (next to the manifests dir, as kubeadm does) and wrote its own with a newer image."""
    node = NodeDirs(str(tmp_path / "kubernetes"))
    node.run("flags", "scheduler", "--set", "v=4")
    manifest = os.path.join(node.manifests, FILE)
    with open(manifest, "rb") as handle:
        ours = handle.read()
    backup = os.path.join(node.root, "tmp", "kubeadm-backup-manifests-2026-12-07-14-00-00")
    os.makedirs(backup)
    os.rename(manifest, os.path.join(backup, FILE))
    with open(manifest, "wb") as handle:
        handle.write(ours.replace(b":v1.30.0", b":v1.31.2").replace(b"    - --v=4\n", b""))
    return node


def test_status_says_kubeadm_replaced_the_manifest(tmp_path: Any) -> None:
    node = _upgraded_by_kubeadm(tmp_path)
    line = next(line for line in node.run("status").stdout.splitlines() if line.startswith("kube-scheduler "))
    assert line.endswith("replaced by kubeadm upgrade v1.30.0 -> v1.31.2"), line
    row = json.loads(node.run("-o", "json", "status", "scheduler").stdout)["components"][0]
    assert row["last_change"] == {"action": "outside", "time": None, "user": None, "automatic": None,
                                  "reason": "kubeadm upgrade v1.30.0 -> v1.31.2"}
    etcd = json.loads(node.run("-o", "json", "status", "etcd").stdout)["components"][0]
    assert etcd["last_change"] is None                       # a file cpctl never wrote is nobody's "outside"


def _starts(line: str, cells: List[str]) -> List[int]:
    """Where each of ``cells`` begins in ``line``, searched left to right."""
    found, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        found.append(at)
        at += len(cell)
    return found


def test_revisions_puts_the_outside_row_in_the_table_columns(tmp_path: Any) -> None:
    node = _upgraded_by_kubeadm(tmp_path)
    for wide in (False, True):
        out = node.run(*(["-o", "wide"] if wide else []), "revisions", "scheduler").stdout.splitlines()
        header = out[0]
        outside = next(line for line in out if line.startswith("-"))
        columns = ["BY", "ACTION", "SHA256", "NOTE", "REASON"]
        assert _starts(outside, ["not cpctl", "outside"]) == _starts(header, columns[:2]), (header, outside)
        sha = outside.split()[7 if wide else 5]          # - - not cpctl [-] outside [-] SHA
        assert len(sha) == (64 if wide else 12)
        assert _starts(outside, ["outside", sha, "current", "kubeadm upgrade v1.30.0 -> v1.31.2"]) == \
            _starts(header, columns[1:]), "\n".join(out)


def test_stop_and_start_after_the_upgrade_do_not_hide_it(tmp_path: Any) -> None:
    """A start puts back the bytes that were parked: after a kubeadm upgrade those are kubeadm's, not
    cpctl's. ``status`` and ``revisions`` still name the upgrade (a start was counted as cpctl writing them)."""
    node = _upgraded_by_kubeadm(tmp_path)
    node.run("stop", "scheduler")
    node.run("start", "scheduler")
    line = next(line for line in node.run("status").stdout.splitlines() if line.startswith("kube-scheduler "))
    assert line.endswith("replaced by kubeadm upgrade v1.30.0 -> v1.31.2"), line
    listed = json.loads(node.run("-o", "json", "revisions", "scheduler").stdout)
    assert listed["outside"]["note"] == "kubeadm upgrade v1.30.0 -> v1.31.2", listed["outside"]


def test_a_parked_copy_edited_by_hand_is_not_cpctls_write(tmp_path: Any) -> None:
    """``start`` restores a parked copy edited by hand (the operator's change, and says so): those bytes
    were written outside cpctl, so they are shown as such, not as what cpctl last wrote."""
    node = NodeDirs(str(tmp_path / "kubernetes"))
    node.run("flags", "scheduler", "--set", "v=4")
    node.run("stop", "scheduler")
    parked = os.path.join(node.parked, FILE)
    with open(parked, "rb") as handle:
        ours = handle.read()
    with open(parked, "wb") as handle:
        handle.write(ours.replace(b"    - --v=4\n", b"    - --v=5\n"))
    assert "changed outside cpctl" in node.run("start", "scheduler").stdout
    line = next(line for line in node.run("status").stdout.splitlines() if line.startswith("kube-scheduler "))
    assert line.endswith("replaced outside cpctl"), line

"""Manifest changes rolled over three masters through three real sshd (issue #14): one master at a
time, and the first master whose new version does not become healthy is rolled back and stops the
roll -- the masters after it are not touched.

The new version points the controller-manager at a kubeconfig under /etc/kubernetes/pki (mounted
from the node). It exists on every master, so validation passes everywhere; on master2 it is
empty, so there the lab's controller-manager crash-loops ("invalid configuration"), as the real
one would.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import os
import shutil
from typing import Any, Iterator, List

import pytest

from tests.fleet.test_remote_fleet import Fleet, _statuses
from tests.labfixture import lab3  # noqa: F401
from tests.remoteutil import read_history
from tests.sshfixture import SSHServer, sshd_many  # noqa: F401

pytestmark = pytest.mark.timeout(300)
EXTRA = "/etc/kubernetes/pki/extra-controller-manager.conf"


@pytest.fixture
def fleet(sshd_many: List[SSHServer], lab3: Any, tmp_path: Any) -> Iterator[Fleet]:
    yield Fleet(sshd_many, lab3, str(tmp_path))


def _manifest(fleet: Fleet, i: int) -> bytes:
    with open(os.path.join(fleet.manifests(i), "kube-controller-manager.yaml"), "rb") as handle:
        return handle.read()


def test_a_master_whose_new_version_fails_is_rolled_back_and_stops_the_roll(fleet: Fleet) -> None:
    lab = fleet.lab
    for i in (1, 2, 3):
        root = str(lab.root_dir(i))
        target = os.path.join(root, EXTRA.lstrip("/"))
        if i == 2:
            open(target, "w").close()              # empty: the component cannot use it
        else:
            shutil.copy(os.path.join(root, "etc/kubernetes/controller-manager.conf"), target)
    before = {i: _manifest(fleet, i) for i in (1, 2, 3)}
    # --timeout 60: a new controller-manager is verified only once it holds the Lease, which its
    # predecessor does not release (up to the 15 s lease duration); master2's crash is failed fast
    doc = fleet.json("flags", "controller-manager", "--set", "kubeconfig=" + EXTRA, "--timeout", "60",
                     "--settle", "1", "--reason", "new kubeconfig", rc=11)
    assert _statuses(doc) == [("master1", "changed"), ("master2", "failed"), ("master3", "skipped")]
    failed = doc["hosts"][1]["error"]
    assert "ROLLED BACK" in failed and "invalid configuration" in failed, failed
    assert ("--kubeconfig=" + EXTRA).encode() in _manifest(fleet, 1)
    assert _manifest(fleet, 2) == before[2], "master2 rolled back to its exact bytes"
    assert _manifest(fleet, 3) == before[3], "master3 never touched"
    assert [r["action"] for r in read_history(fleet.state(2))] == ["flags", "rollback"]
    assert not read_history(fleet.state(3))
    assert doc["hosts"][0]["data"]["flags"] == ["--kubeconfig set to " + EXTRA]


def test_etcd_changes_pass_the_quorum_guard_first(fleet: Fleet) -> None:
    """With etcd stopped on master2, changing etcd on master1 (one master at a time) would leave 1 of
    3 members running: refused before anything changes, like stop."""
    fleet.cli.run("-i", fleet.inv, "-H", "master2", "--probe", "none", "stop", "etcd")
    before = fleet.snap()
    proc = fleet.cli.run("-i", fleet.inv, "flags", "etcd", "--set", "v=2", rc=4)
    assert "quorum" in proc.stderr and "etcd" in proc.stderr
    assert fleet.snap() == before

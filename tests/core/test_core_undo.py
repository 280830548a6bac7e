"""Issue #22 item 6: a step that fails half way is undone with the steps before it.

A `stop` across filesystems copies the manifest into STATE/parked, then removes the source. When
that removal fails (the manifests dir is on a read-only mount, the file is immutable) the copy
must go again: no stray second copy in parked/, no "nothing changed" while something did, and
`stop`/`start`/`check` work on afterwards. Injected on a MockHost, and for real on a read-only
tmpfs (root only; skipped with the reason otherwise).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, Iterator

import pytest

from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from tests.coreutil import NodeDirs, Tmpfs, assert_settled, tmpfs_fixture

NAME = "kube-scheduler.yaml"
tmpfs = pytest.fixture(tmpfs_fixture)


def _stop(node: Node) -> Any:
    with node.session("test"):
        return node.stop("scheduler", reason="undo test", wait=False)


def _parked_copies(node: NodeDirs) -> list:
    return sorted(os.listdir(node.parked)) if os.path.isdir(node.parked) else []


@pytest.mark.parametrize("error,text", [("EXDEV+EROFS", "Read-only file system"),
                                        ("EXDEV+EPERM", "not permitted")])
def test_copy_whose_source_cannot_be_removed_is_undone(mock_node: Node, node: NodeDirs, error: str,
                                                       text: str) -> None:
    mock_node.host.fail("move", error, path="/manifests/")
    with pytest.raises(CpctlError) as err:
        _stop(mock_node)
    assert err.value.code == ExitCode.ENVIRONMENT
    assert text in err.value.message and "(nothing changed)" in err.value.message
    assert _parked_copies(node) == [], "no stray copy stays in parked/"
    assert node.history() == []
    assert_settled(node)
    _stop(mock_node)                         # the next stop works (it refused with exit 4 before)
    assert _parked_copies(node) == [NAME]


def test_a_step_that_fails_after_doing_its_work_is_undone(mock_node: Node, node: NodeDirs) -> None:
    """The move happened, then its fsync failed: the journal moves it back (not just the metadata)."""
    mock_node.host.fail("move", "EIO-after", path="/manifests/")
    with pytest.raises(CpctlError) as err:
        _stop(mock_node)
    assert "(nothing changed)" in err.value.message
    assert os.path.exists(os.path.join(node.manifests, NAME)) and _parked_copies(node) == []
    assert_settled(node)


@pytest.fixture
def readonly_manifests(tmp_path: Any) -> Iterator[NodeDirs]:
    """A node whose manifests dir is a tmpfs remounted read-only (the state dir on another fs)."""
    mount = Tmpfs(str(tmp_path / "etc"))
    try:
        node = NodeDirs(mount.path, state=str(tmp_path / "state"))
        proc = subprocess.run(["mount", "-o", "remount,ro", mount.path], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip("cannot remount the tmpfs read-only: %s" % proc.stderr.strip())
        yield node
    finally:
        mount.close()


def test_stop_on_a_read_only_manifests_dir_leaves_no_stray(readonly_manifests: NodeDirs) -> None:
    node = readonly_manifests
    assert os.stat(node.manifests).st_dev != os.stat(os.path.dirname(node.state)).st_dev
    proc = node.run("stop", "scheduler", "--no-wait", rc=int(ExitCode.ENVIRONMENT))
    assert "Read-only file system" in proc.stderr and "nothing changed" in proc.stderr
    assert _parked_copies(node) == [], "no stray copy stays in parked/"
    assert node.history() == []
    node.run("start", "scheduler", "--no-wait")          # already in place: exit 0, not "refused" (4)
    node.run("stop", "scheduler", "--no-wait", rc=int(ExitCode.ENVIRONMENT))   # still refused the same way
    assert _parked_copies(node) == []


@pytest.fixture
def immutable_manifest(tmp_path: Any, tmpfs: str) -> Iterator[NodeDirs]:
    """The scheduler's manifest `chattr +i` (on this disk), the state dir on a tmpfs (EXDEV)."""
    node = NodeDirs(str(tmp_path), state=os.path.join(tmpfs, "state"))
    path = os.path.join(node.manifests, NAME)
    proc = subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("cannot make a file immutable here: %s" % proc.stderr.strip())
    try:
        yield node
    finally:
        subprocess.run(["chattr", "-i", path], capture_output=True)


def test_stop_of_an_immutable_manifest_leaves_no_stray(immutable_manifest: NodeDirs) -> None:
    node = immutable_manifest
    proc = node.run("stop", "scheduler", "--no-wait", rc=int(ExitCode.ENVIRONMENT))
    assert "not permitted" in proc.stderr and "nothing changed" in proc.stderr
    assert _parked_copies(node) == [] and node.history() == []
    node.run("start", "scheduler", "--no-wait")

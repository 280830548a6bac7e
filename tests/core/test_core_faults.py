"""The change path under injected failures, in-process on a MockHost (milliseconds per test).

What must hold whatever fails: the manifest's bytes are complete in exactly one place, the error
says what happened and where the manifest is now, the change is complete (and recorded) or
rolled back before cpctl exits, and nothing is left in the journal or the staged area unless the
roll-back itself failed - and then the message says so.
"""

from __future__ import annotations

import os
from typing import Any, List

import pytest

from cpctl.core import views
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.host.mock import MockHost
from tests.coreutil import NODE, NodeDirs, assert_settled, sealed, sha

NAME = "kube-scheduler.yaml"


def _where(node: NodeDirs) -> List[str]:
    """Where the scheduler's bytes are: "manifests", "parked", or both/neither."""
    found = []
    for label, directory in (("manifests", node.manifests), ("parked", node.parked)):
        path = os.path.join(directory, NAME)
        if os.path.exists(path):
            with open(path, "rb") as handle:
                assert handle.read() == node.files[NAME], "bytes changed in %s" % label
            found.append(label)
    return found


def _clean(node: NodeDirs) -> None:
    assert not os.path.exists(node.journal)
    staged = os.path.join(node.state, "staged")
    assert not (os.path.isdir(staged) and os.listdir(staged))
    assert_settled(node)


def _stop(mock_node: Node) -> Any:
    with mock_node.session("test"):
        return mock_node.stop("scheduler", reason="fault test", wait=False)


def _start(mock_node: Node) -> Any:
    with mock_node.session("test"):
        return mock_node.start("scheduler", wait=False)


def test_disk_full_at_the_history_record_rolls_the_stop_back(mock_node: Node, node: NodeDirs) -> None:
    mock_node.host.fail("append", "ENOSPC")           # the move succeeded; its record cannot be written
    with pytest.raises(CpctlError) as err:
        _stop(mock_node)
    assert err.value.code == ExitCode.ENVIRONMENT
    message = err.value.message
    assert "rolled back" in message and "No space left" in message
    assert node.manifests in message, "the message says where the manifest is now"
    assert _where(node) == ["manifests"] and node.history() == []
    _clean(node)


def test_move_across_filesystems_keeps_bytes_and_mode(mock_node: Node, node: NodeDirs) -> None:
    os.chmod(os.path.join(node.manifests, NAME), 0o640)
    mock_node.host.fail("move", "EXDEV")              # the real copy path: temp, fsync, no-replace rename
    _stop(mock_node)
    assert _where(node) == ["parked"]
    assert os.stat(os.path.join(node.parked, NAME)).st_mode & 0o777 == 0o640
    assert [r["action"] for r in node.history()] == ["stop"]
    _clean(node)


@pytest.mark.parametrize("op,error", [("move", "EIO"), ("move", "EACCES"), ("write_atomic", "ENOSPC"),
                                      ("write_atomic", "EACCES"), ("write_atomic", "EROFS")])
def test_a_failure_before_the_commit_changes_nothing(mock_node: Node, node: NodeDirs, op: str,
                                                      error: str) -> None:
    mock_node.host.fail(op, error, at=_first_call_of(op, "stop", node))
    with pytest.raises(CpctlError) as err:
        _stop(mock_node)
    assert err.value.code == ExitCode.ENVIRONMENT and "(nothing changed)" in err.value.message
    assert _where(node) == ["manifests"] and node.history() == []
    _recover(node)
    _clean(node)


def _first_call_of(op: str, action: str, node: NodeDirs) -> int:
    """Which call of ``op`` a clean run of ``action`` makes inside its change (after the session's
    own reads): counted on a throw-away copy of the node."""
    import shutil
    import tempfile
    root = tempfile.mkdtemp()
    try:
        shutil.copytree(node.root, root, dirs_exist_ok=True)
        probe = Node(MockHost(), os.path.join(root, "manifests"), os.path.join(root, "state"), NODE)
        with probe.session("count"):
            before = [o for o, _ in probe.host.calls].count(op)
            probe.stop("scheduler", wait=False)
        return before + 1
    finally:
        shutil.rmtree(root)


def _recover(node: NodeDirs) -> None:
    views.status(Node(LocalHost(), node.manifests, node.state, NODE))


def test_busy_lock_is_exit_5_naming_the_holder(mock_node: Node, node: NodeDirs) -> None:
    mock_node.host.fail("lock", "lock-busy")
    with pytest.raises(CpctlError) as err:
        _stop(mock_node)
    assert err.value.code == ExitCode.LOCKED and "locked by pid 1" in err.value.message
    assert _where(node) == ["manifests"]


def test_busy_manifests_dir_lock_with_another_state_dir(mock_node: Node, node: NodeDirs) -> None:
    mock_node.host.fail("lock_dir", "lock-busy")
    with pytest.raises(CpctlError) as err:
        _stop(mock_node)
    assert err.value.code == ExitCode.LOCKED
    lock = os.path.join(node.state, "lock")
    with open(lock, "rb") as handle:
        assert handle.read() == b"", "the state dir lock was released again"


def test_metadata_that_cannot_be_removed_after_a_start(mock_node: Node, node: NodeDirs) -> None:
    _stop(mock_node)
    mock_node.host.fail("move", "EPERM", path="/meta/")     # an immutable metadata file
    outcome = _start(mock_node)
    assert outcome.changed and _where(node) == ["manifests"]
    record = node.history()[-1]
    assert record["action"] == "start"
    assert [item for item in record["unfinished"] if "/meta/" in item and "not permitted" in item]
    assert not os.path.exists(node.journal)


def test_a_name_that_appears_meanwhile_is_never_replaced(mock_node: Node, node: NodeDirs) -> None:
    _stop(mock_node)
    intruder = b"an operator's copy, written while the scheduler was parked\n"
    with open(os.path.join(node.manifests, NAME), "wb") as handle:
        handle.write(intruder)
    with pytest.raises(CpctlError):
        _start(mock_node)
    with open(os.path.join(node.manifests, NAME), "rb") as handle:
        assert handle.read() == intruder
    with open(os.path.join(node.parked, NAME), "rb") as handle:
        assert handle.read() == node.files[NAME]


def test_recovery_never_trusts_paths_from_a_crafted_journal(mock_node: Node, node: NodeDirs,
                                                            tmp_path: Any) -> None:
    import json
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious\n")
    _stop(mock_node)
    _start(mock_node)
    entry = {"version": 2, "op": "feedc0de", "action": "stop", "component": "x", "file": "x.yaml",
             "checksum": sha(b"precious\n"), "commit": 0,
             "steps": [{"kind": "move", "src": str(outside), "path": os.path.join(node.parked, "../../evil.json"),
                        "checksum": sha(b"precious\n")}]}
    # unsealed, it is refused before its paths are read (issue 49); sealed as cpctl seals (a key stolen from
    # the state dir), the path rules still refuse it
    for journal in (entry, sealed(node.state, entry)):
        with open(node.journal, "w") as handle:
            json.dump(journal, handle)
        with pytest.raises(CpctlError) as err:
            _stop(mock_node)
        assert err.value.code == ExitCode.ENVIRONMENT, err.value.message
        assert ("corrupt" if "seal" in journal else "not a journal cpctl wrote") in err.value.message, err.value.message
        assert outside.read_bytes() == b"precious\n" and not (tmp_path / "evil.json").exists()


class _RacingHost(MockHost):
    """Another writer (an operator, a second cpctl with another state dir) creates the target
    name in the instant between cpctl's checks and its move."""

    intruder = b"written in the race window\n"

    def _call(self, op: str, **args: Any) -> Any:
        if op == "move" and args["dst"].endswith("/manifests/" + NAME):
            with open(args["dst"], "wb") as handle:
                handle.write(self.intruder)
        return super()._call(op, **args)


def test_the_move_itself_never_replaces_a_name_created_in_the_race_window(node: NodeDirs) -> None:
    racing = Node(_RacingHost(), node.manifests, node.state, NODE)
    with racing.session("test"):
        racing.stop("scheduler", wait=False)
    with pytest.raises(CpctlError) as err:
        with racing.session("test"):
            racing.start("scheduler", wait=False)
    assert "File exists" in err.value.message and "(nothing changed)" in err.value.message
    with open(os.path.join(node.manifests, NAME), "rb") as handle:
        assert handle.read() == _RacingHost.intruder
    with open(os.path.join(node.parked, NAME), "rb") as handle:
        assert handle.read() == node.files[NAME]

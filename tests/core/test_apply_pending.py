"""Issue #22 item 7 in-process: "verification pending" survives a SIGKILL in the wait, is said by
the next commands and by ``check``, and only a verdict clears it (milliseconds per test; the same
against the lab with a real ``cpctl apply``: tests/ops/test_apply_hostile_lab.py)."""

from __future__ import annotations

import json
import os
from typing import Any, List

import pytest

from cpctl.core import views
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError
from cpctl.host.local import LocalHost
from cpctl.host.mock import Fault, MockHost
from cpctl.ops import drift, edits
from cpctl.ops.wiring import open_node
from tests.core.test_journal_kill import EDIT_OPTIONS, NEW_SCHEDULER, SCHEDULER
from tests.coreutil import NODE, NodeDirs, sha


def _settings(node: NodeDirs) -> Settings:
    return Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none", lock_timeout=1)


def _killed_in_the_wait(node: NodeDirs) -> None:
    """A forked ``apply`` killed once its change is written, before its verdict (the moment it
    would clear the pending entry: with a real probe, the whole wait lies in between)."""
    pid = os.fork()
    if pid == 0:
        try:
            host = MockHost([Fault("unlink", "SIGKILL", path="pending.json")])
            edits.replace(open_node(_settings(node), host), "scheduler", NEW_SCHEDULER, "t", "apply", EDIT_OPTIONS)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), "the apply was killed in its wait"


@pytest.fixture
def killed(tmp_path: Any) -> NodeDirs:
    node = NodeDirs(str(tmp_path), files={"kube-scheduler.yaml": SCHEDULER})
    _killed_in_the_wait(node)
    return node


def _pending(node: NodeDirs) -> dict:
    with open(os.path.join(node.state, "pending.json")) as handle:
        return json.load(handle)["changes"]


def test_the_next_commands_say_it(killed: NodeDirs) -> None:
    entry = _pending(killed)["kube-scheduler.yaml"]
    assert entry["checksum"] == sha(NEW_SCHEDULER) and entry["action"] == "apply" and entry["revision"] == 1
    status = views.status(open_node(_settings(killed), LocalHost()))
    [line] = [w for w in status["warnings"] if "never verified" in w]
    assert line.startswith("apply of kube-scheduler (kube-scheduler.yaml) on %s at " % NODE)
    assert "cpctl rollback kube-scheduler (revision 1 holds the previous version)" in line
    logged: List[str] = []
    node = open_node(_settings(killed), LocalHost(), log=logged.append)
    with node.session("cpctl stop etcd"):
        pass
    assert [m for m in logged if m.startswith("warning: apply of kube-scheduler") and "never verified" in m]
    report = drift.check(open_node(_settings(killed), LocalHost()))
    [finding] = report.of_kind("unverified")
    assert finding.component == "kube-scheduler" and finding.file == "kube-scheduler.yaml"
    assert "cpctl start kube-scheduler" in finding.fix and "cpctl rollback kube-scheduler" in finding.fix
    assert report.drift


def test_a_failed_change_keeps_the_older_entry_a_verdict_clears_it(killed: NodeDirs) -> None:
    host = MockHost()
    host.fail("write_atomic", "ENOSPC", path="/manifests/")
    with pytest.raises(CpctlError):
        edits.replace(open_node(_settings(killed), host), "scheduler", SCHEDULER, "t", "rollback", EDIT_OPTIONS)
    assert _pending(killed)["kube-scheduler.yaml"]["checksum"] == sha(NEW_SCHEDULER), "nothing changed: still said"
    edits.replace(open_node(_settings(killed), LocalHost()), "scheduler", SCHEDULER, "t", "rollback", EDIT_OPTIONS)
    assert not os.path.exists(os.path.join(killed.state, "pending.json")), "the rollback's verdict clears it"
    status = views.status(open_node(_settings(killed), LocalHost()))
    assert not [w for w in status["warnings"] if "never verified" in w]


def test_a_corrupt_pending_file_is_one_notice_not_a_dead_tool(tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path), files={"kube-scheduler.yaml": SCHEDULER})
    os.makedirs(node.state, mode=0o700)
    with open(os.path.join(node.state, "pending.json"), "w") as handle:
        handle.write("[" * 100000)
    status = views.status(open_node(_settings(node), LocalHost()))
    assert [w for w in status["warnings"] if "pending.json is corrupt" in w]
    assert drift.check(open_node(_settings(node), LocalHost())).of_kind("unverified")

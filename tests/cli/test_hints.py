"""Hints that fit the situation (issue 48): a quorum refusal names the members not running and
says to bring them back, ``--serial 1`` only when the run changed masters in parallel, the play's
``serial: 1`` under Ansible, nothing about waiting when everything runs, never ``--force``; and a
hint given under Ansible names no file of the task's temp dir (gone when the task ends)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import click
import pytest

from cpctl.catalogue import ETCD
from cpctl.catalogue import KUBE_APISERVER as APISERVER
from cpctl.cli.context import ANSIBLE_TASK_DIR, CliState
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, parse_serial
from cpctl.fleet.targets import RemoteOptions
from cpctl.host.sshconfig import SSHOptions
from cpctl.ops.fleetsafety import preflight

MASTERS = ("m1", "m2", "m3")


def census(not_running: Dict[str, List[str]]) -> List[HostResult]:
    """Three stacked masters; ``not_running``: component -> the masters where it does not run."""
    out = []
    for host in MASTERS:
        running = {c: host not in not_running.get(c, []) for c in (ETCD, APISERVER)}
        out.append(HostResult(host, "ok", {"components": {ETCD: "present", APISERVER: "present"},
                                           "apiserver_stacked": False, "running": running, "unasked": {}}))
    return out


def refusal(not_running: Dict[str, List[str]], targets: List[str], verb: str, serial: int,
            ansible: bool = False) -> str:
    with pytest.raises(CpctlError) as caught:
        preflight(census(not_running), set(targets), verb, [ETCD], parse_serial(serial), False, "why",
                  ansible=ansible)
    assert caught.value.code == ExitCode.REFUSED
    hint = caught.value.hint
    assert "--force" not in hint and "wait" not in hint
    return hint


def test_the_hint_names_the_members_not_running_and_no_serial_for_a_one_at_a_time_run() -> None:
    hint = refusal({ETCD: ["m2"]}, ["m1"], "restart", 1)
    assert "etcd does not run on m2: bring it back there first (cpctl start etcd on that master" in hint
    assert "serial" not in hint
    hint = refusal({ETCD: ["m2", "m3"]}, ["m1"], "restart", 1)
    assert "etcd does not run on m2, m3" in hint


def test_serial_1_only_when_the_run_was_parallel() -> None:
    hint = refusal({}, list(MASTERS), "restart", 3)
    assert hint == "change one master at a time (--serial 1)"
    # a stop is not undone between batches: one at a time would not help, so it is not offered
    hint = refusal({}, ["m1", "m2"], "stop", 1)
    assert "serial" not in hint
    assert "etcd runs on all 3 members now: this change alone would take down more than the 1 the cluster can " \
           "lose" in hint


def test_under_ansible_the_hint_speaks_of_the_play() -> None:
    hint = refusal({}, list(MASTERS), "restart", 3, ansible=True)
    assert hint == "change one master at a time (serial: 1 in the play)"
    hint = refusal({ETCD: ["m3"]}, ["m1"], "restart", 1, ansible=True)
    assert "etcd does not run on m3: bring it back there first (a static_pod task with state: started)" in hint
    assert "cpctl" not in hint and "-H" not in hint


def test_nothing_refused_when_quorum_holds() -> None:
    assert preflight(census({}), {"m1"}, "restart", [ETCD], parse_serial(1), False, "why") == "why"


def _ctx(tmp_path: Path, task_dir: Path) -> click.Context:
    inventory = task_dir / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"m1": {"host": "10.0.0.1", "port": 2222, "user": "ops"}}}}))
    state = CliState(Settings(manifests_dir=None, state_dir="/var/lib/cpctl"))
    state.remote = RemoteOptions(["m1"], str(inventory), SSHOptions(ssh_config=str(task_dir / "ssh_config"),
                                                                    known_hosts=[str(tmp_path / "known_hosts")]))
    return click.Context(click.Command("status"), obj=state)


def test_hints_under_ansible_name_no_file_of_the_task(tmp_path: Path, monkeypatch: Any) -> None:
    from cpctl.cli.fanout import host_invocation, run_hint
    from cpctl.fleet.targets import select_specs
    task_dir = tmp_path / "cpctl-ansible-x"
    task_dir.mkdir()
    ctx = _ctx(tmp_path, task_dir)
    (spec,) = select_specs(ctx.obj.remote)
    with ctx:
        outside = " ".join(host_invocation(ctx, spec))          # a person's own files: named as given
        assert outside == "-i %s -H m1 --ssh-config %s --known-hosts %s" % (
            task_dir / "inventory.json", task_dir / "ssh_config", tmp_path / "known_hosts")
        monkeypatch.setenv(ANSIBLE_TASK_DIR, str(task_dir))
        inside = " ".join(host_invocation(ctx, spec))
        assert str(task_dir) not in inside and inside == "-H ops@10.0.0.1:2222 --known-hosts %s" % (
            tmp_path / "known_hosts")
        whole = run_hint(ctx, "status")
        assert str(task_dir) not in whole and "-H ops@10.0.0.1:2222" in whole and whole.endswith(" status")


class _SettlingWaiter:
    """A waiter whose pod stays present and Ready: the heartbeat lines of a settle, collected."""

    def __init__(self) -> None:
        self.lines: List[str] = []

    def progress(self, text: str) -> None:
        self.lines.append(text)

    def settle_view(self, target: Any) -> Dict[str, Any]:
        return {"present": True, "ready": True, "source": "api"}

    def mirror_note(self, target: Any) -> str:
        return ""


def test_no_heartbeat_says_verified_before_the_verdict(monkeypatch: Any) -> None:
    """The settle after a new pod came up Ready is part of the verdict (a crash loop then is rolled
    back): its heartbeat says Ready and settling, never "verified"; the result after it may."""
    from types import SimpleNamespace

    from cpctl.ops import edits
    from cpctl.probes.base import WaitResult
    monkeypatch.setattr(edits, "SETTLE_POLL", 0.01)
    waiter = _SettlingWaiter()
    node = SimpleNamespace(waiter=waiter)
    target = SimpleNamespace(mirror_name="kube-scheduler-m1")
    result = edits._settle(node, target, WaitResult(True, "pod kube-scheduler-m1 Running and Ready"),  # type: ignore
                           edits.ApplyOptions(settle=0.05))
    assert result.verified and "stable for" in result.detail
    assert waiter.lines and all("verified" not in line for line in waiter.lines), waiter.lines
    assert waiter.lines[0].startswith("pod kube-scheduler-m1 Ready; settling before the verdict, ")

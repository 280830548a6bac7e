"""Commit-confirmed changes over SSH (issue #25 item 2): three real sshd, nothing of cpctl on the
masters. ``--confirm-within`` writes the stdlib agent and a revert plan into each master's state dir
and starts a detached process there; the revert happens after the operator's cpctl is SIGKILLed and
its SSH connections dropped. ``confirm`` fans out; a rolling change stops arming at the first master
that fails."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import os
import signal
from typing import Any, Dict, Iterator, List

import pytest

from tests.fleet.test_remote_fleet import Fleet, _statuses
from tests.labfixture import lab3, wait_for  # noqa: F401
from tests.remoteutil import read_history, write_inventory
from tests.sshfixture import SSHServer, sshd_many  # noqa: F401

pytestmark = pytest.mark.timeout(400)
FAST = ("--timeout", "60", "--settle", "1")


@pytest.fixture
def fleet(sshd_many: List[SSHServer], lab3: Any, tmp_path: Any) -> Iterator[Fleet]:
    yield Fleet(sshd_many, lab3, str(tmp_path))


def _manifest(fleet: Fleet, i: int) -> bytes:
    with open(os.path.join(fleet.manifests(i), "kube-scheduler.yaml"), "rb") as handle:
        return handle.read()


def _arm(fleet: Fleet, i: int) -> str:
    return os.path.join(fleet.state(i), "confirm", "kube-scheduler.yaml.json")


def _actions(fleet: Fleet, i: int) -> List[str]:
    return [r["action"] for r in read_history(fleet.state(i)) if r.get("component") == "kube-scheduler"]


def _confirm_files(fleet: Fleet, i: int) -> List[str]:
    where = os.path.join(fleet.state(i), "confirm")
    return sorted(n for n in os.listdir(where) if not n.endswith(".log")) if os.path.isdir(where) else []


def test_the_masters_revert_by_themselves_after_cpctl_and_its_ssh_die(fleet: Fleet) -> None:
    originals: Dict[int, bytes] = {i: _manifest(fleet, i) for i in (1, 2, 3)}
    proc = fleet.popen("flags", "scheduler", "--set", "v=4", "--confirm-within", "25s", *FAST)
    try:
        wait_for(lambda: all(os.path.exists(_arm(fleet, i)) for i in (1, 2, 3)), 150, "armed on every master")
    finally:
        proc.send_signal(signal.SIGKILL)          # cpctl dies; its SSH connections drop with it
        proc.communicate()
    for i in (1, 2, 3):
        armed = json.loads(open(_arm(fleet, i)).read())
        assert armed["timer"] == "process" and armed["pid"] > 1, armed
        assert _manifest(fleet, i) != originals[i]
        names = _confirm_files(fleet, i)
        assert any(n.endswith(".agent.py") for n in names) and any(n.endswith(".plan") for n in names), names
    for i in (1, 2, 3):
        wait_for(lambda i=i: _manifest(fleet, i) == originals[i], 120, "master%d reverted" % i)
        wait_for(lambda i=i: "reverted" in _actions(fleet, i), 120, "master%d: the revert's verdict" % i)
        records = [r for r in read_history(fleet.state(i)) if r.get("component") == "kube-scheduler"]
        assert [r["action"] for r in records] == ["flags", "armed", "rollback", "reverted"], records
        assert records[2]["unconfirmed"] is True and "node-side plan" in records[2]["origin"]
        assert records[3]["outcome"] == "verified", records[3]
        assert not os.path.exists(_arm(fleet, i))
        assert not os.path.exists(os.path.join(fleet.state(i), "journal.json"))
        # the revert over, the agent removes the arm's files - its log too (issue 49) - then exits: 60 s
        # for a process to be scheduled on a machine whose cores are busy (issue 44)
        where = os.path.join(fleet.state(i), "confirm")
        wait_for(lambda where=where: not os.listdir(where), 60, "the arm's files and log removed")
    # the next cpctl command sees a clean node: status without warnings about it
    doc = fleet.json("status", "scheduler")
    assert _statuses(doc) == [("master1", "ok"), ("master2", "ok"), ("master3", "ok")]


def test_confirm_fans_out_and_a_rolling_change_stops_arming_at_a_failure(fleet: Fleet) -> None:
    # master2 alone has an unconfirmed change already
    only2 = write_inventory(os.path.join(fleet.tmp, "only2.yaml"), {"master2": fleet.hosts["master2"]})
    fleet.json("flags", "scheduler", "--set", "v=3", "--confirm-within", "5m", *FAST, inv=only2)
    before3 = _manifest(fleet, 3)
    doc = fleet.json("flags", "scheduler", "--set", "v=4", "--confirm-within", "5m", *FAST, rc=4)
    assert _statuses(doc) == [("master1", "changed"), ("master2", "failed"), ("master3", "skipped")], doc
    assert "has an unconfirmed change" in json.dumps(doc)
    assert os.path.exists(_arm(fleet, 1)) and os.path.exists(_arm(fleet, 2)) and not os.path.exists(_arm(fleet, 3))
    assert _manifest(fleet, 3) == before3
    pids = [json.loads(open(_arm(fleet, i)).read())["pid"] for i in (1, 2)]
    doc = fleet.json("confirm", "--all", "--reason", "all good")
    assert [h["status"] for h in doc["hosts"]] == ["changed", "changed", "ok"], doc
    for i in (1, 2):
        assert not os.path.exists(_arm(fleet, i)) and _confirm_files(fleet, i) == [], _confirm_files(fleet, i)
        assert _actions(fleet, i)[-1] == "confirmed"
    wait_for(lambda: not any(os.path.exists("/proc/%d/cmdline" % p) and
                             open("/proc/%d/stat" % p).read().split(") ", 1)[1][0] != "Z" for p in pids),
             60, "the node-side revert processes stopped")    # stopped by confirm; exit once scheduled

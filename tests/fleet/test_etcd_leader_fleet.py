"""Issue 46 over SSH: ``cpctl -i INV -H MASTER restart etcd`` on the master whose member leads moves its
leadership first - asked by that master's agent (its etcd client certificate, its loopback client URL),
through a real sshd - on the lab's ``ha`` profile with the real etcd (3 members)."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, List

import pytest

from tests.lab.test_lab_etcd_leader import _members
from tests.lab.test_lab_realetcd import real_etcd  # noqa: F401 - the fixture
from tests.remoteutil import Cli, clean_env, lab_vars, read_history, write_inventory
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(600)
NAMES = ["master1", "master2", "master3"]


def test_restart_of_etcd_over_ssh_moves_leadership_first(real_etcd: Any, sshd_many: List[SSHServer],  # noqa: F811
                                                         lab_factory: Callable[..., Any], tmp_path: Any) -> None:
    lab = lab_factory(profile="ha")
    cli = Cli(sshd_many[0].ssh_config, sshd_many[0].known_hosts, clean_env(str(tmp_path / "home")))
    hosts = {name: dict(host=name, **lab_vars(lab, i + 1)) for i, name in enumerate(NAMES)}
    inventory = write_inventory(os.path.join(str(tmp_path), "inv.yaml"), hosts)
    leader, names = _members(lab, 1)
    here = next(m for m in (1, 2, 3) if lab.node_name(m) == names[leader])
    run = cli.run("-i", inventory, "-H", NAMES[here - 1], "restart", "etcd", "--reason", "over ssh", timeout=300)
    now, _ = _members(lab, 1 if here != 1 else 2)
    assert now != leader and now in names
    assert "etcd leadership moved from %s to %s before restart of etcd" % (names[leader], names[now]) in run.stdout
    records = [r for r in read_history(lab_vars(lab, here)["state_dir"]) if r["action"] == "etcd-move-leader"]
    assert [(r["member"], r["to"]) for r in records] == [(names[leader], names[now])]
    assert json.dumps(records[0]).count("before restart of etcd") == 1

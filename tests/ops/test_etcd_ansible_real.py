"""Issue 46: the collection's etcd modules (etcd_info, etcd_defrag, etcd_alarm) against a real 3-member
etcd (tests.realetcd), each member seen as a master (tests.etcdnodes), run by the real ansible-playbook
with ``connection: local`` (cpctl runs on this machine with the member's node options, as on a master).
What the modules say is put next to etcd's own answers (etcdctl, its status), check mode next to what a
real run then does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests import etcdnodes as en
from tests.ops.test_etcdcare_real import QUOTA, _fill_history
from tests.realetcd import RealEtcd
from tests.system.test_ansible_local import ansible, recap

pytestmark = pytest.mark.timeout(900)


def _inventory(cluster: RealEtcd, name: str, tmp: Path) -> str:
    """The one master (member ``name``) as a local host; ``tmp`` (the play's dir) made."""
    tmp.mkdir(parents=True, exist_ok=True)
    args = en.node_args(cluster, name)
    values = dict(zip(args[::2], args[1::2]))
    return ("[master]\n%s ansible_connection=local ansible_python_interpreter=%s cpctl_node_name=%s "
            "cpctl_manifests_dir=%s cpctl_state_dir=%s cpctl_node_root=%s cpctl_kubeconfig=%s\n" % (
                name, sys.executable, values["--node-name"], values["--manifests-dir"], values["--state-dir"],
                values["--node-root"], values["--kubeconfig"]))


def _play(tasks: str) -> str:
    return "- hosts: master\n  gather_facts: false\n  tasks:\n" + tasks


def _run(tmp: Path, cluster: RealEtcd, tasks: str, *args: str) -> Any:
    """ansible-playbook of ``tasks`` on member m1's node, in ``tmp``."""
    return ansible(tmp, _inventory(cluster, "m1", tmp), _play(tasks), *args)


def _show(register: str) -> str:
    """A task that prints a registered result as one parseable line."""
    return ("    - ansible.builtin.debug: {msg: \"RESULT {{ %s | to_json }}\"}\n" % register)


def test_etcd_info_matches_etcdctl_and_changes_nothing(real_etcd: RealEtcd, tmp_path: Path) -> None:
    tasks = ("    - cpctl.controlplane.etcd_info: {defrag_plan: true, min_free: '0', min_ratio: 0}\n"
             "      register: info\n" + _show("info") +
             "    - cpctl.controlplane.etcd_info:\n      check_mode: true\n      register: checked\n"
             + _show("checked"))
    proc = _run(tmp_path, real_etcd, tasks)
    assert proc.returncode == 0 and recap(proc.stdout)["m1"][1] == 0, proc.stdout + proc.stderr   # changed=0
    info, checked = _debug(proc.stdout)
    members = {m["ID"]: m for m in real_etcd.member_list()}
    assert sorted(int(m["id"], 16) for m in info["etcd"]["members"]) == sorted(members)
    assert info["etcd"]["voters_healthy"] == 3 and info["changed"] is False
    assert {s["member"] for s in info["defrag_plan"]} == {"m1", "m2", "m3"}
    assert info["defrag_plan"][-1]["member"] == info["etcd"]["leader"]          # the leader last
    assert checked["etcd"]["leader"] == info["etcd"]["leader"] and checked["changed"] is False
    assert en.history(real_etcd, "m1") == []


def _debug(stdout: str) -> List[Dict[str, Any]]:
    """The RESULT lines the debug tasks printed (the default callback quotes them in "msg")."""
    found = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith('"msg": "RESULT '):
            found.append(json.loads(json.loads(line[len('"msg": '):])[len("RESULT "):]))
    return found


def test_etcd_defrag_check_mode_then_a_real_run_then_nothing_to_do(real_etcd: RealEtcd, tmp_path: Path) -> None:
    en.garbage(real_etcd, 20)
    sizes = {m: s["dbSize"] for m, s in en.statuses(real_etcd).items()}
    task = "    - cpctl.controlplane.etcd_defrag: {all: true, min_free: 1MiB, min_ratio: 0.3}\n      register: d\n"
    checked = _run(tmp_path / "check", real_etcd, task + _show("d"), "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    plan = _debug(checked.stdout)[0]
    assert plan["changed"] is True and [s["action"] for s in plan["steps"]] == ["defrag"] * 3
    assert {m: s["dbSize"] for m, s in en.statuses(real_etcd).items()} == sizes      # check mode: nothing
    assert en.history(real_etcd, "m1") == []
    run = _run(tmp_path / "run", real_etcd, task + _show("d"))
    assert run.returncode == 0, run.stdout + run.stderr
    done = _debug(run.stdout)[0]
    assert done["changed"] is True and [s["member"] for s in done["steps"]] == [s["member"] for s in plan["steps"]]
    after = en.statuses(real_etcd)
    assert all(after[m]["dbSize"] < sizes[m] for m in sizes)
    assert [r["action"] for r in en.history(real_etcd, "m1")].count("etcd-defrag") == 3
    again = _run(tmp_path / "again", real_etcd, task + _show("d"))
    assert again.returncode == 0 and _debug(again.stdout)[0]["changed"] is False      # below the thresholds now
    both = _run(tmp_path / "both", real_etcd, "    - cpctl.controlplane.etcd_defrag: {all: true, members: [m1]}\n")
    assert both.returncode == 2 and "name the members, or all: true" in both.stdout, both.stdout


def test_etcd_alarm_recovers_a_real_nospace_with_diff_and_check_mode(real_etcd_factory: Any, tmp_path: Path) -> None:
    cluster = real_etcd_factory(quota_backend_bytes=QUOTA)
    _fill_history(cluster)
    theirs = sorted((a["memberID"], a["alarm"]) for a in cluster.alarms())
    task = "    - cpctl.controlplane.etcd_alarm: {recover_space: true}\n      register: a\n"
    checked = _run(tmp_path / "check", cluster, task + _show("a"), "--check", "--diff")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    plan = _debug(checked.stdout)[0]
    assert plan["changed"] is True and sorted((int(a["member_id"], 16), a["alarm"]) for a in plan["disarmed"]) == theirs
    assert len(plan["steps"]) == 3 and "+++ after: active etcd alarms" in checked.stdout
    assert sorted((a["memberID"], a["alarm"]) for a in cluster.alarms()) == theirs       # still armed
    run = _run(tmp_path / "run", cluster, task + _show("a"), "--diff")
    assert run.returncode == 0, run.stdout + run.stderr
    done = _debug(run.stdout)[0]
    assert done["changed"] is True and done["alarms"] == [] and cluster.alarms() == []
    assert cluster.put(b"/after-ansible", b"x")[0] == 200
    again = _run(tmp_path / "again", cluster, task + _show("a"))
    assert again.returncode == 0 and _debug(again.stdout)[0]["changed"] is False
    wrong = _run(tmp_path / "wrong", cluster,
                 "    - cpctl.controlplane.etcd_alarm: {recover_space: true, alarms: [CORRUPT]}\n")
    assert wrong.returncode == 2 and "recover_space goes with alarms: [NOSPACE] only" in wrong.stdout

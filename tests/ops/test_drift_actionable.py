"""Drift you can act on (issue #23, item 4): every finding says how to fix it, ``status`` lists a
manifest that vanished (state ``missing``), the metrics tell missing from parked, and
``check --fix --restore-missing`` writes a vanished manifest back from the baseline's copy through
the journal (its SIGKILL test is in tests/core/test_journal_kill.py, kind ``restore-missing``)."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from tests.coreutil import MANIFESTS, NodeDirs, tamper_baseline_copy
from tests.ops.test_drift import check_json, cli, kinds

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]


def _vanished(tmp_path: Any) -> NodeDirs:
    """A node with a baseline, whose scheduler manifest was then removed by hand."""
    node = NodeDirs(str(tmp_path / "node"))
    node.run("baseline")
    os.unlink(os.path.join(node.manifests, "kube-scheduler.yaml"))
    return node


def test_every_finding_carries_its_fix_in_json_and_text(capsys: Any, tmp_path: Any) -> None:
    node = _vanished(tmp_path)
    with open(os.path.join(node.manifests, "kube-apiserver.yaml.bak"), "wb") as handle:
        handle.write(MANIFESTS["kube-apiserver.yaml"])
    node.run("stop", "controller-manager", "--for", "1s")
    os.utime(os.path.join(node.state, "meta", "kube-controller-manager.yaml.json"))
    time.sleep(1.2)
    rc, data, _ = check_json(capsys, node)
    assert rc == 1
    found = kinds(data)
    assert {"missing", "stray", "duplicate", "overdue_park"} <= set(found), found.keys()
    assert all(isinstance(f.get("fix"), str) and f["fix"] for f in data["findings"]), data["findings"]
    assert found["missing"][0]["fix"].startswith("cpctl check --fix --restore-missing")
    assert found["stray"][0]["fix"] == "cpctl check --fix --remove-strays --allow-restart"
    assert found["overdue_park"][0]["fix"].startswith("cpctl start kube-controller-manager")
    rc, out, _ = cli(capsys, node, "check")
    assert rc == 1
    fixes = [line.strip() for line in out.splitlines() if line.strip().startswith("how to fix:")]
    assert len(fixes) == len(data["findings"]), out
    assert "how to fix: cpctl check --fix --restore-missing (writes it back from the baseline's copy)" in fixes


def test_status_lists_a_vanished_manifest_as_missing(capsys: Any, tmp_path: Any) -> None:
    node = _vanished(tmp_path)
    rc, out, _ = cli(capsys, node, "-o", "json", "status")
    assert rc == 0
    rows = {r["component"]: r for r in json.loads(out)["components"]}
    assert rows["kube-scheduler"]["state"] == "missing" and rows["kube-scheduler"]["file"] == "kube-scheduler.yaml"
    rc, out, _ = cli(capsys, node, "status", "scheduler")
    assert rc == 0
    assert re.search(r"kube-scheduler\s+kube-scheduler\.yaml\s+missing\s", out), out
    assert "cpctl check --fix --restore-missing" in out
    rc, out, _ = cli(capsys, node, "is-running", "scheduler")
    assert rc == 1 and "kube-scheduler: missing" in out


def test_metrics_tell_missing_from_parked_and_running(capsys: Any, tmp_path: Any) -> None:
    node = _vanished(tmp_path)
    node.run("stop", "controller-manager")
    prom = str(tmp_path / "cpctl.prom")
    rc, _, _ = cli(capsys, node, "check", "--prometheus-textfile", prom)
    assert rc == 1
    with open(prom) as handle:
        text = handle.read()
    assert 'cpctl_component_missing{component="kube-scheduler"} 1' in text
    assert 'cpctl_component_parked{component="kube-scheduler"} 0' in text
    assert 'cpctl_component_missing{component="kube-controller-manager"} 0' in text
    assert 'cpctl_component_parked{component="kube-controller-manager"} 1' in text
    assert 'cpctl_component_missing{component="kube-apiserver"} 0' in text
    helps = [line for line in text.splitlines() if line.startswith("# HELP cpctl_component")]
    assert not [h for h in helps if "when running" in h], "not parked is not running: %s" % helps


def test_restore_missing_writes_the_baseline_copy_back(capsys: Any, tmp_path: Any) -> None:
    node = _vanished(tmp_path)
    rc, out, err = cli(capsys, node, "check", "--restore-missing")
    assert rc == 2 and "--restore-missing only works together with --fix" in err
    rc, data, _ = check_json(capsys, node, "--fix", "--restore-missing", "--dry-run")
    assert [a["action"] for a in data["actions"]] == ["restore-missing"] and data["actions"][0]["ok"]
    assert not os.path.exists(os.path.join(node.manifests, "kube-scheduler.yaml")), "dry-run changes nothing"
    rc, data, _ = check_json(capsys, node, "--fix")
    assert rc == 1 and not data["actions"], "without --restore-missing nothing is written back"
    rc, data, _ = check_json(capsys, node, "--fix", "--restore-missing")
    assert rc == 0, data
    assert data["actions"][0]["action"] == "restore-missing" and data["actions"][0]["ok"], data["actions"]
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == SCHEDULER, "the baseline's bytes, exactly"
    assert os.stat(os.path.join(node.manifests, "kube-scheduler.yaml")).st_mode & 0o777 == 0o600
    record = node.history()[-1]
    assert record["action"] == "restore-missing" and record["file"] == "kube-scheduler.yaml"
    assert record["origin"] == "cpctl check --fix"
    rc, data, _ = check_json(capsys, node)
    assert rc == 0 and not kinds(data).get("missing")


def test_restore_missing_refuses_a_tampered_baseline_copy(capsys: Any, tmp_path: Any) -> None:
    node = _vanished(tmp_path)
    tamper_baseline_copy(node, "kube-scheduler.yaml")
    rc, data, _ = check_json(capsys, node, "--fix", "--restore-missing")
    assert rc == 1
    action = data["actions"][0]
    assert not action["ok"] and "does not match its recorded checksum" in action["message"]
    assert not os.path.exists(os.path.join(node.manifests, "kube-scheduler.yaml"))


def test_every_finding_kind_has_a_fix() -> None:
    """Each kind the check can report (its documented list) has its fix command: a new kind
    without one would end a check in an internal error."""
    from cpctl.ops import drift
    for kind in drift.KINDS:
        assert drift.how_to_fix(kind, "x.yaml", "x", {}), kind

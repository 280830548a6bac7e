"""Parked manifests are part of the work (issue #23, item 3): ``flags``/``apply``/``edit --parked``
change the parked copy through the journal (validated, kept as a revision, not waited for), listing
a parked component's flags works, and ``start`` says when the parked copy was edited by hand and
keeps what cpctl parked as a revision first. SIGKILL tests: tests/core/test_journal_kill.py
(``apply-parked``, ``start-edited``); against the lab, HA included: tests/system/test_etcd_restore_lab.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.coreutil import MANIFESTS, NodeDirs, sha

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]


def _parked(tmp_path: Any) -> NodeDirs:
    node = NodeDirs(str(tmp_path / "node"))
    node.run("baseline")
    node.run("stop", "scheduler", "--reason", "maintenance")
    return node


def _parked_bytes(node: NodeDirs) -> bytes:
    with open(os.path.join(node.parked, "kube-scheduler.yaml"), "rb") as handle:
        return handle.read()


def test_listing_a_parked_components_flags_works(tmp_path: Any) -> None:
    node = _parked(tmp_path)
    proc = node.run("flags", "scheduler")
    assert "--leader-elect=true" in proc.stdout.splitlines()
    assert "kube-scheduler is parked" in proc.stderr or "scheduler is parked" in proc.stderr
    doc = json.loads(node.run("-o", "json", "flags", "scheduler", "--parked").stdout)
    assert doc["parked"] is True and {"name": "leader-elect", "value": "true", "in": "command"} in doc["flags"]


def test_flags_parked_changes_the_parked_copy_through_the_journal(tmp_path: Any) -> None:
    node = _parked(tmp_path)
    refused = node.run("flags", "scheduler", "--set", "v=4", rc=4)
    assert "--parked" in refused.stderr, "the refusal names the way to change the parked copy"
    dry = node.run("flags", "scheduler", "--parked", "--set", "v=4", "--dry-run")
    assert "+    - --v=4" in dry.stdout and _parked_bytes(node) == SCHEDULER, "dry-run changes nothing"
    proc = node.run("flags", "scheduler", "--parked", "--set", "v=4", "--reason", "debug after start")
    assert "in the parked copy" in proc.stdout and "revision 1" in proc.stdout
    new = _parked_bytes(node)
    assert b"    - --v=4\n" in new
    assert node.present() == [f for f in sorted(MANIFESTS) if f != "kube-scheduler.yaml"], "not started"
    record = node.history()[-1]
    assert record["action"] == "flags" and record["parked"] is True and record["revision"] == 1
    with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1"), "rb") as handle:
        assert handle.read() == SCHEDULER
    with open(os.path.join(node.state, "meta", "kube-scheduler.yaml.json")) as handle:
        meta = json.load(handle)
    assert meta["checksum"] == sha(new) and meta["reason"] == "maintenance", "the park itself is unchanged"
    node.run("check")                          # the baseline follows cpctl's own change: no drift
    bad = node.run("flags", "scheduler", "--parked", "--set", "bind-adress=0.0.0.0", rc=4)
    assert "has no flag --bind-adress" in bad.stderr and _parked_bytes(node) == new
    started = node.run("start", "scheduler")
    assert "changed outside cpctl" not in started.stdout, "cpctl's own change is not a hand edit"
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == new


def test_parked_refused_when_not_parked(tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path / "node"))
    proc = node.run("flags", "scheduler", "--parked", "--set", "v=4", rc=4)
    assert "is not parked" in proc.stderr and "drop --parked" in proc.stderr


def test_apply_and_edit_parked(tmp_path: Any) -> None:
    node = _parked(tmp_path)
    new = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=2\n")
    path = tmp_path / "new.yaml"
    path.write_bytes(new)
    node.run("apply", "scheduler", "--parked", "-f", str(path))
    assert _parked_bytes(node) == new
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\np = sys.argv[1]\ns = open(p).read().replace('--v=2', '--v=3')\n"
                      "open(p, 'w').write(s)\n")
    proc = subprocess.run(node.argv("edit", "scheduler", "--parked", "--yes"), capture_output=True, text=True,
                          env=node.env(EDITOR="%s %s" % (sys.executable, editor)), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"--v=3" in _parked_bytes(node)
    assert [r["action"] for r in node.history()][-2:] == ["apply", "edit"]
    assert [r.get("revision") for r in node.history()][-2:] == [1, 2]


def test_start_says_the_parked_copy_was_edited_by_hand_and_keeps_the_original(tmp_path: Any) -> None:
    node = _parked(tmp_path)
    edited = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=5\n")
    with open(os.path.join(node.parked, "kube-scheduler.yaml"), "wb") as handle:
        handle.write(edited)
    dry = node.run("start", "scheduler", "--dry-run")
    assert "changed outside cpctl" in dry.stdout
    proc = node.run("start", "scheduler")
    assert "the parked copy was changed outside cpctl since it was parked" in proc.stdout
    assert "what cpctl parked is kept as revision 1" in proc.stdout
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == edited, "the operator's edit is what runs"
    with open(os.path.join(node.state, "revisions", "kube-scheduler.yaml.1"), "rb") as handle:
        assert handle.read() == SCHEDULER, "what cpctl parked is kept"
    record = node.history()[-1]
    assert record["action"] == "start" and record["revision"] == 1 and "changed outside cpctl" in record["hand_edited"]
    doc = json.loads(node.run("-o", "json", "revisions", "scheduler").stdout)
    assert [r["number"] for r in doc["revisions"]] == [1]

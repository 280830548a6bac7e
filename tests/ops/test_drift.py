"""cpctl baseline / check: every finding kind, --fix, --remove-strays, exit codes, textfile metrics."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Optional

import pytest

from cpctl.cli.main import run
from cpctl.core.settings import Settings
from cpctl.host.local import LocalHost
from cpctl.ops import drift, wiring
from cpctl.ops import lifecycle as app
from cpctl.probes.base import NoWait, PodTarget, Waiter
from tests.coreutil import MANIFESTS, NODE, NodeDirs, edit_baseline, journal_for, sealed, sha

POD = MANIFESTS["kube-scheduler.yaml"]


def cli(capsys: Any, node: NodeDirs, *args: str) -> tuple:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    rc = run(["--manifests-dir", node.manifests, "--state-dir", node.state, "--probe", "none",
              "--node-name", NODE, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def check_json(capsys: Any, node: NodeDirs, *args: str) -> tuple:
    rc, out, err = cli(capsys, node, "-o", "json", "check", *args)
    return rc, json.loads(out), err


def kinds(data: dict, key: str = "findings") -> dict:
    found: dict = {}
    for f in data[key]:
        found.setdefault(f["kind"], []).append(f)
    return found


def write(node: NodeDirs, name: str, data: bytes) -> None:
    with open(os.path.join(node.manifests, name), "wb") as handle:
        handle.write(data)


def edit_meta(node: NodeDirs, filename: str, **changes: Any) -> None:
    path = os.path.join(node.state, "meta", filename + ".json")
    with open(path) as handle:
        meta = json.load(handle)
    meta.update(changes)
    with open(path, "w") as handle:
        json.dump(meta, handle)


def open_node(node: NodeDirs, waiter: Optional[Waiter] = None) -> Any:
    settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")
    opened = wiring.open_node(settings, LocalHost())
    opened.waiter = waiter or NoWait()
    return opened


# --- clean state, baseline ---------------------------------------------------------------------

def test_clean_node_exits_0_and_notes_missing_baseline(capsys: Any, node: NodeDirs) -> None:
    rc, data, err = check_json(capsys, node)
    assert rc == 0 and err == ""
    assert data["drift"] is False
    assert set(kinds(data)) == {"no_baseline", "check_skipped"}
    assert all(f["severity"] == "info" for f in data["findings"])
    assert not os.path.exists(node.state), "a read-only check must not create the state dir"


def test_check_with_probe_none_never_says_ok_about_the_pods_it_did_not_look_at(capsys: Any, node: NodeDirs) -> None:
    """Issue 49: ``--probe none`` looks at the files only; its last line says so instead of "OK"."""
    cli(capsys, node, "baseline")
    rc, out, _ = cli(capsys, node, "check")
    last = out.strip().splitlines()[-1]
    assert rc == 0 and not last.startswith("OK"), out
    assert last == "no drift in the files on %s; its pods NOT checked (the probe cannot describe pods)" % NODE


def test_baseline_records_content_and_keeps_it_without_accept(capsys: Any, node: NodeDirs) -> None:
    rc, out, _ = cli(capsys, node, "baseline")
    assert rc == 0 and "recorded" in out
    with open(os.path.join(node.state, "baseline.json")) as handle:
        recorded = json.load(handle)
    assert os.stat(os.path.join(node.state, "baseline.json")).st_mode & 0o777 == 0o600
    entry = recorded["manifests"]["kube-scheduler.yaml"]
    assert entry["content"].encode() == POD and entry["checksum"] == sha(POD) and entry["pod"] == "kube-scheduler"
    write(node, "kube-scheduler.yaml", POD + b"# edited\n")
    rc, out, _ = cli(capsys, node, "baseline")
    assert rc == 0 and "changed kube-scheduler.yaml" in out and "--accept" in out
    rc, out, _ = cli(capsys, node, "baseline", "--accept")
    assert rc == 0 and "replaced" in out
    assert check_json(capsys, node)[0] == 0


def test_baseline_refuses_to_bless_a_stray(capsys: Any, node: NodeDirs) -> None:
    write(node, "kube-apiserver.yaml.bak", MANIFESTS["kube-apiserver.yaml"])
    rc, out, err = cli(capsys, node, "baseline")
    assert rc == 4 and "kube-apiserver.yaml.bak" in err and out == ""


# --- each finding kind -------------------------------------------------------------------------

def test_overdue_park_past_deadline_and_max_parked(capsys: Any, node: NodeDirs) -> None:
    assert cli(capsys, node, "stop", "scheduler", "--for", "1h", "--no-wait")[0] == 0
    assert cli(capsys, node, "stop", "controller-manager", "--no-wait")[0] == 0
    assert check_json(capsys, node)[0] == 0, "a park within its deadline is no drift"
    edit_meta(node, "kube-scheduler.yaml", until="2000-01-01T00:00:00Z")
    edit_meta(node, "kube-controller-manager.yaml", parked_at="2000-01-01T00:00:00Z")
    rc, data, err = check_json(capsys, node, "--max-parked", "4h")
    assert rc == 1 and json.loads(err)["error"] == {"code": 1, "reason": "drift", "message": "drift found: 2 problems",
                                                     "hint": ""}
    overdue = {f["component"]: f for f in kinds(data)["overdue_park"]}
    assert overdue["kube-scheduler"]["severity"] == "critical" and "deadline" in overdue["kube-scheduler"]["message"]
    assert overdue["kube-controller-manager"]["severity"] == "warning"
    assert "--max-parked" in overdue["kube-controller-manager"]["message"]
    assert data["parked"]["kube-controller-manager"] > 20 * 365 * 86400


def test_missing_changed_unexpected(capsys: Any, node: NodeDirs) -> None:
    assert cli(capsys, node, "baseline")[0] == 0
    os.unlink(os.path.join(node.manifests, "etcd.yaml"))
    write(node, "kube-scheduler.yaml", POD.replace(b"leader-elect=true", b"leader-elect=false"))
    write(node, "extra.yaml", POD.replace(b"name: kube-scheduler", b"name: extra"))
    rc, data, _ = check_json(capsys, node)
    assert rc == 1
    found = kinds(data)
    assert [f["file"] for f in found["missing"]] == ["etcd.yaml"] and found["missing"][0]["severity"] == "critical"
    diff = found["changed"][0]["diff"]
    assert "--- baseline/kube-scheduler.yaml" in diff
    assert "-    - --leader-elect=true\n" in diff and "+    - --leader-elect=false\n" in diff
    assert [f["file"] for f in found["unexpected"]] == ["extra.yaml"]
    rc, out, _ = cli(capsys, node, "check")
    assert "+    - --leader-elect=false" in out and out.rstrip().endswith("(1 critical, 2 warning)")


def test_a_comment_only_edit_is_an_info_note_not_drift(capsys: Any, node: NodeDirs) -> None:
    """The kubelet decodes the same pod (same config hash): no drift (exit 0), but it is shown."""
    assert cli(capsys, node, "baseline")[0] == 0
    write(node, "kube-scheduler.yaml", b"# reviewed 2026-12-03\n" + POD.replace(b"kind: Pod", b"kind: 'Pod'"))
    rc, data, _ = check_json(capsys, node)
    assert rc == 0, data
    [finding] = kinds(data)["changed"]
    assert finding["severity"] == "info" and "only in comments, formatting or API defaults" in finding["message"]
    assert "+# reviewed 2026-12-03" in finding["diff"]


def test_api_defaults_written_out_are_an_info_note_not_drift(capsys: Any, node: NodeDirs) -> None:
    """The kubelet's rule (issue #21): a default written out keeps the same pod, so no drift."""
    assert cli(capsys, node, "baseline")[0] == 0
    write(node, "kube-scheduler.yaml", POD.replace(b"spec:\n", b"spec:\n  restartPolicy: Always\n  dnsPolicy: "
                                                   b"ClusterFirst\n  enableServiceLinks: true\n", 1))
    rc, data, _ = check_json(capsys, node)
    assert rc == 0, data
    [finding] = kinds(data)["changed"]
    assert finding["severity"] == "info" and "+  restartPolicy: Always" in finding["diff"]


def test_parked_by_cpctl_is_not_missing_and_parked_content_is_compared(capsys: Any, node: NodeDirs) -> None:
    assert cli(capsys, node, "baseline")[0] == 0
    assert cli(capsys, node, "stop", "etcd", "--no-wait")[0] == 0
    assert check_json(capsys, node)[0] == 0
    with open(os.path.join(node.parked, "etcd.yaml"), "r+b") as handle:
        tampered = handle.read().replace(b"data-dir=/var/lib/etcd", b"data-dir=/tmp/etcd")
        handle.seek(0)
        handle.write(tampered)
        handle.truncate()
    rc, data, _ = check_json(capsys, node)
    assert rc == 1 and kinds(data)["changed"][0]["file"] == "etcd.yaml"
    assert "+    - --data-dir=/tmp/etcd" in kinds(data)["changed"][0]["diff"]


@pytest.mark.parametrize("name,data,severity", [
    ("kube-apiserver.yaml.bak", MANIFESTS["kube-apiserver.yaml"], "critical"),
    ("kube-scheduler.yaml.orig", POD, "critical"),
    ("kube-scheduler.yaml~", POD, "critical"),
    ("4913", b"", "warning"),
    ("notes.txt", b"remember to renew certs\n", "warning"),
    ("binary", b"\x00\x01\x02", "warning"),
    ("etcd.yaml.20240101", MANIFESTS["etcd.yaml"], "critical"),
    ("kube-scheduler.yaml.swp", POD, "critical"),
])
def test_strays(capsys: Any, node: NodeDirs, name: str, data: bytes, severity: str) -> None:
    write(node, name, data)
    rc, found, _ = check_json(capsys, node)
    assert rc == 1
    strays = kinds(found)["stray"]
    assert [(f["file"], f["severity"]) for f in strays] == [(name, severity)]


def test_duplicate_names_both_files_and_unknown_copy_is_a_stray(capsys: Any, node: NodeDirs) -> None:
    assert cli(capsys, node, "baseline")[0] == 0
    write(node, "apiserver-copy.yaml", MANIFESTS["kube-apiserver.yaml"])
    rc, data, _ = check_json(capsys, node)
    assert rc == 1
    dup = kinds(data)["duplicate"][0]
    assert dup["files"] == ["apiserver-copy.yaml", "kube-apiserver.yaml"]
    assert "apiserver-copy.yaml" in dup["message"] and "kube-apiserver.yaml" in dup["message"]
    assert [f["file"] for f in kinds(data)["stray"]] == ["apiserver-copy.yaml"]


def test_vim_swap_file_is_info_only(capsys: Any, node: NodeDirs) -> None:
    write(node, ".kube-apiserver.yaml.swp", b"b0VIM 9.0")
    rc, data, _ = check_json(capsys, node)
    assert rc == 0 and "kube-apiserver.yaml" in kinds(data)["editor_swap"][0]["message"]


def _fake_interrupted_stop(node: NodeDirs) -> None:
    """What a SIGKILL right after the rename leaves: file parked, journal still there, no meta."""
    os.makedirs(node.parked, mode=0o700)
    os.makedirs(os.path.join(node.state, "meta"), mode=0o700)
    os.chmod(node.state, 0o700)
    entry = journal_for(node, "stop", "kube-scheduler.yaml", op="0123456789abcdef", pid=1)
    os.rename(entry["src"], entry["dst"])
    with open(node.journal, "w") as handle:
        json.dump(sealed(node.state, entry), handle)


def test_interrupted_journal_found_and_completed_by_fix(capsys: Any, node: NodeDirs) -> None:
    _fake_interrupted_stop(node)
    rc, data, _ = check_json(capsys, node)
    assert rc == 1 and kinds(data)["interrupted"][0]["component"] == "kube-scheduler"
    rc, data, _ = check_json(capsys, node, "--fix")
    assert rc == 0, data
    assert [a["action"] for a in data["actions"]] == ["recover"]
    assert "completed interrupted stop" in data["actions"][0]["message"]
    assert not os.path.exists(node.journal)
    assert [r["action"] for r in node.history()] == ["stop"]


def test_loose_state_dir_permissions_reported_not_raised(capsys: Any, node: NodeDirs) -> None:
    assert cli(capsys, node, "baseline")[0] == 0
    os.chmod(node.state, 0o755)
    rc, data, _ = check_json(capsys, node)
    assert rc == 1 and "0755" in kinds(data)["permissions"][0]["message"]
    rc, data, _ = check_json(capsys, node, "--fix")
    assert rc == 1 and data["actions"][0]["ok"] is False and "by hand" in data["actions"][0]["message"]


# --- mirror pods (fake waiter; the lab test is in test_drift_lab.py) ------------------------------------

class FakeWaiter(Waiter):
    """A stand-in probe: describe() answers from ``pods`` (pod name -> state), None when unknown."""

    name = "fake"

    def __init__(self, pods: dict) -> None:
        self.pods = pods

    def describe(self, target: PodTarget) -> Optional[dict]:
        return self.pods.get(target.mirror_name)


def test_mirror_checks_with_fake_waiter(node: NodeDirs) -> None:
    opened = open_node(node)
    app.stop(opened, ["scheduler"], None, None, False, 1)
    ready = {"present": True, "phase": "Running", "ready": True, "age_seconds": 100}
    fake = FakeWaiter({"etcd-cp-1": ready, "kube-apiserver-cp-1": {"present": False},
                       "kube-controller-manager-cp-1": dict(ready, ready=False),
                       "kube-scheduler-cp-1": dict(ready, phase="Running")})
    report = drift.check(open_node(node, fake))
    not_ready = {f.component: f.message for f in report.of_kind("mirror_not_ready")}
    assert set(not_ready) == {"kube-apiserver", "kube-controller-manager"}
    assert "missing" in not_ready["kube-apiserver"] and "not Ready" in not_ready["kube-controller-manager"]
    assert [f.component for f in report.of_kind("mirror_of_parked")] == ["kube-scheduler"]
    assert not report.of_kind("check_skipped")


class BlindWaiter(FakeWaiter):
    """A waiter whose probes could not look at some pods (crictl missing, the API down)."""

    def blind_reason(self, target: PodTarget) -> str:
        return "crictl: not found; api: connection refused"


def test_a_pod_no_probe_could_see_is_unknown_never_ok(node: NodeDirs) -> None:
    """Issue 49: ``describe`` None ("could not look") was skipped without a finding, so check said
    "OK: no drift" about a pod nobody saw. Now it is a warning (``unknown``, with why); a pod seen
    only through the API's stale view is unknown too (a frozen mirror pod says nothing)."""
    ready = {"present": True, "phase": "Running", "ready": True, "age_seconds": 100}
    blind = BlindWaiter({"etcd-cp-1": ready, "kube-apiserver-cp-1": dict(ready, stale=True),
                         "kube-controller-manager-cp-1": ready})
    report = drift.check(open_node(node, blind))
    unknown = {f.component: f for f in report.of_kind("unknown")}
    assert set(unknown) == {"kube-scheduler", "kube-apiserver"} and report.drift, report.counts()
    scheduler = unknown["kube-scheduler"]
    assert scheduler.severity == "warning" and scheduler.file == "kube-scheduler.yaml"
    assert scheduler.message == ("kube-scheduler.yaml: pod kube-scheduler-cp-1 could not be judged: crictl: not "
                                 "found; api: connection refused"), scheduler.message
    assert scheduler.fix.startswith("cpctl status kube-scheduler"), scheduler.fix
    assert "only the API's stale view of this node shows it" in unknown["kube-apiserver"].message
    assert not report.of_kind("mirror_not_ready")


def test_mirror_checks_skipped_without_probe(node: NodeDirs) -> None:
    report = drift.check(open_node(node))
    assert [f.severity for f in report.of_kind("check_skipped")] == ["info"] and not report.drift


# --- --fix and --remove-strays ----------------------------------------------------------------------

def test_fix_restores_only_parks_past_their_deadline(capsys: Any, node: NodeDirs) -> None:
    assert cli(capsys, node, "stop", "scheduler", "--for", "1h", "--no-wait")[0] == 0
    assert cli(capsys, node, "stop", "etcd", "--no-wait")[0] == 0
    edit_meta(node, "kube-scheduler.yaml", until="2000-01-01T00:00:00Z")
    edit_meta(node, "etcd.yaml", parked_at="2000-01-01T00:00:00Z")
    rc, data, _ = check_json(capsys, node, "--fix", "--max-parked", "1h")
    assert rc == 1, "etcd (no deadline) stays parked and is still reported"
    by_file = {a["file"]: a for a in data["actions"]}
    assert by_file["kube-scheduler.yaml"]["ok"] and "started" in by_file["kube-scheduler.yaml"]["message"]
    assert not by_file["etcd.yaml"]["ok"] and "on purpose" in by_file["etcd.yaml"]["message"]
    assert "kube-scheduler.yaml" in node.present() and node.parked_files() == ["etcd.yaml"]
    assert [f["component"] for f in data["remaining"] if f["kind"] == "overdue_park"] == ["etcd"]
    assert node.history()[-1]["action"] == "start" and node.history()[-1]["component"] == "kube-scheduler"
    assert node.history()[-1]["origin"] == "cpctl check --fix"           # where the change came from
    assert node.history()[-1]["reason"] == "its --for deadline passed"


def test_remove_strays_moves_them_and_never_deletes(capsys: Any, node: NodeDirs) -> None:
    write(node, "kube-apiserver.yaml.bak", MANIFESTS["kube-apiserver.yaml"])
    write(node, "junk", b"key: [unclosed\n")
    write(node, ".kube-apiserver.yaml.swp", b"swap")
    rc, data, _ = check_json(capsys, node, "--fix")
    assert rc == 1 and not [a for a in data["actions"] if a["action"] == "move-stray"]
    assert os.path.exists(os.path.join(node.manifests, "junk")), "nothing moved without --remove-strays"
    rc, out, err = cli(capsys, node, "check", "--remove-strays")
    assert rc == 2 and "--fix" in err
    rc, data, _ = check_json(capsys, node, "--fix", "--remove-strays")
    moved = {a["file"]: a for a in data["actions"] if a["action"] == "move-stray"}
    assert rc == 1 and moved["junk"]["ok"], data        # the .bak runs a pod: not without --allow-restart
    assert not moved["kube-apiserver.yaml.bak"]["ok"] and "--allow-restart" in moved["kube-apiserver.yaml.bak"][
        "message"]
    rc, data, _ = check_json(capsys, node, "--fix", "--remove-strays", "--allow-restart")
    assert rc == 0, data
    moved = {a["file"]: a for a in data["actions"] if a["action"] == "move-stray"}
    assert list(moved) == ["kube-apiserver.yaml.bak"] and moved["kube-apiserver.yaml.bak"]["ok"]
    kept = [os.path.join(node.state, "strays", s) for s in os.listdir(os.path.join(node.state, "strays"))]
    assert all(re.match(r"^\d{8}T\d{6}Z", os.path.basename(k)) for k in kept)
    assert sorted(n for k in kept for n in os.listdir(k)) == ["junk", "kube-apiserver.yaml.bak"]
    kept_bak = next(k for k in kept if "kube-apiserver.yaml.bak" in os.listdir(k))
    with open(os.path.join(kept_bak, "kube-apiserver.yaml.bak"), "rb") as handle:
        assert handle.read() == MANIFESTS["kube-apiserver.yaml"]
    assert node.present() == sorted(MANIFESTS), "real manifests untouched"
    assert os.path.exists(os.path.join(node.manifests, ".kube-apiserver.yaml.swp")), "dot files are not strays"


# --- exit codes --------------------------------------------------------------------------------

def test_exit_codes_when_the_check_cannot_run(capsys: Any, node: NodeDirs, tmp_path: Any) -> None:
    prom = str(tmp_path / "cpctl.prom")
    rc, _, err = cli(capsys, node, "check", "--max-parked", "soon")
    assert rc == 2 and err.count("\n") == 1
    rc, _, err = cli(capsys, node, "check", "--prometheus-textfile", str(tmp_path / "cpctl.txt"))
    assert rc == 2 and ".prom" in err
    os.rename(node.manifests, node.manifests + ".gone")
    rc, _, err = cli(capsys, node, "check", "--prometheus-textfile", prom)
    assert rc == 7 and "does not exist" in err
    failed = parse_exposition(open(prom).read())
    # a failed check writes no counts at all (zeros would clear every drift alert while it is broken)
    assert set(failed) == {"cpctl_check_success", "cpctl_last_check_timestamp_seconds"}
    assert failed["cpctl_check_success"]["samples"] == [({}, 0.0)]
    os.rename(node.manifests + ".gone", node.manifests)
    os.makedirs(node.state, mode=0o700)
    with open(os.path.join(node.state, "baseline.json"), "w") as handle:
        handle.write("{not json")
    rc, _, err = cli(capsys, node, "check")
    assert rc == 7 and "corrupt" in err
    rc, out, err = cli(capsys, node, "baseline", "--accept")
    assert rc == 0 and "replaced a corrupt baseline" in out, out + err


@pytest.mark.parametrize("entry, problem", [
    (5, "is not an object"),
    ({"checksum": "x", "content": ""}, "has no text pod"),
    ({"pod": 7, "checksum": "x"}, "has no text pod"),
    ({"pod": "kube-scheduler", "checksum": None}, "has no text checksum"),
    ({"pod": "kube-scheduler", "checksum": "x", "content": None}, "has a content that is not text"),
])
def test_a_corrupt_baseline_entry_is_one_clear_error(capsys: Any, node: NodeDirs, entry: object,
                                                    problem: str) -> None:
    """A state file is input like any other: an entry cpctl did not write is refused (exit 7) by
    check and baseline alike, not an internal error (exit 70) deep in the comparison."""
    assert cli(capsys, node, "baseline")[0] == 0
    path = os.path.join(node.state, "baseline.json")
    edit_baseline(node, lambda baseline: baseline["manifests"].update({"kube-scheduler.yaml": entry}))
    for args in (("check",), ("baseline",), ("-o", "json", "check")):
        rc, out, err = cli(capsys, node, *args)
        assert rc == 7, (args, out, err)
        said = json.loads(err)["error"]["message"] if args[0] == "-o" else err
        assert "is corrupt (the entry of \"kube-scheduler.yaml\" %s)" % problem in said, said
        assert "cpctl baseline --accept" in said
        assert args[0] == "-o" or err.count("\n") == 1
    rc, out, err = cli(capsys, node, "baseline", "--accept")      # the repair the message names
    assert rc == 0 and "replaced a corrupt baseline: %s is corrupt" % path in out, out + err
    assert cli(capsys, node, "check")[0] == 0


# --- the stop/start hook -------------------------------------------------------------------------

def test_note_change_keeps_the_baseline_current(node: NodeDirs) -> None:
    opened = open_node(node)
    drift.note_change(opened, "stop", "etcd.yaml", sha(MANIFESTS["etcd.yaml"]))
    assert not os.path.exists(os.path.join(node.state, "baseline.json")), "no baseline: the hook does nothing"
    drift.record(opened, accept=False)
    app.stop(opened, ["etcd"], None, None, False, 1)
    drift.note_change(opened, "stop", "etcd.yaml", sha(MANIFESTS["etcd.yaml"]))
    assert drift.read_baseline(opened)["manifests"]["etcd.yaml"]["state"] == "parked"
    app.start(opened, ["etcd"], False, 1)
    drift.note_change(opened, "start", "etcd.yaml", sha(MANIFESTS["etcd.yaml"]))
    assert drift.read_baseline(opened)["manifests"]["etcd.yaml"]["state"] == "present"
    new = POD.replace(b"name: kube-scheduler", b"name: kube-scheduler-b")
    write(node, "kube-scheduler-b.yaml", new)
    drift.note_change(opened, "start", "kube-scheduler-b.yaml", sha(new))
    assert drift.read_baseline(opened)["manifests"]["kube-scheduler-b.yaml"]["pod"] == "kube-scheduler-b"
    assert not drift.check(opened).drift
    drift.note_change(opened, "scheduler-remove", "kube-scheduler-b.yaml", None)
    assert "kube-scheduler-b.yaml" not in drift.read_baseline(opened)["manifests"]


def test_note_change_never_raises(node: NodeDirs) -> None:
    opened = open_node(node)
    drift.record(opened, accept=False)
    messages: list = []
    opened.log = messages.append
    drift.note_change(opened, "start", "does-not-exist.yaml", "0" * 64)
    assert messages and "baseline not updated" in messages[0]


# --- metrics textfile ---------------------------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(r"^(%s)(\{%s(?:,%s)*\})? (\S+)$" % (_NAME, _LABEL, _LABEL))
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_exposition(text: str) -> dict:
    """A strict little parser of the text format: name -> {help, type, samples[(labels, value)]}."""
    assert text.endswith("\n")
    families: dict = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, word, name, rest = line.split(" ", 3)
            assert re.fullmatch(_NAME, name)
            families.setdefault(name, {"samples": []})[word.lower()] = rest
            continue
        assert not line.startswith("#") and line.strip(), "unexpected line %r" % line
        match = _SAMPLE.match(line)
        assert match, "not a valid sample line: %r" % line
        name, labels, value = match.groups()
        assert name in families and "help" in families[name] and "type" in families[name], line
        parsed = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in _LABEL_RE.findall(labels or "")}
        families[name]["samples"].append((parsed, float(value)))
    return families


def test_textfile_metrics_parse_back(capsys: Any, node: NodeDirs, tmp_path: Any) -> None:
    prom = str(tmp_path / "cpctl.prom")
    assert cli(capsys, node, "stop", "etcd", "--no-wait")[0] == 0
    write(node, "kube-scheduler.yaml.bak", POD)
    before = time.time()
    rc, _, _ = cli(capsys, node, "check", "--prometheus-textfile", prom)
    assert rc == 1
    assert os.stat(prom).st_mode & 0o777 == 0o644
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")], "temp file left behind"
    fams = parse_exposition(open(prom).read())
    # no certificate families: check looked at none (no pki next to this manifests dir)
    assert set(fams) == {"cpctl_drift_findings", "cpctl_component_parked", "cpctl_component_missing",
                         "cpctl_component_parked_since_timestamp_seconds", "cpctl_last_check_timestamp_seconds",
                         "cpctl_check_success", "cpctl_api_view_stale"}
    assert all(f["type"] == "gauge" for f in fams.values())
    # etcd parked: the API's view of this node is stale (issue 49: the rule status and the waits use)
    assert fams["cpctl_api_view_stale"]["samples"] == [({}, 1)], fams["cpctl_api_view_stale"]
    findings = {s[0]["kind"]: s[1] for s in fams["cpctl_drift_findings"]["samples"]}
    assert set(findings) == set(drift.KINDS) and findings["stray"] == 1 and findings["duplicate"] == 1
    assert findings["missing"] == 0
    parked = {s[0]["component"]: s[1] for s in fams["cpctl_component_parked"]["samples"]}
    assert parked == {"etcd": 1, "kube-apiserver": 0, "kube-controller-manager": 0, "kube-scheduler": 0}
    since = {s[0]["component"]: s[1] for s in fams["cpctl_component_parked_since_timestamp_seconds"]["samples"]}
    assert set(since) == {"etcd"} and before - 60 <= since["etcd"] <= before
    (stamp,) = fams["cpctl_last_check_timestamp_seconds"]["samples"]
    assert before - 1 <= stamp[1] <= time.time() + 1
    assert fams["cpctl_check_success"]["samples"] == [({}, 1.0)]


def test_label_values_are_escaped() -> None:
    from cpctl.ops import metrics
    report = drift.Report("node-1", 1.5)
    report.components['we"ird\\comp\nonent'] = 12.25
    report.parked_since['we"ird\\comp\nonent'] = 1000.25
    text = metrics.check_metrics(1.5, report)
    fams = parse_exposition(text)
    assert fams["cpctl_component_parked_since_timestamp_seconds"]["samples"] == [
        ({"component": 'we"ird\\comp\nonent'}, 1000.25)]
    assert 'component="we\\"ird\\\\comp\\nonent"' in text

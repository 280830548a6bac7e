"""The operator's third hour (issue #39): the hints, outputs and defaults an operator who lives in
kubectl and systemctl expects -- each checked by its exit code and the words they read."""

from __future__ import annotations

import json
import time
from typing import Any

from cpctl.core import confirmations, journal
from cpctl.core.confirmations import Arm
from cpctl.core.settings import Settings
from cpctl.host.local import LocalHost
from cpctl.ops.wiring import open_node
from cpctl.redaction import redact_text
from cpctl.timeutil import iso
from tests.coreutil import NODE, NodeDirs, sha


# --- item 1: no --force where it loses data -------------------------------------------------------
def test_a_data_dir_on_no_host_path_hints_the_edit_never_force(tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path / "node"))
    node.run("stop", "apiserver", "etcd", "--reason", "etcd restore")
    refused = node.run("flags", "etcd", "--parked", "--set", "data-dir=/var/lib/etcd-restore", rc=4)
    assert "--data-dir=/var/lib/etcd-restore is on no hostPath volume" in refused.stderr
    assert "change the hostPath with the flag: `cpctl edit etcd --parked`" in refused.stderr
    assert "--force" not in refused.stderr, refused.stderr
    # a flag name cpctl's list may lag behind still names --force: going ahead loses nothing
    typo = node.run("flags", "etcd", "--parked", "--set", "snapshot-countt=5", rc=4)
    assert "has no flag --snapshot-countt" in typo.stderr and "pass --force to go ahead" in typo.stderr


# --- item 8: redaction, a journal that does not say when, an empty namespace -----------------------
def test_a_quote_inside_a_secret_does_not_end_its_redaction() -> None:
    for text in ("--oidc-client-secret=ab'cdSECRET", "--set 'oidc-client-secret=ab'\"'\"'cdSECRET'",
                 "--oidc-client-secret ab'cdSECRET", '["--token=ab\\"cdSECRET", "--v=2"]'):
        assert "SECRET" not in redact_text(text).replace("-secret", ""), (text, redact_text(text))
    assert redact_text("['--token=abc', '--v=2']") == "['--token=<redacted>', '--v=2']"


def test_a_journal_without_start_time_or_pid_says_so() -> None:
    assert journal.started_text({"started": "2026-01-01T00:00:00Z", "pid": 7}) == \
        "started 2026-01-01T00:00:00Z by pid 7"
    assert journal.started_text({}) == "start time not recorded, pid not recorded"
    assert "None" not in journal.started_text({"started": None, "pid": 9})


def test_bind_names_the_empty_value(node: NodeDirs) -> None:
    proc = node.run("bind", "web", "--node", "n1", "--namespace", "", rc=2)
    assert "empty namespace" in proc.stderr and "component" not in proc.stderr
    assert "empty pod name" in node.run("bind", "", "--node", "n1", rc=2).stderr


# --- item 6: expected commands ---------------------------------------------------------------------
def test_version_and_a_misspelt_command(node: NodeDirs) -> None:
    from cpctl import __version__
    out = node.run("version").stdout
    assert out.startswith("client: cpctl %s (build " % __version__), out
    assert json.loads(node.run("-o", "json", "version").stdout)["client"]["version"] == __version__
    typo = node.run("stpo", "scheduler", rc=2)
    assert "No such command 'stpo'. Did you mean 'stop'?" in typo.stderr


# --- item 4: scripting traps -----------------------------------------------------------------------
def test_unset_of_a_misspelt_flag_is_a_usage_error_with_the_nearest_name(node: NodeDirs) -> None:
    before = node.files["kube-scheduler.yaml"]
    proc = node.run("flags", "scheduler", "--unset", "leader-elcet", rc=2)
    assert "--unset leader-elcet: kube-scheduler has no flag --leader-elcet (did you mean --leader-elect?); " \
           "nothing changed" in proc.stderr
    with open(node.manifests + "/kube-scheduler.yaml", "rb") as handle:
        assert handle.read() == before
    # a real flag that is just not set: unsetting it again is no error
    again = node.run("flags", "scheduler", "--unset", "profiling")
    assert "unchanged" in again.stdout + again.stderr


def _armed(node: NodeDirs, op: str) -> Any:
    """A node with an armed change of the scheduler (timer: none), as ``--confirm-within`` leaves it."""
    live = open_node(Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none"),
                     LocalHost())
    data = node.files["kube-scheduler.yaml"]
    arm = Arm(op, "kube-scheduler", "kube-scheduler.yaml", sha(data), sha(data), 1, "flags", iso(),
              iso(time.time() + 3600), "root", "test", NODE, "more logs", "none")
    with live.session("test arm"):
        live.host.makedirs(confirmations.directory(live.state), 0o700)
        live.apply(confirmations.arm_change(live.state, arm))
    return live, arm


def test_a_second_confirm_is_already_confirmed_and_a_reverted_change_is_not(node: NodeDirs) -> None:
    _armed(node, "0123456789abcdef")
    assert "confirmed: kube-scheduler" in node.run("confirm", "scheduler").stdout
    again = node.run("confirm", "scheduler")
    assert again.stdout.startswith("kube-scheduler: already confirmed ("), again.stdout
    assert json.loads(node.run("-o", "json", "confirm", "scheduler").stdout)["changed"] is False
    live, arm = _armed(node, "fedcba9876543210")
    with live.session("test revert"):
        live.apply(confirmations.disarm_change(live.state, arm, "reverted", "not confirmed within 1h"))
    reverted = node.run("confirm", "scheduler", rc=3)
    assert "it was REVERTED at" in reverted.stderr and "the change is not in place" in reverted.stderr
    assert "has no unconfirmed change (nothing armed" in node.run("confirm", "apiserver", rc=3).stderr


def test_stop_for_says_it_is_a_reminder(node: NodeDirs) -> None:
    proc = node.run("stop", "scheduler", "--for", "2h", "--reason", "debugging")
    assert "cpctl: --for 2h is a reminder: nothing starts scheduler by itself at " in proc.stderr
    assert "cpctl check --fix or cpctl start restores it" in proc.stderr
    assert "a reminder, nothing starts it by itself" in " ".join(node.run("stop", "--help").stdout.split())


# --- item 7: edit cleans up after itself --------------------------------------------------------------
def test_edit_keeps_a_copy_only_of_work_that_did_not_apply_and_names_it(node: NodeDirs, tmp_path: Any) -> None:
    import glob
    import os
    import subprocess
    tmp = str(tmp_path / "tmp")
    os.makedirs(tmp)

    def edit(editor: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(node.argv("edit", "scheduler", "--yes", *args),
                              env=node.env(EDITOR=editor, VISUAL="", TMPDIR=tmp), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)

    # refused before any work (the editor cannot start), unchanged, dry run, applied: nothing left
    assert edit("/nonexistent/editor").returncode == 7
    assert edit("true").returncode == 0
    assert edit("sed -i -e s/leader-elect=true/leader-elect=false/", "--dry-run").returncode == 0
    applied = edit("sed -i -e s/leader-elect=true/leader-elect=false/")
    assert applied.returncode == 0, applied.stderr
    assert glob.glob(os.path.join(tmp, "cpctl-edit-*")) == [], "no leftovers"
    assert "edited copy" not in applied.stdout + applied.stderr
    # refused work: kept, and the message says where
    refused = edit("sed -i -e s/leader-elect=false/leader-elekt=true/")
    assert refused.returncode == 4
    left = glob.glob(os.path.join(tmp, "cpctl-edit-*", "*"))
    assert len(left) == 1 and "your edited copy is at %s" % left[0] in refused.stderr


# --- item 5: fix hints name the flags ------------------------------------------------------------------
def test_drift_fix_hints_are_the_commands_not_templates() -> None:
    from cpctl.ops.drift import how_to_fix
    fix = how_to_fix("kubeadm_drops", "kube-apiserver.yaml", "kube-apiserver",
                     {"flags": ["--audit-log-maxage=30", "--profiling", "--oidc-client-secret=s3cr3t", "--x=a b"]})
    assert fix == ("cpctl flags kube-apiserver --set audit-log-maxage=30 --set profiling=true "
                   "--set oidc-client-secret=VALUE --set x='a b' --keep-in kubeadm-config")
    assert "cpctl flags kube-scheduler --set v=4 --keep-in kubeadm-config" in how_to_fix(
        "lost_change", "kube-scheduler.yaml", "kube-scheduler", {"lost": ["--v=4"]})


# --- item 2: companion files are named -----------------------------------------------------------------
def test_dry_run_change_rollback_and_revisions_name_the_companion_file(node: NodeDirs, tmp_path: Any) -> None:
    import subprocess

    from tests.core.test_companion_revisions import _mounting, _note
    local = str(tmp_path / "note.txt")
    with open(local, "w") as handle:
        handle.write("hello\n")

    def apply(*args: str) -> str:
        proc = subprocess.run(node.argv("apply", "scheduler", "-f", "-", "--with-file", "%s=%s" % (_note(node), local),
                                        *args), input=_mounting(node, 1), env=node.env(), capture_output=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.decode()

    assert "  would write %s from %s (6 bytes, sha256 5891b5b522d5)" % (_note(node), local) in apply("--dry-run")
    assert "  wrote %s from %s (6 bytes, sha256 5891b5b522d5)" % (_note(node), local) in apply()
    listed = node.run("revisions", "scheduler").stdout.splitlines()
    at = listed.index("companion files (REV  PATH  SHA256):")
    assert listed[at + 1:] == ["  1  %s  absent" % _note(node), "  2  %s  5891b5b522d5" % _note(node)]
    assert "  removed %s (absent in that version)" % _note(node) in node.run("rollback", "scheduler").stdout


# --- item 3: status columns and the last change ------------------------------------------------------
def test_status_has_kubectl_columns_and_the_last_change(node: NodeDirs) -> None:
    node.run("flags", "apiserver", "--set", "v=3")
    node.run("stop", "scheduler", "--reason", "practice")
    lines = node.run("status").stdout.splitlines()
    assert lines[1].split() == ["COMPONENT", "FILE", "STATE", "STATUS", "RESTARTS", "AGE", "DETAIL"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["kube-apiserver"][2:6] == ["present", "unknown", "-", "-"]         # --probe none: nothing looked
    assert " ".join(rows["kube-apiserver"][6:]).startswith("flags changed ") and rows["kube-apiserver"][-2:] == \
        ["by", rows["kube-apiserver"][-1]]
    assert rows["kube-scheduler"][2:6] == ["parked", "-", "-", "-"] and rows["kube-scheduler"][-1] == "practice"
    wide = node.run("-o", "wide", "status", "apiserver").stdout.splitlines()
    assert wide[1].split()[6:] == ["PHASE", "CONTAINER", "UP", "VIA", "MIRROR", "POD", "UID", "SHA256", "DETAIL"]
    assert "kube-apiserver-cp-1" in wide[2]
    record = json.loads(node.run("-o", "json", "status", "apiserver").stdout)["components"][0]["last_change"]
    assert record["action"] == "flags" and record["time"]


def test_a_reverted_unconfirmed_change_shows_in_status(node: NodeDirs) -> None:
    live, arm = _armed(node, "0123456789abcdef")
    with live.session("test revert"):
        live.apply(confirmations.disarm_change(live.state, arm, "reverted", "not confirmed"))
    row = node.run("status", "scheduler").stdout.splitlines()[2]
    assert "reverted unconfirmed change " in row and row.rstrip().endswith(" ago"), row


def test_status_watch_prints_a_row_again_when_it_changes(node: NodeDirs, tmp_path: Any) -> None:
    import os
    import signal
    import subprocess

    from tests.labfixture import wait_for
    out_path = str(tmp_path / "watch.out")
    with open(out_path, "w") as out:
        proc = subprocess.Popen(node.argv("status", "-w", "--interval", "0.2"), env=node.env(), stdout=out,
                                stderr=subprocess.PIPE, text=True)
    try:
        def text() -> str:
            with open(out_path) as handle:
                return handle.read()
        wait_for(lambda: "kube-scheduler" in text(), 60, "the first table")
        node.run("stop", "scheduler", "--reason", "watch me")
        wait_for(lambda: any(line.split()[:3] == ["kube-scheduler", "kube-scheduler.yaml", "parked"]
                             for line in text().splitlines()), 60, "the changed row")
        os.remove(os.path.join(node.parked, "kube-scheduler.yaml"))
        wait_for(lambda: "kube-scheduler.yaml  gone" in text(), 60, "the row that went away")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = text().splitlines()
    assert lines[1].split()[:4] == ["COMPONENT", "FILE", "STATE", "STATUS"]
    assert len([line for line in lines if line.startswith("etcd ")]) == 1, "an unchanged row is printed once"
    assert "with -o text or -o wide" in node.run("-o", "json", "status", "-w", rc=2).stderr

"""Writers that are not cpctl (issue 24, item 1), against the lab's `cpctl lab kubeadm-upgrade`: cpctl sees
that kubeadm replaced a manifest, records it, never rolls back across it without --to, reports the flags it
dropped, and refuses changes while an upgrade is in flight; `check --kubeadm` lists what the next upgrade drops."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import yaml

from cpctl_lab.control import LabHandle
from tests.coreutil import schema_valid
from tests.labfixture import kubectl, lab_factory, run_cpctl  # noqa: F401


def upgrade(handle: LabHandle, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "cpctl", "lab", "kubeadm-upgrade", "--dir", str(handle.dir), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def command(handle: LabHandle, comp: str = "kube-scheduler") -> list[str]:
    pod = yaml.safe_load((handle.manifests_dir() / f"{comp}.yaml").read_text())
    return list(pod["spec"]["containers"][0]["command"])


def findings(handle: LabHandle, *args: str) -> tuple[int, list[dict[str, Any]]]:
    proc = run_cpctl(handle, "check", "-o", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    items = data if isinstance(data, list) else [data]
    for item in items:      # lost_change, kubeadm_drops/adds: fields the schema tests' answers lack
        schema_valid("check", item)
    return proc.returncode, [f for item in items for f in item["findings"]]


def cpctl_ok(handle: LabHandle, *args: str) -> subprocess.CompletedProcess:
    proc = run_cpctl(handle, *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_flag_dropped_by_upgrade_reported_kept_one_survives(lab_factory: Any) -> None:
    handle = lab_factory()
    cpctl_ok(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--timeout", "30")
    cpctl_ok(handle, "flags", "scheduler", "--set", "profiling=false", "--timeout", "30")
    code, before = findings(handle)
    assert not [f for f in before if f["kind"] == "lost_change"]
    upgrade(handle, "--to", "1.31")
    assert "--v=4" in command(handle) and "--profiling=false" not in command(handle)
    code, found = findings(handle)
    lost = [f for f in found if f["kind"] == "lost_change"]
    assert code == 1 and len(lost) == 1, found
    assert lost[0]["lost"] == ["--profiling=false"]
    assert "cpctl flags kube-scheduler --set profiling=false --keep-in kubeadm-config" in lost[0]["fix"], lost[0]
    assert "kubeadm upgrade v1.30.4 -> v1.31.12" in lost[0]["message"]


def test_rollback_after_upgrade_needs_to(lab_factory: Any) -> None:
    handle = lab_factory()
    original = (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes()
    cpctl_ok(handle, "flags", "scheduler", "--set", "v=4", "--timeout", "30")
    ours = (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes()
    upgrade(handle, "--to", "1.31")
    upgraded = (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes()

    proc = run_cpctl(handle, "rollback", "scheduler", "--timeout", "30")
    assert proc.returncode == 4, proc.stderr
    assert "kubeadm upgrade v1.30.4 -> v1.31.12" in proc.stderr and "--to N" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == upgraded

    listed = cpctl_ok(handle, "revisions", "scheduler").stdout
    assert "outside" in listed and "kubeadm upgrade v1.30.4 -> v1.31.12" in listed

    cpctl_ok(handle, "rollback", "scheduler", "--to", "1", "--timeout", "30")
    assert (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == original
    rows = json.loads(cpctl_ok(handle, "revisions", "scheduler", "-o", "json").stdout)
    rows = rows[0] if isinstance(rows, list) else rows
    by_number = {r["number"]: r for r in rows["revisions"]}
    # each version once, labelled with its own change: the original, cpctl's flags, kubeadm's upgrade
    assert [by_number[n]["action"] for n in sorted(by_number)] == ["original", "flags", "outside"]
    assert by_number[3]["reason"] == "kubeadm upgrade v1.30.4 -> v1.31.12" and by_number[1]["current"]
    kept = handle.state_dir() / "revisions"
    assert (kept / "kube-scheduler.yaml.2").read_bytes() == ours          # cpctl's version
    assert (kept / "kube-scheduler.yaml.3").read_bytes() == upgraded      # the upgrade's, kept when replaced


def test_rollback_to_the_upgraded_revision_itself_is_not_refused(lab_factory: Any) -> None:
    """Issue 49: after a kubeadm upgrade and a cpctl change on top of it, ``rollback etcd`` goes back to
    the upgrade's own bytes - that keeps the upgrade, it does not undo it; it was refused as crossing it."""
    handle = lab_factory()
    cpctl_ok(handle, "flags", "etcd", "--set", "snapshot-count=20000", "--timeout", "60")   # cpctl knew it before
    upgrade(handle, "--to", "1.31")
    upgraded = (handle.manifests_dir() / "etcd.yaml").read_bytes()
    cpctl_ok(handle, "flags", "etcd", "--set", "snapshot-count=30000", "--timeout", "60")
    assert (handle.manifests_dir() / "etcd.yaml").read_bytes() != upgraded
    proc = run_cpctl(handle, "rollback", "etcd", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    assert (handle.manifests_dir() / "etcd.yaml").read_bytes() == upgraded
    rows = json.loads(cpctl_ok(handle, "revisions", "etcd", "-o", "json").stdout)
    rows = rows[0] if isinstance(rows, list) else rows
    current = [r for r in rows["revisions"] if r["current"]]
    assert [(r["action"], r["reason"]) for r in current] == [("outside", "kubeadm upgrade 3.5.12-0 -> 3.5.15-0")]


def test_change_during_upgrade_in_flight_refused(lab_factory: Any) -> None:
    handle = lab_factory()
    upgrade(handle, "--halt")
    before = (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes()
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--timeout", "30")
    assert proc.returncode == 4 and "kubeadm upgrade is in flight" in proc.stderr, proc.stderr
    assert (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == before
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--dry-run")
    assert proc.returncode == 4
    cm_before = kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "yaml").stdout
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config")
    assert proc.returncode == 4 and "kubeadm upgrade is in flight" in proc.stderr, proc.stderr
    assert kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "yaml").stdout == cm_before
    proc = run_cpctl(handle, "stop", "scheduler")
    assert proc.returncode == 4 and "kubeadm upgrade is in flight" in proc.stderr, proc.stderr
    assert (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == before
    code, found = findings(handle)
    assert code == 1 and [f for f in found if f["kind"] == "upgrade_in_flight"]
    cpctl_ok(handle, "flags", "scheduler", "--set", "v=4", "--force", "--timeout", "30")
    assert "--v=4" in command(handle)


def test_check_kubeadm_lists_what_the_next_upgrade_drops(lab_factory: Any) -> None:
    handle = lab_factory(kubeadm_api="v1beta4")
    code, found = findings(handle, "--kubeadm")
    assert not [f for f in found if f["kind"] == "kubeadm_drops"], found      # kubeadm's own flags only
    cpctl_ok(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--timeout", "30")
    cpctl_ok(handle, "flags", "scheduler", "--set", "profiling=false", "--set", "bind-address=0.0.0.0",
             "--timeout", "30")
    code, found = findings(handle, "--kubeadm")
    drops = [f for f in found if f["kind"] == "kubeadm_drops"]
    assert code == 1 and len(drops) == 1 and drops[0]["component"] == "kube-scheduler"
    assert sorted(drops[0]["flags"]) == ["--bind-address=0.0.0.0", "--profiling=false"]
    assert "--set bind-address=0.0.0.0" in drops[0]["fix"] and "--set profiling=false" in drops[0]["fix"], drops[0]
    assert drops[0]["fix"].startswith("cpctl flags scheduler --set ") and "NAME" not in drops[0]["fix"]
    upgrade(handle, "--to", "classic")
    assert "--bind-address=127.0.0.1" in command(handle) and "--profiling=false" not in command(handle)


def test_restart_after_upgrade_does_not_hide_it(lab_factory: Any) -> None:
    """Issue 48's drill on the ha profile (v1.33): a restart (stop + start) after a kubeadm upgrade puts the
    upgraded bytes back; that is no write of cpctl's, so ``check``, ``status`` and the next change still name
    the upgrade. A ``start`` was counted as cpctl writing the bytes it put back: "OK: no drift", "started 2s
    ago", and the upgraded revision labelled "changed outside cpctl"."""
    handle = lab_factory(profile="ha")
    cpctl_ok(handle, "flags", "scheduler", "--set", "profiling=false", "--timeout", "60")
    upgrade(handle, "--to", "1.34")
    upgraded = (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes()
    note = "kubeadm upgrade v1.33.4 -> v1.34.1"

    def still_named(after: str) -> None:
        code, found = findings(handle)
        lost = [f for f in found if f["kind"] == "lost_change"]
        assert code == 1 and [f["lost"] for f in lost] == [["--profiling=false"]], (after, found)
        assert note in lost[0]["message"], (after, lost[0])
        status = cpctl_ok(handle, "status").stdout
        line = next(x for x in status.splitlines() if x.startswith("kube-scheduler "))
        assert line.endswith("replaced by %s" % note), (after, line)
        listed = json.loads(cpctl_ok(handle, "revisions", "scheduler", "-o", "json").stdout)
        listed = listed[0] if isinstance(listed, list) else listed
        assert listed["outside"]["note"] == note, (after, listed["outside"])

    still_named("the upgrade")
    cpctl_ok(handle, "restart", "scheduler", "--timeout", "60")
    assert (handle.manifests_dir() / "kube-scheduler.yaml").read_bytes() == upgraded
    still_named("restart")
    cpctl_ok(handle, "stop", "scheduler", "--timeout", "60")
    cpctl_ok(handle, "start", "scheduler", "--timeout", "60")
    still_named("stop and start")

    cpctl_ok(handle, "flags", "scheduler", "--set", "v=3", "--timeout", "60")
    rows = json.loads(cpctl_ok(handle, "revisions", "scheduler", "-o", "json").stdout)
    rows = rows[0] if isinstance(rows, list) else rows
    assert rows["outside"] is None, rows["outside"]                     # cpctl wrote what is in place now
    by_number = {r["number"]: r for r in rows["revisions"]}
    assert [by_number[n]["action"] for n in sorted(by_number)] == ["original", "flags", "outside", "flags"], \
        rows["revisions"]
    assert by_number[3]["reason"] == note and by_number[4]["current"], rows["revisions"]
    kept = handle.state_dir() / "revisions"
    assert (kept / "kube-scheduler.yaml.3").read_bytes() == upgraded
    code, found = findings(handle)
    assert not [f for f in found if f["kind"] == "lost_change"], found    # cpctl's last write is in place

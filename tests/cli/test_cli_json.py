"""One JSON schema (issue #17): with -o json a failure is one JSON object on stderr, status separates
the file from the pod, durations carry their unit, local and remote runs have the same per-host
data; `is-running` answers scripts with its exit code."""

from __future__ import annotations

import json
from typing import Any

from tests.coreutil import CLI, NodeDirs
from tests.labfixture import run_cpctl


def test_a_failure_with_json_output_is_one_json_object_on_stderr(node: NodeDirs) -> None:
    import subprocess
    for argv in (["-o", "json", "stop", "schedular"], ["stop", "schedular", "-o", "json"]):
        proc = subprocess.run(CLI + argv, env=node.env(), capture_output=True, text=True, timeout=30)
        assert proc.returncode == 3 and proc.stdout == ""
        (line,) = proc.stderr.splitlines()
        error = json.loads(line)["error"]
        assert error["code"] == 3 and error["reason"] == "not_found" and "did you mean 'scheduler'" in error["message"]
    text = subprocess.run(CLI + ["stop", "schedular"], env=node.env(), capture_output=True, text=True, timeout=30)
    assert text.stderr.startswith("cpctl: no static pod 'schedular'")


def test_status_rows_separate_the_file_from_the_pod(lab: Any) -> None:
    run_cpctl(lab, "stop", "scheduler")
    data = json.loads(run_cpctl(lab, "status", "-o", "json").stdout)
    rows = {r["component"]: r for r in data["components"]}
    running, parked = rows["kube-apiserver"], rows["kube-scheduler"]
    assert (running["state"], running["pod"], running["pod_state"]) == (
        "present", "kube-apiserver-%s" % lab.node_name(), "running")
    assert running["observed"]["ready"] is True and running["observed"]["age_seconds"] >= 0
    assert (parked["state"], parked["pod_state"]) == ("parked", None) and parked["pod"].startswith("kube-scheduler-")
    started = json.loads(run_cpctl(lab, "-o", "json", "start", "scheduler").stdout)
    assert isinstance(started["results"][0]["wait"]["elapsed_seconds"], float)


def test_is_running_answers_with_its_exit_code(lab: Any) -> None:
    yes = run_cpctl(lab, "is-running", "scheduler", "apiserver")
    assert yes.returncode == 0 and yes.stdout.splitlines() == ["kube-scheduler: running", "kube-apiserver: running"]
    run_cpctl(lab, "stop", "scheduler")
    no = run_cpctl(lab, "is-running", "scheduler", "apiserver")
    assert no.returncode == 1 and "kube-scheduler: parked" in no.stdout
    assert no.stderr.strip() == "cpctl: not running: kube-scheduler (parked)"
    answer = run_cpctl(lab, "-o", "json", "is-running", "scheduler")
    # with -o json the answer is stdout only: exit 1, "running": false, nothing on stderr (issue 48)
    assert answer.returncode == 1 and answer.stderr == "", answer.stderr
    assert json.loads(answer.stdout)["running"] is False

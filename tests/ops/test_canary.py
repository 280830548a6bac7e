"""`start/restart scheduler --verify`: a canary pod must be scheduled, and is always deleted."""

from __future__ import annotations

import json
import os
import subprocess

from tests.labfixture import run_cpctl as cpctl


def canaries(lab) -> list:
    env = dict(os.environ, **lab.env)
    out = subprocess.run(["kubectl", "get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=cpctl", "-o", "json"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)["items"]


def test_restart_verify_schedules_and_removes_a_canary(lab) -> None:
    proc = cpctl(lab, "restart", "scheduler", "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "canary pod cpctl-canary-" in proc.stdout
    assert "scheduled to %s" % lab.worker in proc.stdout
    assert canaries(lab) == []


def test_start_verify_json_reports_the_canary(lab) -> None:
    assert cpctl(lab, "stop", "scheduler").returncode == 0
    proc = cpctl(lab, "-o", "json", "start", "scheduler", "--verify")
    assert proc.returncode == 0, proc.stderr
    detail = json.loads(proc.stdout)["results"][0]["wait"]["detail"]
    assert "canary pod" in detail and lab.worker in detail
    assert canaries(lab) == []


def test_verify_is_not_applied_to_other_components(lab) -> None:
    proc = cpctl(lab, "restart", "controller-manager", "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "canary" not in proc.stdout

"""``start`` of a component whose manifest is already in the dir waits for its pod like a restore
(issue #16): a crash-looping pod is not "already running"."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.labfixture import is_ready, mirror, run_cpctl, wait_for


def _break_the_scheduler(lab: Any) -> None:
    path = os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")
    with open(path) as handle:
        text = handle.read()
    with open(path + ".tmp", "w") as handle:
        handle.write(text.replace("- kube-scheduler\n", "- kube-scheduler\n    - --no-such-flag=1\n", 1))
    os.rename(path + ".tmp", path)


def test_start_of_a_crash_looping_component_is_not_already_running(lab: Any) -> None:
    _break_the_scheduler(lab)
    wait_for(lambda: mirror(lab, "kube-scheduler") and not is_ready(mirror(lab, "kube-scheduler")), 20,
             "the scheduler crash-looping")
    quick = run_cpctl(lab, "start", "scheduler", "--no-wait")
    assert quick.returncode == 0, quick.stderr
    assert "manifest already in place, but pod kube-scheduler-%s is not running and Ready" % lab.node_name() \
        in quick.stdout, quick.stdout
    waited = run_cpctl(lab, "start", "scheduler", "--timeout", "2")
    assert waited.returncode == 6, waited.stdout + waited.stderr
    assert "its manifest is in %s/kube-scheduler.yaml" % lab.manifests_dir() in waited.stderr
    assert "last log lines: Error: unknown flag: --no-such-flag" in waited.stderr, "the container's own words"


def test_start_of_a_running_component_says_so_after_seeing_it(lab: Any) -> None:
    proc = run_cpctl(lab, "start", "scheduler")
    assert proc.returncode == 0 and proc.stdout.startswith("kube-scheduler: already running - pod "), proc.stdout


def test_a_crictl_that_is_not_crictl_falls_back_to_the_api(lab: Any) -> None:
    """CPCTL_CRICTL=/etc/passwd (issue #16 item 10): not executable - status still shows the pods
    through the API, a change still verifies through the API; one note at most, never a failure."""
    status = run_cpctl(lab, "-o", "json", "status", CPCTL_CRICTL="/etc/passwd")
    assert status.returncode == 0, status.stderr
    rows = {r["component"]: r for r in json.loads(status.stdout)["components"]}
    assert rows["kube-scheduler"]["observed"]["present"] and rows["kube-scheduler"]["observed"]["source"] == "api"
    restart = run_cpctl(lab, "restart", "scheduler", CPCTL_CRICTL="/etc/passwd")
    assert restart.returncode == 0, restart.stdout + restart.stderr

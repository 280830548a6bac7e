"""Fail fast (issue #21, item 5): a new version whose container exits with an error and is put in
back-off by the kubelet is the verdict - rolled back at once, with the container's last lines -
instead of waiting out the (now long: the startupProbe budget) time limit."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.labfixture import is_ready, mirror, run_cpctl, wait_for


def test_a_crash_looping_new_version_is_rolled_back_at_once(lab: Any, tmp_path: Any) -> None:
    path = os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 20, "scheduler Ready")
    started = time.monotonic()
    # --force: cpctl's flag list would refuse the typo before writing; the lab's binary rejects it too
    proc = run_cpctl(lab, "flags", "scheduler", "--set", "no-such-flag=1", "--settle", "1", "--force", timeout=200)
    took = time.monotonic() - started
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "the new container crash-loops" in proc.stderr, proc.stderr
    assert "unknown flag: --no-such-flag" in proc.stderr, "the container's own last lines"
    assert "ROLLED BACK" in proc.stderr
    # the default limit is the scheduler's startupProbe budget (250 s): fail fast means far less
    assert took < 60, took
    with open(path, "rb") as handle:
        assert b"no-such-flag" not in handle.read()

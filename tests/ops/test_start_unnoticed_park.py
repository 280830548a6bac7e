"""``start`` after a park the kubelet never saw (issue #21, item 4).

With the lab's kubelets seeing their manifests dir only at each re-list (``inotify=False``: a watch
that could not be set up), a park undone before the next re-list is never noticed: the same pod
keeps running. ``start`` must accept it within its settle time and say so, instead of waiting for
a "new" pod until its timeout.
"""

from __future__ import annotations

import time
from typing import Any

from cpctl.core.node import KEPT_MESSAGE, KEPT_SETTLE
from tests.labfixture import is_ready, mirror, run_cpctl, wait_for


def test_start_after_an_unnoticed_park_keeps_the_running_pod(lab_factory: Any) -> None:
    lab = lab_factory(inotify=False, file_check_frequency=60)
    running = wait_for(lambda: is_ready(p := mirror(lab, "kube-scheduler")) and p, 20, "scheduler Ready")
    stop = run_cpctl(lab, "stop", "scheduler", "--no-wait")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    started = time.monotonic()
    start = run_cpctl(lab, "start", "scheduler", "--timeout", "60")
    took = time.monotonic() - started
    assert start.returncode == 0, start.stdout + start.stderr
    assert KEPT_MESSAGE in start.stdout, start.stdout
    assert took < KEPT_SETTLE + 10, took          # the settle time and a CLI start, not the 60 s timeout
    now = mirror(lab, "kube-scheduler")
    assert now is not None and is_ready(now) and now["metadata"]["uid"] == running["metadata"]["uid"]
    assert now["status"]["containerStatuses"][0]["containerID"] == \
        running["status"]["containerStatuses"][0]["containerID"]

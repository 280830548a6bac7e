"""Fail fast (issue #21, item 5): a new version whose container exits with an error and is put in
back-off by the kubelet is the verdict - rolled back at once, with the container's last lines -
instead of waiting out the (now long: the startupProbe budget) time limit. Issue #32: the same for
the API server, whose gate (its own /readyz) used to wait out the whole budget (257 s) while the
runtime showed the crash loop from the first seconds."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.labfixture import is_ready, kubectl, mirror, run_cpctl, wait_for


@pytest.mark.parametrize("component", ["kube-scheduler", "kube-apiserver"])
def test_a_crash_looping_new_version_is_rolled_back_at_once(lab: Any, tmp_path: Any, component: str) -> None:
    path = os.path.join(str(lab.manifests_dir()), "%s.yaml" % component)
    wait_for(lambda: is_ready(mirror(lab, component)), 20, "%s Ready" % component)
    started = time.monotonic()
    # --force: cpctl's flag list would refuse the typo before writing; the lab's binary rejects it too
    proc = run_cpctl(lab, "flags", component, "--set", "no-such-flag=1", "--settle", "1", "--force", timeout=300)
    took = time.monotonic() - started
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "the new container crash-loops" in proc.stderr, proc.stderr
    assert "unknown flag: --no-such-flag" in proc.stderr, "the container's own last lines"
    assert "ROLLED BACK" in proc.stderr
    # the default limit is the scheduler's startupProbe budget (250 s): fail fast means far less
    assert took < 60, took
    with open(path, "rb") as handle:
        assert b"no-such-flag" not in handle.read()
    assert kubectl(lab, "get", "--raw", "/readyz").stdout.strip() == "ok"     # the API answers again

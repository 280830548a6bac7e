"""Issue #13/#16: crictl errors are per call, not per run.

Only "crictl is not installed" (exit 127 / ENOENT) may be remembered for the run. A crictl that
fails once - the runtime socket refused or busy, permission denied, output that is not its JSON,
a run that hangs - is asked again at the next poll (it used to disable crictl for the whole run,
so the wait ended "not verified" though crictl could see). A hanging crictl is cut at the wait's
deadline. A wrapper script plays the failing crictl for its first calls, then runs the lab's shim.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from cpctl.host.local import LocalHost
from cpctl.probes.base import PodTarget
from cpctl.probes.waiter import VerifyingWaiter
from cpctl_lab.control import LabHandle
from tests.labfixture import lab  # noqa: F401

SLACK = 0.8

BEHAVIOURS = {
    "refused": 'echo \'level=fatal msg="validate service connection: connect: connection refused"\' >&2; exit 1',
    "denied": 'echo "open /run/containerd/containerd.sock: permission denied" >&2; exit 1',
    "garbage": 'echo "<html>not json</html>"; exit 0',
    "list": 'echo "[]"; exit 0',
    "no-items": 'echo "{}"; exit 0',
    "hang": "exec sleep 30",
    "missing": 'echo "crictl: command not found" >&2; exit 127',
}


def fake_crictl(directory: Path, real: str, behaviour: str, failing_calls: int) -> tuple:
    """(path of a crictl that misbehaves for its first ``failing_calls`` runs, path of its call counter)."""
    counter = directory / "calls"
    script = directory / "crictl"
    script.write_text(
        "#!/bin/sh\n"
        "n=$(cat %(counter)s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %(counter)s\n"
        "if [ $n -le %(failing)d ]; then %(behaviour)s; fi\n"
        'exec %(real)s "$@"\n' % {"counter": counter, "failing": failing_calls, "behaviour": BEHAVIOURS[behaviour],
                                  "real": real})
    os.chmod(script, 0o755)
    return str(script), counter


def calls(counter: Path) -> int:
    return int(counter.read_text()) if counter.exists() else 0


def scheduler(handle: LabHandle) -> PodTarget:
    pod = yaml.safe_load((handle.manifests_dir() / "kube-scheduler.yaml").read_text())
    return PodTarget("kube-scheduler", "kube-system", handle.node_name(), pod, "kube-scheduler.yaml")


@pytest.mark.parametrize("behaviour", ["refused", "denied", "garbage", "list", "no-items"])
def test_a_failing_crictl_is_asked_again(lab, tmp_path, behaviour):
    crictl, counter = fake_crictl(tmp_path, lab.crictl, behaviour, failing_calls=3)
    waiter = VerifyingWaiter(LocalHost(), lab.kubeconfig, crictl=crictl, mode="crictl")
    target = scheduler(lab)
    before = waiter.before(target)   # crictl failed: nothing seen before the change
    assert before["probe"] is None and calls(counter) == 1
    (lab.manifests_dir() / "kube-scheduler.yaml").rename(tmp_path / "kube-scheduler.yaml")
    result = waiter.wait_stopped(target, before, 15)
    assert result.verified and result.detail.startswith("pod %s gone (crictl)" % target.mirror_name), result.detail
    assert calls(counter) >= 4
    before = waiter.before(target)
    (tmp_path / "kube-scheduler.yaml").rename(lab.manifests_dir() / "kube-scheduler.yaml")
    result = waiter.wait_started(target, before, 15)
    assert result.verified and "Running and Ready (crictl)" in result.detail, result.detail


def test_a_hanging_crictl_is_cut_at_the_deadline(lab, tmp_path):
    crictl, counter = fake_crictl(tmp_path, lab.crictl, "hang", failing_calls=100)
    waiter = VerifyingWaiter(LocalHost(), lab.kubeconfig, crictl=crictl, mode="crictl")
    started = time.monotonic()
    result = waiter.wait_stopped(scheduler(lab), {"probe": "crictl", "state": None}, 2.0)
    took = time.monotonic() - started
    assert not result.verified and "crictl pods timed out after" in result.detail, result.detail
    assert took < 2.0 + SLACK, took   # crictl's own 10 s timeout used to run in full


def test_only_a_missing_crictl_is_remembered(lab, tmp_path):
    crictl, counter = fake_crictl(tmp_path, lab.crictl, "missing", failing_calls=100)
    waiter = VerifyingWaiter(LocalHost(), str(tmp_path / "no-kubeconfig"), crictl=crictl, mode="crictl")
    target = scheduler(lab)
    assert waiter.describe(target) is None and waiter.describe(target) is None   # neither API nor crictl
    result = waiter.wait_stopped(target, waiter.before(target), 5)
    assert not result.verified and "crictl: %s not found" % crictl in result.detail
    assert result.elapsed < 1.0   # nothing to wait for: it cannot appear mid-run
    assert calls(counter) == 1

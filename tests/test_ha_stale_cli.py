"""End to end, issue #13 item 5: with this node's API server parked in an HA cluster of local-mode
kubelets (kubeadm 1.33+), cpctl judges this node's pods by the runtime, not by the frozen mirror
pods the other API servers keep serving.

The lab's ``ha`` profile: 3 masters, local-mode kubelets, stacked etcd, admin.conf through the load
balancer. On master2: ``cpctl stop apiserver``, then ``cpctl stop scheduler`` must see the
scheduler go (crictl) instead of timing out on its frozen mirror pod, ``status`` must not claim the
frozen mirror as the truth, and ``start`` must bring both back.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
from typing import Any

from tests.labfixture import lab_factory, mirror, run_cpctl  # noqa: F401


def test_a_parked_local_api_server_makes_cpctl_trust_the_runtime(lab_factory: Any) -> None:
    lab = lab_factory(profile="ha")
    env = lab.env_for(2)
    down = run_cpctl(env, "stop", "apiserver", "--timeout", "30")
    assert down.returncode == 0, down.stdout + down.stderr
    stop = run_cpctl(env, "stop", "scheduler", "--timeout", "20")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "gone (crictl)" in stop.stdout, stop.stdout
    assert mirror(lab, "kube-scheduler", 2) is not None, "the other API servers still serve the frozen mirror"
    status = json.loads(run_cpctl(env, "-o", "json", "status").stdout)
    rows = {r["component"]: r for r in status["components"]}
    manager = rows["kube-controller-manager"]["observed"]
    assert manager and (manager["source"] != "api" or manager["stale"]), manager
    start = run_cpctl(env, "start", "scheduler", "--timeout", "30")
    assert start.returncode == 0, start.stdout + start.stderr
    assert "(crictl)" in start.stdout or "(health)" in start.stdout, start.stdout
    up = run_cpctl(env, "start", "apiserver", "--timeout", "60")
    assert up.returncode == 0, up.stdout + up.stderr

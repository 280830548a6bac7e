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

from tests.labfixture import lab_factory, mirror, run_cpctl, wait_for  # noqa: F401


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


def test_a_crash_looping_local_api_server_also_makes_the_api_view_stale(lab_factory: Any) -> None:
    """Nothing parked: master2's API server crash-loops after a hand edit. Its local-mode kubelet
    (kubelet.conf names the node's own API server) cannot update the mirror pods: cpctl sees that
    nothing answers there and believes the runtime."""
    lab = lab_factory(profile="ha")
    env = lab.env_for(2)
    path = lab.manifests_dir(2) / "kube-apiserver.yaml"
    text = path.read_text()
    broken = path.parent / ".kube-apiserver.yaml.tmp"
    broken.write_text(text.replace("- kube-apiserver\n", "- kube-apiserver\n    - --no-such-flag=1\n", 1))
    broken.rename(path)
    wait_for(lambda: _refused(lab.api_url_for(2)), 20, "master2's own API server down")
    stop = run_cpctl(env, "stop", "scheduler", "--timeout", "20")
    assert stop.returncode == 0 and "gone (crictl)" in stop.stdout, stop.stdout + stop.stderr
    status = json.loads(run_cpctl(env, "-o", "json", "status", "controller-manager").stdout)
    (row,) = status["components"]
    assert row["observed"]["source"] != "api" or row["observed"]["stale"], row


def _refused(url: str) -> bool:
    import urllib.request
    try:
        urllib.request.urlopen(url + "/healthz", timeout=2)
    except OSError as exc:
        return "refused" in str(exc).lower()
    return False

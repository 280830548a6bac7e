"""Issue #13/#16: HA and local mode - the API's view of THIS node may be stale.

In the lab's ``ha`` profile (3 masters, kubeadm 1.33 local-mode kubelets, stacked etcd, a load
balancer in admin.conf), parking master2's apiserver leaves master2's mirror pods frozen while the
other apiservers keep serving them: the api probe would see a stopped scheduler "still present"
(and a started one as the old pod) until the timeout. With the hint ``stale_api`` (per target, or
for the whole waiter) the waiter judges master2's pods by crictl and the health endpoint, its Lease
gate becomes the component's own endpoint, and ``describe`` marks an API view as stale.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import dataclasses
import socket
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.probes.base import PodTarget
from cpctl.probes.waiter import VerifyingWaiter
from cpctl_lab.control import LabHandle
from tests.labfixture import lab_factory, mirror, wait_for  # noqa: F401


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/version", timeout=2)
    except OSError as exc:
        return "refused" in str(exc).lower()
    return False


@pytest.fixture
def ha_stale(lab_factory, tmp_path) -> tuple:
    """An ha lab whose master2 apiserver is parked: (lab, master2's scheduler target, parking dir)."""
    lab: LabHandle = lab_factory(profile="ha")
    (lab.manifests_dir(2) / "kube-apiserver.yaml").rename(tmp_path / "kube-apiserver.yaml")
    wait_for(lambda: refused(lab.api_url_for(2)), 10, "master2's own apiserver closed")
    pod = yaml.safe_load((lab.manifests_dir(2) / "kube-scheduler.yaml").read_text())
    return lab, PodTarget("kube-scheduler", "kube-system", lab.node_name(2), pod, "kube-scheduler.yaml"), tmp_path


def waiter(lab: LabHandle, **options: object) -> VerifyingWaiter:
    return VerifyingWaiter(LocalHost(), lab.kubeconfig, crictl=lab.crictl_for(2), **options)  # type: ignore[arg-type]


def test_a_stale_api_view_would_time_out_a_stop(ha_stale):
    lab, target, parked = ha_stale
    blind_to_staleness = waiter(lab)
    before = blind_to_staleness.before(target)
    assert before["probe"] == "api"   # the LB serves master2's mirror pod, Running and Ready
    (lab.manifests_dir(2) / "kube-scheduler.yaml").rename(parked / "kube-scheduler.yaml")
    with pytest.raises(CpctlError) as excinfo:
        blind_to_staleness.wait_stopped(target, before, 1.5)
    assert excinfo.value.code == ExitCode.TIMEOUT and "still present (api)" in excinfo.value.message
    assert mirror(lab, "kube-scheduler", 2) is not None   # frozen: nobody on master2 can delete it


@pytest.mark.parametrize("hint", ["target", "waiter"])
def test_stale_hint_uses_crictl_then_health(ha_stale, hint):
    lab, target, parked = ha_stale
    if hint == "target":
        w, target = waiter(lab), dataclasses.replace(target, stale_api=True)
    else:
        w = waiter(lab, stale_api=True)
    before = w.before(target)
    assert before["probe"] == "crictl"
    (lab.manifests_dir(2) / "kube-scheduler.yaml").rename(parked / "kube-scheduler.yaml")
    result = w.wait_stopped(target, before, 15)
    assert result.verified and result.detail.startswith("pod %s gone (crictl)" % target.mirror_name), result.detail
    assert mirror(lab, "kube-scheduler", 2) is not None   # the API still shows it: it was rightly not asked
    before = w.before(target)
    (parked / "kube-scheduler.yaml").rename(lab.manifests_dir(2) / "kube-scheduler.yaml")
    result = w.wait_started(target, before, 15)
    assert result.verified, result.detail
    port = lab.ports(2)["scheduler"]
    assert ("Running and Ready (crictl), lease not checked (the API's view of node %s is stale), "
            "https://127.0.0.1:%d/healthz answers 200" % (lab.node_name(2), port)) in result.detail


def hanging_up_port() -> int:
    """A port whose server accepts and hangs up at once: an endpoint that answers nothing."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_describe_marks_an_api_view_as_stale(ha_stale, tmp_path):
    lab, target, _ = ha_stale
    fresh = waiter(lab).describe(target)
    assert fresh is not None and fresh["source"] == "api" and fresh["stale"] is False
    stale = dataclasses.replace(target, stale_api=True)
    assert waiter(lab).describe(stale)["source"] == "crictl"
    no_crictl = VerifyingWaiter(LocalHost(), lab.kubeconfig, crictl=str(tmp_path / "no-crictl"))
    health_view = no_crictl.describe(stale)
    assert health_view is not None and health_view["source"] == "health" and health_view["ready"] is True
    # neither crictl nor the health endpoint can look: the API's view, marked stale
    probe = {"httpGet": {"host": "127.0.0.1", "port": hanging_up_port(), "path": "/healthz", "scheme": "HTTP"}}
    blind = dataclasses.replace(stale, pod={"spec": {"containers": [{"name": "c", "readinessProbe": probe}]}})
    api_view = no_crictl.describe(blind)
    assert api_view is not None and api_view["source"] == "api" and api_view["stale"] is True
    assert api_view["present"] is True   # what the other apiservers still serve


def test_probe_api_alone_on_a_stale_node_says_why(ha_stale):
    lab, target, _ = ha_stale
    w = waiter(lab, mode="api", stale_api=True)
    result = w.wait_stopped(target, w.before(target), 5)
    assert not result.verified and result.elapsed < 1.0
    assert "the API's view of node %s is stale and --probe api uses only the API" % lab.node_name(2) in result.detail


def test_stale_flag_is_a_plain_typed_field():
    target = PodTarget("kube-scheduler", "kube-system", "n")
    assert target.stale_api is False and dataclasses.replace(target, stale_api=True).stale_api is True
    assert VerifyingWaiter(LocalHost(), str(Path("/nonexistent"))).stale_api is False


class _NodeHost(LocalHost):
    """This machine, reporting the simulated master's kernel host name (what an agent on it says)."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname

    def info(self) -> dict:
        return dict(super().info(), hostname=self._hostname)


@pytest.mark.parametrize("profile", ["fqdn", "override"])
def test_the_lease_holder_is_this_node_by_its_host_name(lab_factory, tmp_path, profile):
    # holderIdentity is "<kernel host name>_<uuid>": "Lab-master1.CPCTL.TEST_..." for the node
    # lab-master1.cpctl.test, "cpctl-lab-host1_..." under --hostname-override; not a standby
    lab = lab_factory(profile=profile)
    pod = yaml.safe_load((lab.manifests_dir() / "kube-scheduler.yaml").read_text())
    target = PodTarget("kube-scheduler", "kube-system", lab.node_name(), pod, "kube-scheduler.yaml")
    w = VerifyingWaiter(_NodeHost(lab.hostname()), lab.kubeconfig, crictl=lab.crictl)
    before = w.before(target)
    (lab.manifests_dir() / "kube-scheduler.yaml").rename(tmp_path / "kube-scheduler.yaml")
    assert w.wait_stopped(target, before, 15).verified
    before = w.before(target)
    (tmp_path / "kube-scheduler.yaml").rename(lab.manifests_dir() / "kube-scheduler.yaml")
    result = w.wait_started(target, before, 15)
    assert result.verified and "lease kube-scheduler renewed by %s_" % lab.hostname() in result.detail
    assert "(this node)" in result.detail and "standby" not in result.detail

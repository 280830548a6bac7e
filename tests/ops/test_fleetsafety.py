"""The fleet guard's rules, on censuses built by hand (the SSH round trip is tested in
test_remote_fleet.py): an API server whose stacked etcd is parked is not serving."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, parse_serial
from cpctl.ops.fleetsafety import _uses_local_etcd, preflight

RUNNING = {"etcd": "present", "kube-apiserver": "present"}


def census(*hosts: Tuple[str, Dict[str, str], bool]) -> List[HostResult]:
    return [HostResult(name, "ok", {"components": states, "apiserver_stacked": stacked})
            for name, states, stacked in hosts]


def test_stopping_the_last_serving_apiservers_etcd_is_refused() -> None:
    # m1's etcd is parked already: its stacked API server does not serve. Stopping m2's etcd
    # leaves etcd 1 of 3 (quorum) and m3's API server as the only one; stopping m3's apiserver
    # would leave none, although "kube-apiserver running" is still true on m1.
    fleet = census(("m1", {"etcd": "parked", "kube-apiserver": "present"}, True),
                   ("m2", dict(RUNNING), True), ("m3", dict(RUNNING), True))
    with pytest.raises(CpctlError) as err:
        preflight(fleet, {"m2", "m3"}, "stop", ["apiserver"], parse_serial(1), False, None)
    assert err.value.code == ExitCode.REFUSED and "0 of 3 kube-apiserver running, 2 now" in err.value.message
    with pytest.raises(CpctlError) as err:
        preflight(fleet, {"m2"}, "stop", ["etcd"], parse_serial(1), False, None)
    assert "quorum" in err.value.message
    assert preflight(fleet, {"m2"}, "stop", ["apiserver"], parse_serial(1), False, "why") == "why"


def test_without_stacked_etcd_an_apiserver_serves_while_etcd_is_elsewhere() -> None:
    fleet = census(("m1", {"etcd": "parked", "kube-apiserver": "present"}, False),
                   ("m2", dict(RUNNING), False), ("m3", dict(RUNNING), False))
    assert preflight(fleet, {"m2", "m3"}, "stop", ["apiserver"], parse_serial(1), False, None) is None


def test_stopping_etcd_on_every_stacked_master_takes_the_api_down_too() -> None:
    fleet = census(("m1", dict(RUNNING), True), ("m2", dict(RUNNING), True), ("m3", {"etcd": "present"}, True))
    with pytest.raises(CpctlError) as err:
        preflight(fleet, {"m1", "m2"}, "stop", ["etcd"], parse_serial(1), False, None)
    assert "kube-apiserver" in err.value.message


@pytest.mark.parametrize("servers,stacked", [
    ("https://127.0.0.1:2379", True), ("https://[::1]:2379", True), ("https://localhost:2379", True),
    ("https://10.0.0.1:2379,https://10.0.0.2:2379", False), ("https://127.0.0.1:2379,https://10.0.0.2:2379", False),
])
def test_stacked_means_only_the_nodes_own_etcd(servers: str, stacked: bool) -> None:
    pod = {"spec": {"containers": [{"command": ["kube-apiserver", "--etcd-servers=%s" % servers]}]}}
    assert _uses_local_etcd(pod) is stacked

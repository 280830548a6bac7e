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
    """Each present component answered at its own endpoint (what ``census_of`` asks)."""
    return [HostResult(name, "ok", {"components": states, "apiserver_stacked": stacked,
                                    "running": {c: s == "present" for c, s in states.items()}, "unasked": {}})
            for name, states, stacked in hosts]


def test_a_manifest_in_place_counts_only_when_its_endpoint_answers() -> None:
    """The kubelet was told to run m3's etcd, but it does not answer (crash loop, still booting):
    stopping m1's etcd would leave one of three. A member that could not be asked says why, and
    the hint never offers --force (it is what loses quorum)."""
    fleet = census(("m1", dict(RUNNING), True), ("m2", dict(RUNNING), True), ("m3", dict(RUNNING), True))
    assert preflight(fleet, {"m1"}, "stop", ["etcd"], parse_serial(1), False, "ok") == "ok"
    fleet[2].data["running"]["etcd"] = False
    with pytest.raises(CpctlError) as err:
        preflight(fleet, {"m1"}, "stop", ["etcd"], parse_serial(1), False, None)
    assert "1 of 3 etcd running, 2 now" in err.value.message and "--force" not in err.value.hint
    # the member that does not run, by name; a one-at-a-time run is not told to go one at a time (issue 48)
    assert "etcd does not run on m3: bring it back there first" in err.value.hint
    assert "--serial" not in err.value.hint
    fleet[2].data["unasked"]["etcd"] = "http://127.0.0.1:2381/readyz: timed out"
    with pytest.raises(CpctlError) as err:
        preflight(fleet, {"m1"}, "stop", ["etcd"], parse_serial(1), False, None)
    assert "could not ask, counted as not running: m3 (http://127.0.0.1:2381/readyz: timed out)" in err.value.message
    assert "--census inventory" in err.value.hint and "--force" not in err.value.hint
    # No word from the endpoint at all (an old census, a hand-made one): not running either.
    del fleet[1].data["running"]
    with pytest.raises(CpctlError):
        preflight(fleet, {"m1"}, "stop", ["etcd"], parse_serial(1), False, None)


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

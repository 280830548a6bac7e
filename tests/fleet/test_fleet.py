"""Fleet fan-out: statuses, bounds, rolling batches, recap; and a real run over several sshd."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, List

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.inventory import HostSpec, load_inventory
from cpctl.fleet.pool import ConnectionPool
from cpctl.fleet.runner import HostResult, recap, recap_json, run_parallel, run_rolling
from cpctl.host.base import LockBusy
from cpctl.host.connect import open_host
from tests.sshfixture import *  # noqa: F403
from tests.sshfixture import SSHServer, free_port

pytestmark = pytest.mark.timeout(30)


def _specs(*names: str) -> List[HostSpec]:
    return [HostSpec(n, "root@" + n) for n in names]


def _behaviour(spec: HostSpec) -> Any:
    kind = spec.name.split("-")[0]
    if kind == "down":
        raise CpctlError("%s: unreachable: connection refused" % spec.name, ExitCode.UNREACHABLE)
    if kind == "refused":
        raise CpctlError("refusing", ExitCode.REFUSED)
    if kind == "locked":
        raise LockBusy("cpctl pid 7 on other")
    if kind == "bug":
        raise ValueError("oops")
    if kind == "changed":
        return {"changed": True}
    return {"changed": False, "who": spec.name}


def test_parallel_captures_every_outcome() -> None:
    names = ("ok-1", "changed-1", "down-1", "refused-1", "locked-1", "bug-1")
    results = run_parallel(_specs(*names), _behaviour, forks=3)
    assert [r.host for r in results] == list(names)
    assert [r.status for r in results] == ["ok", "changed", "unreachable", "failed", "failed", "failed"]
    assert results[0].data == {"changed": False, "who": "ok-1"}
    assert results[2].code == ExitCode.UNREACHABLE and "connection refused" in results[2].error
    assert results[3].code == ExitCode.REFUSED
    assert results[4].code == ExitCode.LOCKED and "cpctl pid 7" in results[4].error
    assert results[5].code == ExitCode.INTERNAL and "ValueError: oops" in results[5].error


def test_parallel_is_bounded_by_forks() -> None:
    lock = threading.Lock()
    current, peak = [0], [0]

    def work(spec: HostSpec) -> None:
        with lock:
            current[0] += 1
            peak[0] = max(peak[0], current[0])
        time.sleep(0.05)
        with lock:
            current[0] -= 1

    started = time.monotonic()
    results = run_parallel(_specs(*("h%d" % i for i in range(8))), work, forks=4)
    assert all(r.status == "ok" for r in results) and peak[0] == 4
    assert time.monotonic() - started < 0.5


def test_parallel_timeout_per_host() -> None:
    def work(spec: HostSpec) -> str:
        time.sleep(3 if spec.name == "slow" else 0)
        return "done"

    started = time.monotonic()
    results = run_parallel(_specs("fast", "slow"), work, timeout=0.3)
    assert time.monotonic() - started < 2
    assert [r.status for r in results] == ["ok", "failed"]
    assert results[1].error == "timed out after 0.3s" and results[1].code == ExitCode.TIMEOUT


def test_rolling_stops_after_failed_batch() -> None:
    order: List[str] = []

    def work(spec: HostSpec) -> Any:
        order.append(spec.name)
        return _behaviour(spec)

    results = run_rolling(_specs("ok-1", "down-2", "ok-3", "ok-4"), work, serial=1)
    assert [r.status for r in results] == ["ok", "unreachable", "skipped", "skipped"]
    assert order == ["ok-1", "down-2"]
    results = run_rolling(_specs("ok-1", "bug-2", "ok-3", "ok-4", "ok-5"), _behaviour, serial=2)
    assert [r.status for r in results] == ["ok", "failed", "skipped", "skipped", "skipped"]
    results = run_rolling(_specs("ok-1", "bug-2", "ok-3"), _behaviour, serial=1, keep_going=True)
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    results = run_rolling(_specs("a", "b", "c", "d"), _behaviour, serial="50%")
    assert len(results) == 4


@pytest.mark.parametrize("serial", [0, "x", "abc%", None])
def test_rolling_bad_serial(serial: Any) -> None:
    with pytest.raises(CpctlError) as err:
        run_rolling(_specs("a"), _behaviour, serial=serial)
    assert err.value.code == ExitCode.USAGE


def test_recap_text_and_json() -> None:
    results = [HostResult("master1", "ok"), HostResult("master2", "changed", {"changed": True}),
               HostResult("m3", "unreachable", error="m3: unreachable: connection refused"),
               HostResult("m4", "skipped", error="not run")]
    text = recap(results)
    assert text.splitlines()[:5] == [
        "PLAY RECAP",
        "master1 : ok=1 changed=0 unreachable=0 failed=0 skipped=0",
        "master2 : ok=1 changed=1 unreachable=0 failed=0 skipped=0",
        "m3      : ok=0 changed=0 unreachable=1 failed=0 skipped=0",
        "m4      : ok=0 changed=0 unreachable=0 failed=0 skipped=1",
    ]
    assert "m3: unreachable: connection refused" in text and "m3: m3:" not in text
    doc = json.loads(recap_json(results))
    assert doc["ok"] is False and doc["stats"]["master2"]["changed"] == 1
    assert [h["status"] for h in doc["hosts"]] == ["ok", "changed", "unreachable", "skipped"]


@pytest.fixture
def fleet_inventory(sshd_many: List[SSHServer], tmp_path) -> Any:
    lines = ["all:", "  vars: {user: root}", "  hosts:"]
    for server in sshd_many:
        lines.append("    %s: {host: %s, port: %d}" % (server.alias, server.address, server.port))
    lines.append("    dead: {host: 127.0.0.1, port: %d}" % free_port("127.0.0.1"))
    lines += ["  children:", "    masters: {hosts: {%s: {}}}" % ", ".join(s.alias for s in sshd_many)]
    path = tmp_path / "inventory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(str(path))


def _connector(options: Any) -> Any:
    return lambda spec: open_host(spec.target, options, become=spec.become, python=spec.python)


def _pool(sshd_many: List[SSHServer]) -> ConnectionPool:
    return ConnectionPool(_connector(sshd_many[0].options(ssh_config="none")))


def _accepted(server: SSHServer) -> int:
    return server.log_text().count("Accepted publickey")


def test_pool_connects_in_parallel_once_per_host(sshd_many: List[SSHServer], fleet_inventory: Any,
                                                 tmp_path) -> None:
    specs = fleet_inventory.select("all")
    before = [_accepted(s) for s in sshd_many]
    with _pool(sshd_many) as pool:
        results = pool.connect_all(specs)
        assert [r.status for r in results] == ["ok", "ok", "ok", "unreachable"], [(r.host, r.error) for r in results]
        assert results[3].error.startswith("root@127.0.0.1:") and "connection refused" in results[3].error

        def step(spec: HostSpec) -> dict:
            host = pool.get(spec)
            path = str(tmp_path / spec.name)
            host.write_atomic(path, spec.name.encode())
            return {"changed": True, "pid": host.info()["pid"]}

        first = run_parallel(specs, step)
        second = run_parallel(specs, step)
    assert [r.status for r in first] == ["changed", "changed", "changed", "unreachable"], \
        [(r.host, r.error) for r in first]
    assert [r.data for r in first[:3]] == [r.data for r in second[:3]]      # same agents reused
    assert [_accepted(s) for s in sshd_many] == [b + 1 for b in before]      # one connection each
    assert (tmp_path / "master2").read_bytes() == b"master2"
    lines = [" ".join(line.split()) for line in recap(first).splitlines()]
    assert "dead : ok=0 changed=0 unreachable=1 failed=0 skipped=0" in lines


def test_rolling_over_real_masters(sshd_many: List[SSHServer], fleet_inventory: Any, tmp_path) -> None:
    specs = fleet_inventory.select("masters")
    lock = str(tmp_path / "lock")

    with _pool(sshd_many) as pool:
        holder = pool.get(specs[1])
        holder.lock(lock, 1, "maintenance on master2")

        def step(spec: HostSpec) -> dict:
            host = pool.get(spec)
            if spec.name == "master2":
                other = ConnectionPool(_connector(sshd_many[0].options(ssh_config="none")))
                try:
                    other.get(spec).lock(lock, 0.2, spec.name)
                finally:
                    other.close()
            return {"changed": False, "rc": host.run(["true"]).rc}

        results = run_rolling(specs, step, serial=1)
    assert [r.status for r in results] == ["ok", "failed", "skipped"]
    assert results[1].error == "node locked by maintenance on master2"
    text = recap(results)
    assert "master3 : ok=0 changed=0 unreachable=0 failed=0 skipped=1" in text

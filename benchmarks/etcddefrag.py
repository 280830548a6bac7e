"""Defragmenting a real 3-member etcd 3.5.1 (kubeadm's flags and PKI, tests.realetcd): cpctl's rolling
``etcd defrag --all`` (one member at a time, the leader last after a leadership move) next to
``etcdctl defrag --cluster`` (every member at once), each after 150 MiB of garbage per member (written,
deleted, compacted) and 8 MiB of live data, with a writer putting a key every 100 ms through the
cluster (each member in turn, 0.5 s per try). Prints the wall time and the writer's longest gap.

Run: ``CPCTL_LAB_PORTS=LOW-HIGH python -m benchmarks.etcddefrag [ROUNDS]``."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Tuple

from tests import etcdnodes as en
from tests.realetcd import RealEtcd, installed


def _cluster(base: str) -> RealEtcd:
    cluster = RealEtcd(installed(), Path(tempfile.mkdtemp(dir=base)))
    cluster.bootstrap(["m1", "m2", "m3"])
    live = os.urandom(256 << 10)
    for index in range(32):
        assert cluster.put(b"/live/%04d" % index, live)[0] == 200
    en.garbage(cluster, 150)
    return cluster


def _measure(run: Callable[[RealEtcd], None], base: str) -> Tuple[float, float]:
    cluster = _cluster(base)
    try:
        writer = en.Writer(cluster).start()
        time.sleep(0.5)
        started = time.monotonic()
        run(cluster)
        elapsed = time.monotonic() - started
        time.sleep(0.5)
        return elapsed, writer.stop()
    finally:
        cluster.close()


def _cpctl(cluster: RealEtcd) -> None:
    en.cpctl(cluster, "m1", "etcd", "defrag", "--all")


def _etcdctl(cluster: RealEtcd) -> None:
    result = cluster.ctl("defrag", "--cluster", as_json=False)
    assert result.rc == 0, result.stderr


def main(rounds: int = 3) -> None:
    base = tempfile.mkdtemp(prefix="etcddefrag-")
    rows: List[Tuple[str, float, float]] = []
    for _ in range(rounds):
        for name, run in (("cpctl etcd defrag --all", _cpctl), ("etcdctl defrag --cluster", _etcdctl)):
            elapsed, gap = _measure(run, base)
            rows.append((name, elapsed, gap))
            print("%-26s %6.2f s   longest write gap %.2f s" % (name, elapsed, gap), flush=True)
    print("load average: %s" % " / ".join("%.2f" % x for x in os.getloadavg()))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)

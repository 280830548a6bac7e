"""Defragmenting a real 3-member etcd 3.5.1 (kubeadm's flags and PKI, tests.realetcd): cpctl's rolling
``etcd defrag --all`` (one member at a time, the leader last after a leadership move) next to
``etcdctl defrag --cluster`` (every member in turn, in member-list order, nothing checked between),
each after 150 MiB of garbage per member (written, deleted, compacted) and 8 MiB of live data, with a
writer putting a key every 100 ms through the cluster (each member in turn, 0.5 s per try). Prints the
wall time and the writer's longest gap.

Run: ``CPCTL_LAB_PORTS=LOW-HIGH python -m benchmarks.etcddefrag [ROUNDS]``.

``python -m benchmarks.etcddefrag lab [MIB] [ROUNDS]`` (root: it starts sshd) runs issue 46's "Done
when" case at full size: the lab's ``ha`` profile with the real etcd, ``MIB`` (150) MiB of garbage per
member, ``cpctl -i INV etcd defrag --all`` over real sshd next to ``etcdctl defrag --cluster``, both
watched by the test's sampler and etcd's own logs (tests/labdefrag.py, the code of
tests/fleet/test_etcd_defrag_fleet.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

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


def _lab_etcdctl(lab: Any) -> Callable[[], Dict[str, Any]]:
    def run() -> Dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "cpctl", "lab", "etcdctl", "--dir", str(lab.dir), "--master", "1",
                               "defrag", "--cluster"], capture_output=True, text=True, timeout=en.RUN_TIMEOUT)
        assert done.returncode == 0, done.stderr
        return {}
    return run


def lab_main(garbage_mb: int = 150, rounds: int = 1) -> None:
    """The lab case (see the module docstring): one line per tool and round."""
    from cpctl_lab.control import start_lab
    from tests import labdefrag as ld
    from tests.labfixture import FAST
    from tests.sshfixture import new_session, start_many
    base = tempfile.mkdtemp(prefix="etcddefrag-lab-")
    os.environ.setdefault("CPCTL_CONFIRM_BOOT_DIR", tempfile.mkdtemp(dir=base))
    session = new_session()
    servers = start_many(session)
    try:
        for round_no in range(rounds):
            for name in ("cpctl -i INV etcd defrag --all", "etcdctl defrag --cluster"):
                work = tempfile.mkdtemp(dir=base)
                lab = start_lab(Path(work) / "lab", profile="ha", **FAST)
                try:
                    cluster = ld.LabEtcd(lab)
                    run_it = ld.over_ssh(lab, servers[0].ssh_config, servers[0].known_hosts, work) \
                        if name.startswith("cpctl") else _lab_etcdctl(lab)
                    run = ld.run_rolling_defrag(cluster, run_it, garbage_mb)
                    logged = ld.log_intervals(lab)
                    spans = sorted((s[0], s[1], m) for m, ss in logged.items() for s in ss)
                    overlap = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
                    print("round %d, %s: %s; etcd's logs: order %s, each %s s, %d overlapping; sampler: %d "
                          "overlapping pairs; sizes after %s; leader %s -> %s" % (
                              round_no + 1, name, ld.summary(run, garbage_mb, name), [m for _, _, m in spans],
                              [round(e - s, 2) for s, e, _ in spans], overlap, len(run.sampler.overlaps()),
                              {m: (st["dbSize"], st["dbSizeInUse"]) for m, st in run.after.items()},
                              run.leader_before, run.leader_after), flush=True)
                finally:
                    lab.stop()
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(session.base, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)      # each lab's etcd holds ~0.5 GB after the load
    print("load average: %s" % " / ".join("%.2f" % x for x in os.getloadavg()))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "lab":
        lab_main(*(int(a) for a in sys.argv[2:4]))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)

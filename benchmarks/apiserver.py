"""From the API server's return to cpctl's verdict: ``cpctl flags kube-apiserver`` on a "real master".

The lab's ``real-master`` profile (realistic timing, API server boot 45 s, etcd 7 s) at
``time_scale`` 0.1: the API server boots in 4.5 s, its readiness probe runs every 0.1 s. While
cpctl runs ``flags apiserver --set v=N --settle 0``, a thread asks the load balancer's API port
every 20 ms whether it answers. Measured per run:

* **gone**: how long the API did not answer (old API server stopping, new one booting);
* **return → verdict**: from the first answer after the outage to the exit of cpctl with its
  verified verdict (the wait polls every 50 ms; the new API server must also answer ``/readyz``,
  which in the lab it does from its boot, so the figure is cpctl's own latency of noticing plus its
  exit). Goal: at most 1 s beyond the probe period.

The settle check is left out (``--settle 0``): it adds exactly its ``--settle`` seconds on purpose.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from typing import List, Optional, Tuple

from benchmarks.harness import load_average, machine_info, median, table, write_section

TIME_SCALE = 0.1
READINESS_PERIOD = 1.0 * TIME_SCALE         # kubeadm's API server readinessProbe periodSeconds 1, scaled


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _one(env: dict, host: str, port: int, level: int) -> Tuple[float, float, float]:
    """(seconds the API was gone, seconds from its return to cpctl's exit, cpctl's wait seconds)."""
    events: List[Tuple[float, bool]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            events.append((time.monotonic(), _answers(host, port)))
            stop.wait(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    proc = subprocess.run([sys.executable, "-m", "cpctl", "-o", "json", "flags", "apiserver", "--set",
                           "v=%d" % level, "--settle", "0"], env=env, capture_output=True, timeout=300)
    done = time.monotonic()
    stop.set()
    thread.join(5)
    if proc.returncode != 0:
        raise RuntimeError("cpctl flags failed (%d): %s"
                           % (proc.returncode, proc.stderr.decode(errors="replace")[-400:]))
    gone_at: Optional[float] = next((at for at, ok in events if not ok), None)
    back_at = next((at for at, ok in events if ok and gone_at is not None and at > gone_at), None)
    if gone_at is None or back_at is None:
        raise RuntimeError("the API never went away and came back during the run")
    return back_at - gone_at, done - back_at, float(json.loads(proc.stdout)["wait"]["elapsed_seconds"])


def run(runs: int = 5) -> str:
    from cpctl_lab.control import start_lab
    load_before = load_average()
    work = tempfile.mkdtemp(prefix="cpctl-bench-apiserver-")
    lab = start_lab(os.path.join(work, "lab"), profile="real-master", time_scale=TIME_SCALE, timeout=60)
    try:
        env = dict(os.environ, **lab.env)
        env.pop("CPCTL_PROBE", None)
        url = urllib.parse.urlsplit(lab.api_url)
        host, port = url.hostname or "127.0.0.1", int(url.port or 0)
        _one(env, host, port, 1)                # warm-up
        samples = [_one(env, host, port, 2 + i % 2) for i in range(runs)]
    finally:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    gone, verdict, waits = ([s[i] for s in samples] for i in range(3))
    rows = [["API gone", "%.2f s" % median(gone), "%.2f–%.2f s" % (min(gone), max(gone))],
            ["API's return → cpctl's verdict (exit)", "%.2f s" % median(verdict),
             "%.2f–%.2f s" % (min(verdict), max(verdict))],
            ["cpctl's whole wait (write → verified)", "%.2f s" % median(waits),
             "%.2f–%.2f s" % (min(waits), max(waits))]]
    beyond = median(verdict) - READINESS_PERIOD
    body = ("Machine: %s. Load average before: %s, after: %s. Lab profile `real-master` at time scale %.1f "
            "(API server boot 4.5 s, readiness probe period %.1f s); `cpctl flags apiserver --set v=N --settle 0`, "
            "median of %d runs after one warm-up.\n\n%s\n\nGoal: the verdict at most 1 s beyond the probe period "
            "after the API's return: %.2f s beyond it, %s. The figure includes cpctl's exit (a Python process "
            "ending); the wait polls crictl and the health endpoint every 50 ms, never the frozen mirror pod.\n"
            % (machine_info(), load_before, load_average(), TIME_SCALE, READINESS_PERIOD, runs,
               table(["what", "median", "min–max"], rows), beyond, "met" if beyond <= 1.0 else "MISSED"))
    write_section("10. API server change: from the API's return to the verdict", body)
    return body

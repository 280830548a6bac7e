"""Fail fast (issue 32): how long a crash-looping new version runs before cpctl has rolled it back,
for the scheduler and for the API server, side by side in one lab.

Each run is ``cpctl flags COMPONENT --set no-such-flag=1 --force --settle 0``: the lab's binaries
reject the flag as the real ones do (``Error: unknown flag``), so the new container exits 1 and the
kubelet backs off. Measured:

* **first failed exit → rollback verified**: from the moment the runtime records the new version's
  first container exit with an error (crictl ``finishedAt``) to the moment cpctl has put the previous
  version back and seen it Running and Ready (the process ends) - what the issue asks for;
* **end to end**: the whole cpctl run, write to exit 11.

Before issue 32 the API server's gate (its own /readyz) never asked the runtime, so the same run
waited out the whole startup budget: 257 s in the lab (measured when the issue was filed), while the
scheduler was rolled back at its first back-off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from benchmarks.harness import load_average, machine_info, median, table, write_section

COMPONENTS = ("kube-scheduler", "kube-apiserver")


def _first_failed_exit(crictl: str, component: str, since_ns: int) -> Optional[float]:
    """Epoch seconds of the first exit with an error of ``component``'s containers created after
    ``since_ns`` (crictl's nanoseconds), from ``crictl ps -a`` and ``crictl inspect``."""
    listing = json.loads(subprocess.run([crictl, "ps", "-a", "-o", "json"], capture_output=True, text=True,
                                        timeout=30, check=True).stdout)
    exits = []
    for container in listing.get("containers", []):
        if container["metadata"]["name"] != component or int(container["createdAt"]) < since_ns:
            continue
        status = json.loads(subprocess.run([crictl, "inspect", container["id"]], capture_output=True, text=True,
                                           timeout=30, check=True).stdout)["status"]
        if status.get("exitCode"):
            exits.append(_rfc3339(status["finishedAt"]))
    return min(exits) if exits else None


def _rfc3339(text: str) -> float:
    whole, _, rest = text.rstrip("Z").partition(".")
    return time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - time.timezone + float("0." + (rest or "0"))


def measure(runs: int) -> Dict[str, Dict[str, List[float]]]:
    from cpctl_lab.control import start_lab
    work = tempfile.mkdtemp(prefix="cpctl-bench-failfast-")
    lab = start_lab(os.path.join(work, "lab"), timeout=60)
    try:
        env = dict(os.environ, **lab.env)
        env.pop("CPCTL_PROBE", None)
        found: Dict[str, Dict[str, List[float]]] = {c: {"fail_to_rollback": [], "end_to_end": []} for c in COMPONENTS}
        for _ in range(runs):
            for component in COMPONENTS:                      # interleaved: same lab, same load
                since_ns = time.time_ns()
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "cpctl", "flags", component, "--set", "no-such-flag=1",
                                       "--force", "--settle", "0"], env=env, capture_output=True, text=True,
                                      timeout=400)
                ended, took = time.time(), time.perf_counter() - start
                if proc.returncode != 11 or "crash-loops" not in proc.stderr:
                    raise RuntimeError("%s: expected a fail-fast rollback (exit 11), got %d: %s"
                                       % (component, proc.returncode, proc.stderr[-400:]))
                first = _first_failed_exit(env["CPCTL_CRICTL"], component, since_ns)
                if first is None:
                    raise RuntimeError("%s: crictl shows no failed exit of the new version" % component)
                found[component]["fail_to_rollback"].append(ended - first)
                found[component]["end_to_end"].append(took)
                time.sleep(1.0)                               # the restored pod settles (Lease, mirror)
        return found
    finally:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(runs: int = 3) -> str:
    load_before = load_average()
    found = measure(runs)
    rows = []
    for component, values in found.items():
        fail, total = values["fail_to_rollback"], values["end_to_end"]
        rows.append([component, "%.1f s" % median(fail), "%.1f–%.1f s" % (min(fail), max(fail)),
                     "%.1f s" % median(total)])
    ratio = median(found["kube-apiserver"]["fail_to_rollback"]) / median(found["kube-scheduler"]["fail_to_rollback"])
    body = ("Machine: %s. Load average before: %s, after: %s. %d runs per component, interleaved, in one lab "
            "(default lags).\n\n%s\n\nAPI server ÷ scheduler (first failed exit → rollback verified, medians): "
            "%.2f×. Before issue 32 the API server's run took 257 s (its gate waited out the startup budget "
            "while crictl showed the crash loop); the scheduler's was already fast.\n"
            % (machine_info(), load_before, load_average(), runs,
               table(["component", "first failed exit → rollback verified (median)", "min–max",
                      "end to end (median)"], rows), ratio))
    write_section("11. fail fast", body)
    return body

"""Stop -> start round trip of kube-scheduler against the lab: cpctl versus the manual way.

The lab's kubelet imposes ``stop_lag`` (containers exit), ``start_lag`` (admission to running) and
``ready_lag`` (running to Ready); with all three set to L the kubelet alone needs 3L per round
trip. What is left above 3L is the tool's own overhead (process start-up, polling granularity,
verification), which is what the target (<= 0.3 s) is about.

Compared, same lab, same lags, runs interleaved so load spikes hit every variant alike:

* ``cpctl stop`` + ``cpctl start`` (two processes, default ``--probe auto``: mirror pod, crictl and
  the Lease gate) and with ``--probe api`` (mirror pod only, what the manual loop checks);
* ``cpctl restart`` (one process, ``--probe auto``);
* the manual way: ``mv`` the manifest out, poll ``kubectl get pod`` until NotFound, ``mv`` it back,
  poll until the pod's Ready condition is True (a tight loop without sleep: the manual best case).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import load_average, machine_info, median, table, write_section

LAGS = (0.2, 1.0)
COMPONENT = "kube-scheduler"

MANUAL = r"""set -eu
mv "$M/$F" "$PARK/$F"
while [ -n "$(kubectl get pod "$P" -n kube-system --ignore-not-found -o name)" ]; do :; done
mv "$PARK/$F" "$M/$F"
until [ "$(kubectl get pod "$P" -n kube-system --ignore-not-found \
      -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; do :; done
"""


def _run(argv: list, env: dict) -> float:
    """Run one command; for cpctl (-o json) return the seconds it spent waiting for the kubelet."""
    proc = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), proc.returncode,
                                                    (proc.stderr or proc.stdout)[-400:].decode(errors="replace")))
    if "-o" not in argv:
        return 0.0
    result = json.loads(proc.stdout)["results"][0]
    waits = [result.get("wait")] + [(result.get(step) or {}).get("wait") for step in ("stop", "start")]
    return sum(w["elapsed_seconds"] for w in waits if isinstance(w, dict))


def _variants(env: dict, park: str) -> dict:
    cpctl = [sys.executable, "-m", "cpctl", "-o", "json"]
    manual_env = dict(env, M=env["CPCTL_MANIFESTS_DIR"], F=COMPONENT + ".yaml", PARK=park,
                      P="%s-%s" % (COMPONENT, env["CPCTL_NODE_NAME"]))
    return {
        "cpctl stop + cpctl start (probe auto)": lambda: (_run(cpctl + ["stop", "scheduler"], env)
                                                         + _run(cpctl + ["start", "scheduler"], env)),
        "cpctl stop + cpctl start (--probe api)": lambda: (
            _run(cpctl + ["--probe", "api", "stop", "scheduler"], env)
            + _run(cpctl + ["--probe", "api", "start", "scheduler"], env)),
        "cpctl restart (probe auto, one process)": lambda: _run(cpctl + ["restart", "scheduler"], env),
        "manual: mv + kubectl get poll (x2)": lambda: _run(["bash", "-c", MANUAL], manual_env),
    }


def _settle(manifests_dir: str) -> None:
    if not os.path.exists(os.path.join(manifests_dir, COMPONENT + ".yaml")):
        raise RuntimeError("%s.yaml is not back in %s" % (COMPONENT, manifests_dir))
    time.sleep(0.3)     # let the lab finish bookkeeping (lease, mirror status) before the next run


def measure(lag: float, runs: int) -> dict:
    from cpctl_lab.control import start_lab
    work = tempfile.mkdtemp(prefix="cpctl-bench-rt-")
    lab = start_lab(os.path.join(work, "lab"), start_lag=lag, ready_lag=lag, stop_lag=lag, timeout=60)
    try:
        env = dict(os.environ, **lab.env)
        park = os.path.join(work, "manual-park")
        os.mkdir(park)
        variants = _variants(env, park)
        samples: dict = {name: [] for name in variants}
        waits: dict = {name: [] for name in variants}
        for fn in variants.values():       # warm-up: page cache, kubectl discovery cache
            fn()
            _settle(env["CPCTL_MANIFESTS_DIR"])
        for _ in range(runs):
            for name, fn in variants.items():
                start = time.perf_counter()
                waited = fn()
                samples[name].append(time.perf_counter() - start)
                waits[name].append(waited)
                _settle(env["CPCTL_MANIFESTS_DIR"])
        return samples, waits
    finally:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(runs: int = 7) -> str:
    if not shutil.which("kubectl"):
        raise SystemExit("roundtrip benchmark: kubectl is needed for the manual comparison (not on PATH)")
    load_before = load_average()
    sections = []
    summary = []
    for lag in LAGS:
        samples, waits = measure(lag, runs)
        kubelet = 3 * lag
        manual = median(samples["manual: mv + kubectl get poll (x2)"])
        rows = []
        for name, values in samples.items():
            med = median(values)
            waited = "%.0f ms" % ((median(waits[name]) - kubelet) * 1000) if name.startswith("cpctl") else "-"
            rows.append([name, "%.2f s" % med, "%.2f–%.2f s" % (min(values), max(values)),
                         "%.0f ms" % ((med - kubelet) * 1000), waited, "%.2f×" % (med / manual)])
        sections.append("**L = %.1f s** (stop_lag = start_lag = ready_lag = L: the kubelet alone needs %.1f s)\n\n%s"
                        % (lag, kubelet, table(["variant", "median", "min–max", "overhead (median − 3L)",
                                                "wait overhead (waits − 3L)", "vs manual"], rows)))
        for name in samples:
            if name.startswith("cpctl"):
                summary.append((lag, name, median(samples[name]) - kubelet, median(waits[name]) - kubelet))
    verdicts = "; ".join("L=%.1f %s: end to end %.0f ms %s, waits %.0f ms %s"
                         % (lag, name, over * 1000, "met" if over <= 0.3 else "MISSED", wait * 1000,
                            "met" if wait <= 0.3 else "MISSED")
                         for lag, name, over, wait in summary)
    body = ("Machine: %s. Load average before: %s, after: %s. Median of %d runs per variant "
            "(after one warm-up), variants interleaved.\n\n%s\n\nTarget: cpctl overhead ≤ 300 ms per round trip "
            "— %s.\n\n*Wait overhead* is what cpctl's own waits (the `elapsed` of each wait in its JSON "
            "output, from the file move to the verified state, health gates included) add to the kubelet's "
            "lags: the latency of noticing. *End to end* adds process start-up, imports, lock, journal and "
            "fsyncs.\n\nNotes: the overhead of `cpctl stop` + `cpctl start` includes two Python start-ups "
            "(see section 1) and, with `--probe auto`, the crictl checks and the Lease gate "
            "(the lab's scheduler takes the Lease as soon as it runs); `--probe api` waits for the same thing "
            "the manual loop does (mirror pod gone, then a Ready mirror pod). The manual loop polls "
            "`kubectl` back to back with no sleep, its best case; each `kubectl get` is a full Go process "
            "start plus an API round trip. Lab lags are exact timers, a real kubelet adds its own jitter.\n"
            % (machine_info(), load_before, load_average(), runs, "\n\n".join(sections), verdicts))
    write_section("2. Stop/start round trip", body)
    return body

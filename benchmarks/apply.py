"""What ``cpctl apply`` adds on top of the kubelet's own restart of a static pod, against the lab.

An edited manifest is a new pod for the kubelet (new config hash): the lab's kubelet stops the old
container (``stop_lag``), starts the new one (``start_lag``) and marks it Ready (``ready_lag``); with
all three set to L the kubelet alone needs 3L. Compared, same lab, same lags, runs interleaved:

* ``cpctl apply`` (``--probe auto``: mirror pod, crictl and the Lease gate; ``--settle 0``, so the
  figure is the verification itself -- the default ``--settle 5`` adds exactly its 5 s on purpose);
* ``cpctl flags --set`` (the same flow, plus reading and editing the file in place);
* the manual way: write the file (dot-temp + mv), then poll ``kubectl get pod`` until the mirror pod
  has a new ``config.hash`` and is Ready -- timed from the mv, a tight loop without sleep: the best
  case of checking by hand, with no validation, no revision, no journal and no rollback.

Each run alternates between two versions of kube-scheduler.yaml (``--v=1`` / ``--v=2``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

from benchmarks.harness import load_average, machine_info, median, table, write_section

LAGS = (0.2, 1.0)
COMPONENT = "kube-scheduler"
HASH = r"{.metadata.annotations.kubernetes\.io/config\.hash}"
MANUAL = r"""set -eu
get() { kubectl get pod "$P" -n kube-system --ignore-not-found \
        -o "jsonpath=%s {.status.conditions[?(@.type==\"Ready\")].status}"; }
old=$(get | cut -d' ' -f1)
start=$(date +%%s.%%N)
cp "$NEW" "$M/.$F.tmp" && mv "$M/.$F.tmp" "$M/$F"
while :; do
  set -- $(get) ""
  if [ -n "$1" ] && [ "$1" != "$old" ] && [ "${2:-}" = True ]; then break; fi
done
echo "$start $(date +%%s.%%N)"
""" % HASH


def _versions(manifests_dir: str, work: str) -> List[str]:
    with open(os.path.join(manifests_dir, COMPONENT + ".yaml"), "rb") as handle:
        base = handle.read()
    marker = b"- " + COMPONENT.encode() + b"\n"
    paths = []
    for number in (1, 2):
        path = os.path.join(work, "v%d.yaml" % number)
        with open(path, "wb") as handle:
            handle.write(base.replace(marker, marker + b"    - --v=%d\n" % number, 1))
        paths.append(path)
    return paths


def _cpctl(argv: List[str], env: dict) -> Tuple[float, float]:
    """(seconds end to end, seconds cpctl spent waiting for the new pod) of one cpctl run."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cpctl", "-o", "json"] + argv, env=env, capture_output=True,
                          timeout=120)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError("cpctl %s failed (%d): %s" % (" ".join(argv), proc.returncode,
                                                          proc.stderr.decode(errors="replace")[-400:]))
    return took, float(json.loads(proc.stdout)["wait"]["elapsed_seconds"])


def _manual(env: dict, new: str) -> Tuple[float, float]:
    proc = subprocess.run(["bash", "-c", MANUAL], env=dict(env, NEW=new), capture_output=True, timeout=120,
                          check=True)
    start, end = (float(x) for x in proc.stdout.split())
    return end - start, end - start


def _variants(env: dict, versions: List[str]) -> Dict[str, Callable[[int], Tuple[float, float]]]:
    return {
        "cpctl apply (probe auto, --settle 0)": lambda i: _cpctl(
            ["apply", "scheduler", "-f", versions[i % 2], "--settle", "0"], env),
        "cpctl flags --set (probe auto, --settle 0)": lambda i: _cpctl(
            ["flags", "scheduler", "--set", "v=%d" % (i % 2 + 1), "--settle", "0"], env),
        "manual: mv + kubectl poll for a new Ready pod (from the mv)": lambda i: _manual(env, versions[i % 2]),
    }


def measure(lag: float, runs: int) -> Tuple[Dict[str, List[float]], Dict[str, List[float]]]:
    from cpctl_lab.control import start_lab
    work = tempfile.mkdtemp(prefix="cpctl-bench-apply-")
    lab = start_lab(os.path.join(work, "lab"), start_lag=lag, ready_lag=lag, stop_lag=lag, timeout=60)
    try:
        env = dict(os.environ, **lab.env)
        env.pop("CPCTL_PROBE", None)
        manual_env = dict(env, M=env["CPCTL_MANIFESTS_DIR"], F=COMPONENT + ".yaml",
                          P="%s-%s" % (COMPONENT, env["CPCTL_NODE_NAME"]))
        versions = _versions(env["CPCTL_MANIFESTS_DIR"], work)
        variants = _variants(manual_env, versions)
        samples: Dict[str, List[float]] = {name: [] for name in variants}
        waits: Dict[str, List[float]] = {name: [] for name in variants}
        step = 0
        for fn in variants.values():            # warm-up: page cache, kubectl discovery cache
            fn(step)
            step += 1
            time.sleep(0.3)
        for _ in range(runs):
            for name, fn in variants.items():
                took, waited = fn(step)
                step += 1
                samples[name].append(took)
                waits[name].append(waited)
                time.sleep(0.3)                 # the lab's bookkeeping (lease, mirror status) settles
        return samples, waits
    finally:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(runs: int = 7) -> str:
    if not shutil.which("kubectl"):
        raise SystemExit("apply benchmark: kubectl is needed for the manual comparison (not on PATH)")
    load_before = load_average()
    sections = []
    for lag in LAGS:
        samples, waits = measure(lag, runs)
        kubelet = 3 * lag
        rows = []
        for name, values in samples.items():
            med, waited = median(values), median(waits[name])
            rows.append([name, "%.2f s" % med, "%.2f–%.2f s" % (min(values), max(values)),
                         "%.0f ms" % ((med - kubelet) * 1000), "%.0f ms" % ((waited - kubelet) * 1000)])
        sections.append("**L = %.1f s** (the kubelet alone needs 3L = %.1f s to replace the pod)\n\n%s"
                        % (lag, kubelet, table(["variant", "median end to end", "min–max",
                                                "added (median − 3L)", "added by the wait (wait − 3L)"], rows)))
    body = ("Machine: %s. Load average before: %s, after: %s. Median of %d runs per variant (after one "
            "warm-up), variants interleaved.\n\n%s\n\n*Added by the wait* is the time from cpctl's write to "
            "the verified new pod (the `wait.elapsed` of its JSON output: new config hash, Running, Ready, "
            "the Lease renewed by the new instance) minus the kubelet's 3L; for the manual loop, from the mv "
            "to the Ready mirror with a new hash. *End to end* adds process start-up, validation (parse, "
            "file and port checks), the lock, the journal, the revision and the fsyncs.\n"
            % (machine_info(), load_before, load_average(), runs, "\n\n".join(sections)))
    write_section("7. apply", body)
    return body

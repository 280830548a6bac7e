"""Start-up cost: cpctl --help and local status versus the imports they cannot avoid.

Every command runs once per round, the rounds one after another (A B C ... A B C ...), so a drift
in the machine's speed (other jobs on a shared box) moves every row alike; each row's median and
the median of its per-round ratio to the baseline are reported. ``cpctl`` is the installed console
script next to this interpreter (what a user runs), else ``python -m cpctl``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from benchmarks.harness import load_average, machine_info, median, table, write_section

MANIFEST = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: kube-system}
spec:
  containers: [{name: %s, image: registry.k8s.io/%s:v1.30.0}]
"""
CLICK = "python3 -c 'import click'"
CLICK_YAML = "python3 -c 'import click, yaml'"
HELP = "cpctl --help"
STATUS = "cpctl status (local, probe auto, no cluster)"
STATUS_LAB = "cpctl status (lab: live API, probe auto)"
HELP_GOAL, STATUS_GOAL = 1.3, 1.6


def _run_once(argv: Sequence[str], env: Dict[str, str]) -> Tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), proc.returncode, proc.stderr[-300:]))
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cpctl() -> List[str]:
    script = os.path.join(os.path.dirname(sys.executable), "cpctl")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "cpctl"]


def run(runs: int = 21, warmup: int = 2) -> str:
    py, cpctl = sys.executable, _cpctl()
    work = tempfile.mkdtemp(prefix="cpctl-bench-startup-")
    load_before = load_average()
    try:
        mdir = os.path.join(work, "manifests")
        os.mkdir(mdir)
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
            with open(os.path.join(mdir, name + ".yaml"), "w") as handle:
                handle.write(MANIFEST % (name, name, name))
        env = dict(os.environ, CPCTL_MANIFESTS_DIR=mdir, CPCTL_STATE_DIR=os.path.join(work, "state"),
                   CPCTL_NODE_NAME="bench", KUBECONFIG=os.path.join(work, "no-kubeconfig"))
        cases = [
            ("python3 -c pass", [py, "-c", "pass"]),
            (CLICK, [py, "-c", "import click"]),
            (CLICK_YAML, [py, "-c", "import click, yaml"]),
            (HELP, cpctl + ["--help"]),
            ("python -m cpctl --help", [py, "-m", "cpctl", "--help"]),
            (STATUS, cpctl + ["status"]),
            ("cpctl status (local, --probe none)", cpctl + ["--probe", "none", "status"]),
        ]
        kubectl = shutil.which("kubectl")
        if kubectl:
            cases.append(("kubectl version --client", [kubectl, "version", "--client"]))
        from cpctl_lab.control import start_lab
        lab = start_lab(os.path.join(work, "lab"), timeout=60)   # a master with a live API server
        envs = {label: env for label, _ in cases}
        cases.append((STATUS_LAB, cpctl + ["status"]))
        envs[STATUS_LAB] = dict(os.environ, **lab.env)
        rounds: List[Dict[str, Tuple[float, float]]] = []
        try:
            for index in range(warmup + runs):           # interleaved: one run of each case per round
                sample = {label: _run_once(argv, envs[label]) for label, argv in cases}
                if index >= warmup:
                    rounds.append(sample)
        finally:
            lab.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _report(cases, rounds, runs, load_before)


def _base_of(label: str) -> str:
    return CLICK_YAML if "status" in label else CLICK


def _report(cases: Sequence[Tuple[str, List[str]]], rounds: List[Dict[str, Tuple[float, float]]], runs: int,
            load_before: str) -> str:
    wall = {label: median([r[label][0] for r in rounds]) for label, _ in cases}
    cpu = {label: median([r[label][1] for r in rounds]) for label, _ in cases}
    rows = []
    for label, _ in cases:
        base = _base_of(label)
        paired = median([r[label][0] / r[base][0] for r in rounds])
        rows.append([label, "%.1f ms" % (wall[label] * 1000), "%.2f×" % (wall[label] / wall[base]),
                     "%.2f×" % paired, "%.1f ms" % (cpu[label] * 1000), "%.2f×" % (cpu[label] / cpu[base])])
    help_ratio, status_ratio = wall[HELP] / wall[CLICK], wall[STATUS] / wall[CLICK_YAML]
    lab_ratio = wall[STATUS_LAB] / wall[CLICK_YAML]
    verdict = ["`cpctl --help` / `import click` = %.2f× (goal ≤ %.1f×: %s)"
               % (help_ratio, HELP_GOAL, "met" if help_ratio <= HELP_GOAL else "MISSED"),
               "`cpctl status` / `import click, yaml` = %.2f× (goal ≤ %.1f×: %s)"
               % (status_ratio, STATUS_GOAL, "met" if status_ratio <= STATUS_GOAL else "MISSED"),
               "`cpctl status` against the lab / `import click, yaml` = %.2f× (goal ≤ %.1f×: %s)"
               % (lab_ratio, STATUS_GOAL, "met" if lab_ratio <= STATUS_GOAL else "MISSED")]
    body = ("Machine: %s. Load average before: %s, after: %s. %d rounds after 2 warm-up rounds, every "
            "command once per round (interleaved); `cpctl` is the installed console script.\n\n%s\n\n"
            "Ratios of medians (wall): %s. *Paired* is the median of the per-round ratios; CPU is user + "
            "system of the process.\n" % (
                machine_info(), load_before, load_average(), runs,
                table(["command", "median wall", "ratio (vs import click[, yaml])", "paired", "median CPU",
                       "CPU ratio"], rows), "; ".join(verdict)))
    write_section("1. Start-up", body)
    return body

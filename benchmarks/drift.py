"""Drift check cost: ``cpctl check --probe none`` on a manifests dir of 4 and of 50 files.

``--probe none`` leaves out the mirror pod checks (they need a cluster), so this measures the
part every cron/systemd-timer run pays: start-up, reading and parsing the manifests dir and the
state dir, comparing with the baseline. The floor is ``python3 -c "import click, yaml"``: the
imports cpctl cannot avoid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import load_average, machine_info, median, table, write_section

CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")

MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: %(name)s
  namespace: kube-system
  labels: {component: %(name)s, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  containers:
  - name: %(name)s
    image: registry.k8s.io/%(name)s:v1.30.0
    command: [%(name)s, --v=2, --bind-address=127.0.0.1]
    resources: {requests: {cpu: 100m}}
    volumeMounts: [{name: certs, mountPath: /etc/kubernetes/pki, readOnly: true}]
  volumes: [{name: certs, hostPath: {path: /etc/kubernetes/pki, type: DirectoryOrCreate}}]
"""


def make_dir(base: str, count: int) -> dict:
    """A manifests dir with the 4 control-plane pods plus ``count - 4`` other static pods."""
    mdir = os.path.join(base, "manifests-%d" % count)
    os.makedirs(mdir)
    names = list(CONTROL_PLANE) + ["static-pod-%02d" % i for i in range(count - len(CONTROL_PLANE))]
    for name in names:
        with open(os.path.join(mdir, name + ".yaml"), "w") as handle:
            handle.write(MANIFEST % {"name": name})
    return dict(os.environ, CPCTL_MANIFESTS_DIR=mdir, CPCTL_STATE_DIR=os.path.join(base, "state-%d" % count),
                CPCTL_NODE_NAME="bench", KUBECONFIG=os.path.join(base, "no-kubeconfig"), CPCTL_PROBE="none")


def time_argv(argv: list, env: dict, runs: int, ok=(0, 1), warmup: int = 2) -> tuple:
    """Wall-clock samples of ``argv``; exit codes in ``ok`` count as success (check: 1 = drift)."""
    samples, code = [], None
    for i in range(warmup + runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if proc.returncode not in ok:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), proc.returncode, proc.stderr[-300:]))
        code = proc.returncode
        if i >= warmup:
            samples.append(elapsed)
    return samples, code


def run(runs: int = 15) -> str:
    py = sys.executable
    cpctl = [py, "-m", "cpctl"]
    load_before = load_average()
    work = tempfile.mkdtemp(prefix="cpctl-bench-drift-")
    try:
        env4, env50 = make_dir(work, 4), make_dir(work, 50)
        cases = [("python3 -c 'import click, yaml' (floor)", [py, "-c", "import click, yaml"], env4)]
        cases.append(("cpctl check, 4 files, no baseline", cpctl + ["check"], env4))
        cases.append(("cpctl check, 50 files, no baseline", cpctl + ["check"], env50))
        results = {}
        for label, argv, env in cases:
            results[label] = time_argv(argv, env, runs)
        for env, count in ((env4, 4), (env50, 50)):
            subprocess.run(cpctl + ["baseline"], env=env, check=True, stdout=subprocess.DEVNULL)
            label = "cpctl check, %d files, with baseline" % count
            cases.append((label, cpctl + ["check"], env))
            results[label] = time_argv(cpctl + ["check"], env, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = median(results[cases[0][0]][0])
    rows, worst = [], 0.0
    for label, _argv, _env in cases:
        samples, code = results[label]
        med = median(samples)
        if label.startswith("cpctl"):
            worst = max(worst, med)
        rows.append([label, "%.0f ms" % (med * 1000), "%.0f–%.0f ms" % (min(samples) * 1000, max(samples) * 1000),
                     code, "%.2f×" % (med / floor)])
    body = ("Machine: %s. Load average before: %s, after: %s. Median of %d runs each (2 warm-ups), "
            "`CPCTL_PROBE=none` (no mirror pod checks: they need a cluster).\n\n%s\n\n"
            "Target: `cpctl check --probe none` ≤ 300 ms — slowest case %.0f ms: %s. Exit code 1 would "
            "mean drift found (the 46 extra static pods are expected once the baseline includes them).\n"
            % (machine_info(), load_before, load_average(), runs,
               table(["command", "median", "min–max", "exit", "vs floor"], rows), worst * 1000,
               "met" if worst <= 0.3 else "MISSED"))
    write_section("4. Drift check", body)
    return body

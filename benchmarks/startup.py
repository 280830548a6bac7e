"""Start-up cost: cpctl --help and local status versus the imports they cannot avoid."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from benchmarks.harness import machine_info, median, table, time_command, write_section

MANIFEST = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: kube-system}
spec:
  containers: [{name: %s, image: registry.k8s.io/%s:v1.30.0}]
"""


def run(runs: int = 15) -> str:
    py = sys.executable
    work = tempfile.mkdtemp(prefix="cpctl-bench-startup-")
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
            ("python3 -c 'import click'", [py, "-c", "import click"]),
            ("python3 -c 'import click, yaml'", [py, "-c", "import click, yaml"]),
            ("cpctl --help", [py, "-m", "cpctl", "--help"]),
            ("cpctl status (local, probe auto, no cluster)", [py, "-m", "cpctl", "status"]),
            ("cpctl status (local, --probe none)", [py, "-m", "cpctl", "--probe", "none", "status"]),
        ]
        kubectl = shutil.which("kubectl")
        if kubectl:
            cases.append(("kubectl version --client", [kubectl, "version", "--client"]))
        medians = {label: median(time_command(argv, runs=runs, env=env)) for label, argv in cases}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    click_t = medians["python3 -c 'import click'"]
    click_yaml = medians["python3 -c 'import click, yaml'"]
    rows = []
    for label, _ in cases:
        base = click_yaml if "status" in label else click_t
        rows.append([label, "%.1f ms" % (medians[label] * 1000), "%.2f×" % (medians[label] / base)])
    help_ratio = medians["cpctl --help"] / click_t
    status_ratio = medians["cpctl status (local, probe auto, no cluster)"] / click_yaml
    body = "Machine: %s. Median of %d runs each.\n\n%s\n\nRatios: `cpctl --help` / `import click` = %.2f× " \
           "(target ≤ 1.5×); `cpctl status` / `import click, yaml` = %.2f× (target ≤ 2.5×).\n" % (
               machine_info(), runs, table(["command", "median", "ratio (vs import click[, yaml])"], rows),
               help_ratio, status_ratio)
    write_section("1. Start-up", body)
    return body

"""``cpctl certs`` on one master and on 20 masters over real SSH (needs root: it starts sshd).

Each master (benchmarks/sshd.py: one sshd per loopback address) gets a kubeadm layout made by the
lab's PKI code: ``/etc/kubernetes/pki`` with real certificates, the five kubeconfigs and the four
kubeadm manifests whose flags name them. Three TLS listeners in this process serve the API
server's and etcd's (client, peer) certificates on the ports those manifests name, so every
master's serving verdicts come from a real handshake made by its agent. ``--probe none``: no
container start times (no crictl or API here), so the client-certificate half says "unknown";
what is timed is the reads, the handshakes and the parsing - the part that grows with masters.

Compared with what one would type instead for the file half only: ``openssl x509 -enddate`` of
every certificate, over ``ssh`` to each master in parallel (``&`` + ``wait``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from benchmarks.harness import load_average, machine_info, median, table, write_section
from benchmarks.sshd import Fleet, begin, start_fleet

COUNTS = (1, 5, 20)
OPENSSL = ('set -- $SSH_CONNECTION; cd %s/roots/"$3"/etc/kubernetes/pki && '
           'for f in *.crt etcd/*.crt; do openssl x509 -noout -enddate -subject -in "$f"; done')


class _Quiet(BaseHTTPRequestHandler):
    """A TLS listener's handler: the client only does the handshake and hangs up."""

    def handle(self) -> None:
        return

    def log_message(self, *args: Any) -> None:
        return


def _layout(fleet: Fleet, work: str) -> tuple:
    """Per master a node root (pki, kubeconfigs, manifests); the TLS listeners; an inventory of
    the first N masters for each N of COUNTS."""
    from cpctl_lab import pki, seeds
    from cpctl_lab.httpserve import free_port, serve
    from cpctl_lab.profiles import RELEASES
    template = Path(work) / "template"
    ports = {k: free_port() for k in ("apiserver", "controller-manager", "scheduler", "etcd-client", "etcd-peer",
                                      "etcd-metrics", "api")}
    servers = {"lb": "https://127.0.0.1:%d" % ports["apiserver"], "local": "https://127.0.0.1:%d" % ports["apiserver"],
               "kubelet": "https://127.0.0.1:%d" % ports["apiserver"]}
    etc = template / "etc/kubernetes"
    pki.write_node_pki(etc, pki.NodeInfo("master", "127.0.0.1", servers, True, template / "var/lib/kubelet/pki"))
    listeners = [serve("127.0.0.1", ports[key], _Quiet, tls=pki.server_context(etc / ("pki/%s.crt" % name),
                                                                              etc / ("pki/%s.key" % name)))
                 for key, name in (("apiserver", "apiserver"), ("etcd-client", "etcd/server"),
                                   ("etcd-peer", "etcd/peer"))]
    lines = ["all:", "  hosts:"]
    release = RELEASES[sorted(RELEASES)[-1]]
    inventories = {}
    for index, (alias, address) in enumerate(zip(fleet.aliases(max(COUNTS)), fleet.addresses), 1):
        root = Path(work) / "roots" / address
        shutil.copytree(template, root)
        kubelet = yaml.safe_load((root / "etc/kubernetes/kubelet.conf").read_text())
        kubelet["users"][0]["user"] = {k: v.replace(str(template), str(root))
                                      for k, v in kubelet["users"][0]["user"].items()}
        (root / "etc/kubernetes/kubelet.conf").write_text(yaml.safe_dump(kubelet))
        spec = seeds.SeedSpec(node=alias, ports=ports, members={alias: ports}, root=root, release=release)
        seeds.write_seeds(root / "etc/kubernetes/manifests", spec)
        lines.append("    %s: {ansible_host: %s, ansible_port: %d, ansible_user: root, node_name: %s, "
                     "manifests_dir: %s, state_dir: %s}" % (alias, address, fleet.port, alias,
                                                            root / "etc/kubernetes/manifests",
                                                            fleet.state_dir(address)))
        if index in COUNTS:
            inventories[index] = os.path.join(work, "inventory-%d.yaml" % index)
            with open(inventories[index], "w") as handle:
                handle.write("\n".join(lines) + "\n")
    return inventories, listeners


def _timed(argv: list, env: dict, check) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (argv[:4], proc.returncode, proc.stderr[-600:].decode()))
    check(proc.stdout)
    return elapsed


def _check_cpctl(count: int):
    def check(out: bytes) -> None:
        data = json.loads(out)
        hosts = data["hosts"] if "hosts" in data else [{"data": data}]
        assert len(hosts) == count, out[-400:]
        for host in hosts:
            verdicts = {c["component"]: c["verdict"] for c in host["data"]["components"]}
            assert verdicts["etcd"] == "current", verdicts           # two real handshakes per master
            assert len(host["data"]["certificates"]) == 15, host["data"]["certificates"]
    return check


def run(runs: int = 7) -> str:
    load_before, work = begin("certs", "certs")
    fleet, listeners = None, []
    results: dict = {}
    try:
        fleet = start_fleet(os.path.join(work, "fleet"), max(COUNTS))
        env = dict(os.environ, LC_ALL="C.UTF-8")
        variants = []
        first_root = Path(work) / "roots" / fleet.addresses[0]
        inventories, listeners = _layout(fleet, work)
        for count in COUNTS:
            inventory = inventories[count]
            cpctl = [sys.executable, "-m", "cpctl", "-i", inventory, "--ssh-config", fleet.ssh_config,
                     "--known-hosts", fleet.known_hosts, "--forks", "20", "--probe", "none", "-o", "json", "certs"]
            variants.append(("cpctl certs over SSH", count, cpctl, env, _check_cpctl(count)))
            ssh_env = dict(env, HOSTS=" ".join(fleet.aliases(count)), CFG=fleet.ssh_config, CMD=OPENSSL % work)
            variants.append(("ssh + openssl x509, parallel (files only)", count,
                             ["bash", "-c", 'for h in $HOSTS; do ssh -F "$CFG" "$h" "$CMD" >/dev/null & done; wait'],
                             ssh_env, lambda out: None))
        local_env = dict(env, CPCTL_MANIFESTS_DIR=str(first_root / "etc/kubernetes/manifests"),
                         CPCTL_STATE_DIR=os.path.join(work, "local-state"), CPCTL_NODE_NAME="h1")
        variants.insert(0, ("cpctl certs, local", 1, [sys.executable, "-m", "cpctl", "--probe", "none", "-o", "json",
                                                      "certs"], local_env, _check_cpctl(1)))
        for _name, _count, argv, venv, check in variants:   # warm-up and output check
            _timed(argv, venv, check)
        for _ in range(runs):                                 # interleaved: drift shifts all alike
            for name, count, argv, venv, _check in variants:
                results.setdefault(name, {}).setdefault(count, []).append(_timed(argv, venv, lambda out: None))
    finally:
        for srv in listeners:
            srv.stop()
        if fleet is not None:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = load_average()
    rows = []
    for name, per in results.items():
        cells = ["%.2f s" % median(per[n]) if n in per else "—" for n in COUNTS]
        ratio = "%.2f×" % (median(per[20]) / median(per[1])) if 1 in per and 20 in per else "—"
        rows.append([name] + cells + [ratio])
    body = ("## 9. certs\n\nMachine: %s. Load average before: %s, after: %s. Median of %d runs per variant "
            "(after one warm-up), variants interleaved.\n\n%s\n\n"
            "Per master: 15 certificates (10 under pki/, 5 kubeconfigs: 4 embedded, kubelet.conf naming a "
            "file) read with a size limit and parsed on this side, 3 TLS handshakes made by the master's agent "
            "(API server, etcd client and peer) compared with the files; `--probe none`, so no container start "
            "times. The openssl loop only prints the files' dates (no handshake, no chain, no verdict).\n"
            % (machine_info(), load_before, load_after, runs,
               table(["variant"] + ["%d host%s" % (n, "" if n == 1 else "s") for n in COUNTS] + ["20 / 1"], rows)))
    write_section("9. certs", body.split("\n", 2)[2])
    return body

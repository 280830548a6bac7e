"""``cpctl certs`` and ``restart --stale-certs`` over three real sshd against a three-master lab
(issues 26, 36): the verdicts come from each master's own agent (its handshakes, its files, its
clock), the restart rolls one master at a time behind the fleet quorum guard and restarts only the
controller-manager and the scheduler (etcd and the API server re-read their certificates), and
afterwards every verdict on every master is current.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List

import pytest

from tests.remoteutil import Cli, clean_env, lab_vars, read_history, write_inventory
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(300)
NAMES = ["master1", "master2", "master3"]
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
NEED_RESTART = ["kube-controller-manager", "kube-scheduler"]
RENEWED = {"etcd": "current", "kube-apiserver": "reloading", "kube-controller-manager": "STALE",
           "kube-scheduler": "STALE"}


class Fleet:
    def __init__(self, servers: List[SSHServer], lab: Any, tmp: str) -> None:
        self.lab = lab
        self.cli = Cli(servers[0].ssh_config, servers[0].known_hosts, clean_env(os.path.join(tmp, "home")))
        hosts = {name: dict(host=name, **lab_vars(lab, i + 1)) for i, name in enumerate(NAMES)}
        self.inv = write_inventory(os.path.join(tmp, "inv.yaml"), hosts)

    def json(self, *args: str, rc: int = 0) -> dict:
        return self.cli.json("-i", self.inv, *args, rc=rc)

    def verdicts(self) -> Dict[str, Dict[str, str]]:
        doc = self.json("certs")
        return {h["host"]: {c["component"]: c["verdict"] for c in h["data"]["components"]} for h in doc["hosts"]}


@pytest.fixture
def fleet(sshd_many: List[SSHServer], lab3: Any, tmp_path: Any) -> Iterator[Fleet]:
    yield Fleet(sshd_many, lab3, str(tmp_path))


def test_certs_and_restart_stale_certs_over_ssh(fleet: Fleet) -> None:
    doc = fleet.json("certs")
    assert [h["status"] for h in doc["hosts"]] == ["ok"] * 3
    for host in doc["hosts"]:
        certs = {c["name"]: c for c in host["data"]["certificates"]}
        assert certs["pki/etcd/peer.crt"]["chain"] == "ok" and certs["kubelet.conf"]["embedded"] is False
        assert ("super-admin.conf" in certs) == (host["host"] == "master1")     # the kubeadm init node only
    cas = {h["host"]: next(c["subject"] for c in h["data"]["certificates"] if c["name"] == "pki/ca.crt")
           for h in doc["hosts"]}
    assert set(cas.values()) == {"CN=kubernetes"}
    assert fleet.verdicts() == {n: dict.fromkeys(COMPONENTS, "current") for n in NAMES}

    renew = subprocess.run([sys.executable, "-m", "cpctl", "lab", "certs-renew", "--dir", str(fleet.lab.dir)],
                           capture_output=True, text=True, timeout=60)
    assert renew.returncode == 0, renew.stderr
    assert fleet.verdicts() == {n: RENEWED for n in NAMES}
    # the API servers' minute passes (the lab re-reads a file once its change is a scaled minute old)
    then = time.time() - 61
    for i in range(1, 4):
        for name in ("apiserver.crt", "apiserver.key"):
            os.utime(fleet.lab.root_dir(i) / "etc/kubernetes/pki" / name, (then, then))
    renewed = dict(RENEWED, **{"kube-apiserver": "current"})
    assert fleet.verdicts() == {n: renewed for n in NAMES}

    # the quorum guard counts etcd as possibly restarted: with master1's etcd down, restarting
    # master2's would leave 1 of 3 - refused before anything moves
    fleet.json("-H", "master1", "stop", "etcd")
    proc = fleet.cli.run("-i", fleet.inv, "-H", "master2", "restart", "--stale-certs", rc=4)
    assert "quorum" in proc.stderr
    assert fleet.verdicts()["master2"] == renewed
    fleet.json("-H", "master1", "start", "etcd")
    assert fleet.verdicts()["master1"]["etcd"] == "current"

    dry = fleet.json("restart", "--stale-certs", "--dry-run")
    stops = {h["host"]: [s["component"] for s in h["data"]["plan"] if s["action"] == "stop"] for h in dry["hosts"]}
    assert stops == dict.fromkeys(NAMES, NEED_RESTART)
    left = {h["host"]: {x["component"]: x["verdict"] for x in h["data"]["left"]} for h in dry["hosts"]}
    assert left == dict.fromkeys(NAMES, {"etcd": "current", "kube-apiserver": "current"})

    doc = fleet.json("--serial", "1", "restart", "--stale-certs")
    assert [(h["host"], h["status"]) for h in doc["hosts"]] == [(n, "changed") for n in NAMES]
    for i in range(1, len(NAMES) + 1):
        restarted = [r["component"] for r in read_history(str(fleet.lab.state_dir(i)))
                     if r["action"] == "stop" and r.get("reason") == "certificates renewed"]
        assert restarted == NEED_RESTART, restarted
    assert fleet.verdicts() == {n: dict.fromkeys(COMPONENTS, "current") for n in NAMES}

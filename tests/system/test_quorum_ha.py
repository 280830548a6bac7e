"""Issue #32: the fleet guard counts what really runs, on the lab's ``ha`` profile (3 masters, v1.33
local-mode kubelets, stacked etcd, RBAC) behind three real sshd (127.0.0.1, .2, .3).

There a parked etcd's mirror pod stays Ready as last heard: the master's local-mode kubelet talks
only to its own API server, which has no etcd. ``--census cluster`` used to count that mirror pod
as a running member and let a second master's etcd go; it now asks etcd (member list, each
member's /health) and the API servers' own /readyz.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from tests.labfixture import FAST, start_lab
from tests.remoteutil import Cli, lab_vars, write_inventory
from tests.sshfixture import SSHServer
from tests.system.test_ansible_fleet import NAMES, Play, recap

pytestmark = [pytest.mark.timeout(600), pytest.mark.end_to_end]


@pytest.fixture
def ha_play(sshd_many: List[SSHServer], tmp_path: Path) -> Iterator[Play]:
    with start_lab(tmp_path / "lab", profile="ha", **FAST) as lab:
        yield Play(sshd_many, lab, str(tmp_path))


def etcd_in_place(play: Play) -> List[bool]:
    return [os.path.exists(play.manifest(i, "etcd.yaml")) for i in (1, 2, 3)]


def mirror_ready(play: Play, i: int) -> bool:
    """Whether the API still shows master ``i``'s etcd mirror pod Ready (asked through master1's API)."""
    env = dict(os.environ, KUBECONFIG=lab_vars(play.lab, 1)["kubeconfig"], HOME=play.tmp)
    proc = subprocess.run(["kubectl", "-n", "kube-system", "get", "pod", "etcd-%s" % play.lab.node_name(i), "-o",
                           "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                          env=env, capture_output=True, text=True, timeout=30)
    return proc.stdout.strip() == "True"


def restore(play: Play) -> None:
    play.cli.run("-i", play.cpctl_inv, "--probe", "none", "start", "etcd", rc=None)


def test_a_second_member_is_refused_although_its_mirror_pod_says_ready(ha_play: Play) -> None:
    play, cli, inv = ha_play, ha_play.cli, ha_play.cpctl_inv
    try:
        # a dry run counts the same way but writes nothing to the cluster: no change lease
        cli.run("-i", inv, "-H", "master3", "--census", "cluster", "stop", "etcd", "--dry-run")
        missing = kubectl_admin(play, "-n", "kube-system", "get", "lease", "cpctl-control-plane-changes")
        assert missing.returncode != 0 and "NotFound" in missing.stderr, missing.stdout + missing.stderr
        cli.run("-i", inv, "-H", "master3", "--census", "cluster", "stop", "etcd")
        assert etcd_in_place(play) == [True, True, False]
        # The case the guard used to miss: the API still says master3's etcd is Ready.
        assert mirror_ready(play, 3)
        before = play.snap()
        proc = cli.run("-i", inv, "-H", "master2", "--census", "cluster", "stop", "etcd", rc=4)
        assert "1 of 3 etcd running, 2 now" in proc.stderr and "--force" not in proc.stderr
        # issue 48: the hint names the member that is down and what to do about it; --serial 1 only
        # when the run changed several masters at once (this one targets master2 alone)
        assert "master3: bring it back there first" in proc.stderr and "--serial 1" not in proc.stderr, proc.stderr
        assert play.snap() == before and etcd_in_place(play) == [True, True, False]
        # The inventory census asks each master's etcd too: the same refusal.
        proc = cli.run("-i", inv, "-H", "master2", "stop", "etcd", rc=4)
        assert "1 of 3 etcd running, 2 now" in proc.stderr
    finally:
        restore(play)
    assert etcd_in_place(play) == [True, True, True]


def test_two_runs_at_once_leave_a_quorum(ha_play: Play) -> None:
    play, cli, inv = ha_play, ha_play.cli, ha_play.cpctl_inv
    try:
        procs = [cli.popen("-i", inv, "-H", host, "--census", "cluster", "stop", "etcd", stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for host in ("master2", "master3")]
        outs = [p.communicate(timeout=300) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 4], (codes, outs)
        assert sum(etcd_in_place(play)) == 2
    finally:
        restore(play)


STOP_ETCD = """
- hosts: masters
  serial: 3
  gather_facts: false
  tasks:
    - cpctl.controlplane.static_pod:
        component: etcd
        state: stopped
        reason: drill
        timeout: 60
"""


def test_a_play_with_serial_3_stops_at_most_one_member(ha_play: Play) -> None:
    play = ha_play
    try:
        proc = play.run(play.playbook("stop-etcd.yml", STOP_ETCD), rc=2)
        counts = recap(proc)
        assert sum(etcd_in_place(play)) == 2, proc.stdout
        failed = [n for n in NAMES if counts.get(n, (0, 0, 0, 0, 0))[3] == 1]
        assert len(failed) == 2 and "etcd running" in proc.stdout and "exit 4" in proc.stdout
    finally:
        restore(play)
    assert etcd_in_place(play) == [True, True, True]


def inventory_without(play: Play, name: str) -> str:
    hosts = {n: dict(host=n, **v) for n, v in play.hosts.items() if n != name}
    return write_inventory(os.path.join(play.tmp, "without-%s.yaml" % name), hosts)


def test_a_member_the_census_cannot_ask_counts_as_not_running(ha_play: Play, tmp_path: Any) -> None:
    """master1's etcd answers to nobody without a client certificate its CA signed: with the
    certificate gone from master2, master2 cannot read the member list - refused, fail safe."""
    play, cli, inv = ha_play, ha_play.cli, ha_play.cpctl_inv
    root = lab_vars(play.lab, 2)["node_root"]
    for name in ("apiserver-etcd-client.key", "etcd/healthcheck-client.key"):
        path = os.path.join(root, "etc/kubernetes/pki", name)
        os.rename(path, path + ".away")
    try:
        before = play.snap()
        proc = cli.run("-i", inv, "-H", "master2", "--census", "cluster", "stop", "etcd", rc=4)
        assert "cannot count etcd members from" in proc.stderr and "--force" not in proc.stderr
        assert play.snap() == before
    finally:
        for name in ("apiserver-etcd-client.key", "etcd/healthcheck-client.key"):
            path = os.path.join(root, "etc/kubernetes/pki", name)
            os.rename(path + ".away", path)


def test_runs_from_two_machines_take_turns_through_the_clusters_lease(ha_play: Play) -> None:
    """Two operators' machines (each its own lock directory, so no shared lock file): the Lease in
    kube-system makes them take turns, and the second counts the member the first one parked."""
    play, inv = ha_play, ha_play.cpctl_inv
    other_env = dict(play.cli.env, XDG_RUNTIME_DIR=os.path.join(play.tmp, "run-other"))
    os.makedirs(other_env["XDG_RUNTIME_DIR"], mode=0o700)
    other = Cli(play.cli.ssh_config, play.cli.known_hosts, other_env)
    try:
        runs = ((play.cli, "master2"), (other, "master3"))
        procs = [cli.popen("-i", inv, "-H", host, "--census", "cluster", "stop", "etcd", stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for cli, host in runs]
        outs = [p.communicate(timeout=300) for p in procs]
        assert sorted(p.returncode for p in procs) == [0, 4], outs
        assert sum(etcd_in_place(play)) == 2
        assert lease_holder(play) == ""                 # given back at the end of each run
    finally:
        restore(play)


def kubectl_admin(play: Play, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=lab_vars(play.lab, 1)["kubeconfig"], HOME=play.tmp)
    return subprocess.run(["kubectl", *args], env=env, input=stdin, capture_output=True, text=True, timeout=30)


def lease_holder(play: Play) -> str:
    proc = kubectl_admin(play, "-n", "kube-system", "get", "lease", "cpctl-control-plane-changes", "-o",
                         "jsonpath={.spec.holderIdentity}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


HELD = """apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: cpctl-control-plane-changes, namespace: kube-system}
spec: {holderIdentity: "cpctl ops@laptop pid 42 abcd", leaseDurationSeconds: 600}
"""


def test_a_held_lease_makes_a_guarded_run_wait_and_says_who_holds_it(ha_play: Play) -> None:
    play, cli, inv = ha_play, ha_play.cli, ha_play.cpctl_inv
    assert kubectl_admin(play, "apply", "-f", "-", stdin=HELD).returncode == 0
    proc = cli.popen("-i", inv, "-H", "master2", "--census", "cluster", "stop", "etcd", stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert proc.poll() is None and etcd_in_place(play) == [True, True, True]     # waits, changes nothing
        lease = json.loads(kubectl_admin(play, "-n", "kube-system", "get", "lease", "cpctl-control-plane-changes",
                                         "-o", "json").stdout)
        lease["spec"]["holderIdentity"] = ""                                      # the other run releases it
        assert kubectl_admin(play, "replace", "-f", "-", stdin=json.dumps(lease)).returncode == 0
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "waiting for the cluster's change lease, held by cpctl ops@laptop pid 42 abcd" in err
        assert etcd_in_place(play) == [True, False, True]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        restore(play)

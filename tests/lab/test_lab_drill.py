"""The lab as a drill ground (issue 48): every ``cpctl lab`` command honours ``--dir`` and the
``$KUBECONFIG`` that ``lab up`` exports, its usage errors name commands that exist, its exit codes
follow README.md's table, and ``cpctl lab inventory`` turns a multi-master lab into an inventory
(cpctl's YAML, Ansible's INI) plus the ssh_config lines that reach a real local sshd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import yaml

from tests.remoteutil import clean_env
from tests.sshfixture import *  # noqa: F401,F403  (fixtures: sshd, ...)
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(300)


def cpctl(env: Dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpctl", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The one stderr line of a failure (no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    return line


def test_every_lab_command_without_a_lab_names_the_dir_and_exits_by_the_table(tmp_path: Path) -> None:
    """No lab in DIR: each command that needs one fails with one line naming DIR and the command that
    starts a lab there; the lab's own commands exit 7 (environment), the stand-ins for real tools 1
    (as etcdctl and kubeadm do); a master outside the lab is a usage error (2)."""
    env, missing = clean_env(str(tmp_path / "home")), str(tmp_path / "no-lab")
    start = "start one with `cpctl lab up --dir %s`" % missing
    for args, code in ((["env"], 7), (["inventory"], 7), (["inventory", "--format", "ini"], 7),
                       (["etcdctl", "snapshot-save", str(tmp_path / "s.db")], 1),
                       (["kubeadm-upgrade"], 1)):
        proc = cpctl(env, "lab", *args, "--dir", missing)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr)
        assert missing in one_line(proc) and "`cpctl lab up --dir %s`" % missing in proc.stderr, proc.stderr
    assert start in cpctl(env, "lab", "env", "--dir", missing).stderr
    # etcdctl's pass-through and certs-renew say there is no lab (not "the imitation runs", not "no pki")
    for args in (["etcdctl", "--dir", missing, "member", "list"], ["certs-renew", "--dir", missing]):
        proc = cpctl(env, "lab", *args)
        assert proc.returncode == 1 and one_line(proc) == "cpctl lab: no lab in %s (%s)" % (missing, start), \
            (args, proc.returncode, proc.stderr)


def test_lab_usage_errors_name_the_command_that_exists(tmp_path: Path) -> None:
    env = clean_env(str(tmp_path / "home"))
    proc = cpctl(env, "lab", "etcdctl", "snapshot-save", "--no-such-option")
    assert proc.returncode == 2
    assert one_line(proc).endswith("(see: cpctl lab etcdctl snapshot-save --help)"), proc.stderr
    proc = cpctl(env, "lab", "etcdctl", "--bogus", "snapshot-save", "x")
    assert proc.returncode == 2 and "(see: cpctl lab etcdctl --help)" in one_line(proc), proc.stderr
    proc = cpctl(env, "status", "--bogus")
    assert proc.returncode == 2 and one_line(proc).endswith("(see: cpctl status --help)"), proc.stderr
    proc = cpctl(env, "--bogus", "status")
    assert proc.returncode == 2 and one_line(proc).endswith("(see: cpctl --help)"), proc.stderr
    # every command path a `(see: ... --help)` names is one `cpctl ... --help` answers
    for words in (["lab", "etcdctl"], ["lab", "etcdctl", "snapshot-save"], ["status"]):
        assert cpctl(env, *words, "--help").returncode == 0, words


@pytest.mark.lab
def test_etcdctl_takes_dir_and_master_before_or_after_its_subcommand(lab_factory: Callable[..., Any],
                                                                     tmp_path: Path) -> None:
    """docs/etcd-restore.md's `cpctl lab etcdctl --dir X snapshot-save` (the group's options) and the
    subcommand's own spelling both act on lab X; without --dir, the lab $KUBECONFIG points at."""
    handle = lab_factory("drill lab")
    env = clean_env(str(tmp_path / "home"))
    first, second, third = (tmp_path / name for name in ("one.db", "two.db", "three.db"))
    proc = cpctl(env, "lab", "etcdctl", "--dir", str(handle.dir), "--master", "1", "snapshot-save", str(first))
    assert proc.returncode == 0 and "Snapshot saved at %s" % first in proc.stdout, proc.stderr
    proc = cpctl(env, "lab", "etcdctl", "snapshot-save", str(second), "--dir", str(handle.dir))
    assert proc.returncode == 0 and second.is_file(), proc.stderr
    proc = cpctl(dict(env, KUBECONFIG=handle.kubeconfig), "lab", "etcdctl", "snapshot-save", str(third))
    assert proc.returncode == 0 and third.is_file(), proc.stderr
    proc = cpctl(env, "lab", "etcdctl", "--dir", str(handle.dir), "--master", "5", "snapshot-save", str(first))
    assert proc.returncode == 2 and "the lab has masters 1..1, not 5" in one_line(proc)
    # the lab KUBECONFIG names is the default of every lab command (lab env here; the others share lab_dir)
    proc = cpctl(dict(env, KUBECONFIG=handle.kubeconfig, HOME=str(tmp_path / "elsewhere")), "-o", "json", "lab", "env")
    assert proc.returncode == 0 and json.loads(proc.stdout)["dir"] == str(handle.dir), proc.stderr


def test_the_lab_dir_rule_is_one_function_for_every_command() -> None:
    """Every lab command's --dir is the one option (default: None, resolved by ``lab_dir``), except
    ``demo``, whose default is a fresh temp dir (docs/lab.md)."""
    import click

    from cpctl_lab.cli import dir_option, lab

    def leaves(command: click.Command, path: str) -> Dict[str, click.Command]:
        if isinstance(command, click.Group):
            out = {path: command}
            for name, sub in command.commands.items():
                out.update(leaves(sub, path + " " + name))
            return out
        return {path: command}
    probe = dir_option(click.Command("probe")).params[0]
    for path, command in leaves(lab, "lab").items():
        options = [p for p in command.params if isinstance(p, click.Option) and "--dir" in p.opts]
        if path in ("lab", "lab profiles"):
            assert not options
            continue
        (option,) = options
        if path == "lab demo":
            continue
        assert (option.default, option.help) == (None, probe.help), path


#: ansible-core's ansible-inventory: on PATH, or next to this Python (a venv with the test extra)
ANSIBLE_INVENTORY = shutil.which("ansible-inventory") or shutil.which(
    "ansible-inventory", path=os.path.dirname(sys.executable))


def ini_hostvars(path: Path) -> Dict[str, Any]:
    assert ANSIBLE_INVENTORY
    proc = subprocess.run([ANSIBLE_INVENTORY, "-i", str(path), "--list"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout)["_meta"]["hostvars"])


@pytest.mark.skipif(not ANSIBLE_INVENTORY, reason="ansible-core not installed")
def test_the_ini_inventory_reads_back_unchanged_in_ansible(tmp_path: Path) -> None:
    """Real ansible-inventory reads every value as written: spaces, quotes, backslashes and ``#``."""
    from cpctl_lab.inventory import ini_inventory
    odd = '/tmp/a lab #1/it\'s "x"\\y'
    info = {"dir": odd, "kubeconfig": odd + "/admin.conf", "masters": [
        {"name": "lab-master%d" % n, "manifests_dir": odd + "/m%d" % n, "state_dir": odd + "/s%d" % n,
         "crictl": odd + "/c", "kubelet_dir": odd + "/k", "root_dir": odd + "/r%d" % n} for n in (1, 2)]}
    path = tmp_path / "hosts.ini"
    path.write_text(ini_inventory(info, True, odd + "/ssh_config"))
    hostvars = ini_hostvars(path)
    assert sorted(hostvars) == ["lab-master1", "lab-master2"]
    assert hostvars["lab-master2"]["cpctl_manifests_dir"] == odd + "/m2"
    assert hostvars["lab-master2"]["cpctl_node_name"] == "lab-master2"
    assert hostvars["lab-master1"]["cpctl_ssh_config"] == odd + "/ssh_config"
    assert hostvars["lab-master1"]["cpctl_node_root"] == odd + "/r1"


@pytest.mark.lab
def test_lab_inventory_drives_every_master_over_a_real_sshd(lab_factory: Callable[..., Any], sshd: SSHServer,
                                                             tmp_path: Path) -> None:
    """``cpctl lab inventory`` of a two-master lab: its ssh_config lines reach the local sshd, its
    YAML is cpctl's ``-i`` inventory (each master's status is that master's), its INI is Ansible's
    with the same values."""
    handle = lab_factory(masters=2)
    env = clean_env(str(tmp_path / "home"), KUBECONFIG=handle.kubeconfig)     # what `eval "$(lab up)"` left
    proc = cpctl(env, "lab", "inventory", "--format", "ssh-config", "--port", str(sshd.port),
                 "--identity-file", sshd.client_key, "--known-hosts", sshd.known_hosts)
    assert proc.returncode == 0, proc.stderr
    assert "\nHost lab-master1 lab-master2\n  HostName 127.0.0.1\n  Port %d\n" % sshd.port in proc.stdout
    config = tmp_path / "ssh_config"
    config.write_text(proc.stdout)
    proc = cpctl(env, "lab", "inventory")
    assert proc.returncode == 0, proc.stderr
    inventory = tmp_path / "lab.yaml"
    inventory.write_text(proc.stdout)
    hosts = yaml.safe_load(proc.stdout)["all"]["children"]["masters"]["hosts"]
    assert hosts["lab-master2"]["manifests_dir"] == str(handle.manifests_dir(2))
    remote = {k: v for k, v in env.items() if k != "KUBECONFIG"}       # nothing of the lab's but the inventory
    proc = cpctl(remote, "-i", str(inventory), "--ssh-config", str(config), "-o", "json", "status", timeout=180)
    assert proc.returncode == 0, proc.stderr
    answers = {host["host"]: host for host in json.loads(proc.stdout)["hosts"]}
    assert sorted(answers) == ["lab-master1", "lab-master2"], answers
    for n, name in ((1, "lab-master1"), (2, "lab-master2")):
        data = answers[name]["data"]
        assert data["node"] == handle.node_name(n), data
        assert {c["component"]: c["state"] for c in data["components"]}["kube-scheduler"] == "present"
    # `eval "$(cpctl lab env --master 2)"` then `cpctl lab etcdctl ...`: master 2's files, not master 1's
    snapshot = tmp_path / "snap.db"
    assert cpctl(env, "lab", "etcdctl", "snapshot-save", str(snapshot)).returncode == 0
    proc = cpctl(dict(env, **handle.env_for(2)), "lab", "etcdctl", "snapshot-restore", str(snapshot),
                 "--data-dir", "/var/lib/etcd-drill")
    assert proc.returncode == 0, proc.stderr
    assert (handle.root_dir(2) / "var/lib/etcd-drill").is_dir()
    assert not (handle.root_dir(1) / "var/lib/etcd-drill").exists()
    if ANSIBLE_INVENTORY:
        ini = tmp_path / "hosts.ini"
        proc = cpctl(env, "lab", "inventory", "--format", "ini", "--ssh-config", str(config))
        assert proc.returncode == 0, proc.stderr
        ini.write_text(proc.stdout)
        hostvars = ini_hostvars(ini)
        for name, values in hosts.items():
            assert {k: hostvars[name]["cpctl_" + k] for k in values} == values


@pytest.mark.lab
def test_a_restarted_lab_keeps_its_api_objects_kubeadm_config_included(lab_factory: Callable[..., Any],
                                                                        tmp_path: Path) -> None:
    """``--keep-in kubeadm-config``, ``lab down``, ``lab up``: the kept flag is still in the
    ClusterConfiguration (the next lab upgrade keeps it), a ConfigMap made before the stop is there,
    one deleted before it stays deleted; ``lab up`` says it starts the lab again with them."""
    from tests.labfixture import kubectl, run_cpctl
    handle = lab_factory()
    proc = run_cpctl(handle, "flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    kubectl(handle, "-n", "default", "create", "configmap", "made-before-the-stop", "--from-literal=k=v")
    kubectl(handle, "-n", "kube-system", "create", "configmap", "deleted-before-the-stop", "--from-literal=k=v")
    kubectl(handle, "-n", "kube-system", "delete", "configmap", "deleted-before-the-stop")
    before = kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "json").stdout
    env = clean_env(str(tmp_path / "home"))
    assert cpctl(env, "lab", "down", "--dir", str(handle.dir)).returncode == 0
    up = cpctl(env, "lab", "up", "--dir", str(handle.dir))
    try:
        assert up.returncode == 0, up.stderr
        # a note line each: the kept objects, and which etcd runs (the real one or the imitation)
        assert "Traceback" not in up.stderr and "serves the API objects it kept at its last stop" in up.stderr, \
            up.stderr
        after = kubectl(handle, "-n", "kube-system", "get", "cm", "kubeadm-config", "-o", "json").stdout
        assert json.loads(after)["data"] == json.loads(before)["data"]
        extra = yaml.safe_load(json.loads(after)["data"]["ClusterConfiguration"])["scheduler"]["extraArgs"]
        assert extra in ({"v": "4"}, [{"name": "v", "value": "4"}]), extra        # v1beta3 map, v1beta4 list
        kubectl(handle, "-n", "default", "get", "configmap", "made-before-the-stop")
        gone = kubectl(handle, "-n", "kube-system", "get", "configmap", "deleted-before-the-stop", check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr
    finally:
        assert cpctl(env, "lab", "down", "--dir", str(handle.dir)).returncode == 0


def test_a_restarted_lab_keeps_the_etcd_it_ran_and_refuses_the_other_kind(tmp_path: Path) -> None:
    """The imitation's etcd data dir is not etcd's (the real etcd panicked on it and the restarted lab
    was never ready, 90 s): a lab that stopped on one kind starts on it again, and asking for the other
    kind is one line, exit 2, nothing started."""
    from cpctl_lab import etcdbin, etcddata
    real = etcdbin.find("")
    if real is None:
        pytest.skip("no real etcd installed (pip install 'cpctl[etcd]')")
    nowhere = str(tmp_path / "no-etcd-here")         # a dir without etcd: the lab would run the imitation
    for before, asked in ((etcddata.IMITATION, real.etcd), (etcddata.REAL, "none"), (etcddata.REAL, nowhere)):
        directory = tmp_path / ("%s-%d" % (before, len(asked)))
        directory.mkdir()
        etcddata.save_kept(directory, [], 7, "", before)
        assert etcddata.load_kept(directory)["etcd"] == before       # type: ignore[index]
        env = dict(clean_env(str(tmp_path / "home")), CPCTL_LAB_ETCD=asked)
        up = cpctl(env, "lab", "up", "--dir", str(directory))
        assert up.returncode == 2, up.stderr
        assert "ran on the %s etcd at its last stop" % before in one_line(up)
        assert not (directory / "lab.json").exists()

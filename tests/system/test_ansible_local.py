"""Issue #37: the cpctl.controlplane collection on the master itself, and a master it cannot reach.

* ``connection: local`` (as ``ansible-pull`` and many AWX setups run on a node) and ``delegate_to:
  localhost`` run cpctl on this machine, without SSH: the same results as over SSH (check mode
  changes nothing, a stop parks and is recorded, a start puts it back, the facts), and the quorum
  guard still counts through this node's API server (stopping the only etcd is refused, rc 4);
* a component that looks like an option (``--help``) fails with cpctl's own message, no crash;
* a flag value (a no_log option) never shows in the output, not even in the diff;
* a master cpctl cannot reach is ``unreachable`` in the recap, not ``failed``;
* the real ``ansible-pull`` - the playbook pulled from a git repository (a ``file://`` URL: no
  network) and run on this node - stops and starts a component with the collection.

One lab master, no sshd: the lab's paths are this machine's paths.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from tests.remoteutil import REPO, clean_env, lab_vars, read_history

pytestmark = [pytest.mark.timeout(600)]
PLAYBOOK = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")
PULL = shutil.which("ansible-pull", path=os.path.dirname(sys.executable)) or shutil.which("ansible-pull")
RECAP = re.compile(r"^(\S+)\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)\s+"
                   r"rescued=(\d+)\s+ignored=(\d+)", re.M)


def recap(out: str) -> Dict[str, Tuple[int, ...]]:
    """host -> (ok, changed, unreachable, failed, skipped, rescued, ignored)."""
    return {m.group(1): tuple(int(m.group(i)) for i in range(2, 9)) for m in RECAP.finditer(out)}


def ansible_env(tmp: Path) -> Dict[str, str]:
    """A clean environment for Ansible: this checkout's collection, no config file, private dirs."""
    os.makedirs(tmp / "run", mode=0o700, exist_ok=True)
    return clean_env(str(tmp / "home"), ANSIBLE_COLLECTIONS_PATH=REPO, ANSIBLE_NOCOLOR="1",
                     ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"), ANSIBLE_RETRY_FILES_ENABLED="0",
                     ANSIBLE_CONFIG=str(tmp / "none.cfg"), XDG_RUNTIME_DIR=str(tmp / "run"))


def ansible(tmp: Path, inventory: str, playbook: str, *args: str) -> subprocess.CompletedProcess:
    assert PLAYBOOK, "ansible-playbook is not installed (ansible-core is a test dependency)"
    (tmp / "hosts.ini").write_text(inventory)
    (tmp / "play.yml").write_text(playbook)
    proc = subprocess.run([PLAYBOOK, "-i", str(tmp / "hosts.ini"), str(tmp / "play.yml"), *args],
                          env=ansible_env(tmp), cwd=str(tmp), capture_output=True, text=True, timeout=500,
                          stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def host_line(name: str, lab: Any, **extra: str) -> str:
    values = dict(lab_vars(lab, 1), kubelet_dir=lab.env_for(1)["CPCTL_KUBELET_DIR"])
    return name + "".join(" cpctl_%s=%s" % (k, v) for k, v in sorted(values.items())) + "".join(
        " %s=%s" % item for item in sorted(extra.items())) + " ansible_python_interpreter=%s\n" % sys.executable


LOCAL = """
- hosts: master
  gather_facts: false
  tasks:
    - name: check mode - what a stop would do
      cpctl.controlplane.static_pod: {component: scheduler, state: stopped, timeout: 60}
      check_mode: true
      register: planned
    - name: park the scheduler on this node
      cpctl.controlplane.static_pod: {component: scheduler, state: stopped, reason: local, timeout: 60}
      register: stopped
    - name: the facts of this node
      cpctl.controlplane.controlplane_info: {certs: false}
    - name: the scheduler is parked
      ansible.builtin.assert:
        that:
          - planned.changed and planned.plan | length > 0
          - stopped.changed and stopped.node == cpctl.status.node
          - (cpctl.status.components | selectattr('component', 'equalto', 'kube-scheduler') | first).state == 'parked'
    - name: put it back
      cpctl.controlplane.static_pod: {component: scheduler, state: started, timeout: 60}
      delegate_to: localhost
    - name: stopping the only etcd is refused (the quorum guard counts through this node's API server)
      cpctl.controlplane.static_pod: {component: etcd, state: stopped, timeout: 60}
      register: etcd
      ignore_errors: true
    - name: a component that looks like an option
      cpctl.controlplane.static_pod: {component: "--help"}
      register: bad
      ignore_errors: true
    - name: a flag value that is no secret is shown (issue 49, no_log covers secret flags only)
      cpctl.controlplane.static_pod_flags:
        component: scheduler
        set: {leader-elect-resource-name: i37-visible-value}
      check_mode: true
      diff: true
      register: flags
    - name: results
      ansible.builtin.assert:
        that:
          - etcd.failed and etcd.rc == 4 and 'quorum' in etcd.msg
          - bad.failed and bad.rc == 2 and 'invalid component name' in bad.msg
          - flags.changed
"""


def test_connection_local_and_delegate_to_localhost_run_cpctl_on_this_node(lab: Any, tmp_path: Path) -> None:
    inventory = "[masters]\n" + host_line("master", lab, ansible_connection="local")
    proc = ansible(tmp_path, inventory, LOCAL, "-v")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert recap(proc.stdout)["master"] == (9, 4, 0, 0, 0, 0, 2), proc.stdout[-3000:]
    records = [r for r in read_history(lab_vars(lab, 1)["state_dir"]) if r["component"] == "kube-scheduler"]
    assert [r["action"] for r in records] == ["stop", "start"] and records[0]["reason"] == "local"
    assert os.path.exists(os.path.join(lab_vars(lab, 1)["manifests_dir"], "kube-scheduler.yaml"))
    assert os.path.exists(os.path.join(lab_vars(lab, 1)["manifests_dir"], "etcd.yaml"))
    # issue 49: a value is masked only when its flag carries a secret (cpctl's one rule, tests/core/
    # test_redaction_flags.py and the collection's unit tests); this one is shown, the rc an integer
    assert "i37-visible-value" in proc.stdout
    assert "cpctl-ansible-" not in proc.stdout      # no one-host inventory: no SSH run was made


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


UNREACHABLE = """
- hosts: masters
  gather_facts: false
  tasks:
    - cpctl.controlplane.controlplane_info: {drift: false, certs: false}
"""


@pytest.mark.slow           # no lab, but ansible-playbook: seconds
def test_a_master_cpctl_cannot_reach_is_unreachable(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text("")
    inventory = ("[masters]\ngone ansible_host=127.0.0.1 ansible_port=%d ansible_connection=ssh "
                 "cpctl_known_hosts=%s cpctl_persist=0\n" % (_closed_port(), tmp_path / "known_hosts"))
    proc = ansible(tmp_path, inventory, UNREACHABLE)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]    # ansible-playbook: hosts unreachable
    assert recap(proc.stdout)["gone"][2:4] == (1, 0), proc.stdout
    assert "UNREACHABLE!" in proc.stdout and "exit 8: unreachable" in proc.stdout


PULLED = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: park the scheduler on this node
      cpctl.controlplane.static_pod: {component: scheduler, state: stopped, reason: ansible-pull, timeout: 60}
      register: stopped
    - name: the facts of this node
      cpctl.controlplane.controlplane_info: {certs: false, drift: false}
    - name: it is parked
      ansible.builtin.assert:
        that:
          - stopped.changed and stopped.node == cpctl.status.node
          - (cpctl.status.components | selectattr('component', 'equalto', 'kube-scheduler') | first).state == 'parked'
    - name: put it back
      cpctl.controlplane.static_pod: {component: scheduler, state: started, timeout: 60}
      register: started
    - name: it is back
      ansible.builtin.assert:
        that: [started.changed]
"""


def test_ansible_pull_runs_the_collection_on_this_node(lab: Any, tmp_path: Path) -> None:
    """The real ansible-pull: it clones the repository (file:// URL) with its git module, then runs
    ``local.yml`` from the checkout with a local connection, limited to this machine's names."""
    assert PULL, "ansible-pull is not installed (ansible-core is a test dependency)"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "local.yml").write_text(PULLED)
    git = ["git", "-C", str(repo), "-c", "user.name=cpctl test", "-c", "user.email=test@cpctl.invalid"]
    for argv in (["init", "-q", "-b", "main"], ["add", "local.yml"], ["commit", "-q", "-m", "the node's playbook"]):
        subprocess.run(git + argv, check=True, capture_output=True, timeout=60)
    (tmp_path / "hosts.ini").write_text("[masters]\n" + host_line("localhost", lab, ansible_connection="local"))
    proc = subprocess.run([PULL, "-U", "file://%s" % repo, "-C", "main", "-d", str(tmp_path / "checkout"),
                           "-i", str(tmp_path / "hosts.ini"), "local.yml"], env=ansible_env(tmp_path),
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=500, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-6000:]
    assert (tmp_path / "checkout" / "local.yml").read_text() == PULLED             # what it ran: the pulled copy
    assert recap(proc.stdout)["localhost"] == (5, 2, 0, 0, 0, 0, 0), proc.stdout[-3000:]
    records = [r for r in read_history(lab_vars(lab, 1)["state_dir"]) if r["component"] == "kube-scheduler"]
    assert [r["action"] for r in records] == ["stop", "start"] and records[0]["reason"] == "ansible-pull"
    assert os.path.exists(os.path.join(lab_vars(lab, 1)["manifests_dir"], "kube-scheduler.yaml"))
    assert "cpctl-ansible-" not in proc.stdout      # no one-host inventory: no SSH run was made


SNAPSHOT = """
- hosts: master
  gather_facts: false
  tasks:
    - name: check mode - nothing written
      cpctl.controlplane.etcd_snapshot: {keep: 2}
      check_mode: true
      register: planned
    - name: three snapshots, keeping two
      cpctl.controlplane.etcd_snapshot: {keep: 2}
      register: saved
      loop: [1, 2, 3]
    - name: one at a path of our own
      cpctl.controlplane.etcd_snapshot: {path: "%(mine)s"}
      register: mine
    - name: never replaced
      cpctl.controlplane.etcd_snapshot: {path: "%(mine)s"}
      register: again
      ignore_errors: true
    - name: results
      ansible.builtin.assert:
        that:
          - planned.changed and planned.cpctl.snapshots == []
          - saved.results | map(attribute='changed') | list == [true, true, true]
          - saved.results[2].cpctl.pruned | length == 1
          - mine.changed and mine.path == "%(mine)s" and mine.cpctl.snapshot.revision > 0
          - again.failed and again.rc == 4 and 'exists already' in again.msg
"""


def test_etcd_snapshot_module_on_a_real_etcd(real_etcd: Any, tmp_path: Path) -> None:
    """cpctl.controlplane.etcd_snapshot (issue 46) with a local connection against member m1 of a
    real etcd seen as a master: check mode writes nothing, keep prunes, a path is never replaced."""
    from tests import etcdnodes
    args = etcdnodes.node_args(real_etcd, "m1")
    options = dict(zip(args[::2], args[1::2]))
    line = "m1 ansible_connection=local ansible_python_interpreter=%s" % sys.executable + "".join(
        " cpctl_%s=%s" % (name.lstrip("-").replace("-", "_"), value) for name, value in sorted(options.items()))
    mine = tmp_path / "mine.db"
    assert real_etcd.put(b"/before", b"x")[0] == 200        # a revision above 0 (a new etcd's "key" bucket is empty)
    proc = ansible(tmp_path, "[master]\n" + line + "\n", SNAPSHOT % {"mine": mine})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert recap(proc.stdout)["m1"] == (5, 3, 0, 0, 0, 0, 1), proc.stdout     # a loop is one task; refusal ignored
    snapshots = real_etcd.members["m1"].root / "var/lib/cpctl/snapshots"
    assert len([n for n in os.listdir(snapshots) if n.endswith(".db")]) == 2 and mine.stat().st_size > 0

"""The rolling change with Ansible, on the lab, without a hand-written inventory (issue 48 'Done when'):
``cpctl lab inventory --format ini`` and ``--format ssh-config`` as docs/lab.md and docs/ansible.md
show them are all ``ansible-playbook -i`` needs to drive the cpctl.controlplane collection against
every master of a multi-master lab over a real sshd - nothing added to the inventory; and a quorum
refusal in such a play gives the hint that fits a play (issue 48, hints that fit): the member that
does not run, by name, and the play's task that brings it back - no cpctl command line, no file of
the task's temp dir, no --force.

tests/lab/test_lab_drill.py reads the same INI back with ansible-inventory and drives cpctl's ``-i``
with the YAML; tests/system/test_ansible_fleet.py runs the example playbooks against the lab with an
inventory of its own (extra vars for the test machine)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest

from tests.remoteutil import REPO, clean_env
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(400)

PLAYBOOK = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")
RECAP = re.compile(r"^(\S+)\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

#: read-only: each master's status through the collection, and the master it answered from
PLAY = """
- hosts: masters
  serial: 1
  gather_facts: false
  tasks:
    - cpctl.controlplane.controlplane_info:
        drift: false
        certs: false
    - ansible.builtin.assert:
        that:
          - cpctl.status.node == inventory_hostname
          - "'kube-scheduler' in (cpctl.status.components | map(attribute='component'))"
"""


STOP = """
- hosts: masters
  serial: 1
  gather_facts: false
  tasks:
    - cpctl.controlplane.static_pod:
        component: apiserver
        state: %s
        reason: drill
        timeout: 60
"""


def cpctl(env: Dict[str, str], *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "cpctl", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(not PLAYBOOK, reason="ansible-core not installed")
def test_ansible_playbook_drives_every_lab_master_with_the_labs_own_inventory(
        lab_factory: Callable[..., Any], sshd: SSHServer, tmp_path: Path) -> None:
    handle = lab_factory(masters=2)
    env = clean_env(str(tmp_path / "home"), KUBECONFIG=handle.kubeconfig)     # what `eval "$(lab up)"` left
    config, hosts = tmp_path / "ssh_config", tmp_path / "hosts.ini"
    config.write_text(cpctl(env, "lab", "inventory", "--format", "ssh-config", "--port", str(sshd.port),
                            "--identity-file", sshd.client_key, "--known-hosts", sshd.known_hosts))
    hosts.write_text(cpctl(env, "lab", "inventory", "--format", "ini", "--ssh-config", str(config)))
    run_env = clean_env(str(tmp_path / "home"), ANSIBLE_COLLECTIONS_PATH=REPO, ANSIBLE_NOCOLOR="1",
                        ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
                        ANSIBLE_CONFIG=str(tmp_path / "none.cfg"), ANSIBLE_RETRY_FILES_ENABLED="0")

    def play(name: str, text: str, rc: int = 0) -> subprocess.CompletedProcess:
        playbook = tmp_path / name
        playbook.write_text(text)
        assert PLAYBOOK
        # -e cpctl_persist=0: no keeper left running after the test (a variable of the run, not the inventory)
        proc = subprocess.run([PLAYBOOK, "-i", str(hosts), str(playbook), "-e", "cpctl_persist=0"], env=run_env,
                              cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == rc, proc.stdout[-6000:] + proc.stderr[-3000:]
        return proc

    def recap(proc: subprocess.CompletedProcess) -> Dict[str, Tuple[int, ...]]:
        return {m.group(1): tuple(int(m.group(i)) for i in range(2, 6)) for m in RECAP.finditer(proc.stdout)}

    first, second = handle.node_name(1), handle.node_name(2)
    proc = play("info.yml", PLAY)
    assert recap(proc) == {first: (2, 0, 0, 0), second: (2, 0, 0, 0)}, proc.stdout
    # the hint of a quorum refusal under Ansible speaks of the play and names no file of the task
    try:
        proc = play("stop.yml", STOP % "stopped", rc=2)
        assert recap(proc) == {first: (1, 1, 0, 0), second: (0, 0, 0, 1)}, proc.stdout
        assert "kube-apiserver does not run on %s: bring it back there first (a static_pod task with state: " \
               "started)" % first in proc.stdout, proc.stdout
        assert "--force" not in proc.stdout and "-i " not in proc.stdout and "cpctl-ansible-" not in proc.stdout
    finally:
        proc = play("start.yml", STOP % "started")
    assert recap(proc)[first][1] == 1, proc.stdout

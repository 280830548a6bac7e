"""Issue #27: the cpctl.controlplane collection under the real ``ansible-playbook``, against three lab
masters behind three real sshd (127.0.0.1, .2, .3; tests.sshfixture), as tests/fleet/test_remote_fleet.py
drives cpctl's own fan-out.

* a restart rolls one master at a time (each master's stop comes after the previous master's
  start, in cpctl's history) and the roll stops at the first master that fails;
* ``--check --diff`` of the admission-plugin example changes nothing and shows the manifest diff;
  the real run changes each master once, a second run reports ``changed=0``;
* parking the last serving API server is refused with ``serial: 1`` and with ``serial: 3`` (all
  three masters' tasks at once, each seeing only its own host): the guard counts through the
  cluster and the runs of one cluster take turns;
* ``controlplane_info`` sets the facts.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from tests.coreutil import snapshot
from tests.labfixture import run_cpctl
from tests.remoteutil import REPO, Cli, clean_env, lab_vars, read_history, write_inventory
from tests.sshfixture import SSHServer

pytestmark = [pytest.mark.timeout(600), pytest.mark.end_to_end]
NAMES = ["master1", "master2", "master3"]
EXAMPLES = Path(REPO) / "examples" / "ansible"
PLAYBOOK = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")
RECAP = re.compile(r"^(\S+)\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)


class Play:
    """ansible-playbook against the lab's masters: an INI inventory with the cpctl_* host vars."""

    def __init__(self, servers: List[SSHServer], lab: Any, tmp: str) -> None:
        self.lab, self.tmp = lab, tmp
        self.env = clean_env(os.path.join(tmp, "home"), ANSIBLE_COLLECTIONS_PATH=REPO, ANSIBLE_NOCOLOR="1",
                             ANSIBLE_LOCAL_TEMP=os.path.join(tmp, "ansible-tmp"), ANSIBLE_RETRY_FILES_ENABLED="0",
                             ANSIBLE_FORCE_COLOR="0", ANSIBLE_CONFIG=os.path.join(tmp, "none.cfg"),
                             XDG_RUNTIME_DIR=os.path.join(tmp, "run"))
        os.makedirs(self.env["XDG_RUNTIME_DIR"], mode=0o700)
        self.ssh_config, self.known_hosts = servers[0].ssh_config, servers[0].known_hosts
        self.hosts = {name: lab_vars(lab, i + 1) for i, name in enumerate(NAMES)}
        self.inventory = self.write_inventory("hosts.ini")
        self.cli = Cli(self.ssh_config, self.known_hosts, self.env)
        self.cpctl_inv = write_inventory(os.path.join(tmp, "inv.yaml"), {n: dict(host=n, **v)
                                                                          for n, v in self.hosts.items()})

    def write_inventory(self, name: str, **override: Dict[str, str]) -> str:
        lines = ["[masters]"]
        for host, values in self.hosts.items():
            merged = dict(values, **override.get(host, {}))
            lines.append(host + "".join(" cpctl_%s=%s" % (k, v) for k, v in sorted(merged.items())))
        # ssh: cpctl opens its own connection to each master (a local connection would mean this
        # machine is the master: tests/system/test_ansible_local.py)
        lines += ["", "[masters:vars]", "ansible_connection=ssh",
                  "ansible_python_interpreter=%s" % sys.executable, "cpctl_ssh_config=%s" % self.ssh_config,
                  "cpctl_known_hosts=%s" % self.known_hosts,
                  # no keeper left behind (the collection drops CPCTL_PERSIST; cpctl keeps 60 s by default)
                  "cpctl_persist=0"]
        path = os.path.join(self.tmp, name)
        with open(path, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        return path

    def run(self, playbook: str, *args: str, inventory: str = "", rc: int = 0) -> subprocess.CompletedProcess:
        assert PLAYBOOK, "ansible-playbook is not installed (ansible-core is a test dependency)"
        proc = subprocess.run([PLAYBOOK, "-i", inventory or self.inventory, playbook, *args], env=self.env,
                              cwd=self.tmp, capture_output=True, text=True, timeout=500, stdin=subprocess.DEVNULL)
        assert proc.returncode == rc, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc

    def playbook(self, name: str, text: str) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def state(self, i: int) -> str:
        return str(self.lab.state_dir(i))

    def manifest(self, i: int, name: str) -> str:
        return os.path.join(str(self.lab.manifests_dir(i)), name)

    def snap(self) -> dict:
        return snapshot(*[str(p) for i in (1, 2, 3) for p in (self.lab.manifests_dir(i), self.lab.state_dir(i))])


def recap(proc: subprocess.CompletedProcess) -> Dict[str, tuple]:
    """host -> (ok, changed, unreachable, failed, skipped) from the PLAY RECAP."""
    return {m.group(1): tuple(int(m.group(i)) for i in range(2, 7)) for m in RECAP.finditer(proc.stdout)}


@pytest.fixture
def play(sshd_many: List[SSHServer], lab3: Any, tmp_path: Path) -> Iterator[Play]:
    yield Play(sshd_many, lab3, str(tmp_path))


RESTART = """
- hosts: masters
  serial: 1
  max_fail_percentage: 0
  gather_facts: false
  tasks:
    - cpctl.controlplane.static_pod:
        component: scheduler
        state: restarted
        reason: roll
        timeout: 60
"""


def test_restart_rolls_one_master_at_a_time_and_stops_at_the_first_failure(play: Play) -> None:
    proc = play.run(play.playbook("restart.yml", RESTART))
    assert recap(proc) == {n: (1, 1, 0, 0, 0) for n in NAMES}
    records = [[r for r in read_history(play.state(i)) if r["component"] == "kube-scheduler"] for i in (1, 2, 3)]
    assert [[r["action"] for r in rs] for rs in records] == [["stop", "start"]] * 3
    assert all(rs[0]["reason"] == "roll" for rs in records)
    # One master at a time: each master's stop comes after the previous master's start.
    assert records[0][1]["time"] <= records[1][0]["time"] and records[1][1]["time"] <= records[2][0]["time"]

    # master2 fails (its manifests dir does not exist): master3 is never touched.
    bad = play.write_inventory("bad.ini", master2={"manifests_dir": os.path.join(play.tmp, "no-such-dir")})
    before = [len(read_history(play.state(i))) for i in (1, 2, 3)]
    proc = play.run(play.playbook("restart.yml", RESTART), inventory=bad, rc=2)
    counts = recap(proc)
    assert counts["master1"] == (1, 1, 0, 0, 0) and counts["master2"][3] == 1
    assert "master3" not in counts
    assert "no-such-dir" in proc.stdout and "rc" in proc.stdout
    after = [len(read_history(play.state(i))) for i in (1, 2, 3)]
    assert after == [before[0] + 2, before[1], before[2]]


def test_admission_plugins_check_diff_then_change_then_nothing(play: Play) -> None:
    playbook = str(EXAMPLES / "admission-plugins.yml")
    before = play.snap()
    proc = play.run(playbook, "--check", "--diff", "-e", "cpctl_settle=0.5")
    assert play.snap() == before                                     # check mode changed nothing
    assert recap(proc) == {n: (1, 1, 0, 0, 0) for n in NAMES}
    assert "-    - --enable-admission-plugins=NodeRestriction\n" in proc.stdout
    # issue 49: no_log covers secret flags only: an admission plugin list is no secret, the diff shows it
    assert "+    - --enable-admission-plugins=NodeRestriction,AlwaysPullImages\n" in proc.stdout

    proc = play.run(playbook, "--diff", "-e", "cpctl_settle=0.5")
    assert recap(proc) == {n: (1, 1, 0, 0, 0) for n in NAMES}
    assert "+    - --enable-admission-plugins=NodeRestriction,AlwaysPullImages\n" in proc.stdout
    for i in (1, 2, 3):
        with open(play.manifest(i, "kube-apiserver.yaml")) as handle:
            assert "--enable-admission-plugins=NodeRestriction,AlwaysPullImages" in handle.read()
        assert read_history(play.state(i))[-1]["action"] == "flags"

    proc = play.run(playbook, "-e", "cpctl_settle=0.5")                # idempotent
    assert recap(proc) == {n: (1, 0, 0, 0, 0) for n in NAMES}


STOP_APISERVER = """
- hosts: masters
  serial: %d
  gather_facts: false
  tasks:
    - cpctl.controlplane.static_pod:
        component: apiserver
        state: stopped
        reason: drill
        timeout: 60
"""


@pytest.mark.parametrize("serial", [1, 3])
def test_parking_the_last_api_server_is_refused(play: Play, serial: int) -> None:
    try:
        proc = play.run(play.playbook("stop.yml", STOP_APISERVER % serial), rc=2)
        counts = recap(proc)
        parked = [i for i in (1, 2, 3) if not os.path.exists(play.manifest(i, "kube-apiserver.yaml"))]
        assert len(parked) == 2, (parked, proc.stdout)
        refused = [n for n in NAMES if counts.get(n, (0, 0, 0, 0, 0))[3] == 1]
        assert len(refused) == 1 and NAMES.index(refused[0]) + 1 not in parked
        assert sorted(c for n, c in counts.items() if n not in refused) == [(1, 1, 0, 0, 0)] * 2
        assert "refused" in proc.stdout and "API server" in proc.stdout and "exit 4" in proc.stdout
        if serial == 1:
            assert refused == ["master3"]
    finally:
        play.cli.run("-i", play.cpctl_inv, "--probe", "none", "start", "apiserver", rc=None)
    assert all(os.path.exists(play.manifest(i, "kube-apiserver.yaml")) for i in (1, 2, 3))


INFO = """
- hosts: masters
  gather_facts: false
  tasks:
    - cpctl.controlplane.controlplane_info:
        revisions: [scheduler]
    - ansible.builtin.copy:
        content: "{{ cpctl | to_json }}"
        dest: "%s/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
      check_mode: false
"""


def test_controlplane_info_sets_facts_and_changes_nothing(play: Play) -> None:
    out = os.path.join(play.tmp, "facts")
    os.makedirs(out)
    before = play.snap()
    proc = play.run(play.playbook("info.yml", INFO % out), "--check")
    assert play.snap() == before
    assert recap(proc) == {n: (2, 1, 0, 0, 0) for n in NAMES}      # the one change: copy writing the facts
    for i, name in enumerate(NAMES, 1):
        with open(os.path.join(out, name + ".json")) as handle:
            facts = json.load(handle)
        assert facts["status"]["node"] == play.lab.node_name(i)
        assert {r["component"]: r["state"] for r in facts["status"]["components"]}["kube-scheduler"] == "present"
        assert facts["drift"]["drift"] in (True, False) and "findings" in facts["drift"]
        assert facts["certs"]["certificates"] and {c["component"] for c in facts["certs"]["components"]} >= {
            "kube-apiserver", "etcd"}
        assert "scheduler" in facts["revisions"]


def test_census_cluster_on_the_command_line(play: Play) -> None:
    """The check the modules rely on, as ``cpctl -H one-master --census cluster``: the other masters
    counted through the API; an API that cannot be asked refuses; --force overrides and is recorded."""
    cli, inv = play.cli, play.cpctl_inv
    try:
        doc = cli.json("-i", inv, "-H", "master1", "--census", "cluster", "stop", "etcd")    # 2 of 3 left
        assert [h["status"] for h in doc["hosts"]] == ["changed"]
        before = play.snap()
        proc = cli.run("-i", inv, "-H", "master2", "--census", "cluster", "stop", "etcd", rc=4)
        assert "quorum" in proc.stderr and "1 of 3" in proc.stderr
        # On the master itself (no -H: Ansible's connection: local), the same count through its own API server
        proc = run_cpctl(play.lab.env_for(2), "--census", "cluster", "stop", "etcd")
        assert proc.returncode == 4 and "quorum" in proc.stderr and "1 of 3" in proc.stderr, proc.stderr
        proc = cli.run("-i", inv, "-H", "master2", "--census", "cluster", "restart", "etcd", "--dry-run", rc=4)
        assert play.snap() == before
        hosts = json.loads(json.dumps({n: dict(host=n, **v) for n, v in play.hosts.items()}))
        hosts["master3"]["kubeconfig"] = os.path.join(play.tmp, "no-such.conf")
        blind = write_inventory(os.path.join(play.tmp, "blind.yaml"), hosts)
        proc = cli.run("-i", blind, "-H", "master3", "--census", "cluster", "restart", "apiserver", rc=4)
        assert "cannot count etcd members and API servers" in proc.stderr
        assert play.snap() == before
        doc = cli.json("-i", inv, "-H", "master2", "--census", "cluster", "--probe", "none", "stop", "etcd",
                       "--force", "--reason", "drill")
        assert read_history(play.state(2))[-1]["reason"].startswith("[forced past: ")
    finally:
        cli.run("-i", inv, "--probe", "none", "start", "etcd", rc=None)
    assert all(os.path.exists(play.manifest(i, "etcd.yaml")) for i in (1, 2, 3))


MANIFEST = """
- hosts: master1
  gather_facts: false
  tasks:
    - cpctl.controlplane.static_pod_manifest:
        component: scheduler
        content: "{{ lookup('ansible.builtin.file', '%s') }}\\n"
        reason: reviewed
        settle: 0.5
"""
ROLLBACK = """
- hosts: master1
  gather_facts: false
  tasks:
    - cpctl.controlplane.static_pod_manifest:
        component: scheduler
        rollback_to: 1
        settle: 0.5
"""


def test_manifest_content_apply_is_idempotent_and_rollback_to_puts_a_revision_back(play: Play) -> None:
    path = play.manifest(1, "kube-scheduler.yaml")
    with open(path) as handle:
        original = handle.read()
    new = original.replace("- --bind-address=127.0.0.1", "- --bind-address=127.0.0.1\n    - --v=2")
    assert new != original
    source = os.path.join(play.tmp, "kube-scheduler.yaml")
    with open(source, "w") as handle:
        handle.write(new.rstrip("\n"))
    playbook = play.playbook("manifest.yml", MANIFEST % source)
    before = play.snap()
    proc = play.run(playbook, "--check", "--diff")
    assert play.snap() == before and "+    - --v=2" in proc.stdout and recap(proc)["master1"][1] == 1
    proc = play.run(playbook)
    assert recap(proc)["master1"] == (1, 1, 0, 0, 0)
    with open(path) as handle:
        assert handle.read() == new
    assert recap(play.run(playbook))["master1"] == (1, 0, 0, 0, 0)          # the same bytes: no change
    proc = play.run(play.playbook("rollback.yml", ROLLBACK), "--diff")
    assert recap(proc)["master1"] == (1, 1, 0, 0, 0) and "-    - --v=2" in proc.stdout
    with open(path) as handle:
        assert handle.read() == original
    assert read_history(play.state(1))[-1]["action"] == "rollback"


def test_ansible_ssh_private_key_file_is_the_key_cpctl_uses(play: Play) -> None:
    """An ssh_config without IdentityFile (and no ~/.ssh, no ssh-agent): the modules log in only with
    the inventory's ansible_ssh_private_key_file."""
    with open(play.ssh_config) as handle:
        text = handle.read()
    keyless = os.path.join(play.tmp, "ssh_config-keyless")
    with open(keyless, "w") as handle:
        handle.write("".join(line + "\n" for line in text.splitlines() if "IdentityFile" not in line))
    key = next(line.split()[1] for line in text.splitlines() if "IdentityFile" in line)
    info = play.playbook("info-key.yml", "- hosts: masters\n  gather_facts: false\n  tasks:\n"
                                          "    - cpctl.controlplane.controlplane_info:\n        drift: false\n")
    without = play.write_inventory("keyless.ini", **{n: {"ssh_config": keyless} for n in NAMES})
    proc = play.run(info, inventory=without, rc=4)          # ansible-playbook's exit code for unreachable hosts
    assert all(recap(proc)[n][2:4] == (1, 0) for n in NAMES) and "exit 8" in proc.stdout
    with open(without) as handle:
        text = handle.read().replace("[masters:vars]", "[masters:vars]\nansible_ssh_private_key_file=%s" % key)
    with_key = os.path.join(play.tmp, "key.ini")
    with open(with_key, "w") as handle:
        handle.write(text)
    assert recap(play.run(info, inventory=with_key)) == {n: (1, 0, 0, 0, 0) for n in NAMES}


def test_audit_logging_recipe_playbook(play: Play) -> None:
    """docs/ansible.md's audit-logging playbook (examples/ansible/audit-logging.yml): the policy file from
    the controller's files/, both flags and mounts, one master at a time; a second run changes nothing."""
    shutil.copytree(str(EXAMPLES / "files"), os.path.join(play.tmp, "files"))
    playbook = shutil.copy(str(EXAMPLES / "audit-logging.yml"), play.tmp)
    before = play.snap()
    proc = play.run(playbook, "--check", "--diff", "-e", "cpctl_settle=0.5")
    assert play.snap() == before and recap(proc) == {n: (1, 1, 0, 0, 0) for n in NAMES}
    assert "+    - --audit-policy-file=/etc/kubernetes/audit/policy.yaml" in proc.stdout     # a path: no secret
    proc = play.run(playbook, "-e", "cpctl_settle=0.5")
    assert recap(proc) == {n: (1, 1, 0, 0, 0) for n in NAMES}
    policy = (EXAMPLES / "files" / "audit-policy.yaml").read_bytes()
    # the playbook's policy is the recipe's (docs/companion-files.md), not a second version of it
    recipe = (Path(REPO) / "docs" / "companion-files.md").read_text()
    assert "```yaml file=audit-policy.yaml\n" + policy.decode() + "```" in recipe
    for i in (1, 2, 3):
        with open(play.manifest(i, "kube-apiserver.yaml")) as handle:
            text = handle.read()
        assert "--audit-policy-file=/etc/kubernetes/audit/policy.yaml" in text and "mountPath: /etc/kubernetes/audit" \
            in text
        root = play.hosts[NAMES[i - 1]]["node_root"]
        with open(os.path.join(root, "etc/kubernetes/audit/policy.yaml"), "rb") as handle:
            assert handle.read() == policy
        record = read_history(play.state(i))[-1]
        assert (record["action"], record["reason"]) == ("flags", "audit logging on") and record.get("companions")
    assert recap(play.run(playbook, "-e", "cpctl_settle=0.5")) == {n: (1, 0, 0, 0, 0) for n in NAMES}


def test_commit_confirmed_rolling_change_playbook(play: Play) -> None:
    """docs/ansible.md's commit-confirmed playbook (examples/ansible/commit-confirmed.yml): each master's
    change is armed, checked through the API and confirmed before the next master; no arm is left."""
    playbook = str(EXAMPLES / "commit-confirmed.yml")
    proc = play.run(playbook, "-e", "cpctl_settle=0.5")
    assert recap(proc) == {n: (4, 2, 0, 0, 0) for n in NAMES}
    times = []
    for i in (1, 2, 3):
        with open(play.manifest(i, "kube-apiserver.yaml")) as handle:
            assert "--anonymous-auth=false" in handle.read()
        records = [r for r in read_history(play.state(i)) if r["component"] == "kube-apiserver"]
        assert [r["action"] for r in records][-3:] == ["flags", "armed", "confirmed"], records
        times.append((records[-3]["time"], records[-1]["time"]))
        arms = os.path.join(play.state(i), "confirm")
        assert not [f for f in (os.listdir(arms) if os.path.isdir(arms) else []) if f.endswith(".json")]
    # one master at a time: a master's change comes after the previous master's confirmation
    assert times[0][1] <= times[1][0] and times[1][1] <= times[2][0]
    # confirming again finds nothing armed: no change, no failure (check mode says the same)
    again = play.playbook("again.yml", "- hosts: masters\n  gather_facts: false\n  tasks:\n"
                                       "    - cpctl.controlplane.confirm: {component: apiserver}\n")
    assert recap(play.run(again)) == {n: (1, 0, 0, 0, 0) for n in NAMES}
    assert recap(play.run(again, "--check")) == {n: (1, 0, 0, 0, 0) for n in NAMES}


OVERDUE = """
- hosts: masters
  gather_facts: false
  tasks:
    - cpctl.controlplane.controlplane_info: {revisions: [scheduler]}
    - cpctl.controlplane.confirm: {component: scheduler, state: reverted}
      register: would
    - ansible.builtin.assert:
        that:
          - (cpctl.status.components | selectattr('component', 'equalto', 'kube-scheduler') | first).unconfirmed.overdue
          - would is changed
"""


def test_an_overdue_arm_survives_check_mode_and_state_reverted_reverts_it_over_ssh(play: Play) -> None:
    """Issue 35: read-only is read-only - ``controlplane_info`` and check mode leave an arm past its
    deadline (its timer lost) and its manifest alone, and say it is overdue; ``confirm`` with
    ``state: reverted`` reverts it over SSH (``cpctl -H MASTER revert-unconfirmed``)."""
    import signal
    import time
    originals = [open(play.manifest(i, "kube-scheduler.yaml"), "rb").read() for i in (1, 2, 3)]
    # The window outlasts the roll of three masters on a busy machine (with 10 s, master1's own timer
    # reverted its arm while masters 2 and 3 were still changing, at load 13): the arms must still be
    # there when their timers are killed.
    doc = play.cli.json("-i", play.cpctl_inv, "flags", "scheduler", "--set", "v=4", "--confirm-within", "60s",
                        "--timeout", "60", "--settle", "0.5")
    for host in doc["hosts"]:
        os.kill(host["data"]["confirm"]["pid"], signal.SIGKILL)     # the masters' timers lost (a reboot)
    for i in (1, 2, 3):
        assert os.path.exists(os.path.join(play.state(i), "confirm", "kube-scheduler.yaml.json")), \
            "master%d's arm was gone before its timer was killed: the roll outlasted the window" % i
    deadline = max(host["data"]["confirm"]["deadline"] for host in doc["hosts"])
    while time.time() < calendar.timegm(time.strptime(deadline, "%Y-%m-%dT%H:%M:%SZ")) + 1:
        time.sleep(0.5)
    before = play.snap()
    proc = play.run(play.playbook("overdue.yml", OVERDUE), "--check")
    assert play.snap() == before, "check mode changed a master"
    assert recap(proc) == {n: (3, 1, 0, 0, 0) for n in NAMES}     # confirm says it would revert
    for i in (1, 2, 3):
        assert open(play.manifest(i, "kube-scheduler.yaml"), "rb").read() != originals[i - 1]
        assert os.path.exists(os.path.join(play.state(i), "confirm", "kube-scheduler.yaml.json"))
    revert = play.playbook("revert.yml", "- hosts: masters\n  gather_facts: false\n  tasks:\n"
                                         "    - cpctl.controlplane.confirm: {component: scheduler, state: reverted}\n")
    assert recap(play.run(revert)) == {n: (1, 1, 0, 0, 0) for n in NAMES}
    for i in (1, 2, 3):
        assert open(play.manifest(i, "kube-scheduler.yaml"), "rb").read() == originals[i - 1]
        assert [r["action"] for r in read_history(play.state(i))][-2:] == ["rollback", "reverted"]
    assert recap(play.run(revert)) == {n: (1, 0, 0, 0, 0) for n in NAMES}      # nothing armed: no change

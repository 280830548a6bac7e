"""Commit-confirmed changes over SSH, the operator's side (issue 35 items 5 and 6), against one lab
master behind a real sshd (nothing of cpctl on the master):

* every hint a remote arm prints - text and JSON, the arm line, status, check, the refusals under
  the arm, the overdue report - names the master with the ``-i``/``-H`` (and ``--ssh-config``,
  ``--known-hosts``) the operator used, so that a pasted command runs there and not on the laptop;
* read-only commands report an overdue arm and leave it (and its manifest) alone; ``revert-unconfirmed
  -H`` reverts it;
* a connection dropped for real after the arm (the sshd processes serving the session killed) says
  the change is applied and armed, when it reverts and how to confirm it; Ctrl-C during
  ``--confirm-check`` says the same at once and that the check goes on on the master;
* ``confirm`` twice: the second exits 0, "already confirmed".
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import calendar
import json
import os
import re
import signal
import subprocess
import time
from typing import Any, Iterator, List

import pytest

from cpctl.cli.registry import COMMANDS
from tests.labfixture import lab, wait_for  # noqa: F401
from tests.remoteutil import Cli, clean_env, lab_vars, read_history, write_inventory
from tests.sshfixture import SSHServer, sshd  # noqa: F401

pytestmark = pytest.mark.timeout(400)
FAST = ("--timeout", "60", "--settle", "1")
WORDS = {path.split()[0] for path in COMMANDS}
HINT = re.compile(r"\bcpctl\s+(\S+)")


class Master:
    """One lab master reached as ``-i inv.yaml -H master`` (inventory vars: the lab's paths)."""

    def __init__(self, server: SSHServer, handle: Any, tmp: str) -> None:
        self.server, self.lab = server, handle
        self.cli = Cli(server.ssh_config, server.known_hosts, clean_env(os.path.join(tmp, "home")))
        self.inv = write_inventory(os.path.join(tmp, "inv.yaml"), {"master": dict(host="master",
                                                                                  **lab_vars(handle, 1))})
        self.prefix = "cpctl -i %s -H master --ssh-config %s --known-hosts %s" % (
            self.inv, server.ssh_config, server.known_hosts)
        self.manifest = os.path.join(str(handle.manifests_dir(1)), "kube-scheduler.yaml")
        self.arm = os.path.join(str(handle.state_dir(1)), "confirm", "kube-scheduler.yaml.json")

    def run(self, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
        return self.cli.run("-i", self.inv, *args, rc=rc, timeout=240)

    def popen(self, *args: str) -> subprocess.Popen:
        return self.cli.popen("-i", self.inv, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def read(self) -> bytes:
        with open(self.manifest, "rb") as handle:
            return handle.read()

    def actions(self) -> List[str]:
        return [r["action"] for r in read_history(str(self.lab.state_dir(1))) if r.get("component") == "kube-scheduler"]


@pytest.fixture
def master(sshd: SSHServer, lab: Any, tmp_path: Any) -> Iterator[Master]:
    yield Master(sshd, lab, str(tmp_path))


def hints(master: Master, *texts: str) -> List[str]:
    """Every cpctl command line the texts name; each must reach the master (fails on one that does
    not: ``cpctl confirm ...`` pasted would run on this machine)."""
    found = []
    for text in texts:
        for match in HINT.finditer(text):
            assert match.group(1) not in WORDS, "a hint without -H: %r in %s" % (
                text[match.start():match.start() + 80], text)
            if text.startswith(master.prefix, match.start()):
                found.append(text[match.start():].split(")")[0].split(";")[0])
    return found


def strings(value: Any) -> List[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def _epoch(iso: str) -> float:
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


def test_every_hint_of_a_remote_arm_names_the_master_and_views_never_revert(master: Master) -> None:
    original = master.read()
    arm = master.run("-o", "json", "flags", "scheduler", "--set", "v=4", "--confirm-within", "5m", *FAST)
    armed = json.loads(arm.stdout)["hosts"][0]["data"]["confirm"]
    assert armed["armed"] and armed["hint"] == master.prefix + " confirm kube-scheduler", armed
    for args, rc in ((("status",), 0), (("status", "scheduler"), 0), (("check",), 0),
                     (("flags", "scheduler", "--set", "v=5", *FAST), 4), (("stop", "scheduler"), 4),
                     (("rollback", "scheduler", "--dry-run"), 4)):
        text = master.run(*args, rc=rc)
        found = hints(master, text.stdout, text.stderr)
        assert any(h.startswith(master.prefix + " confirm kube-scheduler") for h in found), (args, text.stderr)
        if args[0] in ("stop", "rollback"):
            continue                     # the same refusal as the flags one (Arm.refusal), its JSON checked there
        as_json = master.run("-o", "json", *args, rc=rc)
        found = hints(master, *strings(json.loads(as_json.stdout)), *[
            s for line in as_json.stderr.splitlines() if line.startswith("{") for s in strings(json.loads(line))])
        assert any(h.startswith(master.prefix + " confirm kube-scheduler") for h in found), (args, as_json.stderr)
    check = json.loads(master.run("-o", "json", "check").stdout)["hosts"][0]["data"]
    fixes = [f["fix"] for f in check["findings"] if f["kind"] == "unconfirmed"]
    assert fixes == [master.prefix + " confirm kube-scheduler (keeps the change), or let it revert at its deadline"]

    # the explicit revert, over SSH (refused with -H until issue 35)
    done = json.loads(master.run("-o", "json", "revert-unconfirmed", "scheduler").stdout)
    data = done["hosts"][0]["data"]
    assert done["hosts"][0]["status"] == "changed" and data["reverted"] is True, done
    assert master.read() == original and not os.path.exists(master.arm)
    assert master.actions()[-2:] == ["rollback", "reverted"], master.actions()
    again = json.loads(master.run("-o", "json", "revert-unconfirmed", "scheduler").stdout)
    assert again["hosts"][0]["status"] == "ok" and again["hosts"][0]["data"]["reverted"] is False, again
    usage = master.run("revert-unconfirmed", "scheduler", "--at", "1", rc=2)
    assert "not with -H/-i" in usage.stderr

    # an arm whose timer is lost (as to a reboot), past its deadline: every view reports it, none reverts
    arm = master.run("flags", "scheduler", "--set", "v=4", "--confirm-within", "12s", *FAST)
    with open(master.arm) as handle:
        armed = json.load(handle)
    os.kill(armed["pid"], signal.SIGKILL)
    assert re.search(r"kube-scheduler changed, reverts at \d\d:\d\d:\d\d unless you run: %s confirm kube-scheduler\n"
                     % re.escape(master.prefix), arm.stdout), arm.stdout
    hints(master, arm.stdout, arm.stderr)
    changed = master.read()
    assert changed != original
    wait_for(lambda: time.time() > _epoch(armed["deadline"]) + 1, 60, "the deadline passed")
    status = master.run("status")
    # issue 49: the timer was killed, so nothing reverts it by itself: the view says so, never "reverts now by
    # the node's timer", and names the one command that reverts it (the hint below)
    assert "unconfirmed, overdue since %s, but its revert timer is NOT running" % armed["deadline"] in status.stdout
    assert "reverts now by the node's timer" not in status.stdout
    assert "%s revert-unconfirmed kube-scheduler reverts it now" % master.prefix in status.stdout + status.stderr
    hints(master, status.stdout, status.stderr)
    check_text = master.run("check", rc=1)            # an overdue arm is a warning (drift found)
    assert "overdue since" in check_text.stdout
    hints(master, check_text.stdout, check_text.stderr)
    row = json.loads(master.run("-o", "json", "status", "scheduler").stdout)["hosts"][0]["data"]["components"][0]
    assert row["unconfirmed"]["overdue"] is True, row
    late = master.run("confirm", "scheduler", rc=4)
    assert "NOT confirmed: kube-scheduler" in late.stderr and "too late" in late.stderr, late.stderr
    hints(master, late.stdout, late.stderr)
    assert master.read() == changed and os.path.exists(master.arm)
    assert master.actions()[-2:] == ["flags", "armed"], master.actions()
    # the cpctl-check.service step, over SSH here
    done = json.loads(master.run("-o", "json", "revert-unconfirmed", "--overdue").stdout)["hosts"][0]
    assert done["status"] == "changed" and "reverted to revision" in done["data"]["reverted"][0], done
    assert master.read() == original and not os.path.exists(master.arm)


def _sshd_children(server: SSHServer) -> List[int]:
    """The sshd processes serving sessions: descendants of the listener we started whose command is
    sshd's (not the agent or what it runs)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    stat = handle.read()
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            parents[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)
    found, todo = [], [server.proc.pid]
    while todo:
        parent = todo.pop()
        for pid, (ppid, cmdline) in parents.items():
            if ppid == parent:
                todo.append(pid)
                if cmdline.startswith(b"sshd"):
                    found.append(pid)
    return found


def _check_runs(seconds: str) -> List[int]:
    """Pids of the --confirm-check ``sleep SECONDS`` (run by the agent, on the master = here)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    if handle.read().split(b"\0")[:2] == [b"sleep", seconds.encode()]:
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_a_dropped_connection_or_ctrl_c_after_the_arm_says_it_is_armed(master: Master) -> None:
    # the connection is lost for real while --confirm-check runs on the master
    proc = master.popen("flags", "scheduler", "--set", "v=4", "--confirm-within", "5m", "--confirm-check",
                        "sleep 41", *FAST)
    try:
        wait_for(lambda: os.path.exists(master.arm) and _check_runs("41"), 150, "armed, the check running")
        serving = _sshd_children(master.server)
        assert serving, "no sshd process serves the session"
        for pid in serving:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = json.loads(open(master.arm).read())["deadline"]
    assert proc.returncode == 8, (out, err)
    assert "Traceback" not in err
    assert "connection to master lost during the --confirm-check of kube-scheduler: kube-scheduler is applied and " \
           "ARMED on master: it reverts at %s unless confirmed (%s confirm kube-scheduler)" % (
               deadline, master.prefix) in err, err
    hints(master, out, err)
    # confirm over SSH, twice: the second is no error
    first = master.run("confirm", "scheduler")
    assert "confirmed: kube-scheduler" in first.stdout, first.stdout
    second = master.run("confirm", "scheduler")
    assert "kube-scheduler: already confirmed (" in second.stdout, second.stdout
    assert not os.path.exists(master.arm)

    # Ctrl-C while --confirm-check runs: at once, what stands and that the check goes on there
    proc = master.popen("flags", "scheduler", "--set", "v=5", "--confirm-within", "5m", "--confirm-check",
                        "sleep 43", *FAST)
    try:
        wait_for(lambda: os.path.exists(master.arm) and _check_runs("43"), 150, "armed, the check running")
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = json.loads(open(master.arm).read())["deadline"]
    assert proc.returncode == 130, (out, err)
    assert "interrupted (SIGINT): kube-scheduler is applied and ARMED on master: it reverts at %s unless confirmed " \
           "(%s confirm kube-scheduler); the --confirm-check goes on on the master until it ends, its verdict " \
           "unheard" % (deadline, master.prefix) in out + err, (out, err)
    # at once: not after the fan-out's 20 s grace for a host that says nothing (a busy machine may add a few s)
    assert took < 20, took
    assert _check_runs("43"), "the check was said to go on on the master"
    hints(master, out, err)
    assert master.actions()[-1] == "armed"
    master.run("confirm", "scheduler")


def _cluster_configuration(master: Master) -> Any:
    """The kubeadm-config ConfigMap as kubectl shows it (JSON)."""
    from tests.labfixture import KUBECTL
    out = subprocess.run([KUBECTL, "--kubeconfig", master.lab.kubeconfig, "-n", "kube-system", "get", "configmap",
                          "kubeadm-config", "-o", "json"], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def _kept_records(keepin: str, suffix: str) -> List[str]:
    """The keep-in records in ``keepin`` whose name ends with ``suffix``."""
    return [n for n in os.listdir(keepin) if n.endswith(suffix)] if os.path.isdir(keepin) else []


def test_the_master_itself_puts_a_kept_cluster_configuration_back(master: Master) -> None:
    """Issue 33 item 1 on a master without cpctl: a ``--keep-in kubeadm-config`` change left
    unconfirmed is reverted by the master on its own - the manifest AND the ClusterConfiguration,
    over exactly the resourceVersion cpctl's write produced, with no cpctl command in between (a
    master managed over SSH may see none before the next ``kubeadm upgrade`` renders the flag
    again). The agent reads the credentials from the node's kubeconfig itself (kubeadm's admin.conf,
    certificate and key embedded): the plan holds none, only where they are in the file."""
    node_conf = os.path.join(str(master.lab.root_dir(1)), "etc", "kubernetes", "admin.conf")
    write_inventory(master.inv, {"master": dict(host="master", **dict(lab_vars(master.lab, 1), kubeconfig=node_conf))})
    original, before = master.read(), _cluster_configuration(master)
    master.run("flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--confirm-within", "20s", *FAST)
    changed = _cluster_configuration(master)
    assert changed["data"]["ClusterConfiguration"] != before["data"]["ClusterConfiguration"]
    plans = [n for n in os.listdir(os.path.dirname(master.arm)) if n.endswith(".plan")]
    assert len(plans) == 1, plans
    plan_text = open(os.path.join(os.path.dirname(master.arm), plans[0])).read()
    kubeconfig = open(node_conf).read()        # kubeadm's admin.conf: certificate and key embedded
    key = next(line.split(":", 1)[1].strip() for line in kubeconfig.splitlines() if "client-key-data" in line)
    assert key not in plan_text and '"slices"' in plan_text, "the plan names where the key is, never the key"
    # what the master's log tells the operator to run reaches this master, not the operator's machine
    hint = json.loads(plan_text)["check_hint"]
    assert hint.startswith("cpctl -i %s -H master " % master.inv) and hint.endswith(" check --kubeadm"), hint
    keepin = os.path.join(str(master.lab.state_dir(1)), "keepin")
    # the end of it: history written, then the record dropped (the test must not read in between)
    wait_for(lambda: "keep-in-undone" in master.actions() and not _kept_records(keepin, ".json"), 150,
             "the master puts the ClusterConfiguration back")
    after = _cluster_configuration(master)
    assert master.read() == original
    assert after["data"]["ClusterConfiguration"] == before["data"]["ClusterConfiguration"]
    undone = [r for r in read_history(str(master.lab.state_dir(1))) if r["action"] == "keep-in-undone"]
    assert len(undone) == 1 and undone[0]["resource_version"] == after["metadata"]["resourceVersion"], undone
    assert int(after["metadata"]["resourceVersion"]) > int(changed["metadata"]["resourceVersion"])
    assert "node-side plan" in undone[0]["origin"], undone


def test_the_master_itself_puts_a_kept_patch_file_back(master: Master) -> None:
    """The same for ``--keep-in patches``: the kubeadm patch file the unconfirmed change wrote is put
    back (here: removed, there was none) by the master's own revert, through the journaled change
    cpctl built for it at arm time, with no cpctl command in between."""
    patch = os.path.join(str(master.lab.root_dir(1)), "etc", "kubernetes", "patches", "kube-scheduler+json.yaml")
    assert not os.path.exists(patch)
    original = master.read()
    master.run("flags", "scheduler", "--set", "v=4", "--keep-in", "patches", "--confirm-within", "20s", *FAST)
    assert os.path.exists(patch) and "--v=4" in open(patch).read()
    keepin = os.path.join(str(master.lab.state_dir(1)), "keepin")
    # the end of it: the file removed, history written, then the record dropped
    wait_for(lambda: master.read() == original and not os.path.exists(patch) and
             not _kept_records(keepin, ".patch.json"), 150, "the master reverts both")
    history = [r for r in read_history(str(master.lab.state_dir(1))) if r.get("component") == "kube-scheduler"]
    undo = [r for r in history if r["action"] == "keep-in" and r.get("undo") is True]
    assert len(undo) == 1 and undo[0]["patch"] == patch and "node-side plan" in undo[0]["origin"], history
    assert not os.path.exists(os.path.join(str(master.lab.state_dir(1)), "journal.json"))


def _edit_cluster_configuration(master: Master, change: Any) -> None:
    """Another writer (kubectl replace, over the resourceVersion read): the ClusterConfiguration changed
    by ``change`` (a function of its value)."""
    import yaml

    from tests.labfixture import KUBECTL
    cm = _cluster_configuration(master)
    cfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    change(cfg)
    cm["data"]["ClusterConfiguration"] = yaml.safe_dump(cfg, sort_keys=True)
    path = os.path.join(str(master.lab.dir), "cm-edit.json")
    with open(path, "w") as handle:
        json.dump(cm, handle)
    subprocess.run([KUBECTL, "--kubeconfig", master.lab.kubeconfig, "replace", "-f", path], check=True,
                   capture_output=True, text=True, timeout=60)


def _the_refused_put_back_is_in_the_history(master: Master, keepin: str) -> None:
    """Issue 49: the master's refusal is in its history - ``cpctl history`` takes no lock and runs no
    recovery, so it showed it neither locally nor over ``-H`` -: one ``keep-in-conflict`` record (the key,
    their value, the record kept, the command that resolves it), the same record both ways, in text and
    ``-o json`` (valid against history.json), and no second one from the commands that repeat the line."""
    from tests.coreutil import schema_valid
    from tests.labfixture import run_cpctl
    [record] = _kept_records(keepin, ".json")
    remote = json.loads(master.run("-o", "json", "history", "scheduler").stdout)["hosts"]
    assert [h["host"] for h in remote] == ["master"], remote
    local = run_cpctl(master.lab.env_for(1), "-o", "json", "history", "scheduler")
    assert local.returncode == 0, local.stderr
    for answer in (remote[0]["data"], json.loads(local.stdout)):
        schema_valid("history", answer)
        conflicts = [r for r in answer["history"] if r["action"] == "keep-in-conflict"]
        assert len(conflicts) == 1, answer["history"]
        [conflict] = conflicts
        assert conflict["keys"] == ["scheduler.extraArgs.v"] and conflict["theirs"] == {"scheduler.extraArgs.v": "9"}
        assert conflict["keepin_record"] == os.path.join(keepin, record) and "node-side plan" in conflict["origin"]
        assert conflict["resolve"] == "kubectl -n kube-system edit configmap kubeadm-config", conflict
        assert conflict["configmap"] == "kube-system/kubeadm-config", conflict
    text = master.run("history", "scheduler").stdout
    assert "keep-in-conflict" in text and "someone else changed scheduler.extraArgs.v too (theirs: " \
        "scheduler.extraArgs.v=9)" in text, text


def test_the_masters_revert_takes_out_exactly_cpctls_flag_and_keeps_anothers_edit(master: Master) -> None:
    """Issue 49 item 1 on a master without cpctl: someone else edits kubeadm-config (another section's flag,
    and the same section's other flag) while the ``--keep-in kubeadm-config`` change is armed; the master's
    own revert merges cpctl's key out of the ClusterConfiguration as it is then (it used to leave the
    reverted flag there, for the next kubeadm upgrade to render on every master). Then the same key changed
    by someone else: the master refuses loudly and keeps the record for the next cpctl command."""
    import yaml

    from cpctl.core import kubeadmconfig as kc
    node_conf = os.path.join(str(master.lab.root_dir(1)), "etc", "kubernetes", "admin.conf")
    write_inventory(master.inv, {"master": dict(host="master", **dict(lab_vars(master.lab, 1), kubeconfig=node_conf))})
    original = master.read()
    master.run("flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--confirm-within", "20s", *FAST)
    _edit_cluster_configuration(master, lambda c: (
        c.setdefault("controllerManager", {}).setdefault("extraArgs", {}).update(profiling="false"),
        c["scheduler"]["extraArgs"].update({"bind-address": "0.0.0.0"})))
    keepin = os.path.join(str(master.lab.state_dir(1)), "keepin")
    # the whole revert done (its ``reverted`` after its keep-in-undone) before the next arm: a verdict of this
    # revert appended after the next arm would end that arm's wait below before its own revert is recorded
    wait_for(lambda: "keep-in-undone" in master.actions() and master.actions()[-1] == "reverted"
             and not _kept_records(keepin, ".json"), 150, "the master puts cpctl's key back")
    cfg = yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"])
    assert master.read() == original
    assert dict(kc.extra_args(cfg, "scheduler")) == {"bind-address": "0.0.0.0"}, cfg
    assert dict(kc.extra_args(cfg, "controllerManager")) == {"profiling": "false"}, cfg
    undone = [r for r in read_history(str(master.lab.state_dir(1))) if r["action"] == "keep-in-undone"]
    assert len(undone) == 1 and undone[0]["keys"] == ["scheduler.extraArgs.v"], undone
    assert "node-side plan" in undone[0]["origin"], undone

    # cpctl's own key changed by someone else too: nothing written, the record kept, said in the master's log
    master.run("flags", "scheduler", "--set", "v=5", "--keep-in", "kubeadm-config", "--confirm-within", "20s", *FAST)
    _edit_cluster_configuration(master, lambda c: c["scheduler"]["extraArgs"].update(v="9"))
    # the end of it: the manifest back, then ``reverted`` recorded once the keep-in part is done
    wait_for(lambda: master.read() == original and master.actions()[-1] == "reverted", 150,
             "the master reverts the manifest (and refuses the ClusterConfiguration)")
    cfg = yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"])
    assert dict(kc.extra_args(cfg, "scheduler"))["v"] == "9", cfg
    assert len(_kept_records(keepin, ".json")) == 1        # kept until resolved: the next cpctl command says it
    _the_refused_put_back_is_in_the_history(master, keepin)
    # what the next upgrade would render on every master (theirs, both): check --kubeadm over SSH shows it
    conflict = "master: kube-system/kubeadm-config NOT put back: someone else changed scheduler.extraArgs.v too"
    for words in (("status",), ("confirm", "--all")):      # said over -H as a local run says it (issue 49)
        said = master.run(*words).stderr
        assert conflict in said and "check it (%s check --kubeadm)" % master.prefix in said, (words, said)
    assert len(_kept_records(keepin, ".json")) == 1        # a read of the node settles nothing it cannot
    _the_refused_put_back_is_in_the_history(master, keepin)  # said again, recorded once
    check = json.loads(master.run("-o", "json", "check", "--kubeadm", rc=1).stdout)["hosts"][0]["data"]
    adds = [f for f in check["findings"] if f["kind"] == "kubeadm_adds" and f["component"] == "kube-scheduler"]
    assert len(adds) == 1 and set(adds[0]["flags"]) == {"--v=9", "--bind-address=0.0.0.0"}, check["findings"]


def test_a_private_key_of_theirs_under_a_harmless_key_never_reaches_the_masters_history_file(master: Master) -> None:
    """Review of issue 49: the master's own revert refuses the put-back (someone else changed cpctl's key
    too) and records their value - the key's name is harmless (``scheduler.extraArgs.v``) but their value is
    a private key. The plan carries cpctl's text patterns of a secret (``secret_patterns``) and the agent
    applies them: the history file on the master holds no key material, ``theirs`` says ``<redacted>``."""
    from cpctl.redaction import REDACTED
    node_conf = os.path.join(str(master.lab.root_dir(1)), "etc", "kubernetes", "admin.conf")
    write_inventory(master.inv, {"master": dict(host="master", **dict(lab_vars(master.lab, 1), kubeconfig=node_conf))})
    original = master.read()
    master.run("flags", "scheduler", "--set", "v=5", "--keep-in", "kubeadm-config", "--confirm-within", "20s", *FAST)
    pem = "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkq-----END PRIVATE KEY-----"      # one short line
    _edit_cluster_configuration(master, lambda c: c["scheduler"]["extraArgs"].update(v=pem))
    wait_for(lambda: master.read() == original and master.actions()[-1] == "reverted", 150,
             "the master reverts the manifest (and refuses the ClusterConfiguration)")
    with open(os.path.join(str(master.lab.state_dir(1)), "history.jsonl"), "rb") as handle:
        on_disk = handle.read()
    assert b"MIIEvQIBADANBgkq" not in on_disk and b"keep-in-conflict" in on_disk, on_disk[-2000:]
    conflicts = [r for r in read_history(str(master.lab.state_dir(1))) if r["action"] == "keep-in-conflict"]
    assert len(conflicts) == 1 and conflicts[0]["theirs"] == {"scheduler.extraArgs.v": REDACTED}, conflicts
    assert "node-side plan" in conflicts[0]["origin"], conflicts


def _write_cluster_configuration(master: Master, text: str) -> None:
    """Another writer puts ``text`` in kubeadm-config as it is (kubectl replace, over the resourceVersion
    read) - kubeadm's own upload writes go-yaml's form (``tests.coreutil.go_yaml``)."""
    from tests.labfixture import KUBECTL
    cm = _cluster_configuration(master)
    cm["data"]["ClusterConfiguration"] = text
    path = os.path.join(str(master.lab.dir), "cm-edit.json")
    with open(path, "w") as handle:
        json.dump(cm, handle)
    subprocess.run([KUBECTL, "--kubeconfig", master.lab.kubeconfig, "replace", "-f", path], check=True,
                   capture_output=True, text=True, timeout=60)


def _with_args(cfg: Any, section: str, args: Any) -> Any:
    """``cfg`` with ``args`` added to ``section``'s extraArgs (a v1beta3 map or a v1beta4 list)."""
    found = cfg.setdefault(section, {}).setdefault("extraArgs", {})
    if isinstance(found, list):
        found.extend({"name": k, "value": v} for k, v in args.items())
    else:
        found.update(args)
    return cfg


def test_the_masters_revert_reads_the_multi_line_values_kubeadm_writes(master: Master) -> None:
    """Issue 49 item 1, left open, on a master without cpctl: kubeadm's ClusterConfiguration holds
    multi-line values (go-yaml: block scalars ``|``, ``|2-``, ``|+``; cpctl writes them back quoted over
    lines). The master's own revert used to refuse the whole text - the reverted flag stayed for the next
    ``kubeadm upgrade``, said in syslog only. Now it takes exactly cpctl's flag out and keeps every
    multi-line value as it was. YAML it still does not read (an anchor) is in the master's history,
    ``keep-in-pending``, the record kept - and the next cpctl command over ``-H`` puts it back."""
    import yaml

    from cpctl.core import kubeadmconfig as kc
    from tests.coreutil import go_yaml
    node_conf = os.path.join(str(master.lab.root_dir(1)), "etc", "kubernetes", "admin.conf")
    write_inventory(master.inv, {"master": dict(host="master", **dict(lab_vars(master.lab, 1), kubeconfig=node_conf))})
    original = master.read()
    kubeadms = {"audit-note": "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUX\n-----END CERTIFICATE-----\n",
                "indented-note": "  two: spaces first\nthen # not a comment\n", "kept-note": "x\n\n\n"}
    cfg = yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"])
    _write_cluster_configuration(master, go_yaml(_with_args(cfg, "apiServer", kubeadms)))
    master.run("flags", "scheduler", "--set", "v=4", "--keep-in", "kubeadm-config", "--confirm-within", "20s", *FAST)
    theirs = {"profiling": "false", "motd-note": "  welcome\n\n  to the master\n"}
    written = yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"])
    assert dict(kc.extra_args(written, "scheduler"))["v"] == "4"
    text = go_yaml(_with_args(written, "controllerManager", theirs))
    assert "-note: |2\n" in text and "-note: |+\n" in text, text
    _write_cluster_configuration(master, text)
    keepin = os.path.join(str(master.lab.state_dir(1)), "keepin")
    # the end of it: ``reverted`` (its verdict, after the keep-in part): the plan run is over - a verdict
    # appended after the next arm would end the next wait early
    wait_for(lambda: master.actions()[-2:] == ["keep-in-undone", "reverted"] and not _kept_records(keepin, ".json"),
             150, "the master puts cpctl's key back")
    cfg = yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"])
    assert master.read() == original
    assert "v" not in dict(kc.extra_args(cfg, "scheduler")), cfg
    assert dict(kc.extra_args(cfg, "apiServer")).items() >= kubeadms.items(), cfg       # byte for byte in value
    assert dict(kc.extra_args(cfg, "controllerManager")) == theirs, cfg
    undone = [r for r in read_history(str(master.lab.state_dir(1))) if r["action"] == "keep-in-undone"]
    assert len(undone) == 1 and undone[0]["keys"] == ["scheduler.extraArgs.v"], undone
    assert "node-side plan" in undone[0]["origin"], undone

    # YAML the agent still does not read: refused loudly - the master's history says so, the record kept
    master.run("flags", "scheduler", "--set", "v=5", "--keep-in", "kubeadm-config", "--confirm-within", "20s", *FAST)
    text = _cluster_configuration(master)["data"]["ClusterConfiguration"]
    _write_cluster_configuration(master, text.replace("kind: ClusterConfiguration", "kind: &k ClusterConfiguration"))
    wait_for(lambda: master.read() == original and master.actions()[-2:] == ["keep-in-pending", "reverted"], 150,
             "the master reverts the manifest (and cannot read the ClusterConfiguration)")
    [record] = _kept_records(keepin, ".json")
    pending = [r for r in read_history(str(master.lab.state_dir(1))) if r["action"] == "keep-in-pending"]
    assert len(pending) == 1 and pending[0]["keepin_record"] == os.path.join(keepin, record), pending
    assert "YAML the master's revert does not read" in pending[0]["reason"], pending
    shown = master.run("history", "scheduler").stdout                 # what the operator sees over -H
    assert "keep-in-pending" in shown and "the next cpctl command on this node puts it back" in shown, shown
    assert dict(kc.extra_args(yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"]),
                              "scheduler"))["v"] == "5"                # still there: the next cpctl command ...
    master.run("status")                                              # ... over -H reads any YAML: put back
    cfg = yaml.safe_load(_cluster_configuration(master)["data"]["ClusterConfiguration"])
    assert "v" not in dict(kc.extra_args(cfg, "scheduler")) and not _kept_records(keepin, ".json"), cfg
    assert dict(kc.extra_args(cfg, "apiServer")).items() >= kubeadms.items(), cfg

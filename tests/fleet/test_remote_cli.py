"""Issue #4 at the CLI level, one master: ``cpctl -H master ...`` over a real sshd against the lab.

The lab runs on this machine, so the "remote" master reached over sshd on 127.0.0.1 sees the
same paths: every test checks the master's files directly (and snapshots them around refusals).
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

from tests.coreutil import snapshot
from tests.labfixture import is_ready, mirror
from tests.remoteutil import Cli, accepted, clean_env
from tests.sshfixture import SSHServer, free_port, keygen

pytestmark = pytest.mark.timeout(240)


class Rig:
    def __init__(self, sshd: SSHServer, lab: Any, tmp: str) -> None:
        self.sshd, self.lab, self.tmp = sshd, lab, tmp
        self.cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(os.path.join(tmp, "home"), **lab.env_for(1)))
        self.manifests = str(lab.manifests_dir(1))
        self.state = str(lab.state_dir(1))

    def snap(self) -> dict:
        return snapshot(self.manifests, self.state)

    def manifest(self, name: str = "kube-scheduler.yaml") -> bytes:
        with open(os.path.join(self.manifests, name), "rb") as handle:
            return handle.read()


@pytest.fixture
def rig(sshd: SSHServer, lab: Any, tmp_path: Any) -> Iterator[Rig]:
    yield Rig(sshd, lab, str(tmp_path))


def _rows(status: dict) -> list:
    return [(r["component"], r["state"], r["file"], r["checksum"]) for r in status["components"]]


def _one_host(doc: dict, status: str = "ok") -> dict:
    assert set(doc) == {"hosts", "recap"}
    assert [h["host"] for h in doc["hosts"]] == ["master"]
    host = doc["hosts"][0]
    assert set(host) == {"host", "status", "error", "elapsed_seconds", "data"}
    assert (host["status"], host["error"]) == (status, None)
    assert doc["recap"] == {"master": {"ok": 1, "changed": int(status == "changed"), "unreachable": 0,
                                       "failed": 0, "skipped": 0}}
    return host["data"]


def test_one_master_same_as_local(rig: Rig) -> None:
    cli, lab = rig.cli, rig.lab
    original = rig.manifest()
    local = cli.json("status", ssh=False)
    logins = accepted(rig.sshd)
    remote = _one_host(cli.json("-H", "master", "status"))
    assert accepted(rig.sshd) == logins + 1         # one SSH connection for the whole run
    assert _rows(remote) == _rows(local) and len(_rows(local)) == 4
    assert (remote["node"], remote["manifests_dir"]) == (local["node"], rig.manifests)

    stop = cli.run("-H", "master", "stop", "scheduler", "--reason", "issue 4")
    assert accepted(rig.sshd) == logins + 2
    assert "== master: changed ==" in stop.stdout
    assert "master : ok=1 changed=1 unreachable=0 failed=0 skipped=0" in stop.stdout
    # Verified on the master through the API probe, and the result says which probe saw it.
    assert "kube-scheduler: stopped (manifest parked)" in stop.stdout and "gone (api)" in stop.stdout
    parked = os.path.join(rig.state, "parked", "kube-scheduler.yaml")
    with open(parked, "rb") as handle:
        assert handle.read() == original
    assert os.stat(parked).st_uid == 0
    assert not os.path.exists(os.path.join(rig.manifests, "kube-scheduler.yaml"))
    assert mirror(lab, "kube-scheduler") is None

    local = cli.json("status", "scheduler", ssh=False)
    remote = _one_host(cli.json("-H", "master", "status", "scheduler"))
    assert _rows(remote) == _rows(local) == [("kube-scheduler", "parked", "kube-scheduler.yaml",
                                              local["components"][0]["checksum"])]
    assert remote["components"][0]["reason"] == "issue 4"

    start = cli.run("-H", "master", "start", "scheduler")
    assert "kube-scheduler: started (manifest restored)" in start.stdout
    assert "Running and Ready (api)" in start.stdout and "lease kube-scheduler renewed" in start.stdout
    assert rig.manifest() == original and not os.path.exists(parked)
    assert is_ready(mirror(lab, "kube-scheduler"))

    remote = _one_host(cli.json("-H", "master", "history"))["history"]
    local = cli.json("history", ssh=False)["history"]
    assert remote == local
    assert [(r["action"], r["component"], r.get("reason")) for r in remote] == [
        ("stop", "kube-scheduler", "issue 4"), ("start", "kube-scheduler", None)]
    text = cli.run("-H", "master", "history", "scheduler").stdout
    assert "== master: ok ==" in text and "stop    kube-scheduler" in text

    # cpctl version: the client's, and what the master answered (issue #39)
    from cpctl import __version__
    version = cli.run("-H", "master", "version").stdout
    assert version.startswith("client: cpctl %s (build " % __version__), version
    assert "agent: cpctl %s (build " % __version__ in version and ", shipped by this client" in version
    agent = _one_host(cli.json("-H", "master", "version"))
    assert agent["agent"] == __version__ and agent["user"] == "root" and agent["python"].startswith("3.")


def _other_key_line(rig: Rig) -> str:
    key = os.path.join(rig.tmp, "other_host_key")
    pub = keygen(key).split()
    return "[%s]:%d %s %s\n" % (rig.sshd.address, rig.sshd.port, pub[0], pub[1])


def test_host_keys_unknown_changed_accept_new(rig: Rig) -> None:
    cli = rig.cli
    unknown = os.path.join(rig.tmp, "known_hosts_empty")
    open(unknown, "w").close()
    before = rig.snap()
    proc = cli.run("-H", "master", "stop", "scheduler", rc=8, known_hosts=unknown)
    assert "unknown host key" in proc.stderr and "--accept-new-host-key" in proc.stderr
    assert "unreachable=1" in proc.stdout
    assert rig.snap() == before
    assert os.path.getsize(unknown) == 0             # nothing recorded without the flag

    changed = os.path.join(rig.tmp, "known_hosts_changed")
    with open(changed, "w") as handle:
        handle.write(_other_key_line(rig))
    with open(changed) as handle:
        changed_text = handle.read()
    proc = cli.run("--accept-new-host-key", "-H", "master", "stop", "scheduler", rc=8, known_hosts=changed)
    assert "HOST IDENTIFICATION HAS CHANGED" in proc.stderr
    assert rig.snap() == before
    with open(changed) as handle:
        assert handle.read() == changed_text        # a changed key is never "accepted"

    doc = cli.json("--accept-new-host-key", "-H", "master", "status", "scheduler", known_hosts=unknown)
    assert _rows(_one_host(doc))[0][:2] == ("kube-scheduler", "present")
    with open(unknown) as handle:
        recorded = handle.read().split()
    assert recorded == rig.sshd.known_hosts_line.split()
    cli.run("-H", "master", "history", known_hosts=unknown)     # the recorded key now verifies
    assert rig.snap() == before


def test_sudo_users(rig: Rig, sudo_users: Any) -> None:
    sshd, cli = rig.sshd, rig.cli
    config = os.path.join(rig.tmp, "ssh_config_sudo")
    with open(config, "w") as handle:
        handle.write(sshd.config_block("np", user=sudo_users.nopasswd))
        handle.write(sshd.config_block("pw", user=sudo_users.password_user))
    cli.ssh_config = config
    original = rig.manifest()

    before = rig.snap()
    proc = cli.run("-H", "pw", "stop", "scheduler", rc=7)
    assert "needs a password" in proc.stderr and sudo_users.password not in proc.stderr + proc.stdout
    assert rig.snap() == before

    out = cli.run("-H", "np", "stop", "scheduler").stdout
    assert "changed=1" in out
    parked = os.path.join(rig.state, "parked", "kube-scheduler.yaml")
    with open(parked, "rb") as handle:
        assert handle.read() == original
    assert os.stat(parked).st_uid == 0 and (os.stat(rig.state).st_mode & 0o777) == 0o700
    history = cli.json("-H", "np", "history")["hosts"][0]["data"]["history"]
    assert history[-1]["action"] == "stop" and sudo_users.nopasswd in history[-1]["user"]
    cli.run("-H", "np", "start", "scheduler")
    assert rig.manifest() == original and not os.path.exists(parked)


def test_unreachable_closed_port(rig: Rig) -> None:
    target = "root@127.0.0.1:%d" % free_port("127.0.0.1")
    before = rig.snap()
    doc = rig.cli.json("-H", target, "status", rc=8)
    host = doc["hosts"][0]
    assert (host["host"], host["status"], host["data"]) == (target, "unreachable", None)
    assert "connection refused" in host["error"]
    assert host["elapsed_seconds"] < 8        # refused at once, not after the 10 s connect timeout
    assert doc["recap"] == {target: {"ok": 0, "changed": 0, "unreachable": 1, "failed": 0, "skipped": 0}}
    proc = rig.cli.run("-H", target, "stop", "scheduler", rc=8)
    assert "unreachable=1" in proc.stdout and "connection refused" in proc.stderr
    assert rig.snap() == before


def test_dry_run_local_and_remote(rig: Rig) -> None:
    cli = rig.cli
    in_dir = os.path.join(rig.manifests, "kube-scheduler.yaml")
    parked = os.path.join(rig.state, "parked", "kube-scheduler.yaml")
    before = rig.snap()
    logins = accepted(rig.sshd)

    text = cli.run("-H", "master", "stop", "scheduler", "--dry-run").stdout
    assert "dry run on node %s (nothing changed)" % rig.lab.node_name(1) in text
    assert "stop kube-scheduler: move %s -> %s" % (in_dir, parked) in text
    assert "-kube-scheduler.yaml" in text and "master : ok=1 changed=0" in text
    local = cli.run("stop", "scheduler", "--dry-run", ssh=False).stdout
    assert "== master: ok ==\n" + local.rstrip("\n") in text
    plan = _one_host(cli.json("-H", "master", "restart", "scheduler", "--dry-run"))
    assert [s["action"] for s in plan["plan"]] == ["stop", "start"] and plan["diff"] == ""
    assert plan["dry_run"] is True and plan["changed"] is False
    assert cli.json("restart", "scheduler", "--dry-run", ssh=False)["plan"] == plan["plan"]
    assert rig.snap() == before

    cli.run("stop", "scheduler", ssh=False)
    stopped = rig.snap()
    plan = _one_host(cli.json("-H", "master", "start", "scheduler", "--dry-run"))
    assert plan["plan"] == [{"action": "start", "component": "kube-scheduler", "move": [parked, in_dir]}]
    assert "+kube-scheduler.yaml" in plan["diff"]
    local = cli.run("start", "scheduler", "--dry-run", ssh=False).stdout
    assert "+kube-scheduler.yaml" in local and "start kube-scheduler: move %s -> %s" % (parked, in_dir) in local
    assert rig.snap() == stopped
    assert accepted(rig.sshd) == logins + 3          # one SSH connection per remote run
    cli.run("start", "scheduler", ssh=False)
    assert snapshot(rig.manifests) == {k: v for k, v in before.items() if k.startswith(rig.manifests)}

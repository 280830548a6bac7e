"""Each error once (issue #17): a host's error was printed three times in a fan-out (its block, the
recap, the final stderr line) and ``check --fix`` printed a finding before and again after the fix.

Now a host's error is in its block, or - for the host the final stderr line reports - only there;
the recap has the counts. Real sshd (tests.sshfixture) and an unreachable port; ``check --fix``
locally and over SSH.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from tests.coreutil import NODE, NodeDirs
from tests.remoteutil import Cli, clean_env, write_inventory
from tests.sshfixture import SSHServer, free_port

REFUSED = "connection refused"


def combined(proc: Any) -> str:
    return proc.stdout + proc.stderr


def test_unreachable_hosts_each_error_once(sshd: SSHServer, tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path / "node"))
    env = clean_env(str(tmp_path / "home"), CPCTL_MANIFESTS_DIR=node.manifests, CPCTL_STATE_DIR=node.state,
                    CPCTL_NODE_NAME=NODE, CPCTL_PROBE="none")
    cli = Cli(sshd.ssh_config, sshd.known_hosts, env)
    down = ["root@127.0.0.1:%d" % free_port("127.0.0.1"), "root@127.0.0.2:%d" % free_port("127.0.0.2")]
    proc = cli.run("-H", ",".join(["master"] + down), "status", rc=8)
    assert combined(proc).count(REFUSED) == 2, combined(proc)        # one per unreachable host
    for target in down:
        assert combined(proc).count("%s: unreachable: connection refused" % target) \
            + proc.stdout.count("== %s: unreachable ==\nerror: unreachable: connection refused" % target) == 1
    assert "== %s: unreachable, error below ==" % down[0] in proc.stdout   # the one the last line reports
    assert "kube-scheduler" in proc.stdout                                  # the reachable master's answer
    assert "%s : ok=0 changed=0 unreachable=1 failed=0 skipped=0" % down[1] in proc.stdout

    single = cli.run("-H", down[0], "stop", "scheduler", rc=8)
    assert combined(single).count(REFUSED) == 1, combined(single)
    assert single.stderr.startswith("cpctl: %s: unreachable: connection refused" % down[0])


def test_failed_hosts_each_error_once(sshd: SSHServer, tmp_path: Any) -> None:
    good = NodeDirs(str(tmp_path / "good"))
    common = {"host": sshd.alias, "node_name": NODE, "state_dir": good.state}
    inventory = write_inventory(str(tmp_path / "inventory.yaml"), {
        "good": dict(common, manifests_dir=good.manifests),
        "bad": dict(common, manifests_dir=str(tmp_path / "missing"), state_dir=str(tmp_path / "bad-state")),
        "worse": dict(common, manifests_dir=str(tmp_path / "gone"), state_dir=str(tmp_path / "worse-state")),
    })
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home"), CPCTL_PROBE="none"))
    proc = cli.run("-i", inventory, "--keep-going", "stop", "scheduler", rc=7)
    for missing in ("missing", "gone"):
        assert combined(proc).count(str(tmp_path / missing)) == 1, combined(proc)
    assert "== bad: failed, error below ==" in proc.stdout and "== worse: failed ==\nerror: " in proc.stdout
    assert re.search(r"^good +: ok=1 changed=1 ", proc.stdout, re.M)
    assert not os.path.exists(os.path.join(good.manifests, "kube-scheduler.yaml"))
    doc = cli.json("-i", inventory, "status", rc=7)                 # JSON keeps every host's error
    assert [bool(h["error"]) for h in doc["hosts"]] == [False, True, True]


def _drifted(root: str) -> NodeDirs:
    """A node with an overdue park (fixed by --fix) and a stray that --fix leaves (no --remove-strays)."""
    node = NodeDirs(root)
    node.run("baseline")
    node.run("stop", "scheduler", "--for", "1s")
    with open(os.path.join(node.manifests, "etcd.yaml.bak"), "wb") as handle:
        handle.write(node.files["etcd.yaml"])
    time.sleep(1.2)
    return node


def _once(text: str, *needles: str) -> None:
    for needle in needles:
        assert text.count(needle) == 1, "%r appears %d times in:\n%s" % (needle, text.count(needle), text)


def test_check_fix_prints_each_finding_once(tmp_path: Any) -> None:
    node = _drifted(str(tmp_path / "node"))
    proc = node.run("check", "--fix", rc=1)
    _once(proc.stdout, "overdue_park", "etcd.yaml.bak is a backup/editor leftover name",
          "pod kube-system/etcd is defined by etcd.yaml and etcd.yaml.bak", "FIXED    start")
    assert "\\x0a" not in proc.stdout                      # the report's lines are lines, not escapes
    assert proc.stdout.rstrip().endswith("DRIFT: 2 problems remain on %s after --fix (2 critical, 0 warning)" % NODE)
    data = json.loads(node.run("-o", "json", "check", rc=1).stdout)
    assert {f["kind"] for f in data["findings"]} >= {"stray", "duplicate"}


def test_check_fix_over_ssh_prints_each_finding_once(sshd: SSHServer, tmp_path: Any) -> None:
    node = _drifted(str(tmp_path / "node"))
    env = clean_env(str(tmp_path / "home"), CPCTL_MANIFESTS_DIR=node.manifests, CPCTL_STATE_DIR=node.state,
                    CPCTL_NODE_NAME=NODE, CPCTL_PROBE="none")
    proc = Cli(sshd.ssh_config, sshd.known_hosts, env).run("-H", "master", "check", "--fix", rc=1)
    _once(proc.stdout, "overdue_park", "etcd.yaml.bak is a backup/editor leftover name", "FIXED    start")
    assert proc.stderr == "cpctl: drift found: 2 problems\n"

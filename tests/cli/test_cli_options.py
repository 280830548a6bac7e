"""kubectl habits (issue #17): global options after the command word, and bare ``cpctl``.

``cpctl status -o json`` and ``cpctl stop scheduler -H m1 --no-wait`` work like kubectl's: the
top-level group's options are moved in front of the command word before click parses - up to a
literal ``--``, and never a spelling the command itself defines (its own option wins).
"""

from __future__ import annotations

import json
import subprocess
from typing import List

import pytest

from cpctl.cli.main import hoist_global_options
from tests.coreutil import CLI, NodeDirs


@pytest.mark.parametrize("argv, want", [
    (["status", "-o", "json"], ["-o", "json", "status"]),
    (["stop", "scheduler", "-H", "m1", "--no-wait"], ["-H", "m1", "stop", "scheduler", "--no-wait"]),
    (["status", "--output=json", "etcd"], ["--output=json", "status", "etcd"]),
    (["status", "-ojson"], ["-ojson", "status"]),
    (["-o", "json", "history", "-l", "5", "--state-dir", "/s"],
     ["-o", "json", "--state-dir", "/s", "history", "-l", "5"]),
    (["scheduler", "add", "x", "-o", "json", "--timeout", "5"],
     ["-o", "json", "scheduler", "add", "x", "--timeout", "5"]),
    (["stop", "scheduler", "-H", "a", "-H", "b", "--accept-new-host-key"],
     ["-H", "a", "-H", "b", "--accept-new-host-key", "stop", "scheduler"]),
    # a value of the command's own option stays its value, even when it looks like a global option
    (["stop", "scheduler", "--reason", "-o"], ["stop", "scheduler", "--reason", "-o"]),
    # nothing after a literal --
    (["stop", "-o", "json", "--", "-H", "x"], ["-o", "json", "stop", "--", "-H", "x"]),
    # the command's own spelling wins: `lab up --node-name` is the lab's, not the global one
    (["lab", "up", "--node-name", "n1", "-o", "json"], ["-o", "json", "lab", "up", "--node-name", "n1"]),
    # unknown things are left for click to report
    (["no-such-command", "-o", "json"], ["no-such-command", "-o", "json"]),
    (["--bogus", "status", "-o", "json"], ["--bogus", "status", "-o", "json"]),
])
def test_hoisting(argv: List[str], want: List[str]) -> None:
    assert hoist_global_options(argv)[0] == want


def test_global_options_after_the_command_word(node: NodeDirs) -> None:
    status = node.run("status", "-o", "json")
    assert {row["component"] for row in json.loads(status.stdout)["components"]} >= {"etcd", "kube-scheduler"}
    stopped = json.loads(node.run("stop", "scheduler", "-o", "json", "--no-wait", "--reason", "x").stdout)
    assert stopped["changed"] and stopped["results"][0]["component"] == "kube-scheduler"
    history = json.loads(node.run("history", "--output=json", "-l", "1").stdout)["history"]
    assert [(r["action"], r["reason"]) for r in history] == [("stop", "x")]
    # a wrong value is still click's usage error, naming the option
    wrong = node.run("status", "-o", "xml", rc=2)
    assert "'xml' is not one of 'text', 'json', 'yaml', 'wide'" in wrong.stderr
    node.run("status", "--no-such-option", rc=2)
    assert "option -o/--output requires a value" in node.run("status", "-o", rc=2).stderr


def test_local_only_command_still_refuses_hosts_given_after_its_word(node: NodeDirs) -> None:
    refused = node.run("watch", "-H", "root@127.0.0.1:1", rc=2)
    assert "runs only on this machine" in refused.stderr


def test_help_says_so() -> None:
    proc = subprocess.run(CLI + ["--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "before or after the command word" in text and "cpctl status -o json" in text


def test_bare_cpctl_prints_the_help_on_stdout() -> None:
    proc = subprocess.run(CLI, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("Usage: cpctl [OPTIONS] COMMAND [ARGS]...")
    helped = subprocess.run(CLI + ["--help"], capture_output=True, text=True, timeout=30)
    assert proc.stdout == helped.stdout
    # only bare: global options and no command is still a usage error
    missing = subprocess.run(CLI + ["-o", "json"], capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and missing.stdout == "" and "Missing command" in missing.stderr


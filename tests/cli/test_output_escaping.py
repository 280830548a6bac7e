"""Control characters from the node never reach the terminal raw (issue #16 item 9).

File names, pod names, reasons and ``parked_by`` come from files anyone with root on the master
could have written. A newline in them must not fake a ``status`` row, an ESC sequence must not
recolour or retitle the terminal: text output escapes them; JSON keeps the exact values.
"""

from __future__ import annotations

import json
import os

from tests.coreutil import NodeDirs

EVIL_FILE = "evil\x1b[31m\nkube-fake  running  fake.yaml.yaml"
EVIL_REASON = "maintenance\x1b]0;pwned\x07\nkube-fake  parked"


def test_status_and_history_escape_what_the_node_says(node: NodeDirs) -> None:
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        pod = handle.read()
    with open(os.path.join(node.manifests, EVIL_FILE), "wb") as handle:
        handle.write(pod.replace(b"name: kube-scheduler\n", b"name: other\n"))
    node.run("stop", "etcd", "--reason", "plain")
    meta = os.path.join(node.state, "meta", "etcd.yaml.json")
    with open(meta) as handle:
        data = json.load(handle)
    data["reason"], data["parked_by"] = EVIL_REASON, "root\x1b[2J"
    with open(meta, "w") as handle:
        json.dump(data, handle)

    text = node.run("status").stdout + node.run("history").stdout
    assert "\x1b" not in text and "\x07" not in text
    assert not [line for line in text.splitlines() if line.startswith("kube-fake")], text
    assert "\\x1b[31m\\x0akube-fake" in text and "maintenance\\x1b]0;pwned\\x07\\x0akube-fake" in text

    exact = json.loads(node.run("-o", "json", "status").stdout)
    rows = {row["file"]: row for row in exact["components"]}
    assert EVIL_FILE in rows and rows["etcd.yaml"]["reason"] == EVIL_REASON


def test_an_error_quoting_a_hostile_name_is_still_one_line(node: NodeDirs) -> None:
    """Two files define the scheduler: the refusal names both, one of them hostile."""
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as src:
        data = src.read()
    with open(os.path.join(node.manifests, EVIL_FILE), "wb") as copy:
        copy.write(data)
    proc = node.run("stop", "scheduler", rc=4)        # run() also checks: exactly one stderr line
    assert "\x1b" not in proc.stderr and "matches several files" in proc.stderr
    assert "evil\\x1b[31m\\x0akube-fake" in proc.stderr


def test_log_lines_and_other_blocks_keep_their_tabs_and_nothing_else() -> None:
    """A Go stack trace indents with tabs: in log lines (and diffs, manifests) a tab is layout.
    In a table cell it could shift columns, so there it is escaped like every control character."""
    from cpctl.cli.context import printable
    data = {"lines": ["goroutine 1 [running]:", "\tmain.go:12 +0x1d\x1b[2J", "a\x0bb"],
            "diff": "-\told\n+\tnew\x07", "pod": "a\tb", "reason": "x\ny"}
    assert printable(data) == {"lines": ["goroutine 1 [running]:", "\tmain.go:12 +0x1d\\x1b[2J", "a\\x0bb"],
                               "diff": "-\told\n+\tnew\\x07", "pod": "a\\x09b", "reason": "x\\x0ay"}

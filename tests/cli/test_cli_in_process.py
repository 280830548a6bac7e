"""The tests' in-process runner (``tests/coreutil.run_in_process``) is the CLI as a process would
run it: the same exit code and the same output for a success, a refusal, a usage error and a JSON
error - so the unit tier may run commands without starting an interpreter each time."""

from __future__ import annotations

import re
from typing import Any, Tuple

import pytest

from tests.coreutil import NodeDirs


def _masked(text: str) -> str:
    """Output with numbers masked (times, durations and pids differ between two runs)."""
    return re.sub(r"\d+(\.\d+)?", "N", text)


@pytest.mark.parametrize("args, rc", [
    (("status",), 0),
    (("-o", "json", "status", "scheduler"), 0),
    (("stop", "no-such-component"), 3),
    (("-o", "json", "stop", "no-such-component"), 3),
    (("stop", "--until"), 2),
    (("flags", "scheduler"), 0),
    (("revisions", "scheduler"), 0),
    (("rollback", "scheduler"), 3),
])
def test_in_process_and_process_agree(tmp_path: Any, args: Tuple[str, ...], rc: int) -> None:
    inside = NodeDirs(str(tmp_path / "a")).run(*args, rc=rc)
    outside = NodeDirs(str(tmp_path / "b")).run(*args, rc=rc, process=True)
    assert _masked(inside.stdout.replace(str(tmp_path / "a"), "ROOT")) == \
        _masked(outside.stdout.replace(str(tmp_path / "b"), "ROOT"))
    assert _masked(inside.stderr.replace(str(tmp_path / "a"), "ROOT")) == \
        _masked(outside.stderr.replace(str(tmp_path / "b"), "ROOT"))


def test_a_change_in_process_leaves_what_the_process_leaves(tmp_path: Any) -> None:
    inside, outside = NodeDirs(str(tmp_path / "a")), NodeDirs(str(tmp_path / "b"))
    inside.run("stop", "scheduler", "--reason", "test")
    outside.run("stop", "scheduler", "--reason", "test", process=True)
    assert (inside.present(), inside.parked_files()) == (outside.present(), outside.parked_files())
    assert [r["action"] for r in inside.history()] == [r["action"] for r in outside.history()] == ["stop"]


def test_runs_from_two_threads_each_see_their_own_node(tmp_path: Any) -> None:
    """A run swaps the process's environment and streams: runs from two threads (the crash test's
    lanes) take turns, so each changes and reports only its own node."""
    import json
    import threading
    nodes = [NodeDirs(str(tmp_path / name)) for name in ("a", "b")]
    errors: list = []

    def work(node: NodeDirs) -> None:
        try:
            for _ in range(5):
                assert node.parked + "/" in node.run("-o", "json", "stop", "scheduler").stdout
                node.run("start", "scheduler")
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for node in nodes:
        with open(node.history_file) as handle:
            records = [json.loads(line) for line in handle]
        assert [r["action"] for r in records] == ["stop", "start"] * 5

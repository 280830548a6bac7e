"""``cpctl edit`` under hostile editors (issue #23 item 1): every run ends within a bounded number of
editor rounds, keeps the private copy on every failure and says where it is, exits with the
documented code, and shows the ``--yes`` diff as a real multi-line diff."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import time
from typing import Any, List, Optional

import pytest

from cpctl.cli.commands.edits import EDIT_ROUNDS
from tests.coreutil import NodeDirs, check_result

# Each round writes a different invalid manifest (a duplicated flag with a new value) and counts.
CHANGING_INVALID = """#!%s
import sys
path, count_file = sys.argv[1], %r
try:
    count = int(open(count_file).read())
except FileNotFoundError:
    count = 0
open(count_file, "w").write(str(count + 1))
text = open(path).read()
text = text.replace("- --leader-elect=true\\n", "- --leader-elect=true\\n    - --v=%%d\\n    - --v=%%d\\n"
                    %% (count, count + 1), 1)
open(path, "w").write(text)
"""


def _script(tmp_path: Any, name: str, body: str) -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as handle:
        handle.write(body)
    os.chmod(path, 0o755)
    return path


def _copy_of(stderr: str) -> str:
    match = re.search(r"your edited copy is at (\S+)", stderr)
    assert match, stderr
    return match.group(1)


def _rounds(tmp_path: Any) -> int:
    with open(os.path.join(str(tmp_path), "count")) as handle:
        return int(handle.read())


def _edit(node: NodeDirs, editor: str, *args: str, rc: Optional[int], timeout: float = 60
          ) -> subprocess.CompletedProcess:
    proc = subprocess.run(node.argv("edit", "scheduler", "--yes", *args), env=node.env(EDITOR=editor, VISUAL=""),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    check_result(proc, rc)
    return proc


def _unchanged(node: NodeDirs) -> None:
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert handle.read() == node.files["kube-scheduler.yaml"]
    assert node.history() == []


def test_changing_invalid_output_without_a_terminal_is_one_round_then_exit_4_with_the_copy(
        node: NodeDirs, tmp_path: Any) -> None:
    editor = _script(tmp_path, "editor.py", CHANGING_INVALID % (sys.executable, os.path.join(str(tmp_path), "count")))
    proc = _edit(node, editor, rc=4)
    assert _rounds(tmp_path) == 1, "no terminal: never a second round"
    assert "no terminal: one round" in proc.stderr and "--v" in proc.stderr
    copy = _copy_of(proc.stderr)
    with open(copy) as handle:
        kept = handle.read()
    assert "- --v=0\n    - --v=1\n" in kept, "the person's work is kept"
    assert kept.startswith("# cpctl: "), "the problem is written on top of the copy"
    _unchanged(node)


def test_changing_invalid_output_on_a_terminal_stops_after_the_documented_rounds(
        node: NodeDirs, tmp_path: Any) -> None:
    editor = _script(tmp_path, "editor.py", CHANGING_INVALID % (sys.executable, os.path.join(str(tmp_path), "count")))
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(node.argv("edit", "scheduler", "--yes"), env=node.env(EDITOR=editor, VISUAL=""),
                              stdin=follower, capture_output=True, text=True, timeout=60)
    finally:
        os.close(follower)
        os.close(leader)
    check_result(proc, 4)
    assert _rounds(tmp_path) == EDIT_ROUNDS == 3
    assert "still invalid after 3 editor rounds" in proc.stderr
    with open(_copy_of(proc.stderr)) as handle:
        assert "- --v=2\n    - --v=3\n" in handle.read(), "the last round's text is kept"
    _unchanged(node)


def test_an_editor_that_exits_non_zero_fails_with_7_and_keeps_the_copy(node: NodeDirs, tmp_path: Any) -> None:
    editor = _script(tmp_path, "editor.sh", "#!/bin/sh\necho '# my work' >> \"$1\"\nexit 3\n")
    proc = _edit(node, editor, rc=7)
    assert "exited with status 3" in proc.stderr
    with open(_copy_of(proc.stderr)) as handle:
        assert handle.read().endswith("# my work\n")
    _unchanged(node)


def _hanging_editor(tmp_path: Any) -> str:
    pidfile = os.path.join(str(tmp_path), "editor.pid")
    return _script(tmp_path, "editor.sh", "#!/bin/sh\necho $$ > %s\necho '# half done' >> \"$1\"\n"
                                          "exec sleep 600\n" % pidfile)


def _editor_pid(tmp_path: Any, proc: "subprocess.Popen[str]") -> int:
    pidfile = os.path.join(str(tmp_path), "editor.pid")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(pidfile) and open(pidfile).read().strip():
            return int(open(pidfile).read())
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the editor never started")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().split(")")[-1].split()[0] == "Z"


def test_an_editor_that_never_exits_is_stopped_after_the_editor_timeout(node: NodeDirs, tmp_path: Any) -> None:
    editor = _hanging_editor(tmp_path)
    proc = subprocess.Popen(node.argv("edit", "scheduler", "--yes", "--editor-timeout", "2"),
                            env=node.env(EDITOR=editor, VISUAL=""), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = _editor_pid(tmp_path, proc)
    out, err = proc.communicate(timeout=60)
    check_result(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 6)
    assert "--editor-timeout" in err and _gone(pid), "the editor was stopped"
    with open(_copy_of(err)) as handle:
        assert "# half done" in handle.read()
    _unchanged(node)


def test_an_editor_killed_from_outside_ends_the_edit_with_7(node: NodeDirs, tmp_path: Any) -> None:
    editor = _hanging_editor(tmp_path)
    proc = subprocess.Popen(node.argv("edit", "scheduler", "--yes"), env=node.env(EDITOR=editor, VISUAL=""),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.kill(_editor_pid(tmp_path, proc), signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    check_result(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 7)
    assert "killed by signal 9" in err
    assert os.path.exists(_copy_of(err))
    _unchanged(node)


def test_sigterm_while_the_editor_runs_stops_it_and_keeps_the_copy(node: NodeDirs, tmp_path: Any) -> None:
    editor = _hanging_editor(tmp_path)
    proc = subprocess.Popen(node.argv("edit", "scheduler", "--yes"), env=node.env(EDITOR=editor, VISUAL=""),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = _editor_pid(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    check_result(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 130)
    assert _gone(pid), "the editor does not outlive cpctl"
    with open(_copy_of(err)) as handle:
        assert "# half done" in handle.read()
    _unchanged(node)


ADD_FLAG_AND_ESC = """#!%s
import sys
text = open(sys.argv[1], encoding="utf-8").read()
text = text.replace("- --leader-elect=true\\n", "- --leader-elect=true\\n    - --v=4\\n", 1)
open(sys.argv[1], "w", encoding="utf-8").write(text + "# evil \\u202etxt.exe\\n")
"""


def test_the_yes_diff_is_a_real_diff_without_a_terminal(node: NodeDirs, tmp_path: Any) -> None:
    editor = _script(tmp_path, "editor.py", ADD_FLAG_AND_ESC % sys.executable)
    proc = _edit(node, editor, rc=0)
    lines: List[str] = proc.stderr.splitlines()
    assert "\\x0a" not in proc.stderr, "newlines are newlines"
    assert lines[:2] == ["--- a/kube-scheduler.yaml", "+++ b/kube-scheduler.yaml"]
    assert "+    - --v=4" in lines
    assert "+# evil \\u202etxt.exe" in lines, "a real control (bidi) character is escaped, in its own line"
    assert "\u202e" not in proc.stderr


# The first round breaks the YAML (an unclosed flow sequence), the second puts the copy's text back
# with one valid change and records what it saw on top of the copy.
BROKEN_THEN_FIXED = """#!%s
import sys
path, count_file, seen = sys.argv[1], %r, %r
try:
    count = int(open(count_file).read())
except FileNotFoundError:
    count = 0
open(count_file, "w").write(str(count + 1))
text = open(path).read()
open(seen, "a").write(text + "\\n=====\\n")
if count == 0:
    text = text.replace("- --leader-elect=true\\n", "- --leader-elect=true\\n    - [unclosed\\n", 1)
else:
    text = "".join(line for line in text.splitlines(True) if not line.startswith("# cpctl: "))
    text = text.replace("    - [unclosed\\n", "    - --v=3\\n", 1)
open(path, "w").write(text)
"""


def test_a_yaml_syntax_error_in_apply_is_exit_4_with_line_and_column(node: NodeDirs) -> None:
    """Issue 33 item 6: a manifest that does not parse is one clear refusal naming its line and column
    (it was exit 70, 'internal error', with \\x0a-escaped text), nothing changed."""
    for broken, where in ((b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  bad: [unclosed\n", "line 6, column 1"),
                          (b"apiVersion: v1\nkind: Pod\nmetadata:\n\tname: x\n", "line 4, column 1")):
        proc = subprocess.run(node.argv("apply", "scheduler", "-f", "-"), input=broken.decode(), env=node.env(),
                              capture_output=True, text=True, timeout=60)
        check_result(proc, 4)
        assert "invalid YAML at %s" % where in proc.stderr and "nothing changed" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "\\x0a" not in proc.stderr
    _unchanged(node)


def test_edit_reopens_the_editor_on_a_yaml_syntax_error_with_the_error_on_top(node: NodeDirs, tmp_path: Any) -> None:
    seen = os.path.join(str(tmp_path), "seen")
    editor = _script(tmp_path, "editor.py", BROKEN_THEN_FIXED % (sys.executable, os.path.join(str(tmp_path), "count"),
                                                                 seen))
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(node.argv("edit", "scheduler", "--yes"), env=node.env(EDITOR=editor, VISUAL=""),
                              stdin=follower, capture_output=True, text=True, timeout=60)
    finally:
        os.close(follower)
        os.close(leader)
    check_result(proc, 0)
    assert _rounds(tmp_path) == 2
    with open(seen) as handle:
        second = handle.read().split("=====\n")[1]
    assert second.startswith("# cpctl: ") and "invalid YAML at line" in second and ", column " in second, second
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        assert b"    - --v=3\n" in handle.read()


class _Interrupted(Exception):
    """What the test's SIGTERM handler raises, as cpctl's own handler interrupts the command."""


def test_a_sigterm_while_the_editor_is_being_started_still_stops_it(tmp_path: Any, monkeypatch: Any) -> None:
    """A SIGTERM that lands while ``subprocess.Popen`` is still returning (the editor already forked)
    used to escape before cpctl held the editor: cpctl said "interrupted" and the editor outlived it,
    keeping the terminal (seen once at load 9, the test above hung on its pipes). The signal now waits
    until cpctl holds the editor, then stops it."""
    from cpctl.cli.commands import edits
    started: List["subprocess.Popen[bytes]"] = []
    real_popen = subprocess.Popen

    def popen_then_sigterm(argv: List[str], *args: Any, **kwargs: Any) -> "subprocess.Popen[bytes]":
        child = real_popen(["sleep", "600"], *args, **kwargs)
        started.append(child)
        os.kill(os.getpid(), signal.SIGTERM)        # delivered before Popen's caller holds the child
        return child

    def interrupt(_signum: int, _frame: Any) -> None:
        raise _Interrupted()

    monkeypatch.setattr(edits.subprocess, "Popen", popen_then_sigterm)
    monkeypatch.setenv("VISUAL", "true")
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with pytest.raises(_Interrupted):
            edits._run_editor(str(tmp_path / "copy.yaml"))
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in started:
            if child.poll() is None:
                child.kill()
                child.wait()
                raise AssertionError("the editor outlived the interrupted cpctl")
    assert started and started[0].returncode == -signal.SIGTERM

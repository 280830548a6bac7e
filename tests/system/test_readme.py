"""The README's lab walkthrough runs as written, and every link of the docs resolves.

Convention for commands a test runs (the README's "Try it yourself in the lab"): a fenced
```` ```console ```` block right after a line ``<!-- lab-tested -->``. In such a block

* a line starting with ``$ `` is a command (a trailing ``\\`` continues it on the next line); it
  runs in bash, in order with every other marked block of the README, against ONE fresh lab
  (``tests.labfixture.lab_factory``) with the lab's environment, ``HOME`` in a temp dir and
  ``cpctl`` meaning ``python -m cpctl`` of this interpreter;
* ``eval "$(cpctl lab up ...)"`` is not run: the lab the test started already is "up" and its
  environment is the one every command gets (``cpctl lab down`` belongs outside marked blocks);
* the lines after a command, up to the next ``$ `` line, are what it prints (stdout and stderr
  together). Each must appear as a whole line of the output, compared with runs of whitespace
  collapsed (column widths vary); ``...`` inside a line matches any text, a line that is only
  ``...`` stands for lines the test does not check;
* a command must exit 0, unless the next line is ``$ echo $?``: then the number below it is the
  exit code it must have.

Commands for real masters (sudo, ssh, ``-H``) are never marked; a test checks that too.

Links: in README.md, docs/*.md and examples/**/*.md, every relative link points at a file or
directory that exists, and every ``#anchor`` at a heading (GitHub's slugs) of the target file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

from tests.labfixture import KUBECTL

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARKER = "<!-- lab-tested -->"
ELLIPSIS = "..."
LAB_UP = re.compile(r'^(eval\s+"\$\(cpctl lab up\b[^)]*\)"|cpctl lab up\b.*)$')
REAL_MASTER_ONLY = re.compile(r"(^|\s)(sudo|ssh|scp)\s|\s(-H|--host|-i|--inventory)(\s|=)")
COMMAND_TIMEOUT = 120.0
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
EXTERNAL = ("http://", "https://", "mailto:")


# --------------------------------------------------------------------------- the marked blocks


@dataclass
class Step:
    """One ``$ `` command of a marked block, what it must print and the exit code it must have."""

    command: str
    line_no: int
    expected_rc: int = 0
    expected_lines: List[str] = field(default_factory=list)


def marked_blocks(text: str, marker: str = MARKER, language: str = "console") -> List[Tuple[int, List[str]]]:
    """(line number of the first body line, body lines) of each fenced block right after ``marker``.

    A marker not followed (blank lines aside) by a ```` ```language ```` fence is an error: the
    README would claim a test that does not happen."""
    lines = text.splitlines()
    blocks = []
    for index, line in enumerate(lines):
        if line.strip() != marker:
            continue
        start = index + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        assert start < len(lines) and lines[start].strip() == "```" + language, (
            "line %d: %s must be followed by a ```%s block" % (index + 1, marker, language))
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), "line %d: unterminated block" % (start + 1)
        blocks.append((start + 2, lines[start + 1:end]))
    return blocks


def steps_of(first_line_no: int, body: List[str]) -> List[Step]:
    """The commands of one console block, with their shown output and exit codes."""
    steps: List[Step] = []
    pending: Optional[Step] = None
    awaiting_rc: Optional[Step] = None
    for offset, raw in enumerate(body):
        line_no = first_line_no + offset
        if pending is not None:                       # a continued command line
            pending.command += "\n" + raw
            if not raw.rstrip().endswith("\\"):
                pending = None
            continue
        if raw.startswith("$ "):
            command = raw[2:]
            if command.strip() == "echo $?":
                assert steps, "line %d: echo $? before any command" % line_no
                awaiting_rc = steps[-1]
                continue
            awaiting_rc = None
            steps.append(Step(command, line_no))
            if command.rstrip().endswith("\\"):
                pending = steps[-1]
            continue
        if awaiting_rc is not None:
            assert raw.strip().isdigit(), "line %d: echo $? must be followed by the exit code" % line_no
            awaiting_rc.expected_rc = int(raw.strip())
            awaiting_rc = None
            continue
        assert steps, "line %d: output before any command" % line_no
        if raw.strip():
            steps[-1].expected_lines.append(raw)
    return steps


def readme_steps(text: str) -> List[Step]:
    """Every marked command of the README, in order."""
    return [step for first, body in marked_blocks(text) for step in steps_of(first, body)]


def normalized(line: str) -> str:
    """``line`` with runs of whitespace collapsed and the ends stripped (column widths vary)."""
    return " ".join(line.split())


def line_pattern(expected: str) -> re.Pattern[str]:
    """A whole-line pattern for a shown output line: ``...`` matches any text."""
    parts = [re.escape(part) for part in normalized(expected).split(ELLIPSIS)]
    return re.compile(".*".join(parts))


def missing_lines(expected: List[str], output: str) -> List[str]:
    """The shown lines (``...``-only lines aside) that are not a whole line of ``output``."""
    got = [normalized(line) for line in output.splitlines()]
    return [line for line in expected if line.strip() != ELLIPSIS
            and not any(line_pattern(line).fullmatch(candidate) for candidate in got)]


# --------------------------------------------------------------------------- running them


def lab_shell_env(handle: Any, home: Path) -> Dict[str, str]:
    """This process's environment without cpctl/kubectl settings, plus the lab's."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("CPCTL_") and key != "KUBECONFIG"}
    env.update(handle.env)
    # no keeper left behind by a walkthrough's -H command (the default keeps connections 60 s)
    env.update(HOME=str(home), README_PYTHON=sys.executable, CPCTL_PERSIST="0",
               PATH=os.pathsep.join([os.path.dirname(KUBECTL), env.get("PATH", "")]))
    return env


def run_step(step: Step, env: Dict[str, str], cwd: Path) -> Tuple[int, str]:
    """Run one command in bash (``cpctl`` = this interpreter's ``python -m cpctl``): (exit code, output)."""
    script = 'cpctl() { "$README_PYTHON" -m cpctl "$@"; }\n' + step.command
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], env=env, cwd=str(cwd),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=COMMAND_TIMEOUT)
    return proc.returncode, proc.stdout


def check_step(step: Step, env: Dict[str, str], cwd: Path) -> Optional[str]:
    """None when ``step`` behaves as the README shows, else what differs."""
    if LAB_UP.match(step.command.strip()):
        return None                                   # the test's lab is up; env holds its exports
    rc, output = run_step(step, env, cwd)
    problems = []
    if rc != step.expected_rc:
        problems.append("exit %d, the README says %d" % (rc, step.expected_rc))
    missing = missing_lines(step.expected_lines, output)
    if missing:
        problems.append("not in the output: %r" % missing)
    if not problems:
        return None
    return "README.md line %d: $ %s\n  %s\n  output:\n%s" % (step.line_no, step.command, "; ".join(problems),
                                                         "\n".join("    " + line for line in output.splitlines()))


@pytest.mark.timeout(600)
def test_the_readme_lab_walkthrough_runs_as_written(lab_factory: Callable[..., Any], tmp_path: Path,
                                                    monkeypatch: Any) -> None:
    if not os.path.exists(KUBECTL):
        pytest.skip("kubectl is not installed (Debian: kubernetes-client); the walkthrough uses it")
    steps = readme_steps(README.read_text(encoding="utf-8"))
    cpctl_commands = [s for s in steps if s.command.startswith("cpctl ") and not LAB_UP.match(s.command)]
    assert len(cpctl_commands) >= 10, "the README's lab walkthrough lost its marked blocks"
    handle = lab_factory()
    home = tmp_path / "home"
    home.mkdir()
    env = lab_shell_env(handle, home)
    failures = []
    for step in steps:
        problem = check_step(step, env, tmp_path)
        if problem:
            failures.append(problem)
    assert not failures, "\n\n".join(failures)


def test_marked_blocks_are_lab_commands_only() -> None:
    """Nothing for a real master (sudo, ssh, -H/-i) in a marked block, and no ``cpctl lab down``
    (the test owns the lab); every marked block has a command."""
    text = README.read_text(encoding="utf-8")
    blocks = marked_blocks(text)
    assert blocks, "no %s block in the README" % MARKER
    for first, body in blocks:
        steps = steps_of(first, body)
        assert steps, "README.md line %d: a marked block without a $ command" % first
        for step in steps:
            assert not REAL_MASTER_ONLY.search(" " + step.command), "line %d: %s" % (step.line_no, step.command)
            assert "cpctl lab down" not in step.command, "line %d: the test owns the lab" % step.line_no


def test_the_block_reader_and_the_line_matcher() -> None:
    """The rules above, on a small example: exit codes from ``echo $?``, continuations,
    ``...`` lines skipped, ``...`` inside a line matching any text and nothing else."""
    text = "\n".join([
        "intro", MARKER, "", "```console",
        "$ cpctl stop scheduler \\", "    --reason x",
        "kube-scheduler: stopped ... after ...",
        "...",
        "$ cpctl bind p --node n",
        "$ echo $?", "10",
        "```", "```console", "$ not marked", "```"])
    (first, body), = marked_blocks(text)
    stop, bind = steps_of(first, body)
    assert stop.command == "cpctl stop scheduler \\\n    --reason x" and stop.expected_rc == 0
    assert stop.expected_lines == ["kube-scheduler: stopped ... after ...", "..."]
    assert bind.command == "cpctl bind p --node n" and bind.expected_rc == 10 and bind.expected_lines == []
    output = "cpctl: waiting\nkube-scheduler:   stopped (parked) - gone after 0.3s\n"
    assert missing_lines(stop.expected_lines, output) == []
    assert missing_lines(["kube-scheduler: started ..."], output) == ["kube-scheduler: started ..."]
    assert missing_lines(["stopped ..."], output) == ["stopped ..."]        # whole lines only
    with pytest.raises(AssertionError):
        marked_blocks(MARKER + "\n```sh\nls\n```\n")


# --------------------------------------------------------------------------- the exit codes


def table_rows_after(text: str, heading: str) -> List[List[str]]:
    """The cells of the first Markdown table after the line ``heading`` (header and rule skipped)."""
    lines = text.splitlines()
    index = lines.index(heading) + 1
    while not lines[index].startswith("|"):
        index += 1
    rows = []
    while index < len(lines) and lines[index].startswith("|"):
        rows.append([cell.strip() for cell in lines[index].strip("|").split("|")])
        index += 1
    return rows[2:]


def test_the_one_exit_code_table_is_cpctls() -> None:
    """README "Exit codes" lists exactly cpctl's codes (cpctl/errors.py), and no other page of the
    docs has an exit-code table of its own: they link to this one."""
    from cpctl.errors import ExitCode
    text = README.read_text(encoding="utf-8")
    codes = [int(row[0]) for row in table_rows_after(text, "### Exit codes")]
    assert codes == sorted(int(code) for code in ExitCode)
    for path in doc_files():
        tables = [line for line in prose_lines(path.read_text(encoding="utf-8"))
                  if re.match(r"^\|\s*code\s*\|", line)]
        assert len(tables) == (1 if path == README else 0), "%s: %d exit-code tables" % (path.name, len(tables))


def test_each_exit_code_row_names_the_code_s_constant() -> None:
    """Each row's ``reason`` is the name of cpctl's constant for that code (what ``-o json`` errors
    carry), in the constants' order."""
    from cpctl.errors import ExitCode
    rows = table_rows_after(README.read_text(encoding="utf-8"), "### Exit codes")
    assert [(int(row[0]), row[1].strip("`")) for row in rows] == [(int(c), c.name.lower()) for c in sorted(ExitCode)]


# (cpctl arguments, a phrase of the README row that documents the situation): the run must exit
# with that row's code.
DOCUMENTED_SITUATIONS = [
    (["status", "schedular"], "an unknown component"),
    (["status", "../kube-scheduler"], "invalid component name"),
    (["stop", "scheduler", "--for", "5x"], "bad duration"),
    (["revisions", "scheduler", "7"], "revision not found"),
    (["logs", "etcd"], "`logs`: nothing to show (parked"),
]


def test_documented_situations_exit_with_their_row_s_code(tmp_path: Path) -> None:
    """The situations the table names, run for real on a node in a tmp dir: each exits with the
    code of the row that names it (an unknown component is 3, not 2)."""
    from tests.coreutil import NodeDirs, check_result
    rows = table_rows_after(README.read_text(encoding="utf-8"), "### Exit codes")
    node = NodeDirs(str(tmp_path))
    node.run("stop", "etcd", "--no-wait")
    for args, phrase in DOCUMENTED_SITUATIONS:
        [code] = [int(row[0]) for row in rows if phrase in row[2]]
        proc = subprocess.run(node.argv(*args), env=node.env(), capture_output=True, text=True, timeout=60)
        check_result(proc, code)


# --------------------------------------------------------------------------- links


def doc_files() -> List[Path]:
    """The Markdown files whose links must resolve."""
    return [README] + sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "examples").rglob("*.md"))


def prose_lines(text: str) -> List[str]:
    """The lines outside fenced code blocks, inline code spans removed."""
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append(CODE_SPAN.sub("", line))
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation but ``-`` and ``_`` dropped,
    spaces turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # links: their text
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors_of(path: Path) -> Set[str]:
    """Every anchor a link may use in ``path``: heading slugs (``-1``, ``-2`` for repeats) and
    explicit ``<a id|name="...">``."""
    seen: Dict[str, int] = {}
    anchors: Set[str] = set()
    fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = github_slug(heading.group(1))
            anchors.add(slug if slug not in seen else "%s-%d" % (slug, seen[slug]))
            seen[slug] = seen.get(slug, 0) + 1
        anchors.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return anchors


def broken_links(path: Path, root: Path = REPO) -> List[str]:
    """The relative links of ``path`` that leave ``root`` or whose file or anchor does not exist."""
    broken = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if resolved != root.resolve() and root.resolve() not in resolved.parents:
                broken.append("%s: %s (outside the repository)" % (path.name, target))
            elif not resolved.exists():
                broken.append("%s: %s (no such file)" % (path.name, target))
            elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
                broken.append("%s: %s (no such heading)" % (path.name, target))
    return broken


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_checker_finds_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Exit codes\n## What each command does with `-H`/`-i`\n# Exit codes\n")
    page.write_text("[ok](other.md#exit-codes) [ok2](other.md#exit-codes-1) [ok3](other.md#what-each-command-"
                    "does-with--h-i) [web](https://example.com/x)\n`[code](nowhere.md)`\n"
                    "[gone](nowhere.md) [bad anchor](other.md#nope) [self](#nope)\n"
                    "[up](../elsewhere.md)\n")
    assert broken_links(page, root=tmp_path) == ["page.md: nowhere.md (no such file)",
                                                 "page.md: other.md#nope (no such heading)",
                                                 "page.md: #nope (no such heading)",
                                                 "page.md: ../elsewhere.md (outside the repository)"]

"""Issue 48: ``cpctl lab demo`` ends with what to try next. From an installed wheel there is no docs/
or examples/ (and maybe no network), so that text names no file and no URL, only commands - each of
them one cpctl really has, with options it really takes."""

from __future__ import annotations

import os
import re
import shlex

from cpctl_lab.demo import NEXT_STEPS
from tests.coreutil import CLI, run_in_process


def test_the_next_steps_name_no_file_or_url_a_wheel_user_lacks() -> None:
    assert not re.search(r"https?://|\.md\b|\bdocs/|\bexamples/|README", NEXT_STEPS), NEXT_STEPS
    assert "cpctl COMMAND --help" in NEXT_STEPS


def _cpctl_commands() -> list:
    """Each ``cpctl ...`` command of the text as argv (a comment, a ``&&`` and ``eval "$(...)"`` taken apart)."""
    found = []
    for line in NEXT_STEPS.splitlines():
        code = line.split("  #")[0].strip()
        code = re.sub(r'^eval "\$\((.*)\)"$', r"\1", code)
        for part in code.split("&&"):
            words = shlex.split(part)
            if words[:1] == ["cpctl"] and words[1:2] != ["COMMAND"]:
                found.append(words[1:])
    return found


def test_every_command_in_the_next_steps_parses_as_cpctl_parses_it() -> None:
    """Each command with ``--help`` added: cpctl parses the whole line first (an unknown command, option
    or a missing value is exit 2), then shows the help (exit 0)."""
    commands = _cpctl_commands()
    assert len(commands) >= 6 and ["lab", "down"] in commands, commands
    for argv in commands:
        proc = run_in_process(CLI + argv + ["--help"], dict(os.environ))
        assert proc.returncode == 0 and proc.stdout.startswith("Usage: "), (argv, proc.stdout, proc.stderr)

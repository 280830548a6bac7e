"""``--help`` texts that are true (issue 48): the one-line summary ``cpctl --help`` lists for each
command (``cli/registry.py``, so that the listing imports no command module) is where that
command's own help begins; and the help of ``--census`` says what it counts from (etcd and
``/readyz``, docs/remote.md), not mirror pods."""

from __future__ import annotations

import importlib
import re

import click
import pytest
from click.testing import CliRunner

from cpctl.cli import registry
from cpctl.cli.main import main

TOP = [path for path, spec in registry.COMMANDS.items() if spec.entry]


def own_help(path: str) -> str:
    """The first paragraph of the command's own help, whitespace folded."""
    module, attr = registry.COMMANDS[path].entry.split(":")
    command = getattr(importlib.import_module(module), attr)
    assert isinstance(command, click.Command)
    return re.sub(r"\s+", " ", (command.help or "").strip().split("\n\n")[0]).strip()


@pytest.mark.parametrize("path", TOP)
def test_the_listed_summary_is_where_the_commands_own_help_begins(path: str) -> None:
    """The summary is the help's first sentence, or its beginning up to a clause's end ([.;:,])."""
    summary, help_text = registry.COMMANDS[path].summary.rstrip("."), own_help(path)
    assert help_text.startswith(summary), (path, summary, help_text)
    rest = help_text[len(summary):]
    assert rest == "" or rest[0] in ".;:,", (path, rest)


def test_cpctl_help_lists_the_registry_summaries() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=400)
    assert result.exit_code == 0
    for path in TOP:
        assert re.search(r"\n  %s +%s\n" % (re.escape(path), re.escape(registry.COMMANDS[path].summary)),
                         result.output), path


def test_census_help_says_what_it_counts_from() -> None:
    (census,) = [p for p in main.params if p.name == "census"]
    text = census.help or ""
    assert "/readyz" in text and "member list" in text and "/health" in text
    assert "never mirror pods" in text and "(mirror pods)" not in text

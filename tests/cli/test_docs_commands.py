"""Every cpctl command the docs show exists, with the options it is shown with (issue 48 'Done when':
the tasks run from the docs "without an error that names a non-existent command").

tests/system/test_examples.py parses the two runbooks of examples/ with cpctl's click command
line; this does the same for every page an operator follows - README.md, docs/*.md and
examples/**/*.md:

* a ``cpctl`` line of a shell block (```` ```sh ````, ``bash``, ``console``) parses as cpctl
  parses it (global options after the command word hoisted as cpctl hoists them; a file a
  page's earlier step writes need not exist here), and every option it uses is in that
  command's ``--help`` (a pass-through to a real tool, ``cpctl lab etcdctl member list -w
  table``, has that tool's options);
* a ```cpctl ...``` code span in the prose names commands that exist (``a/b`` alternatives each)
  and options those commands or cpctl itself take; placeholders (``COMPONENT``, ``N``, ``...``)
  are not judged.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from pathlib import Path
from typing import Any, Iterator, List, Optional, Set

import click
import pytest

from cpctl.cli.main import hoist_global_options, main
from tests.system.test_examples import Command, commands_in, help_text, parse_cli

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "examples").rglob("*.md"))
#: code spans that show a mistake on purpose, and what they show
ON_PURPOSE = {"cpctl stpo": "docs/commands.md: the error a misspelt command gets"}
SPAN = re.compile(r"(?<!`)`(cpctl\s[^`]+)`(?!`)")
FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


@contextlib.contextmanager
def files_need_not_exist() -> Iterator[None]:
    """Every ``click.Path(exists=True)`` takes a path that does not exist, for the duration: a page's
    ``snapshot-restore /tmp/snap.db`` names the file its step before wrote."""
    original = click.Path.convert

    def convert(self: click.Path, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if self.exists and isinstance(value, str) and not os.path.lexists(value):
            return self.coerce_path_result(value)
        return original(self, value, param, ctx)
    click.Path.convert = convert          # type: ignore[method-assign]
    try:
        yield
    finally:
        click.Path.convert = original     # type: ignore[method-assign]


def passes_through(command: click.Command) -> bool:
    """A stand-in that hands its command line to a real tool (``cpctl lab etcdctl member list``)."""
    return bool(command.context_settings.get("ignore_unknown_options"))


def resolve(path: List[str]) -> click.Command:
    """The click command ``cpctl PATH`` runs."""
    command: click.Command = main
    ctx = click.Context(main, info_name="cpctl")
    for word in path:
        assert isinstance(command, click.Group), path
        sub = command.get_command(ctx, word)
        assert sub is not None, path
        command, ctx = sub, click.Context(sub, info_name=word, parent=ctx)
    return command


def check_block_command(command: Command) -> Optional[str]:
    """None when cpctl takes ``command`` as written, else why not."""
    argv, _ = hoist_global_options([word for word in command.argv if word != "..."])     # "more flags"
    try:
        with files_need_not_exist():
            if not any(not word.startswith("-") for word in argv):        # `cpctl --version`
                with pytest.raises(click.exceptions.Exit):
                    main.make_context("cpctl", list(argv))
                return None
            levels = parse_cli(argv)
    except (click.ClickException, AssertionError) as exc:
        return exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    for path, options in levels:
        if passes_through(resolve(path)):          # a real tool's command line, its options
            continue
        text = help_text(list(path))
        missing = [o for o in sorted(set(options)) if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), text)]
        if missing:
            return "cpctl %s --help does not mention %s" % (" ".join(path), missing)
    return None


def spellings(command: click.Command, ctx: click.Context) -> Set[str]:
    names = set(ctx.help_option_names)
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            names.update(param.opts + param.secondary_opts)
    return names


def takes_value(command: click.Command, ctx: click.Context, name: str) -> bool:
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and name in param.opts:
            return not (param.is_flag or param.count)
    return False


def span_words(text: str) -> List[str]:
    """The words of a code span, its placeholders' decoration gone (``[--dir DIR]``, ``yaml\\|ini``)."""
    words = shlex.split(text.replace("\\|", "|").replace("[", " ").replace("]", " "), comments=False)
    return [w for w in words if w != "..." and not w.startswith(("<", "{"))]


#: a command word as cpctl spells its commands; anything else in that place (``COMMAND``, ``lab:``,
#: ``USER@HOST``) is a placeholder or quoted output, not a command the span names
COMMAND_WORD = re.compile(r"^[a-z][a-z0-9-]*$")


def check_span(text: str) -> Optional[str]:
    """None when every command word of the span ``cpctl ...`` exists and every option name is one
    that command (or cpctl itself, before or after the command word) takes, else what is wrong.
    ``a/b`` and ``a|b`` are alternatives, each judged."""
    words, _ = hoist_global_options(span_words(text)[1:])
    command, ctx = main, click.Context(main, info_name="cpctl")
    top = spellings(main, ctx)
    index = 0
    while index < len(words):
        word = words[index]
        if word.startswith("-"):
            names = [w.split("=", 1)[0] for w in re.split(r"[/|](?=-)", word)]
            if passes_through(command):
                index += 1
                continue
            unknown = [name for name in names if name not in spellings(command, ctx) | top]
            if unknown:
                return "%s takes no option %s" % (ctx.command_path, unknown[0])
            owner = command if names[-1] in spellings(command, ctx) else main
            index += 2 if "=" not in word and takes_value(owner, ctx, names[-1]) else 1
            continue
        if isinstance(command, click.Group):
            alternatives = re.split(r"[/|]", word)
            if not all(COMMAND_WORD.match(name) for name in alternatives):
                return None
            found = []
            for alternative in alternatives:
                sub = command.get_command(ctx, alternative)
                if sub is None:
                    return "%s has no command %r" % (ctx.command_path, alternative)
                found.append((sub, click.Context(sub, info_name=alternative, parent=ctx)))
            if len(found) > 1:
                return None                       # `stop|restart etcd`: each exists; what follows is prose
            command, ctx = found[0]
        index += 1
    return None


def code_spans(path: Path) -> List[str]:
    """The ``cpctl ...`` code spans of the page's prose and tables (fenced blocks aside)."""
    prose = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [" ".join(m.group(1).split()) for m in SPAN.finditer(prose)]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_command_of_a_pages_shell_blocks_is_one_cpctl_takes(page: Path) -> None:
    problems = ["%s\n  -> %s" % (c.line, why) for c in commands_in(page) for why in [check_block_command(c)] if why]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_command_a_pages_prose_names_exists(page: Path) -> None:
    problems = ["`%s` -> %s" % (span, why) for span in code_spans(page) if span not in ON_PURPOSE
                for why in [check_span(span)] if why]
    assert not problems, "\n".join(problems)


#: issue 48's nine tasks of the first four hours -> the pages an operator follows for each
NINE_TASKS = {
    "quick start": ["README.md", "docs/lab.md"],
    "CKA walkthrough": ["README.md", "examples/cka-manual-scheduling.md"],
    "audit recipe kept through a lab upgrade": ["docs/companion-files.md", "docs/kubeadm-upgrade.md"],
    "commit-confirmed over SSH": ["docs/confirm.md", "docs/remote.md"],
    "rolling change with Ansible and -i": ["docs/ansible.md", "docs/remote.md", "docs/lab.md"],
    "certificate renewal": ["docs/certs.md", "examples/runbook-certs-renew.md"],
    "a broken API server": ["README.md", "docs/manifest-changes.md", "docs/commands.md"],
    "the etcd restore page": ["docs/etcd-restore.md"],
    "the first-hour checks": ["README.md", "docs/commands.md", "docs/watch-drift.md"],
}


def test_the_pages_of_the_nine_tasks_are_checked() -> None:
    """Every page of the nine tasks is among those checked above, and names cpctl commands."""
    for task, pages in NINE_TASKS.items():
        for name in pages:
            page = REPO / name
            assert page in PAGES, (task, name)
            assert commands_in(page) or code_spans(page), (task, name)


#: the tasks that reach the masters through an inventory, and the pages they are done from: each
#: names ``cpctl lab inventory``, so that the lab's inventory is not written by hand
INVENTORY_TASKS = {"commit-confirmed over SSH": ["docs/confirm.md", "docs/remote.md"],
                   "rolling change with Ansible and -i": ["docs/ansible.md", "docs/remote.md", "docs/lab.md"]}


def test_the_pages_that_need_an_inventory_say_how_the_lab_writes_one() -> None:
    for task, pages in INVENTORY_TASKS.items():
        for name in pages:
            spans = code_spans(REPO / name) + [" ".join(c.argv) for c in commands_in(REPO / name)]
            assert any(span.startswith(("cpctl lab inventory", "lab inventory")) for span in spans), (task, name)


def test_the_checks_catch_what_they_are_for() -> None:
    """A command that does not exist, an option nobody takes, a redirection, placeholders."""
    def block(line: str) -> Optional[str]:
        return check_block_command(Command(line, shlex.split(line)[1:], 0))
    assert block("cpctl status -o json") is None and block("cpctl --version") is None
    assert "no command 'drift'" in (block("cpctl drift") or "")
    assert "No such option" in (block("cpctl stop scheduler --dir /x") or "")
    assert block("cpctl lab etcdctl snapshot-restore /nonexistent/snap.db --data-dir /x") is None
    assert block("cpctl lab etcdctl --dir /x member list -w table") is None
    assert check_span("cpctl drift") == "cpctl has no command 'drift'"
    assert check_span("cpctl status --persist 0 -o json") is None               # global, after the word
    assert check_span("cpctl flags COMPONENT --set NAME=VALUE ...") is None
    assert check_span("cpctl lab env [--dir DIR] [--master N]") is None
    assert check_span("cpctl lab inventory --format yaml\\|ini") is None
    assert check_span("cpctl lab env --mastre 2") == "cpctl lab env takes no option --mastre"
    assert check_span("cpctl keeper status/stop") is None and check_span("cpctl keeper status/nope") is not None
    assert check_span("cpctl stpo") is not None, ON_PURPOSE
    assert check_span("cpctl logs COMPONENT [-p/--previous] [-c/--container NAME]") is None
    assert check_span("cpctl logs COMPONENT [-p/--prev]") == "cpctl logs takes no option --prev"
    assert check_span("cpctl stop\\|restart etcd") is None and check_span("cpctl COMMAND --help") is None
    assert check_span("cpctl stop|rstart etcd") == "cpctl has no command 'rstart'"
    (redirected,) = commands_in_text("```sh\ncpctl lab inventory --format ini > hosts.ini   # save it\n```\n")
    assert redirected.argv == ["lab", "inventory", "--format", "ini"]


def commands_in_text(text: str) -> List[Command]:
    import tempfile
    with tempfile.TemporaryDirectory() as directory:
        page = Path(directory) / "page.md"
        page.write_text(text)
        return commands_in(page)

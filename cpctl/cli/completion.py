"""``cpctl completion bash|zsh|fish``, and the answers to the shell's completion requests.

click's own protocol: the script a shell sources calls ``cpctl`` again with
``_CPCTL_COMPLETE=<shell>_complete`` and the words typed so far (``COMP_WORDS``, ``COMP_CWORD``);
``respond`` answers with the candidates. Only click's public completion API: ``ShellComplete``
subclasses (``get_completions``, ``source_template``) and each parameter's ``shell_complete=``
callback (``cli.completers``: COMPONENT names, revision numbers, ``-H`` names, ``flags --set`` /
``--unset`` flag names). On top of click's completion of command and option names: the global
options complete after the command word too (``cli.main.hoist_global_options`` accepts them
there), and their values as well.

A completion never prints an error or a traceback: whatever goes wrong, the shell just gets no
candidates (and ``cpctl`` exits 1).
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Type

import click
from click.shell_completion import BashComplete, CompletionItem, FishComplete, ShellComplete, ZshComplete

from cpctl.cli import completers

SHELLS = ("bash", "zsh", "fish")


Hoist = Callable[[List[str]], Tuple[List[str], Optional[click.Option]]]


def _unchanged(args: List[str]) -> Tuple[List[str], Optional[click.Option]]:
    return args, None


class _CpctlCompletion(ShellComplete):
    """click's completion of the words with the global options moved in front of the command word,
    plus the global options after the command word.

    ``hoist`` is ``cli.main.hoist_global_options`` (given by ``respond``: this module does not
    import ``cli.main``, which imports it)."""

    hoist: Hoist = staticmethod(_unchanged)

    def get_completions(self, args: List[str], incomplete: str) -> List[CompletionItem]:
        hoisted, dangling = self.hoist(list(args))
        token = completers.WORDS.set(tuple(hoisted))
        try:
            if dangling is not None:              # `cpctl status -o <TAB>`: the global option's values
                root = self.cli.make_context(self.prog_name, _without_last(hoisted, dangling.opts),
                                             resilient_parsing=True)
                return list(dangling.shell_complete(root, incomplete))
            items = super().get_completions(hoisted, incomplete)
            if incomplete.startswith("-") and all(item.value.startswith("-") for item in items):
                items += self._global_options(hoisted, incomplete, {item.value for item in items})
            return items
        finally:
            completers.WORDS.reset(token)

    def _global_options(self, args: List[str], incomplete: str, offered: set) -> List[CompletionItem]:
        """The top-level group's options (accepted after the command word), minus the command's
        own - when the cursor is on an option name of a command (not on an option's value)."""
        ctx = _command_context(self.cli, self.prog_name, args)
        if ctx is None or ctx.parent is None or _awaits_value(ctx, args):
            return []
        root = ctx.find_root().command
        own = {name for param in ctx.command.get_params(ctx) for name in param.opts + param.secondary_opts}
        return [CompletionItem(name, help=param.help) for param in root.params
                if isinstance(param, click.Option) and not param.hidden
                for name in param.opts + param.secondary_opts
                if name.startswith(incomplete) and name not in own and name not in offered]


def _without_last(args: List[str], spellings: List[str]) -> List[str]:
    """``args`` without the last occurrence of one of ``spellings`` (the option waiting for its value)."""
    for index in range(len(args) - 1, -1, -1):
        if args[index] in spellings:
            return args[:index] + args[index + 1:]
    return args


def _command_context(cli: click.Command, prog_name: str, args: List[str]) -> Optional[click.Context]:
    """The context of the innermost command ``args`` name (public ``make_context`` and
    ``resolve_command``; nothing is parsed into values, nothing invoked); None for an unknown name."""
    ctx = cli.make_context(prog_name, [], resilient_parsing=True)
    words = list(args)
    while isinstance(ctx.command, click.Group):
        words = _after_options(ctx, words)
        if not words:
            return ctx
        name, command, _ = ctx.command.resolve_command(ctx, words)
        if command is None or name is None:
            return None
        ctx = click.Context(command, parent=ctx, info_name=name, resilient_parsing=True)
        words = words[1:]
    return ctx


def _after_options(ctx: click.Context, words: List[str]) -> List[str]:
    """``words`` from the first one that is neither an option of ``ctx.command`` nor its value."""
    takes = {spelling: param.nargs for param in ctx.command.get_params(ctx) if isinstance(param, click.Option)
             and not param.is_flag and not param.count for spelling in param.opts + param.secondary_opts}
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "--":
        index += 1 + takes.get(words[index], 0)
    return words[index:]


def _awaits_value(ctx: click.Context, args: List[str]) -> bool:
    """Whether the last words of ``args`` are an option of ``ctx.command`` still missing a value."""
    for param in ctx.command.get_params(ctx):
        if isinstance(param, click.Option) and not param.is_flag and not param.count:
            for back in range(1, max(param.nargs, 1) + 1):
                if len(args) >= back and args[-back] in param.opts + param.secondary_opts:
                    return True
    return False


class CpctlBashComplete(_CpctlCompletion, BashComplete):
    """bash (4.4 or later). click's script splits the answer with globbing on and adds each value
    unquoted (``COMPREPLY+=($value)``): a manifest named ``*.yaml`` would complete to the file
    names of the current directory. This script reads the answer line by line into quoted values,
    and adds no space after a ``NAME=`` (``flags COMPONENT --set``: the value comes next)."""

    source_template = r"""%(complete_func)s() {
    local response line type value
    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD %(complete_var)s=bash_complete $1)
    while IFS= read -r line; do
        type=${line%%%%,*}
        value=${line#*,}
        if [[ $type == 'dir' ]]; then
            COMPREPLY=()
            compopt -o dirnames
        elif [[ $type == 'file' ]]; then
            COMPREPLY=()
            compopt -o default
        elif [[ $type == 'plain' ]]; then
            COMPREPLY+=("$value")
            [[ $value == *= ]] && compopt -o nospace 2>/dev/null
        fi
    done <<< "$response"
    return 0
}

%(complete_func)s_setup() {
    complete -o nosort -F %(complete_func)s %(prog_name)s
}

%(complete_func)s_setup;
"""


class CpctlZshComplete(_CpctlCompletion, ZshComplete):
    """zsh."""


class CpctlFishComplete(_CpctlCompletion, FishComplete):
    """fish."""


COMPLETERS: Dict[str, Type[_CpctlCompletion]] = {"bash": CpctlBashComplete, "zsh": CpctlZshComplete,
                                                 "fish": CpctlFishComplete}


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Nothing a completion computes may reach the terminal: not a warning, not a stray line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield


def complete_var(prog_name: str) -> str:
    """The variable click's completion scripts set (``_CPCTL_COMPLETE`` for ``cpctl``)."""
    return "_%s_COMPLETE" % prog_name.replace("-", "_").upper()


def respond(cli: click.Command, instruction: str, hoist: Hoist = _unchanged, prog_name: str = "cpctl") -> int:
    """Answer one request of a completion script: ``bash_complete`` (candidates for COMP_WORDS) or
    ``bash_source`` (the script itself), likewise for zsh and fish. 1 and no output at all when
    the request is not understood or anything fails."""
    shell, _, action = instruction.partition("_")
    completer = COMPLETERS.get(shell)
    if completer is None or action not in ("complete", "source"):
        return 1
    try:
        with _silenced():
            comp = completer(cli, {}, prog_name, complete_var(prog_name))
            comp.hoist = hoist
            answer = comp.complete() + "\n" if action == "complete" else comp.source()
    except BaseException:  # noqa: BLE001 - a completion fails silently (even on Ctrl-C): no candidates
        return 1
    sys.stdout.write(answer)
    sys.stdout.flush()
    return 0


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish).

    Commands, options and COMPONENT names complete (the names from this machine's manifests dir
    and parked manifests). Load it:

    \b
      bash  echo 'eval "$(cpctl completion bash)"' >> ~/.bashrc        (bash 4.4+)
      zsh   echo 'eval "$(cpctl completion zsh)"' >> ~/.zshrc          (after compinit)
      fish  cpctl completion fish > ~/.config/fish/completions/cpctl.fish
    """
    root = ctx.find_root()
    prog_name = root.info_name or "cpctl"
    script = COMPLETERS[shell](root.command, {}, prog_name, complete_var(prog_name)).source()
    from cpctl.cli.context import emit, state
    if state(ctx).output in ("json", "yaml"):           # -o json: {"shell", "script"}, like every command
        emit(ctx, {"shell": shell, "script": script}, "")
        return
    click.echo(script, nl=False)

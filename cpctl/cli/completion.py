"""``cpctl completion bash|zsh|fish``, and the answers to the shell's completion requests.

click's own protocol: the script a shell sources calls ``cpctl`` again with
``_CPCTL_COMPLETE=<shell>_complete`` and the words typed so far (``COMP_WORDS``, ``COMP_CWORD``);
``respond`` answers with the candidates. On top of click's completion of command and option
names: the global options complete after the command word too (``cli.main.hoist_global_options``
accepts them there), COMPONENT arguments complete from this machine's manifests dir and its
parked manifests, revision numbers (``revisions COMPONENT N``, ``--diff``, ``rollback --to``) from
the names in the state dir's revisions, ``-H`` from the inventory's host and group names - read with
plain ``os.listdir`` (and the inventory file): no lock, no journal recovery, nothing written.

A completion never prints an error or a traceback: whatever goes wrong, the shell just gets no
candidates (and ``cpctl`` exits 1).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Type

import click
from click.shell_completion import BashComplete, CompletionItem, FishComplete, ShellComplete, ZshComplete

SHELLS = ("bash", "zsh", "fish")
COMPONENT_PARAMS = frozenset({"component", "components"})   # arguments that name a static pod
PRESENT_ONLY = frozenset({"stop", "restart"})               # ...one that runs now
PARKED_ONLY = frozenset({"start"})                          # ...one that is parked
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
REVISION_PARAMS = {"revisions": ("number", "diff"), "rollback": ("to",)}   # values that are revision numbers
_REVISION_META = re.compile(r"^(?P<file>.+)\.(?P<number>[1-9][0-9]{0,8})\.json$")


Hoist = Callable[[List[str]], Tuple[List[str], Optional[click.Option]]]


def _unchanged(args: List[str]) -> Tuple[List[str], Optional[click.Option]]:
    return args, None


class _CpctlCompletion(ShellComplete):
    """click's completion, plus global options after the command word and component names.

    ``hoist`` is ``cli.main.hoist_global_options`` (given by ``respond``: this module does not
    import ``cli.main``, which imports it)."""

    hoist: Hoist = staticmethod(_unchanged)

    def get_completions(self, args: List[str], incomplete: str) -> List[CompletionItem]:
        from click.shell_completion import _resolve_context, _resolve_incomplete
        hoisted, dangling = self.hoist(list(args))
        ctx = _resolve_context(self.cli, self.ctx_args, self.prog_name, hoisted)
        if dangling is not None:                  # `cpctl status -o <TAB>`: the global option's values
            if dangling.name == "hosts":
                return [CompletionItem(name) for name in host_names(ctx, incomplete)]
            return list(dangling.shell_complete(ctx, incomplete))
        target, incomplete = _resolve_incomplete(ctx, hoisted, incomplete)
        if isinstance(target, click.Option) and target.name == "hosts":
            return [CompletionItem(name) for name in host_names(ctx, incomplete)]
        if isinstance(target, click.Parameter) and target.name in REVISION_PARAMS.get(ctx.command.name or "", ()):
            return [CompletionItem(number) for number in revision_numbers(ctx, incomplete, hoisted)]
        if isinstance(target, click.Argument) and target.name in COMPONENT_PARAMS:
            given = ctx.params.get(target.name) or ()
            return [CompletionItem(name) for name in component_names(ctx, incomplete)
                    if name not in (given if isinstance(given, tuple) else (given,))]
        items = list(target.shell_complete(ctx, incomplete))
        if isinstance(target, click.Command) and ctx.parent is not None and incomplete.startswith("-"):
            items += _global_option_items(ctx, incomplete)
        return items


class CpctlBashComplete(_CpctlCompletion, BashComplete):
    """bash (4.4 or later). click's script splits the answer with globbing on and adds each value
    unquoted (``COMPREPLY+=($value)``): a manifest named ``*.yaml`` would complete to the file
    names of the current directory. This script reads the answer line by line into quoted values."""

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


def _global_option_items(ctx: click.Context, incomplete: str) -> List[CompletionItem]:
    """The top-level group's options (accepted after the command word), minus the command's own."""
    root = ctx.find_root().command
    own = {name for param in ctx.command.get_params(ctx) for name in param.opts + param.secondary_opts}
    return [CompletionItem(name, help=param.help) for param in root.params
            if isinstance(param, click.Option) and not param.hidden
            for name in param.opts + param.secondary_opts if name.startswith(incomplete) and name not in own]


def component_names(ctx: click.Context, incomplete: str = "") -> List[str]:
    """Component names starting with ``incomplete``: file stems (and kubeadm's short names) of the
    effective manifests dir and of the parked manifests - only the running ones for stop/restart,
    only the parked ones for start. Unreadable dirs give nothing."""
    params = ctx.find_root().params
    command = ctx.command.name or ""
    names: Set[str] = set()
    if command not in PARKED_ONLY:
        names |= _names_in(manifests_dir(params))
    if command not in PRESENT_ONLY:
        names |= _names_in(os.path.join(params.get("state_dir") or "/var/lib/cpctl", "parked"))
    return sorted(name for name in names if name.startswith(incomplete))


def _first_argument(ctx: click.Context, args: List[str]) -> Optional[str]:
    """The first positional word after the command word in ``args`` (click leaves the arguments
    unparsed while an option still waits for its value: ``rollback scheduler --to <TAB>``)."""
    name = ctx.command.name
    if name not in args:
        return None
    takes_value = {opt for param in ctx.command.get_params(ctx) if isinstance(param, click.Option)
                   and not param.is_flag for opt in param.opts + param.secondary_opts}
    words = args[args.index(name) + 1:]
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in takes_value
        else:
            return word
    return None


def revision_numbers(ctx: click.Context, incomplete: str = "", args: Optional[List[str]] = None) -> List[str]:
    """The numbers of the kept revisions of the COMPONENT already typed (``revisions COMPONENT
    <TAB>``, ``--diff``, ``rollback --to``), oldest first: from the names in ``STATE/revisions``
    (no metadata is read)."""
    from cpctl.core.manifests import ALIASES
    component = ctx.params.get("component") or _first_argument(ctx, args or [])
    if not isinstance(component, str) or not component:
        return []
    wanted = {component, ALIASES.get(component, component), _stem(component) or component}
    directory = os.path.join(ctx.find_root().params.get("state_dir") or "/var/lib/cpctl", "revisions")
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    numbers = set()
    for entry in entries:
        match = _REVISION_META.match(entry)
        if match and (match.group("file") in wanted or _stem(match.group("file")) in wanted):
            numbers.add(int(match.group("number")))
    return [str(n) for n in sorted(numbers) if str(n).startswith(incomplete)]


def host_names(ctx: click.Context, incomplete: str = "") -> List[str]:
    """``-H`` values: the host and group names (and ``all``) of the inventory given with ``-i`` or
    $CPCTL_INVENTORY; after a comma, the next name of the list. Nothing without an inventory."""
    from cpctl.fleet.inventory import load_inventory
    path = ctx.find_root().params.get("inventory") or os.environ.get("CPCTL_INVENTORY")
    if not path:
        return []
    inventory = load_inventory(str(path))
    done, _, last = incomplete.rpartition(",")
    prefix = done + "," if done else ""
    given = set(done.split(",")) if done else set()
    names = ["all"] + sorted(inventory.groups.keys() - {"all"}) + [h.name for h in inventory.hosts]
    return [prefix + name for name in dict.fromkeys(names) if name.startswith(last) and name not in given]


def manifests_dir(params: Dict[str, Any]) -> str:
    """The manifests dir cpctl would use: ``--manifests-dir`` or $CPCTL_MANIFESTS_DIR, else the
    kubelet's staticPodPath (its config under ``--kubelet-dir``), else kubeadm's default."""
    from cpctl.core import identity
    if params.get("manifests_dir"):
        return str(params["manifests_dir"])
    from cpctl.host.local import LocalHost
    view = identity.read_kubelet(LocalHost(), params.get("kubelet_dir") or identity.DEFAULT_KUBELET_DIR)
    return str(view.static_pod_path.value) if view.static_pod_path else identity.DEFAULT_MANIFESTS_DIR


def _names_in(directory: str) -> Set[str]:
    from cpctl.catalogue import ALIASES
    short = {target: alias for alias, target in ALIASES.items()}
    names: Set[str] = set()
    try:
        entries = os.listdir(directory)
    except OSError:
        return names
    for entry in entries:
        stem = _stem(entry)
        if stem:
            names.add(stem)
            names.add(short.get(stem, stem))
    return names


def _stem(filename: str) -> Optional[str]:
    """The component name of a manifest file (None for a dot file or another kind of file)."""
    if filename.startswith(".") or not filename.isprintable():
        return None
    for suffix in MANIFEST_SUFFIXES:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            return filename[: -len(suffix)]
    return None


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

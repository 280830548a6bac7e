"""cpctl's command line: the entry point, the global options, and one way every failure ends.

Only click (and the small ``cli.registry``/``cli.context`` modules) are imported at start-up;
each command's module is imported when it runs or shows its help (``cli.registry`` names them),
so ``cpctl --help`` costs little more than ``import click``. Commands of other installed packages
(the lab simulator) are found through the ``cpctl.commands`` entry point group.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import click

from cpctl.cli import completers, registry
from cpctl.cli.context import CliState, errors_as_json, fail, note
from cpctl.probes.registry import CHOICES as PROBE_CHOICES

if TYPE_CHECKING:
    from cpctl.fleet.runner import Serial

EXIT_CODES_HELP = ("Exit codes: 0 ok, 1 drift found / not running, 2 usage, 3 not found, 4 refused, 5 locked, "
                   "6 timeout, 7 environment, 8 unreachable, 9 API error, 10 conflict, 11 rolled back, "
                   "12 rollback failed, 70 internal error, 130 interrupted.")
COMPLETE_VAR = "_CPCTL_COMPLETE"    # click's shell completion protocol (see cli.completion)
# Global options' environment variables: set but empty is an error, never a silent default.
ENV_VARS = ("CPCTL_MANIFESTS_DIR", "CPCTL_KUBELET_DIR", "CPCTL_STATE_DIR", "CPCTL_NODE_NAME", "CPCTL_PROBE",
            "CPCTL_CRICTL", "CPCTL_INVENTORY", "CPCTL_PERSIST", "CPCTL_HOST_TIMEOUT", "CPCTL_NODE_ROOT")
_PATH_KEY = "cpctl.command_path"


def plugin_entry_points() -> Dict[str, Any]:
    """name -> entry point of the commands other installed packages add (the lab simulator is
    one): cpctl finds them through package metadata and never imports such a package by name."""
    from cpctl.cli import plugins
    return {name: plugin for name, plugin in plugins.find().items() if name not in registry.COMMANDS}


class CpctlGroup(click.Group):
    """The top-level group: commands imported on first use, plugins found by entry point, and the
    command path recorded before the group's callback runs (so that it can enforce the fan-out)."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(registry.lazy_commands()) | set(plugin_entry_points()))

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        spec = registry.lazy_commands().get(name)
        if spec is not None:
            module_name, attr = spec.entry.split(":")
            return getattr(importlib.import_module(module_name), attr)
        point = plugin_entry_points().get(name)
        if point is None:
            return None
        try:
            loaded = point.load()
        except ModuleNotFoundError as exc:
            module = point.target.partition(":")[0].strip()
            if not exc.name or not (module == exc.name or module.startswith(exc.name + ".")):
                raise                     # the plugin is there but broken: an internal error of that package
            from cpctl.errors import CpctlError, ExitCode
            raise CpctlError("cpctl %s: this install of %s declares the command but has no module %s (an install "
                             "without it, such as examples/Dockerfile's)" % (name, point.package, exc.name),
                             ExitCode.ENVIRONMENT,
                             hint="install cpctl with it: pip install cpctl (from the package index), or pip "
                                  "install . in a checkout of cpctl's repository") from None
        return loaded if isinstance(loaded, click.Command) else None

    def resolve_command(self, ctx: click.Context, args: List[str]) -> Tuple[Any, Any, List[str]]:
        _suggest_command(self, ctx, args)
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[_PATH_KEY] = (_command_words(name, command, rest), name not in registry.COMMANDS,
                               any(a in ("-h", "--help") for a in rest))
        return name, command, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, spec.summary) for name, spec in registry.lazy_commands().items()]
        # A plugin is not imported for the listing (its module may be heavy): its package is named.
        rows += [(name, "A command of package %s (cpctl %s --help)" % (plugin.package, name))
                 for name, plugin in plugin_entry_points().items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


def _suggest_command(group: click.Group, ctx: click.Context, args: List[str]) -> None:
    """A misspelt command word fails with the nearest commands, as click does for a group whose
    commands it holds (ours are loaded lazily, so click's own check sees none to suggest)."""
    word = args[0] if args else ""
    if not word or word.startswith("-") or ctx.resilient_parsing or group.get_command(ctx, word) is not None:
        return
    no_such = getattr(click.exceptions, "NoSuchCommand", None)       # click >= 8.2
    if no_such is not None:
        raise no_such(word, possibilities=group.list_commands(ctx), ctx=ctx)
    import difflib
    close = difflib.get_close_matches(word, group.list_commands(ctx))
    ctx.fail("No such command %r.%s" % (word, " Did you mean %s?" % " or ".join(repr(c) for c in close)
                                         if close else ""))


def _command_words(name: Optional[str], command: Any, rest: List[str]) -> str:
    """``scheduler add`` for ``cpctl scheduler add x``: the group and its subcommand words (``etcd
    alarm list``: a group within a group)."""
    words = [name or ""]
    while isinstance(command, click.Group):
        sub = next((a for a in rest if not a.startswith("-")), None)
        if sub is None or sub not in command.list_commands(click.get_current_context()):
            break
        words.append(sub)
        command = command.get_command(click.get_current_context(), sub)
        rest = rest[rest.index(sub) + 1:]
    return " ".join(words)


@click.group(cls=CpctlGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODES_HELP)
@click.option("--manifests-dir", envvar="CPCTL_MANIFESTS_DIR", default=None,
              help="Static pod manifests dir [default: the kubelet's staticPodPath, else /etc/kubernetes/manifests].")
@click.option("--kubelet-dir", envvar="CPCTL_KUBELET_DIR", default="/var/lib/kubelet", show_default=True,
              help="The kubelet's dir (kubeadm-flags.env, config.yaml): node name and staticPodPath come from it.")
@click.option("--state-dir", envvar="CPCTL_STATE_DIR", default="/var/lib/cpctl", show_default=True,
              help="Parked manifests, journal, lock and history (created 0700).")
@click.option("--node-name", envvar="CPCTL_NODE_NAME", default=None,
              help="Kubernetes node name [default: the kubelet's --hostname-override, else the full host name].")
@click.option("--kubeconfig", envvar="KUBECONFIG", default="/etc/kubernetes/admin.conf", show_default=True,
              help="kubeconfig used to watch mirror pods.")
@click.option("--probe", envvar="CPCTL_PROBE", type=click.Choice(PROBE_CHOICES),
              default="auto", show_default=True, help="How to verify the kubelet acted.")
@click.option("--crictl", envvar="CPCTL_CRICTL", default="crictl", show_default=True, help="crictl binary.")
@click.option("--node-root", envvar="CPCTL_NODE_ROOT", default="/", show_default=True, metavar="DIR",
              help="The directory that holds the node's / : hostPaths (and the files flags name) are looked "
                   "up under it. / on a real node; the lab sets it to its node's root dir.")
@click.option("--lock-timeout", type=click.FloatRange(0, 3600), default=10.0, show_default=True,
              help="Seconds to wait for another cpctl run on this node.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml", "wide"]), default="text", show_default=True,
              help="text; json or yaml: the result object (docs/json.md); wide: text with more columns "
                   "(status, history, revisions), as kubectl's.")
@click.option("-H", "--host", "hosts", multiple=True, metavar="TARGET", shell_complete=completers.hosts,
              help="Run on [user@]host[:port] or an ssh_config alias (repeatable, or comma-separated); "
                   "with --inventory: host or group names.")
@click.option("-i", "--inventory", envvar="CPCTL_INVENTORY", type=click.Path(dir_okay=False), default=None,
              help="YAML inventory of masters (per-host user, port, paths, node name).")
@click.option("--ssh-config", type=click.Path(dir_okay=False), default=None,
              help="ssh_config [default: ~/.ssh/config].")
@click.option("--known-hosts", type=click.Path(dir_okay=False), default=None,
              help="known_hosts file to check keys against.")
@click.option("--accept-new-host-key", is_flag=True, help="Record unknown host keys (a changed key is always refused).")
@click.option("--ask-become-pass", is_flag=True, help="Prompt for the sudo password of non-root logins.")
@click.option("--persist", envvar="CPCTL_PERSIST", default=None, metavar="DURATION",
              help="Keep SSH connections and a ready agent per master this long after the run, so the "
                   "next run within it skips the handshakes (like ssh's ControlPersist); 0 or off: never "
                   "[default: 60s].")
@click.option("--forks", type=click.IntRange(1, 500), default=10, show_default=True,
              help="Hosts queried in parallel by read-only commands.")
@click.option("--serial", default="1", show_default=True, help="Hosts changed at a time (N or N%).")
@click.option("--keep-going", is_flag=True, help="Continue a rolling change after a host failed.")
@click.option("--census", type=click.Choice(["inventory", "cluster"]), default="inventory", show_default=True,
              help="Where the etcd/API server quorum check counts: every inventory master through its agent, or "
                   "the cluster itself from the selected master - etcd's member list and each member's /health, "
                   "each API server's /readyz (never mirror pods) - for callers that see one master at a time "
                   "(Ansible's serial); cluster also serialises such changes per cluster. Without -H/-i, cluster "
                   "counts from this node (default: no fleet check).")
@click.option("--host-timeout", envvar="CPCTL_HOST_TIMEOUT", type=click.FloatRange(0.1, 86400), default=None,
              metavar="SECONDS", help="Give up on a host whose run takes longer (its connection is closed) "
                                      "[default: 60 for read-only commands, none for changes].")
@click.version_option(package_name="cpctl", message="cpctl %(version)s")
@click.pass_context
def main(ctx: click.Context, manifests_dir: Optional[str], kubelet_dir: str, state_dir: str, node_name: Optional[str],
         kubeconfig: str,
         probe: str, crictl: str, node_root: str, lock_timeout: float, output: str, hosts: tuple,
         inventory: Optional[str],
         ssh_config: Optional[str], known_hosts: Optional[str], accept_new_host_key: bool, ask_become_pass: bool,
         persist: Optional[str], forks: int, serial: str, keep_going: bool, census: str,
         host_timeout: Optional[float]) -> None:
    """cpctl: stop, start and watch kubeadm control-plane static pods safely.

    Parks manifests outside the kubelet's manifests dir (atomically, journaled, locked) and
    waits until the kubelet's mirror pod is gone / back and Ready.

    The options below are global: they go before or after the command word, like kubectl's
    (cpctl status -o json, cpctl stop scheduler -H m1). A command's own option of the same
    name wins after its word; nothing after a literal -- is taken as an option.
    Shell completion: cpctl completion bash|zsh|fish.
    """
    from cpctl.core.settings import Settings
    from cpctl.inputs import refuse_empty
    from cpctl.timeutil import parse_persist
    refuse_empty(ENV_VARS)
    path, plugin, asks_help = ctx.meta.get(_PATH_KEY, ("", False, False))
    inventory = _inventory_for(ctx, inventory, bool(hosts), path, plugin)
    if node_name:
        from cpctl.core.identity import check_node_name
        from cpctl.errors import ExitCode
        check_node_name(node_name, "--node-name / CPCTL_NODE_NAME", ExitCode.USAGE)
    manifests_dir, state_dir, kubelet_dir = _absolute_dirs(bool(hosts or inventory), manifests_dir, state_dir,
                                                           kubelet_dir)
    node_root = _absolute("node-root", node_root, bool(hosts or inventory))
    settings = Settings(manifests_dir=manifests_dir, state_dir=state_dir, node_name=node_name,
                        kubeconfig=kubeconfig, probe=probe, lock_timeout=lock_timeout, crictl=crictl,
                        kubelet_dir=kubelet_dir, node_root=node_root)
    persist_seconds = parse_persist(persist)         # checked even when unused
    serial_value = _serial(serial, bool(hosts or inventory))
    ctx.obj = CliState(settings, output)
    if hosts or inventory:
        ctx.obj.remote = _remote(ctx, list(hosts), inventory, ssh_config, known_hosts, accept_new_host_key,
                                 ask_become_pass, persist_seconds, forks, serial_value, keep_going, host_timeout)
        ctx.obj.remote.census = census
        ctx.obj.node_options = _given_node_options(ctx, manifests_dir=manifests_dir, state_dir=state_dir,
                                                   node_name=node_name, kubeconfig=kubeconfig,
                                                   kubelet_dir=kubelet_dir, crictl=crictl, node_root=node_root)
    ctx.obj.census = census
    if not asks_help:
        from cpctl.cli.fanout import enforce
        enforce(ctx, path, plugin)


def _inventory_for(ctx: click.Context, inventory: Optional[str], hosts: bool, path: str, plugin: bool
                   ) -> Optional[str]:
    """The inventory this run uses: ``$CPCTL_INVENTORY`` is ``-i``'s default for the commands that
    reach masters; a local-only command (``completion``, ``watch``, ``keeper``, ``lab ...``) runs on
    this machine with it exported as without it (the README has it exported for host completion).
    ``-i`` or ``-H`` on the command line still makes such a command a usage error (exit 2)."""
    from click.core import ParameterSource
    if inventory is None or hosts or ctx.get_parameter_source("inventory") is not ParameterSource.ENVIRONMENT:
        return inventory
    from cpctl.cli import registry
    spec = registry.spec_for(path)
    return None if plugin or (spec is not None and spec.mode is registry.Mode.LOCAL) else inventory


def _given_node_options(ctx: click.Context, **values: Optional[str]) -> Tuple[str, ...]:
    """The options that say which node (paths, its name) as given on this command line with ``-H``/
    ``-i``: the hints about a master repeat them after its ``-H`` (``fanout.host_invocation``). Values
    from the environment are left out: a command pasted into the same shell has them too."""
    from click.core import ParameterSource
    words: List[str] = []
    for name, value in values.items():
        if value is not None and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            words += ["--" + name.replace("_", "-"), value]
    return tuple(words)


def _absolute_dirs(remote: bool, manifests_dir: Optional[str], state_dir: str, kubelet_dir: str
                   ) -> Tuple[Optional[str], str, str]:
    """``--manifests-dir``, ``--state-dir``, ``--kubelet-dir`` as absolute paths (:func:`_absolute`)."""
    return (_absolute("manifests-dir", manifests_dir, remote) if manifests_dir else None,
            _absolute("state-dir", state_dir, remote), _absolute("kubelet-dir", kubelet_dir, remote))


def _absolute(option: str, value: str, remote: bool) -> str:
    """``value`` of ``--option`` as an absolute path: a relative one is resolved against the current
    directory, like any command line tool does. With ``-H``/``-i`` it is a path on the masters,
    where this directory means nothing: a relative one is a usage error (exit 2)."""
    from cpctl.errors import CpctlError, ExitCode
    if os.path.isabs(value):
        return value
    if remote:
        raise CpctlError("--%s %s: a path on the masters must be absolute (with -H/-i there is no current "
                         "directory to resolve it against)" % (option, value), ExitCode.USAGE)
    return os.path.abspath(value)


def _serial(text: str, remote: bool) -> Optional[Serial]:
    """``--serial``, checked even when unused; a local run with the default ``1`` does not import
    the fleet code to learn that it is valid."""
    if text == "1" and not remote:
        return None
    from cpctl.fleet.runner import parse_serial
    return parse_serial(text)


def _remote(ctx: click.Context, hosts: List[str], inventory: Optional[str], ssh_config: Optional[str],
            known_hosts: Optional[str], accept_new: bool, ask_become_pass: bool, persist: Optional[float], forks: int,
            serial: Any, keep_going: bool, host_timeout: Optional[float]) -> Any:
    """Where to run: nothing remote (not even the fleet code, let alone paramiko) is imported
    unless a host or an inventory is given."""
    from cpctl.fleet.targets import RemoteOptions, split_hosts
    from cpctl.host.sshconfig import SSHOptions
    options = SSHOptions(ssh_config=ssh_config, accept_new_host_key=accept_new, prompt=_prompt,
                         known_hosts=[known_hosts] if known_hosts else None)
    if ask_become_pass:
        options.become_password = _prompt("BECOME password: ", True)
        if persist:
            note("--persist is not used with --ask-become-pass (the keeper keeps no passwords)")
        persist = 0.0
    options.persist = persist if persist is not None else _default_persist()
    targets = split_hosts(hosts)
    if hosts and not targets:       # ``-H ''``: a change on zero hosts must not "succeed"
        from cpctl.errors import CpctlError, ExitCode
        raise CpctlError("-H/--host given but empty: name at least one master", ExitCode.USAGE)
    remote = RemoteOptions(targets, inventory, options, forks, serial, keep_going, host_timeout)
    ctx.call_on_close(remote.close)
    return remote


def _default_persist() -> float:
    """The keeper's idle time when ``--persist`` is not given; 0 (connect directly, as with
    ``--persist 0``) when the keeper dir cannot be used safely: said once, the run goes on."""
    from cpctl.host import keeper
    refused = keeper.unusable_dir()
    if refused is not None:
        note("connections are not kept after this run: %s (--persist 0 turns keeping off without this note)"
             % refused)
        return 0.0
    return keeper.DEFAULT_PERSIST


def _prompt(text: str, secret: bool = True) -> str:
    if not sys.stdin.isatty():
        from cpctl.errors import CpctlError, ExitCode
        raise CpctlError("%s needed but stdin is not a terminal" % text.strip().rstrip(":"), ExitCode.USAGE)
    return str(click.prompt(text.rstrip(": "), hide_input=secret, default="", show_default=False))


def _on_sigterm(signum: int, frame: Any) -> None:
    from cpctl.errors import Terminated
    raise Terminated()


def run(argv: Optional[List[str]] = None) -> int:
    """Run one command: one line on stderr and a documented exit code for every failure. (The
    error types are imported where a failure is reported: ``cpctl --help`` needs none of them.)"""
    if os.environ.get(COMPLETE_VAR):
        from cpctl.cli.completion import respond
        return respond(main, os.environ[COMPLETE_VAR], hoist_global_options)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        click.echo(_main_help())          # bare `cpctl`: the help, on stdout, like `cpctl --help`
        return 0
    argv, dangling = hoist_global_options(argv)
    errors_as_json(_output_of(argv) == "json")
    if dangling is not None:              # `cpctl status -o`: moved in front, it would eat the command word
        from cpctl.errors import ExitCode
        fail("option %s requires a value (see: cpctl --help)" % "/".join(dangling.opts), ExitCode.USAGE)
        return int(ExitCode.USAGE)
    try:
        # With standalone_mode off, ctx.exit(n) comes back as the return value.
        return int(main.main(args=argv, prog_name="cpctl", standalone_mode=False,
                             terminal_width=terminal_columns()) or 0)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.Abort:
        from cpctl.errors import ExitCode
        fail("aborted", ExitCode.INTERRUPTED)
        return 130
    except click.UsageError as exc:
        from cpctl.errors import ExitCode
        fail("%s (see: %s --help)" % (exc.format_message(), _usage_path(exc)), ExitCode.USAGE)
        return int(ExitCode.USAGE)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        from cpctl.errors import ExitCode
        fail("interrupted (SIGINT)", ExitCode.INTERRUPTED)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the one place every failure is turned into a line
        return _failure(exc)
    except BaseException as exc:  # noqa: BLE001 - SIGTERM (errors.Terminated); anything else goes on
        from cpctl.errors import ExitCode, Terminated
        if not isinstance(exc, Terminated):
            raise
        fail("interrupted (SIGTERM)", ExitCode.INTERRUPTED)
        return int(ExitCode.INTERRUPTED)


def terminal_columns() -> int:
    """The terminal's width, as ``shutil.get_terminal_size`` finds it ($COLUMNS, then stdout's
    terminal, else 80), without importing shutil (and bz2, lzma) into every ``cpctl --help``."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _output_of(argv: List[str]) -> str:
    """The -o/--output value among the global options in front of the command word (after
    hoisting, all of them are there); "text" when not given."""
    spellings = _global_spellings()
    index = 0
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "--":
        word = argv[index]
        if word.startswith("--output="):
            return word.split("=", 1)[1]
        if word.startswith("-o") and len(word) > 2 and not word.startswith("--"):
            return word[2:]
        if word in ("-o", "--output") and index + 1 < len(argv):
            return argv[index + 1]
        option = spellings.get(word.split("=", 1)[0])
        index += 2 if option is not None and _takes_value(option) and "=" not in word else 1
    return "text"


def _main_help() -> str:
    with main.make_context("cpctl", [], resilient_parsing=True, terminal_width=terminal_columns()) as ctx:
        return main.get_help(ctx)


# --- global options after the command word ------------------------------------------------------

Spellings = Dict[str, click.Option]


def _spellings(command: click.Command, ctx: click.Context) -> Spellings:
    """Every spelling of ``command``'s options (``-o``, ``--output``, ``--no-x``...) -> the option."""
    return {name: param for param in command.get_params(ctx) if isinstance(param, click.Option)
            for name in param.opts + param.secondary_opts}


def _global_spellings() -> Spellings:
    """The spellings of the top-level group's own options (not --help: every command has one)."""
    return {name: param for param in main.params if isinstance(param, click.Option)
            for name in param.opts + param.secondary_opts}


def _takes_value(option: click.Option) -> bool:
    return not (option.is_flag or option.count)


def _option_span(argv: List[str], index: int, spellings: Spellings) -> Tuple[int, Optional[click.Option]]:
    """(how many words the option at ``argv[index]`` takes, the option) when it is one of
    ``spellings``: ``--opt=value`` and ``-ovalue`` are one word, ``--opt value`` two (fewer when
    the value is missing at the end); (0, None) otherwise."""
    word = argv[index]
    if word.startswith("--") and "=" in word:
        option = spellings.get(word.split("=", 1)[0])
        return (1, option) if option is not None else (0, None)
    option = spellings.get(word)
    if option is not None:
        takes = max(1, option.nargs) if _takes_value(option) else 0
        return 1 + min(takes, len(argv) - index - 1), option
    short = spellings.get(word[:2]) if not word.startswith("--") and len(word) > 2 else None
    if short is not None and _takes_value(short):
        return 1, short
    return 0, None


def hoist_global_options(argv: List[str]) -> Tuple[List[str], Optional[click.Option]]:
    """``argv`` with the global options found after the command word moved in front of it, as
    click wants them: ``status -o json`` -> ``-o json status``. Only up to a literal ``--``, and
    never a spelling the command itself (or its subcommand) defines - that one stays the
    command's. Also the global option left waiting for its value at the very end, if any (shell
    completion then completes that value). Anything unexpected: ``argv`` unchanged, and click
    reports it as usual."""
    globals_ = _global_spellings()
    index = 0
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "--":
        span, _ = _option_span(argv, index, globals_)
        if not span:
            return argv, None
        index += span
    after = argv[index + 1:]
    if index >= len(argv) or argv[index] == "--" or not any(
            _option_span(after, n, globals_)[0] for n in range(len(after)) if after[n].startswith("-")):
        return argv, None
    try:
        return _hoisted(argv, index, globals_)
    except Exception:  # noqa: BLE001 - a command that cannot be loaded is click's to report
        return argv, None


def _hoisted(argv: List[str], index: int, globals_: Spellings) -> Tuple[List[str], Optional[click.Option]]:
    ctx = click.Context(main, info_name="cpctl")
    command: Optional[click.Command] = main.get_command(ctx, argv[index])
    if command is None:
        return argv, None
    local = _spellings(command, click.Context(command))
    moved: List[str] = []
    kept = [argv[index]]
    dangling: Optional[click.Option] = None
    position = index + 1
    while position < len(argv):
        word = argv[position]
        if word == "--" or command.ignore_unknown_options:
            kept += argv[position:]
            break
        span = 0
        if word.startswith("-") and word != "-":
            span, _ = _option_span(argv, position, local)
            if span:
                kept += argv[position:position + span]
            else:
                span, option = _option_span(argv, position, globals_)
                moved += argv[position:position + span]
                if option is not None and word in globals_ and span == 1 and _takes_value(option):
                    dangling = option         # only at the very end: its value is still to come
        if not span:
            kept.append(word)
            span = 1
            if isinstance(command, click.Group) and not word.startswith("-"):
                sub = command.get_command(click.Context(command), word)
                if sub is not None:
                    command, local = sub, _spellings(sub, click.Context(sub))
        position += span
    return argv[:index] + moved + kept, dangling


def _usage_path(exc: click.UsageError) -> str:
    """The command whose ``--help`` explains a usage error: the whole path of words from ``cpctl``
    (``cpctl lab etcdctl``, not ``cpctl etcdctl``, which does not exist)."""
    return exc.ctx.command_path if exc.ctx is not None else "cpctl"


def _failure(exc: Exception) -> int:
    from cpctl.errors import ExitCode, failure_of
    failure = failure_of(exc)
    if failure.code == ExitCode.INTERNAL:
        if os.environ.get("CPCTL_DEBUG"):
            raise exc
        fail("%s (set CPCTL_DEBUG=1 for a traceback, and please report it)" % failure.message, failure.code)
    else:
        fail(failure.message, failure.code, failure.hint)
    return int(failure.code)


def entry() -> None:
    """The ``cpctl`` console script: process-wide settings belong here, not in library modules."""
    try:        # what ``signal`` wraps: importing ``signal`` itself builds three enums on every --help
        signals = importlib.import_module("_signal")
    except ImportError:     # pragma: no cover - an interpreter without CPython's module
        signals = importlib.import_module("signal")
    signals.signal(signals.SIGTERM, _on_sigterm)
    sys.exit(run())

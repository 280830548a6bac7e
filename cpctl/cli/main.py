"""cpctl's command line: parse options, call :mod:`cpctl.ops.lifecycle`, print, map errors to exit codes.

Only click is imported at start-up; everything else is imported by the command that needs
it, so ``cpctl --help`` costs little more than ``import click``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, Callable, Optional

import click

EXIT_CODES_HELP = ("Exit codes: 0 ok, 1 drift found, 2 usage, 3 not found, 4 refused, 5 locked, "
                   "6 timeout, 7 environment, 8 unreachable, 9 API error, 10 conflict, 70 internal error.")

# Commands implemented in other modules, imported only when invoked (or for their own --help).
LAZY_COMMANDS = {
    "watch": ("cpctl.cli.commands.watch:watch", "Watch the manifests dir and say what the kubelet will do."),
    "baseline": ("cpctl.cli.commands.drift:baseline", "Record (or accept) the expected manifests for drift checks."),
    "check": ("cpctl.cli.commands.drift:check", "Find drift: overdue parks, strays, changed or missing manifests."),
    "systemd": ("cpctl.cli.commands.systemd:systemd", "Install or show the systemd units for checks and watch."),
    "scheduler": ("cpctl.cli.commands.scheduler:scheduler", "Add or remove a second scheduler static pod."),
    "keeper": ("cpctl.cli.commands.keeper:keeper",
               "Show or stop the keeper of persistent SSH connections (--persist)."),
}


PLUGIN_GROUP = "cpctl.commands"


def plugin_entry_points() -> dict:
    """name -> entry point of the commands other installed packages add (the lab simulator is
    one): cpctl finds them through package metadata and never imports such a package by name."""
    from importlib.metadata import entry_points
    found = entry_points()
    if hasattr(found, "select"):
        points = found.select(group=PLUGIN_GROUP)
    else:  # Python 3.9: a dict of groups
        points = found.get(PLUGIN_GROUP, [])  # type: ignore[attr-defined]
    return {point.name: point for point in points}


def plugin_command(name: str) -> Optional[click.Command]:
    point = plugin_entry_points().get(name)
    return point.load() if point is not None else None


class LazyGroup(click.Group):
    """A group whose extra commands are imported on first use, keeping start-up cheap."""

    def list_commands(self, ctx: click.Context) -> list:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS) | set(plugin_entry_points()))

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        command = super().get_command(ctx, name)
        if command is not None:
            return command
        if name not in LAZY_COMMANDS:
            return plugin_command(name)
        module_name, attr = LAZY_COMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS:
                rows.append((name, LAZY_COMMANDS[name][1]))
            else:
                cmd = self.get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(formatter.width - 20)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def settings(ctx: click.Context) -> Any:
    return ctx.ensure_object(dict)["settings"]


def emit(ctx: click.Context, data: Any, text: str) -> None:
    if settings(ctx).output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif text:
        click.echo(text)


def note(message: str) -> None:
    click.echo("cpctl: %s" % message, err=True)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODES_HELP)
@click.option("--manifests-dir", envvar="CPCTL_MANIFESTS_DIR", default="/etc/kubernetes/manifests",
              show_default=True, help="Static pod manifests dir (kubelet staticPodPath).")
@click.option("--state-dir", envvar="CPCTL_STATE_DIR", default="/var/lib/cpctl", show_default=True,
              help="Parked manifests, journal, lock and history (created 0700).")
@click.option("--node-name", envvar="CPCTL_NODE_NAME", default=None,
              help="Kubernetes node name [default: the host name].")
@click.option("--kubeconfig", envvar="KUBECONFIG", default="/etc/kubernetes/admin.conf", show_default=True,
              help="kubeconfig used to watch mirror pods.")
@click.option("--probe", envvar="CPCTL_PROBE", type=click.Choice(["auto", "api", "crictl", "health", "none"]),
              default="auto", show_default=True, help="How to verify the kubelet acted.")
@click.option("--crictl", envvar="CPCTL_CRICTL", default="crictl", show_default=True, help="crictl binary.")
@click.option("--lock-timeout", type=click.FloatRange(0, 3600), default=10.0, show_default=True,
              help="Seconds to wait for another cpctl run on this node.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-H", "--host", "hosts", multiple=True, metavar="TARGET",
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
              help="Keep SSH connections and a ready agent per master this long after the run (e.g. 60s), "
                   "so the next run skips the handshakes; 0 or off: never [default: off].")
@click.option("--forks", type=click.IntRange(1, 500), default=10, show_default=True,
              help="Hosts queried in parallel by read-only commands.")
@click.option("--serial", default="1", show_default=True, help="Hosts changed at a time (N or N%).")
@click.option("--keep-going", is_flag=True, help="Continue a rolling change after a host failed.")
@click.option("--host-timeout", envvar="CPCTL_HOST_TIMEOUT", type=click.FloatRange(0.1, 86400), default=None,
              metavar="SECONDS", help="Give up on a host whose run takes longer (its connection is closed) "
                                      "[default: 60 for read-only commands, none for changes].")
@click.version_option(package_name="cpctl", message="cpctl %(version)s")
@click.pass_context
def main(ctx: click.Context, manifests_dir: str, state_dir: str, node_name: Optional[str], kubeconfig: str,
         probe: str, crictl: str, lock_timeout: float, output: str, hosts: tuple, inventory: Optional[str],
         ssh_config: Optional[str], known_hosts: Optional[str], accept_new_host_key: bool, ask_become_pass: bool,
         persist: Optional[str], forks: int, serial: str, keep_going: bool, host_timeout: Optional[float]) -> None:
    """cpctl: stop, start and watch kubeadm control-plane static pods safely.

    Parks manifests outside the kubelet's manifests dir (atomically, journaled, locked) and
    waits until the kubelet's mirror pod is gone / back and Ready.
    """
    from cpctl.ops.lifecycle import Settings
    ctx.ensure_object(dict)["settings"] = Settings(
        manifests_dir=manifests_dir, state_dir=state_dir, node_name=node_name, kubeconfig=kubeconfig,
        probe=probe, lock_timeout=lock_timeout, crictl=crictl, output=output)
    ctx.obj["remote"] = _remote(hosts, inventory, ssh_config, known_hosts, accept_new_host_key, ask_become_pass,
                                persist, forks, serial, keep_going, host_timeout)


def _remote(hosts: tuple, inventory: Optional[str], ssh_config: Optional[str], known_hosts: Optional[str],
            accept_new: bool, ask_become_pass: bool, persist: Optional[str], forks: int, serial: str,
            keep_going: bool, host_timeout: Optional[float]) -> Any:
    """Remote settings, or None for a local run: nothing remote (not even the fleet code, let
    alone paramiko) is imported unless a host or an inventory is given."""
    persist_seconds = _persist_seconds(persist)      # checked even when unused
    if not hosts and not inventory:
        return None
    from cpctl.fleet.targets import RemoteOptions, split_hosts
    remote = RemoteOptions(split_hosts(list(hosts)), inventory, None, forks, serial, keep_going, host_timeout)
    click.get_current_context().call_on_close(remote.close)
    from cpctl.host.sshconfig import SSHOptions
    remote.ssh_options = SSHOptions(ssh_config=ssh_config, accept_new_host_key=accept_new, prompt=_prompt,
                                    known_hosts=[known_hosts] if known_hosts else None)
    remote.ssh_options.persist = persist_seconds
    if ask_become_pass:
        remote.ssh_options.become_password = _prompt("BECOME password: ", True)
        if persist_seconds:
            note("--persist is not used with --ask-become-pass (the keeper keeps no passwords)")
    return remote


def _persist_seconds(text: Optional[str]) -> float:
    """--persist: a duration, or 0/off/no for none (the default)."""
    if text is None or text.strip().lower() in ("", "0", "off", "no", "none"):
        return 0.0
    from cpctl.timeutil import parse_duration
    return float(parse_duration(text, "--persist"))


def _prompt(text: str, secret: bool = True) -> str:
    if not sys.stdin.isatty():
        from cpctl.errors import CpctlError, ExitCode
        raise CpctlError("%s needed but stdin is not a terminal" % text.strip().rstrip(":"), ExitCode.USAGE)
    return click.prompt(text.rstrip(": "), hide_input=secret, default="", show_default=False)


class Spinner:
    """One self-overwriting progress line on stderr, only for a terminal in text mode."""

    FRAMES = "|/-\\"

    def __init__(self) -> None:
        self.count = 0
        self.shown = False

    def __call__(self, text: str) -> None:
        self.count += 1
        frame = self.FRAMES[self.count % len(self.FRAMES)]
        sys.stderr.write("\r\033[K%s %s" % (frame, text[:150]))
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


def progress_for(ctx: click.Context) -> Optional[Spinner]:
    if settings(ctx).output != "text" or not sys.stderr.isatty():
        return None
    spinner = Spinner()
    ctx.call_on_close(spinner.clear)
    return spinner


def node_for(ctx: click.Context, probe: Optional[str] = None) -> Any:
    """The local ``Node`` described by the global options."""
    from cpctl.ops.lifecycle import open_node
    return open_node(settings(ctx), probe=probe, log=note, progress=progress_for(ctx))


def remote_options(ctx: click.Context) -> Any:
    return ctx.ensure_object(dict)["remote"]


def execute(ctx: click.Context, action: Callable[[Any], dict], text_of: Callable[[dict], str],
            changing: bool, probe: Optional[str] = None) -> list:
    """Run ``action(node)`` here, or on every selected master (parallel, or rolling for changes).

    Returns the data of every host that produced some (failed hosts already set the exit code).
    """
    remote = remote_options(ctx)
    if remote is None:
        data = action(node_for(ctx, probe))
        emit(ctx, data, text_of(data))
        return [data]
    from cpctl.fleet import targets as remote_run
    from cpctl.fleet.runner import recap, stats
    host_settings = settings(ctx).with_overrides(probe=probe)
    results = remote_run.run_on_hosts(host_settings, remote, remote_run.select_specs(remote), action, changing)
    data = {"hosts": [{"host": r.host, "status": r.status, "error": r.error, "elapsed": round(r.elapsed, 3),
                       "data": r.data} for r in results], "recap": stats(results)}
    emit(ctx, data, _hosts_text(results, text_of) + "\n\n" + recap(results))
    code = remote_run.exit_code(results)
    if code:
        note(remote_run.failure_line(results))
        ctx.exit(code)
    return [r.data for r in results if isinstance(r.data, dict)]


def _hosts_text(results: list, text_of: Callable[[dict], str]) -> str:
    blocks = []
    for r in results:
        body = text_of(r.data) if isinstance(r.data, dict) else ""
        if r.error:
            body = (body + "\n" if body else "") + "error: %s" % r.error
        blocks.append("== %s: %s ==\n%s" % (r.host, r.status, body or "(nothing to report)"))
    return "\n".join(blocks)


def _outcomes_data(node: Any, outcomes: list) -> dict:
    return {"node": node.node_name, "recovered": list(node.recovered), "changed": any(o.changed for o in outcomes),
            "results": [o.to_dict() for o in outcomes]}


def _outcomes_text(data: dict) -> str:
    lines = ["recovered: %s" % r for r in data.get("recovered", [])]
    for result in data["results"]:
        line = "%s: %s" % (result["component"], result["message"])
        waits = [result.get("wait")] + [(result.get(step) or {}).get("wait") for step in ("stop", "start")]
        details = [w["detail"] for w in waits if isinstance(w, dict) and w.get("detail")]
        lines.append(line + "".join(" - %s" % d for d in details))
    return "\n".join(lines)


def _plan_text(data: dict) -> str:
    from cpctl.cli.render import plan_text
    return plan_text(data)


_timeout_option = click.option("--timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
                               help="Seconds to wait for each kubelet step (each stop and each start).")
_wait_option = click.option("--no-wait", is_flag=True, help="Do not wait for the kubelet to act.")
_dry_run_option = click.option("--dry-run", is_flag=True, help="Print the plan (moves, order, hosts); change nothing.")
_verify_option = click.option("--verify", is_flag=True,
                               help="For the scheduler: also check a canary pod gets scheduled (then delete it).")
_force_option = click.option("--force", is_flag=True,
                             help="Override the fleet quorum check for etcd/apiserver (recorded in history).")


def _change(ctx: click.Context, verb: str, components: list, dry_run: bool, force: bool, reason: Optional[str],
            run_action: Callable[[Any, Optional[str]], list]) -> None:
    """Shared path of stop/start/restart: dry run, fleet safety, then the change itself."""
    from cpctl.ops import lifecycle as app
    app.order_components(components)   # validate names before anything connects or moves
    remote = remote_options(ctx)
    if remote is not None and remote.inventory and verb in ("stop", "restart"):
        from cpctl.fleet.targets import fleet_preflight  # a dry run must be refused exactly like the real one
        reason = fleet_preflight(settings(ctx), remote, verb, components, force, reason)
    if dry_run:
        execute(ctx, lambda node: app.plan(node, verb, components), _plan_text, changing=False)
        return
    execute(ctx, lambda node: _outcomes_data(node, run_action(node, reason)), _outcomes_text, changing=True)


@main.command()
@click.argument("components", nargs=-1, required=True)
@click.option("--reason", default=None, help="Why (recorded in status and history).")
@click.option("--for", "duration", default=None, help="How long it may stay parked (e.g. 30m, 2h).")
@_wait_option
@_timeout_option
@_dry_run_option
@_force_option
@click.pass_context
def stop(ctx: click.Context, components: tuple, reason: Optional[str], duration: Optional[str],
         no_wait: bool, timeout: float, dry_run: bool, force: bool) -> None:
    """Park COMPONENT's manifest outside the manifests dir and wait until its pod is gone.

    COMPONENT: scheduler, controller-manager, apiserver, etcd, or any static pod by file stem
    or metadata.name.
    """
    import time

    from cpctl.ops import lifecycle as app
    from cpctl.timeutil import parse_duration
    until = time.time() + parse_duration(duration) if duration is not None else None
    _check_reason(reason)
    _change(ctx, "stop", list(components), dry_run, force, reason,
            lambda node, why: app.stop(node, list(components), why, until, not no_wait, timeout))


def _check_reason(reason: Optional[str]) -> None:
    from cpctl.errors import CpctlError, ExitCode
    if reason is not None and (len(reason) > 500 or not reason.isprintable()):
        raise CpctlError("--reason must be printable text of at most 500 characters", ExitCode.USAGE)


@main.command()
@click.argument("components", nargs=-1, required=True)
@_wait_option
@_timeout_option
@_dry_run_option
@_verify_option
@click.pass_context
def start(ctx: click.Context, components: tuple, no_wait: bool, timeout: float, dry_run: bool, verify: bool) -> None:
    """Restore COMPONENT's parked manifest and wait until a new pod is Running and Ready."""
    from cpctl.ops import lifecycle as app
    settings(ctx).canary = verify
    _change(ctx, "start", list(components), dry_run, False, None,
            lambda node, why: app.start(node, list(components), not no_wait, timeout))


@main.command()
@click.argument("components", nargs=-1, required=True)
@click.option("--reason", default=None, help="Why (recorded in history).")
@_timeout_option
@_dry_run_option
@_force_option
@_verify_option
@click.pass_context
def restart(ctx: click.Context, components: tuple, reason: Optional[str], timeout: float, dry_run: bool,
            force: bool, verify: bool) -> None:
    """Stop, wait until gone, start, wait until back and Ready - one component at a time."""
    from cpctl.ops import lifecycle as app
    settings(ctx).canary = verify
    _check_reason(reason)
    _change(ctx, "restart", list(components), dry_run, force, reason,
            lambda node, why: app.restart(node, list(components), why, timeout))


@main.command()
@click.argument("components", nargs=-1)
@click.pass_context
def status(ctx: click.Context, components: tuple) -> None:
    """Show each static pod: running or parked (since, by, why, until), checksum, mirror pod."""
    from cpctl.cli.render import status_text
    from cpctl.ops import lifecycle as app
    execute(ctx, lambda node: app.status(node, list(components) or None), status_text, changing=False)


@main.command()
@click.argument("component", required=False)
@click.option("-l", "--limit", type=click.IntRange(0, 100000), default=50, show_default=True,
              help="Newest N records (0: all).")
@click.pass_context
def history(ctx: click.Context, component: Optional[str], limit: int) -> None:
    """Show the append-only record of every change cpctl made on this node."""
    from cpctl.cli.render import history_text
    from cpctl.ops import lifecycle as app

    def action(node: Any) -> dict:
        return {"node": node.node_name, "history": app.history(node, component, limit)}
    execute(ctx, action, lambda data: history_text(data["history"]), changing=False, probe="none")


@main.command()
@click.argument("pod")
@click.option("--node", "node_name", required=True, help="Node to place the pod on.")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--wait/--no-wait", "wait", default=False, help="Wait until the pod is Running.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True)
@_dry_run_option
@click.pass_context
def bind(ctx: click.Context, pod: str, node_name: str, namespace: str, wait: bool, timeout: float,
         dry_run: bool) -> None:
    """Be the scheduler: bind a Pending POD to NODE through the pods/binding subresource."""
    from cpctl.core.manifests import validate_component_name
    from cpctl.ops import lifecycle as app
    from cpctl.ops import scheduling
    for value in (pod, node_name, namespace):
        validate_component_name(value)
    client = app.kube_client(settings(ctx))
    result = scheduling.bind(client, namespace, pod, node_name, dry_run)
    if dry_run:
        emit(ctx, {"pod": pod, "namespace": namespace, "node": node_name, "dry_run": True},
             "dry run: pod %s/%s (Pending, no node) would be bound to node %s" % (namespace, pod, node_name))
        return
    phase = (result.get("status") or {}).get("phase")
    if wait:
        phase = scheduling.wait_running(client, namespace, pod, timeout, progress_for(ctx))
    emit(ctx, {"pod": pod, "namespace": namespace, "node": node_name, "phase": phase},
         "pod %s/%s bound to node %s (phase %s)" % (namespace, pod, node_name, phase or "?"))


@main.command()
@click.option("-n", "--namespace", default=None, help="Only this namespace [default: all].")
@click.pass_context
def pending(ctx: click.Context, namespace: Optional[str]) -> None:
    """List pods that wait for a scheduler (no node assigned yet)."""
    from cpctl.cli.render import table
    from cpctl.ops import lifecycle as app
    from cpctl.ops import scheduling
    rows = scheduling.pending(app.kube_client(settings(ctx)), namespace)
    text = table(["NAMESPACE", "NAME", "SCHEDULER", "CREATED"],
                 [[r["namespace"], r["name"], r["scheduler"], r["created"]] for r in rows]) if rows \
        else "(no pending pods)"
    emit(ctx, {"pending": rows}, text)


def run(argv: Optional[list] = None) -> int:
    """Entry point: one line on stderr and a documented exit code for every failure."""
    from cpctl.errors import ExitCode
    try:
        # With standalone_mode off, ctx.exit(n) comes back as the return value.
        return main.main(args=argv, prog_name="cpctl", standalone_mode=False) or 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        note("aborted")
        return 130
    except click.NoSuchOption as exc:
        if exc.option_name in _global_option_names():
            note("%s is a global option: put it before the command word (cpctl %s ... %s...)"
                 % (exc.option_name, exc.option_name, _command_path(exc)))
        else:
            note("%s (see: cpctl %s--help)" % (exc.format_message(), _command_path(exc)))
        return int(ExitCode.USAGE)
    except click.UsageError as exc:
        note("%s (see: cpctl %s--help)" % (exc.format_message(), _command_path(exc)))
        return int(ExitCode.USAGE)
    except click.ClickException as exc:
        note(exc.format_message())
        return exc.exit_code
    except KeyboardInterrupt:
        note("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place every failure is turned into a line
        return _failure(exc)


def _global_option_names() -> set:
    return {opt for param in main.params for opt in param.opts}


def _command_path(exc: click.UsageError) -> str:
    if exc.ctx is None or exc.ctx.parent is None:
        return ""
    return exc.ctx.info_name + " "


def _failure(exc: Exception) -> int:
    from cpctl.errors import CpctlError, ExitCode
    if isinstance(exc, CpctlError):
        note(exc.message + (" (hint: %s)" % exc.hint if exc.hint else ""))
        return int(exc.code)
    if isinstance(exc, OSError):
        where = " %s" % exc.filename if exc.filename else ""
        note("%s%s" % (exc.strerror or exc, where))
        return int(ExitCode.ENVIRONMENT)
    if os.environ.get("CPCTL_DEBUG"):
        raise exc
    note("internal error: %s: %s (set CPCTL_DEBUG=1 for a traceback, and please report it)"
          % (type(exc).__name__, exc))
    return int(ExitCode.INTERNAL)


def entry() -> None:
    sys.exit(run())

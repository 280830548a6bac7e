"""The one way a command reaches a node: this machine, or every selected master as the registry says.

``cli.registry`` declares each command's mode; ``enforce`` refuses hosts for a local-only command
before it runs, and ``execute`` runs a command's ``action(node)`` here or on every selected master
(in parallel for reads, rolling for changes, once for a one-master API call). ``local_node`` and
``local_host`` are the only other ways to reach this machine, and they refuse when hosts were
given: no command can quietly run locally then.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable, Dict, List, Optional

import click

from cpctl.cli import registry
from cpctl.cli.context import emit, note, printable, progress_for, state
from cpctl.errors import CpctlError, ExitCode

Action = Callable[[Any], Dict[str, Any]]


def enforce(ctx: click.Context, path: str, plugin: bool = False) -> None:
    """Before ``path`` runs: a local-only command given hosts is a usage error (exit 2)."""
    cli_state = state(ctx)
    cli_state.command = path
    if cli_state.remote is None:
        return
    spec = registry.spec_for(path)
    if plugin or (spec is not None and spec.mode is registry.Mode.LOCAL):
        why = registry.PLUGIN_WHY % path.split()[0] if plugin or spec is None else spec.why
        raise CpctlError("cpctl %s runs only on this machine (%s): drop -H/--inventory, or run it on the master"
                         % (path, why), ExitCode.USAGE)


def _mode(ctx: click.Context) -> registry.Mode:
    spec = registry.spec_for(state(ctx).command)
    if spec is None or spec.mode is None:
        raise CpctlError("command %r has no declared fan-out mode (a bug: please report it)"
                         % state(ctx).command, ExitCode.INTERNAL)
    return spec.mode


def local_host(ctx: click.Context) -> Any:
    """This machine, for a command that declared itself local-only."""
    if state(ctx).remote is not None:
        raise CpctlError("cpctl %s tried to act on this machine although hosts were given (a bug: please "
                         "report it)" % state(ctx).command, ExitCode.INTERNAL)
    from cpctl.host.local import LocalHost
    return LocalHost()


def local_node(ctx: click.Context, probe: Optional[str] = None) -> Any:
    """The ``Node`` of this machine, for a local-only command (``watch``)."""
    from cpctl.ops.wiring import open_node
    return open_node(state(ctx).settings, local_host(ctx), probe=probe, log=note, progress=progress_for(ctx))


def execute(ctx: click.Context, action: Action, text_of: Callable[[Dict[str, Any]], str],
            changing: bool = False, probe: Optional[str] = None) -> List[Dict[str, Any]]:
    """Run ``action(node)`` on this machine, or on every selected master as the command's mode
    says; print the result(s). Returns the data of every host that produced some (failed hosts
    already set the exit code)."""
    mode = _mode(ctx)
    if changing and mode is registry.Mode.READ:        # (a change's --dry-run runs as a read)
        raise CpctlError("cpctl %s declared %r but ran as a change (a bug: please report it)"
                         % (state(ctx).command, mode.value), ExitCode.INTERNAL)
    cli_state = state(ctx)
    if cli_state.remote is None:
        from cpctl.host.local import LocalHost
        from cpctl.ops.wiring import open_node
        data = action(open_node(cli_state.settings, LocalHost(), probe=probe, log=note, progress=progress_for(ctx)))
        emit(ctx, data, text_of(printable(data)))
        return [data]
    return _fan_out(ctx, mode, action, text_of, changing, probe)


def _fan_out(ctx: click.Context, mode: registry.Mode, action: Action, text_of: Callable[[Dict[str, Any]], str],
             changing: bool, probe: Optional[str]) -> List[Dict[str, Any]]:
    from cpctl.fleet.runner import recap, stats
    from cpctl.fleet.targets import exit_code, failure_line, select_specs
    remote = state(ctx).remote
    assert remote is not None
    specs = select_specs(remote)
    if mode is registry.Mode.ONE and len(specs) != 1:
        raise CpctlError("cpctl %s acts on the cluster once: select exactly one master (-H NAME), not %d"
                         % (state(ctx).command, len(specs)), ExitCode.USAGE)
    results = run_on_hosts(ctx, specs, action, changing or mode is registry.Mode.ONE, probe)
    data = {"hosts": [{"host": r.host, "status": r.status, "error": r.error, "elapsed": round(r.elapsed, 3),
                       "data": r.data} for r in results], "recap": stats(results)}
    shown = [dataclasses.replace(r, host=printable(r.host), error=printable(r.error)) for r in results]
    emit(ctx, data, _hosts_text(printable(data)["hosts"], text_of) + "\n\n" + recap(shown))
    code = exit_code(results)
    if code:
        note(failure_line(results))
        ctx.exit(code)
    return [r.data for r in results if isinstance(r.data, dict)]


def run_on_hosts(ctx: click.Context, specs: List[Any], action: Action, changing: bool,
                 probe: Optional[str] = None) -> List[Any]:
    """Apply ``action`` to a Node on each host; connections are reused for the whole run."""
    from cpctl.fleet.runner import run_parallel, run_rolling
    from cpctl.fleet.targets import READ_ONLY_HOST_TIMEOUT
    from cpctl.ops.wiring import open_node
    cli_state = state(ctx)
    remote = cli_state.remote
    assert remote is not None
    prepare_process_for_fanout(remote.ssh_options)
    pool = remote.pool(_connector(remote.ssh_options))

    def on_host(spec: Any) -> Dict[str, Any]:
        settings = cli_state.settings.with_overrides(
            manifests_dir=spec.manifests_dir, kubelet_dir=spec.kubelet_dir, state_dir=spec.state_dir,
            node_name=spec.node_name, kubeconfig=spec.kubeconfig, crictl=spec.crictl)
        return action(open_node(settings, pool.get(spec), probe=probe))

    if changing:
        return run_rolling(specs, on_host, serial=remote.serial, keep_going=remote.keep_going,
                           timeout=remote.host_timeout, on_timeout=pool.abandon)
    timeout = remote.host_timeout if remote.host_timeout is not None else READ_ONLY_HOST_TIMEOUT
    return run_parallel(specs, on_host, forks=remote.forks, timeout=timeout, on_timeout=pool.abandon)


def census(ctx: click.Context) -> List[Any]:
    """What every inventory master runs (no probes), for the fleet safety rules."""
    from cpctl.fleet.targets import all_inventory_specs
    from cpctl.ops.fleetsafety import census_of
    remote = state(ctx).remote
    assert remote is not None
    return run_on_hosts(ctx, all_inventory_specs(remote), census_of, False, probe="none")


def _connector(options: Any) -> Callable[[Any], Any]:
    def connect(spec: Any) -> Any:
        from cpctl.host.connect import open_host
        return open_host(spec.target, options, become=spec.become, python=spec.python)
    return connect


_PREPARED: List[bool] = []


def prepare_process_for_fanout(ssh_options: Any) -> None:
    """Process-wide settings a fan-out wants, made once by the entry point before threads start:
    a login name for paramiko's config lookups (every Host/Match block asks for it), and a short
    GIL switch interval (host threads hand small answers around)."""
    if _PREPARED:
        return
    _PREPARED.append(True)
    from cpctl.host.base import FAST_SWITCH
    from cpctl.host.sshconfig import remember_login_name
    remember_login_name()
    sys.setswitchinterval(min(sys.getswitchinterval(), FAST_SWITCH))


def _hosts_text(hosts: List[Dict[str, Any]], text_of: Callable[[Dict[str, Any]], str]) -> str:
    blocks = []
    for host in hosts:
        body = text_of(host["data"]) if isinstance(host["data"], dict) else ""
        if host["error"]:
            body = (body + "\n" if body else "") + "error: %s" % host["error"]
        blocks.append("== %s: %s ==\n%s" % (host["host"], host["status"], body or "(nothing to report)"))
    return "\n".join(blocks)

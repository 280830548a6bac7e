"""``cpctl stop|start|restart``: park and restore static pod manifests (rolling over masters)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import click

from cpctl.cli.context import state
from cpctl.cli.fanout import census, execute
from cpctl.cli.render import outcomes_text, plan_text

timeout_option = click.option("--timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
                              help="Seconds to wait for each kubelet step (each stop and each start).")
wait_option = click.option("--no-wait", is_flag=True, help="Do not wait for the kubelet to act.")
dry_run_option = click.option("--dry-run", is_flag=True, help="Print the plan (moves, order, hosts); change nothing.")
verify_option = click.option("--verify", is_flag=True,
                             help="For the scheduler: also check a canary pod gets scheduled (then delete it).")
force_option = click.option("--force", is_flag=True,
                            help="Override the fleet quorum check for etcd/apiserver (recorded in history).")
reason_option = click.option("--reason", default=None, help="Why (recorded in status and history).")


def outcomes_data(node: Any, outcomes: List[Any]) -> Dict[str, Any]:
    return {"node": node.node_name, "recovered": list(node.recovered), "changed": any(o.changed for o in outcomes),
            "results": [o.to_dict() for o in outcomes]}


def check_reason(reason: Optional[str]) -> None:
    from cpctl.errors import CpctlError, ExitCode
    if reason is not None and (len(reason) > 500 or not reason.isprintable()):
        raise CpctlError("--reason must be printable text of at most 500 characters", ExitCode.USAGE)


def guarded_reason(ctx: click.Context, verb: str, components: List[str], force: bool,
                   reason: Optional[str]) -> Optional[str]:
    """With an inventory, refuse what would take etcd or the API server down fleet-wide (a dry run
    is refused exactly like the real one); the reason to record, marked when ``--force``d."""
    remote = state(ctx).remote
    if remote is None or not remote.inventory or verb not in ("stop", "restart"):
        return reason
    from cpctl.fleet.targets import select_specs
    from cpctl.ops import fleetsafety
    if not fleetsafety.guarded(components):
        return reason
    targets = {spec.name for spec in select_specs(remote)}
    return fleetsafety.preflight(census(ctx), targets, verb, components, remote.serial, force, reason)


def change(ctx: click.Context, verb: str, components: List[str], dry_run: bool, force: bool, reason: Optional[str],
           run_action: Callable[[Any, Optional[str]], List[Any]]) -> None:
    """Shared path of stop/start/restart: dry run, fleet safety, then the change itself."""
    from cpctl.ops import lifecycle
    lifecycle.order_components(components)   # validate names before anything connects or moves
    reason = guarded_reason(ctx, verb, components, force, reason)
    if dry_run:
        execute(ctx, lambda node: lifecycle.plan(node, verb, components), plan_text)
        return
    execute(ctx, lambda node: outcomes_data(node, run_action(node, reason)), outcomes_text, changing=True)


@click.command()
@click.argument("components", nargs=-1, required=True)
@reason_option
@click.option("--for", "duration", default=None, help="How long it may stay parked (e.g. 30m, 2h).")
@wait_option
@timeout_option
@dry_run_option
@force_option
@click.pass_context
def stop(ctx: click.Context, components: tuple, reason: Optional[str], duration: Optional[str],
         no_wait: bool, timeout: float, dry_run: bool, force: bool) -> None:
    """Park COMPONENT's manifest outside the manifests dir and wait until its pod is gone.

    COMPONENT: scheduler, controller-manager, apiserver, etcd, or any static pod by file stem
    or metadata.name.
    """
    import time

    from cpctl.ops import lifecycle
    from cpctl.timeutil import parse_duration
    until = time.time() + parse_duration(duration) if duration is not None else None
    check_reason(reason)
    change(ctx, "stop", list(components), dry_run, force, reason,
           lambda node, why: lifecycle.stop(node, list(components), why, until, not no_wait, timeout))


@click.command()
@click.argument("components", nargs=-1, required=True)
@wait_option
@timeout_option
@dry_run_option
@verify_option
@click.pass_context
def start(ctx: click.Context, components: tuple, no_wait: bool, timeout: float, dry_run: bool, verify: bool) -> None:
    """Restore COMPONENT's parked manifest and wait until a new pod is Running and Ready."""
    from cpctl.ops import lifecycle
    state(ctx).settings.canary = verify
    change(ctx, "start", list(components), dry_run, False, None,
           lambda node, why: lifecycle.start(node, list(components), not no_wait, timeout))


@click.command()
@click.argument("components", nargs=-1, required=True)
@reason_option
@timeout_option
@dry_run_option
@force_option
@verify_option
@click.pass_context
def restart(ctx: click.Context, components: tuple, reason: Optional[str], timeout: float, dry_run: bool,
            force: bool, verify: bool) -> None:
    """Stop, wait until gone, start, wait until back and Ready - one component at a time."""
    from cpctl.ops import lifecycle
    state(ctx).settings.canary = verify
    check_reason(reason)
    change(ctx, "restart", list(components), dry_run, force, reason,
           lambda node, why: lifecycle.restart(node, list(components), why, timeout))

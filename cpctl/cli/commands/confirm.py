"""``cpctl confirm`` and ``cpctl revert-unconfirmed``, and the ``--confirm-within`` option of the
manifest changes: a change that reverts itself on the node unless the operator confirms it.

The flow is :mod:`cpctl.ops.confirm`; this module parses, wraps a change's node action with the
arm, and prints the line that says when it reverts. Docs: docs/confirm.md.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, TypeVar

import click

from cpctl.cli.context import note, state
from cpctl.cli.fanout import execute, local_host
from cpctl.errors import CpctlError, ExitCode

if TYPE_CHECKING:
    from cpctl.core.node import Node
    from cpctl.ops.confirm import ConfirmOptions, Launcher

NodeAction = Callable[["Node"], Dict[str, object]]
Command = TypeVar("Command", bound=Callable[..., object])


def confirm_options(function: Command) -> Command:
    """``--confirm-within`` and ``--confirm-check`` (apply, edit, flags, rollback)."""
    function = click.option(
        "--confirm-check", "confirm_check", metavar="CMD", default=None,
        help="With --confirm-within: a shell command run on the node right after the change (e.g. a kubectl auth "
             "can-i with your kubeconfig); exit 0 confirms the change, anything else reverts it at once "
             "(exit 11). Bounded by the deadline.")(function)
    return click.option(
        "--confirm-within", "confirm_within", metavar="DURATION", default=None,
        help="Commit-confirmed: after the change is verified, arm a revert ON THE NODE at the end of DURATION "
             "(90s, 5m, 1h) unless you run cpctl confirm COMPONENT; it reverts even if this cpctl, its terminal "
             "or its SSH session die (docs/confirm.md).")(function)


def parse_confirm(ctx: click.Context, within: Optional[str], check: Optional[str], reason: Optional[str],
                  dry_run: bool) -> Optional["ConfirmOptions"]:
    """The ``ConfirmOptions`` of a change (None without --confirm-within); usage errors first."""
    if within is None:
        if check is not None:
            raise CpctlError("--confirm-check goes with --confirm-within", ExitCode.USAGE)
        return None
    from cpctl.ops.confirm import ConfirmOptions
    from cpctl.timeutil import parse_duration
    seconds = parse_duration(within, "--confirm-within")
    if check is not None and not check.strip():
        raise CpctlError("--confirm-check: an empty command", ExitCode.USAGE)
    return ConfirmOptions(seconds, check or "", reason)


def guarded(ctx: click.Context, component: str, action_name: str, action: NodeAction,
            confirm: Optional["ConfirmOptions"], dry_run: bool) -> NodeAction:
    """``action`` - with ``--confirm-within``, not in a dry run - followed by the arm (and
    ``--confirm-check``). The change itself refuses, under the node lock, while the component's last
    change awaits confirmation (``ops.edits.refuse_now``; its dry run decides the same way)."""
    def run(node: "Node") -> Dict[str, object]:
        from cpctl.ops import confirm as confirm_ops
        if confirm is None:
            return action(node)
        starts = launcher(ctx, node)
        confirm_ops.preflight(node, starts)      # a revert that could not run: refused before the change
        result = action(node)                    # (its dry run refuses the same way; it only reads)
        if dry_run:
            return result
        armed = confirm_ops.arm(node, result, confirm, starts)
        state_of = armed.get("confirm")
        if confirm.check and isinstance(state_of, dict) and state_of.get("armed"):
            return _checked(node, armed, confirm)
        return armed
    return run


def _checked(node: "Node", result: Dict[str, object], options: "ConfirmOptions") -> Dict[str, object]:
    """Run --confirm-check on the node: success confirms, failure reverts at once (exit 11)."""
    from cpctl.ops import confirm as confirm_ops
    component = str(result["component"])
    armed = result["confirm"]
    assert isinstance(armed, dict)
    passed, why = confirm_ops.run_check(node, armed, options)
    if passed:
        confirm_ops.confirm(node, component, why)
        return dict(result, confirm=dict(armed, armed=False, confirmed=True), message="%s; confirmed: %s"
                    % (result.get("message"), why))
    done = confirm_ops.revert(node, component, why, log=confirm_ops.syslog_writer())
    raise CpctlError("%s: %s; the change is REVERTED to revision %s and verified" % (component, why,
                                                                                     done.get("revision")),
                     ExitCode.ROLLED_BACK)


def launcher(ctx: click.Context, node: "Node") -> "Launcher":
    """cpctl as the node-side revert runs it: this interpreter, with the node's resolved global
    options (a systemd unit inherits no environment), and the shipped units' sandbox."""
    from cpctl.cli.commands import systemd
    from cpctl.ops.confirm import Launcher
    settings = state(ctx).settings
    hardening = [line for line in systemd._HARDENING.splitlines() if line and not line.startswith("#")]
    if state(ctx).remote is not None:
        return Launcher([], hardening, remote=True)
    command = [sys.executable, "-m", "cpctl", "--manifests-dir", node.manifests_dir, "--state-dir", node.state.path,
               "--node-name", node.node_name, "--kubeconfig", node.kubeconfig, "--crictl", node.crictl,
               "--probe", settings.probe, "--kubelet-dir", settings.kubelet_dir]
    return Launcher(command, hardening)


def armed_text(text_of: Callable[[Dict[str, object]], str]) -> Callable[[Dict[str, object]], str]:
    """``text_of`` plus the line that says when the change reverts and how to keep it."""
    def text(data: Dict[str, object]) -> str:
        out = text_of(data)
        armed = data.get("confirm")
        if isinstance(armed, Mapping) and armed.get("armed"):
            from cpctl.timeutil import parse_iso
            at = time.strftime("%H:%M:%S", time.localtime(parse_iso(str(armed["deadline"]))))
            out += "\n%s changed, reverts at %s unless you run: cpctl confirm %s" % (
                armed["component"], at, armed["component"])
        return out
    return text


@click.command()
@click.argument("component", required=False)
@click.option("--all", "everything", is_flag=True, help="Confirm every unconfirmed change of the node.")
@click.option("--reason", default=None, help="Why (recorded in history).")
@click.pass_context
def confirm(ctx: click.Context, component: Optional[str], everything: bool, reason: Optional[str]) -> None:
    """Keep COMPONENT's change made with --confirm-within: stop its revert timer (history: confirmed).

    Exit 0 "already confirmed" when its last change was confirmed before; exit 3 when nothing is armed
    for COMPONENT otherwise (its change was reverted -- the message says when -- or none was made).
    """
    from cpctl.core import manifests
    from cpctl.ops import confirm as confirm_ops
    if bool(component) == everything:
        raise CpctlError("cpctl confirm: name one COMPONENT or pass --all", ExitCode.USAGE)
    if component:
        manifests.validate_component_name(component)
    execute(ctx, lambda node: confirm_ops.confirm(node, component, reason), lambda d: str(d.get("message")))


@click.command("revert-unconfirmed")
@click.argument("component")
@click.option("--op", default="", help="Only the arm with this id (the node-side timer passes it): wait until it is "
                                       "due by the node's clock, retry environment errors with back-off.")
@click.option("--within", "within", type=click.FloatRange(0, 10 ** 7), default=None, hidden=True,
              help="The detached fallback timer: the arm's window in seconds (ends the wait when no arm ever shows).")
@click.option("--at", "at", type=float, default=None, hidden=True,
              help="Accepted from timers armed by an older cpctl; the arm's own deadline decides.")
@click.pass_context
def revert_unconfirmed(ctx: click.Context, component: str, op: str, within: Optional[float],
                       at: Optional[float]) -> None:
    """Revert COMPONENT's unconfirmed change now: the revision before it, verified (run by the timer).

    Exit 0: reverted and healthy, or nothing armed; 12: reverted but NOT healthy; 10: another writer
    replaced the armed version (not reverted); 4: the revision is no longer kept (not reverted).
    With --op (the node-side timer), an environment error (5 lock held, 7 I/O) keeps the arm, is
    recorded in it, and is retried with back-off until the revert happens or the arm is confirmed.
    """
    from cpctl.core import manifests
    from cpctl.ops import confirm as confirm_ops
    from cpctl.ops.wiring import open_node
    manifests.validate_component_name(component)
    cli_state = state(ctx)
    node = open_node(cli_state.settings, local_host(ctx), log=note, overdue=False)
    log = confirm_ops.syslog_writer()
    detached = within is not None or at is not None
    try:
        if op:
            data = confirm_ops.timer_run(node, component, op, within, log)
        else:
            data = confirm_ops.revert(node, component, "reverted by hand (cpctl revert-unconfirmed)", log=log)
    except CpctlError as exc:
        log("revert-unconfirmed %s ended with exit %d" % (component, int(exc.code)), True)
        if detached:      # the detached fallback: its stderr is STATE/confirm/<file>.log
            sys.stderr.write("cpctl: revert-unconfirmed %s: exit %d\n" % (component, int(exc.code)))
        raise
    from cpctl.cli.context import emit
    emit(ctx, data, str(data.get("message")))


def overdue_lines(found: List[str]) -> None:
    for line in found:
        note(line)

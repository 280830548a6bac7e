"""``cpctl confirm`` and ``cpctl revert-unconfirmed``, and the ``--confirm-within`` option of the
manifest changes: a change that reverts itself on the node unless the operator confirms it.

The flow is :mod:`cpctl.ops.confirm`; this module parses, wraps a change's node action with the
arm, and prints the line that says when it reverts. Docs: docs/confirm.md.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Mapping, Optional, TypeVar

import click

from cpctl.cli import completers
from cpctl.cli.context import note, state
from cpctl.cli.fanout import execute, hosted, local_host
from cpctl.cli.launcher import launcher
from cpctl.errors import CpctlError, ExitCode

if TYPE_CHECKING:
    from cpctl.core.node import Node
    from cpctl.ops.confirm import ConfirmOptions
    from cpctl.ops.edits import ChangeResult

NodeAction = Callable[["Node"], Dict[str, object]]
ChangeAction = Callable[["Node"], "ChangeResult"]
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


def guarded(ctx: click.Context, component: str, action_name: str, action: ChangeAction,
            confirm: Optional["ConfirmOptions"], dry_run: bool) -> NodeAction:
    """``action`` - with ``--confirm-within``, not in a dry run - followed by the arm (and
    ``--confirm-check``). The change itself refuses, under the node lock, while the component's last
    change awaits confirmation (``ops.edits.refuse_now``; its dry run decides the same way)."""
    def run(node: "Node") -> Dict[str, object]:
        from cpctl.ops import confirm as confirm_ops
        if confirm is None:
            return action(node).to_dict()
        starts = launcher(ctx, node)
        confirm_ops.preflight(node, starts)      # a revert that could not run: refused before the change
        if dry_run:                              # (its dry run refuses the same way; it only reads)
            return action(node).to_dict()
        with _lost("the %s of %s" % (action_name, component), node, "the change may or may not be in place, and it is "
                   "NOT armed: nothing reverts it by itself"):
            result = action(node)
        with _lost("arming the revert of %s" % component, node, "the change is in place; its revert may or may not be "
                   "armed"):
            armed = confirm_ops.arm(node, result, confirm, starts)
        if confirm.check and armed.confirm is not None and armed.confirm.get("armed"):
            return _checked(node, armed.to_dict(), confirm)
        return armed.to_dict()
    return run


@contextlib.contextmanager
def _lost(during: str, node: "Node", standing: str) -> Iterator[None]:
    """A connection to a master lost ``during`` a step of a commit-confirmed change: one line that says
    what may stand on it (``standing``) and how to look, instead of only "connection lost" (exit 8)."""
    try:
        yield
    except CpctlError as exc:
        if exc.code != ExitCode.UNREACHABLE or not node.host.is_remote:
            raise
        raise CpctlError("connection to %s lost during %s: %s; look: %s" % (
            _host(node), during, standing, node.command("status")), ExitCode.UNREACHABLE) from None


def _host(node: "Node") -> str:
    """The master as the operator named it (``-H``/inventory name), else this node's name."""
    return str(getattr(node.host, "name", "") or node.node_name) if node.host.is_remote else node.node_name


def armed_line(node: "Node", armed: Mapping[str, object]) -> str:
    """What stands once the arm is recorded: applied, armed, when it reverts, how to keep it."""
    component = str(armed.get("component"))
    return "%s is applied and ARMED on %s: it reverts at %s unless confirmed (%s)" % (
        component, _host(node), armed.get("deadline"), node.command("confirm", component))


def _checked(node: "Node", result: Dict[str, object], options: "ConfirmOptions") -> Dict[str, object]:
    """Run --confirm-check on the node: success confirms, failure reverts at once (exit 11). The arm
    stands while it runs: a Ctrl-C (the check is stopped here; over SSH it goes on on the master,
    unheard), a lost connection, say so and when it reverts (``Node.standing`` for the fan-out)."""
    from cpctl.errors import Interrupted, Terminated, interrupted_by
    from cpctl.ops import confirm as confirm_ops
    component = str(result["component"])
    armed = result["confirm"]
    assert isinstance(armed, dict)
    stands = armed_line(node, armed)
    node.standing = "%s; the --confirm-check goes on on the master until it ends, its verdict unheard" % stands
    try:
        passed, why = confirm_ops.run_check(node, armed, options)
    except (KeyboardInterrupt, Terminated) as stop:
        raise Interrupted(interrupted_by(stop), "%s during the --confirm-check of %s" % (interrupted_by(stop),
                                                                                          component),
                          where="%s; the check %s" % (stands, "goes on on the master, its verdict unheard"
                                                      if node.host.is_remote else "was stopped")) from None
    except CpctlError as exc:
        if exc.code != ExitCode.UNREACHABLE:
            raise
        raise CpctlError("connection to %s lost during the --confirm-check of %s: %s; the check's verdict was not "
                         "heard" % (_host(node), component, stands), ExitCode.UNREACHABLE) from None
    finally:
        node.standing = ""
    if passed:
        with _lost("the confirm of %s after its --confirm-check passed" % component, node,
                   "it may or may not be confirmed (if not: %s)" % stands):
            confirm_ops.confirm(node, component, why)
        return dict(result, confirm=dict(armed, armed=False, confirmed=True), message="%s; confirmed: %s"
                    % (result.get("message"), why))
    with _lost("the revert of %s after its --confirm-check failed (%s)" % (component, why), node,
               "the revert may be half-way; the arm stays until it is done (the master's timer reverts it at %s)"
               % armed.get("deadline")):
        done = confirm_ops.revert(node, component, why, log=confirm_ops.node_log(node))
    raise CpctlError("%s: %s; the change is REVERTED to revision %s and verified" % (component, why,
                                                                                     done.get("revision")),
                     ExitCode.ROLLED_BACK)


def armed_text(text_of: Callable[[Dict[str, object]], str]) -> Callable[[Dict[str, object]], str]:
    """``text_of`` plus the line that says when the change reverts and how to keep it."""
    def text(data: Dict[str, object]) -> str:
        out = text_of(data)
        armed = data.get("confirm")
        if isinstance(armed, Mapping) and armed.get("armed"):
            from cpctl.timeutil import parse_iso
            at = time.strftime("%H:%M:%S", time.localtime(parse_iso(str(armed["deadline"]))))
            out += "\n%s changed, reverts at %s unless you run: %s" % (
                armed["component"], at, armed.get("hint") or "cpctl confirm %s" % armed["component"])
        return out
    return text


@click.command()
@click.argument("component", required=False, shell_complete=completers.components)
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
@click.argument("component", required=False, shell_complete=completers.components)
@click.option("--overdue", is_flag=True,
              help="Revert every unconfirmed change past its deadline by the node's clock (a timer lost with a "
                   "node without systemd): the step the shipped cpctl-check.service runs every 5 minutes.")
@click.option("--op", default="", help="Only the arm with this id (the node-side timer passes it): wait until it is "
                                       "due by the node's clock, retry environment errors with back-off.")
@click.option("--within", "within", type=click.FloatRange(0, 10 ** 7), default=None, hidden=True,
              help="The detached fallback timer: the arm's window in seconds (ends the wait when no arm ever shows).")
@click.option("--at", "at", type=float, default=None, hidden=True,
              help="Accepted from timers armed by an older cpctl; the arm's own deadline decides.")
@click.pass_context
def revert_unconfirmed(ctx: click.Context, component: Optional[str], overdue: bool, op: str,
                       within: Optional[float], at: Optional[float]) -> None:
    """Revert COMPONENT's unconfirmed change now: the revision before it, verified (run by the timer).

    With -H/-i it runs on each master through cpctl's agent, as any change does. Exit 0: reverted and
    healthy, or nothing armed; 12: reverted but NOT healthy; 10: another writer replaced the armed
    version (not reverted); 4: the revision is no longer kept (not reverted). With --op (the
    node-side timer), an environment error (5 lock held, 7 I/O) keeps the arm, is recorded in it, and
    is retried with back-off until the revert happens or the arm is confirmed.
    """
    from cpctl.core import manifests
    from cpctl.ops import confirm as confirm_ops
    from cpctl.ops.wiring import open_node
    if bool(component) == overdue:
        raise CpctlError("cpctl revert-unconfirmed: name one COMPONENT or pass --overdue", ExitCode.USAGE)
    timer_only = op or within is not None or at is not None
    if overdue and timer_only:
        raise CpctlError("cpctl revert-unconfirmed --overdue: --op, --within and --at name one arm", ExitCode.USAGE)
    if component:
        manifests.validate_component_name(component)
    cli_state = state(ctx)
    from cpctl.cli.context import emit
    if cli_state.remote is not None:
        if within is not None or at is not None:
            raise CpctlError("cpctl revert-unconfirmed --within/--at are the node-side timer's own wait: not with "
                             "-H/-i (the revert runs now)", ExitCode.USAGE)
        execute(ctx, lambda node: _shaped(_revert_now(node, component, op)), lambda d: str(d.get("message")),
                changing=True)
        return
    node = open_node(cli_state.settings, local_host(ctx), log=note)
    log = confirm_ops.syslog_writer()
    detached = within is not None or at is not None
    try:
        if op and component:
            data: Mapping[str, object] = confirm_ops.timer_run(node, component, op, within, log)
        else:
            data = _revert_now(node, component, op, log=log)
    except CpctlError as exc:
        log("revert-unconfirmed %s ended with exit %d" % (component or "--overdue", int(exc.code)), True)
        if detached:      # the detached fallback: its stderr is STATE/confirm/<file>.log
            sys.stderr.write("cpctl: revert-unconfirmed %s: exit %d\n" % (component, int(exc.code)))
        raise
    emit(ctx, hosted(_shaped(data), None), str(data.get("message")))


#: The fields of ``revert-unconfirmed``'s answer besides node/component/changed/reverted/message: a
#: revert is a rollback (the change fields of docs/json.md), null when nothing was reverted.
REVERT_FIELDS = ("file", "revision", "action", "new_revision", "checksum", "previous", "effect", "wait", "dry_run",
                 "diff", "plan")


def revert_shape(data: Mapping[str, object]) -> Dict[str, object]:
    """``revert-unconfirmed``'s one shape, whether it reverted or found nothing armed: every field
    (null without a value), ``component`` the pod's name (``scheduler`` -> ``kube-scheduler``)."""
    from cpctl.catalogue import canonical
    shaped: Dict[str, object] = dict(dict.fromkeys(REVERT_FIELDS), warnings=[], recovered=[])
    shaped.update(data)
    shaped["component"] = canonical(str(shaped["component"]))
    return shaped


def _shaped(data: Mapping[str, object]) -> Dict[str, object]:
    """One arm's revert in ``revert_shape``; ``--overdue``'s answer (``reverted``: the lines, no
    ``component``) as it is."""
    return revert_shape(data) if "component" in data else dict(data)


def _revert_now(node: "Node", component: Optional[str], op: str, why: str = "reverted by hand (cpctl "
                "revert-unconfirmed)", log: Optional[Callable[[str, bool], None]] = None,
                stop_timer: bool = True) -> Dict[str, object]:
    """``component``'s arm reverted now, or (None) every arm past its deadline (``--overdue``)."""
    from cpctl.ops import confirm as confirm_ops
    log = log or confirm_ops.node_log(node)
    if component is None:
        lines = confirm_ops.revert_overdue(node, log)
        from cpctl.core import confirmations
        clock = confirmations.node_clock(node.host) if lines else None      # the node's clock decides
        left = [a.component for a in confirmations.read_all(node.host, node.state)
                if clock is not None and a.overdue(clock)]
        if left:          # a revert that could not run (lock, environment): the arm stays, the next run retries
            raise CpctlError("%s; still armed and overdue: %s" % ("; ".join(lines), ", ".join(left)),
                             ExitCode.ENVIRONMENT)
        return {"node": node.node_name, "changed": bool(lines), "reverted": lines,
                "message": "\n".join(lines) or "nothing overdue"}
    return dict(confirm_ops.revert(node, component, why, op=op, log=log, stop_timer=stop_timer))


def overdue_lines(found: List[str]) -> None:
    for line in found:
        note(line)

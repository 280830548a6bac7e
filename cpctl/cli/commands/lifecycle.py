"""``cpctl stop|start|restart``: park and restore static pod manifests (rolling over masters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import click

from cpctl.cli import completers
from cpctl.cli.context import ansible_task_dir, state
from cpctl.cli.fanout import census, execute
from cpctl.cli.render import outcomes_text, plan_text

if TYPE_CHECKING:                   # the CLI loads these modules when a command runs
    from cpctl.core.node import Node, Outcome, Placement

timeout_option = click.option("--timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
                              help="Seconds to wait for each kubelet step (each stop and each start).")
wait_option = click.option("--no-wait", is_flag=True, help="Do not wait for the kubelet to act.")
dry_run_option = click.option("--dry-run", is_flag=True, help="Print the plan (moves, order, hosts); change nothing.")
verify_option = click.option("--verify", is_flag=True,
                             help="For the scheduler: also check a canary pod gets scheduled (then delete it).")
force_option = click.option("--force", is_flag=True,
                            help="Override the fleet quorum check for etcd/apiserver (recorded in history) and the "
                                 "refusal while a kubeadm upgrade is in flight.")
reason_option = click.option("--reason", default=None, help="Why (recorded in status and history).")
new_member_option = click.option(
    "--new-member", is_flag=True,
    help="etcd: it starts as a NEW member on purpose (a member added with etcdctl member add, or a snapshot "
         "restored into a new data dir: docs/etcd-restore.md): an empty or missing data dir is not refused, and "
         "the member that comes back may have another member ID or an older revision.")

no_move_leader_option = click.option(
    "--no-move-leader", is_flag=True, expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__("cpctl.no_move_leader", bool(value)),
    help="etcd: do not hand the leadership of this master's member to a healthy voter first when it leads "
         "(by default it is moved, so the cluster does not wait for an election timeout; docs/etcd.md).")


def move_leader(ctx: click.Context) -> bool:
    """False when the command line said --no-move-leader."""
    return not ctx.meta.get("cpctl.no_move_leader")


#: Fields of a stop/start/restart result that a no-op ("already stopped") has no value for: null
#: rather than left out, so that one schema reads every answer (docs/json.md).
OUTCOME_FIELDS = ("file", "checksum", "wait")


def outcomes_data(node: "Node", outcomes: Sequence["Outcome"]) -> Dict[str, object]:
    results = [dict(dict.fromkeys(OUTCOME_FIELDS), **o.to_dict()) for o in outcomes]
    return {"node": node.node_name, "recovered": list(node.recovered), "changed": any(o.changed for o in outcomes),
            "results": results}


def check_reason(reason: Optional[str]) -> None:
    from cpctl.errors import CpctlError, ExitCode
    if reason is not None and (len(reason) > 500 or not reason.isprintable()):
        raise CpctlError("--reason must be printable text of at most 500 characters", ExitCode.USAGE)


def guarded_reason(ctx: click.Context, verb: str, components: List[str], force: bool,
                   reason: Optional[str], dry_run: bool = False) -> Optional[str]:
    """With an inventory, refuse what would take etcd or the API server down fleet-wide (a dry run
    is refused exactly like the real one); the reason to record, marked when ``--force``d. A dry run
    counts the same way but takes no change lease (a write to the cluster, and a wait for other runs)."""
    remote = state(ctx).remote
    if verb not in ("stop", "restart", "apply"):
        return reason
    from cpctl.fleet.targets import select_specs
    from cpctl.ops import fleetsafety
    if not fleetsafety.guarded(components):
        return reason
    if remote is None:        # on the node itself: only --census cluster has anything to count
        return cluster_guarded_reason(ctx, verb, components, force, reason, dry_run) \
            if state(ctx).census == "cluster" else reason
    if remote.census == "cluster":
        return cluster_guarded_reason(ctx, verb, components, force, reason, dry_run)
    if not remote.inventory:
        return reason
    if not dry_run:
        from cpctl.cli.fanout import hold_change_lease
        hold_change_lease(ctx, required=False)
    targets = {spec.name for spec in select_specs(remote)}
    return fleetsafety.preflight(census(ctx), targets, verb, components, remote.serial, force, reason,
                                 ansible=ansible_task_dir() is not None)


def cluster_guarded_reason(ctx: click.Context, verb: str, components: List[str], force: bool,
                           reason: Optional[str], dry_run: bool = False) -> Optional[str]:
    """``--census cluster``: the same rules, counted through the selected masters (etcd's own member
    list and health, each API server's /readyz), under this machine's lock for that cluster and the
    cluster's own change lease (both held until the run ends), so that runs which each see one
    master (Ansible's ``serial: 3`` runs three cpctl at once), from this machine or another, take
    turns and each counts what the one before it left. The census is taken again under the locks."""
    from cpctl.cli.fanout import cluster_census, hold_change_lease, hold_cluster_lock
    from cpctl.errors import CpctlError, ExitCode
    from cpctl.fleet.runner import parse_serial
    from cpctl.ops import fleetsafety
    remote = state(ctx).remote
    try:
        results, targets, cluster = cluster_census(ctx)
        hold_cluster_lock(ctx, cluster)
        if not dry_run:
            hold_change_lease(ctx, required=True)
        results, targets, cluster = cluster_census(ctx)
    except CpctlError as exc:
        if exc.code != ExitCode.REFUSED or not force:
            raise
        return "[forced past: %s] %s" % (exc.message, reason or "")
    serial = remote.serial if remote is not None else parse_serial(1)
    decided = fleetsafety.preflight(results, targets, verb, components, serial, force, reason,
                                    ansible=ansible_task_dir() is not None)
    from cpctl.cli.context import note
    for alarm in fleetsafety.alarm_notes(results):     # NOSPACE: the restarts that fix it go on
        note("etcd alarm %s is active: `etcdctl alarm list`; raise --quota-backend-bytes or defragment, then "
             "`etcdctl alarm disarm`" % alarm)
    for external in fleetsafety.external_notes(results):
        note(external)
    return decided


#: The components a change acts on, per node (``start --all-parked``: the ones parked there).
Names = Callable[["Node"], List[str]]
#: The change itself on one node: (node, components, reason) -> one outcome per component.
RunAction = Callable[["Node", List[str], Optional[str]], Sequence["Outcome"]]


def change(ctx: click.Context, verb: str, components: List[str], dry_run: bool, force: bool, reason: Optional[str],
           run_action: RunAction, names_of: Optional[Names] = None, mark: str = "all_parked",
           extra: Optional[Callable[["Node"], Dict[str, object]]] = None) -> None:
    """Shared path of stop/start/restart: dry run, fleet safety, then the change itself.

    ``names_of(node)`` gives the components on each node (default: ``components``; for
    ``start --all-parked`` the ones parked there, for ``restart --stale-certs`` the stale ones, and
    ``components`` are then those it may choose from, for the fleet guard); the output is marked
    with ``mark``, and ``extra(node)`` adds to each node's result (``restart --stale-certs``: the
    components it leaves alone, and why). ``run_action(node, names, reason)`` changes them. A
    Ctrl-C or SIGTERM ends with where each of them was left (``interrupted_where``)."""
    from cpctl.ops import lifecycle
    lifecycle.order_components(components)   # validate names before anything connects or moves
    reason = guarded_reason(ctx, verb, components, force, reason, dry_run)
    names = names_of or (lambda node: list(components))
    marked = {mark: True} if names_of is not None else {}

    def refuse_in_flight(node: "Node") -> None:
        """stop/restart race a kubeadm upgrade in flight (it moves manifests itself); start only puts back."""
        if verb != "start" and not force:
            from cpctl.core import outside
            outside.refuse_in_flight(node, "%s of %s" % (verb, ", ".join(names(node))))
    if dry_run:
        def planned(node: "Node") -> Dict[str, object]:
            refuse_in_flight(node)
            planned_data = dict(lifecycle.plan(node, verb, names(node)), **marked, **(extra(node) if extra else {}))
            # what this dry run says a real run would change (changed: this run changed nothing)
            plan_steps = planned_data.get("plan")
            planned_data["would_change"] = isinstance(plan_steps, list) and any(
                isinstance(step, dict) and step.get("move") for step in plan_steps)
            return planned_data
        execute(ctx, planned, plan_text)
        return

    def action(node: "Node") -> Dict[str, object]:
        wanted = names(node)
        refuse_in_flight(node)
        try:
            outcomes = run_action(node, wanted, reason)
        except BaseException as exc:  # noqa: BLE001 - only an interruption is re-raised with more to say
            where = interrupted_where(node, verb, wanted, exc)
            if where is exc:
                raise
            raise where from None
        return dict(outcomes_data(node, outcomes), **marked, **(extra(node) if extra else {}))
    execute(ctx, action, outcomes_text, changing=True)


def interrupted_where(node: "Node", verb: str, components: List[str], exc: BaseException) -> BaseException:
    """``exc`` itself, or - for a Ctrl-C/SIGTERM - an exit-130 error that says where each of
    ``components`` was left: its manifest in the manifests dir or parked (read back from the node,
    so it is what is true now, whichever step the interruption cut short)."""
    from cpctl.errors import CpctlError, ExitCode, interrupted_by
    signal = interrupted_by(exc)
    if not (signal or getattr(exc, "code", None) == ExitCode.INTERRUPTED) or not components:
        return exc
    try:
        places = [_where_is(node.placement(name), verb) for name in components]
    except Exception:  # noqa: BLE001 - the node cannot be read now: the original message must do
        return exc
    message = exc.message if isinstance(exc, CpctlError) else "interrupted (%s)" % signal
    return CpctlError(message, ExitCode.INTERRUPTED, hint=getattr(exc, "hint", ""),
                      where="left: " + "; ".join(places))


def _where_is(placement: "Placement", verb: str) -> str:
    """The node's one answer (``Node.placement``), with what the interrupted verb did not do."""
    unfinished = " (not started)" if verb == "start" and placement.parked and not placement.present else \
        " (not stopped)" if verb == "stop" and placement.present and not placement.parked else ""
    return placement.describe() + unfinished


@click.command()
@click.argument("components", nargs=-1, required=True, shell_complete=completers.components)
@reason_option
@click.option("--for", "duration", default=None,
              help="How long it may stay parked (e.g. 30m, 2h): a reminder, nothing starts it by itself - past it "
                   "cpctl check (and its timer) reports the park as overdue, cpctl check --fix or cpctl start "
                   "restores it.")
@wait_option
@timeout_option
@dry_run_option
@force_option
@no_move_leader_option
@click.pass_context
def stop(ctx: click.Context, components: Tuple[str, ...], reason: Optional[str], duration: Optional[str],
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
           lambda node, names, why: lifecycle.stop(node, names, why, until, not no_wait, timeout, move_leader(ctx)))
    if until is not None and not dry_run:
        from cpctl.cli.context import note
        from cpctl.cli.fanout import run_hint
        note("--for %s is a reminder: nothing starts %s by itself at %s; then %s reports it overdue, and "
             "%s or %s restores it" % (duration, ", ".join(components), time.strftime("%H:%M", time.localtime(until)),
                                       run_hint(ctx, "check"), run_hint(ctx, "check", "--fix"),
                                       run_hint(ctx, "start")))


@click.command()
@click.argument("components", nargs=-1, shell_complete=completers.components)
@click.option("--all-parked", is_flag=True,
              help="Start every parked manifest: etcd, apiserver, controller-manager, scheduler, then the others.")
@wait_option
@timeout_option
@dry_run_option
@verify_option
@new_member_option
@click.pass_context
def start(ctx: click.Context, components: Tuple[str, ...], all_parked: bool, no_wait: bool, timeout: float,
          dry_run: bool, verify: bool, new_member: bool) -> None:
    """Restore COMPONENT's parked manifest and wait until a new pod is Running and Ready.

    With --all-parked (and no COMPONENT): every parked manifest, in kubeadm's start order;
    "nothing parked" is no error.
    """
    from cpctl.errors import CpctlError, ExitCode
    from cpctl.ops import lifecycle
    if all_parked and components:
        raise CpctlError("--all-parked starts every parked manifest: name no COMPONENT with it", ExitCode.USAGE)
    if not all_parked and not components:
        raise CpctlError("name the COMPONENT(s) to start, or --all-parked", ExitCode.USAGE)
    state(ctx).settings = state(ctx).settings.with_overrides(canary=verify)   # the run's settings, with --verify
    change(ctx, "start", list(components), dry_run, False, None,
           lambda node, names, why: lifecycle.start(node, names, not no_wait, timeout, new_member),
           lifecycle.parked_components if all_parked else None)


class _ComponentsOrStaleCerts(click.Command):
    """``restart``: COMPONENT... or ``--stale-certs``, exactly one of them - refused while the
    command line is parsed (exit 2), so a script's typo is caught before anything connects."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        rest = super().parse_args(ctx, args)
        if bool(ctx.params.get("components")) == bool(ctx.params.get("stale_certs")):
            raise click.UsageError("name the COMPONENT(s) to restart, or --stale-certs", ctx)
        return rest


@click.command(cls=_ComponentsOrStaleCerts)
@click.argument("components", nargs=-1, shell_complete=completers.components)
@click.option("--stale-certs", is_flag=True,
              help="Restart exactly the components that still use an old certificate (see `cpctl certs`).")
@reason_option
@timeout_option
@dry_run_option
@force_option
@verify_option
@new_member_option
@no_move_leader_option
@click.pass_context
def restart(ctx: click.Context, components: Tuple[str, ...], stale_certs: bool, reason: Optional[str], timeout: float,
            dry_run: bool, force: bool, verify: bool, new_member: bool) -> None:
    """Stop, wait until gone, start, wait until back and Ready - one component at a time.

    With --stale-certs: on each master, the components `cpctl certs` finds STALE (not those that
    re-read their certificates by themselves), in kubeadm's order, each verified to use the files
    afterwards, and why each other one is left running; --dry-run shows which.
    """
    from cpctl.ops import lifecycle
    state(ctx).settings = state(ctx).settings.with_overrides(canary=verify)   # the run's settings, with --verify
    check_reason(reason)
    if stale_certs:
        from cpctl.catalogue import START_ORDER
        from cpctl.ops import certs
        plans: Dict[int, Tuple["Node", Tuple[List[str], List[certs.LeftAlone]]]] = {}

        def plan_of(node: "Node") -> Tuple[List[str], List[certs.LeftAlone]]:
            """One ``cpctl certs`` look per node for the whole run (the node is kept, so its id stays its own)."""
            if id(node) not in plans:
                plans[id(node)] = (node, certs.restart_plan(node))
            return plans[id(node)][1]
        change(ctx, "restart", list(START_ORDER), dry_run, force, reason or "certificates renewed",
               lambda node, names, why: certs.restart_stale(node, names, why, timeout),
               lambda node: plan_of(node)[0], mark="stale_certs",
               extra=lambda node: {"left": list(plan_of(node)[1])})
        return
    change(ctx, "restart", list(components), dry_run, force, reason,
           lambda node, names, why: lifecycle.restart(node, names, why, timeout, new_member,
                                                     move_leader(ctx)))

"""Stop, start and restart of control-plane components on one node, in kubeadm's order, and the
dry-run plan of each. The moves themselves are the core's (``Node.stop``/``Node.start``)."""

from __future__ import annotations

import difflib
import os
import time
from typing import Dict, List, Optional, Sequence, Tuple, TypedDict

from cpctl import catalogue
from cpctl.core import confirmations, journal, manifests
from cpctl.core.node import Node, Outcome
from cpctl.errors import CpctlError, ExitCode, Terminated, interrupted_by
from cpctl.ops import etcdidentity

PLAN_TIMEOUT = 120.0    # the timeout a dry run passes on: nothing waits in one, so it decides nothing


def order_components(names: Sequence[str], reverse: bool = False) -> List[str]:
    """Control-plane order (etcd, apiserver, controller-manager, scheduler) for starts,
    the reverse for stops; other components keep the user's order, after those."""
    def rank(name: str) -> int:
        entry = catalogue.get(name)
        return entry.start_rank if entry is not None else len(catalogue.COMPONENTS)
    unique = list(dict.fromkeys(names))
    for name in unique:
        manifests.validate_component_name(name)
    ordered = sorted(unique, key=rank)
    if reverse:
        known = [n for n in ordered if catalogue.get(n) is not None][::-1]
        ordered = known + [n for n in ordered if catalogue.get(n) is None]
    return ordered


def stop(node: Node, components: Sequence[str], reason: Optional[str], until: Optional[float], wait: bool,
         timeout: float, move_leader: bool = True) -> List[Outcome]:
    ordered = order_components(components, reverse=True)  # validate names before any side effect
    node.check_parkable(ordered)
    _refuse_armed(node, ordered)
    with node.session("cpctl stop %s" % " ".join(components)):
        outcomes = []
        for component in ordered:
            moved = _move_leader_off(node, component, "stop of etcd", move_leader)
            outcomes.append(_said(node.stop(component, reason=reason, until=until, wait=wait, timeout=timeout),
                                  moved))
        return outcomes


def _move_leader_off(node: Node, component: str, what: str, move: bool) -> str:
    """Before etcd on this node goes down: its member's leadership to a healthy voter
    (``etcdcare.move_off_before``); the line that says what happened ("" for other components)."""
    if node.dry_run or not any(m.pod_name == catalogue.ETCD for m in node.scan().find(component) if m.valid):
        return ""
    from cpctl.ops import etcdcare
    return etcdcare.move_off_before(node, what, move)


def _said(outcome: Outcome, line: str) -> Outcome:
    """``outcome`` with the leadership line as its ``leadership`` field (in the result itself, so that
    -H/-i show it too: a remote node's log is not printed)."""
    if line:
        outcome.extra["leadership"] = line
    return outcome


def _refuse_armed(node: Node, components: Sequence[str]) -> None:
    """A stop of a component whose last change awaits confirmation is refused before anything
    moves (``Arm.refusal``): parked, its revert would find nothing to put back and the unconfirmed
    change would stay for good. A restart is not refused: it puts the same bytes back."""
    if not node.state.ensure(create=False):
        return
    for arm in confirmations.read_all(node.host, node.state):     # one read of the confirm dir
        if any(arm.matches(wanted) for wanted in components):
            raise arm.refusal("stop", node.command, confirmations.node_clock(node.host))


def start(node: Node, components: Sequence[str], wait: bool, timeout: float,
          new_member: bool = False) -> List[Outcome]:
    ordered = order_components(components)  # validate names before any side effect
    etcdidentity.accept_new_member(node, new_member)
    with node.session("cpctl start %s" % " ".join(components)):
        return [_start_same_member(node, c, wait=wait, timeout=timeout, new_member=new_member) for c in ordered]


def _start_same_member(node: Node, component: str, *, reason: Optional[str] = None, wait: bool = True,
                       timeout: float = 120.0, new_member: bool = False) -> Outcome:
    """``Node.start``; an etcd that came back as another member (``ops.etcdidentity``: another member
    or cluster ID, a revision gone back) is parked again - the failed change rolled back: a new, empty
    member under the API server is worse than a stopped one - and that is the error (exit 11)."""
    try:
        return node.start(component, reason=reason, wait=wait, timeout=timeout, new_member=new_member)
    except CpctlError as exc:
        why = etcdidentity.changed_member(node)
        if not why:
            raise
        try:
            node.stop(component, reason="rolled back: etcd came back as another member (%s)" % why, wait=True,
                      timeout=timeout)
        except CpctlError as again:
            raise CpctlError("%s; parking it again failed too (%s): act now, %s" % (
                exc.message, again.message, node.command("stop", component)), ExitCode.ROLLBACK_FAILED) from None
        raise CpctlError("start of %s ROLLED BACK (parked again): %s; check the data dir its manifest names "
                         "(%s), or start it with --new-member if a new member is the intent"
                         % (component, exc.message, node.command("edit", component, "--parked")),
                         ExitCode.ROLLED_BACK) from None


def parked_components(node: Node) -> List[str]:
    """Every parked component (by file stem), in start order: what ``start --all-parked`` starts."""
    return order_components([manifests.file_stem(filename) for filename in sorted(node.parked())])


def restart(node: Node, components: Sequence[str], reason: Optional[str], timeout: float,
            new_member: bool = False, move_leader: bool = True) -> List[Outcome]:
    """Stop and start each component in turn, waiting for the kubelet at both steps.

    A restart never leaves a component parked: whatever stops its stop phase (a timeout, an API
    or probe failure, Ctrl-C, SIGTERM) puts the manifest back before cpctl exits, and says so. Its
    park carries a deadline (twice the timeout and a minute), so that even a SIGKILLed restart
    shows up in ``cpctl check`` as an overdue park, which ``check --fix`` restores."""
    outcomes: List[Outcome] = []
    ordered = order_components(components)  # validate names before any side effect
    node.check_parkable(ordered)
    etcdidentity.accept_new_member(node, new_member)
    with node.session("cpctl restart %s" % " ".join(components)):
        for component in ordered:
            _refuse_empty_data(node, component, new_member)      # before its stop: nothing moves
            moved = _move_leader_off(node, component, "restart of etcd", move_leader)
            stopped = _stop_for_restart(node, component, reason or "restart", timeout)
            try:
                started = _start_same_member(node, component, wait=True, timeout=timeout,
                                             reason=reason or "restart", new_member=new_member)
            except BaseException as exc:  # noqa: BLE001 - every failure gets where the manifest is
                raise _where_left(node, component, "start", exc) from None
            outcomes.append(_said(Outcome(started.component, "restart", stopped.changed or started.changed,
                                          "restarted" if stopped.changed else "started (was stopped)",
                                          stop=stopped.to_dict(), start=started.to_dict()), moved))
    return outcomes


def _refuse_empty_data(node: Node, component: str, new_member: bool) -> None:
    """A restart of etcd whose manifest names a data dir that holds no member is refused before the
    stop (``core.etcddata``): it would come back as a new, empty member."""
    from cpctl.core import etcddata
    for manifest in node.scan().find(component):
        if manifest.valid and manifest.pod is not None:
            etcddata.refuse_empty(node.host, manifest.pod, node.node_root, "restart of %s" % component, new_member,
                                  node.command("restart", component, "--new-member"))


def _stop_for_restart(node: Node, component: str, reason: str, timeout: float) -> Outcome:
    """The stop half of a restart: on any failure or interruption after the manifest was parked,
    the manifest goes back first; a stop refused before anything moved is reported as it is."""
    until = time.time() + 2 * timeout + 60
    try:
        return node.stop(component, reason=reason, until=until, wait=True, timeout=timeout)
    except BaseException as exc:  # noqa: BLE001 - whatever stops the stop phase, the manifest goes back
        if not _parked_now(node, component):
            raise
        why = _why(exc)
        try:
            node.start(component, wait=False, reason="restart aborted: %s" % why)
        except BaseException as again:  # noqa: BLE001 - reported loudly with where it stays
            raise CpctlError("restart of %s aborted (%s) and its manifest could NOT be put back (%s): it stays "
                             "parked in %s; run: %s" % (component, why, _why(again), node.state.parked_dir,
                                                        node.command("start", component)),
                             ExitCode.ENVIRONMENT) from None
        code = exc.code if isinstance(exc, CpctlError) else \
            ExitCode.INTERRUPTED if interrupted_by(exc) else ExitCode.ENVIRONMENT
        raise CpctlError("restart of %s aborted, manifest restored to %s: %s" % (component, node.manifests_dir, why),
                         code, hint=getattr(exc, "hint", "")) from None


def _parked_now(node: Node, component: str) -> bool:
    """True when ``component`` is parked now (read back); True too when that cannot be read, so
    that a restart then still tries to put its manifest back."""
    try:
        return bool(node.placement(component).parked)
    except CpctlError:
        return True


def _where_left(node: Node, component: str, step: str, exc: BaseException) -> BaseException:
    """Re-raise a failure of a restart's start phase with where the manifest is now."""
    if not isinstance(exc, (CpctlError, KeyboardInterrupt, Terminated)):
        return exc
    placement = node.placement(component)
    where = "still parked in %s (%s)" % (node.state.parked_dir, node.command("start", component)) \
        if placement.parked and not placement.present else "back in %s" % node.manifests_dir
    code = exc.code if isinstance(exc, CpctlError) else ExitCode.INTERRUPTED
    return CpctlError("restart of %s: %s failed (%s); the manifest is %s" % (component, step, _why(exc), where),
                      code, hint=getattr(exc, "hint", ""))


def _why(exc: BaseException) -> str:
    """Why a restart step stopped, short enough for a history record's reason."""
    signal = interrupted_by(exc)
    if signal:
        return "interrupted (%s)" % signal
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


class LifecyclePlan(TypedDict):
    """stop/start/restart ``--dry-run``'s answer (docs/json.md, cpctl/schemas/plan.json)."""

    node: str
    dry_run: bool
    changed: bool
    recovered: List[str]
    plan: List[Dict[str, object]]
    diff: str


def plan(node: Node, verb: str, components: Sequence[str]) -> LifecyclePlan:
    """What stop/start/restart would do: the real run itself, on a node in dry-run mode (every
    check and refusal the same; its journal ``Change``s recorded instead of applied), printed as
    the moves in order and the manifests dir's listing before and after. A reason, a ``--for``
    deadline and a timeout change no decision (a dry run does not wait), so none is taken."""
    before = sorted(m.file for m in node.scan().manifests)
    node.dry_run = True
    if verb == "stop":
        outcomes = stop(node, components, None, None, False, PLAN_TIMEOUT)
    elif verb == "start":
        outcomes = start(node, components, False, PLAN_TIMEOUT)
    else:
        outcomes = restart(node, components, None, PLAN_TIMEOUT)
    steps: List[Dict[str, object]] = []
    moves: List[Tuple[str, str]] = []
    for outcome in outcomes:
        if not outcome.changed:
            steps.append({"action": verb, "component": outcome.component,
                          "note": "nothing to do (%s)" % outcome.message})
    for change in node.planned:
        for step in change.steps:
            if step.kind == journal.MOVE:
                moves.append((step.src, step.path))
                steps.append({"action": change.action, "component": change.component, "move": [step.src, step.path]})
                if change.record.get("hand_edited"):
                    steps[-1]["note"] = "%s: what cpctl parked would be kept as a revision" % \
                        change.record["hand_edited"]
    here = node.manifests_dir
    after = sorted(set(before) - {os.path.basename(src) for src, _ in moves if os.path.dirname(src) == here}
                   | {os.path.basename(dst) for _, dst in moves if os.path.dirname(dst) == here})
    diff = "".join(difflib.unified_diff([f + "\n" for f in before], [f + "\n" for f in after],
                                        node.manifests_dir + " (now)", node.manifests_dir + " (after)"))
    return {"node": node.node_name, "dry_run": True, "changed": False, "recovered": list(node.recovered),
            "plan": steps, "diff": diff}

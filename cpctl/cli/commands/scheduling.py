"""``cpctl bind`` and ``cpctl pending``: manual scheduling through the API, with the node's kubeconfig.

Run locally they use ``--kubeconfig`` of this machine; with ``-H`` they talk to the API server from
the master, with the master's kubeconfig (``bind`` through exactly one master: it changes the
cluster once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, TypedDict

import click

from cpctl.cli.commands.lifecycle import dry_run_option
from cpctl.cli.context import progress_for
from cpctl.cli.fanout import execute
from cpctl.cli.render import table

if TYPE_CHECKING:
    from cpctl.core.node import Node
    from cpctl.ops.scheduling import PendingPod


class Bound(TypedDict):
    """``bind``'s result: the pod, the node it is (a dry run: would be) bound to, and the phase seen
    after the binding (null in a dry run). ``node`` is the node bound to, as the binding names it."""

    pod: str
    namespace: str
    node: str
    dry_run: bool
    changed: bool
    would_change: bool
    phase: Optional[str]


class Pending(TypedDict):
    """``pending``'s result on one master: ``node``, the master asked."""

    node: str
    pending: List["PendingPod"]


@click.command()
@click.argument("pod")
@click.option("--node", "node_name", required=True, help="Node to place the pod on.")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--wait/--no-wait", "wait", default=False, help="Wait until the pod is Running.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True)
@dry_run_option
@click.pass_context
def bind(ctx: click.Context, pod: str, node_name: str, namespace: str, wait: bool, timeout: float,
         dry_run: bool) -> None:
    """Be the scheduler: bind a Pending POD to NODE through the pods/binding subresource."""
    from cpctl.core.manifests import validate_component_name
    from cpctl.ops import scheduling
    for value, what in ((pod, "pod name"), (node_name, "node name"), (namespace, "namespace")):
        validate_component_name(value, what)
    progress = progress_for(ctx)

    def action(node: "Node") -> Bound:
        client = scheduling.client_of(node)
        result = scheduling.bind(client, namespace, pod, node_name, dry_run)
        if dry_run:
            return {"pod": pod, "namespace": namespace, "node": node_name, "dry_run": True, "changed": False,
                    "would_change": True, "phase": None}
        status = result.get("status")
        seen = status.get("phase") if isinstance(status, dict) else None
        phase = seen if isinstance(seen, str) else None
        if wait:
            phase = scheduling.wait_running(client, namespace, pod, timeout, progress)
        return {"pod": pod, "namespace": namespace, "node": node_name, "phase": phase, "changed": True,
                "dry_run": False, "would_change": True}
    execute(ctx, action, _bind_text, changing=not dry_run)


def _bind_text(data: Bound) -> str:
    if data.get("dry_run"):
        return "dry run: pod %s/%s (Pending, no node) would be bound to node %s" % (
            data["namespace"], data["pod"], data["node"])
    return "pod %s/%s bound to node %s (phase %s)" % (data["namespace"], data["pod"], data["node"],
                                                      data.get("phase") or "?")


@click.command()
@click.option("-n", "--namespace", default=None, help="Only this namespace [default: all].")
@click.pass_context
def pending(ctx: click.Context, namespace: Optional[str]) -> None:
    """List pods that wait for a scheduler (no node assigned yet)."""
    from cpctl.ops import scheduling

    def action(node: "Node") -> Pending:
        return {"node": node.node_name, "pending": scheduling.pending(scheduling.client_of(node), namespace)}
    execute(ctx, action, _pending_text, probe="none")


def _pending_text(data: Pending) -> str:
    rows = data["pending"]
    if not rows:
        return "(no pending pods)"
    return table(["NAMESPACE", "NAME", "WAITING FOR", "CREATED"],
                 [[r["namespace"], r["name"], r.get("waiting_for") or "scheduler %s" % r["scheduler"], r["created"]]
                  for r in rows])

"""``cpctl bind`` and ``cpctl pending``: manual scheduling through the API, with the node's kubeconfig.

Run locally they use ``--kubeconfig`` of this machine; with ``-H`` they talk to the API server from
the master, with the master's kubeconfig (``bind`` through exactly one master: it changes the
cluster once).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import click

from cpctl.cli.commands.lifecycle import dry_run_option
from cpctl.cli.context import progress_for
from cpctl.cli.fanout import execute
from cpctl.cli.render import table


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
    for value in (pod, node_name, namespace):
        validate_component_name(value)
    progress = progress_for(ctx)

    def action(node: Any) -> Dict[str, Any]:
        client = scheduling.client_of(node)
        result = scheduling.bind(client, namespace, pod, node_name, dry_run)
        if dry_run:
            return {"pod": pod, "namespace": namespace, "node": node_name, "dry_run": True, "changed": False}
        phase = (result.get("status") or {}).get("phase")
        if wait:
            phase = scheduling.wait_running(client, namespace, pod, timeout, progress)
        return {"pod": pod, "namespace": namespace, "node": node_name, "phase": phase, "changed": True}
    execute(ctx, action, _bind_text, changing=not dry_run)


def _bind_text(data: Dict[str, Any]) -> str:
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

    def action(node: Any) -> Dict[str, Any]:
        return {"pending": scheduling.pending(scheduling.client_of(node), namespace)}
    execute(ctx, action, _pending_text, probe="none")


def _pending_text(data: Dict[str, Any]) -> str:
    rows = data["pending"]
    if not rows:
        return "(no pending pods)"
    return table(["NAMESPACE", "NAME", "WAITING FOR", "CREATED"],
                 [[r["namespace"], r["name"], r.get("waiting_for") or "scheduler %s" % r["scheduler"], r["created"]]
                  for r in rows])

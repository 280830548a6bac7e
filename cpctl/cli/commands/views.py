"""``cpctl status`` and ``cpctl history``: read-only views of each node (parallel over masters)."""

from __future__ import annotations

from typing import Any, Dict, Optional

import click

from cpctl.cli.fanout import execute
from cpctl.cli.render import history_text, status_text


@click.command()
@click.argument("components", nargs=-1)
@click.pass_context
def status(ctx: click.Context, components: tuple) -> None:
    """Show each static pod: running or parked (since, by, why, until), checksum, mirror pod."""
    from cpctl.core import views
    from cpctl.errors import CpctlError, ExitCode
    shown = execute(ctx, lambda node: views.status(node, list(components) or None), status_text)
    broken = [data["unrecovered"] for data in shown if data.get("unrecovered")]
    if broken:   # everything that could be shown was; the exit code says the node needs a hand
        raise CpctlError(broken[0], ExitCode.ENVIRONMENT)


@click.command()
@click.argument("component", required=False)
@click.option("-l", "--limit", type=click.IntRange(0, 100000), default=50, show_default=True,
              help="Newest N records (0: all).")
@click.pass_context
def history(ctx: click.Context, component: Optional[str], limit: int) -> None:
    """Show the append-only record of every change cpctl made on this node."""
    from cpctl.core import views

    def action(node: Any) -> Dict[str, Any]:
        return {"node": node.node_name, "history": views.history(node, component, limit)}
    execute(ctx, action, lambda data: history_text(data["history"]), probe="none")

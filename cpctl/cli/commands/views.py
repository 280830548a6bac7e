"""``cpctl status`` and ``cpctl history``: read-only views of each node (parallel over masters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple, TypedDict

import click

from cpctl.cli.fanout import execute
from cpctl.cli.render import history_text, status_text

if TYPE_CHECKING:
    from cpctl.core.node import Node


@click.command()
@click.argument("components", nargs=-1)
@click.pass_context
def status(ctx: click.Context, components: Tuple[str, ...]) -> None:
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

    def action(node: "Node") -> Dict[str, object]:
        return {"node": node.node_name, "history": views.history(node, component, limit)}
    execute(ctx, action, lambda data: history_text(_records(data["history"])), probe="none")


def _records(value: object) -> List[Mapping[str, object]]:
    """The history list of ``history``'s result (printable copies of the records)."""
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


class Running(TypedDict):
    """``is-running``'s result on one node: component -> running, not-ready, absent, ..."""

    node: str
    components: Dict[str, str]
    running: bool


@click.command("is-running")
@click.argument("components", nargs=-1, required=True)
@click.pass_context
def is_running(ctx: click.Context, components: Tuple[str, ...]) -> None:
    """Exit 0 when every COMPONENT's pod is running and Ready (on every selected master), else 1.

    For scripts, like `systemctl is-active`: one word per component - running, not-ready, absent,
    unknown (nothing could look), parked or invalid - and the exit code says whether all run.
    """
    from cpctl.core import views
    from cpctl.errors import CpctlError, ExitCode

    def action(node: "Node") -> Running:
        rows = views.status(node, list(components))["components"]
        words = {row["component"]: row.get("pod_state") or row["state"] for row in rows}
        return {"node": node.node_name, "components": words, "running": all(w == "running" for w in words.values())}

    def text(data: Running) -> str:
        return "\n".join("%s: %s" % (name, word) for name, word in data["components"].items())

    shown = execute(ctx, action, text)
    down = ["%s%s (%s)" % ("%s: " % data["node"] if len(shown) > 1 else "", name, word)
            for data in shown for name, word in data["components"].items() if word != "running"]
    if down:
        raise CpctlError("not running: %s" % ", ".join(down), ExitCode.DRIFT)

"""``cpctl keeper status|stop``: the background keeper of persistent SSH connections (``--persist``)."""

from __future__ import annotations

import time
from typing import Dict

import click

from cpctl.cli.context import emit


@click.group()
def keeper() -> None:
    """Show or stop the keeper that holds SSH connections between runs (see --persist)."""


def _age(since: float) -> str:
    from cpctl.timeutil import format_duration
    return format_duration(time.time() - since)


def _text(info: dict) -> str:
    expires = info["expires_in"]
    head = "keeper pid %d, up %s, %s" % (
        info["pid"], _age(info["started_at"]),
        "%d run(s) attached" % info["runs_attached"] if expires is None else "exits in %.0fs unless used" % expires)
    lines = [head]
    for conn in info["connections"]:
        where = "%s@%s:%s" % (conn["user"], conn["hostname"], conn["port"]) if conn["user"] else "-"
        lines.append("  %-24s %-32s %-9s connects=%d runs=%d agent %s" % (
            conn["target"], where, "connected" if conn["connected"] else "closed", conn["connects"],
            conn["sessions"], "ready" if conn["agent_ready"] else "not started"))
    return "\n".join(lines)


#: ``keeper status`` without a keeper: every field of a running keeper's answer, null (docs/json.md).
NOT_RUNNING: Dict[str, object] = {"running": False, "pid": None, "started_at": None, "persist": None,
                                  "runs_attached": None, "expires_in": None, "connections": []}


@keeper.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """The keeper's connections: where, since when, how many runs they served."""
    from cpctl.host import keeper as client
    info = client.request("status")
    if info is None:
        emit(ctx, dict(NOT_RUNNING), "no keeper running (%s)" % client.keeper_dir())
        return
    emit(ctx, dict(NOT_RUNNING, **{k: v for k, v in info.items() if k in NOT_RUNNING}, running=True), _text(info))


@keeper.command()
@click.pass_context
def stop(ctx: click.Context) -> None:
    """Close every kept connection now (their agents exit) and end the keeper."""
    from cpctl.host import keeper as client
    info = client.request("stop")
    if info is None:
        emit(ctx, {"running": False, "stopped": False, "pid": None, "connections": 0},
             "no keeper running (%s)" % client.keeper_dir())
        return
    gone = client.wait_gone()
    pid, connections = info.get("pid"), info.get("connections")
    count = len(connections) if isinstance(connections, list) else 0
    emit(ctx, {"running": not gone, "stopped": gone, "pid": pid, "connections": count},
         "keeper pid %s stopped, %d connection(s) closed" % (pid, count))

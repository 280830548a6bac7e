"""``cpctl version``: this client's version, and with ``-H``/``-i`` what runs on each master.

Nothing is installed on a master: the agent there is this client's own ``cpctl.host.ops``, shipped
over SSH for the run (or started by this build's keeper, ``--persist``: one keeper per build). So
a master runs the client's version by construction; what differs per master, and what this asks
each one, is its ``python3`` (the agent needs 3.8 or later) and who the agent runs as.
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Optional, TypedDict

import click

from cpctl.cli.context import emit, state
from cpctl.cli.fanout import execute

if TYPE_CHECKING:
    from cpctl.core.node import Node


class AgentVersion(TypedDict):
    """``version``'s result on one master: the agent the client shipped there, as it answered."""

    agent: str
    build: str
    python: str
    hostname: str
    user: str


def _client() -> "dict[str, str]":
    from cpctl import __version__
    from cpctl.host.keeper import BUILD_ID
    return {"version": __version__, "build": BUILD_ID, "python": platform.python_version()}


@click.command()
@click.pass_context
def version(ctx: click.Context) -> None:
    """Print cpctl's version; with -H/-i also the agent on each master (its Python, its user)."""
    client = _client()
    line = "client: cpctl %s (build %s, python %s)" % (client["version"], client["build"], client["python"])
    if state(ctx).remote is None:
        emit(ctx, {"client": client}, line)
        return
    if state(ctx).output == "text":
        click.echo(line)

    def action(node: "Node") -> AgentVersion:
        info = node.host.info()
        return {"agent": client["version"], "build": client["build"], "python": info["python"],
                "hostname": info["hostname"], "user": info["user"]}
    execute(ctx, action, _agent_text, probe="none")


def _agent_text(data: Optional[AgentVersion]) -> str:
    if not data:
        return ""
    return ("agent: cpctl %s (build %s, shipped by this client: nothing is installed), python %s, on %s as %s"
            % (data["agent"], data["build"], data["python"], data["hostname"], data["user"]))

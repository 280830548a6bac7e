"""``cpctl version``: this client's version, and with ``-H``/``-i`` what runs on each master.

Nothing is installed on a master: the agent there is this client's own ``cpctl.agent``, shipped
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
    from cpctl.host.base import HostInfo


class ClientVersion(TypedDict):
    """This cpctl: its version, its build (the agent code's digest) and its Python."""

    version: str
    build: str
    python: str


class AgentVersion(TypedDict):
    """``version``'s one answer, local or per master: the client, and what acts on the node - the
    agent the client shipped there (``-H``/``-i``), or this cpctl itself (a local run: no agent, the
    same code runs in this process) - its version and build, the node's Python, host name and user."""

    client: ClientVersion
    agent: str
    build: str
    python: str
    hostname: str
    user: str


def _client() -> ClientVersion:
    from cpctl import __version__
    from cpctl.host.keeper import BUILD_ID
    return {"version": __version__, "build": BUILD_ID, "python": platform.python_version()}


def _answer(client: ClientVersion, info: "HostInfo") -> AgentVersion:
    return {"client": client, "agent": client["version"], "build": client["build"], "python": info["python"],
            "hostname": info["hostname"], "user": info["user"]}


@click.command()
@click.pass_context
def version(ctx: click.Context) -> None:
    """Print cpctl's version; with -H/-i also the agent on each master (its Python, its user)."""
    client = _client()
    line = "client: cpctl %s (build %s, python %s)" % (client["version"], client["build"], client["python"])
    if state(ctx).remote is None:        # no node needed: version answers on any machine
        from cpctl.cli.fanout import hosted
        from cpctl.host.local import LocalHost
        emit(ctx, hosted(dict(_answer(client, LocalHost().info())), None), line)
        return
    if state(ctx).output == "text":
        click.echo(line)
    execute(ctx, lambda node: _answer(client, node.host.info()), _agent_text, probe="none")


def _agent_text(data: Optional[AgentVersion]) -> str:
    if not data:
        return ""
    return ("agent: cpctl %s (build %s, shipped by this client: nothing is installed), python %s, on %s as %s"
            % (data["agent"], data["build"], data["python"], data["hostname"], data["user"]))

"""``cpctl logs COMPONENT``: what a static pod's container wrote, on this machine or on each master.

A parallel read with ``-H``/``-i`` (one block per master). The flow is :mod:`cpctl.ops.logs`:
crictl first (it answers while the API server is down), else the API server's ``pods/log``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

import click

from cpctl.cli import completers
from cpctl.cli.context import note
from cpctl.cli.fanout import execute

if TYPE_CHECKING:
    from cpctl.ops.logs import LogRequest


@click.command()
@click.argument("component", shell_complete=completers.components)
@click.option("-p", "--previous", is_flag=True,
              help="The attempt before the newest one (why did it crash?). Through the API: the kubelet's "
                   "last terminated one, like kubectl logs --previous.")
@click.option("--tail", type=click.IntRange(0), default=50, show_default=True,
              help="Lines from the end of the log (0: all of them).")
@click.option("-c", "--container", default=None, help="The container (default: the pod's only one).")
@click.option("-f", "--follow", is_flag=True,
              help="Then print each new line as it is written, like kubectl logs -f, and go on across the "
                   "container's restarts (a '--- ... restarted: attempt N, container ID ---' line between two "
                   "attempts) until the component is parked or removed, or Ctrl-C (exit 0). This machine only, "
                   "through crictl.")
@click.pass_context
def logs(ctx: click.Context, component: str, previous: bool, tail: int, container: Optional[str],
         follow: bool) -> None:
    """Show the log lines of COMPONENT's container (stdout and stderr, in the order written).

    From crictl on the node first: its newest sandbox, the newest attempt of the container. When
    crictl is missing or cannot answer, from the API server (pods/log, through the node's
    kubeconfig). Which one answered is said on stderr and in the JSON's "source". Control
    characters in the lines (but tabs) are escaped in text output; -o json keeps them exact.

    Exit 3: nothing to show (parked - "not running: parked since ..." -, unknown, not started yet, no
    previous attempt); 2: no such container; 7/9: crictl could not answer and the API neither.
    """
    from cpctl.core import manifests
    from cpctl.ops.logs import LogRequest, component_logs
    manifests.validate_component_name(component)
    request = LogRequest(component, tail, previous, container)
    if follow:
        _follow(ctx, request)
        return
    execute(ctx, lambda node: component_logs(node, request, note), logs_text, probe="none")


def _follow(ctx: click.Context, request: "LogRequest") -> None:
    """``logs -f`` on this machine: the lines as they come, each made printable and redacted."""
    from cpctl.cli.context import clear_progress, printable, state
    from cpctl.errors import CpctlError, ExitCode, Terminated
    from cpctl.host.local import LocalHost
    from cpctl.ops.logs import follow
    from cpctl.ops.wiring import open_node
    from cpctl.redaction import redact_text
    run = state(ctx)
    if run.remote is not None:
        raise CpctlError("logs -f follows a log on this machine only: run it on the master (over SSH: cpctl -H "
                         "HOST logs shows the last lines)", ExitCode.USAGE)
    if run.output not in ("text", "wide") or request.previous:
        raise CpctlError("logs -f prints the lines as they come: as text, and of the running attempt (not with "
                         "-o json/yaml or --previous)", ExitCode.USAGE)
    node = open_node(run.settings, LocalHost(), probe="none", log=note)
    try:
        follow(node, request, note, lambda line: click.echo(redact_text(printable(line, block=True))))
    except (KeyboardInterrupt, Terminated):
        clear_progress()


def logs_text(data: Dict[str, Any]) -> str:
    """The lines themselves, one per line (already made printable by the caller)."""
    return "\n".join(str(line) for line in data.get("lines") or [])

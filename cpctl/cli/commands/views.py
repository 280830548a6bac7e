"""``cpctl status`` and ``cpctl history``: read-only views of each node (parallel over masters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple, TypedDict

import click

from cpctl.cli import completers
from cpctl.cli.fanout import execute
from cpctl.cli.render import history_text, status_text

if TYPE_CHECKING:
    from cpctl.core.node import Node


@click.command()
@click.argument("components", nargs=-1, shell_complete=completers.components)
@click.option("-w", "--watch", is_flag=True,
              help="After the table, print a component's row again each time it changes (its file, pod, restarts "
                   "or last change), like kubectl get -w; Ctrl-C ends it (exit 0). This machine only.")
@click.option("--interval", type=click.FloatRange(0.2, 3600), default=2.0, show_default=True,
              help="With -w: seconds between two looks.")
@click.pass_context
def status(ctx: click.Context, components: Tuple[str, ...], watch: bool, interval: float) -> None:
    """Show each static pod: its file (present, parked, invalid), its pod (STATUS, RESTARTS, AGE) and
    the last change; parked ones since when, by whom, why, until when. -o wide: phase, container
    up, probe, mirror pod, UID, checksum."""
    from cpctl.core import views
    from cpctl.errors import CpctlError, ExitCode
    if watch:
        _watch(ctx, list(components), interval)
        return
    from cpctl.catalogue import ETCD, canonical
    alarms = not components or ETCD in [canonical(c) for c in components]

    def action(node: "Node") -> "views.Report":
        if not alarms:
            return views.status(node, list(components) or None)
        # the cluster's etcd alarms: one question to the node's own etcd, its manifest read in the view's batch
        from cpctl.ops import etcdcare  # loaded only then: a status of other components asks no etcd
        return views.status(node, list(components) or None, also=lambda data: etcdcare.status_alarms(node, data),
                            also_ahead=lambda: etcdcare.alarms_ahead(node))
    shown = execute(ctx, action, status_text)
    broken = [data["unrecovered"] for data in shown if data.get("unrecovered")]
    if broken:   # everything that could be shown was; the exit code says the node needs a hand
        raise CpctlError(broken[0], ExitCode.ENVIRONMENT)


def _watch(ctx: click.Context, components: List[str], interval: float) -> None:
    """``status -w``: the table, then each row again when what it says changes (ages that merely
    grow are no change), a row that went away as ``gone``; until Ctrl-C or SIGTERM (exit 0)."""
    import time

    from cpctl.cli.context import clear_progress, note, printable, state
    from cpctl.core import views
    from cpctl.errors import CpctlError, ExitCode, Terminated
    from cpctl.host.local import LocalHost
    from cpctl.ops.wiring import open_node
    from cpctl.redaction import redact_text
    run = state(ctx)
    if run.remote is not None:
        raise CpctlError("status -w watches this machine's node; for masters over SSH run cpctl status again "
                         "(e.g. with watch(1))", ExitCode.USAGE)
    if run.output not in ("text", "wide"):
        raise CpctlError("status -w prints table rows: use it with -o text or -o wide", ExitCode.USAGE)
    seen: Dict[str, Tuple[object, ...]] = {}
    first = True
    try:
        while True:
            data = views.status(open_node(run.settings, LocalHost(), log=note), components or None)
            rows = data["components"]
            lines = status_text(printable(data)).splitlines()
            now = {str(row["file"]): _watched(row) for row in rows}
            if first:
                click.echo(redact_text("\n".join(lines)))
            elif rows or seen:
                for row, line in zip(rows, lines[2:]):
                    if seen.get(str(row["file"])) != now[str(row["file"])]:
                        click.echo(redact_text(line))
                for gone in sorted(set(seen) - set(now)):
                    click.echo("%s  gone" % printable(gone))
            first, seen = False, now
            time.sleep(interval)
    except (KeyboardInterrupt, Terminated):
        clear_progress()


def _watched(row: Mapping[str, object]) -> Tuple[object, ...]:
    """What a status row says, without the ages that grow by themselves."""
    pod = row.get("observed")
    seen = pod if isinstance(pod, Mapping) else {}
    change = row.get("last_change")
    last = change if isinstance(change, Mapping) else {}
    return (row.get("state"), row.get("pod_state"), row.get("checksum"), row.get("error"), row.get("since"),
            row.get("until"), row.get("overdue"), str(row.get("unconfirmed")), seen.get("uid"), seen.get("phase"),
            seen.get("restarts"), seen.get("container_started"), last.get("action"), last.get("time"))


@click.command()
@click.argument("component", required=False, shell_complete=completers.components)
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
@click.argument("components", nargs=-1, required=True, shell_complete=completers.components)
@click.pass_context
def is_running(ctx: click.Context, components: Tuple[str, ...]) -> None:
    """Exit 0 when every COMPONENT's pod is running and Ready (on every selected master), else 1.

    For scripts, like `systemctl is-active`: one word per component - running, not-ready, absent,
    unknown (nothing could look), parked or invalid - and the exit code says whether all run.
    """
    from cpctl.cli.context import state
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
    if down and state(ctx).output in ("json", "yaml"):
        ctx.exit(int(ExitCode.DRIFT))      # the answer is the document on stdout: nothing on stderr
    if down:
        raise CpctlError("not running: %s" % ", ".join(down), ExitCode.DRIFT)

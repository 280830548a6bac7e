"""``cpctl watch``: thin click layer over :mod:`cpctl.ops.watch` (runs on the node itself)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Callable, Dict, Optional, Tuple

import click

from cpctl.cli.context import as_yaml, printable, state
from cpctl.cli.fanout import local_node

if TYPE_CHECKING:                   # the CLI loads these modules when a command runs
    from types import FrameType

    from cpctl.core.node import Node
    from cpctl.ops.watch import Watch
    from cpctl.probes.base import Waiter


def _writer(output: str) -> Callable[[Dict[str, object]], None]:
    """One line per record, flushed at once: the reader may be a pipe (journald, a test, jq)."""
    from cpctl.ops.watch import format_text

    def write(record: Dict[str, object]) -> None:
        if output == "yaml":
            sys.stdout.write(as_yaml(record, start=True))
            sys.stdout.flush()
            return
        line = json.dumps(record, sort_keys=True) if output == "json" else format_text(printable(record))
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return write


def _waiter(ctx: click.Context) -> Tuple["Node", Optional["Waiter"]]:
    """The configured probe when it can describe pods; None skips the mirror pod follow-ups."""
    from cpctl.ops.drift import can_describe
    node = local_node(ctx)
    return node, (node.waiter if can_describe(node.waiter) else None)


@click.command()
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds to wait for the mirror pod to follow a change (needs --probe api/crictl).")
@click.option("--debounce", type=click.IntRange(0, 10000), default=50, show_default=True, metavar="MS",
              help="Quiet time per file before its verdict, so an editor save gives one line.")
@click.pass_context
def watch(ctx: click.Context, timeout: float, debounce: int) -> None:
    """Say, for every change in the manifests dir, what the kubelet will do.

    One line per burst of changes to a file: load, reload, stop, ignore, reject or duplicate;
    with a probe that can describe pods, a second line when the mirror pod followed (or not).
    Runs on the node itself (inotify is local). SIGTERM/SIGINT end it with exit status 0.
    """
    from cpctl.ops.watch import Watch
    node, waiter = _waiter(ctx)
    relist = node.identity.file_check_frequency.value if node.identity else 20.0
    runner = Watch(node.manifests_dir, _writer(state(ctx).output), waiter=waiter, node_name=node.node_name,
                   timeout=timeout, debounce=debounce / 1000.0, host=node.host, relist=relist)
    status = run_until_signalled(runner)
    if status:
        ctx.exit(status)


def run_until_signalled(runner: "Watch") -> int:
    """Run the watch until SIGTERM/SIGINT: the handlers only enqueue a stop, the loop prints the last
    line (the process's signal handlers are the command's business, not the feature module's)."""
    import signal
    def stopper(name: str) -> Callable[[int, Optional["FrameType"]], None]:
        return lambda _signum, _frame: runner.stop(name)
    names = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
    previous = {signum: signal.signal(signum, stopper(name)) for signum, name in names.items()}
    try:
        runner.start()
        return int(runner.run())
    finally:
        runner.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)

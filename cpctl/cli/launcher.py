"""How the node-side revert runs cpctl (``ops.confirm.Launcher``): made from the run's resolved
options. Its own module so that the fan-out (which restarts dead revert timers before a change,
issue 49) and the confirm commands share it without importing each other."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from cpctl.cli.context import state

if TYPE_CHECKING:
    from cpctl.core.node import Node
    from cpctl.ops.confirm import Launcher


def launcher(ctx: click.Context, node: "Node") -> "Launcher":
    """cpctl as the node-side revert runs it: this interpreter, with the node's resolved global
    options (a systemd unit inherits no environment), and the shipped units' sandbox."""
    from cpctl.ops import sandbox
    from cpctl.ops.confirm import Launcher
    settings = state(ctx).settings
    hardening = [line for line in sandbox.HARDENING.splitlines() if line and not line.startswith("#")]
    if state(ctx).remote is not None:
        return Launcher([], hardening, remote=True)
    command = [sys.executable, "-m", "cpctl", "--manifests-dir", node.manifests_dir, "--state-dir", node.state.path,
               "--node-name", node.node_name, "--kubeconfig", node.kubeconfig, "--crictl", node.crictl,
               "--probe", settings.probe, "--kubelet-dir", settings.kubelet_dir]
    return Launcher(command, hardening)

"""``cpctl certs``: kubeadm's certificates and whether each running component uses them (read-only)."""

from __future__ import annotations

from typing import cast

import click

from cpctl.cli.fanout import execute
from cpctl.cli.render import certs_text


@click.command()
@click.pass_context
def certs(ctx: click.Context) -> None:
    """Show every kubeadm certificate (subject, expiry, chain) and whether each component uses the files.

    Serving certificates are compared with what a TLS handshake on the node returns; client
    certificates the binary never re-reads (the ones embedded in the controller-manager's and the
    scheduler's kubeconfigs) with the container's start time. Verdict per component: current,
    reloading (it re-reads the renewed file by itself, not yet), STALE (restart it: `cpctl restart
    --stale-certs`), or unknown with the reason.
    """
    from cpctl.ops import certs as certops
    execute(ctx, lambda node: dict(certops.report(node)), lambda data: certs_text(cast(certops.Report, data)))

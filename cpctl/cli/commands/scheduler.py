"""``cpctl scheduler add|remove|list``: a thin click layer over :mod:`cpctl.ops.scheduler`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import click

from cpctl import catalogue
from cpctl.cli.fanout import execute

if TYPE_CHECKING:
    from cpctl.ops.scheduler import AddResult, RemoveResult


@click.group()
def scheduler() -> None:
    """Add, remove or list second schedulers (static pods with their own profile name).

    A pod opts in with spec.schedulerName: NAME; pods without it stay with default-scheduler.
    """


@scheduler.command()
@click.argument("name")
@click.option("--from", "source", default=catalogue.KUBE_SCHEDULER, show_default=True,
              help="Manifest to copy (file stem or pod name); a parked one works too.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="--secure-port of the new scheduler [default: first free from 10260].")
@click.option("--config-dir", default=None,
              help="Where to write NAME-config.yaml, on the node [default: the directory holding the "
                   "manifests dir, /etc/kubernetes on kubeadm].")
@click.option("--no-wait", is_flag=True, help="Do not wait for the mirror pod.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
              help="Seconds to wait for the kubelet.")
@click.option("--dry-run", is_flag=True, help="Print the files, a diff and the Lease RBAC check; change nothing.")
@click.option("--grant-rbac", is_flag=True,
              help="When the scheduler's identity may not get/update its Lease, create the Role and RoleBinding "
                   "that allow it (through the API) instead of refusing.")
@click.pass_context
def add(ctx: click.Context, name: str, source: str, port: Optional[int], config_dir: Optional[str], no_wait: bool,
        timeout: float, dry_run: bool, grant_rbac: bool) -> None:
    """Run a second scheduler NAME as a static pod generated from the kube-scheduler manifest.

    Before writing anything, cpctl asks the API (SubjectAccessReview) whether the scheduler's
    identity may get and update its Lease kube-system/NAME: without that it would never take the
    Lease and never schedule. Refused (exit 4, the Role and RoleBinding printed) unless --grant-rbac.
    """
    from cpctl.ops import schedrbac
    from cpctl.ops import scheduler as secondsched
    secondsched.validate_name(name)   # before touching the node
    try:
        execute(ctx, lambda node: secondsched.add(node, name, source, port, config_dir, wait=not no_wait,
                                                  timeout=timeout, dry_run=dry_run, grant_rbac=grant_rbac),
                _dry_run_text if dry_run else _added_text, changing=not dry_run,
                probe="none" if no_wait or dry_run else None)
    except schedrbac.LeaseForbidden as refused:
        click.echo(refused.yaml, nl=False)    # what to apply (kubectl apply -f -), then the one stderr line
        raise


def _dry_run_text(data: "AddResult") -> str:
    return ("dry run: nothing changed. Would write, in this order:\n"
            "  1. %(config_file)s (mode 0644)\n  2. %(manifest_file)s (mode 0600)\n"
            "kube-scheduler v%(version)s -> %(config_api)s, --secure-port=%(port)d, kubeconfig %(kubeconfig)s\n"
            "\n--- %(config_file)s\n%(config)s\n--- %(manifest_file)s\n%(manifest)s\n"
            "--- diff against %(source)s\n%(diff)s" % data) + "\n" + _rbac_text(data["rbac"], data["name"])


def _rbac_text(rbac: dict, name: str) -> str:
    lease = "Lease kube-system/%s" % name
    if rbac["allowed"]:
        return "RBAC: %s may get and update %s." % (rbac["identity"], lease)
    if rbac["allowed"] is None:
        return "RBAC: not checked (%s); if %s may not get and update %s, apply:\n\n%s" % (
            rbac["why"], rbac["identity"], lease, rbac["yaml"])
    return ("RBAC: %s may NOT %s %s: the add would be refused unless --grant-rbac creates (or you apply):\n\n%s"
            % (rbac["identity"], " and ".join(rbac["denied"]), lease, rbac["yaml"]))


def _added_text(data: "AddResult") -> str:
    from cpctl.ops import scheduler as secondsched
    wait = data.get("wait") or {}
    rbac = data["rbac"]
    lease = "granted (Role and RoleBinding cpctl:%s-lease)" % data["name"] if rbac["granted"] else \
        "allowed" if rbac["allowed"] else "not checked: %s" % rbac["why"]
    text = ("%s: added (config %s, manifest %s, --secure-port=%d; Lease RBAC %s) - %s\n\n"
            "Use it by setting spec.schedulerName in a pod, e.g.:\n\n%s"
            % (data["name"], data["config_file"], data["manifest_file"], data["port"], lease, wait.get("detail", ""),
               secondsched.usage_example(data["name"])))
    if rbac["allowed"] is None:
        text += "\n" + _rbac_text(rbac, data["name"])
    return text


@scheduler.command()
@click.argument("name")
@click.option("--no-wait", is_flag=True, help="Do not wait for the pod to be gone.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
              help="Seconds to wait for the kubelet.")
@click.option("--dry-run", is_flag=True, help="Print what would move; change nothing.")
@click.pass_context
def remove(ctx: click.Context, name: str, no_wait: bool, timeout: float, dry_run: bool) -> None:
    """Remove a scheduler `scheduler add` created: its files move to STATE/removed/<time>/."""
    from cpctl.ops import scheduler as secondsched
    secondsched.validate_name(name)
    execute(ctx, lambda node: secondsched.remove(node, name, wait=not no_wait, timeout=timeout, dry_run=dry_run),
            _removed_text, changing=not dry_run, probe="none" if no_wait or dry_run else None)


def _removed_text(data: "RemoveResult") -> str:
    if data["dry_run"]:
        return "dry run: nothing changed. Would move to %s/removed/<time>/:\n%s" % (
            data["state_dir"], "\n".join("  " + f for f in data["files"]))
    kept = "\n  %s" % data["config_kept"] if data.get("config_kept") else ""
    wait = data["wait"] or {}
    return "%s: removed (moved to %s) - %s%s" % (data["name"], data["removed_dir"], wait.get("detail"), kept) + \
        "".join("\n  %s" % line for line in data.get("rbac") or [])


@scheduler.command(name="list")
@click.pass_context
def list_(ctx: click.Context) -> None:
    """List the schedulers cpctl generated on this node: name, port, config, state."""
    from cpctl.ops import scheduler as secondsched
    execute(ctx, lambda node: {"node": node.node_name, "schedulers": secondsched.list_schedulers(node)},
            _list_text)


def _list_text(data: dict) -> str:
    from cpctl.cli.render import table
    rows = data["schedulers"]
    if not rows:
        return "(no schedulers added by cpctl)"
    return table(["NAME", "FILE", "POD", "PORT", "CONFIG"],
                 [[r["name"], "%s (%s)" % (r["file"], r["state"]), r.get("pod_state") or "-", r["port"],
                   "%s%s" % (r["config"], "" if r["config_present"] else " (missing)")] for r in rows])

"""``cpctl scheduler add|remove|list``: a thin click layer over :mod:`cpctl.ops.scheduler`."""

from __future__ import annotations

from typing import Optional

import click

from cpctl.cli.fanout import execute


@click.group()
def scheduler() -> None:
    """Add, remove or list second schedulers (static pods with their own profile name).

    A pod opts in with spec.schedulerName: NAME; pods without it stay with default-scheduler.
    """


@scheduler.command()
@click.argument("name")
@click.option("--from", "source", default="kube-scheduler", show_default=True,
              help="Manifest to copy (file stem or pod name); a parked one works too.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="--secure-port of the new scheduler [default: first free from 10260].")
@click.option("--config-dir", default=None,
              help="Where to write NAME-config.yaml, on the node [default: the directory holding the "
                   "manifests dir, /etc/kubernetes on kubeadm].")
@click.option("--no-wait", is_flag=True, help="Do not wait for the mirror pod.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
              help="Seconds to wait for the kubelet.")
@click.option("--dry-run", is_flag=True, help="Print the files and a diff; change nothing.")
@click.pass_context
def add(ctx: click.Context, name: str, source: str, port: Optional[int], config_dir: Optional[str], no_wait: bool,
        timeout: float, dry_run: bool) -> None:
    """Run a second scheduler NAME as a static pod generated from the kube-scheduler manifest."""
    from cpctl.ops import scheduler as secondsched
    secondsched.validate_name(name)   # before touching the node
    execute(ctx, lambda node: secondsched.add(node, name, source, port, config_dir, wait=not no_wait,
                                              timeout=timeout, dry_run=dry_run),
            _dry_run_text if dry_run else _added_text, changing=not dry_run,
            probe="none" if no_wait or dry_run else None)


def _dry_run_text(data: dict) -> str:
    return ("dry run: nothing changed. Would write, in this order:\n"
            "  1. %(config_file)s (mode 0644)\n  2. %(manifest_file)s (mode 0600)\n"
            "kube-scheduler v%(version)s -> %(config_api)s, --secure-port=%(port)d, kubeconfig %(kubeconfig)s\n"
            "\n--- %(config_file)s\n%(config)s\n--- %(manifest_file)s\n%(manifest)s\n"
            "--- diff against %(source)s\n%(diff)s" % data)


def _added_text(data: dict) -> str:
    from cpctl.ops import scheduler as secondsched
    wait = data.get("wait") or {}
    return ("%s: added (config %s, manifest %s, --secure-port=%d) - %s\n\n"
            "Use it by setting spec.schedulerName in a pod, e.g.:\n\n%s\n"
            "If RBAC is enforced, let system:kube-scheduler renew its Lease (kubectl apply -f -):\n\n%s"
            % (data["name"], data["config_file"], data["manifest_file"], data["port"], wait.get("detail", ""),
               secondsched.usage_example(data["name"]), secondsched.rbac_yaml(data["name"])))


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


def _removed_text(data: dict) -> str:
    if data["dry_run"]:
        return "dry run: nothing changed. Would move to %s/removed/<time>/:\n%s" % (
            data["state_dir"], "\n".join("  " + f for f in data["files"]))
    return "%s: removed (moved to %s) - %s" % (data["name"], data["removed_dir"], data["wait"]["detail"])


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
    return table(["NAME", "STATE", "PORT", "CONFIG", "FILE"],
                 [[r["name"], r["state"] + ("" if r["config_present"] else " (config missing)"), r["port"],
                   r["config"], r["file"]] for r in rows])

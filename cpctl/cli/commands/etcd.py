"""``cpctl etcd status|defrag|alarm list|alarm disarm|recover-space|move-leader``: etcd care
(docs/etcd.md), a thin click layer over :mod:`cpctl.ops.etcdcare`.

Each command acts on the etcd cluster once, through one master's agent and its own etcd client
certificate: this machine, or with ``-H``/``-i`` the first selected master that can be reached
(the next one only when a master cannot be reached: a refusal or a failure is the answer).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Tuple, TypeVar

import click

from cpctl.cli.context import emit, fail, note, printable, state
from cpctl.cli.render import table
from cpctl.errors import CpctlError, ExitCode

if TYPE_CHECKING:
    from cpctl.core.node import Node
    from cpctl.ops.etcdsnap import ListReport, SaveReport

R = TypeVar("R", bound=Mapping[str, Any])

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KB|KiB|MB|MiB|GB|GiB|k|K|M|G)?$")
_UNITS = {"B": 1, "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3, "k": 1024, "K": 1024, "KiB": 1024, "M": 1 << 20,
          "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30}


def parse_size(text: str) -> int:
    """``100MiB``, ``1.5G``, ``0`` as bytes (a usage error otherwise)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise CpctlError("not a size: %r (e.g. 100MiB, 1GiB, 0)" % text, ExitCode.USAGE)
    return int(float(match.group(1)) * _UNITS[match.group(2) or "B"])


def _progress(ctx: click.Context) -> Callable[[str], None]:
    """Progress lines on stderr for a person (none with -o json/yaml)."""
    return note if state(ctx).output == "text" or state(ctx).output == "wide" else (lambda text: None)


def on_cluster(ctx: click.Context, action: Callable[["Node"], R], text_of: Callable[[R], str],
               changing: bool) -> None:
    """``action`` once: on this machine, or through the first selected master that can be reached
    (``-o json``: the fan-out's shape, with a block for each master tried)."""
    from cpctl.cli.fanout import execute, hosted, run_on_hosts
    from cpctl.fleet.runner import HostResult, stats
    from cpctl.fleet.targets import exit_code, failure_line, select_specs
    cli_state = state(ctx)
    if cli_state.remote is None:
        execute(ctx, action, text_of, changing=changing, probe="none")
        return
    results: List[HostResult[R]] = []
    for spec in select_specs(cli_state.remote):
        results += run_on_hosts(ctx, [spec], action, changing, probe="none")
        if not results[-1].failed or exit_code(results[-1:]) != ExitCode.UNREACHABLE:
            break                      # an answer (a refusal, a failure), not a master that cannot be asked
    blocks = [{"host": r.host, "status": r.status, "error": r.error, "elapsed_seconds": round(r.elapsed, 3),
               "data": hosted(r.data, r.host)} for r in results]
    text = "\n".join("== %s: %s ==\n%s" % (printable(r.host), r.status, text_of(printable(r.data)) if
                                             isinstance(r.data, dict) else "error: %s" % printable(r.error or ""))
                     for r in results)
    emit(ctx, {"hosts": blocks, "recap": stats(results)}, text)
    code = exit_code(results[-1:])
    if code:
        fail(failure_line(results[-1:]), code)
        ctx.exit(code)


@click.group()
def etcd() -> None:
    """etcd care: status, rolling defragmentation, alarms, NOSPACE recovery, leadership (docs/etcd.md).

    Asked through the node's agent with its own etcd client certificate: no etcdctl, no
    certificate flags.
    """


# --------------------------------------------------------------------------- status

@etcd.command("status")
@click.pass_context
def status_cmd(ctx: click.Context) -> None:
    """Show the cluster ID and each member: ID, name, voter or learner, leader, version, DB size and
    size in use, raft term and index, URLs, health and alarms (etcdctl endpoint status --cluster)."""
    from cpctl.ops import etcdcare
    on_cluster(ctx, etcdcare.status, status_text, changing=False)


def status_text(data: Mapping[str, Any]) -> str:
    lines = list(data.get("interrupted") or [])
    rows = []
    for m in data["members"]:
        role = "learner" if m["learner"] else "leader" if m["leader"] else "follower"
        frag = "-" if m["fragmentation"] is None else "%.0f%%" % (m["fragmentation"] * 100)
        rows.append([m["id"], m["name"] or "(unstarted)", role, m["version"] or "-", _size(m["db_size"]),
                     _size(m["db_size_in_use"]), frag, _num(m["raft_term"]), _num(m["raft_index"]),
                     _num(m["revision"]), "healthy" if m["healthy"] else "unhealthy: %s" % (m["why"] or "?"),
                     ",".join(m["alarms"]) or "-", ",".join(m["client_urls"]) or "-"])
    lines.append("cluster %s: %d of %d voting members healthy (quorum %d), leader %s" % (
        data["cluster_id"], data["voters_healthy"], data["voters"], data["quorum"], data["leader"] or "NONE"))
    lines.append(table(["ID", "NAME", "ROLE", "VERSION", "DB SIZE", "IN USE", "FREE", "RAFT TERM", "RAFT INDEX",
                        "REVISION", "HEALTH", "ALARMS", "CLIENT URLS"], rows))
    if data.get("alarm_error"):
        lines.append("the alarms could not be read: %s" % data["alarm_error"])
    return "\n".join(lines)


def _size(value: object) -> str:
    """A byte count from cpctl's own answer (an int), as etcdctl's table shows it; "-" when unknown."""
    from cpctl.ops.etcdcare import size_text
    return size_text(value) if isinstance(value, int) and not isinstance(value, bool) else "-"


def _num(value: object) -> str:
    return "-" if value is None else str(value)


# --------------------------------------------------------------------------- defrag

@etcd.command("defrag")
@click.argument("members", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every member of the cluster.")
@click.option("--min-free", default="100MiB", show_default=True,
              help="Skip a member with less free space in its database than this (0: none skipped).")
@click.option("--min-ratio", type=click.FloatRange(0.0, 1.0), default=0.45, show_default=True,
              help="Skip a member whose free share of its database is below this (OpenShift's 45 %).")
@click.option("--timeout", type=click.FloatRange(1, 86400), default=600.0, show_default=True,
              help="Seconds one member's defragmentation may take.")
@click.option("--dry-run", is_flag=True, help="Print the order and why; change nothing.")
@click.pass_context
def defrag(ctx: click.Context, members: Tuple[str, ...], everything: bool, min_free: str, min_ratio: float,
           timeout: float, dry_run: bool) -> None:
    """Defragment MEMBERS (or --all) one at a time: learners, followers, then the leader after its
    leadership moved to a healthy voter; each checked healthy, and the quorum counted with it down,
    first (exit 4 when it would lose quorum)."""
    from cpctl.ops import etcdcare
    if bool(members) == everything:
        raise CpctlError("name the members to defragment, or --all (not both)", ExitCode.USAGE)
    free = parse_size(min_free)
    progress = _progress(ctx)
    on_cluster(ctx, lambda node: etcdcare.defrag(node, members, free, min_ratio, dry_run, timeout, progress),
               defrag_text, changing=not dry_run)


def defrag_text(data: Mapping[str, Any]) -> str:
    lines = list(data.get("interrupted") or [])
    if data.get("dry_run"):
        lines.append("dry run (nothing changed): the order and why")
    for n, step in enumerate(data.get("steps") or [], 1):
        if data.get("dry_run") or step["action"] == "skip":
            lines.append("%d. %s %s: %s" % (n, step["action"], step["member"], step["why"]))
        else:
            lines.append("%d. defragmented %s: %s -> %s in %.1f s%s" % (
                n, step["member"], _size(step["db_size"]), _size(step["db_size_after"]), step["seconds"] or 0,
                " (leadership moved to %s first)" % step["moved_leader_to"] if step.get("moved_leader_to") else ""))
    return "\n".join(lines) or "no member to defragment"


# --------------------------------------------------------------------------- alarms

@etcd.group("alarm")
def alarm() -> None:
    """List or disarm etcd's alarms (NOSPACE, CORRUPT)."""


@alarm.command("list")
@click.pass_context
def alarm_list(ctx: click.Context) -> None:
    """List the active alarms and the members that raised them."""
    from cpctl.ops import etcdcare
    on_cluster(ctx, etcdcare.alarm_list, alarm_text, changing=False)


@alarm.command("disarm")
@click.option("--alarm", "kinds", type=click.Choice(["NOSPACE", "CORRUPT"]), multiple=True,
              help="The kind to disarm [default: NOSPACE]. CORRUPT only when named: it means members' data "
                   "differ, and disarming it hides that.")
@click.option("--dry-run", is_flag=True, help="Print what would be disarmed; change nothing.")
@click.pass_context
def alarm_disarm(ctx: click.Context, kinds: Tuple[str, ...], dry_run: bool) -> None:
    """Disarm the active alarms of a kind (etcdctl alarm disarm). For NOSPACE, `cpctl etcd
    recover-space` frees the space first: a disarm alone is raised again by the next write."""
    from cpctl.ops import etcdcare
    on_cluster(ctx, lambda node: etcdcare.alarm_disarm(node, kinds or ("NOSPACE",), dry_run), alarm_text,
               changing=not dry_run)


def alarm_text(data: Mapping[str, Any]) -> str:
    lines = ["%s alarm of %s (%s)%s" % (a["alarm"], a["member"], a["member_id"],
                                        " disarmed" if a in (data.get("disarmed") or []) else "")
             for a in (data.get("disarmed") or []) + (data.get("alarms") or [])]
    return "\n".join([data["message"]] + lines)


# --------------------------------------------------------------------------- recover-space

@etcd.command("recover-space")
@click.option("--timeout", type=click.FloatRange(1, 86400), default=600.0, show_default=True,
              help="Seconds the compaction, and each member's defragmentation, may take.")
@click.option("--dry-run", is_flag=True, help="Print the steps; change nothing.")
@click.pass_context
def recover_space(ctx: click.Context, timeout: float, dry_run: bool) -> None:
    """The NOSPACE runbook in one command: compact to the current revision, defragment every member
    (rolling, as `etcd defrag`), disarm NOSPACE, and check that a write succeeds. Runs with a NOSPACE
    alarm, or without one when a member's database is at 95 % of its quota; else nothing to do.
    Refused with the reason when the alarm is CORRUPT or the space did not come back."""
    from cpctl.ops import etcdcare
    progress = _progress(ctx)
    on_cluster(ctx, lambda node: etcdcare.recover_space(node, dry_run, timeout, progress), recover_text,
               changing=not dry_run)


def recover_text(data: Mapping[str, Any]) -> str:
    steps = defrag_text({"steps": data.get("steps") or [], "dry_run": data.get("dry_run")}) \
        if data.get("steps") else ""
    return "\n".join(x for x in (steps, data["message"]) if x)


# --------------------------------------------------------------------------- move-leader

@etcd.command("move-leader")
@click.option("--to", "to", default="", help="The member to lead [default: the most up-to-date healthy voter].")
@click.option("--dry-run", is_flag=True, help="Print the move; change nothing.")
@click.pass_context
def move_leader(ctx: click.Context, to: str, dry_run: bool) -> None:
    """Hand etcd's leadership to another healthy voting member (etcdctl move-leader, Talos'
    forfeit-leadership) and wait until every member agrees."""
    from cpctl.ops import etcdcare
    on_cluster(ctx, lambda node: etcdcare.move_leader(node, to, dry_run), lambda data: str(data["message"]),
               changing=not dry_run)


# --------------------------------------------------------------------------- snapshots

@etcd.group("snapshot")
def snapshot() -> None:
    """Save, list and schedule snapshots of the node's own etcd member (docs/etcd.md "Snapshots")."""


@snapshot.command("save")
@click.argument("file", required=False, default="")
@click.option("--keep", type=click.IntRange(0, 100000), default=0,
              help="After the save, keep only the newest N snapshots of the default place (0: keep all).")
@click.option("--timeout", type=click.FloatRange(1, 86400), default=3600.0, show_default=True,
              help="Seconds the whole snapshot stream may take.")
@click.option("--prometheus-textfile", "textfile", default="",
              help="Also write the age metric of the last good snapshot to this .prom file (node_exporter).")
@click.pass_context
def snapshot_save(ctx: click.Context, file: str, keep: int, timeout: float, textfile: str) -> None:
    """Save a snapshot of the node's own etcd member to FILE (an absolute path on the node), else to
    STATE/snapshots/etcd-snapshot-TIME.db. Written as a dot-temp file, fsynced, renamed, 0600, only
    after etcd's appended sha256 matched and the file read as an etcd database (revision, keys).
    With -H/-i the file is written on the master, not on this machine."""
    from cpctl.ops import etcdsnap
    if keep and file:
        raise CpctlError("--keep prunes the default place (STATE/snapshots): give no FILE with it", ExitCode.USAGE)

    def action(node: "Node") -> "etcdsnap.SaveReport":
        try:
            report = etcdsnap.save(node, file, keep, timeout)
        except CpctlError:
            if textfile:
                etcdsnap.write_metrics(node, textfile, failed=True)
            raise
        if textfile:
            etcdsnap.write_metrics(node, textfile, failed=False)
        return report
    on_cluster(ctx, action, snapshot_save_text, changing=True)


def snapshot_save_text(data: "SaveReport") -> str:
    lines = ["removed a partial snapshot left by a killed save: %s" % n for n in data.get("swept") or []]
    lines.append(str(data["message"]))
    lines += ["removed %s (beyond --keep)" % n for n in data.get("pruned") or []]
    return "\n".join(lines)


@snapshot.command("list")
@click.pass_context
def snapshot_list(ctx: click.Context) -> None:
    """List the snapshots in STATE/snapshots (on each selected master with -H/-i): size, revision,
    keys and the sha256 checked when each was saved."""
    from cpctl.cli.fanout import execute
    from cpctl.ops import etcdsnap
    execute(ctx, etcdsnap.list_snapshots, snapshot_list_text, changing=False, probe="none")


def snapshot_list_text(data: "ListReport") -> str:
    rows = [[s["name"], str(s["size"]), _num(s["revision"]), _num(s["keys"]), s["member"] or "-",
             s["saved"] or "-", "yes" if s["verified"] else "no (no sound record)"] for s in data["snapshots"]]
    out = [str(data["message"])]
    if rows:
        out.append(table(["NAME", "BYTES", "REVISION", "KEYS", "MEMBER", "SAVED", "CHECKED"], rows))
    return "\n".join(out)


@snapshot.command("schedule")
@click.option("--every", default="6h", show_default=True,
              help="How often: minutes dividing an hour (15min), hours dividing a day (6h) or 1d.")
@click.option("--keep", type=click.IntRange(1, 100000), default=28, show_default=True,
              help="Snapshots kept in STATE/snapshots (the oldest beyond it removed after each save).")
@click.option("--prefix", default="/etc/systemd/system", show_default=True, help="Directory to write the units to.")
@click.option("--cpctl-path", default=None, metavar="PATH", help="cpctl executable for ExecStart [default: this one].")
@click.option("--enable", is_flag=True, help="Also run systemctl daemon-reload and enable --now the timer.")
@click.pass_context
def snapshot_schedule(ctx: click.Context, every: str, keep: int, prefix: str, cpctl_path: Optional[str],
                      enable: bool) -> None:
    """Install cpctl-etcd-snapshot.service/.timer on this machine, beside the drift timer and with
    its sandbox: `cpctl etcd snapshot save --keep N` on a calendar, writing the age metric of the
    last good snapshot for node_exporter (examples/prometheus/cpctl.rules.yml alerts on it)."""
    import os

    from cpctl.cli.commands import systemd as units
    from cpctl.cli.fanout import local_host
    path = units.check_cpctl_path(cpctl_path or units.default_cpctl_path())
    rendered = units.render_snapshot(path, every, keep)
    units.check_runnable(path)
    host = local_host(ctx)
    if not os.path.isdir(prefix):
        host.makedirs(prefix, 0o755)
    written = []
    for name, text in rendered.items():
        host.write_atomic(os.path.join(prefix, name), text.encode("utf-8"), 0o644)
        written.append(os.path.join(prefix, name))
    commands = ["systemctl daemon-reload", "systemctl enable --now cpctl-etcd-snapshot.timer"]
    ran = []
    for command in commands if enable else []:
        result = host.run(command.split(), timeout=120)
        if not result.ok:
            raise CpctlError("%s failed (exit %d): %s" % (command, result.rc, printable(
                result.stderr.decode("utf-8", "replace").strip())), ExitCode.ENVIRONMENT)
        ran.append("ran: %s" % command)
    calendar, words = units.calendar_of(every)
    text = "\n".join(["wrote %s" % w for w in written] + ["snapshots %s (OnCalendar=%s), keeping %d" % (
        words, calendar, keep)] + (ran or ["enable it with:", "  " + " && ".join(commands)]))
    emit(ctx, {"written": written, "cpctl": path, "every": every, "calendar": calendar, "keep": keep,
               "commands": commands, "ran": ran}, text)

"""``cpctl systemd install|show``: the periodic drift check and the watch as systemd units.

The unit texts are rendered here from one template (the repo's ``systemd/`` directory holds
the same texts rendered for /usr/local/bin/cpctl, and a test keeps both identical), so an
installed package never needs data files to find them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Dict, Mapping, Optional, Sequence, Tuple

import click

from cpctl.cli.context import emit, note
from cpctl.cli.fanout import local_host
from cpctl.ops import sandbox

DEFAULT_CPCTL = "/usr/local/bin/cpctl"
DEFAULT_PREFIX = "/etc/systemd/system"
TEXTFILE = "/var/lib/node_exporter/textfile_collector/cpctl.prom"
PLACEHOLDER = "@CPCTL@"

# The units' sandbox (ops/sandbox.HARDENING): ProtectSystem=strict makes the whole tree read-only, so
# the check unit lists the three places --fix and the metrics write to.
_HARDENING = sandbox.HARDENING

CHECK_SERVICE = """\
[Unit]
Description=cpctl drift check of the control-plane static pod manifests
After=kubelet.service
ConditionPathIsDirectory=/etc/kubernetes/manifests

[Service]
Type=oneshot
# An unconfirmed change (--confirm-within) past its deadline whose own timer was lost (a transient
# unit is gone after a reboot) is reverted first - the check itself never reverts anything. "-": a
# revert that fails is logged (ERROR:) and the check below still runs and reports the overdue arm.
ExecStart=-@CPCTL@ revert-unconfirmed --overdue
ExecStart=@CPCTL@ check --prometheus-textfile """ + TEXTFILE + """
# 1 = drift found: reported through the metrics and the journal, the check itself worked.
# Any other non-zero code (7 environment, 5 locked, ...) still marks the unit failed.
SuccessExitStatus=1
StateDirectory=cpctl
StateDirectoryMode=0700
ReadWritePaths=/etc/kubernetes/manifests /var/lib/cpctl -/var/lib/node_exporter/textfile_collector
TimeoutStartSec=15min
""" + _HARDENING

CHECK_TIMER = """\
[Unit]
Description=Run the cpctl drift check every 5 minutes

[Timer]
OnBootSec=2min
# OnCalendar (not OnUnitActiveSec) so that Persistent= applies: a run missed while the node
# was down happens right after boot.
OnCalendar=*:0/5
Persistent=true
RandomizedDelaySec=30s
AccuracySec=1s

[Install]
WantedBy=timers.target
"""

WATCH_SERVICE = """\
[Unit]
Description=cpctl watch: log what the kubelet will do with each manifests dir change
After=kubelet.service

[Service]
Type=simple
ExecStart=@CPCTL@ -o json watch
Restart=on-failure
RestartSec=5s
""" + _HARDENING + """
[Install]
WantedBy=multi-user.target
"""

SNAPSHOT_TEXTFILE = "/var/lib/node_exporter/textfile_collector/cpctl-etcd-snapshot.prom"
SNAPSHOT_EVERY = "6h"
SNAPSHOT_KEEP = 28

# `cpctl etcd snapshot schedule` (docs/etcd.md "Snapshots"): beside the drift timer, the same sandbox.
# The snapshot dir is under the state dir (/var/lib/cpctl/snapshots); the etcd client key is read
# with CAP_DAC_READ_SEARCH like the check reads the manifests.
SNAPSHOT_SERVICE = """\
[Unit]
Description=cpctl etcd snapshot of this master's own etcd member
After=kubelet.service
ConditionPathExists=/etc/kubernetes/manifests/etcd.yaml

[Service]
Type=oneshot
ExecStart=@CPCTL@ etcd snapshot save --keep @KEEP@ --prometheus-textfile """ + SNAPSHOT_TEXTFILE + """
StateDirectory=cpctl
StateDirectoryMode=0700
ReadWritePaths=/var/lib/cpctl -/var/lib/node_exporter/textfile_collector
# a snapshot of a few GiB streams in minutes; the save's own --timeout (1 h) ends a hung one first
TimeoutStartSec=2h
Nice=10
IOSchedulingClass=best-effort
IOSchedulingPriority=7
""" + _HARDENING

SNAPSHOT_TIMER = """\
[Unit]
Description=Save an etcd snapshot with cpctl @EVERY_TEXT@

[Timer]
OnBootSec=10min
# OnCalendar (not OnUnitActiveSec) so that Persistent= applies: a snapshot missed while the node
# was down is taken right after boot.
OnCalendar=@CALENDAR@
Persistent=true
RandomizedDelaySec=5min
AccuracySec=1min

[Install]
WantedBy=timers.target
"""

SNAPSHOT_UNITS = ("cpctl-etcd-snapshot.service", "cpctl-etcd-snapshot.timer")


def calendar_of(every: str) -> Tuple[str, str]:
    """(OnCalendar, words) for ``--every``: minutes dividing an hour (``15min``), hours dividing a
    day (``6h``) or ``1d``: a calendar keeps the times fixed and lets Persistent= catch up."""
    from cpctl.errors import CpctlError, ExitCode
    match = re.fullmatch(r"(\d{1,4})\s*(min|m|h|d)", every.strip())
    amount, unit = (int(match.group(1)), match.group(2)) if match else (0, "")
    if unit in ("min", "m") and amount in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30):
        return "*-*-* *:00/%d:00" % amount, "every %d minutes" % amount
    if unit == "h" and amount in (1, 2, 3, 4, 6, 8, 12):
        return "*-*-* 00/%d:00:00" % amount, "every %d hour%s" % (amount, "s" if amount > 1 else "")
    if (unit == "d" and amount == 1) or (unit == "h" and amount == 24):
        return "*-*-* 00:00:00", "every day"
    raise CpctlError("--every %r: give minutes that divide an hour (15min), hours that divide a day (6h) or 1d"
                     % every, ExitCode.USAGE)


def render_snapshot(cpctl_path: str = DEFAULT_CPCTL, every: str = SNAPSHOT_EVERY,
                    keep: int = SNAPSHOT_KEEP) -> Dict[str, str]:
    """The snapshot service and timer for ``--every``/``--keep`` (ExecStart: ``cpctl_path``)."""
    calendar, words = calendar_of(every)
    texts = (SNAPSHOT_SERVICE.replace("@KEEP@", str(int(keep))),
             SNAPSHOT_TIMER.replace("@CALENDAR@", calendar).replace("@EVERY_TEXT@", words))
    return {name: text.replace(PLACEHOLDER, cpctl_path) for name, text in zip(SNAPSHOT_UNITS, texts)}


UNITS = {"cpctl-check.service": CHECK_SERVICE, "cpctl-check.timer": CHECK_TIMER,
         "cpctl-watch.service": WATCH_SERVICE}

_SAFE_PATH = sandbox.SAFE_PATH


def render(cpctl_path: str = DEFAULT_CPCTL) -> dict:
    """unit file name -> text with ExecStart pointing at ``cpctl_path``."""
    return {name: text.replace(PLACEHOLDER, cpctl_path) for name, text in UNITS.items()}


def enable_commands(prefix: str = DEFAULT_PREFIX) -> list:
    commands = ["systemctl daemon-reload", "systemctl enable --now cpctl-check.timer"]
    return commands if prefix == DEFAULT_PREFIX else ["# units written to %s (not systemd's search path?)"
                                                      % prefix] + commands


def default_cpctl_path() -> Optional[str]:
    """The cpctl executable running now (console script), else the one on PATH."""
    argv0 = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "cpctl" and os.access(argv0, os.X_OK):
        return argv0
    return shutil.which("cpctl")


def check_cpctl_path(path: Optional[str]) -> str:
    """systemd wants an absolute path; refuse characters systemd would interpret (%, $, spaces)."""
    from cpctl.errors import CpctlError, ExitCode
    if not path:
        raise CpctlError("cannot tell where the cpctl executable is: pass --cpctl-path", ExitCode.USAGE)
    if not _SAFE_PATH.match(path):
        raise CpctlError("--cpctl-path %r: use an absolute path of letters, digits and ._+/- only" % path,
                         ExitCode.USAGE)
    return path


# What the units' sandbox hides from ExecStart (one rule, shared with the --confirm-within revert unit).
HIDDEN_FROM_UNITS = sandbox.HIDDEN_FROM_UNITS
GOOD_INSTALL = ("install cpctl where the units can run it, e.g. python3 -m venv /opt/cpctl && /opt/cpctl/bin/pip "
                "install <cpctl wheel or source> (then --cpctl-path /opt/cpctl/bin/cpctl), or PIPX_HOME=/opt/pipx "
                "PIPX_BIN_DIR=/usr/local/bin pipx install <cpctl wheel or source>")


def unrunnable(path: str, hidden: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why the hardened units could not run ``path`` (None: they can): it must exist, be an
    executable file, and neither it, the file a symlink leads to, nor a script's interpreter
    (its ``#!`` line: a venv's python) may lie where the sandbox hides files."""
    hidden = HIDDEN_FROM_UNITS if hidden is None else hidden
    for what, candidate in (("", path), (" (symlink target)", os.path.realpath(path))):
        why = sandbox.hidden_reason(candidate, what, hidden)
        if why:
            return why
    if not os.path.exists(path):
        return "%s does not exist" % path
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        return "%s is not an executable file" % path
    interpreter = _interpreter(path)
    if interpreter:
        why = unrunnable(interpreter, hidden)
        if why:
            return "its interpreter (#!%s): %s" % (interpreter, why)
    return None


def _interpreter(path: str) -> Optional[str]:
    """The absolute interpreter path of a ``#!`` script (a console script's python), else None."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    return words[0] if words and words[0].startswith("/") else None


# Pythons a venv the units can run may be made from (the distribution's, a local build's).
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def install_hint(path: str, hidden: Optional[Mapping[str, str]] = None, pythons: Optional[Sequence[str]] = None) -> str:
    """How to install cpctl so the units can run ``path``'s replacement. When the script's own
    interpreter is what the sandbox hides (a venv made from a pyenv or home-dir Python: the venv's
    python links there and its standard library stays there), repeating "python3 -m venv" with the
    same python3 would fail the same way: name a Python the units can see instead."""
    interpreter = _interpreter(path)
    target = os.path.realpath(interpreter) if interpreter else ""
    if not interpreter or target == interpreter or not unrunnable(target, hidden):
        return GOOD_INSTALL
    usable = next((p for p in (SYSTEM_PYTHONS if pythons is None else pythons)
                   if os.path.exists(p) and not unrunnable(p, hidden)), None)
    made = "its python %s is a link to %s, which the units cannot see" % (interpreter, target)
    if usable is None:
        return ("%s: install a Python outside /home, /root and /tmp (apt-get install python3-venv), then make the "
                "venv from it: /usr/bin/python3 -m venv /opt/cpctl && /opt/cpctl/bin/pip install <cpctl wheel or "
                "source>, then --cpctl-path /opt/cpctl/bin/cpctl" % made)
    return ("%s, and a venv made from it would be too: make it from %s instead (%s -m venv /opt/cpctl && "
            "/opt/cpctl/bin/pip install <cpctl wheel or source>), then --cpctl-path /opt/cpctl/bin/cpctl"
            % (made, usable, usable))


def check_runnable(path: str) -> None:
    """Refuse (exit 4) to write units whose ExecStart the sandbox cannot run: they would fail at
    every timer tick with status 203/EXEC, and nothing else would say why."""
    from cpctl.errors import CpctlError, ExitCode
    why = unrunnable(path)
    if why:
        raise CpctlError("refusing to install units with ExecStart=%s: %s" % (path, why), ExitCode.REFUSED,
                         hint=install_hint(path))


_cpctl_path_option = click.option("--cpctl-path", default=None, metavar="PATH",
                                  help="cpctl executable for ExecStart [default: this one].")


@click.group()
def systemd() -> None:
    """Install or show the systemd units: cpctl-check.service/.timer (drift check every 5 min,
    node_exporter metrics) and cpctl-watch.service."""


@systemd.command()
@click.option("--prefix", default=DEFAULT_PREFIX, show_default=True, help="Directory to write the units to.")
@_cpctl_path_option
@click.option("--enable", is_flag=True, help="Also run systemctl daemon-reload and enable --now the timer.")
@click.pass_context
def install(ctx: click.Context, prefix: str, cpctl_path: Optional[str], enable: bool) -> None:
    """Write the units (atomically, 0644) and print the systemctl commands to enable them.

    Refused (exit 4) when the cpctl executable is somewhere the units' sandbox hides (/tmp,
    /var/tmp, /home, /root: PrivateTmp, ProtectHome), missing or not executable - including a
    script whose interpreter (a venv's python) lies there. Install cpctl under /opt or /usr/local.
    """
    path = check_cpctl_path(cpctl_path or default_cpctl_path())
    host = local_host(ctx)
    check_runnable(path)
    if not os.path.isdir(prefix):
        host.makedirs(prefix, 0o755)
    written = []
    for name, text in render(path).items():
        host.write_atomic(os.path.join(prefix, name), text.encode("utf-8"), 0o644)
        written.append(os.path.join(prefix, name))
    ran = _enable(host) if enable else []
    commands = enable_commands(prefix)
    text = "\n".join(["wrote %s" % w for w in written] +
                     (ran or ["enable the periodic check with:", "  " + " && ".join(c for c in commands
                                                                                  if not c.startswith("#")),
                              "optional, the watch log: systemctl enable --now cpctl-watch.service"]))
    emit(ctx, {"written": written, "cpctl": path, "commands": commands, "ran": ran}, text)


def _enable(host: object) -> list:
    from cpctl.errors import CpctlError, ExitCode
    ran = []
    for command in enable_commands():
        result = host.run(command.split(), timeout=120)  # type: ignore[attr-defined]
        if not result.ok:
            raise CpctlError("%s failed (exit %d): %s" % (command, result.rc,
                                                         result.stderr.decode("utf-8", "replace").strip()),
                             ExitCode.ENVIRONMENT)
        ran.append("ran: %s" % command)
    return ran


@systemd.command()
@_cpctl_path_option
@click.argument("unit", required=False, type=click.Choice(sorted(UNITS)))
@click.pass_context
def show(ctx: click.Context, cpctl_path: Optional[str], unit: Optional[str]) -> None:
    """Print the unit files (or one UNIT) and the commands that enable them."""
    path = cpctl_path or default_cpctl_path() or DEFAULT_CPCTL
    if cpctl_path is None and path != DEFAULT_CPCTL:
        note("ExecStart uses %s (pass --cpctl-path to change it)" % path)
    units = render(check_cpctl_path(path))
    if unit:
        units = {unit: units[unit]}
    text = "\n".join("# %s\n%s" % (name, body) for name, body in units.items())
    text += "\n# then:\n# " + "\n# ".join(c.lstrip("# ") for c in enable_commands())
    emit(ctx, {"units": units, "commands": enable_commands()}, text)

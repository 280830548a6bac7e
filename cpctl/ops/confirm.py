"""Commit-confirmed changes: arm a revert on the node, confirm it, or let it revert.

``apply``/``edit``/``flags``/``rollback --confirm-within D`` first make the change as always
(validated, written, verified, rolled back on failure). Then :func:`arm`:

0. (:func:`preflight`, before the change) refuses when that revert could not run on the node;
1. starts a node-side timer that runs ``cpctl revert-unconfirmed COMPONENT --op OP`` when the arm is
   due by the node's clock: a persistent systemd timer + service in /etc/systemd/system (unit
   ``cpctl-confirm-<component>``, ``OnCalendar=`` the UTC deadline with ``Persistent=true``, enabled:
   it fires after a reboot too; the shipped units' hardening) when systemd is PID 1, else a detached
   process (its own session, reparented to init when cpctl exits) whose pid is recorded;
2. records the arm in the state dir through the journal (history ``armed``).

The timer comes first: a cpctl killed in between leaves a timer that finds no arm and does nothing
(the change then stands unarmed, as a plain change); once the arm is recorded, a revert happens
even if cpctl, its terminal or its SSH session die, or the node reboots: by the persistent timer,
or - when a detached-process timer was lost (a node without systemd dies with it) - by ``cpctl
revert-unconfirmed --overdue`` (:func:`revert_overdue`; the shipped ``cpctl-check.service`` runs it
every 5 minutes). No other command reverts an overdue arm: read-only ones report it, changes of the
armed component refuse (``Arm.refusal``), ``confirm`` of it refuses (too late).

:func:`confirm` stops the timer and removes the arm (history ``confirmed``). :func:`revert` puts
the arm's revision back - manifest and companion files - through the one change path and the
normal verification (no automatic roll-forward: a revert that does not become healthy is left in
place and reported, exit 12) and removes the arm (history ``reverted``). It reverts only the bytes
it armed: when another writer replaced them it refuses (exit 10) and drops the arm; when the
revision is no longer kept it refuses (exit 4), nothing changed. What it did goes to the node's log
(syslog/journald) since no terminal may be left.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    TypeVar,
    cast,
)

from cpctl.core import confirmations, journal, manifests, revisions
from cpctl.core.confirmations import Arm
from cpctl.core.node import Node
from cpctl.core.replace import replace_change, revisions_of
from cpctl.core.state import StateDir, user_label
from cpctl.errors import CpctlError, ExitCode, Interrupted, Terminated, interrupted_by
from cpctl.ops import edits, sandbox
from cpctl.timeutil import iso

if TYPE_CHECKING:
    from cpctl.host.base import NodeApiAccess, PlanPatch, PlanVerdict, PlanVerify, RevertPlan, RunResult

SYSTEMD_DIR = "/run/systemd/system"       # exists when systemd is PID 1 (sd_booted)
TIMER_ENV = "CPCTL_CONFIRM_TIMER"         # force "systemd" or "process" (tests, odd init systems)
CHECK_POLL = 1.0
UNIT_PREFIX = "cpctl-confirm-"
UNIT_DIR = "/etc/systemd/system"          # the persistent revert unit: survives a reboot (docs/confirm.md)
CRON_DIR = "/etc/cron.d"                  # a node without systemd: the @reboot entry that restarts the revert
BOOT_DIR_ENV = "CPCTL_CONFIRM_BOOT_DIR"   # another dir for that entry (tests: never this machine's /etc/cron.d)
RETRY_FIRST, RETRY_MAX = 5.0, 300.0       # a revert that meets an environment error retries: 5 s, 10 s, ... 5 min


@dataclass
class ConfirmOptions:
    """``--confirm-within`` (seconds) and ``--confirm-check``."""

    within: int
    check: str = ""
    reason: Optional[str] = None


@dataclass
class Launcher:
    """How the node-side revert is started: ``command`` is cpctl with the node's global options
    (``revert-unconfirmed COMPONENT --op OP`` is appended), ``hardening`` the shipped units'
    sandbox lines (``Name=value``) for the persistent revert unit."""

    command: List[str]
    hardening: Sequence[str] = ()
    remote: bool = False             # the node is a master over SSH: no cpctl there (``_start_remote``)


def unit_name(component: str) -> str:
    return UNIT_PREFIX + component


# --- arm ----------------------------------------------------------------------------------------
def preflight(node: Node, launcher: Launcher) -> None:
    """Refuse (exit 4) BEFORE the change when the node-side revert could not run: no interpreter on
    the node, or - where the revert is a systemd unit - an interpreter, state dir, manifests dir or
    kubeconfig that the unit's sandbox hides (``ProtectHome``: /root, /home; ``PrivateTmp``: /tmp,
    /var/tmp; the rule ``cpctl systemd install`` refuses by, ``ops.sandbox``), or a path a unit file
    cannot carry. Nothing is changed, nothing armed."""
    systemd = timer_kind(node) == "systemd"
    interpreter = _node_python(node) if launcher.remote else (launcher.command[0] if launcher.command else "")
    where = "on %s" % node.node_name
    if not interpreter:
        raise _refuse_arm("there is no python3 %s to run the node-side revert" % where)
    paths = [("the interpreter", interpreter), ("the state dir", node.state.path),
             ("the manifests dir", node.manifests_dir)]
    if not launcher.remote and node.kubeconfig:
        paths.append(("the kubeconfig", node.kubeconfig))
    for what, path in paths if systemd else []:
        if not sandbox.SAFE_PATH.match(path):
            raise _refuse_arm("%s %r is not a plain absolute path a unit file can carry (letters, digits, ._+/-)"
                              % (what, path))
        real = _node_realpath(node, path)
        why = sandbox.hidden_reason(path) or (sandbox.hidden_reason(real, " (symlink target)") if real else None)
        if why:
            raise _refuse_arm("%s: %s" % (what, why))
    real = _node_realpath(node, interpreter)
    found = node.host.lstat(real) if real else None
    if found is None or found["kind"] != "file" or not found["mode"] & 0o111:
        raise _refuse_arm("the interpreter %s does not exist %s or is not executable" % (interpreter, where))


def _refuse_arm(why: str) -> CpctlError:
    return CpctlError("--confirm-within refused: the node-side revert could not run: %s; nothing changed, nothing "
                      "armed" % why, ExitCode.REFUSED,
                      hint="install cpctl (and its python) outside /home, /root and /tmp, e.g. under /opt, and keep "
                           "the state dir and kubeconfig there too (docs/confirm.md)")


def _node_python(node: Node) -> str:
    found = node.host.run(["sh", "-c", "command -v python3"], timeout=10.0)
    path = found.stdout.decode("utf-8", "replace").strip()
    return path if found.rc == 0 and path.startswith("/") and "\n" not in path else ""


def _node_realpath(node: Node, path: str) -> str:
    """``path`` with every symlink resolved on the node ("" when it does not exist)."""
    found = node.host.run(["readlink", "-e", "--", path], timeout=10.0)
    text = found.stdout.decode("utf-8", "replace").strip()
    return text if found.rc == 0 and text.startswith("/") else ""


def arm(node: Node, result: edits.ChangeResult, options: ConfirmOptions, launcher: Launcher) -> edits.ChangeResult:
    """After a verified change (``result`` of ``edits.replace``): start the node-side timer, then
    record the arm through the journal. A change that changed nothing, or a dry run, is not armed.
    The deadline is the NODE's: its wall clock for the record and the persistent timer, its
    CLOCK_BOOTTIME (with the boot id) for "overdue" within this boot; the operator's clock is not
    asked."""
    if not result.changed or result.dry_run or result.parked or result.revision is None:
        return dataclasses.replace(result, confirm={"armed": False})
    component, filename = result.component, result.file
    with node.session("cpctl arm %s" % component):
        manifest = edits.current(node, component, "apply")
        if manifest.checksum != result.checksum:
            raise CpctlError("%s changed again before cpctl could arm its revert (another writer): NOT armed; the "
                             "change stands" % manifest.path, ExitCode.CONFLICT)
        number = result.revision
        _kept_revision(node, filename, number, str(result.previous))
        if confirmations.read(node.host, node.state, filename) is not None:
            raise CpctlError("%s has an unconfirmed change already: NOT armed" % component, ExitCode.REFUSED)
        op = secrets.token_hex(8)
        clock = confirmations.node_clock(node.host)
        deadline = int(clock.time) + options.within
        who = node.who()
        armed = Arm(op, component, filename, str(result.checksum), str(result.previous), number,
                    result.action, iso(clock.time), iso(deadline), user_label(node.host),
                    str(who.get("hostname")), node.node_name, options.reason, "none", check=options.check,
                    boot_id=clock.boot_id, due_boottime=round(clock.boottime + options.within, 3))
        armed.timer, armed.unit, armed.pid = _start_timer(node, armed, options.within, launcher)
        try:
            node.host.makedirs(confirmations.directory(node.state), 0o700)
            node.apply(confirmations.arm_change(node.state, armed))
        except BaseException:
            _stop_timer(node, armed)
            raise
    return dataclasses.replace(result, confirm=dict(armed.to_dict(), armed=True,
                                                    hint=node.command("confirm", component)))


def _kept_revision(node: Node, filename: str, number: int, previous: str) -> revisions.Revision:
    """The revision an arm (or its revert) goes back to, present and matching; else REFUSED."""
    found = next((r for r in revisions_of(node).list(filename) if r.number == number), None)
    if found is None or found.checksum != previous:
        raise CpctlError("revision %d of %s (the version before the armed change) is no longer in the revision store "
                         "(%s): it cannot be reverted to; nothing changed" % (number, filename,
                                                                              revisions_of(node).path),
                         ExitCode.REFUSED)
    return found


def timer_kind(node: Node) -> str:
    """``systemd`` when systemd is PID 1 on the node and cpctl acts there as root (it can install
    and start a unit), else ``process``; ``CPCTL_CONFIRM_TIMER`` forces one."""
    forced = os.environ.get(TIMER_ENV, "")
    if forced in ("systemd", "process"):
        return forced
    found = node.host.lstat(SYSTEMD_DIR)
    return "systemd" if found is not None and found["kind"] == "dir" and node.host.info().get("euid") == 0 \
        else "process"


def _start_timer(node: Node, armed: Arm, within: int, launcher: Launcher) -> Tuple[str, str, int]:
    """(timer kind, unit, pid) of the node-side revert just started for ``armed``, due in ``within``
    seconds of the node's clock."""
    if launcher.remote:
        return _start_remote(node, armed, within, launcher)
    argv = launcher.command + ["revert-unconfirmed", armed.component, "--op", armed.op]
    if timer_kind(node) == "systemd":
        return "systemd", _install_units(node, armed, argv, launcher), 0
    log = _revert_log(node, armed)
    node.host.makedirs(confirmations.directory(node.state), 0o700)
    _install_boot_entry(node, armed, argv + ["--within", str(within)], log)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = subprocess.Popen(argv + ["--within", str(within)], stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                 start_new_session=True, close_fds=True, cwd="/")
    finally:
        os.close(fd)
    return "process", "", child.pid


def _revert_log(node: Node, armed: Arm) -> str:
    """``STATE/confirm/<file>.<op>.log``: where a detached revert process (and its boot entry) writes;
    removed with the arm (``_remove_op_files``), like every ``<file>.<op>.*`` file of it."""
    return _plan_base(node, armed) + ".log"


# The longest command cron runs from a crontab line: Vixie cron (Debian's, Ubuntu's) reads at most
# MAX_COMMAND (1000) bytes of it and cuts the rest - a revert's full command line (cpctl and the
# node's options, or the agent's loader) is longer. The @reboot line runs a short wrapper instead.
CRON_MAX_COMMAND = 1000


def boot_entry_path(node: Node, component: str) -> Optional[str]:
    """Where the ``@reboot`` entry of ``component``'s arm goes on a node without systemd: the node's
    ``/etc/cron.d`` (``CPCTL_CONFIRM_BOOT_DIR`` instead when set), None when there is no such dir (no
    cron that reads it: the revert then waits for an explicit ``revert-unconfirmed``). The name has
    no dot: cron skips files in cron.d whose names have one."""
    from cpctl.core.mounts import under_root
    directory = os.environ.get(BOOT_DIR_ENV) or under_root(node.node_root, CRON_DIR)
    found = node.host.lstat(directory)
    if found is None or found["kind"] != "dir":
        return None
    return directory.rstrip("/") + "/" + unit_name(component)


def boot_wrapper_text(node: Node, armed: Arm, argv: Sequence[str], log: str) -> str:
    """The script the ``@reboot`` entry runs (``STATE/confirm/<file>.<op>.boot``, 0700 in the 0700
    state dir): only while the arm is still recorded (its op in the arm file), the same revert again,
    its output appended to the arm's log. The revert run waits until the arm is due by the node's
    clock (after a reboot: its wall-clock deadline; one passed while the node was down reverts at
    once), as the process the reboot killed would have."""
    import shlex
    arm_path = confirmations.path_of(node.state, armed.file)
    return ("#!/bin/sh\n# Written by cpctl --confirm-within (docs/confirm.md): after a reboot, reverts %s unless "
            "confirmed\n# (arm %s, deadline %s).\ngrep -qs -- %s %s || exit 0\nexec %s </dev/null >>%s 2>&1\n"
            % (armed.component, armed.op, armed.deadline, armed.op, shlex.quote(arm_path),
               " ".join(shlex.quote(a) for a in argv), shlex.quote(log)))


def boot_entry_text(node: Node, armed: Arm, wrapper: str, digest: str, path: str) -> str:
    """The cron.d file that, at the next boot, runs the arm's wrapper (``boot_wrapper_text``) - only
    when its sha256 is still ``digest`` (kept here, not in the state dir) - and then removes itself.
    Its command stays short (a path, a digest), far below cron's ``CRON_MAX_COMMAND``."""
    import shlex
    command = '[ "$(sha256sum <%s)" = "%s  -" ] && /bin/sh %s; rm -f %s' % (
        shlex.quote(wrapper), digest, shlex.quote(wrapper), shlex.quote(path))
    if len(command.encode("utf-8")) > CRON_MAX_COMMAND - 100:
        raise CpctlError("cannot arm the revert of %s: the state dir's path is too long for a cron @reboot line "
                         "(%d bytes, at most %d); the change stands, NOT armed (undo it with %s)"
                         % (armed.component, len(command), CRON_MAX_COMMAND - 100,
                            node.command("rollback", armed.component)), ExitCode.ENVIRONMENT)
    return ("# Written by cpctl --confirm-within (docs/confirm.md): after a reboot, reverts %s unless confirmed\n"
            "# (arm %s, deadline %s). Removed when confirmed, or by itself at the next boot.\n"
            "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            "@reboot root %s\n" % (armed.component, armed.op, armed.deadline, command.replace("%", "\\%")))


def _install_boot_entry(node: Node, armed: Arm, argv: Sequence[str], log: str) -> None:
    """A node without systemd: the detached revert process dies with the machine, so an ``@reboot``
    cron entry starts it again after a reboot (``boot_entry_text``, running ``boot_wrapper_text``);
    both written before the process starts, each a dot-temp file renamed. No cron.d dir: nothing
    (docs/confirm.md says what then)."""
    import hashlib
    path = boot_entry_path(node, armed.component)
    if path is None:
        return
    wrapper = _plan_base(node, armed) + ".boot"
    script = boot_wrapper_text(node, armed, argv, log).encode("utf-8")
    try:
        node.host.write_atomic(wrapper, script, 0o700)
        node.host.write_atomic(path, boot_entry_text(node, armed, wrapper, hashlib.sha256(script).hexdigest(),
                                                     path).encode("utf-8"), 0o644)
    except OSError as exc:
        raise CpctlError("cannot arm the revert of %s: writing its boot entry %s failed: %s; the change stands, NOT "
                         "armed (undo it with %s)" % (armed.component, path, exc.strerror or exc,
                                                     node.command("rollback", armed.component)),
                         ExitCode.ENVIRONMENT) from None


def _remove_boot_entry(node: Node, component: str, op: str) -> None:
    """Remove the @reboot entry of ``component``'s arm ``op`` - only while it still names this arm
    (a newer arm of the component rewrote it otherwise). Best effort."""
    path = boot_entry_path(node, component)
    if path is None:
        return
    if _names_arm(node, path, op, 1 << 16):
        try:
            node.host.unlink(path)
        except OSError:
            pass


def _names_arm(node: Node, path: str, op: str, limit: int) -> bool:
    """The node-side file ``path`` (a revert unit, a boot entry) still names the arm ``op``: a newer
    arm of the component rewrote it otherwise, and it is that arm's to remove."""
    try:
        return op.encode() in node.host.read_file(path, limit)
    except OSError:
        return False


def unit_paths(component: str) -> List[str]:
    """The files of the persistent revert unit of ``component``: service, timer, and the
    ``timers.target.wants`` link ``systemctl enable`` makes (removed with them)."""
    unit = unit_name(component)
    return [UNIT_DIR + "/" + unit + ".service", UNIT_DIR + "/" + unit + ".timer",
            UNIT_DIR + "/timers.target.wants/" + unit + ".timer"]


def _unit_word(arg: str) -> str:
    """One ExecStart word, quoted for a unit file: no specifier (``%``) or variable (``$``) expands."""
    if "\n" in arg or "\0" in arg:
        raise CpctlError("cannot arm the revert: %r cannot go into a unit file; nothing armed" % arg[:80],
                         ExitCode.REFUSED)
    return '"%s"' % arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")


def unit_texts(armed: Arm, argv: Sequence[str], writable: Sequence[str], hardening: Sequence[str],
               state: StateDir) -> Dict[str, str]:
    """The persistent revert unit of ``armed``: a timer at the arm's wall-clock deadline in UTC
    (``OnCalendar=``, ``Persistent=true``: a deadline passed while the node was down fires at boot)
    and its oneshot service, sandboxed like the shipped units, writable only where the revert
    writes, restarted on a crash; once the arm is gone (reverted, confirmed, dropped) its
    ``ExecStopPost`` removes the unit files (unless a newer arm rewrote them)."""
    unit = unit_name(armed.component)
    service, timer, wants = unit_paths(armed.component)
    arm_path = confirmations.path_of(state, armed.file)
    cleanup = ("grep -qs -- %s %s || { grep -qs -- %s %s && rm -f %s %s %s; }; exit 0"
               % (armed.op, arm_path, armed.op, service, wants, timer, service))
    service_text = "\n".join([
        "# Written by cpctl --confirm-within (docs/confirm.md): reverts %s unless confirmed." % armed.component,
        "[Unit]",
        "Description=cpctl: revert %s unless confirmed (armed %s, deadline %s)" % (armed.component, armed.op,
                                                                                  armed.deadline),
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=oneshot",
        "ExecStart=" + " ".join(_unit_word(a) for a in argv),
        "ExecStopPost=+/bin/sh -c '%s'" % cleanup.replace("%", "%%").replace("$", "$$"),
        # the run retries an environment error itself (back-off, the arm keeps it); a crash restarts it
        "Restart=on-failure",
        "RestartSec=30s",
        "RestartPreventExitStatus=2 3 4 10 11 12",
        "TimeoutStartSec=infinity",
        "ReadWritePaths=" + " ".join("-" + w for w in writable),
    ] + list(hardening)) + "\n"
    timer_text = "\n".join([
        "# Written by cpctl --confirm-within (docs/confirm.md).",
        "[Unit]",
        "Description=cpctl: revert %s at %s unless confirmed" % (armed.component, armed.deadline),
        "",
        "[Timer]",
        "OnCalendar=%s UTC" % armed.deadline.replace("T", " ").rstrip("Z"),
        "Persistent=true",
        "AccuracySec=1s",
        "Unit=%s.service" % unit,
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]) + "\n"
    return {service: service_text, timer: timer_text}


def _install_units(node: Node, armed: Arm, argv: List[str], launcher: Launcher) -> str:
    """Write, enable and start the persistent revert unit of ``armed`` (``unit_texts``): each file a
    dot-temp file, fsynced, renamed; ``daemon-reload``; ``enable`` (it survives a reboot);
    ``restart`` of the timer. A failure removes what was written and raises (the change stands,
    NOT armed)."""
    unit = unit_name(armed.component)
    writable = _writable(node, armed)
    texts = unit_texts(armed, argv, writable, launcher.hardening, node.state)
    try:
        # a run of an earlier arm of the component may still sleep in its back-off (its arm is gone,
        # it would end within a second): stopped, so that this arm's timer finds its service free
        node.host.run(["systemctl", "stop", unit + ".service"], timeout=60.0)
        for path, text in texts.items():
            node.host.write_atomic(path, text.encode("utf-8"), 0o644)
        for command in (["systemctl", "daemon-reload"], ["systemctl", "enable", "--quiet", unit + ".timer"],
                        ["systemctl", "restart", unit + ".timer"]):
            proc = node.host.run(command, timeout=60.0)
            if proc.rc != 0:
                raise CpctlError("%s failed: %s" % (" ".join(command), _text(proc.stderr)), ExitCode.ENVIRONMENT)
    except (CpctlError, OSError) as exc:
        _remove_units(node, armed)
        why = exc.message if isinstance(exc, CpctlError) else str(exc)
        raise CpctlError("cannot arm the revert of %s: %s; the change stands, NOT armed (undo it with %s)"
                         % (armed.component, why, node.command("rollback", armed.component)),
                         ExitCode.ENVIRONMENT) from None
    return unit


def _remove_units(node: Node, armed: Arm) -> None:
    """Stop and remove the persistent revert unit of ``armed`` - only while its files still name
    this arm (a newer arm of the component rewrote them otherwise). Best effort."""
    unit = unit_name(armed.component)
    if not _names_arm(node, unit_paths(armed.component)[0], armed.op, 1 << 20):
        return
    node.host.run(["systemctl", "disable", "--now", "--quiet", unit + ".timer"], timeout=60.0)
    for path in unit_paths(armed.component):
        try:
            node.host.unlink(path)
        except OSError:
            pass
    node.host.run(["systemctl", "daemon-reload"], timeout=60.0)


def _writable(node: Node, armed: Arm) -> List[str]:
    """What the revert unit may write: the manifests dir, the state dir, and the directory of every
    companion file the revert may write or remove (those of the revision it goes back to and of the
    change it undoes, e.g. /etc/kubernetes/audit) - exactly what the plan touches."""
    return sorted({node.manifests_dir, node.state.path} | {os.path.dirname(c) for c in _companion_paths(node, armed)})


def _plan_base(node: Node, armed: Arm) -> str:
    return "%s/%s.%s" % (confirmations.directory(node.state), armed.file, armed.op)


def _start_remote(node: Node, armed: Arm, within: int, launcher: Launcher) -> Tuple[str, str, int]:
    """A master reached over SSH has no cpctl: write the stdlib agent and a self-contained revert
    plan into its state dir, and have the persistent systemd timer (systemd is PID 1 there and the
    agent runs as root) or a detached process (``setsid``, pid recorded) run ``python3 AGENT
    revert-plan PLAN`` when the arm is due (``cpctl.agent.noderevert.revert_plan_main``). The window goes as
    a duration (``--within``): the node's own clock turns it into the moment."""
    import hashlib
    import json

    from cpctl.agent import revertplan
    from cpctl.host.agent import agent_source
    base = _plan_base(node, armed)
    node.host.makedirs(confirmations.directory(node.state), 0o700)
    plan = _plan(node, armed, base)
    agent = agent_source()
    plan_bytes = (json.dumps(plan, sort_keys=True) + "\n").encode("utf-8")
    node.host.write_atomic(base + ".agent.py", agent)
    node.host.write_atomic(base + ".plan", plan_bytes)
    python = _node_python(node) or "/usr/bin/python3"
    # both digests live in the timer's command line, not in the state dir: verified before anything runs
    argv = [python, "-c", revertplan.VERIFY_LOADER, base + ".agent.py", hashlib.sha256(agent).hexdigest(),
            "revert-plan", base + ".plan", "--plan-sha256", hashlib.sha256(plan_bytes).hexdigest()]
    if timer_kind(node) == "systemd":
        return "systemd", _install_units(node, armed, argv, launcher), 0
    log = _revert_log(node, armed)
    _install_boot_entry(node, armed, argv + ["--within", str(within)], log)
    started = node.host.run(["sh", "-c", 'setsid "$0" "$@" </dev/null >>"$CPCTL_CONFIRM_LOG" 2>&1 & echo $!']
                            + argv + ["--within", str(within)], timeout=30.0, env={"CPCTL_CONFIRM_LOG": log})
    pid = started.stdout.decode("ascii", "replace").strip()
    if started.rc != 0 or not pid.isdigit():
        raise CpctlError("cannot arm the revert of %s on %s: %s; the change stands, NOT armed (undo it with %s)" % (
            armed.component, node.node_name, _text(started.stderr), node.command("rollback", armed.component)),
            ExitCode.ENVIRONMENT)
    return "process", "", int(pid)


def _plan(node: Node, armed: Arm, base: str) -> RevertPlan:
    """The journaled change that reverts ``armed`` - built by cpctl's own ``replace_change`` now,
    its new bytes staged next to the plan - plus what the node checks and records: every field of
    ``RevertPlan``, which the agent checks before it uses any (``agent.revertplan.plan_problem``)."""
    from cpctl.host.base import PodIdentity
    from cpctl.probes import health
    from cpctl.probes.base import Unavailable
    from cpctl.probes.crictl import CrictlProbe
    revision = _kept_revision(node, armed.file, armed.revision, armed.previous)
    previous = revisions_of(node).read(revision)
    manifest = edits.current(node, armed.component, "rollback")
    why = "not confirmed by %s (node-side revert)" % armed.deadline
    record = {"to_revision": armed.revision, "unconfirmed": True, "automatic": True, "armed_op": armed.op}
    change, _ = replace_change(node, manifest, previous, "rollback", why, revisions.DEFAULT_KEEP, record,
                               companions=edits.rollback_companions(node, revision))
    change.steps.append(journal.remove(confirmations.path_of(node.state, armed.file)))
    _stage(node, change, base)
    origin = "cpctl revert-unconfirmed %s (node-side plan, armed by %s)" % (armed.component, armed.by)
    target = node.target_for(manifests.parse_pod(previous), manifest.file)
    try:                                  # the pod running now, as the revert's check will read it then
        before: Optional[PodIdentity] = CrictlProbe(node.host, node.crictl).observe(target).identity()
    except Unavailable:                   # no crictl (or it cannot tell now): the health endpoint alone
        before = None
    verify: PlanVerify = {"url": health.health_url(target) or "", "crictl": node.crictl if before is not None else "",
                          "pod": target.mirror_name, "namespace": target.namespace, "before": before,
                          "timeout": int(edits.wait_limit(edits.ApplyOptions(), target.pod)), "settle": 5}
    verdict: PlanVerdict = {
        "user": "root", "host": str(node.who().get("hostname")), "node": node.node_name, "component": armed.component,
        "file": armed.file, "checksum": armed.previous, "revision": armed.revision, "reason": why,
        "armed_op": armed.op, "origin": origin}
    from cpctl.redaction import secret_text_patterns
    keepin, shown, api = _kept_part(node, armed, previous)
    return {"version": 1, "op": armed.op, "armed": armed.checksum, "arm": confirmations.path_of(node.state, armed.file),
            "lock": node.state.path + "/lock", "journal": node.state.journal_path, "entry": journal.entry_of(change),
            "record": _node_record(node, change, origin), "verdict": verdict, "verify": verify, "keepin": keepin,
            "shown_keys": shown, "secret_patterns": secret_text_patterns(), "api": api,
            "check_hint": node.command("check", "--kubeadm"),
            "patches": _patch_part(node, armed, previous, base, origin)}


def _stage(node: Node, change: journal.Change, base: str) -> None:
    """Stage the new bytes of ``change``'s writes next to the plan and name where the bytes each step
    replaces or removes wait (``<base>.<index>.new/.old/.removed``): what the node-side run needs."""
    for index, step in enumerate(change.steps):
        if step.kind == journal.WRITE:
            step.staged = "%s.%d.new" % (base, index)
            node.host.write_atomic(step.staged, change.data[index])
            step.kept = "%s.%d.old" % (base, index) if step.before else ""
        elif step.kind == journal.REMOVE:
            step.kept = "%s.%d.removed" % (base, index)


def _node_record(node: Node, change: journal.Change, origin: str) -> Dict[str, object]:
    """The history record the node-side run writes for ``change`` (it adds the time and the op), as
    cpctl's journal writes it."""
    who = node.who()
    record: Dict[str, object] = {"user": "root", "host": str(who.get("hostname")), "node": node.node_name,
                                 "action": change.action, "component": change.component, "file": change.file,
                                 "checksum": change.checksum, "origin": origin}
    record.update({k: v for k, v in change.record.items() if v is not None})
    return record


def _kept_part(node: Node, armed: Arm, previous: bytes) -> Tuple[List[str], List[str], Optional[NodeApiAccess]]:
    """The ``--keep-in kubeadm-config`` part of a node-side revert plan: the records the revert's
    manifest bytes settle (``core.keptin``: their ``previous`` is what the revert puts back), the keys
    they changed whose values are no secret (``keptin.shown_keys``) and how the agent reaches the API with
    the node's kubeconfig (``kubeapi.node_access``); none: ([], [], None)."""
    from cpctl.core import keptin
    from cpctl.probes.kubeapi import node_access
    try:
        records = [k for k in keptin.read_all(node, armed.file) if k.previous == manifests.checksum(previous)]
    except CpctlError:                      # a record cpctl did not write: left to cpctl's own settle
        return [], [], None
    if not records:
        return [], [], None
    return ([keptin.record_path(node, k) for k in records], keptin.shown_keys(records),
            node_access(node.host, node.kubeconfig))


def _patch_part(node: Node, armed: Arm, previous: bytes, base: str, origin: str) -> List[PlanPatch]:
    """The ``--keep-in patches`` part of a node-side revert plan: for each patch file the revert's
    manifest bytes settle, the journaled change that puts it back (``keptin.patch_undo_change``, staged
    next to the plan), the sha256 of its bytes before (None: none) and of cpctl's, and its record."""
    from cpctl.core import keptin
    try:
        records = [k for k in keptin.patch_records(node, armed.file) if k.previous == manifests.checksum(previous)]
    except CpctlError:                      # a record cpctl did not write: left to cpctl's own settle
        return []
    items: List[PlanPatch] = []
    for number, kept in enumerate(records):
        change = keptin.patch_undo_change(kept)
        _stage(node, change, "%s.patch%d" % (base, number))
        items.append({"entry": journal.entry_of(change), "history": _node_record(node, change, origin),
                      "record": keptin.patch_path_of(node, kept), "after": kept.after,
                      "was": manifests.checksum(kept.before) if kept.before is not None else None})
    return items


def _companion_paths(node: Node, armed: Arm) -> List[str]:
    """The node paths of the companion files the revert may write or remove: those the revision it
    goes back to and every later one (the armed change's) recorded."""
    return sorted({str(c["path"]) for r in revisions_of(node).list(armed.file) if r.number >= armed.revision
                   for c in r.companions})


def _text(data: object) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
    return " ".join(text.split())[:300] or "no output"


def _stop_timer(node: Node, armed: Arm) -> None:
    """Stop the node-side revert of ``armed`` and drop its plan files, if any (best effort: a timer
    that fires later finds no arm and does nothing)."""
    if armed.timer == "systemd" and armed.unit:
        _remove_units(node, armed)
    elif armed.timer == "process":
        if armed.pid > 1 and _is_our_process(node, armed):
            node.host.run(["kill", "-TERM", str(armed.pid)], timeout=10.0)
        _remove_boot_entry(node, armed.component, armed.op)
    _remove_op_files(node, armed.file, armed.op)


def _remove_op_files(node: Node, filename: str, op: str) -> None:
    """Every ``STATE/confirm/<file>.<op>.*`` file of an arm that is gone: its log, boot wrapper, and
    (over SSH) agent, plan and staged bytes (``filename`` "": whichever file, by the op alone - a
    random id no other arm shares). Best effort."""
    prefix, marker = "%s.%s." % (filename, op), ".%s." % op
    try:
        for name in node.host.listdir(confirmations.directory(node.state)):
            if name.startswith(prefix) if filename else (marker in name and not name.startswith(".")):
                node.host.unlink(confirmations.directory(node.state) + "/" + name)
    except OSError:
        pass


def _is_our_process(node: Node, armed: Arm) -> bool:
    """The pid still runs cpctl's revert of this very arm (its command line names the op or plan)."""
    return confirmations.process_reverts(node.host, armed.pid, armed.op)


def restart_dead_timers(node: Node, launcher: Launcher) -> List[str]:
    """Give every arm of the node whose revert timer died (``confirmations.timer_problem``: the
    process OOM-killed, the unit stopped by hand) a new one, the way ``arm`` started it, and record
    it (history ``rearmed``): run by the next change session on the node (``Node.change_hooks``),
    under its lock. The new timer waits for the arm's own deadline - one already past reverts as soon
    as this command frees the lock; nothing is reverted here. One line per timer restarted."""
    if node.dry_run or node.host.lstat(confirmations.directory(node.state)) is None:
        return []
    lines = []
    for armed in confirmations.read_all(node.host, node.state):
        why = confirmations.timer_problem(node.host, armed)
        if not why:                     # running, or not known to be dead: left alone
            continue
        clock = confirmations.node_clock(node.host)
        within = max(1, int(armed.due_in(clock) + 0.999))
        fresh = dataclasses.replace(armed)
        try:
            fresh.timer, fresh.unit, fresh.pid = _start_timer(node, armed, within, launcher)
            if fresh.timer == "systemd" and armed.overdue(clock):   # a calendar time past: run it now
                node.host.run(["systemctl", "start", "--no-block", fresh.unit + ".service"], timeout=60.0)
        except CpctlError as exc:
            lines.append("warning: the revert timer of %s's unconfirmed change is not running (%s) and could not be "
                         "restarted: %s; %s reverts it now" % (armed.component, why, exc.message,
                                                               node.command("revert-unconfirmed", armed.component)))
            continue
        before = node.checksum_of(confirmations.path_of(node.state, armed.file)) or ""
        node.apply(confirmations.rearm_change(node.state, fresh, why, before))
        lines.append("the revert timer of %s's unconfirmed change was not running (%s): restarted (%s); %s" % (
            armed.component, why, "unit %s" % fresh.unit if fresh.unit else "pid %d" % fresh.pid,
            "it reverts it now (overdue since %s)" % armed.deadline if armed.overdue(clock)
            else "it reverts at %s unless confirmed" % armed.deadline))
    return lines


# --- confirm ------------------------------------------------------------------------------------
class ConfirmResult(TypedDict):
    """``confirm``'s answer: the components confirmed now (none: "already confirmed")."""

    node: str
    changed: bool
    confirmed: List[str]
    message: str


class RevertResult(TypedDict, total=False):
    """``revert-unconfirmed``'s answer for one arm: whether it reverted, and - when it did - the
    rollback's change fields (``edits.ChangeResult.to_dict``: file, revision, plan, wait...)."""

    node: str
    component: str
    file: str
    revision: int
    changed: bool
    reverted: bool
    message: str


def confirm(node: Node, wanted: Optional[str], why: Optional[str] = None) -> ConfirmResult:
    """Disarm ``wanted`` (a component; None: every arm of the node): timer stopped, arm removed
    (history ``confirmed``). Nothing armed for a named component: "already confirmed" (exit 0) or
    NOT_FOUND (exit 3, ``_nothing_armed``). An arm past its deadline is not confirmed: too late, its
    revert is owed (the node's timer does it; nothing here reverts it): REFUSED (exit 4), after the
    others of ``--all`` are confirmed."""
    with node.session("cpctl confirm %s" % (wanted or "--all"), changing=False):
        arms = confirmations.read_all(node.host, node.state)
        chosen = arms if wanted is None else [a for a in arms if a.matches(wanted)]
        if wanted is not None and not chosen:
            return _nothing_armed(node, wanted)
        now = confirmations.node_clock(node.host) if chosen else None     # the node's clock decides
        late = [a for a in chosen if now is not None and a.overdue(now)]
        done = []
        for armed in chosen:
            if armed in late:
                continue
            node.apply(confirmations.disarm_change(node.state, armed, "confirmed", why or "confirmed by the operator"))
            _stop_timer(node, armed)
            done.append(armed.component)
    if late:
        raise CpctlError("%sNOT confirmed: %s: not confirmed by %s, too late to keep (%s); the change is not kept: "
                         "make it again once reverted" % ("confirmed: %s; " % ", ".join(done) if done else "",
                                                     ", ".join(a.component for a in late), late[0].deadline,
                                                     late[0].pending_text(now or time.time(), node.command)),
                         ExitCode.REFUSED)
    message = "confirmed: %s" % ", ".join(done) if done else "nothing armed"
    return {"node": node.node_name, "changed": bool(done), "confirmed": done, "message": message}


def _nothing_armed(node: Node, wanted: str) -> ConfirmResult:
    """``confirm`` of a component with no arm: "already confirmed" (exit 0, as ``start`` of a running
    component) when its last commit-confirmed record is a confirmation; else NOT_FOUND (exit 3),
    saying when it was reverted -- the change is NOT in place -- or that none was made."""
    from cpctl.core import views
    last = next((r for r in reversed(views.history(node, wanted, 200))
                 if r.get("action") in ("armed", "confirmed", "reverted")), None)
    if last is not None and last.get("action") == "confirmed":
        return {"node": node.node_name, "changed": False, "confirmed": [],
                "message": "%s: already confirmed (%s by %s)" % (last.get("component") or wanted, last.get("time"),
                                                                 last.get("user"))}
    if last is not None and last.get("action") == "reverted":
        raise CpctlError("%s has no unconfirmed change: it was REVERTED at %s (%s), the change is not in place; make "
                         "it again to keep it" % (wanted, last.get("time"), last.get("reason") or "not confirmed"),
                         ExitCode.NOT_FOUND)
    raise CpctlError("%s has no unconfirmed change (nothing armed on %s; %s shows its changes)"
                     % (wanted, node.node_name, node.command("history", wanted)), ExitCode.NOT_FOUND)


# --- revert -------------------------------------------------------------------------------------
def revert(node: Node, wanted: str, why: str, op: str = "", log: Optional[Callable[[str, bool], None]] = None,
           stop_timer: bool = True) -> RevertResult:
    """Revert the armed change of ``wanted`` now (see the module). ``op``: only that arm (the
    timer's own run: an arm confirmed and re-armed since is left alone)."""
    with node.session("cpctl revert-unconfirmed %s" % wanted):
        armed = next((a for a in confirmations.read_all(node.host, node.state) if a.matches(wanted)), None)
        if armed is None or (op and armed.op != op):
            return {"node": node.node_name, "component": wanted, "changed": False, "reverted": False,
                    "message": "nothing armed for %s (confirmed or reverted already)" % wanted}
        try:
            return _revert_locked(node, armed, why, log or (lambda message, loud: None))
        finally:     # once the arm is gone: a revert interrupted before its write keeps the timer to retry
            if stop_timer and not _still_armed(node, armed):
                _stop_timer(node, armed)


def _still_armed(node: Node, armed: Arm) -> bool:
    try:
        return any(a.op == armed.op for a in confirmations.read_all(node.host, node.state))
    except CpctlError:
        return True                      # unreadable: leave the timer, its run says what is wrong


def _revert_locked(node: Node, armed: Arm, why: str, log: Callable[[str, bool], None]) -> RevertResult:
    name = armed.component
    now = node.checksum_of(node.manifests_dir + "/" + armed.file)
    done: RevertResult = {"node": node.node_name, "component": name, "file": armed.file, "revision": armed.revision}
    if now == armed.previous:          # an interrupted revert had put it back: finish the bookkeeping
        node.apply(confirmations.disarm_change(node.state, armed, "reverted", why, outcome="already in place"))
        return {**done, "changed": False, "reverted": True,
                "message": "%s was already back at revision %d" % (name, armed.revision)}
    if now != armed.checksum:
        _drop(node, armed, "not reverted: another writer replaced the armed version")
        raise _loud(log, CpctlError(
            "unconfirmed change of %s NOT reverted: %s no longer holds the armed version (another writer replaced it); "
            "it stays as it is, the arm is dropped" % (name, armed.file), ExitCode.CONFLICT))
    try:
        revision = _kept_revision(node, armed.file, armed.revision, armed.previous)
        data = revisions_of(node).read(revision)
        companions = edits.rollback_companions(node, revision)
    except CpctlError as exc:
        if exc.code == ExitCode.ENVIRONMENT:     # fail closed: the arm stays, the timer's run retries
            raise _loud(log, _failing(name, exc)) from None
        _drop(node, armed, "not reverted: %s" % exc.message)
        raise _loud(log, CpctlError("unconfirmed change of %s NOT reverted: %s" % (name, exc.message),
                                    exc.code)) from None
    manifest = edits.current(node, name, "rollback")
    options = edits.ApplyOptions(rollback=False, reason=why, force=True, keep_on_signal=True)
    record = {"to_revision": armed.revision, "unconfirmed": True, "automatic": True, "armed_op": armed.op}
    try:
        result = edits._replace_locked(node, manifest, data, "revision %d" % armed.revision, "rollback", options,
                                       record, companions)
    except (KeyboardInterrupt, Terminated, Interrupted) as stop:
        raise _interrupted(node, armed, why, log, interrupted_by(stop) or "interrupted") from None
    except CpctlError as exc:
        if exc.code in (ExitCode.ENVIRONMENT, ExitCode.LOCKED) and node.checksum_of(manifest.path) == armed.checksum:
            raise _loud(log, _failing(name, exc)) from None     # fail closed: the arm stays, retried
        if exc.code in (ExitCode.CONFLICT, ExitCode.REFUSED) and node.checksum_of(manifest.path) == armed.checksum:
            _drop(node, armed, "not reverted: %s" % exc.message)
            raise _loud(log, CpctlError("unconfirmed change of %s NOT reverted: %s" % (name, exc.message),
                                        exc.code)) from None
        node.apply(confirmations.disarm_change(node.state, armed, "reverted", why, outcome="NOT healthy: %s"
                                               % exc.message))
        raise _loud(log, CpctlError("unconfirmed change of %s reverted to revision %d, but the reverted version is NOT "
                                    "verified healthy: %s; act now" % (name, armed.revision, exc.message),
                                    ExitCode.ROLLBACK_FAILED)) from None
    node.apply(confirmations.disarm_change(node.state, armed, "reverted", why, outcome="verified"))
    message = "unconfirmed change of %s reverted to revision %d (%s): %s" % (name, armed.revision, why,
                                                                          result.message)
    log(message, False)
    answer = dict(result.to_dict(), **done, changed=True, reverted=True, message=message)
    return cast(RevertResult, answer)          # the rollback's change fields besides the declared ones


def _interrupted(node: Node, armed: Arm, why: str, log: Callable[[str, bool], None], signal: str) -> Interrupted:
    """SIGINT/SIGTERM during a revert never flips it back: when the revert's bytes are in place (the
    write is one journaled step, signals held while it runs) the arm is removed and the history says
    "reverted, NOT verified: interrupted"; when they are not (the signal came before the write) the
    arm stays, so the timer or the next cpctl command reverts it. Either way the error says which."""
    name = armed.component
    what = "%s during the revert of the unconfirmed change of %s" % (signal, name)
    if node.checksum_of(node.manifests_dir + "/" + armed.file) != armed.previous:
        return _loud(log, Interrupted(signal, what, where="NOT reverted yet: the arm stays, the revert is retried "
                                                          "(%s does it now)" % node.command("revert-unconfirmed",
                                                                                             name)))
    node.apply(confirmations.disarm_change(node.state, armed, "reverted", why,
                                           outcome="NOT verified: %s before its verdict" % signal))
    return _loud(log, Interrupted(signal, what, where="reverted to revision %d, NOT verified (check it with %s)"
                                                      % (armed.revision, node.command("status", name))))


def _failing(name: str, exc: CpctlError) -> CpctlError:
    return CpctlError("unconfirmed change of %s NOT reverted yet: %s; the arm stays and the revert is retried"
                      % (name, exc.message), exc.code)


def _drop(node: Node, armed: Arm, why: str) -> None:
    node.apply(confirmations.disarm_change(node.state, armed, "dropped", why))


Loud = TypeVar("Loud", bound=CpctlError)


def _loud(log: Callable[[str, bool], None], exc: Loud) -> Loud:
    log(exc.message, True)
    return exc


def revert_overdue(node: Node, log: Callable[[str, bool], None]) -> List[str]:
    """Revert every arm past its deadline (a timer lost to a reboot, a process killed): ``cpctl
    revert-unconfirmed --overdue``, the step the shipped ``cpctl-check.service`` runs. Returns one line
    per arm handled; a failed revert is a line too (the others are still tried)."""
    if node.dry_run or not node.state.ensure(create=False):
        return []
    try:
        found = confirmations.read_all(node.host, node.state)
        clock = confirmations.node_clock(node.host) if found else None
        arms = [a for a in found if clock is not None and a.overdue(clock)]
    except CpctlError as exc:
        return [exc.message]
    lines = []
    for armed in arms:
        try:
            lines.append(str(revert(node, armed.component, "not confirmed by %s (overdue, noticed by cpctl)"
                                    % armed.deadline, op=armed.op, log=log)["message"]))
        except Interrupted:
            raise                            # Ctrl-C on the command that noticed it ends that command
        except CpctlError as exc:
            lines.append(exc.message)
    return lines


# --- the node side: the timer's run, and --confirm-check ---------------------------------------
RETRYABLE = (ExitCode.LOCKED, ExitCode.ENVIRONMENT)


def wait_due(node: Node, op: str, within: Optional[float] = None,
             sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until the arm ``op`` is due by the NODE's clock (``Arm.due_in``: CLOCK_BOOTTIME within
    its boot, so a wall-clock step neither fires it early nor late; the wall-clock deadline after a
    reboot); False when it went away meanwhile (confirmed: nothing to do). The timer starts BEFORE
    its arm is recorded (module doc): an arm not seen yet is not one that went away - on a busy node
    cpctl may need seconds to record it - so only an arm seen and then gone ends the wait early;
    one never seen ends it after ``within`` seconds (the fallback process), or at once (the systemd
    timer, which fires at the deadline): the revert then finds whatever is there."""
    started = confirmations.node_clock(node.host).boottime
    seen = False
    while True:
        clock = confirmations.node_clock(node.host)
        found = next((a for a in confirmations.read_all(node.host, node.state) if a.op == op), None)
        if found is not None:
            seen = True
            left = found.due_in(clock)
        elif seen:
            return False
        else:
            left = started + within - clock.boottime if within is not None else 0.0
        if left <= 0:
            return True
        sleep(min(CHECK_POLL, left))


def timer_run(node: Node, component: str, op: str, within: Optional[float], log: Callable[[str, bool], None],
              sleep: Callable[[float], None] = time.sleep) -> RevertResult:
    """What the node-side timer runs: wait until the arm is due (``wait_due``), then revert it. An
    environment error (the node lock held past ``--lock-timeout``, EROFS, EIO, ...) never drops
    the arm: it is recorded in the arm (``failing``, ``attempts``, ``next_try``: status, check and
    the metrics show it) and the revert is tried again after 5 s, 10 s, 20 s ... at most 5 min
    apart, until it reverts, or the arm is confirmed or gone."""
    try:
        return _timer_run(node, component, op, within, log, sleep)
    finally:            # the arm is gone (reverted, confirmed): its @reboot entry, log and wrapper go with it
        if _arm_of(node, op) is None:
            _remove_boot_entry(node, component, op)
            _remove_op_files(node, "", op)


def _timer_run(node: Node, component: str, op: str, within: Optional[float], log: Callable[[str, bool], None],
               sleep: Callable[[float], None]) -> RevertResult:
    nothing: RevertResult = {"node": node.node_name, "component": component, "changed": False, "reverted": False,
                             "message": "nothing armed for %s any more (confirmed)" % component}
    if not wait_due(node, op, within, sleep):
        return nothing
    while True:
        current = _arm_of(node, op)
        why = "not confirmed by %s" % current.deadline if current is not None else "not confirmed in time"
        try:
            return revert(node, component, why, op=op, log=log, stop_timer=False)
        except Interrupted:
            raise
        except CpctlError as exc:
            if exc.code not in RETRYABLE:
                raise
            current = _arm_of(node, op)
            if current is None:
                return nothing
            pause = min(RETRY_MAX, RETRY_FIRST * 2 ** min(current.attempts, 10))
            record_failure(node, current, exc.message, pause)
            log("revert of the unconfirmed change of %s failed (attempt %d): %s; the arm stays, next try in %ds"
                % (component, current.attempts + 1, exc.message, pause), True)
            if not _pause_while_armed(node, op, pause, sleep):
                return nothing


def _pause_while_armed(node: Node, op: str, pause: float, sleep: Callable[[float], None]) -> bool:
    """The back-off between two tries, looking at the arm every second: False as soon as it is gone
    (confirmed: the run ends now and frees the unit for the next arm of the component)."""
    end = confirmations.node_clock(node.host).boottime + pause
    while True:
        left = end - confirmations.node_clock(node.host).boottime
        if left <= 0:
            return True
        sleep(min(CHECK_POLL, left))
        if _arm_of(node, op) is None:
            return False


def _arm_of(node: Node, op: str) -> Optional[Arm]:
    try:
        return next((a for a in confirmations.read_all(node.host, node.state) if a.op == op), None)
    except CpctlError:
        return None


def record_failure(node: Node, armed: Arm, why: str, pause: float) -> bool:
    """Note in the arm record why its revert failed, the attempt count and the next try (node
    time). One atomic rewrite, only while the record still holds the bytes just read (a confirm in
    between wins: nothing is written back); False when it did not."""
    import hashlib
    import json
    where = confirmations.path_of(node.state, armed.file)
    try:
        before = node.host.read_file(where, confirmations.MAX_ARM_BYTES)
        now = confirmations.parse(where, before)
    except (OSError, CpctlError):
        return False
    if now.op != armed.op:
        return False
    now.failing, now.attempts = " ".join(why.split())[:500], now.attempts + 1
    now.next_try = iso(confirmations.node_clock(node.host).time + pause)
    data = (json.dumps(now.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    try:
        node.host.write_atomic(where, data, 0o600, expect=hashlib.sha256(before).hexdigest())
    except OSError:
        return False
    return True


def run_check(node: Node, armed: Mapping[str, object], options: ConfirmOptions) -> Tuple[bool, str]:
    """Run ``--confirm-check`` on the node (``sh -c``), bounded by the arm's deadline: (passed, why)."""
    from cpctl.timeutil import parse_iso
    left = max(1.0, parse_iso(str(armed["deadline"])) - confirmations.node_clock(node.host).time)   # node time
    try:
        proc = node.host.run(["sh", "-c", options.check], timeout=left) if node.host.is_remote else \
            _run_here(options.check, left)
    except CpctlError as exc:
        if exc.code == ExitCode.UNREACHABLE:     # the connection is gone: nothing can revert from here
            raise
        return False, "--confirm-check could not run: %s" % exc.message
    except OSError as exc:
        return False, "--confirm-check could not run: %s" % exc
    if proc.rc == 0:
        return True, "--confirm-check %r succeeded" % options.check
    return False, "--confirm-check %r failed (exit %s): %s" % (options.check, proc.rc,
                                                               _text(proc.stderr or proc.stdout))


def _run_here(check: str, timeout: float) -> "RunResult":
    """``sh -c check`` on this machine in a process group of its own: a Ctrl-C or SIGTERM of cpctl, or
    the deadline, stops the whole check (what the shell started too), not only the shell.

    A Ctrl-C or SIGTERM that lands while ``Popen`` is still starting the check (the child's exec done,
    the parent not yet back: a window a busy machine widens) is held until ``Popen`` is back, so the
    check's group is known when the interrupt is raised (issue 44: the check was left running)."""
    import signal

    from cpctl.host.base import RunResult
    proc: "Optional[subprocess.Popen[bytes]]" = None
    try:
        with journal.signals_deferred():
            proc = subprocess.Popen(["sh", "-c", check], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return RunResult(124, out, b"timed out")
    except BaseException:
        if proc is not None:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    return RunResult(proc.returncode, out, err)


def _kill_group(pid: int, signal_number: int) -> None:
    try:
        os.killpg(pid, signal_number)
    except OSError:                  # the group is gone already
        pass


def node_log(node: Node) -> Callable[[str, bool], None]:
    """Where a revert's lines go on ``node``: this machine's syslog (``syslog_writer``), or for a
    master over SSH the master's, through its ``logger`` (best effort: the run's own output says it too)."""
    if not node.host.is_remote:
        return syslog_writer()

    def write(message: str, loud: bool) -> None:
        try:
            node.host.run(["logger", "-t", "cpctl", "-p", "daemon.err" if loud else "daemon.notice", "--",
                           ("ERROR: " if loud else "") + message], timeout=10.0)
        except (OSError, CpctlError):
            pass
    return write


def syslog_writer(tag: str = "cpctl") -> Callable[[str, bool], None]:
    """A logger to the node's syslog/journald, where no terminal is left (the command's own
    result or error line goes to its stdout/stderr as always: the journal of a systemd unit, the
    ``STATE/confirm/<file>.log`` of the fallback process)."""
    import syslog
    syslog.openlog(tag, syslog.LOG_PID, syslog.LOG_DAEMON)

    def write(message: str, loud: bool) -> None:
        syslog.syslog(syslog.LOG_ERR if loud else syslog.LOG_NOTICE, ("ERROR: " if loud else "") + message)
    return write

"""Every cpctl command, where its code lives and how it runs when hosts are given: the one table.

``-H``/``--inventory`` select masters. Each command declares here, and only here, what it does with
them; the CLI enforces it before the command runs (a local-only command refuses hosts with exit 2),
and ``cli.fanout.execute`` is the only way a command reaches a node, local or remote. The README's
fan-out table is generated from ``COMMANDS`` (a test keeps the two identical).

Only the standard library is imported here: ``cpctl --help`` reads this table.
"""

from __future__ import annotations

import enum
from typing import Dict, NamedTuple, Optional, Tuple

from cpctl.catalogue import ETCD


class Mode(enum.Enum):
    """How a command treats the selected masters."""

    READ = "parallel read"              # on every selected master at once (--forks), changes nothing
    CHANGE = "rolling change"           # --serial masters at a time, stops at the first that fails
    READ_OR_CHANGE = "read; rolling change with --fix"
    ONE = "one master"                  # a cluster-wide API call made once, through the one selected master
    ETCD = "etcd, once"                 # etcd's API, once, through the first selected master that can be reached
    LOCAL = "local only"                # this machine only: refused with -H/--inventory


class CommandSpec(NamedTuple):
    """One command (``path`` is the words after ``cpctl``, e.g. ``scheduler add``). A group of
    subcommands has no mode of its own; a top-level command names its module (``entry``) and its
    one-line help (``summary``), so ``cpctl --help`` imports nothing. (A NamedTuple, not a
    dataclass: every ``cpctl --help`` builds this table, and a dataclass costs more to define.)"""

    path: str
    mode: Optional[Mode]
    why: str = ""                       # shown in the README table and in a refusal
    entry: str = ""
    summary: str = ""


_SPECS: Tuple[CommandSpec, ...] = (
    CommandSpec("status", Mode.READ, "each master's manifests, parked files and pods",
                "cpctl.cli.commands.views:status",
                "Show each static pod: its file (present, parked, invalid), its pod (STATUS, RESTARTS, AGE) and the "
                "last change."),
    CommandSpec("is-running", Mode.READ, "exit 0 only when the components run on every master",
                "cpctl.cli.commands.views:is_running",
                "Exit 0 when every COMPONENT's pod is running and Ready (on every selected master), else 1."),
    CommandSpec("history", Mode.READ, "each master's change log", "cpctl.cli.commands.views:history",
                "Show the append-only record of every change cpctl made on this node."),
    CommandSpec("stop", Mode.CHANGE, "parks manifests on each master", "cpctl.cli.commands.lifecycle:stop",
                "Park COMPONENT's manifest outside the manifests dir and wait until its pod is gone."),
    CommandSpec("start", Mode.CHANGE, "restores parked manifests on each master",
                "cpctl.cli.commands.lifecycle:start",
                "Restore COMPONENT's parked manifest and wait until a new pod is Running and Ready."),
    CommandSpec("restart", Mode.CHANGE, "stop then start on each master", "cpctl.cli.commands.lifecycle:restart",
                "Stop, wait until gone, start, wait until back and Ready - one component at a time."),
    CommandSpec("apply", Mode.CHANGE, "replaces the manifest on one master at a time; stops at the first that fails",
                "cpctl.cli.commands.edits:apply",
                "Replace COMPONENT's manifest with FILE, verify the new pod, roll back if it does not come up."),
    CommandSpec("edit", Mode.CHANGE, "edits each master's manifest in turn, one at a time",
                "cpctl.cli.commands.edits:edit",
                "Edit COMPONENT's manifest in $VISUAL/$EDITOR on a private copy, then apply it like `cpctl apply`."),
    CommandSpec("flags", Mode.CHANGE, "changes the flags on one master at a time; stops at the first that fails",
                "cpctl.cli.commands.edits:flags",
                "Set or remove --NAME=VALUE flags of COMPONENT's container, then apply like `cpctl apply`."),
    CommandSpec("rollback", Mode.CHANGE, "puts a kept revision back on one master at a time",
                "cpctl.cli.commands.edits:rollback",
                "Put a kept revision of COMPONENT's manifest back: an apply of its bytes (verified, rolled back)."),
    CommandSpec("confirm", Mode.CHANGE, "disarms the pending revert on each master it is armed on",
                "cpctl.cli.commands.confirm:confirm",
                "Keep COMPONENT's change made with --confirm-within: stop its revert timer (history: confirmed)."),
    CommandSpec("revert-unconfirmed", Mode.CHANGE, "reverts the unconfirmed change on each master, one at a time",
                "cpctl.cli.commands.confirm:revert_unconfirmed",
                "Revert COMPONENT's unconfirmed change now: the revision before it, verified (run by the timer)."),
    CommandSpec("revisions", Mode.READ, "each master's kept manifest revisions", "cpctl.cli.commands.edits:revisions",
                "List the kept versions of COMPONENT's manifest (oldest first), show revision NUMBER, or --diff N M."),
    CommandSpec("logs", Mode.READ, "each master's container log, through its crictl (else its kubeconfig)",
                "cpctl.cli.commands.logs:logs",
                "Show the log lines of COMPONENT's container (stdout and stderr, in the order written)."),
    CommandSpec("pending", Mode.READ, "pods waiting for a scheduler, through each master's kubeconfig",
                "cpctl.cli.commands.scheduling:pending", "List pods that wait for a scheduler (no node assigned yet)."),
    CommandSpec("bind", Mode.ONE, "binds a pod once, cluster-wide, through the selected master's kubeconfig",
                "cpctl.cli.commands.scheduling:bind",
                "Be the scheduler: bind a Pending POD to NODE through the pods/binding subresource."),
    CommandSpec("baseline", Mode.CHANGE, "records each master's drift baseline",
                "cpctl.cli.commands.drift:baseline", "Record the expected manifests (files, pod names, content) in "
                                                     "STATE/baseline.json."),
    CommandSpec("check", Mode.READ_OR_CHANGE, "checks each master; --fix repairs them one batch at a time",
                "cpctl.cli.commands.drift:check", "Find drift: overdue parks, missing/changed/unexpected manifests, "
                                                  "strays, duplicates, interrupted operations."),
    CommandSpec("certs", Mode.READ, "each master's certificates, and whether its components use them",
                "cpctl.cli.commands.certs:certs",
                "Show every kubeadm certificate (subject, expiry, chain) and whether each component uses the files."),
    CommandSpec("scheduler", None, "", "cpctl.cli.commands.scheduler:scheduler",
                "Add, remove or list second schedulers (static pods with their own profile name)."),
    CommandSpec("scheduler add", Mode.CHANGE, "writes the second scheduler on each master"),
    CommandSpec("scheduler remove", Mode.CHANGE, "removes it from each master"),
    CommandSpec("scheduler list", Mode.READ, "each master's second schedulers"),
    CommandSpec(ETCD, None, "", "cpctl.cli.commands.etcd:etcd",      # the command is named after the component
                "etcd care: status, rolling defragmentation, alarms, NOSPACE recovery, leadership (docs/etcd.md)."),
    CommandSpec("etcd status", Mode.ETCD, "etcd's members, asked through the first master that answers"),
    CommandSpec("etcd defrag", Mode.ETCD, "one member at a time across the cluster, through one master's agent"),
    CommandSpec("etcd alarm list", Mode.ETCD, "the cluster's alarms, through the first master that answers"),
    CommandSpec("etcd alarm disarm", Mode.ETCD, "disarms cluster-wide alarms once, through one master"),
    CommandSpec("etcd recover-space", Mode.ETCD, "compacts, defragments one member at a time, disarms, once"),
    CommandSpec("etcd move-leader", Mode.ETCD, "hands etcd's leadership over once, through one master"),
    CommandSpec("etcd snapshot save", Mode.ETCD, "saves the first reachable master's own member, on that master"),
    CommandSpec("etcd snapshot list", Mode.READ, "each master's saved snapshots"),
    CommandSpec("etcd snapshot schedule", Mode.LOCAL, "writes unit files on this machine"),
    CommandSpec("watch", Mode.LOCAL, "inotify sees only this machine's filesystem; use `check` over SSH",
                "cpctl.cli.commands.watch:watch", "Say, for every change in the manifests dir, what the kubelet will "
                                                  "do."),
    CommandSpec("systemd", None, "", "cpctl.cli.commands.systemd:systemd",
                "Install or show the systemd units: cpctl-check.service/.timer (drift check every 5 min, node_exporter "
                "metrics) and cpctl-watch.service."),
    CommandSpec("systemd install", Mode.LOCAL, "writes unit files on this machine"),
    CommandSpec("systemd show", Mode.LOCAL, "prints the unit files"),
    CommandSpec("keeper", None, "", "cpctl.cli.commands.keeper:keeper",
                "Show or stop the keeper that holds SSH connections between runs (see --persist)."),
    CommandSpec("keeper status", Mode.LOCAL, "the keeper runs on this machine"),
    CommandSpec("keeper stop", Mode.LOCAL, "the keeper runs on this machine"),
    CommandSpec("version", Mode.READ, "the client's version, and each master's agent (its python, its user)",
                "cpctl.cli.commands.version:version",
                "Print cpctl's version; with -H/-i also the agent on each master (its Python, its user)."),
    CommandSpec("completion", Mode.LOCAL, "a script for this machine's shell", "cpctl.cli.completion:completion",
                "Print the shell completion script for SHELL (bash, zsh or fish)."),
)

COMMANDS: Dict[str, CommandSpec] = {spec.path: spec for spec in _SPECS}

# Commands of other installed packages (entry point group ``cpctl.commands``, e.g. the lab
# simulator) run on this machine: cpctl cannot know what they would do on a master.
PLUGIN_MODE = Mode.LOCAL
PLUGIN_WHY = "a command of another package (%s): it runs on this machine only"


def lazy_commands() -> Dict[str, CommandSpec]:
    """Top-level commands whose module is imported only when they run (or show their help)."""
    return {path: spec for path, spec in COMMANDS.items() if spec.entry}


def spec_for(path: str) -> Optional[CommandSpec]:
    """The declared spec of a command path such as ``scheduler add`` (None: not declared)."""
    return COMMANDS.get(path)


def markdown_table() -> str:
    """The README's fan-out table, made from ``COMMANDS`` (a test keeps the README in step)."""
    lines = ["| command | with `-H`/`-i` | why |", "|---|---|---|"]
    for spec in COMMANDS.values():
        if spec.mode is not None:
            lines.append("| `cpctl %s` | %s | %s |" % (spec.path, spec.mode.value, spec.why))
    lines.append("| `cpctl lab ...` and other packages' commands | %s | %s |"
                 % (PLUGIN_MODE.value, PLUGIN_WHY % "the simulator"))
    return "\n".join(lines)

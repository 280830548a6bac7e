# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.static_pod_flags: ``cpctl flags COMPONENT --set/--unset`` on this task's master."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_flags import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import (
    CpctlAction,
    change_options,
    command,
    companion_options,
    is_secret_flag,
    manifest_change,
)


def flag_value(value):
    """A YAML value as the command line writes it (true -> "true", not Python's "True")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(flag_value(v) for v in value)
    return str(value)


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def secret_values(self, args):
        """The values of the flags named like a credential (never shown); other values are not secrets."""
        values = set()
        for name, value in (args.get("set") or {}).items():
            if is_secret_flag(name) and flag_value(value) != "":
                values.add(flag_value(value))
        return values

    def act(self, args, task_vars):
        if not args["set"] and not args["unset"]:
            return {"failed": True, "msg": "static_pod_flags: give set or unset (or both)"}
        options = []
        for name, value in sorted(args["set"].items()):
            options += ["--set", "%s=%s" % (name, flag_value(value))]
        for name in args["unset"]:
            options += ["--unset", name]
        if args["container"]:
            options += ["--container", args["container"]]
        if args["mount"]:
            options.append("--mount")
        companions, failure = companion_options(self, args)
        if failure:
            return failure
        return manifest_change(self, task_vars, command(["flags"], options + companions + change_options(args),
                                                        args["component"]))

# -*- coding: utf-8 -*-
# Apache-2.0 (see the cpctl repository's license)
"""cpctl.controlplane.static_pod_flags: ``cpctl flags COMPONENT --set/--unset`` on this task's master."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_flags import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import (
    CpctlAction,
    change_options,
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

    def act(self, args, task_vars):
        if not args["set"] and not args["unset"]:
            return {"failed": True, "msg": "static_pod_flags: give set or unset (or both)"}
        argv = ["flags", args["component"]]
        for name, value in sorted(args["set"].items()):
            argv += ["--set", "%s=%s" % (name, flag_value(value))]
        for name in args["unset"]:
            argv += ["--unset", name]
        if args["container"]:
            argv += ["--container", args["container"]]
        return manifest_change(self, task_vars, argv + change_options(args))

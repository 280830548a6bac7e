# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.confirm: ``cpctl confirm COMPONENT|--all`` or ``cpctl revert-unconfirmed COMPONENT``."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.confirm import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    REQUIRED_ONE_OF,
)
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction, command

NOTHING_ARMED = 3          # cpctl confirm: nothing armed for the component (confirmed or reverted already)


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    MUTUALLY_EXCLUSIVE = MUTUALLY_EXCLUSIVE
    REQUIRED_ONE_OF = REQUIRED_ONE_OF

    def act(self, args, task_vars):
        reverting = args["state"] == "reverted"
        if reverting and args["all"]:
            return {"failed": True, "msg": "confirm: state=reverted names one component (all is for confirmed)"}
        if self._play_context.check_mode:
            return self._planned(task_vars, args, reverting)
        if reverting:
            argv = command(["revert-unconfirmed"], [], args["component"])
        else:
            options = ["--reason", args["reason"]] if args["reason"] else []
            argv = ["confirm", "--all"] + options if args["all"] else command(["confirm"], options, args["component"])
        rc, data, error = self.cpctl(task_vars, argv, ok_codes=(0, NOTHING_ARMED))
        if rc == NOTHING_ARMED:
            return {"changed": False, "msg": "nothing awaits confirmation for %s" % args["component"]}
        if rc != 0:
            return self.failed(rc, error, data)
        changed = bool(data.get("changed", data.get("confirmed") or data.get("reverted")))
        return {"changed": changed, "msg": str(data.get("message") or ""), "cpctl": data}

    def _planned(self, task_vars, args, reverting):
        """Check mode: whether a change awaits confirmation (cpctl status), nothing changed."""
        rc, data, error = self.cpctl(task_vars, ["status"] if args["all"] else command(["status"], [], args["component"]))
        if rc != 0:
            return self.failed(rc, error, data)
        armed = [row["component"] for row in data.get("components", []) if isinstance(row, dict) and row.get("unconfirmed")]
        verb = "revert" if reverting else "confirm"
        return {"changed": bool(armed), "msg": "would %s %s" % (verb, ", ".join(armed)) if armed else
                "nothing awaits confirmation"}

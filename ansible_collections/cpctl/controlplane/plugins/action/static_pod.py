# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.static_pod: ``cpctl start|stop|restart COMPONENT`` on this task's master."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.static_pod import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction, command, dry_run

VERBS = {"started": "start", "stopped": "stop", "restarted": "restart"}


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args, task_vars):
        verb = VERBS[args["state"]]
        options = ["--timeout", str(args["timeout"])]
        if args["reason"] and verb != "start":
            options += ["--reason", args["reason"]]
        if args["until"] and verb == "stop":
            options += ["--for", args["until"]]
        if args["force"] and verb != "start":
            options.append("--force")
        if not args["move_leader"] and verb != "start":
            options.append("--no-move-leader")
        argv = command([verb], options, args["component"])
        planned = None
        if self._play_context.check_mode or self._task.diff:
            rc, planned, error = self.cpctl(task_vars, dry_run(argv))
            if rc != 0:
                return self.failed(rc, error, planned)
        if self._play_context.check_mode:
            moves = [step for step in planned.get("plan", []) if "move" in step]
            result = {"changed": bool(moves), "node": planned.get("node"), "plan": planned.get("plan", []),
                      "msg": "would %s %s" % (verb, args["component"]) if moves else "nothing to do"}
        else:
            rc, data, error = self.cpctl(task_vars, argv)
            if rc != 0:
                return self.failed(rc, error, data)
            results = data.get("results", [])
            result = {"changed": bool(data.get("changed")), "node": data.get("node"), "results": results,
                      "msg": "; ".join("%s: %s" % (r.get("component"), r.get("message")) for r in results)}
        if self._task.diff and result["changed"] and planned and planned.get("diff"):
            result["diff"] = self.diff_of(planned["diff"])
        return result

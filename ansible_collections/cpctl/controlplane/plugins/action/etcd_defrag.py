# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.etcd_defrag: ``cpctl etcd defrag MEMBER...|--all`` through this task's master."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.etcd_defrag import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args, task_vars):
        if bool(args["members"]) == bool(args["all"]):
            return {"failed": True, "msg": "etcd_defrag: name the members, or all: true (not both)"}
        argv = ["etcd", "defrag", "--min-free", args["min_free"], "--min-ratio", str(args["min_ratio"]),
                "--timeout", str(args["timeout"])]
        argv += ["--all"] if args["all"] else ["--"] + list(args["members"])
        if self._play_context.check_mode:
            argv.insert(2, "--dry-run")
        rc, data, error = self.cpctl(task_vars, argv)
        if rc != 0:
            return self.failed(rc, error, data)
        steps = data.get("steps", [])
        chosen = [s.get("member") for s in steps if s.get("action") == "defrag"]
        if self._play_context.check_mode:
            return {"changed": bool(chosen), "steps": steps, "interrupted": data.get("interrupted", []),
                    "msg": "would defragment %s, in this order" % ", ".join(chosen) if chosen else
                    "no member to defragment"}
        done = [s.get("member") for s in steps if s.get("seconds") is not None]
        return {"changed": bool(data.get("changed")), "steps": steps, "interrupted": data.get("interrupted", []),
                "msg": "defragmented %s" % ", ".join(done) if done else "no member to defragment"}

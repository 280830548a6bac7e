# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.etcd_snapshot: ``cpctl etcd snapshot save [PATH] [--keep N]``; check mode:
``cpctl etcd snapshot list``."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.etcd_snapshot import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args, task_vars):
        if args["path"] and args["keep"]:
            return {"failed": True, "msg": "etcd_snapshot: keep prunes cpctl's snapshot dir; give no path with it"}
        if self._play_context.check_mode:
            rc, data, error = self.cpctl(task_vars, ["etcd", "snapshot", "list"])
            if rc != 0:
                return self.failed(rc, error, data)
            return {"changed": True, "cpctl": data, "msg": "would save a snapshot of the master's etcd member (%s)"
                    % (args["path"] or "in %s" % data.get("directory", "cpctl's snapshot dir"))}
        argv = ["etcd", "snapshot", "save", "--timeout", str(args["timeout"])]
        if args["keep"]:
            argv += ["--keep", str(args["keep"])]
        if args["path"]:
            argv += ["--", args["path"]]
        rc, data, error = self.cpctl(task_vars, argv)
        if rc != 0:
            return self.failed(rc, error, data)
        snapshot = data.get("snapshot") if isinstance(data.get("snapshot"), dict) else {}
        return {"changed": True, "cpctl": data, "path": snapshot.get("path", ""), "msg": str(data.get("message") or "")}

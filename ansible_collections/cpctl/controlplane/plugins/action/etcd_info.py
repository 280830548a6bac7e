# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.etcd_info: ``cpctl etcd status`` (and ``etcd defrag --all --dry-run``)."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.etcd_info import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args, task_vars):
        rc, data, error = self.cpctl(task_vars, ["etcd", "status"])
        if rc != 0:
            return self.failed(rc, error, data)
        result = {"changed": False, "etcd": data,
                  "msg": "%d of %d voting members healthy, leader %s" % (
                      data.get("voters_healthy", 0), data.get("voters", 0), data.get("leader") or "none")}
        if args["defrag_plan"]:
            rc, plan, error = self.cpctl(task_vars, ["etcd", "defrag", "--all", "--dry-run", "--min-free",
                                                     args["min_free"], "--min-ratio", str(args["min_ratio"])])
            if rc != 0:
                return self.failed(rc, error, plan)
            result["defrag_plan"] = plan.get("steps", [])
        return result

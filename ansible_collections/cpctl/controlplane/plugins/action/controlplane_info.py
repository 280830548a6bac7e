# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.controlplane_info: ``cpctl status``, ``check``, ``certs`` and ``revisions`` as the fact
``cpctl``."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.controlplane_info import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction, command


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args, task_vars):
        facts = {"revisions": {}}
        steps = [("status", ["status"], (0,))]
        if args["drift"]:
            steps.append(("drift", ["check"], (0, 1)))          # 1: drift found (reported, not a failure)
        if args["certs"]:
            steps.append(("certs", ["certs"], (0,)))
        steps += [(name, command(["revisions"], [], name), (0,)) for name in args["revisions"]]
        for key, argv, ok in steps:
            rc, data, error = self.cpctl(task_vars, argv, ok_codes=ok)
            if rc not in ok:
                return self.failed(rc, error, data)
            if argv[0] == "revisions":
                facts["revisions"][key] = data
            else:
                facts[key] = data
        return {"changed": False, "ansible_facts": {"cpctl": facts}}

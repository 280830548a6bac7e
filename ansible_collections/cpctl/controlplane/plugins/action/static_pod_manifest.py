# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.static_pod_manifest: ``cpctl apply`` or ``cpctl rollback --to N`` on this task's master."""

from __future__ import annotations

from ansible.errors import AnsibleError
from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_manifest import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    REQUIRED_ONE_OF,
)
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import (
    CpctlAction,
    change_options,
    command,
    companion_options,
    manifest_change,
)


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    MUTUALLY_EXCLUSIVE = MUTUALLY_EXCLUSIVE
    REQUIRED_ONE_OF = REQUIRED_ONE_OF

    def act(self, args, task_vars):
        if args["rollback_to"] is not None:
            words = ["rollback", "--to", str(args["rollback_to"])]
        elif args["src"] is not None:
            try:
                source = self._find_needle("files", args["src"])
            except AnsibleError as exc:
                return {"failed": True, "msg": "static_pod_manifest: src: %s" % exc}
            words = ["apply", "-f", source]
        else:
            words = ["apply", "-f", self.write_private("manifest.yaml", args["content"])]
        companions, failure = companion_options(self, args)
        if failure:
            return failure
        return manifest_change(self, task_vars, command(words, companions + change_options(args), args["component"]))

# -*- coding: utf-8 -*-
# Apache-2.0 (see the cpctl repository's license)
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
    manifest_change,
)


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC
    MUTUALLY_EXCLUSIVE = MUTUALLY_EXCLUSIVE
    REQUIRED_ONE_OF = REQUIRED_ONE_OF

    def act(self, args, task_vars):
        if args["rollback_to"] is not None:
            argv = ["rollback", args["component"], "--to", str(args["rollback_to"])]
        elif args["src"] is not None:
            try:
                source = self._find_needle("files", args["src"])
            except AnsibleError as exc:
                return {"failed": True, "msg": "static_pod_manifest: src: %s" % exc}
            argv = ["apply", args["component"], "-f", source]
        else:
            argv = ["apply", args["component"], "-f", self.write_private("manifest.yaml", args["content"])]
        return manifest_change(self, task_vars, argv + change_options(args))

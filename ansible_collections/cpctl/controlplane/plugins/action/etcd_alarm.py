# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpctl.controlplane.etcd_alarm: ``cpctl etcd alarm list|disarm`` or ``cpctl etcd recover-space``."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.modules.etcd_alarm import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import CpctlAction


def _lines(alarms):
    return "".join("%s %s\n" % (a.get("alarm"), a.get("member")) for a in alarms)


class ActionModule(CpctlAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def act(self, args, task_vars):
        kinds = sorted(set(args["alarms"]))
        if args["recover_space"] and kinds != ["NOSPACE"]:
            return {"failed": True, "msg": "etcd_alarm: recover_space goes with alarms: [NOSPACE] only"}
        rc, listed, error = self.cpctl(task_vars, ["etcd", "alarm", "list"])
        if rc != 0:
            return self.failed(rc, error, listed)
        before = listed.get("alarms", [])
        chosen = [a for a in before if a.get("alarm") in kinds]
        result = {"changed": bool(chosen), "disarmed": chosen, "alarms": [a for a in before if a not in chosen]}
        if not chosen:
            result["msg"] = "no %s alarm active" % "/".join(kinds)
            return result
        if self._play_context.check_mode:
            result["msg"] = "would %s" % ("recover the space and disarm NOSPACE" if args["recover_space"] else
                                          "disarm %d alarm(s)" % len(chosen))
            if args["recover_space"]:
                rc, plan, error = self.cpctl(task_vars, ["etcd", "recover-space", "--dry-run"])
                if rc != 0:
                    return self.failed(rc, error, plan)
                result["steps"] = plan.get("steps", [])
        else:
            failed = self._change(task_vars, args, kinds, result)
            if failed:
                return failed
        if self._task.diff:
            result["diff"] = {"before": _lines(before), "after": _lines(result["alarms"]),
                              "before_header": "active etcd alarms", "after_header": "active etcd alarms"}
        return result

    def _change(self, task_vars, args, kinds, result):
        """Disarm (or recover the space), then read the alarms again: what is active now is what is
        reported. A failed step: the task's failure, else None."""
        if args["recover_space"]:
            argv = ["etcd", "recover-space", "--timeout", str(args["timeout"])]
        else:
            argv = ["etcd", "alarm", "disarm"] + [word for kind in kinds for word in ("--alarm", kind)]
        rc, data, error = self.cpctl(task_vars, argv)
        if rc != 0:
            return self.failed(rc, error, data)
        result["disarmed"] = data.get("disarmed", [])
        result["changed"] = bool(data.get("changed"))
        result["msg"] = data.get("message", "")
        if args["recover_space"]:
            result["steps"] = data.get("steps", [])
        rc, listed, error = self.cpctl(task_vars, ["etcd", "alarm", "list"])
        if rc != 0:
            return self.failed(rc, error, listed)
        result["alarms"] = listed.get("alarms", [])
        return None

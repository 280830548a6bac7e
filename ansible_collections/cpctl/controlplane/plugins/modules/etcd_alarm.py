#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_alarm
short_description: No active etcd alarm of the named kinds - disarmed, or NOSPACE recovered in one step
version_added: "0.1.0"
description:
  - Makes sure no alarm of the kinds in O(alarms) is active in this task's master's etcd cluster, through
    cpctl with that master's own etcd client certificate. No such alarm active - nothing to do,
    C(changed) false.
  - By default each such alarm is disarmed (C(cpctl etcd alarm disarm)). A NOSPACE alarm comes back at the
    next write when the space did not; with O(recover_space) the NOSPACE runbook runs instead
    (C(cpctl etcd recover-space)) - compact to the current revision, defragment every member one at a
    time (the leader last), disarm NOSPACE, check that a write succeeds; refused (rc 4) when the space
    did not come back or a CORRUPT alarm is active.
  - A CORRUPT alarm is disarmed only when named in O(alarms); members whose data differ must be found and
    replaced first (docs/etcd.md).
  - Check mode changes nothing and tells what would be disarmed (with O(recover_space), the steps); with
    C(--diff), the active alarms before and after.
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
  - cpctl.controlplane.etcd
  - cpctl.controlplane.etcd.defrag_timeout
options:
  alarms:
    description: The kinds that must not be active.
    type: list
    elements: str
    choices: [NOSPACE, CORRUPT]
    default: [NOSPACE]
  recover_space:
    description: Run the NOSPACE runbook (C(cpctl etcd recover-space)) instead of a plain disarm. Only with
      O(alarms=[NOSPACE]).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reads the alarms (and with O(recover_space) the steps cpctl would take); changes nothing.
  diff_mode:
    support: full
    details: The active alarms (kind and member, one a line) before and after.
notes:
  - The alarms are the cluster's; run it once (C(run_once)).
  - Every disarm, compaction and defragmentation is a record in the master's C(cpctl history).
seealso:
  - module: cpctl.controlplane.etcd_info
  - module: cpctl.controlplane.etcd_defrag
"""

EXAMPLES = r"""
- name: NOSPACE - compact, defragment, disarm and check a write, in one task
  cpctl.controlplane.etcd_alarm:
    recover_space: true
  run_once: true

- name: Disarm a CORRUPT alarm after the bad member was replaced
  cpctl.controlplane.etcd_alarm:
    alarms: [CORRUPT]
  run_once: true
"""

RETURN = r"""
alarms:
  description: The alarms active afterwards (in check mode, those that would be) - C(member), C(member_id),
    C(alarm).
  returned: success
  type: list
  elements: dict
  sample: []
disarmed:
  description: The alarms disarmed (in check mode, that would be).
  returned: success
  type: list
  elements: dict
  sample: [{"member": "master1", "member_id": "8e9e05c52164694d", "alarm": "NOSPACE"}]
steps:
  description: With O(recover_space), each member's defragmentation (as M(cpctl.controlplane.etcd_defrag)
    returns them).
  returned: when O(recover_space) is true and a NOSPACE alarm was active
  type: list
  elements: dict
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import DEFRAG_TIMEOUT

ARGUMENT_SPEC = dict(
    alarms=dict(type="list", elements="str", choices=["NOSPACE", "CORRUPT"], default=["NOSPACE"]),
    recover_space=dict(type="bool", default=False),
    timeout=DEFRAG_TIMEOUT,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.etcd_alarm runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

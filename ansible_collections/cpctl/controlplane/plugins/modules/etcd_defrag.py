#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_defrag
short_description: Defragment a kubeadm cluster's etcd members one at a time, the leader last
version_added: "0.1.0"
description:
  - C(cpctl etcd defrag) from this task's master, with its own etcd client certificate - one member at a
    time across the cluster - learners, then followers, the leader last, after its leadership was moved to a
    healthy voter. Before each member the member must be healthy and the other healthy voters still a
    quorum (a member being defragmented counts as down); otherwise the task fails (rc 4) and says which
    members were done.
  - Members whose free space is below O(min_free) or whose free share is below O(min_ratio) are skipped,
    and said so. A CORRUPT alarm refuses (rc 4).
  - The defragmentation acts on the whole cluster; run it once (C(run_once)), not on every master.
  - Check mode is C(cpctl etcd defrag --dry-run) - the order and why, nothing changed; C(changed) tells
    whether a member would be defragmented. A real run is C(changed) when a member was defragmented.
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
  - cpctl.controlplane.etcd
  - cpctl.controlplane.etcd.thresholds
  - cpctl.controlplane.etcd.defrag_timeout
options:
  members:
    description: The members to defragment (names or hex IDs, as C(cpctl etcd status) shows them). Either
      this or O(all).
    type: list
    elements: str
    default: []
  all:
    description: Every member of the cluster.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: cpctl's C(--dry-run) - the order and the reasons, nothing changed.
  diff_mode:
    support: none
    details: A defragmentation changes no value to show; RV(steps) gives each member's size before and after.
notes:
  - Every defragmented member, and every leadership move, is a record in the master's C(cpctl history).
seealso:
  - module: cpctl.controlplane.etcd_info
  - module: cpctl.controlplane.etcd_alarm
"""

EXAMPLES = r"""
- name: Defragment every member that has 100 MiB and 45 % free, followers first, the leader last
  cpctl.controlplane.etcd_defrag:
    all: true
  run_once: true

- name: Defragment two members whatever their free space
  cpctl.controlplane.etcd_defrag:
    members: [master2, master3]
    min_free: 0
    min_ratio: 0
  run_once: true
"""

RETURN = r"""
steps:
  description: Each chosen member in the order taken - C(member), C(member_id), C(action) (C(defrag) or
    C(skip)), C(why), C(db_size) and C(db_size_in_use) before, C(db_size_after) and C(seconds) once done,
    C(moved_leader_to) when its leadership was moved first.
  returned: success
  type: list
  elements: dict
  sample: [{"member": "master2", "action": "defrag", "why": "follower, 120.0 MB free of 150.0 MB (80 %)",
            "db_size": 157286400, "db_size_after": 31457280, "seconds": 1.2, "moved_leader_to": ""}]
interrupted:
  description: An earlier cpctl etcd change on this master that was killed, named (and recorded).
  returned: success
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import DEFRAG_TIMEOUT, ETCD_THRESHOLDS

ARGUMENT_SPEC = dict(
    members=dict(type="list", elements="str", default=[]),
    all=dict(type="bool", default=False),
    timeout=DEFRAG_TIMEOUT,
    **ETCD_THRESHOLDS
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.etcd_defrag runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

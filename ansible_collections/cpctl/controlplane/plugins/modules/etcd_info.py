#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_info
short_description: The stacked etcd cluster of a kubeadm master - members, leader, sizes, health, alarms
version_added: "0.1.0"
description:
  - Asks etcd, through cpctl (C(cpctl etcd status)), from this task's master with that master's own etcd
    client certificate - no certificate to pass. Returns the cluster ID and, per member, its ID, name,
    voter or learner, leader, version, DB size and size in use (fragmentation), raft term and index,
    peer and client URLs, health and alarms; the voters, how many are healthy and the quorum.
  - Optionally (O(defrag_plan)) the order C(cpctl etcd defrag --dry-run) would use, and why each member
    would be defragmented or skipped.
  - Changes nothing in etcd, in check mode too. When an earlier cpctl etcd change on that master was
    killed (SIGKILL), cpctl names it in C(interrupted) of RV(etcd) and records it in the master's history.
  - Runs on the controller (action plugin) with the cpctl installed there; the master needs only
    C(python3).
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
  - cpctl.controlplane.etcd
  - cpctl.controlplane.etcd.thresholds
options:
  defrag_plan:
    description: Also return the order and the reasons of a defragmentation of every member
      (C(cpctl etcd defrag --all --dry-run)), with the thresholds O(min_free) and O(min_ratio).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
notes:
  - cpctl asks the cluster once, through this master; every master of a cluster gives the same answer.
  - etcd applies an alarm list through raft; each call adds one raft entry (so does C(etcdctl alarm list)).
seealso:
  - module: cpctl.controlplane.etcd_defrag
  - module: cpctl.controlplane.etcd_alarm
"""

EXAMPLES = r"""
- name: The etcd cluster, through the first master
  cpctl.controlplane.etcd_info:
  run_once: true
  register: etcd

- name: Stop unless every voting member is healthy
  ansible.builtin.assert:
    that: etcd.etcd.voters_healthy == etcd.etcd.voters

- name: What a defragmentation would do
  cpctl.controlplane.etcd_info:
    defrag_plan: true
    min_free: 0
  run_once: true
"""

RETURN = r"""
etcd:
  description: C(cpctl etcd status)'s JSON (schema C(cpctl/schemas/etcd-status.json)).
  returned: success
  type: dict
  sample: {"cluster_id": "cdf818194e3a8c32", "leader": "master1", "voters": 3, "voters_healthy": 3, "quorum": 2,
           "members": [{"id": "8e9e05c52164694d", "name": "master1", "learner": false, "leader": true,
                        "db_size": 25165824, "db_size_in_use": 1220608, "healthy": true, "alarms": []}],
           "alarms": [], "interrupted": []}
defrag_plan:
  description: With O(defrag_plan), each member in the order a defragmentation takes them - C(member),
    C(action) (C(defrag) or C(skip)) and C(why).
  returned: when O(defrag_plan) is true
  type: list
  elements: dict
  sample: [{"member": "master2", "action": "defrag", "why": "follower, 120.0 MB free of 150.0 MB (80 %)"}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import ETCD_THRESHOLDS

ARGUMENT_SPEC = dict(
    defrag_plan=dict(type="bool", default=False),
    **ETCD_THRESHOLDS
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.etcd_info runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

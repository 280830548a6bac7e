#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: static_pod
short_description: Start, stop or restart a kubeadm control-plane static pod with cpctl
version_added: "0.1.0"
description:
  - Parks a static pod's manifest outside the kubelet's manifests dir and waits until its mirror
    pod is gone (O(state=stopped)), puts it back and waits for a new Running and Ready pod and its
    health gate (O(state=started)), or both in turn (O(state=restarted)); journaled and crash-safe,
    recorded in cpctl's history on the master.
  - Runs on the controller (action plugin) with the cpctl installed there; cpctl reaches the master
    over SSH with its standard-library agent. The master needs only C(python3).
  - Stopping or restarting etcd or the API server is refused when it would break etcd's quorum or
    leave no API server serving, counted through the cluster (mirror pods), so this holds with any
    C(serial); such changes of one cluster take turns on the controller.
  - O(state=restarted) always reports a change (like M(ansible.builtin.service)); started and
    stopped report one only when something moved.
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
options:
  component:
    description:
      - The static pod - V(apiserver), V(controller-manager), V(scheduler), V(etcd), or any static pod
        by file stem or C(metadata.name).
    type: str
    required: true
  state:
    description:
      - V(started) puts a parked manifest back, V(stopped) parks it, V(restarted) does both in turn.
    type: str
    choices: [started, stopped, restarted]
    default: started
  reason:
    description:
      - Why (recorded in cpctl's status and history on the master).
    type: str
  until:
    description:
      - With O(state=stopped), how long it may stay parked (V(30m), V(2h)); C(cpctl check) reports
        it afterwards.
    type: str
  timeout:
    description:
      - Seconds to wait for each kubelet step.
    type: float
    default: 120
  force:
    description:
      - Override the etcd quorum / last API server guard (recorded in the history).
    type: bool
    default: false
  move_leader:
    description:
      - For etcd with O(state=stopped) or O(state=restarted), when this master's member leads - hand its
        leadership to a healthy voter first, so the cluster does not wait for an election timeout (never a
        refusal). V(false) is cpctl's C(--no-move-leader).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: cpctl's C(--dry-run) - the moves and the manifests dir before/after, nothing changed.
  diff_mode:
    support: full
    details: The manifests dir listing before and after.
notes:
  - Host variables read (all optional) - C(ansible_host), C(ansible_port), C(ansible_user),
    C(ansible_ssh_private_key_file), C(ansible_python_interpreter), C(cpctl_node_name), C(cpctl_manifests_dir), C(cpctl_state_dir),
    C(cpctl_kubelet_dir), C(cpctl_kubeconfig), C(cpctl_crictl), C(cpctl_node_root), C(cpctl_ssh_config),
    C(cpctl_known_hosts), C(cpctl_persist), C(cpctl_probe), C(cpctl_accept_new_host_key), C(cpctl_command).
seealso:
  - module: cpctl.controlplane.static_pod_flags
  - module: cpctl.controlplane.controlplane_info
"""

EXAMPLES = r"""
- name: Restart the API server after kubeadm certs renew, one master at a time
  cpctl.controlplane.static_pod:
    component: apiserver
    state: restarted
    reason: kubeadm certs renew all

- name: Park the scheduler for a CKA exercise, for at most an hour
  cpctl.controlplane.static_pod:
    component: scheduler
    state: stopped
    until: 1h
"""

RETURN = r"""
node:
  description: The master's Kubernetes node name.
  returned: always
  type: str
  sample: cluster2-master1
results:
  description: One entry per component step (component, action, changed, message).
  returned: when not in check mode
  type: list
  elements: dict
  sample: [{"component": "kube-scheduler", "action": "restart", "changed": true, "message": "restarted"}]
plan:
  description: The moves a real run would make, in order (check mode).
  returned: in check mode
  type: list
  elements: dict
msg:
  description: What happened, or why it failed.
  returned: always
  type: str
rc:
  description: cpctl's exit code on failure (4 refused, 6 timeout, 8 unreachable; see cpctl's README).
  returned: failed
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import COMPONENT, FORCE, MOVE_LEADER, REASON

ARGUMENT_SPEC = dict(
    component=COMPONENT,
    state=dict(type="str", choices=["started", "stopped", "restarted"], default="started"),
    reason=REASON,
    until=dict(type="str"),
    timeout=dict(type="float", default=120.0),
    force=FORCE,
    move_leader=MOVE_LEADER,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.static_pod runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

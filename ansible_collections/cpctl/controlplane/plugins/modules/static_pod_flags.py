#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: static_pod_flags
short_description: Set or remove command-line flags of a kubeadm static pod, verified, with rollback
version_added: "0.1.0"
description:
  - Changes C(--NAME=VALUE) flags of a static pod's container in place (comments and layout kept),
    validates the result like C(cpctl flags), keeps the previous version as a revision, waits for
    the new pod to be Running, Ready and healthy, and puts the previous version back when it is not
    (O(rollback)).
  - Idempotent - flags that already have these values change nothing and report no change.
  - Runs on the controller (action plugin) with the cpctl installed there; the master needs only
    C(python3). etcd and the API server keep cpctl's quorum guard, counted through the cluster.
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
  - cpctl.controlplane.manifest_change
  - cpctl.controlplane.manifest_change.companions
options:
  set:
    description:
      - Flags to set, C(NAME) (without the dashes) to C(VALUE).
      - The values of flags named like a credential (cpctl's redaction rule - C(token), C(db-pass),
        C(initial-cluster-token)...) are masked in the result; other values are not secrets.
    type: dict
    default: {}
  unset:
    description: Flags to remove (names without the dashes).
    type: list
    elements: str
    default: []
  container:
    description: The container (default - the only one, or the one named like the pod).
    type: str
  mount:
    description:
      - For each O(set) value that is an absolute path the container does not see, add a hostPath
        volume and a read-only mount (for C(audit-log-path) its directory, writable). cpctl's C(--mount).
    type: bool
    default: false
notes:
  - A failure that cpctl rolled back fails the task (rc 11); a rollback that did not come back
    healthy either is rc 12.
seealso:
  - module: cpctl.controlplane.static_pod_manifest
"""

EXAMPLES = r"""
- name: Enable an admission plugin on every API server, one master at a time
  cpctl.controlplane.static_pod_flags:
    component: apiserver
    set:
      enable-admission-plugins: NodeRestriction,PodSecurity
    reason: CIS 1.2.x
"""

RETURN = r"""
cpctl:
  description: cpctl's answer for this master (component, file, revision, checksum, message, flags).
  returned: success
  type: dict
msg:
  description: What happened, or why it failed.
  returned: always
  type: str
rc:
  description: cpctl's exit code on failure (11 rolled back, 12 rollback failed, 4 refused).
  returned: failed
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import COMPANIONS, MANIFEST_CHANGE

ARGUMENT_SPEC = dict(
    MANIFEST_CHANGE,
    with_file=COMPANIONS["with_file"],
    keep_in=COMPANIONS["keep_in"],
    set=dict(type="dict", default={}, no_log=False),   # masked by flag: SECRET values only (the action)
    unset=dict(type="list", elements="str", default=[]),
    container=dict(type="str"),
    mount=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.static_pod_flags runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

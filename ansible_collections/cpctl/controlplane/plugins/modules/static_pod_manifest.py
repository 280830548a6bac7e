#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: static_pod_manifest
short_description: Replace a kubeadm static pod's manifest, or roll it back to a kept revision
version_added: "0.1.0"
description:
  - With O(src) or O(content), replaces the static pod's manifest like C(cpctl apply) - validated
    (a pod the kubelet would run, the same name, no duplicated flag, the files its flags name exist,
    no port taken), the previous version kept as a revision, written atomically, the new pod
    verified Running, Ready and healthy, and rolled back automatically when it is not.
  - With O(rollback_to), puts kept revision N back (C(cpctl rollback --to N)), verified the same way.
  - The same bytes as the file already holds change nothing (no change reported).
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
  src:
    description: The new manifest, a file on the controller (searched in the role's or play's C(files/)).
    type: path
  content:
    description: The new manifest's text.
    type: str
  rollback_to:
    description: Put this kept revision back (see C(cpctl revisions) or M(cpctl.controlplane.controlplane_info)).
    type: int
notes:
  - Exactly one of O(src), O(content) and O(rollback_to).
seealso:
  - module: cpctl.controlplane.static_pod_flags
"""

EXAMPLES = r"""
- name: Apply a reviewed scheduler manifest
  cpctl.controlplane.static_pod_manifest:
    component: scheduler
    src: kube-scheduler.yaml
    reason: CHANGE-1234

- name: Put revision 3 of the API server back
  cpctl.controlplane.static_pod_manifest:
    component: apiserver
    rollback_to: 3
"""

RETURN = r"""
cpctl:
  description: cpctl's answer for this master (component, file, revision, checksum, previous, message).
  returned: success
  type: dict
msg:
  description: What happened, or why it failed.
  returned: always
  type: str
rc:
  description: cpctl's exit code on failure (11 rolled back, 12 rollback failed, 4 refused, 3 no such revision).
  returned: failed
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import COMPANIONS, MANIFEST_CHANGE

ARGUMENT_SPEC = dict(
    MANIFEST_CHANGE,
    with_file=COMPANIONS["with_file"],
    keep_in=COMPANIONS["keep_in"],
    src=dict(type="path"),
    content=dict(type="str", no_log=True),
    rollback_to=dict(type="int"),
)
MUTUALLY_EXCLUSIVE = [["src", "content", "rollback_to"]]
REQUIRED_ONE_OF = [["src", "content", "rollback_to"]]


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           required_one_of=REQUIRED_ONE_OF, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.static_pod_manifest runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

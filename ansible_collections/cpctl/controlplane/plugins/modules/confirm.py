#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: confirm
short_description: Keep, or revert now, a commit-confirmed static pod change made with cpctl
version_added: "0.1.0"
description:
  - A change made with O(cpctl.controlplane.static_pod_flags#module:confirm_within) (or the same option
    of M(cpctl.controlplane.static_pod_manifest)) reverts by itself, verified, unless it is confirmed in
    time - the commit-confirmed pattern of network devices, for a change that could cut the operator
    off (authorization, admission, the API server's own certificates).
  - O(state=confirmed) keeps it (C(cpctl confirm)), O(state=reverted) puts the revision before it
    back now (C(cpctl revert-unconfirmed)), verified.
  - Nothing armed for the component is no error - confirmed or reverted already - and reports no change.
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
options:
  component:
    description: The static pod whose change to confirm or revert (required unless O(all)).
    type: str
  all:
    description: With O(state=confirmed), every unconfirmed change of the master.
    type: bool
    default: false
  state:
    description: V(confirmed) keeps the change, V(reverted) reverts it now.
    type: str
    choices: [confirmed, reverted]
    default: confirmed
  reason:
    description: Why (recorded in cpctl's history on the master), with O(state=confirmed).
    type: str
attributes:
  check_mode:
    support: full
    details: Reads whether a change awaits confirmation (C(cpctl status)); nothing changes.
  diff_mode:
    support: none
notes:
  - O(state=reverted) reverts now over SSH (C(cpctl -H MASTER revert-unconfirmed)) as on the master itself
    (a local connection, as C(ansible-pull) runs); without it the revert timer on the master reverts an
    unconfirmed change at its deadline by itself.
  - O(state=confirmed) of a change past its deadline fails with rc 4, too late to keep it (its revert is owed).
  - Reads the same host variables as M(cpctl.controlplane.static_pod).
seealso:
  - module: cpctl.controlplane.static_pod_flags
  - module: cpctl.controlplane.static_pod_manifest
"""

EXAMPLES = r"""
- name: Keep the API server's authorization change once the checks passed
  cpctl.controlplane.confirm:
    component: apiserver
    reason: kubectl auth can-i passed

- name: Keep every unconfirmed change of the master
  cpctl.controlplane.confirm:
    all: true
"""

RETURN = r"""
cpctl:
  description: cpctl's answer for this master (confirmed components, or the revert's revision and message).
  returned: success
  type: dict
msg:
  description: What happened, or why it failed.
  returned: always
  type: str
rc:
  description: cpctl's exit code on failure (12 the revert did not come back healthy, 10 another writer replaced the change).
  returned: failed
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import REASON

ARGUMENT_SPEC = dict(
    component=dict(type="str"),
    all=dict(type="bool", default=False),
    state=dict(type="str", choices=["confirmed", "reverted"], default="confirmed"),
    reason=REASON,
)
REQUIRED_ONE_OF = [["component", "all"]]
MUTUALLY_EXCLUSIVE = [["component", "all"]]


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_one_of=REQUIRED_ONE_OF,
                           mutually_exclusive=MUTUALLY_EXCLUSIVE, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.confirm runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

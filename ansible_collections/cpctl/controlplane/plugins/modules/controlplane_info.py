#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: controlplane_info
short_description: A kubeadm master's static pods, drift findings, certificates and revisions as facts
version_added: "0.1.0"
description:
  - Reads, through cpctl, what C(cpctl status) shows (each static pod - file, present or parked,
    the parking reason and deadline, its mirror pod's state), what C(cpctl check) finds (stray
    manifest copies, interrupted runs, forgotten parks, changes since the baseline), what C(cpctl certs)
    shows (each certificate's subject, expiry and chain, and whether each running component uses the
    file on disk or is STALE) and, for the components named in O(revisions), the kept revisions; sets
    them as the fact C(cpctl).
  - Changes nothing, in check mode too. Runs on the controller (action plugin) with the cpctl
    installed there; the master needs only C(python3).
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
  - ansible.builtin.action_common_attributes.facts
options:
  drift:
    description: Also run C(cpctl check) (drift findings).
    type: bool
    default: true
  certs:
    description: Also run C(cpctl certs) (certificates and which components still run on an old one).
    type: bool
    default: true
  revisions:
    description: Components whose kept revisions to list.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - Reads the same host variables as M(cpctl.controlplane.static_pod).
seealso:
  - module: cpctl.controlplane.static_pod
"""

EXAMPLES = r"""
- name: What runs on each master, and any drift
  cpctl.controlplane.controlplane_info:
    revisions: [apiserver]

- name: Stop when a master has drift
  ansible.builtin.assert:
    that: not cpctl.drift.drift
"""

RETURN = r"""
ansible_facts:
  description: The fact C(cpctl).
  returned: always
  type: complex
  contains:
    cpctl:
      description: C(status) (cpctl status's JSON), C(drift) (cpctl check's JSON, with C(drift) true when
        something was found), C(certs) (cpctl certs's JSON - C(certificates) and C(components) with each
        one's verdict) and C(revisions) (component to its kept revisions).
      type: dict
      sample: {"status": {"node": "cluster2-master1", "components": []}, "drift": {"drift": false}, "revisions": {}}
"""

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    drift=dict(type="bool", default=True),
    certs=dict(type="bool", default=True),
    revisions=dict(type="list", elements="str", default=[]),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.controlplane_info runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: etcd_snapshot
short_description: Save a checked snapshot of a kubeadm master's own etcd member with cpctl
version_added: "0.1.0"
description:
  - Runs C(cpctl etcd snapshot save) for the master - the snapshot of its own etcd member, taken through
    cpctl's agent on the master with the master's etcd client certificate (no etcdctl, no certificate
    flags). The file is written B(on the master), never on the controller.
  - The snapshot gets its name only once etcd's appended sha256 matched and the file read as an etcd
    database (its revision and key count as C(etcdutl snapshot status) counts them); a failed or
    interrupted save leaves no file under that name.
  - Without O(path) it goes to cpctl's state dir on the master (C(/var/lib/cpctl/snapshots)), named by its
    time; O(keep) then removes the oldest beyond that many.
author:
  - cpctl maintainers (@cpctl)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - cpctl.controlplane.attributes
  - cpctl.controlplane.etcd
options:
  path:
    description:
      - An absolute path on the master to write the snapshot to; its directory must exist. An existing
        file is never replaced (the task fails, rc 4).
      - Default, a new file in cpctl's snapshot dir on the master.
    type: str
  keep:
    description: Without O(path), keep only the newest this many snapshots of cpctl's snapshot dir (0 keeps all).
    type: int
    default: 0
  timeout:
    description: Seconds the whole snapshot stream may take.
    type: float
    default: 3600.0
attributes:
  check_mode:
    support: full
    details: Lists the master's snapshots (C(cpctl etcd snapshot list)) and reports the save as a change; nothing is written.
  diff_mode:
    support: none
notes:
  - Every run that succeeds writes a new snapshot, so it always reports C(changed).
seealso:
  - module: cpctl.controlplane.controlplane_info
"""

EXAMPLES = r"""
- name: A snapshot of one master's etcd before an upgrade, keeping the last 10
  cpctl.controlplane.etcd_snapshot:
    keep: 10
  run_once: true

- name: A snapshot at a path of our own
  cpctl.controlplane.etcd_snapshot:
    path: /var/backups/etcd-before-upgrade.db
"""

RETURN = r"""
cpctl:
  description: cpctl's answer - C(snapshot) (C(path), C(size), C(sha256), C(revision), C(keys), C(member)),
    C(where) (which machine holds the file), C(pruned); in check mode, the master's snapshot list.
  returned: success
  type: dict
  sample: {"snapshot": {"path": "/var/lib/cpctl/snapshots/etcd-snapshot-20261207T150000Z.db", "revision": 1200}}
path:
  description: Where the snapshot was written, on the master.
  returned: success, not in check mode
  type: str
msg:
  description: What happened, or why it failed.
  returned: always
  type: str
rc:
  description: cpctl's exit code on failure (4 the file exists already, 5 another save runs, 7 etcd did not answer).
  returned: failed
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

ARGUMENT_SPEC = dict(
    path=dict(type="str"),
    keep=dict(type="int", default=0, no_log=False),
    timeout=dict(type="float", default=3600.0),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="cpctl.controlplane.etcd_snapshot runs on the controller through its action plugin")


if __name__ == "__main__":
    main()

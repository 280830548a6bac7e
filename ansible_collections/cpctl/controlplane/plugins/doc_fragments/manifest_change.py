# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The options, check and diff mode support and notes every manifest-changing module shares
(static_pod_manifest, static_pod_flags; the other attributes are every module's, ``attributes.py``):
one text, so that the modules cannot drift apart. Their argument specs share ``module_utils/specs.py``
the same way."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  component:
    description: The static pod (V(apiserver), V(etcd), ... or a file stem / C(metadata.name)).
    type: str
    required: true
  reason:
    description: Why (recorded in the history).
    type: str
  timeout:
    description: Seconds the new version has to become Running, Ready and healthy.
    type: float
    default: 120
  settle:
    description: Seconds the new pod must stay Ready after it first is.
    type: float
    default: 5
  rollback:
    description: Put the previous version back when the new one does not become healthy.
    type: bool
    default: true
  keep_revisions:
    description: Previous versions kept per manifest.
    type: int
    default: 10
  force:
    description: Override the etcd quorum / last API server guard (recorded in the history).
    type: bool
    default: false
  move_leader:
    description:
      - For etcd, when this master's member leads and the change restarts it - hand its leadership to a
        healthy voter first, so the cluster does not wait for an election timeout (never a refusal).
        V(false) is cpctl's C(--no-move-leader).
    type: bool
    default: true
  confirm_within:
    description:
      - Commit-confirmed - the change reverts by itself (verified) unless it is confirmed within this
        time (V(90s), V(5m)); confirm it with M(cpctl.controlplane.confirm). cpctl's C(--confirm-within).
    type: str
  confirm_check:
    description:
      - With O(confirm_within), a shell command run on the master right after the change; success
        confirms it, failure reverts it at once (rc 11). cpctl's C(--confirm-check).
      - C(no_log) - it may carry a token; its text is masked in the result.
    type: str
attributes:
  check_mode:
    support: full
    details: cpctl's C(--dry-run) - validated, the diff shown, nothing changed.
  diff_mode:
    support: full
    details: The manifest's unified diff.
notes:
  - Reads the same host variables as M(cpctl.controlplane.static_pod).
"""

    # The companion files and kubeadm bookkeeping of an apply or a flags change.
    COMPANIONS = r"""
options:
  with_file:
    description:
      - Companion files written with the manifest by the same journaled change (an audit policy, an
        EncryptionConfiguration) - the path on the master to a file on the controller (searched in the
        role's or play's C(files/)). Kept with the revision and rolled back with it; the new manifest
        must mount the path. cpctl's C(--with-file NODE_PATH=LOCAL_FILE).
    type: dict
    default: {}
  keep_in:
    description:
      - Also keep the change where the next C(kubeadm upgrade) looks - V(kubeadm-config) or
        V(patches) / C(patches=DIR). cpctl's C(--keep-in).
    type: list
    elements: str
    default: []
"""

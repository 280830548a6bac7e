# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The options, attributes and notes every manifest-changing module shares (static_pod_manifest,
static_pod_flags): one text, so that the modules cannot drift apart. Their argument specs share
``module_utils/specs.py`` the same way."""

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
attributes:
  check_mode:
    support: full
    details: cpctl's C(--dry-run) - validated, the diff shown, nothing changed.
  diff_mode:
    support: full
    details: The manifest's unified diff.
  platform:
    platforms: posix
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
notes:
  - Reads the same host variables as M(cpctl.controlplane.static_pod).
"""

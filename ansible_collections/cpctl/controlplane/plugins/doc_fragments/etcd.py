# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the etcd modules (etcd_info, etcd_defrag, etcd_alarm, etcd_snapshot) share: their
host-variable note (``DOCUMENTATION``; their attributes are every module's, ``attributes.py``), the
defragmentation thresholds (``THRESHOLDS``) and a member's defragmentation timeout
(``DEFRAG_TIMEOUT``), written once; their argument specs share ``module_utils/specs.py`` the same way."""

from __future__ import annotations


class ModuleDocFragment:
    # ansible-core refuses a fragment without options or attributes ("missing options or attributes in
    # fragment"): this one adds a note only, so its attributes are empty - the etcd modules' attributes
    # are every module's (cpctl.controlplane.attributes) and their own check/diff mode support.
    DOCUMENTATION = r"""
attributes: {}
notes:
  - Reads the same host variables as M(cpctl.controlplane.static_pod); cpctl asks etcd through this task's master,
    with that master's own etcd client certificate.
"""

    THRESHOLDS = r"""
options:
  min_free:
    description: A member with less free space in its database than this is skipped (C(100MiB), C(1GiB); C(0)
      skips none).
    type: str
    default: 100MiB
  min_ratio:
    description: A member whose free share of its database is below this is skipped (C(0.45), OpenShift's 45 %;
      C(0) skips none).
    type: float
    default: 0.45
"""

    DEFRAG_TIMEOUT = r"""
options:
  timeout:
    description: Seconds one member's defragmentation may take (etcd finishes one whose client went away).
    type: float
    default: 600
"""

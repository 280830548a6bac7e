# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""static_pod_flags: YAML values as the command line writes them; values are no_log."""

from __future__ import annotations

from ansible_collections.cpctl.controlplane.plugins.action.static_pod_flags import flag_value
from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_flags import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_manifest import (
    ARGUMENT_SPEC as MANIFEST_SPEC,
)


def test_flag_values_are_written_as_kubernetes_reads_them():
    assert flag_value(True) == "true" and flag_value(False) == "false"
    assert flag_value(["NodeRestriction", "PodSecurity"]) == "NodeRestriction,PodSecurity"
    assert flag_value(6443) == "6443"


def test_value_bearing_options_are_no_log():
    assert ARGUMENT_SPEC["set"]["no_log"] is True
    assert MANIFEST_SPEC["content"]["no_log"] is True

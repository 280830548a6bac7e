# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller side the modules share (plugin_utils/cpctl.py), without Ansible's executor:
how cpctl's command line is built, how its answers become task results."""

from __future__ import annotations

import json
import types

import pytest

from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import MANIFEST_CHANGE
from ansible_collections.cpctl.controlplane.plugins.plugin_utils.cpctl import (
    UNREACHABLE,
    CpctlAction,
    _error_line,
    change_options,
    command,
    dry_run,
)


def test_the_component_comes_last_after_a_double_dash():
    argv = command(["stop"], ["--timeout", "5"], "--help")
    assert argv == ["stop", "--timeout", "5", "--", "--help"]
    assert dry_run(argv) == ["stop", "--timeout", "5", "--dry-run", "--", "--help"]


def test_change_options_spell_every_shared_option():
    args = {name: spec.get("default") for name, spec in MANIFEST_CHANGE.items()}
    assert change_options(args) == ["--timeout", "120.0", "--settle", "5.0", "--keep-revisions", "10"]
    args.update(reason="why", rollback=False, force=True, move_leader=False, confirm_within="5m",
                confirm_check="true", keep_in=["kubeadm-config"])
    assert change_options(args)[6:] == ["--reason", "why", "--no-rollback", "--force", "--no-move-leader",
                                        "--confirm-within", "5m", "--confirm-check", "true", "--keep-in",
                                        "kubeadm-config"]


def test_the_error_line_is_cpctls_json_message_with_its_hint():
    stderr = "noise\n" + json.dumps({"error": {"message": "refused: quorum", "hint": "start etcd on m2"}}) + "\n"
    assert _error_line(stderr) == "refused: quorum (hint: start etcd on m2)"
    assert _error_line("plain text\nlast line\n") == "last line"
    assert _error_line("") == ""


def test_an_unreachable_master_is_unreachable_not_failed():
    result = CpctlAction.failed(None, UNREACHABLE, "m1: connection refused")
    assert result["unreachable"] is True and "failed" not in result and "rc" not in result
    assert "exit 8: unreachable" in result["msg"]
    result = CpctlAction.failed(None, 4, "refused: quorum", {"changed": False, "node": "m1"})
    assert result["failed"] is True and result["rc"] == 4 and result["cpctl"]["node"] == "m1"


@pytest.mark.parametrize("transport, local", [("local", True), ("ansible.builtin.local", True), ("ssh", False),
                                              ("paramiko", False)])
def test_a_local_connection_runs_cpctl_on_this_node(transport, local):
    action = types.SimpleNamespace(_connection=types.SimpleNamespace(transport=transport))
    assert CpctlAction.runs_locally(action) is local

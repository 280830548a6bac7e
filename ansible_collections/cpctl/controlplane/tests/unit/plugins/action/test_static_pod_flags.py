# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""static_pod_flags: YAML values as the command line writes them; only secret values are no_log."""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.cpctl.controlplane.plugins.action.static_pod_flags import ActionModule, flag_value
from ansible_collections.cpctl.controlplane.plugins.module_utils.specs import MANIFEST_CHANGE
from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_flags import ARGUMENT_SPEC
from ansible_collections.cpctl.controlplane.plugins.modules.static_pod_manifest import (
    ARGUMENT_SPEC as MANIFEST_SPEC,
)


def test_flag_values_are_written_as_kubernetes_reads_them():
    assert flag_value(True) == "true" and flag_value(False) == "false"
    assert flag_value(["NodeRestriction", "PodSecurity"]) == "NodeRestriction,PodSecurity"
    assert flag_value(6443) == "6443"


def test_no_log_covers_secrets_only():
    """Issue 49: ``set`` as a whole was no_log, so a ``v: 2`` masked every 2 in the result (rc became
    "********", paths and checksums were cut); now only the values of flags named like a credential
    (cpctl's redaction rule), a manifest's content and --confirm-check are masked."""
    assert ARGUMENT_SPEC["set"]["no_log"] is False
    assert MANIFEST_SPEC["content"]["no_log"] is True
    assert MANIFEST_CHANGE["confirm_check"]["no_log"] is True and ARGUMENT_SPEC["confirm_check"]["no_log"] is True


def _run(monkeypatch, params, answer):
    """The action's run on ``params`` (validated by Ansible's own validator against the module's
    spec, which collects the no_log values), cpctl's run replaced by ``answer``: what the task returns."""
    action = object.__new__(ActionModule)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(params, component="kube-scheduler"))
    assert not validated.errors.errors, [str(e) for e in validated.errors.errors]
    args = validated.validated_parameters
    monkeypatch.setattr(ActionModule, "validate_argument_spec", lambda self, **kw: (validated, args))
    monkeypatch.setattr(ActionModule, "act", lambda self, args, task_vars: dict(answer))
    return action.run(task_vars={})


def test_a_plain_flag_value_masks_nothing_and_a_secret_one_is_masked(monkeypatch):
    answer = {"rc": 2, "changed": True, "path": "/var/lib/cpctl/revisions/kube-scheduler.yaml.2",
              "checksum": "2" * 64, "msg": "--v set to 2; --db-pass set to hunter2"}
    result = _run(monkeypatch, {"set": {"v": 2}}, answer)
    assert result["rc"] == 2 and result["path"] == answer["path"] and result["checksum"] == answer["checksum"]
    result = _run(monkeypatch, {"set": {"v": 2, "db-pass": "hunter2", "token": "abc.def"}},
                  dict(answer, msg="--token abc.def; --db-pass hunter2"))
    assert result["rc"] == 2 and "hunter2" not in result["msg"] and "abc.def" not in result["msg"], result
    assert result["checksum"] == answer["checksum"]
    # --confirm-check's command (no_log) is masked wherever it shows
    check = "curl -H 'Authorization: Bearer s3cr3t' https://127.0.0.1:6443/livez"
    result = _run(monkeypatch, {"set": {"v": 2}, "confirm_within": "5m", "confirm_check": check},
                  dict(answer, msg="--confirm-check %r failed" % check))
    assert "s3cr3t" not in result["msg"] and result["rc"] == 2

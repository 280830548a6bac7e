"""Issue #37: ``apply`` of a pod with a typo in a field name (``volumeMount:``) is refused with the
nearest known name, against the lab, whose kubelet drops unknown fields without a word as the real
one does (cpctl_lab/decoded.py); ``--force`` applies it with the same sentence as a warning."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.labfixture import run_cpctl


def test_a_typo_in_a_field_name_is_refused_with_did_you_mean(lab: Any, tmp_path: Path) -> None:
    path = os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")
    with open(path, "rb") as handle:
        original = handle.read()
    assert original.count(b"    volumeMounts:\n") == 1
    typo = original.replace(b"    volumeMounts:\n", b"    volumeMount:\n")
    source = tmp_path / "typo.yaml"
    source.write_bytes(typo)
    proc = run_cpctl(lab, "-o", "json", "apply", "scheduler", "-f", str(source), "--settle", "0.2")
    assert proc.returncode == 4, proc.stderr
    message = json.loads(proc.stderr.strip().splitlines()[-1])["error"]["message"]
    assert "spec.containers[0]: unknown field volumeMount (did you mean volumeMounts?)" in message
    with open(path, "rb") as handle:
        assert handle.read() == original                                 # nothing changed
    dry = run_cpctl(lab, "apply", "scheduler", "-f", str(source), "--dry-run")
    assert dry.returncode == 4 and "did you mean volumeMounts?" in dry.stderr      # the dry run decides alike
    # a field of a newer release than the node's (the lab's manifests are tagged v1.30.4): dropped the same way
    assert b"\n  hostNetwork: true\n" in original
    source.write_bytes(original.replace(b"\n  hostNetwork: true\n", b"\n  hostNetwork: true\n  hostnameOverride: cp\n"))
    newer = run_cpctl(lab, "apply", "scheduler", "-f", str(source), "--dry-run")
    assert newer.returncode == 4 and "spec: field hostnameOverride is not in Kubernetes 1.30 (1.34 and later)" \
        in newer.stderr, newer.stderr
    source.write_bytes(typo)
    # --force overrides the doubt, not what the typo causes: the kubeconfig is then mounted nowhere
    forced = run_cpctl(lab, "apply", "scheduler", "-f", str(source), "--force")
    assert forced.returncode == 4 and "which no hostPath volume mounts" in forced.stderr

    # A typo whose loss is harmless (the default is the same): refused, --force applies it with a warning
    harmless = original.replace(b"imagePullPolicy: IfNotPresent", b"imagePullPolicyy: IfNotPresent")
    assert harmless != original
    source.write_bytes(harmless)
    proc = run_cpctl(lab, "apply", "scheduler", "-f", str(source))
    assert proc.returncode == 4 and "unknown field imagePullPolicyy (did you mean imagePullPolicy?)" in proc.stderr
    assert "--force" in proc.stderr                                               # the hint says how
    forced = run_cpctl(lab, "-o", "json", "apply", "scheduler", "-f", str(source), "--force", "--settle", "0.2")
    assert forced.returncode == 0, forced.stderr
    warnings = json.loads(forced.stdout)["warnings"]
    assert any("did you mean imagePullPolicy?" in w and w.endswith("(--force)") for w in warnings), warnings
    with open(path, "rb") as handle:
        assert handle.read() == harmless

"""Issue #37: ``apply`` of a pod with a typo in a field name (``volumeMount:``) is refused with the
nearest known name, against the lab, whose kubelet drops unknown fields without a word as the real
one does (cpctl_lab/decoded.py); ``--force`` applies it with the same sentence as a warning."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.labfixture import crictl, is_ready, mirror, run_cpctl, wait_for


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


def test_forcing_a_field_newer_than_the_node_keeps_the_pod_as_its_kubelet_does(lab: Any, tmp_path: Path) -> None:
    """A 1.30 kubelet drops ``hostnameOverride`` (1.34 and later) before it hashes the pod: the forced
    apply of a manifest that only adds it is the same pod there. cpctl says so and waits for no new pod
    (which would never come: it would time out and roll back), and the lab's pod is not restarted."""
    path = os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")
    with open(path, "rb") as handle:
        original = handle.read()
    before = wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")) and mirror(lab, "kube-scheduler"), 60,
                      "kube-scheduler Ready")
    ids = crictl(lab.crictl, "ps", "-q", "--name", "^kube-scheduler$").stdout.split()
    assert len(ids) == 1
    newer = original.replace(b"\n  hostNetwork: true\n", b"\n  hostNetwork: true\n  hostnameOverride: cp\n")
    assert newer != original
    source = tmp_path / "newer.yaml"
    source.write_bytes(newer)
    dry = run_cpctl(lab, "apply", "scheduler", "-f", str(source), "--force", "--dry-run")
    assert dry.returncode == 0 and "the kubelet would keep the running pod" in dry.stdout, dry.stdout + dry.stderr
    forced = run_cpctl(lab, "-o", "json", "apply", "scheduler", "-f", str(source), "--force", "--timeout", "60")
    assert forced.returncode == 0, forced.stderr
    result = json.loads(forced.stdout)
    assert result["changed"] is True and result["effect"] == "keeps", result
    assert "what differs are fields Kubernetes 1.30 does not have: its kubelet drops them" in result["message"]
    assert "the kubelet keeps the running pod" in result["message"]
    assert any(w.startswith("spec: field hostnameOverride is not in Kubernetes 1.30 (1.34 and later)")
               for w in result["warnings"]), result["warnings"]
    with open(path, "rb") as handle:
        assert handle.read() == newer                                          # written, not rolled back
    # the lab's kubelet has read the file once it has read a later one: a pod of its own, as a barrier
    barrier = os.path.join(str(lab.manifests_dir()), "barrier.yaml")
    with open(barrier + ".tmp", "w") as handle:
        handle.write("apiVersion: v1\nkind: Pod\nmetadata: {name: barrier, namespace: kube-system}\n"
                     "spec: {containers: [{name: barrier, image: 'registry.k8s.io/pause:3.9'}]}\n")
    os.rename(barrier + ".tmp", barrier)
    wait_for(lambda: is_ready(mirror(lab, "barrier")), 60, "the barrier pod Ready")   # its kubelet synced since
    after = mirror(lab, "kube-scheduler")
    assert after is not None and is_ready(after)
    hashes = [p["metadata"]["annotations"]["kubernetes.io/config.hash"] for p in (before, after)]
    assert hashes[0] == hashes[1], "the 1.30 kubelet sees the same pod"
    assert "hostnameOverride" not in after["spec"]                            # dropped: not in the mirror pod
    assert crictl(lab.crictl, "ps", "-q", "--name", "^kube-scheduler$").stdout.split() == ids   # not restarted

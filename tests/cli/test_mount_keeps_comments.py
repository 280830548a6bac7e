"""``flags --mount`` keeps the manifest's comments (issue 48): the hostPath volumes and mounts it adds
are spliced into the text after the last ones there (``core.flags.append_in_place``), every other byte
as it was; only a layout that allows no splice is re-written as a whole, and then it says so."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cpctl.core import companions
from tests.labfixture import lab, run_cpctl  # noqa: F401

POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n"
LOST = "comments are lost"


def _only_added(before: str, after: str) -> list:
    """The lines ``after`` adds to ``before``, failing when it changed or removed any line of it."""
    import difflib
    old, new = before.splitlines(), after.splitlines()
    opcodes = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    assert all(tag in ("equal", "insert") for tag, *_ in opcodes), [o for o in opcodes if o[0] != "equal"]
    return [line for tag, _a, _b, c, d in opcodes if tag == "insert" for line in new[c:d]]


def test_the_audit_recipes_mounts_keep_the_api_servers_comments(lab: Any, tmp_path: Path) -> None:
    """The audit recipe (a policy file read, a log directory written) with ``--mount`` on the lab's API
    server, whose manifest has a comment of its own on its own line and after a value: both stay, the
    text is the one before plus the new volume and mount lines, and nothing says comments are lost."""
    path = lab.manifests_dir() / "kube-apiserver.yaml"
    commented = path.read_text().replace("  volumes:\n", "  # hostPaths: see the runbook, page 12\n  volumes:\n", 1)
    commented = commented.replace("  hostNetwork: true\n", "  hostNetwork: true  # kubeadm's\n", 1)
    assert commented.count("#") == 2, commented
    path.write_text(commented)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    proc = run_cpctl(lab, "flags", "apiserver", "--set", "audit-policy-file=/etc/kubernetes/audit/policy.yaml",
                     "--set", "audit-log-path=/var/log/kubernetes/audit/audit.log",
                     "--with-file", "/etc/kubernetes/audit/policy.yaml=%s" % policy, "--mount", "--timeout", "60")
    assert proc.returncode == 0, proc.stderr
    assert LOST not in proc.stdout + proc.stderr, proc.stdout
    after = path.read_text()
    assert "  # hostPaths: see the runbook, page 12\n" in after and "  hostNetwork: true  # kubeadm's\n" in after
    pod = yaml.safe_load(after)
    mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/etc/kubernetes/audit/policy.yaml"]["readOnly"] is True
    assert "readOnly" not in mounts["/var/log/kubernetes/audit"]
    added = _only_added(commented, after)      # every line before kept, in place: only lines added
    assert sum(line.lstrip().startswith("- --audit-") for line in added) == 2, added
    stripped = {line.strip() for line in added}
    assert {"mountPath: /etc/kubernetes/audit/policy.yaml", "mountPath: /var/log/kubernetes/audit",
            "path: /etc/kubernetes/audit/policy.yaml", "path: /var/log/kubernetes/audit"} <= stripped, added


def test_a_manifest_without_volumes_gets_them_as_new_keys_and_a_flow_style_one_is_rewritten() -> None:
    """No volumes or mounts yet: the keys are added after the last line of their mapping, the rest kept.
    A layout the splice does not handle (a flow-style list) is re-written as a whole, and said."""
    data = (b"apiVersion: v1\nkind: Pod\n# the scheduler\nmetadata:\n  name: kube-scheduler\n  namespace: kube-system\n"
            b"spec:\n  containers:\n  - command:\n    - kube-scheduler  # the binary\n    image: k8s/s:v1\n"
            b"    name: kube-scheduler\n  # host network: kubeadm's\n  hostNetwork: true\n")
    wanted = [("/etc/kubernetes/x.yaml", "/etc/kubernetes/x.yaml", companions.READ)]
    new, said = companions.add_mounts(data, 0, wanted)
    assert said == ["hostPath volume kubernetes-x-yaml (File) mounted at /etc/kubernetes/x.yaml, read-only"]
    assert new.decode() == data.decode().replace(
        "    name: kube-scheduler\n", "    name: kube-scheduler\n    volumeMounts:\n    - name: kubernetes-x-yaml\n"
        "      mountPath: /etc/kubernetes/x.yaml\n      readOnly: true\n") + (
        "  volumes:\n  - name: kubernetes-x-yaml\n    hostPath:\n      path: /etc/kubernetes/x.yaml\n"
        "      type: File\n")
    flow = data.replace(b"  hostNetwork: true\n", b"  hostNetwork: true\n  volumes: [{name: a, emptyDir: {}}]\n")
    rewritten, said = companions.add_mounts(flow, 0, wanted)
    assert said[-1].endswith(LOST) and b"#" not in rewritten
    assert [v["name"] for v in yaml.safe_load(rewritten)["spec"]["volumes"]] == ["a", "kubernetes-x-yaml"]

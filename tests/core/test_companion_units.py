"""Companion files in pieces (issue #24 item 3): the journal's reach, the mount helpers, and the lab's
checks of audit policies, EncryptionConfigurations and AdmissionConfigurations."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest
import yaml

from cpctl.core import companions, journal, mounts
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError
from cpctl.host.local import LocalHost
from cpctl.ops.wiring import open_node
from cpctl_lab import configfiles
from tests.coreutil import MANIFESTS, NODE, NodeDirs, sealed, sha


def _journal(node: NodeDirs, path: str, named: list) -> None:
    """A journal (as a killed cpctl leaves it) whose one write step goes to ``path``."""
    os.makedirs(os.path.join(node.state, "staged"), exist_ok=True)
    staged = os.path.join(node.state, "staged", "op.0.new")
    with open(staged, "wb") as handle:
        handle.write(b"x")
    entry = {"version": journal.JOURNAL_VERSION, "op": "op", "action": "apply", "component": "kube-scheduler",
             "file": "kube-scheduler.yaml", "checksum": None, "commit": 0, "record": {},
             "steps": [{"kind": "write", "path": path, "checksum": sha(b"x"), "staged": staged, "mode": 384}],
             "started": "2026-01-01T00:00:00Z", "pid": 1, "companions": named}
    with open(node.journal, "w") as handle:
        json.dump(sealed(node.state, entry), handle)


def _recover(node: NodeDirs) -> Any:
    settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")
    return open_node(settings, LocalHost())


def test_the_journal_reaches_a_companion_path_only_when_the_change_records_it(tmp_path: Any) -> None:
    node = NodeDirs(str(tmp_path / "a"))
    inside = os.path.join(node.root, "audit", "policy.yaml")
    _journal(node, inside, [])
    with pytest.raises(CpctlError, match="is corrupt .*outside the manifests dir"):
        _recover(node).changes.change_from_journal(json.load(open(node.journal)))
    _journal(node, inside, [inside])
    change = _recover(node).changes.change_from_journal(json.load(open(node.journal)))
    assert change.companions == [inside]
    for bad in (["relative/path"], [inside + "/../x"], "not a list", ["/"]):
        _journal(node, bad[0] if isinstance(bad, list) and bad[0].startswith("/") else inside, bad)
        with pytest.raises(CpctlError, match="is corrupt"):
            _recover(node).changes.change_from_journal(json.load(open(node.journal)))


def _snapshot(*roots: str, skip: str = "") -> Dict[str, Any]:
    """Every file below ``roots`` (but not below ``skip``): mode and bytes."""
    found: Dict[str, Any] = {}
    for root in roots:
        for dirpath, _dirs, names in os.walk(root):
            if skip and (dirpath + "/").startswith(skip + "/"):
                continue
            for name in names:
                path = os.path.join(dirpath, name)
                info = os.lstat(path)
                found[path] = (info.st_mode, open(path, "rb").read() if os.path.isfile(path) else None)
    return found


def test_a_crafted_journal_cannot_reach_past_its_allowance_through_its_companions(tmp_path: Any) -> None:
    """Issue 33 item 4: a journal naming targets in its own ``companions`` list is refused, nothing
    touched: admin.conf removed, pki/ca.crt written mode 04755, a file outside the kube dir overwritten,
    a write through a symlinked directory, a companion written with another mode."""
    node = NodeDirs(str(tmp_path / "a"))
    outside_dir = str(tmp_path / "outside")
    os.makedirs(os.path.join(node.root, "pki"))
    os.makedirs(outside_dir)
    for path in (os.path.join(node.root, "admin.conf"), os.path.join(node.root, "pki", "ca.crt"),
                 os.path.join(outside_dir, "victim")):
        with open(path, "wb") as handle:
            handle.write(b"precious")
    os.symlink(outside_dir, os.path.join(node.root, "linked"))
    before = _snapshot(node.root, outside_dir, skip=node.state)
    admin = os.path.join(node.root, "admin.conf")
    crafted = [
        ({"kind": "remove", "path": admin, "kept": os.path.join(node.state, "staged", "op.0.removed")}, admin),
        ({"kind": "write", "path": os.path.join(node.root, "pki", "ca.crt"), "mode": 0o4755}, None),
        ({"kind": "write", "path": os.path.join(outside_dir, "victim")}, None),
        ({"kind": "write", "path": os.path.join(node.root, "linked", "victim")}, None),
        ({"kind": "write", "path": os.path.join(node.root, "audit", "policy.yaml"), "mode": 0o4755}, None),
    ]
    for step, _ in crafted:
        _journal(node, step["path"], [step["path"]])
        with open(node.journal) as handle:
            entry = json.load(handle)
        entry["steps"] = [dict(entry["steps"][0], **step)] if step["kind"] == "write" else [step]
        with open(node.journal, "w") as handle:
            json.dump(sealed(node.state, entry), handle)
        with pytest.raises(CpctlError, match="is corrupt"):
            _recover(node).changes.change_from_journal(json.load(open(node.journal)))
        node.run("status", rc=None)                 # the next command meets it: refused, nothing touched
        assert _snapshot(node.root, outside_dir, skip=node.state) == before, step
        os.unlink(node.journal)


def test_add_mounts_adds_a_read_only_file_and_a_writable_log_directory() -> None:
    data = MANIFESTS["kube-scheduler.yaml"]
    policy, log = "/etc/kubernetes/audit/policy.yaml", "/var/log/audit/audit.log"
    new, said = companions.add_mounts(data, 0, [(policy, policy, companions.READ), (log, log, companions.WRITES_FILE)])
    pod = yaml.safe_load(new)
    volumes = {v["name"]: v["hostPath"] for v in pod["spec"]["volumes"]}
    assert volumes["audit-policy-yaml"] == {"path": "/etc/kubernetes/audit/policy.yaml", "type": "File"}
    assert volumes["log-audit"] == {"path": "/var/log/audit", "type": "DirectoryOrCreate"}
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["audit-policy-yaml"]["readOnly"] is True and "readOnly" not in mounts["log-audit"]
    assert companions.add_mounts(new, 0, [("/etc/kubernetes/audit/policy.yaml",
                                           "/etc/kubernetes/audit/policy.yaml", companions.READ)]) == (new, [])
    assert companions.mounted(pod, "/etc/kubernetes/audit/policy.yaml")
    assert not companions.mounted(pod, "/etc/kubernetes/audit/other.yaml")
    assert len(said) == 2 and new.startswith(data.split(b"  hostNetwork")[0])     # spliced in: nothing re-written


def test_node_paths_of_a_chrooted_node_go_through_the_node_root() -> None:
    """Companion paths map to the node's root by the same helper as hostPaths (``--node-root``,
    mounts.under_root / node_path): given as a node path or already below the root, the same file."""
    root = "/lab/root-m1"
    [moved, kept] = companions.on_node([companions.Companion("/etc/kubernetes/a.yaml", b""),
                                        companions.Companion(root + "/etc/kubernetes/b.yaml", b"")], root)
    assert (moved.path, kept.path) == (root + "/etc/kubernetes/a.yaml", root + "/etc/kubernetes/b.yaml")
    assert companions.on_node([companions.Companion("/etc/kubernetes/a.yaml", b"")], "/")[0].path == \
        "/etc/kubernetes/a.yaml"
    assert companions.container_path(moved.path, root) == "/etc/kubernetes/a.yaml"
    assert mounts.node_path(root, mounts.under_root(root, "/etc/kubernetes/pki")) == "/etc/kubernetes/pki"
    assert companions.mount_wanted([("audit-policy-file", "/etc/kubernetes/a.yaml")], [moved], root) == \
        [("/etc/kubernetes/a.yaml", "/etc/kubernetes/a.yaml", companions.READ)]


POLICY = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"
ENCRYPTION = ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
              "- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: k\n"
              "        secret: c2VjcmV0IGlzIHNlY3VyZSwgb3IgaXMgaXQ/IDMyIGI=\n  - identity: {}\n")
ADMISSION = ("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
             "- name: EventRateLimit\n  path: /etc/kubernetes/admission/eventconfig.yaml\n")


@pytest.mark.parametrize("flag,good,bad,message", [
    ("audit-policy-file", POLICY, POLICY.replace("kind: Policy", "kind: Polcy"), 'no kind "Polcy"'),
    ("audit-policy-file", POLICY, POLICY.replace("Metadata", "Everything"), 'Unsupported value: "Everything"'),
    ("audit-policy-file", POLICY, "apiVersion: audit.k8s.io/v1\nkind: Policy\n", "0 rules"),
    ("encryption-provider-config", ENCRYPTION, ENCRYPTION.replace("c2VjcmV0IGlzIHNlY3VyZSwgb3IgaXMgaXQ/IDMyIGI=",
                                                                  "c2hvcnQ="), "expected one of [16, 24, 32]"),
    ("encryption-provider-config", ENCRYPTION, ENCRYPTION.replace("  providers:", "  nothing:"),
     "providers: Required value"),
    ("admission-control-config-file", ADMISSION, ADMISSION.replace("- name: EventRateLimit\n", "- nme: x\n"),
     "plugins[0].name: Required value"),
])
def test_lab_config_checks(tmp_path: Any, flag: str, good: str, bad: str, message: str) -> None:
    path = tmp_path / "file.yaml"
    path.write_text(good)
    assert configfiles.config_error(flag, "/etc/kubernetes/x.yaml", str(path)) is None
    path.write_text(bad)
    found = configfiles.config_error(flag, "/etc/kubernetes/x.yaml", str(path))
    assert found is not None and message in found, found
    missing = configfiles.config_error(flag, "/etc/kubernetes/x.yaml", None)
    assert missing is not None and "open /etc/kubernetes/x.yaml: no such file or directory" in missing


def test_audit_levels_follow_the_first_matching_rule() -> None:
    policy = {"rules": [{"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
                        {"level": "RequestResponse", "verbs": ["create"]}, {"level": "Metadata"}]}
    assert configfiles.audit_level(policy, "admin", "update", "leases", "kube-system") == "None"
    assert configfiles.audit_level(policy, "admin", "create", "pods", "default") == "RequestResponse"
    assert configfiles.audit_level(policy, "admin", "list", "namespaces", "") == "Metadata"
    event = configfiles.audit_event("GET", "/api/v1/namespaces/kube-system/pods/p1", "admin", ["g"], 200, "id", "::1",
                                    "kubectl")
    assert event["verb"] == "get" and event["objectRef"] == {"namespace": "kube-system", "resource": "pods",
                                                              "name": "p1", "apiVersion": "v1"}


def test_mounts_are_as_narrow_as_the_flag_needs() -> None:
    """Issue 33 item 5: ``--mount`` for a log file directly in /, /etc or /var is refused (it would mount
    the whole directory writable into the API server); a data dir is mounted itself, writable
    (DirectoryOrCreate), not as a read-only File; the change says which mount it added."""
    data = MANIFESTS["kube-apiserver.yaml"]
    for log in ("/x.log", "/etc/x.log", "/var/x.log"):
        wanted = companions.mount_wanted([("audit-log-path", log)], [], "/", "kube-apiserver")
        assert wanted == [(log, log, companions.WRITES_FILE)]
        with pytest.raises(CpctlError, match="writable into the container") as refused:
            companions.add_mounts(data, 0, wanted)
        assert refused.value.code == 4
    wanted = companions.mount_wanted([("audit-log-path", "/var/log/kubernetes/audit/audit.log")], [], "/",
                                     "kube-apiserver")
    new, said = companions.add_mounts(data, 0, wanted)
    volume = yaml.safe_load(new)["spec"]["volumes"][-1]
    assert volume["hostPath"] == {"path": "/var/log/kubernetes/audit", "type": "DirectoryOrCreate"}
    assert "writable" in said[0] and "/var/log/kubernetes/audit" in said[0]
    etcd = MANIFESTS["etcd.yaml"]
    wanted = companions.mount_wanted([("data-dir", "/var/lib/etcd-restored")], [], "/", "etcd")
    assert wanted == [("/var/lib/etcd-restored", "/var/lib/etcd-restored", companions.WRITES_DIR)]
    new, said = companions.add_mounts(etcd, 0, wanted)
    pod = yaml.safe_load(new)
    assert pod["spec"]["volumes"][-1]["hostPath"] == {"path": "/var/lib/etcd-restored", "type": "DirectoryOrCreate"}
    mount = pod["spec"]["containers"][0]["volumeMounts"][-1]
    assert mount["mountPath"] == "/var/lib/etcd-restored" and not mount.get("readOnly")
    with pytest.raises(CpctlError, match="writable into the container"):
        companions.add_mounts(etcd, 0, companions.mount_wanted([("data-dir", "/data")], [], "/", "etcd"))


def test_flags_mount_of_a_log_in_the_root_dir_is_refused_nothing_changed(node: NodeDirs) -> None:
    proc = node.run("flags", "apiserver", "--set", "audit-log-path=/x.log", "--mount", rc=4)
    assert "writable into the container" in proc.stderr and "nothing changed" in proc.stderr
    with open(os.path.join(node.manifests, "kube-apiserver.yaml"), "rb") as handle:
        assert handle.read() == node.files["kube-apiserver.yaml"]

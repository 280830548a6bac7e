"""Companion files in the one-version-per-revision store (issue #24 item 3 on top of issue #23 item
2): each revision is one version of the manifest WITH the companion files as they were while that
version was in place; ``rollback --to N`` puts back N's manifest and N's companion files (removing one
that did not exist then); a version found kept already takes the companions' bytes of the change
that finds it; pruning a revision removes its kept companion bytes; a corrupt ``companions`` record
is one clear error."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any, Dict, List

import yaml

from tests.coreutil import NodeDirs, check_result, run_in_process, sha


def _note(node: NodeDirs) -> str:
    """A companion path below the node's kube dir (the parent of the manifests dir)."""
    return os.path.join(node.root, "extra", "note.txt")


def _mounting(node: NodeDirs, verbosity: int) -> bytes:
    """The scheduler manifest mounting the note read-only, with ``--v=N`` (a distinct version each N)."""
    pod = yaml.safe_load(node.files["kube-scheduler.yaml"])
    container = pod["spec"]["containers"][0]
    container["command"].append("--v=%d" % verbosity)
    pod["spec"].setdefault("volumes", []).append({"name": "note", "hostPath": {"path": _note(node), "type": "File"}})
    container.setdefault("volumeMounts", []).append({"name": "note", "mountPath": _note(node), "readOnly": True})
    return yaml.safe_dump(pod, sort_keys=False).encode()


def _apply(node: NodeDirs, data: bytes, note: bytes, tmp: str, *args: str) -> None:
    local = os.path.join(tmp, "local-%s.txt" % sha(note)[:8])
    with open(local, "wb") as handle:
        handle.write(note)
    proc = subprocess.run(node.argv("apply", "scheduler", "-f", "-", "--with-file", "%s=%s" % (_note(node), local),
                                    *args), input=data, env=node.env(), capture_output=True, timeout=60)
    check_result(subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()), 0)


def _listed(node: NodeDirs) -> List[Dict[str, Any]]:
    return json.loads(node.run("-o", "json", "revisions", "scheduler").stdout)["revisions"]


def _state(node: NodeDirs) -> Dict[str, Any]:
    """(manifest bytes, note bytes or None) now."""
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        manifest = handle.read()
    note = None
    if os.path.exists(_note(node)):
        with open(_note(node), "rb") as handle:
            note = handle.read()
    return {"manifest": manifest, "note": note}


def test_each_version_keeps_its_own_companion_bytes_and_rollback_restores_them(node: NodeDirs, tmp_path: Any) -> None:
    original, v1, v2 = node.files["kube-scheduler.yaml"], _mounting(node, 1), _mounting(node, 2)
    _apply(node, v1, b"a\n", str(tmp_path))
    _apply(node, v2, b"b\n", str(tmp_path))
    assert [(r["number"], r["checksum"], r["companions"]) for r in _listed(node)] == [
        (1, sha(original), [{"path": _note(node), "checksum": None}]),
        (2, sha(v1), [{"path": _note(node), "checksum": sha(b"a\n")}]),
        (3, sha(v2), [{"path": _note(node), "checksum": sha(b"b\n")}])]
    # v1 again with another note: v1 is kept already (no new revision); it now records the new bytes
    _apply(node, v1, b"c\n", str(tmp_path))
    listed = _listed(node)
    assert [(r["number"], r["companions"][0]["checksum"], r["current"]) for r in listed] == [
        (1, None, False), (2, sha(b"c\n"), True), (3, sha(b"b\n"), False)]
    node.run("rollback", "scheduler", "--to", "3")
    assert _state(node) == {"manifest": v2, "note": b"b\n"}
    node.run("rollback", "scheduler", "--to", "2")
    assert _state(node) == {"manifest": v1, "note": b"c\n"}
    node.run("rollback", "scheduler", "--to", "1")
    assert _state(node) == {"manifest": original, "note": None}, "a companion absent then is removed"
    assert len(_listed(node)) == 3, "rollbacks point back at kept versions"
    history = [json.loads(line) for line in open(node.history_file).read().splitlines()]
    assert history[-1]["action"] == "rollback" and history[-1]["companions"] == [
        {"path": _note(node), "source": "revision 1", "checksum": None, "size": None}]


def test_pruning_removes_a_revision_s_companion_bytes(node: NodeDirs, tmp_path: Any) -> None:
    _apply(node, _mounting(node, 1), b"a\n", str(tmp_path))
    _apply(node, _mounting(node, 2), b"b\n", str(tmp_path))
    revisions_dir = os.path.join(node.state, "revisions")
    assert os.path.exists(os.path.join(revisions_dir, "kube-scheduler.yaml.2.f0"))
    _apply(node, _mounting(node, 3), b"c\n", str(tmp_path), "--keep-revisions", "1")
    assert [r["number"] for r in _listed(node)] == [1, 3, 4]
    kept = sorted(n for n in os.listdir(revisions_dir) if ".f" in n)
    assert kept == ["kube-scheduler.yaml.3.f0", "kube-scheduler.yaml.4.f0"], kept


def test_a_corrupt_companions_record_is_one_clear_error(node: NodeDirs, tmp_path: Any) -> None:
    _apply(node, _mounting(node, 1), b"a\n", str(tmp_path))
    meta = os.path.join(node.state, "revisions", "kube-scheduler.yaml.2.json")
    with open(meta) as handle:
        record = json.load(handle)
    record["companions"] = [{"path": "relative/note.txt", "checksum": None}]
    with open(meta, "w") as handle:
        json.dump(record, handle)
    proc = node.run("revisions", "scheduler", rc=7)
    assert "companions is not a list of {path, checksum}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def _other(node: NodeDirs) -> str:
    return os.path.join(node.root, "extra", "other.txt")


def _with_other(node: NodeDirs, tmp_path: Any) -> bytes:
    """v1 (note a) applied, then v3: v1 mounting a NEW companion path ``other`` too, applied with it."""
    v1 = _mounting(node, 1)
    _apply(node, v1, b"a\n", str(tmp_path))                      # rev 1 original, rev 2 v1 (+ note)
    pod = yaml.safe_load(v1)
    container = pod["spec"]["containers"][0]
    pod["spec"]["volumes"].append({"name": "other", "hostPath": {"path": _other(node), "type": "File"}})
    container["volumeMounts"].append({"name": "other", "mountPath": _other(node), "readOnly": True})
    v3 = yaml.safe_dump(pod, sort_keys=False).encode()
    local = os.path.join(str(tmp_path), "other.txt")
    with open(local, "wb") as handle:
        handle.write(b"other\n")
    proc = subprocess.run(node.argv("apply", "scheduler", "-f", "-", "--with-file", "%s=%s" % (_other(node), local)),
                          input=v3, env=node.env(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return v1


def test_a_new_companion_path_is_recorded_absent_on_the_version_it_replaces(node: NodeDirs, tmp_path: Any) -> None:
    """Issue 33 item 2: a change bringing a NEW companion path over a version kept already (which does not
    know that path) records it there as absent; ``rollback --to`` any earlier revision then removes it
    instead of writing the later change's bytes (and being refused: 'the manifest does not mount ...')."""
    original, v1 = node.files["kube-scheduler.yaml"], _with_other(node, tmp_path)
    listed = _listed(node)
    assert listed[1]["companions"] == [{"path": _note(node), "checksum": sha(b"a\n")},
                                       {"path": _other(node), "checksum": None}], listed[1]
    node.run("rollback", "scheduler", "--to", "2")
    assert _state(node) == {"manifest": v1, "note": b"a\n"} and not os.path.exists(_other(node))
    node.run("rollback", "scheduler", "--to", "3")
    assert os.path.exists(_other(node))
    node.run("rollback", "scheduler", "--to", "1")
    assert _state(node) == {"manifest": original, "note": None} and not os.path.exists(_other(node))


def test_a_store_without_the_absent_record_does_not_block_an_earlier_rollback(node: NodeDirs, tmp_path: Any) -> None:
    """A store written before that rule (revision 2 does not name ``other``): rolling back to a version
    that does not mount ``other`` leaves it alone instead of writing revision 3's bytes (refused)."""
    original = node.files["kube-scheduler.yaml"]
    _with_other(node, tmp_path)
    meta = os.path.join(node.state, "revisions", "kube-scheduler.yaml.2.json")
    with open(meta) as handle:
        record = json.load(handle)
    record["companions"] = [c for c in record["companions"] if c["path"] != _other(node)]
    with open(meta, "w") as handle:
        json.dump(record, handle)
    node.run("rollback", "scheduler", "--to", "1")
    assert _state(node) == {"manifest": original, "note": None}
    with open(_other(node), "rb") as handle:
        assert handle.read() == b"other\n", "left as it was"


def test_a_companion_below_a_symlinked_directory_or_outside_the_kube_dir_is_refused(node: NodeDirs,
                                                                                     tmp_path: Any) -> None:
    """Issue 33 item 5: the "below /etc/kubernetes" rule is checked on the node's real directories: a
    companion path through a symlinked directory is refused (exit 4), and so is one outside the kube dir
    or one of kubeadm's credentials, --force or not; nothing written anywhere."""
    elsewhere = tempfile.mkdtemp(prefix="cpctl-outside-")          # outside the node's kube dir (tmp_path)
    os.symlink(elsewhere, os.path.join(node.root, "extra"))        # _note(node) lies below it
    local = os.path.join(str(tmp_path), "note-local.txt")
    with open(local, "wb") as handle:
        handle.write(b"a\n")
    cases = [(_note(node), "is a symlink on the node"),
             (os.path.join(elsewhere, "note.txt"), "cpctl writes companion files only below"),
             (os.path.join(node.root, "pki", "ca.crt"), "one of kubeadm's credentials"),
             (os.path.join(node.root, "admin.conf"), "one of kubeadm's credentials")]
    for path, text in cases:
        for force in ((), ("--force",)):
            proc = run_in_process(node.argv("apply", "scheduler", "-f", "-", "--with-file", "%s=%s" % (path, local),
                                            *force), node.env(), _mounting(node, 1))
            check_result(proc, 4)
            assert text in proc.stderr, (path, proc.stderr)
    assert os.listdir(elsewhere) == [] and not os.path.exists(os.path.join(node.root, "admin.conf"))
    os.rmdir(elsewhere)
    assert _state(node)["manifest"] == node.files["kube-scheduler.yaml"] and node.history() == []


def test_an_unconfirmed_revert_after_a_new_companion_path_works(node: NodeDirs, tmp_path: Any) -> None:
    """Issue 33 item 2, the commit-confirmed half: after a change that brought a new companion path
    (and was undone), a later unconfirmed change is reverted (it was dropped: 'the manifest does not
    mount <that path>'), the new path absent as it was."""
    import time

    from cpctl.core import confirmations
    from cpctl.core.confirmations import Arm
    from cpctl.core.settings import Settings
    from cpctl.host.local import LocalHost
    from cpctl.ops import confirm, edits
    from cpctl.ops.wiring import open_node
    from cpctl.timeutil import iso
    from tests.coreutil import NODE
    v1 = _with_other(node, tmp_path)
    node.run("rollback", "scheduler", "--to", "2")          # v1 back, other removed
    settings = Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none")
    opened = open_node(settings, LocalHost())
    v4 = v1.replace(b"--v=1", b"--v=4")
    done = edits.replace(opened, "scheduler", v4, "test", "apply", edits.ApplyOptions(timeout=1, settle=0))
    armed = Arm("0123456789abcdef", "kube-scheduler", "kube-scheduler.yaml", sha(v4), sha(v1), done.revision,
                "apply", iso(), iso(time.time() + 3600), "root", "test", NODE, "test", "none")
    with opened.session("arm"):
        opened.host.makedirs(confirmations.directory(opened.state), 0o700)
        opened.apply(confirmations.arm_change(opened.state, armed))
    confirm.revert(open_node(settings, LocalHost()), "scheduler", "test", op=armed.op)
    assert _state(node) == {"manifest": v1, "note": b"a\n"} and not os.path.exists(_other(node))
    assert [r["action"] for r in node.history()][-1] == "reverted"

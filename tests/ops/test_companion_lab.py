"""--with-file against the lab (issue #24 item 3): bad input is one clear line and nothing changes;
``rollback`` puts a previous companion file back together with the manifest."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List

from tests.coreutil import schema_valid
from tests.labfixture import is_ready, mirror, run_cpctl, wait_for

FAST = ("--timeout", "60", "--settle", "1")


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


NOTE = "/etc/kubernetes/extra/note.txt"     # the node path (a hostPath names it; the lab keeps it under its root)


def _manifest(lab: Any) -> str:
    return os.path.join(str(lab.manifests_dir()), "kube-scheduler.yaml")


def _mounting(data: bytes, node_path: str, inside: str) -> bytes:
    """The scheduler manifest with a hostPath volume for ``node_path`` mounted read-only at ``inside``."""
    import yaml
    pod = yaml.safe_load(data)
    pod["spec"]["volumes"].append({"name": "note", "hostPath": {"path": node_path, "type": "File"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "note", "mountPath": inside, "readOnly": True})
    return yaml.safe_dump(pod, sort_keys=False).encode()


def _snapshot(lab: Any) -> Dict[str, bytes]:
    """Every file below the node's /etc/kubernetes and the state dir (what "nothing changed" means)."""
    found = {}
    for top in (str(lab.root_dir()) + "/etc/kubernetes", str(lab.state_dir())):
        for folder, _, names in os.walk(top):
            for name in names:
                path = os.path.join(folder, name)
                if not os.path.islink(path) and name not in ("lock", "history.jsonl") and not name.endswith(".lock"):
                    found[path] = _read(path)
    return found


def _history(lab: Any) -> List[Dict[str, Any]]:
    proc = run_cpctl(lab, "-o", "json", "history")
    assert proc.returncode == 0, proc.stderr
    return schema_valid("history", json.loads(proc.stdout))["history"]      # companions: described


def test_bad_companion_input_is_one_line_and_changes_nothing(lab: Any, tmp_path: Any) -> None:
    root = str(lab.root_dir())
    node_path = root + "/etc/kubernetes/extra/note.txt"
    local = tmp_path / "note.txt"
    local.write_text("v1\n")
    new = tmp_path / "new.yaml"
    new.write_bytes(_mounting(_read(_manifest(lab)), NOTE, NOTE))
    unmounted = tmp_path / "same.yaml"
    unmounted.write_bytes(_read(_manifest(lab)).replace(b"- kube-scheduler\n", b"- kube-scheduler\n    - --v=2\n", 1))
    (tmp_path / "adir").mkdir()
    os.symlink(str(local), str(tmp_path / "link.txt"))
    (tmp_path / "big.txt").write_bytes(b"x" * ((1 << 20) + 1))
    outside = str(tmp_path / "outside" / "note.txt")
    before = _snapshot(lab)
    cases = [
        (["apply", "scheduler", "-f", str(new), "--with-file", "%s=%s" % (node_path, tmp_path / "missing.txt")],
         2, "cannot read the local file"),
        (["apply", "scheduler", "-f", str(new), "--with-file", "%s=%s" % (node_path, tmp_path / "adir")],
         2, "not a regular file"),
        (["apply", "scheduler", "-f", str(new), "--with-file", "%s=%s" % (node_path, tmp_path / "link.txt")],
         2, "is a symlink"),
        (["apply", "scheduler", "-f", str(new), "--with-file", "%s=%s" % (node_path, tmp_path / "big.txt")],
         2, "larger than 1 MiB"),
        (["apply", "scheduler", "-f", str(new), "--with-file", "%s=%s" % (outside, local)],
         4, "cpctl writes companion files only below"),
        (["apply", "scheduler", "-f", str(unmounted), "--with-file", "%s=%s" % (node_path, local)],
         4, "the manifest does not mount %s: add to spec.volumes {name: extra-note-txt, hostPath: {path: %s, "
            "type: File}} and to the container's volumeMounts {name: extra-note-txt, mountPath: "
            "/etc/kubernetes/extra/note.txt, readOnly: true}" % (NOTE, NOTE)),
        (["flags", "scheduler", "--set", "v=3", "--with-file", "%s=%s" % (node_path, local)],
         4, "the manifest does not mount"),
        (["apply", "scheduler", "-f", str(new), "--with-file", "relative/note.txt=%s" % local],
         2, "absolute file path"),
    ]
    for args, code, text in cases:
        proc = run_cpctl(lab, *args, *FAST)
        assert proc.returncode == code, (args, proc.stdout, proc.stderr)
        assert text in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert _snapshot(lab) == before, args
    assert not os.path.exists(node_path) and not os.path.exists(outside)
    assert not [r for r in _history(lab) if r.get("action") in ("apply", "flags")]
    # JSON output: the same error as one object
    proc = run_cpctl(lab, "-o", "json", "apply", "scheduler", "-f", str(new), "--with-file",
                     "%s=%s" % (outside, local), *FAST)
    assert proc.returncode == 4 and "only below" in json.loads(proc.stdout or proc.stderr)["error"]["message"]


def test_rollback_restores_the_previous_companion_file(lab: Any, tmp_path: Any) -> None:
    root = str(lab.root_dir())
    node_path = root + "/etc/kubernetes/extra/note.txt"
    original = _read(_manifest(lab))
    first = _mounting(original, NOTE, NOTE)
    second = first.replace(b"- kube-scheduler\n", b"- kube-scheduler\n    - --v=3\n", 1)
    assert second != first
    (tmp_path / "m1.yaml").write_bytes(first)
    (tmp_path / "m2.yaml").write_bytes(second)
    (tmp_path / "v1.txt").write_text("v1\n")
    (tmp_path / "v2.txt").write_text("v2\n")
    for manifest, note in (("m1.yaml", "v1.txt"), ("m2.yaml", "v2.txt")):
        proc = run_cpctl(lab, "apply", "scheduler", "-f", str(tmp_path / manifest), "--with-file",
                         "%s=%s" % (node_path, tmp_path / note), *FAST)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _read(node_path) == _read(str(tmp_path / note))
        assert os.stat(node_path).st_mode & 0o777 == 0o600
    # one revision per version, each with the companion file as it was while that version was in place
    revisions = json.loads(run_cpctl(lab, "-o", "json", "revisions", "scheduler").stdout)["revisions"]
    assert [(r["action"], r["companions"]) for r in revisions] == [
        ("original", [{"path": node_path, "checksum": None}]),
        ("apply", [{"path": node_path, "checksum": hashlib.sha256(b"v1\n").hexdigest()}]),
        ("apply", [{"path": node_path, "checksum": hashlib.sha256(b"v2\n").hexdigest()}])]
    proc = run_cpctl(lab, "rollback", "scheduler", *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _read(_manifest(lab)) == first and _read(node_path) == b"v1\n"
    wait_for(lambda: is_ready(mirror(lab, "kube-scheduler")), 30, "scheduler Ready")
    proc = run_cpctl(lab, "rollback", "scheduler", "--to", "1", *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _read(_manifest(lab)) == original and not os.path.exists(node_path)
    record = _history(lab)[-1]
    assert record["action"] == "rollback" and record["companions"] == [
        {"path": node_path, "source": "revision 1", "checksum": None, "size": None}]


def test_edit_and_dry_run_carry_the_companion_file(lab: Any, tmp_path: Any) -> None:
    node_path = str(lab.root_dir()) + "/etc/kubernetes/extra/note.txt"
    new = tmp_path / "new.yaml"
    new.write_bytes(_mounting(_read(_manifest(lab)), NOTE, NOTE))
    (tmp_path / "note.txt").write_text("from edit\n")
    before = _snapshot(lab)
    proc = run_cpctl(lab, "-o", "json", "apply", "scheduler", "-f", str(new), "--dry-run", "--with-file",
                     "/etc/kubernetes/extra/note.txt=%s" % (tmp_path / "note.txt"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["companions"] == [{"path": node_path, "source": str(tmp_path / "note.txt"),
                                                      "checksum": hashlib.sha256(b"from edit\n").hexdigest(),
                                                      "size": 10}]
    assert _snapshot(lab) == before, "a dry run changes nothing"
    # the "editor" copies the new version over cpctl's private copy
    proc = run_cpctl(lab, "edit", "scheduler", "--yes", "--with-file",
                     "/etc/kubernetes/extra/note.txt=%s" % (tmp_path / "note.txt"), *FAST, VISUAL="cp %s" % new)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _read(_manifest(lab)) == _read(str(new)) and _read(node_path) == b"from edit\n"
    assert _history(lab)[-1]["action"] == "edit" and _history(lab)[-1]["companions"][0]["path"] == node_path

"""apply / edit / flags / rollback / revisions against the lab (issue #14): every step proven.

The lab's kubelet runs an edited manifest as a new pod (new config hash, like a real kubelet) and
makes a container crash-loop when its command has a flag the component does not know, so a bad
change really fails and really gets rolled back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
from typing import Any, Dict, List

from tests.labfixture import is_ready, mirror, run_cpctl, wait_for

BAD_FLAG = "--no-such-flag=1"


def _path(lab: Any, component: str = "kube-scheduler") -> str:
    return os.path.join(str(lab.manifests_dir()), component + ".yaml")


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _with_flag(data: bytes, flag: str, binary: bytes = b"kube-scheduler") -> bytes:
    marker = b"- " + binary + b"\n"
    assert marker in data
    return data.replace(marker, marker + b"    - " + flag.encode() + b"\n", 1)


def _write(tmp_path: Any, data: bytes, name: str = "new.yaml") -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _hash(pod: Any) -> str:
    return (pod or {}).get("metadata", {}).get("annotations", {}).get("kubernetes.io/config.hash", "")


def _revisions(lab: Any, component: str = "scheduler") -> List[Dict[str, Any]]:
    proc = run_cpctl(lab, "-o", "json", "revisions", component)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["revisions"]


def _history(lab: Any) -> List[Dict[str, Any]]:
    proc = run_cpctl(lab, "-o", "json", "history")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["history"]


def _healthy(lab: Any, component: str = "kube-scheduler") -> Any:
    return wait_for(lambda: is_ready(mirror(lab, component)) and mirror(lab, component), 20, component + " Ready")


def test_good_apply_runs_the_new_pod_and_keeps_the_old_bytes(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    old_hash = _hash(_healthy(lab))
    mode = stat.S_IMODE(os.stat(_path(lab)).st_mode)
    new = _with_flag(old, "--v=3")
    proc = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, new), "--reason", "more logs",
                     "--timeout", "30", "--settle", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "applied: pod kube-scheduler-%s Running and Ready" % lab.node_name() in proc.stdout
    assert "previous version kept as revision 1" in proc.stdout
    assert _read(_path(lab)) == new and stat.S_IMODE(os.stat(_path(lab)).st_mode) == mode
    now = _healthy(lab)
    assert _hash(now) and _hash(now) != old_hash, "the kubelet runs a new pod"
    original, revision = _revisions(lab)
    assert original["number"] == 1 and original["checksum"] == hashlib.sha256(old).hexdigest()
    assert original["action"] == "original" and original["original"] and original["reason"] is None
    assert revision["number"] == 2 and revision["checksum"] == hashlib.sha256(new).hexdigest()
    assert revision["action"] == "apply" and revision["reason"] == "more logs" and not revision["failed"]
    assert revision["current"] and not original["current"]
    record = _history(lab)[-1]
    assert record["action"] == "apply" and record["revision"] == 1 and record["new_revision"] == 2
    assert "+    - --v=3" in record["diff"]
    assert not [n for n in os.listdir(str(lab.manifests_dir())) if n.startswith(".")], "no temp file left"


def test_bad_apply_is_rolled_back_to_the_identical_bytes(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    old_hash = _hash(_healthy(lab))
    bad = _with_flag(old, BAD_FLAG)
    proc = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, bad), "--timeout", "6", "--settle", "1",
                     "--force")                  # past cpctl's own flag-name check: the kubelet must fail it
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "ROLLED BACK to the previous version" in proc.stderr
    assert "unknown flag: --no-such-flag" in proc.stderr, "the failing container's own words"
    assert _read(_path(lab)) == old, "byte-identical old file"
    back = _healthy(lab)
    assert _hash(back) == old_hash, "same content, same path: the kubelet's old pod hash again"
    revisions = _revisions(lab)
    assert [r["number"] for r in revisions] == [1, 2]
    assert revisions[0]["checksum"] == hashlib.sha256(old).hexdigest() and revisions[0]["current"]
    assert revisions[1]["checksum"] == hashlib.sha256(bad).hexdigest() and revisions[1]["failed"]
    assert [r["action"] for r in _history(lab)[-2:]] == ["apply", "rollback"]
    assert _history(lab)[-1]["automatic"] is True


def test_no_rollback_leaves_the_new_version_then_rollback_restores(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    _healthy(lab)
    bad = _with_flag(old, BAD_FLAG)
    proc = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, bad), "--timeout", "4", "--no-rollback",
                     "--force")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert "left in place (--no-rollback)" in proc.stderr and "cpctl rollback kube-scheduler" in proc.stderr
    assert _read(_path(lab)) == bad
    undo = run_cpctl(lab, "rollback", "scheduler", "--timeout", "30", "--settle", "1")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert _read(_path(lab)) == old
    _healthy(lab)
    assert [r["action"] for r in _history(lab)[-2:]] == ["apply", "rollback"]
    assert _history(lab)[-1]["to_revision"] == 1


def test_invalid_changes_are_refused_and_nothing_changes(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    before = sorted(os.listdir(str(lab.manifests_dir())))
    ports = lab.ports()
    cases = {
        "renamed": (old.replace(b"name: kube-scheduler\n  namespace", b"name: my-scheduler\n  namespace", 1),
                    "defines pod kube-system/my-scheduler, not kube-system/kube-scheduler"),
        "duplicated": (_with_flag(_with_flag(old, "--v=2"), "--v=4"), "gives --v more than once"),
        "missing file": (old.replace(b"--kubeconfig=/etc/kubernetes/scheduler.conf",
                                     b"--kubeconfig=/etc/kubernetes/nope.conf"),
                         "--kubeconfig names /etc/kubernetes/nope.conf, which no hostPath volume mounts"),
        "port clash": (re.sub(rb"--secure-port=\d+", b"--secure-port=%d" % ports["apiserver"], old),
                       "port %d is also used by kube-apiserver" % ports["apiserver"]),
        "not a pod": (b"kind: Service\napiVersion: v1\n", "not a manifest the kubelet would run"),
    }
    assert b"--kubeconfig=/etc/kubernetes/scheduler.conf" in old
    for name, (data, words) in cases.items():
        proc = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, data, name.replace(" ", "-")))
        assert proc.returncode == 4, (name, proc.stdout, proc.stderr)
        assert words in proc.stderr and "nothing changed" in proc.stderr, (name, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert _read(_path(lab)) == old and sorted(os.listdir(str(lab.manifests_dir()))) == before
    assert run_cpctl(lab, "revisions", "scheduler").stdout.startswith("kube-scheduler: no revisions kept")
    api_old = _read(_path(lab, "kube-apiserver"))
    missing = _with_flag(api_old, "--audit-policy-file=/etc/kubernetes/pki/nope.yaml", b"kube-apiserver")
    proc = run_cpctl(lab, "apply", "apiserver", "-f", _write(tmp_path, missing, "api.yaml"))
    assert proc.returncode == 4 and "--audit-policy-file names /etc/kubernetes/pki/nope.yaml, which does not exist " \
        "on the node" in proc.stderr, proc.stderr          # a node path, as on a kubeadm node (the lab: under its root)
    assert _read(_path(lab, "kube-apiserver")) == api_old


def test_identical_bytes_are_unchanged_and_comment_only_keeps_the_pod(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    running = _healthy(lab)
    same = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, old))
    assert same.returncode == 0 and "unchanged" in same.stdout, same.stdout + same.stderr
    commented = b"# reviewed by the on-call SRE\n" + old
    proc = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, commented, "c.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the kubelet keeps the running pod: nothing to restart" in proc.stdout and _read(_path(lab)) == commented
    assert _hash(mirror(lab, "kube-scheduler")) == _hash(running)
    assert mirror(lab, "kube-scheduler")["metadata"]["uid"] == running["metadata"]["uid"], "pod untouched"


def test_dry_run_shows_the_diff_and_changes_nothing(lab: Any, tmp_path: Any) -> None:
    old = _read(_path(lab))
    proc = run_cpctl(lab, "apply", "scheduler", "-f", _write(tmp_path, _with_flag(old, "--v=5")), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would apply" in proc.stdout and "+    - --v=5" in proc.stdout
    assert _read(_path(lab)) == old and not _history(lab)


def test_flags_set_and_unset_edit_the_file_in_place(lab: Any) -> None:
    old = _read(_path(lab))
    with_comment = old.replace(b"- --leader-elect=true\n", b"- --leader-elect=true  # keep\n", 1)
    assert with_comment != old
    path = _path(lab)
    with open(path + ".t", "wb") as handle:
        handle.write(with_comment)
    os.rename(path + ".t", path)
    _healthy(lab)
    proc = run_cpctl(lab, "flags", "scheduler", "--set", "v=4", "--unset", "profiling", "--timeout", "30",
                     "--settle", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = _read(path)
    assert b"    - --v=4\n" in new and b"--leader-elect=true  # keep\n" in new, "comments and layout kept"
    assert b"--profiling" not in new
    listed = run_cpctl(lab, "flags", "scheduler")
    assert "--v=4" in listed.stdout.splitlines()
    assert _history(lab)[-1]["action"] == "flags"


EDITOR = """#!%s
import sys
path = sys.argv[1]
count_file = %r
count = int(open(count_file).read()) if __import__("os").path.exists(count_file) else 0
open(count_file, "w").write(str(count + 1))
text = open(path).read()
if count == 0:
    text = text.replace("- kube-scheduler\\n", "- kube-scheduler\\n    - --v=2\\n    - --v=3\\n", 1)
else:
    assert text.startswith("# cpctl: "), "the problem is shown on top"
    text = text.replace("    - --v=3\\n", "", 1)
open(path, "w").write(text)
"""


def test_edit_reopens_on_a_problem_then_applies(lab: Any, tmp_path: Any) -> None:
    _healthy(lab)
    script = os.path.join(str(tmp_path), "editor.py")
    count = os.path.join(str(tmp_path), "count")
    with open(script, "w") as handle:
        handle.write(EDITOR % (sys.executable, count))
    os.chmod(script, 0o755)
    import pty
    import subprocess
    leader, follower = pty.openpty()          # re-opening needs a terminal (without one: one round)
    env = dict(os.environ, **lab.env, EDITOR=script, VISUAL="")
    env.pop("CPCTL_PROBE", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "cpctl", "edit", "scheduler", "--yes", "--timeout", "30",
                               "--settle", "1"], env=env, stdin=follower, capture_output=True, text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert open(count).read() == "2", "re-opened once after the duplicated flag"
    new = _read(_path(lab))
    assert b"    - --v=2\n" in new and b"--v=3" not in new and b"# cpctl:" not in new
    assert _history(lab)[-1]["action"] == "edit"
    assert not [n for n in os.listdir(str(lab.manifests_dir())) if n != "kube-scheduler.yaml" and
                n.startswith("kube-scheduler")], "no swap or backup file in the manifests dir"


def test_edit_without_a_terminal_needs_yes(lab: Any) -> None:
    proc = run_cpctl(lab, "edit", "scheduler", EDITOR="true")
    assert proc.returncode == 2 and "pass --yes" in proc.stderr


def test_edit_asks_on_a_terminal_and_no_keeps_the_copy(lab: Any, tmp_path: Any) -> None:
    """With a terminal, edit shows the diff and asks; "n" changes nothing and keeps the edited copy."""
    import pty
    import subprocess
    old = _read(_path(lab))
    script = os.path.join(str(tmp_path), "editor.sh")
    with open(script, "w") as handle:
        handle.write("#!/bin/sh\nsed -i 's/- kube-scheduler$/- kube-scheduler\\n    - --v=6/' \"$1\"\n")
    os.chmod(script, 0o755)
    leader, follower = pty.openpty()
    env = dict(os.environ, **lab.env, EDITOR=script, VISUAL="")
    env.pop("CPCTL_PROBE", None)
    proc = subprocess.Popen([sys.executable, "-m", "cpctl", "edit", "scheduler"], env=env, stdin=follower,
                            stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    seen = b""
    while b"[y/N]" not in seen:
        chunk = os.read(leader, 4096)
        assert chunk, seen
        seen += chunk
    assert b"+    - --v=6" in seen, "the diff is shown before the question"
    os.write(leader, b"n\n")
    out, _ = proc.communicate(timeout=30)
    os.close(leader)
    assert proc.returncode == 0 and "not applied; your edited copy is at " in out, out
    copy = out.split("your edited copy is at ")[1].strip()
    assert b"--v=6" in _read(copy) and not copy.startswith(str(lab.manifests_dir()))
    assert _read(_path(lab)) == old and not _history(lab)
    shutil.rmtree(os.path.dirname(copy))

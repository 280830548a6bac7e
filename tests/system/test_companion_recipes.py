"""The recipes of docs/companion-files.md, run against the lab: every ``cpctl`` command of each recipe
exactly as written there (cpctl puts a node path below the lab node's root, as it would in a chroot;
a local file is the doc's ``file=NAME`` block, in the current directory), then what the recipe
promises is checked on the node (issue #24 item 3).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Any, Dict, List, Tuple

import pytest

from tests.labfixture import KUBECTL, is_ready, mirror, run_cpctl, wait_for

DOC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "companion-files.md")
FAST = ("--timeout", "60", "--settle", "1")
FAILING = ("--timeout", "15", "--settle", "1")      # a change that must fail: no need to wait long


def _blocks() -> Tuple[Dict[str, str], Dict[str, List[str]]]:
    """({file name: content}, {recipe: [command line, ...]}) from the doc's fenced blocks."""
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    files: Dict[str, str] = {}
    recipes: Dict[str, List[str]] = {}
    for info, body in re.findall(r"^```([^\n]*)\n(.*?)^```", text, re.S | re.M):
        if info.startswith("yaml file="):
            files[info.split("=", 1)[1].strip()] = body
        elif info.startswith("sh recipe="):
            joined = body.replace("\\\n", " ")
            recipes.setdefault(info.split("=", 1)[1].strip(), []).extend(
                line.strip() for line in joined.splitlines() if line.strip())
    return files, recipes


def _argv(line: str) -> List[str]:
    """A recipe command, as written (plus shorter waits for the lab)."""
    words = shlex.split(line)
    assert words[0] == "cpctl", line
    return words[1:] + list(FAST)


def _run_recipe(lab: Any, tmp_path: Any, name: str) -> List[Any]:
    files, recipes = _blocks()
    local = str(tmp_path / "recipe")
    os.makedirs(local, exist_ok=True)
    for file_name, content in files.items():
        with open(os.path.join(local, file_name), "w", encoding="utf-8") as handle:
            handle.write(content)
    assert recipes.get(name), "docs/companion-files.md has no %s recipe" % name
    results = []
    for line in recipes[name]:
        env = dict(os.environ, **lab.env)
        env.pop("CPCTL_PROBE", None)
        proc = subprocess.run([sys.executable, "-m", "cpctl", *_argv(line)], capture_output=True, text=True,
                              env=env, cwd=local, timeout=180)
        assert proc.returncode == 0, "%s\n%s%s" % (line, proc.stdout, proc.stderr)
        results.append(proc)
    return results


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _healthy(lab: Any) -> Any:
    return wait_for(lambda: is_ready(mirror(lab, "kube-apiserver")) and mirror(lab, "kube-apiserver"), 60,
                    "kube-apiserver Ready")


@pytest.mark.end_to_end
def test_audit_recipe_turns_auditing_on(lab: Any, tmp_path: Any) -> None:
    root = str(lab.root_dir())
    policy = root + "/etc/kubernetes/audit/policy.yaml"
    log = root + "/var/log/kubernetes/audit/audit.log"
    assert not os.path.exists(policy) and not os.path.exists(log)
    [proc] = _run_recipe(lab, tmp_path, "audit")
    assert "hostPath volume" in proc.stdout, proc.stdout
    files, _ = _blocks()
    assert _read(policy) == files["audit-policy.yaml"].encode()
    assert os.stat(policy).st_mode & 0o777 == 0o600
    _healthy(lab)
    subprocess.run([KUBECTL, "--kubeconfig", lab.kubeconfig, "get", "namespaces"], check=True,
                   capture_output=True, timeout=30)
    # The API server writes a request's ResponseComplete event after the response has gone out, so
    # kubectl may exit before its event is in the log: wait for that event, not for any event.
    def _listed_namespaces() -> Any:
        events = [json.loads(line) for line in _read(log).splitlines()] if os.path.exists(log) else []
        listed = any(e.get("verb") == "list" and (e.get("objectRef") or {}).get("resource") == "namespaces"
                     for e in events)
        return listed and events

    events = wait_for(_listed_namespaces, 20, "the audit event of 'kubectl get namespaces' in %s" % log)
    assert all(e["kind"] == "Event" and e["apiVersion"] == "audit.k8s.io/v1" for e in events)
    assert all((e.get("objectRef") or {}).get("resource") != "leases" for e in events), "the policy's None rule"


@pytest.mark.end_to_end
def test_broken_policy_rolls_back_manifest_and_file_together(lab: Any, tmp_path: Any) -> None:
    root = str(lab.root_dir())
    policy = root + "/etc/kubernetes/audit/policy.yaml"
    manifest = os.path.join(str(lab.manifests_dir()), "kube-apiserver.yaml")
    _run_recipe(lab, tmp_path, "audit")
    _healthy(lab)
    good_manifest, good_policy = _read(manifest), _read(policy)
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n")
    new = tmp_path / "new.yaml"
    new.write_bytes(good_manifest.replace(b"--audit-log-maxage=7", b"--audit-log-maxage=8"))
    proc = run_cpctl(lab, "apply", "kube-apiserver", "-f", str(new), "--with-file",
                     "%s=%s" % (policy, broken), *FAILING, timeout=180)
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "loaded illegal policy with 0 rules" in proc.stderr
    assert "ROLLED BACK to the previous version (" in proc.stderr
    assert "with its companion files (%s: previous bytes back)" % policy in proc.stderr, proc.stderr
    assert _read(manifest) == good_manifest and _read(policy) == good_policy
    _healthy(lab)
    history = json.loads(run_cpctl(lab, "-o", "json", "history").stdout)["history"]
    last = history[-1]
    assert last["action"] == "rollback" and last.get("automatic")
    assert last["companions"] == [{"path": policy, "source": "before apply", "size": len(good_policy),
                                   "checksum": hashlib.sha256(good_policy).hexdigest()}]


@pytest.mark.end_to_end
def test_encryption_recipe_with_key_rotation(lab: Any, tmp_path: Any) -> None:
    results = _run_recipe(lab, tmp_path, "encryption")
    assert len(results) == 4
    root = str(lab.root_dir())
    files, _ = _blocks()
    for n in range(1, 5):
        path = "%s/etc/kubernetes/enc/enc-v%d.yaml" % (root, n)
        assert _read(path) == files["enc-v%d.yaml" % n].encode()
    data = _read(os.path.join(str(lab.manifests_dir()), "kube-apiserver.yaml"))
    assert b"--encryption-provider-config=/etc/kubernetes/enc/enc-v4.yaml" in data
    _healthy(lab)
    # a key of the wrong size: the API server does not start, both are rolled back
    bad = tmp_path / "bad.yaml"
    bad.write_text(files["enc-v4.yaml"].replace("dGhpcyBpcyB0aGUgc2Vjb25kIGtleSwgMzIgYnl0ZXM=", "c2hvcnQ="))
    before = _read(os.path.join(str(lab.manifests_dir()), "kube-apiserver.yaml"))
    proc = run_cpctl(lab, "flags", "kube-apiserver", "--set",
                     "encryption-provider-config=/etc/kubernetes/enc/enc-v5.yaml", "--with-file",
                     "%s/etc/kubernetes/enc/enc-v5.yaml=%s" % (root, bad), "--mount", *FAILING, timeout=180)
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "error while parsing file" in proc.stderr
    assert "enc-v5.yaml: removed, absent before)" in proc.stderr, proc.stderr
    assert not os.path.exists("%s/etc/kubernetes/enc/enc-v5.yaml" % root), "a file that was absent is removed"
    assert _read(os.path.join(str(lab.manifests_dir()), "kube-apiserver.yaml")) == before


@pytest.mark.end_to_end
def test_admission_recipe(lab: Any, tmp_path: Any) -> None:
    _run_recipe(lab, tmp_path, "admission")
    _healthy(lab)
    files, _ = _blocks()
    assert _read(str(lab.root_dir()) + "/etc/kubernetes/admission/admission.yaml") == files["admission.yaml"].encode()

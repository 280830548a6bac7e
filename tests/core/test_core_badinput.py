"""Issue #2 rule 10: bad input gets one stderr line, its documented exit code, no traceback,
and changes no file (names, bytes, modes and owners of both dirs are compared)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.coreutil import MANIFESTS, NodeDirs, assert_settled, check_result, snapshot


@pytest.fixture
def node(tmp_path):
    """A node that has already been used once: state dir, history and lock file exist."""
    node = NodeDirs(str(tmp_path))
    node.run("stop", "etcd", "--reason", "setup")
    return node


def _unchanged(node: NodeDirs, *args: str, rc: int, needle: str = "") -> str:
    before = snapshot(node.root)
    err = node.run(*args, rc=rc).stderr
    assert needle in err, err
    assert snapshot(node.root) == before, "bad input changed files: %r" % (args,)
    return err


def _batch_unchanged(node: NodeDirs, cases: list, rc: int, needle: str = "") -> None:
    """Run many failing invocations (two at a time) between one pair of snapshots; each one
    must fail alone with ``rc`` and one line; none may change a file."""
    from concurrent.futures import ThreadPoolExecutor
    before = snapshot(node.root)
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda args: subprocess.run(node.argv(*args), env=node.env(), capture_output=True,
                                                          text=True, timeout=60), cases))
    for proc in procs:
        check_result(proc, rc)
        assert needle in proc.stderr, proc.stderr
    assert snapshot(node.root) == before, "bad input changed files"


BAD_NAMES = ["a/b", "../../etc/passwd", "..", "kube-scheduler;id", "$(id)", "`id`", "kube scheduler",
             "sched\nuler", "*", "", "a" * 300, "sch\u00e9duler", "\u65e5\u672c", "-", ".hidden", "x\t"]


def test_bad_component_names(node):
    cases = [["stop", "--", name] for name in BAD_NAMES]
    cases += [[cmd, "--", name] for name in ("../x", "$(id)", "a b")
              for cmd in ("start", "restart", "status", "history")]
    cases += [["stop", "scheduler", "--", "`id`"]]
    _batch_unchanged(node, cases, 2, "component name")


def test_bad_name_on_a_fresh_node_creates_no_state_dir(tmp_path):
    node = NodeDirs(str(tmp_path))
    for command in ("stop", "start", "restart", "status", "history"):
        _unchanged(node, command, "--", "a;b", rc=2)
    assert not os.path.exists(node.state)


def test_missing_manifests_dir(node):
    shutil.rmtree(node.manifests)
    _unchanged(node, "stop", "scheduler", rc=7, needle="does not exist")
    _unchanged(node, "status", rc=7, needle="does not exist")
    _unchanged(node, "start", "etcd", rc=7, needle="does not exist")


def test_manifests_dir_is_a_regular_file(node):
    shutil.rmtree(node.manifests)
    with open(node.manifests, "w") as handle:
        handle.write("not a dir\n")
    for args in (["stop", "scheduler"], ["status"]):
        assert "not a directory" in _unchanged(node, *args, rc=7).lower()


def test_manifests_dir_is_a_symlink(node):
    real = node.manifests + "-real"
    os.rename(node.manifests, real)
    os.symlink(real, node.manifests)
    _unchanged(node, "stop", "scheduler", rc=4, needle="symlink")


DROP_PRIVILEGES = """
import os, sys
# Everything cpctl imports is loaded first: the interpreter lives under /root (0700), which an
# unprivileged user cannot read, so this process drops to uid/gid 65534 only afterwards.
import base64, calendar, errno, fcntl, hashlib, json, pwd, re, secrets, socket, stat, subprocess, time
import click, yaml
import importlib, pkgutil
import cpctl, cpctl.cli.main
# every module of the package (lazy imports included; a checkout may sit in a 0700 dir too)
for info in pkgutil.walk_packages(cpctl.__path__, "cpctl."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
assert os.geteuid() == 65534
sys.exit(cpctl.cli.main.run(sys.argv[1:]))
"""


def test_unreadable_manifests_dir_as_unprivileged_user():
    root = tempfile.mkdtemp(prefix="cpctl-unpriv-", dir="/tmp")
    try:
        os.chmod(root, 0o755)
        node = NodeDirs(root)
        os.chmod(node.manifests, 0)
        before = snapshot(root)
        for args, needle in ((["status"], "cannot read manifests dir"), (["stop", "scheduler"], "manifests dir")):
            proc = subprocess.run([sys.executable, "-c", DROP_PRIVILEGES] + args, env=node.env(),
                                  capture_output=True, text=True, timeout=60)
            check_result(proc, 7)
            assert needle in proc.stderr and "ermission denied" in proc.stderr, proc.stderr
        assert snapshot(root) == before
    finally:
        os.chmod(os.path.join(root, "manifests"), 0o700)
        shutil.rmtree(root)


INVALID = {
    "broken.yaml": b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: broken\n spec: [\n",
    "settings.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n",
    "nameless.yaml": b"apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: kube-system\nspec:\n  containers:\n"
                     b"  - name: x\n    image: x\n",
    "empty.yaml": b"",
    "blob.yaml": bytes(range(256)) * 4,
    "huge.yaml": MANIFESTS["kube-scheduler.yaml"] + b"#" * (10 << 20),     # the kubelet reads at most 10 MiB
}


def test_invalid_manifests_are_listed_and_never_moved(node):
    for name, data in INVALID.items():
        with open(os.path.join(node.manifests, name), "wb") as handle:
            handle.write(data)
    for name in INVALID:
        stem = name[: -len(".yaml")]
        _unchanged(node, "stop", stem, rc=4, needle="nothing to stop")
    proc = node.run("-o", "json", "status")
    data = json.loads(proc.stdout)
    rows = {r["file"]: r for r in data["components"]}
    for name in INVALID:
        assert rows[name]["state"] == "invalid" and rows[name]["error"], rows[name]
        assert any(w.startswith(name + " is not a valid Pod manifest") for w in data["warnings"]), name
    text = node.run("status").stdout
    for name in INVALID:
        assert "warning: %s is not a valid Pod manifest" % name in text
    assert "too large" in rows["huge.yaml"]["error"] and "ConfigMap" in rows["settings.yaml"]["error"]
    # the valid components still work next to them
    node.run("stop", "scheduler")
    node.run("start", "scheduler", "etcd")
    for name in INVALID:
        os.unlink(os.path.join(node.manifests, name))
    assert_settled(node)


def test_symlink_in_manifests_dir(node):
    target = os.path.join(node.root, "outside", "haproxy.yaml")
    os.makedirs(os.path.dirname(target))
    with open(target, "wb") as handle:
        handle.write(MANIFESTS["kube-scheduler.yaml"].replace(b"kube-scheduler", b"haproxy"))
    os.symlink(target, os.path.join(node.manifests, "haproxy.yaml"))
    text = node.run("status").stdout
    assert "warning: haproxy.yaml is a symlink" in text
    _unchanged(node, "stop", "haproxy", rc=4, needle="symlink")
    assert os.path.islink(os.path.join(node.manifests, "haproxy.yaml"))


def test_state_dir_is_a_symlink(node):
    real = node.state + "-real"
    os.rename(node.state, real)
    os.symlink(real, node.state)
    for args in (["stop", "scheduler"], ["start", "etcd"], ["status"], ["history"]):
        _unchanged(node, *args, rc=4, needle="symlink")


def test_state_dir_loose_permissions(node):
    for sub in ("", "parked", "meta"):
        path = os.path.join(node.state, sub) if sub else node.state
        os.chmod(path, 0o755)
        _batch_unchanged(node, [["stop", "scheduler"], ["start", "etcd"]], 4, "chmod 700 %s" % path)
        os.chmod(path, 0o700)


def test_state_dir_owned_by_someone_else(node):
    os.chown(node.state, 1234, 1234)
    _unchanged(node, "stop", "scheduler", rc=4, needle="owned by uid 1234")
    _unchanged(node, "status", rc=4, needle="owned by uid 1234")


FOR_VALUES = ["0", "0s", "-5m", "abc", "5x", "999999d", "", " ", "1h-5m", "5"]
USAGE = [["frobnicate"], ["--frob", "status"], ["stop", "--frob", "scheduler"], ["stop"], ["-o", "xml", "status"],
         ["--lock-timeout", "x", "status"], ["--probe", "magic", "status"], ["history", "-l", "-1"]]
REASONS = ["red\x1b[31malert", "two\nlines", "tab\there", "bell\x07", "x" * 501]


def test_nonsense_for_values(node):
    _batch_unchanged(node, [["stop", "scheduler", "--for", v] for v in FOR_VALUES], 2, "--for")


def test_usage_errors(node):
    _batch_unchanged(node, USAGE, 2)


def test_reason_with_control_characters(node):
    cases = [["stop", "scheduler", "--reason", r] for r in REASONS] + [["restart", "scheduler", "--reason", "a\nb"]]
    _batch_unchanged(node, cases, 2, "--reason")

"""Issue #2 rules 1-4 and 9: where parked files live, what they keep, EXDEV, idempotency,
aliases and history - through the real ``cpctl`` CLI on real files."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest

from cpctl.agent import fileops
from tests.coreutil import MANIFESTS, NODE, NodeDirs, assert_settled, sha, snapshot, temp_files, tmpfs_fixture

tmpfs = pytest.fixture(tmpfs_fixture)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _owned_manifest(node: NodeDirs, name: str = "kube-scheduler.yaml") -> str:
    if os.geteuid() != 0:
        pytest.skip("chown to uid 1234 needs root")
    path = os.path.join(node.manifests, name)
    os.chmod(path, 0o640)
    os.chown(path, 1234, 2345)
    return path


def _check_kept(path: str, data: bytes) -> None:
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 1234, 2345)
    with open(path, "rb") as handle:
        assert handle.read() == data


def test_park_moves_out_of_manifests_dir_keeping_bytes_mode_owner(node):
    path = _owned_manifest(node)
    node.run("stop", "scheduler", "--reason", "kernel upgrade")
    assert not os.path.lexists(path)
    assert node.present() == ["etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml"]
    parked = os.path.join(node.parked, "kube-scheduler.yaml")
    _check_kept(parked, MANIFESTS["kube-scheduler.yaml"])
    assert not os.path.realpath(parked).startswith(os.path.realpath(node.manifests) + "/")
    # state dir and its subdirs were created private
    for d in (node.state, node.parked, os.path.join(node.state, "meta")):
        assert stat.S_ISDIR(os.lstat(d).st_mode) and _mode(d) == 0o700, d
    for f in ("history.jsonl", "meta/kube-scheduler.yaml.json"):
        assert _mode(os.path.join(node.state, f)) == 0o600
    assert os.listdir(node.manifests) == [n for n in os.listdir(node.manifests) if not n.startswith(".")]
    node.run("start", "scheduler")
    _check_kept(path, MANIFESTS["kube-scheduler.yaml"])
    assert node.parked_files() == [] and temp_files(node.manifests, node.state) == []
    assert_settled(node)


def test_state_dir_nested_in_manifests_dir_is_refused(tmp_path):
    node = NodeDirs(str(tmp_path), state=str(tmp_path / "manifests" / "cpctl-state"))
    before = snapshot(node.manifests)
    node.run("stop", "scheduler", rc=2)
    assert snapshot(node.manifests) == before


def test_exdev_stop_start_keep_bytes_mode_owner(tmp_path, tmpfs):
    node = NodeDirs(str(tmp_path), state=os.path.join(tmpfs, "state"))
    assert os.stat(node.manifests).st_dev != os.stat(tmpfs).st_dev
    path = _owned_manifest(node)
    for _ in range(2):
        node.run("stop", "scheduler", "etcd")
        _check_kept(os.path.join(node.parked, "kube-scheduler.yaml"), MANIFESTS["kube-scheduler.yaml"])
        assert not os.path.lexists(path) and not os.path.lexists(os.path.join(node.manifests, "etcd.yaml"))
        assert temp_files(node.manifests, node.state) == []
        assert _mode(node.state) == 0o700 and _mode(node.parked) == 0o700
        node.run("start", "scheduler", "etcd")
        _check_kept(path, MANIFESTS["kube-scheduler.yaml"])
        assert temp_files(node.manifests, node.state) == []
        assert_settled(node)
    assert len(node.history()) == 8


def test_hostops_move_across_filesystems(tmp_path, tmpfs):
    src = str(tmp_path / "a.yaml")
    data = os.urandom(200000)
    with open(src, "wb") as handle:
        handle.write(data)
    os.chmod(src, 0o640)
    os.chown(src, 1234, 2345)
    dst = os.path.join(tmpfs, "a.yaml")
    assert fileops.move(src, dst) == "copy"
    assert not os.path.exists(src)
    with open(dst, "rb") as handle:
        assert handle.read() == data
    st = os.stat(dst)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 1234, 2345)
    assert [n for n in os.listdir(tmpfs) if n.startswith(".")] == []
    # back again, and the same-filesystem path is a rename
    assert fileops.move(dst, src) == "copy"
    assert fileops.move(src, str(tmp_path / "b.yaml")) == "rename"
    # never clobbers the target, never moves links
    with open(dst, "wb") as handle:
        handle.write(b"other")
    with pytest.raises(OSError) as exc:
        fileops.move(str(tmp_path / "b.yaml"), dst)
    assert exc.value.errno == errno.EEXIST
    os.symlink(dst, str(tmp_path / "link"))
    with pytest.raises(OSError) as exc:
        fileops.move(str(tmp_path / "link"), os.path.join(tmpfs, "link"))
    assert exc.value.errno == errno.EINVAL
    with open(dst, "rb") as handle:
        assert handle.read() == b"other"


def test_idempotent_stop_start_and_not_found(node):
    node.run("stop", "scheduler")
    snap = snapshot(node.manifests, node.parked, os.path.join(node.state, "meta"), node.history_file)
    out = node.run("stop", "scheduler").stdout
    assert "already stopped" in out
    out = node.run("stop", "kube-scheduler").stdout
    assert "already stopped" in out
    assert snapshot(node.manifests, node.parked, os.path.join(node.state, "meta"), node.history_file) == snap
    node.run("start", "scheduler")
    snap = snapshot(node.manifests, node.parked, os.path.join(node.state, "meta"), node.history_file)
    # With no probe nothing saw the pods: the file is in place, and that is all cpctl may say.
    assert "manifest already in place - not verified (no probe)" in node.run("start", "scheduler").stdout
    assert "manifest already in place" in node.run("start", "etcd").stdout
    assert snapshot(node.manifests, node.parked, os.path.join(node.state, "meta"), node.history_file) == snap
    err = node.run("start", "cloud-controller-manager", rc=3).stderr
    assert "no static pod 'cloud-controller-manager'" in err and "none parked" in err
    assert "no static pod" in node.run("stop", "nothing-here", rc=3).stderr
    assert snapshot(node.manifests, node.parked, os.path.join(node.state, "meta"), node.history_file) == snap
    assert_settled(node)


ALIASES = [("scheduler", "kube-scheduler.yaml"), ("controller-manager", "kube-controller-manager.yaml"),
           ("apiserver", "kube-apiserver.yaml"), ("etcd", "etcd.yaml")]


def test_aliases(node):
    node.run("stop", *[alias for alias, _ in ALIASES])
    assert node.parked_files() == sorted(f for _, f in ALIASES)
    for alias, file in ALIASES[:2] + [("kube-scheduler", "kube-scheduler.yaml")]:
        status = json.loads(node.run("-o", "json", "status", alias).stdout)
        assert [(c["file"], c["state"]) for c in status["components"]] == [(file, "parked")]
    node.run("start", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
    assert node.parked_files() == [] and node.present() == sorted(MANIFESTS)
    assert_settled(node)


def test_static_pod_by_stem_or_by_pod_name_when_they_differ(tmp_path):
    data = MANIFESTS["kube-scheduler.yaml"].replace(b"kube-scheduler", b"haproxy")
    node = NodeDirs(str(tmp_path), files=dict(MANIFESTS, **{"haproxy-lb.yaml": data}))
    for stop_name, start_name, status_name in (("haproxy-lb", "haproxy", "haproxy"),
                                               ("haproxy", "haproxy-lb", "haproxy-lb")):
        out = node.run("stop", stop_name).stdout
        assert out.startswith("haproxy: stopped")
        assert node.parked_files() == ["haproxy-lb.yaml"]
        rows = json.loads(node.run("-o", "json", "status", status_name).stdout)["components"]
        assert [(r["component"], r["file"], r["state"]) for r in rows] == [("haproxy", "haproxy-lb.yaml", "parked")]
        node.run("start", start_name)
        assert "haproxy-lb.yaml" in node.present()
    assert "manifest already in place" in node.run("start", "haproxy").stdout
    text = node.run("status", "haproxy").stdout
    assert "haproxy-lb.yaml" in text and "present" in text and "kube-scheduler" not in text
    assert_settled(node)


def test_status_all_and_unknown(node):
    node.run("stop", "etcd", "--reason", "defrag", "--for", "30m")
    text = node.run("status").stdout
    assert "node %s" % NODE in text
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert name in text
    assert "parked" in text and "defrag" in text and "until" in text
    rows = {r["file"]: r for r in json.loads(node.run("-o", "json", "status").stdout)["components"]}
    assert rows["etcd.yaml"]["state"] == "parked" and rows["etcd.yaml"]["reason"] == "defrag"
    assert rows["etcd.yaml"]["checksum"] == sha(MANIFESTS["etcd.yaml"])
    assert rows["kube-scheduler.yaml"]["state"] == "present"
    node.run("status", "nope", rc=3)


def test_history_records_every_change(node):
    node.run("stop", "scheduler", "--reason", "maintenance window")
    node.run("start", "scheduler")
    node.run("restart", "etcd", "--reason", "rotate certs")
    node.run("stop", "apiserver")
    records = json.loads(node.run("-o", "json", "history").stdout)["history"]
    assert [(r["action"], r["component"]) for r in records] == [
        ("stop", "kube-scheduler"), ("start", "kube-scheduler"), ("stop", "etcd"), ("start", "etcd"),
        ("stop", "kube-apiserver")]
    host = os.uname().nodename
    for r in records:
        for key in ("time", "user", "host", "action", "component", "checksum"):
            assert r.get(key), (key, r)
        assert r["user"] == "root" and r["host"] == host and r["node"] == NODE
        assert r["checksum"] == sha(MANIFESTS[r["file"]])
    assert records[0]["reason"] == "maintenance window" and records[2]["reason"] == "rotate certs"
    text = node.run("history").stdout.splitlines()
    assert text[0].split() == ["TIME", "USER", "HOST", "ACTION", "COMPONENT", "SHA256", "ORIGIN", "REASON"]
    assert [r["origin"] for r in records][:2] == ["cpctl stop scheduler", "cpctl start scheduler"]
    assert len(text) == 6 and "maintenance window" in text[1] and records[0]["time"] in text[1]
    sched = json.loads(node.run("-o", "json", "history", "scheduler").stdout)["history"]
    assert [(r["action"], r["component"]) for r in sched] == [("stop", "kube-scheduler"), ("start", "kube-scheduler")]
    assert len(node.run("history", "kube-scheduler").stdout.splitlines()) == 3
    assert len(json.loads(node.run("-o", "json", "history", "-l", "1").stdout)["history"]) == 1
    assert_settled(node)


def test_history_survives_a_torn_last_line(node):
    node.run("stop", "scheduler")
    with open(node.history_file, "ab") as handle:
        handle.write(b'{"action":"start","compo')      # a crash in the middle of an append
    assert len(json.loads(node.run("-o", "json", "history").stdout)["history"]) == 1
    node.run("start", "scheduler")
    records = json.loads(node.run("-o", "json", "history").stdout)["history"]
    assert [r["action"] for r in records] == ["stop", "start"]


@pytest.mark.parametrize("content", [b"", b"\x00\x01binary", b"kind: Pod\nmetadata: [",
                                     b"apiVersion: v1\nkind: Service\n"])
def test_start_refuses_a_present_file_the_kubelet_does_not_run(node, content):
    """It said "already running" from the file alone (exit 0) while status showed it invalid."""
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "wb") as handle:
        handle.write(content)
    err = node.run("start", "scheduler", rc=4).stderr
    assert "the kubelet does not run it, so it cannot be started" in err

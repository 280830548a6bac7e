"""cpctl watch with real inotify: the CLI runs as a subprocess and its JSON lines are read back.

Every wait is bounded (no timing is asserted: latency is a benchmark concern, not a test).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Optional

import pytest

from cpctl.ops import watch as watchmod
from cpctl.probes.base import PodTarget, Waiter
from tests.coreutil import CLI, MANIFESTS, NODE, NodeDirs

POD = MANIFESTS["kube-scheduler.yaml"]
WAIT = 30.0                 # a busy machine: a passing wait returns at once


class WatchProc:
    """``cpctl -o json watch`` in a child process; records are read by a thread into a queue."""

    def __init__(self, node: NodeDirs, *args: str, env: Optional[dict] = None) -> None:
        argv = CLI + ["-o", "json", "watch", "--debounce", "50", *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env or node.env())
        self.records: Any = queue.Queue()
        self.seen: list = []
        threading.Thread(target=self._read, daemon=True).start()
        self.start = self.next()
        assert self.start["verdict"] == "watching", self.start

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.records.put(json.loads(line))
        self.records.put(None)

    def next(self, timeout: float = WAIT) -> dict:
        try:
            record = self.records.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no watch output within %ss; seen %r" % (timeout, self.seen)) from None
        if record is None:
            raise AssertionError("watch exited: rc=%s stderr=%s" % (self.proc.wait(5), self.proc.stderr.read()))
        self.seen.append(record)
        return record

    def until(self, pred: Callable[[dict], bool], timeout: float = WAIT) -> list:
        """Records up to and including the first one matching ``pred``."""
        got = []
        while True:
            record = self.next(timeout)
            got.append(record)
            if pred(record):
                return got

    def verdict(self, file: str, timeout: float = WAIT) -> dict:
        return self.until(lambda r: r.get("file") == file and r["event"] != "mirror", timeout)[-1]

    def marker(self, node: NodeDirs, name: str) -> list:
        """Everything emitted before a fresh dot file's verdict: proves nothing else is pending."""
        touch(node, "." + name, b"")
        return self.until(lambda r: r.get("file") == "." + name)[:-1]

    def stop(self, signum: int = signal.SIGTERM) -> tuple:
        self.proc.send_signal(signum)
        rc = self.proc.wait(WAIT)
        rest = []
        while True:
            record = self.records.get(timeout=WAIT)
            if record is None:
                break
            rest.append(record)
        return rc, rest

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def watcher(node: NodeDirs) -> Any:
    proc = WatchProc(node)
    yield proc
    proc.close()


def touch(node: NodeDirs, name: str, data: bytes) -> None:
    with open(os.path.join(node.manifests, name), "wb") as handle:
        handle.write(data)


def path(node: NodeDirs, name: str) -> str:
    return os.path.join(node.manifests, name)


# --- verdicts --------------------------------------------------------------------------------------

def test_start_line_names_what_runs(watcher: WatchProc) -> None:
    assert "4 manifests" in watcher.start["detail"]
    assert set(watcher.start) == {"time", "event", "file", "verdict", "pod", "detail", "elapsed_seconds", "files",
                                  "bounce"}


def test_load_reload_stop_and_unchanged(node: NodeDirs, watcher: WatchProc) -> None:
    touch(node, "extra.yaml", POD.replace(b"name: kube-scheduler", b"name: extra"))
    rec = watcher.verdict("extra.yaml")
    assert rec["verdict"] == "load" and rec["pod"] == "extra-" + NODE and "created" in rec["event"]
    touch(node, "extra.yaml", POD.replace(b"name: kube-scheduler", b"name: extra") + b"# v2\n")
    rec = watcher.verdict("extra.yaml")     # a comment: the kubelet decodes the same pod (same config hash)
    assert rec["verdict"] == "ignore" and "only comments, formatting or API defaults changed" in rec["detail"], rec
    touch(node, "extra.yaml", POD.replace(b"name: kube-scheduler", b"name: extra").replace(
        b"spec:\n", b"spec:\n  restartPolicy: Always\n", 1))
    rec = watcher.verdict("extra.yaml")     # an API default written out: still the same pod
    assert rec["verdict"] == "ignore", rec
    touch(node, "extra.yaml", POD.replace(b"name: kube-scheduler", b"name: extra").replace(
        b"spec:\n", b"spec:\n  restartPolicy: Always\n  hostnameOverride: cp\n", 1))
    rec = watcher.verdict("extra.yaml")     # a 1.34 field on this 1.30 node (kube-apiserver:v1.30.0): dropped
    assert rec["verdict"] == "ignore" and "only fields Kubernetes 1.30 does not have changed: its kubelet drops " \
        "them" in rec["detail"], rec
    changed = POD.replace(b"name: kube-scheduler", b"name: extra").replace(b"tier: control-plane", b"tier: x")
    touch(node, "extra.yaml", changed)
    assert watcher.verdict("extra.yaml")["verdict"] == "reload"
    os.utime(path(node, "extra.yaml"))
    touch(node, "extra.yaml", changed)
    rec = watcher.verdict("extra.yaml")
    assert rec["verdict"] == "ignore" and "unchanged" in rec["detail"]
    os.unlink(path(node, "extra.yaml"))
    rec = watcher.verdict("extra.yaml")
    assert rec["verdict"] == "stop" and rec["event"] == "deleted" and "extra" in rec["detail"]


def test_moved_out_and_back_in(node: NodeDirs, watcher: WatchProc, tmp_path: Any) -> None:
    os.rename(path(node, "kube-scheduler.yaml"), str(tmp_path / "parked.yaml"))
    rec = watcher.verdict("kube-scheduler.yaml")
    assert (rec["event"], rec["verdict"], rec["pod"]) == ("moved_out", "stop", "kube-scheduler-" + NODE)
    os.rename(str(tmp_path / "parked.yaml"), path(node, "kube-scheduler.yaml"))
    rec = watcher.verdict("kube-scheduler.yaml")
    assert (rec["event"], rec["verdict"]) == ("moved_in", "load")


REJECTS = {
    "invalid YAML": b"apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n",
    "not a v1 Pod": b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
    "binary": b"\x00\x01binary",
    "too large": b"# " + b"x" * (10 << 20) + b"\n",    # the kubelet reads at most 10 MiB
}


@pytest.mark.parametrize("why", sorted(REJECTS))
def test_reject(node: NodeDirs, watcher: WatchProc, why: str) -> None:
    touch(node, "bad.yaml", REJECTS[why])
    rec = watcher.verdict("bad.yaml")
    assert rec["verdict"] == "reject" and why in rec["detail"]


def write_in_chunks(target: str, data: bytes, chunks: int, pause: float) -> None:
    """One open, several writes with pauses far longer than the debounce, then the close."""
    step = -(-len(data) // chunks)
    with open(target, "wb") as handle:
        for start in range(0, len(data), step):
            handle.write(data[start:start + step])
            handle.flush()
            threading.Event().wait(pause)


@pytest.mark.parametrize("what", ["valid pod", "too large"])
def test_a_file_written_in_chunks_is_judged_once_closed(node: NodeDirs, watcher: WatchProc, what: str) -> None:
    """The writer pauses 0.3 s between chunks (6x the 50 ms debounce): the only verdict comes after
    the close (IN_CLOSE_WRITE), never a half-written file judged "empty" or truncated YAML."""
    data = POD.replace(b"name: kube-scheduler", b"name: chunked") if what == "valid pod" else REJECTS["too large"]
    write_in_chunks(path(node, "chunked.yaml"), data, 4, 0.3)
    seen = [r for r in watcher.marker(node, "m-chunks") if r["file"] == "chunked.yaml" and r["event"] != "mirror"]
    assert len(seen) == 1, seen
    if what == "valid pod":
        assert seen[0]["verdict"] == "load" and seen[0]["pod"] == "chunked-" + NODE, seen
    else:
        assert seen[0]["verdict"] == "reject" and "too large" in seen[0]["detail"], seen
    assert "close-after-write" not in seen[0]["detail"]


def test_previously_running_file_turned_invalid(node: NodeDirs, watcher: WatchProc) -> None:
    touch(node, "kube-scheduler.yaml", POD + b"  bad: [\n")
    rec = watcher.verdict("kube-scheduler.yaml")
    assert rec["verdict"] == "reject" and "stops pod kube-system/kube-scheduler" in rec["detail"]


def test_ignored_dot_files_and_directories(node: NodeDirs, watcher: WatchProc) -> None:
    touch(node, ".kube-scheduler.yaml.swp", b"b0VIM")
    rec = watcher.verdict(".kube-scheduler.yaml.swp")
    assert rec["verdict"] == "ignore" and "swap file for kube-scheduler.yaml" in rec["detail"]
    os.mkdir(path(node, "old"))
    rec = watcher.verdict("old")
    assert rec["verdict"] == "ignore" and "directory" in rec["detail"]


def test_duplicate_pod_names_both_files(node: NodeDirs, watcher: WatchProc) -> None:
    shutil.copy(path(node, "kube-apiserver.yaml"), path(node, "kube-apiserver.yaml.bak"))
    rec = watcher.verdict("kube-apiserver.yaml.bak")
    assert rec["verdict"] == "duplicate" and rec["files"] == ["kube-apiserver.yaml.bak", "kube-apiserver.yaml"]
    assert "kube-apiserver.yaml" in rec["detail"]


def test_removing_either_duplicate_stops_the_pod_until_the_relist(node: NodeDirs, watcher: WatchProc) -> None:
    """The kubelet forgets the pod key of the file removed although the other file defines the same
    pod (file_linux.go: Remove/Rename delete fileKeyMapping[file]): the pod stops until the next
    full re-list brings it back. Today's verdict must not be "the pod stays"."""
    shutil.copy(path(node, "kube-apiserver.yaml"), path(node, "kube-apiserver.yaml.bak"))
    assert watcher.verdict("kube-apiserver.yaml.bak")["verdict"] == "duplicate"
    os.unlink(path(node, "kube-apiserver.yaml.bak"))
    rec = watcher.verdict("kube-apiserver.yaml.bak")
    assert rec["verdict"] == "stop" and rec.get("bounce") is True, rec
    assert "although kube-apiserver.yaml still defines it" in rec["detail"] and "next full re-list" in rec["detail"]


def test_vim_save_gives_one_verdict_for_the_file(node: NodeDirs, watcher: WatchProc) -> None:
    """vim's default write: write-test 4913, rename x -> x~, write new x, delete x~, swap file."""
    target = path(node, "kube-scheduler.yaml")
    touch(node, ".kube-scheduler.yaml.swp", b"b0VIM")
    touch(node, "4913", b"")
    os.unlink(path(node, "4913"))
    os.rename(target, target + "~")
    with open(target, "wb") as handle:
        handle.write(POD.replace(b"leader-elect=true", b"leader-elect=false"))
    os.unlink(target + "~")
    seen = watcher.marker(node, "m1")
    by_file: dict = {}
    for rec in seen:
        by_file.setdefault(rec["file"], []).append(rec)
    assert [r["verdict"] for r in by_file["kube-scheduler.yaml"]] == ["reload"]
    assert [r["verdict"] for r in by_file["4913"]] == ["ignore"] and "write-test" in by_file["4913"][0]["detail"]
    assert [r["verdict"] for r in by_file["kube-scheduler.yaml~"]] == ["ignore"]
    assert [r["verdict"] for r in by_file[".kube-scheduler.yaml.swp"]] == ["ignore"]


def test_atomic_rename_save(node: NodeDirs, watcher: WatchProc) -> None:
    touch(node, ".kube-scheduler.yaml.tmp", POD.replace(b"tier: control-plane", b"tier: new"))
    os.rename(path(node, ".kube-scheduler.yaml.tmp"), path(node, "kube-scheduler.yaml"))
    # sed -i: a non-dot temp file, renamed over the target
    touch(node, "sedX1y2Z3", MANIFESTS["kube-apiserver.yaml"].replace(b"tier: control-plane", b"tier: sed"))
    os.rename(path(node, "sedX1y2Z3"), path(node, "kube-apiserver.yaml"))
    seen = watcher.marker(node, "m2")
    verdicts = {r["file"]: (r["verdict"], r["event"]) for r in seen}
    assert verdicts["kube-scheduler.yaml"] == ("reload", "moved_in")
    assert verdicts[".kube-scheduler.yaml.tmp"][0] == "ignore"
    assert verdicts["sedX1y2Z3"][0] == "ignore"
    assert verdicts["kube-apiserver.yaml"][0] == "reload"
    assert len([r for r in seen if r["file"] == "kube-scheduler.yaml"]) == 1


# --- the dir itself, signals -----------------------------------------------------------------------------

def test_dir_removed_and_recreated(node: NodeDirs, watcher: WatchProc) -> None:
    shutil.rmtree(node.manifests)
    seen = watcher.until(lambda r: r["event"] == "dir_removed" and r["file"] is None)
    stopped = {r["file"] for r in seen if r["verdict"] == "stop" and r["file"]}
    assert stopped == set(MANIFESTS)
    os.mkdir(node.manifests)
    assert watcher.until(lambda r: r["event"] == "dir_created")[-1]["verdict"] == "watching"
    touch(node, "kube-scheduler.yaml", POD)
    rec = watcher.verdict("kube-scheduler.yaml")
    assert rec["verdict"] == "load", watcher.seen
    os.rename(node.manifests, node.manifests + ".old")      # moved away, then a new one moved in
    watcher.until(lambda r: r["event"] == "dir_removed" and r["file"] is None)
    shutil.copytree(node.manifests + ".old", node.manifests + ".new")
    os.rename(node.manifests + ".new", node.manifests)
    watcher.until(lambda r: r["event"] == "dir_created")
    assert watcher.verdict("kube-scheduler.yaml")["verdict"] == "load"
    touch(node, "etcd.yaml", MANIFESTS["etcd.yaml"])
    assert watcher.verdict("etcd.yaml")["verdict"] == "load", "the new dir is watched"


@pytest.mark.parametrize("signum,name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_signal_exits_0_with_final_line(node: NodeDirs, watcher: WatchProc, signum: int, name: str) -> None:
    touch(node, "junk", b"x: [")
    watcher.verdict("junk")
    rc, rest = watcher.stop(signum)
    assert rc == 0 and rest[-1]["verdict"] == "exit" and name in rest[-1]["detail"]
    assert "1 verdict" in rest[-1]["detail"]


def test_text_output_and_missing_dir(node: NodeDirs, tmp_path: Any) -> None:
    proc = subprocess.Popen(CLI + ["watch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=node.env())
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "watching" in first and node.manifests in first
        touch(node, "etcd.yaml.orig", MANIFESTS["etcd.yaml"])
        assert "DUPLICATE etcd.yaml.orig:" in proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0 and "stopped (SIGTERM)" in out and err == ""
    finally:
        if proc.poll() is None:
            proc.kill()
    env = node.env(CPCTL_MANIFESTS_DIR=str(tmp_path / "nope"))
    done = subprocess.run(CLI + ["watch"], env=env, capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 7 and "does not exist" in done.stderr


# --- mirror pod follow-up (in-process, fake waiter; the lab test is in test_watch_lab.py) ----------------

class FakeWaiter(Waiter):
    """A stand-in probe whose describe() returns whatever the test set in ``state``."""

    name = "fake"

    def __init__(self) -> None:
        self.state: Optional[dict] = {"present": True, "ready": True, "phase": "Running", "uid": "a", "age_seconds": 50}

    def describe(self, target: PodTarget) -> Optional[dict]:
        return self.state


def test_a_removed_dirs_late_events_are_not_judged_against_the_new_dir(node: NodeDirs) -> None:
    """The file deletions of a removed dir come from its own watch's thread and may arrive after the
    dir is back (seen under load: the first verdict for kube-scheduler.yaml written into the new dir
    was "ignore: appeared and vanished", the old file's deletion). Events of a watch that was
    replaced are dropped; the same event from the current watch is judged."""
    records: Any = queue.Queue()
    runner = watchmod.Watch(node.manifests, records.put, node_name=NODE, debounce=0.02)
    thread = threading.Thread(target=lambda: (runner.start(), runner.run(), runner.close()), daemon=True)
    thread.start()

    def until_file(name: str) -> list:
        got = []
        while True:
            rec = records.get(timeout=WAIT)
            got.append(rec)
            if rec.get("file") == name:
                return got
    try:
        assert records.get(timeout=WAIT)["verdict"] == "watching"
        current = runner._generation
        stale = path(node, "kube-scheduler.yaml")
        runner.events.put(("fs", "deleted", stale, "", current - 1))      # an earlier watch's event
        touch(node, ".marker", b"")
        assert [r["file"] for r in until_file(".marker")] == [".marker"]
        runner.events.put(("fs", "deleted", path(node, "etcd.yaml"), "", current))
        os.unlink(path(node, "etcd.yaml"))
        rec = until_file("etcd.yaml")[-1]
        assert rec["verdict"] == "stop", rec
    finally:
        runner.stop("test")
        thread.join(WAIT)


def test_a_file_left_open_is_judged_after_the_settle(node: NodeDirs) -> None:
    """A writer that keeps the file open and stops writing: judged as it is after ``settle`` seconds
    without a write, and the verdict says no close was seen."""
    records: Any = queue.Queue()
    runner = watchmod.Watch(node.manifests, records.put, node_name=NODE, debounce=0.02, settle=0.5)
    thread = threading.Thread(target=lambda: (runner.start(), runner.run(), runner.close()), daemon=True)
    thread.start()
    try:
        assert records.get(timeout=WAIT)["verdict"] == "watching"
        with open(path(node, "open.yaml"), "wb") as handle:
            handle.write(POD.replace(b"name: kube-scheduler", b"name: open"))
            handle.flush()
            rec = records.get(timeout=WAIT)         # while the file is still open
        assert rec["file"] == "open.yaml" and rec["verdict"] == "load", rec
        assert "no close-after-write within 0.5s" in rec["detail"], rec
    finally:
        runner.stop("test")
        thread.join(WAIT)


def test_follow_up_lines_with_fake_waiter(node: NodeDirs) -> None:
    records: Any = queue.Queue()
    fake = FakeWaiter()
    runner = watchmod.Watch(node.manifests, records.put, waiter=fake, node_name=NODE, timeout=0.6, debounce=0.02)
    thread = threading.Thread(target=lambda: (runner.start(), runner.run(), runner.close()), daemon=True)
    thread.start()

    def wait_for(pred: Callable[[dict], bool]) -> dict:
        while True:
            rec = records.get(timeout=WAIT)
            if pred(rec):
                return rec
    try:
        wait_for(lambda r: r["verdict"] == "watching")
        os.unlink(path(node, "kube-scheduler.yaml"))
        assert wait_for(lambda r: r["event"] != "mirror")["verdict"] == "stop"
        rec = wait_for(lambda r: r["event"] == "mirror")
        assert rec["verdict"] == "not_followed" and rec["detail"] == "mirror pod kube-scheduler-cp-1 still present " \
                                                                      "after 0.6s"
        fake.state = {"present": False}
        os.unlink(path(node, "etcd.yaml"))
        rec = wait_for(lambda r: r["event"] == "mirror")
        assert rec["verdict"] == "followed" and rec["detail"].startswith("mirror pod etcd-cp-1 gone after ")
        touch(node, "etcd.yaml", MANIFESTS["etcd.yaml"])
        rec = wait_for(lambda r: r["event"] == "mirror")
        assert rec["verdict"] == "not_followed" and "did not appear" in rec["detail"]
    finally:
        runner.stop("test")
        thread.join(WAIT)


class BouncingWaiter(Waiter):
    """describe() of a mirror pod that the kubelet replaces once the duplicate is gone, before the watch's
    follow-up looks at it: the bounce over within one poll interval, whatever the machine's load. The new
    pod's creationTimestamp reads half a second before the change as the watch timed it (whole seconds):
    its age alone cannot tell it from the pod before the change."""

    name = "fake"

    def __init__(self, runner: watchmod.Watch, duplicate: str, seen_at_start: bool) -> None:
        self.runner, self.duplicate, self.seen_at_start = runner, duplicate, seen_at_start

    def describe(self, target: PodTarget) -> Optional[dict]:
        if os.path.exists(self.duplicate):
            if not self.seen_at_start:
                return None         # the API did not answer the watch's look at its start
            return {"present": True, "ready": True, "phase": "Running", "uid": "a", "age_seconds": 50.0}
        age = time.monotonic() - self.runner._changed_at + 0.5
        return {"present": True, "ready": True, "phase": "Running", "uid": "b", "age_seconds": age}


@pytest.mark.parametrize("seen_at_start", [True, False])
def test_a_bounce_over_before_the_first_look(node: NodeDirs, seen_at_start: bool) -> None:
    """Issue 44: the duplicate's removal, and the pod replaced before the follow-up's first look. With the
    watch's look from its start
    the new uid proves the pod gone and recreated; without one, no look can tell the pod from the one
    before the change: "unverified", never "still present" nor "not recreated"."""
    shutil.copy(path(node, "kube-scheduler.yaml"), path(node, "kube-scheduler.yaml.bak"))
    records: Any = queue.Queue()
    runner = watchmod.Watch(node.manifests, records.put, node_name=NODE, timeout=3.0, debounce=0.02, relist=0.5)
    runner.waiter = BouncingWaiter(runner, path(node, "kube-scheduler.yaml.bak"), seen_at_start)
    thread = threading.Thread(target=lambda: (runner.start(), runner.run(), runner.close()), daemon=True)
    thread.start()
    try:
        assert records.get(timeout=WAIT)["verdict"] == "watching"
        os.unlink(path(node, "kube-scheduler.yaml.bak"))
        follows = []
        while len(follows) < 2:
            rec = records.get(timeout=WAIT)
            if rec["event"] == "mirror":
                follows.append(rec)
            else:
                assert (rec["verdict"], rec["bounce"]) == ("stop", True), rec
        stop, reload = follows
        if seen_at_start:
            assert stop["verdict"] == "followed" and "had replaced it" in stop["detail"], follows
            assert reload["verdict"] == "followed" and "recreated and Ready" in reload["detail"], follows
        else:
            assert stop["verdict"] == reload["verdict"] == "unverified", follows
            assert all("whether it is the pod from before the change or a new one" in r["detail"] for r in follows)
    finally:
        runner.stop("test")
        thread.join(WAIT)

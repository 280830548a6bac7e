"""Issue 46: ``cpctl etcd snapshot save|list`` against a real 3-member etcd 3.5 (tests.realetcd), each
member seen as a master (tests.etcdnodes), the real cpctl as a process.

cpctl's snapshot is put next to etcd's own tools: ``etcdutl snapshot status`` reads the same
revision and key count cpctl checked, ``etcdutl snapshot restore`` makes a member of it that serves
the keys written before it. A stream etcd really sent, cut short or with a byte changed, is refused.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import jsonschema
import pytest

from cpctl.agent import etcdio, fileops
from cpctl.timeutil import parse_iso
from cpctl_lab.httpserve import free_port
from tests import etcdnodes as en
from tests.realetcd import READY_WAIT, RealEtcd

pytestmark = pytest.mark.timeout(900)
SCHEMAS = Path(__file__).resolve().parents[2] / "cpctl" / "schemas"


def valid(name: str, doc: Any) -> Any:
    with open(SCHEMAS / ("%s.json" % name)) as handle:
        jsonschema.validate(doc, json.load(handle))
    return doc


def etcdutl_status(cluster: RealEtcd, path: str) -> Dict[str, Any]:
    proc = subprocess.run([cluster.install.etcdutl, "snapshot", "status", path, "-w", "json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def snap_dir(cluster: RealEtcd, name: str = "m1") -> Path:
    return cluster.members[name].root / "var/lib/cpctl/snapshots"


def _restored_member_reads(cluster: RealEtcd, snapshot: str, tmp: Path, keys: Dict[bytes, bytes]) -> None:
    """``etcdutl snapshot restore`` to a new one-member cluster, started (plain HTTP on loopback):
    each of ``keys`` reads back with its value."""
    peer, client = free_port(), free_port()
    data = tmp / "restored"
    proc = subprocess.run([cluster.install.etcdutl, "snapshot", "restore", snapshot, "--data-dir", str(data),
                           "--name", "r1", "--initial-cluster", "r1=http://127.0.0.1:%d" % peer,
                           "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    log = open(tmp / "restored.log", "wb")
    etcd = subprocess.Popen([cluster.install.etcd, "--name", "r1", "--data-dir", str(data),
                             "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                             "--initial-cluster", "r1=http://127.0.0.1:%d" % peer,
                             "--listen-client-urls", "http://127.0.0.1:%d" % client,
                             "--advertise-client-urls", "http://127.0.0.1:%d" % client],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_WAIT      # a Go binary elects itself within a second idle
        for key, value in keys.items():
            body = json.dumps({"key": base64.b64encode(key).decode()}).encode()
            while True:
                try:
                    request = urllib.request.Request("http://127.0.0.1:%d/v3/kv/range" % client, data=body,
                                                     method="POST")
                    with urllib.request.urlopen(request, timeout=5) as reply:
                        doc = json.loads(reply.read())
                    break
                except OSError:
                    assert time.monotonic() < deadline, (tmp / "restored.log").read_text()[-2000:]
                    time.sleep(0.2)
            assert [base64.b64decode(kv["value"]) for kv in doc.get("kvs", [])] == [value], key
    finally:
        etcd.kill()
        etcd.wait(30)
        log.close()


def test_saved_snapshot_passes_etcdutl_status_and_restores_the_keys(real_etcd: RealEtcd, tmp_path: Path) -> None:
    keys = {b"/before/%d" % n: os.urandom(64) for n in range(20)}
    for key, value in keys.items():
        assert real_etcd.put(key, value)[0] == 200
    saved = valid("etcd-snapshot-save", en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "save"))
    row = saved["snapshot"]
    path = Path(row["path"])
    assert path.parent == snap_dir(real_etcd) and row["verified"] is True
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert saved["where"] == "this machine" and "saved on this machine" in saved["message"]
    theirs = etcdutl_status(real_etcd, str(path))
    assert (row["revision"], row["keys"]) == (theirs["revision"], theirs["totalKey"])
    assert row["size"] == path.stat().st_size == theirs["totalSize"] + 32
    assert bytes.fromhex(row["sha256"]) == path.read_bytes()[-32:]
    _restored_member_reads(real_etcd, str(path), tmp_path, keys)
    listed = valid("etcd-snapshot-list", en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "list"))
    assert listed["snapshots"] == [row] and listed["last_good"] == row["saved"]
    record = [r for r in en.history(real_etcd, "m1") if r["action"] == "etcd-snapshot"]
    assert len(record) == 1 and record[0]["file"] == str(path) and record[0]["sha256"] == row["sha256"]
    assert [n for n in os.listdir(path.parent) if n.startswith(".")] == []


def test_save_to_a_file_refuses_to_replace_one_and_keep_prunes_the_oldest(real_etcd: RealEtcd,
                                                                           tmp_path: Path) -> None:
    target = tmp_path / "mine.db"
    saved = en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "save", str(target))
    assert saved["snapshot"]["path"] == str(target) and target.stat().st_mode & 0o777 == 0o600
    before = target.read_bytes()
    prom = tmp_path / "snap.prom"
    refused = en.cpctl(real_etcd, "m1", "etcd", "snapshot", "save", str(target), "--prometheus-textfile", str(prom),
                       rc=4)
    assert "exists already" in refused.stderr and target.read_bytes() == before
    assert 'cpctl_etcd_snapshot_last_run_success{node="m1"} 0\n' in prom.read_text()
    assert "cpctl_etcd_snapshot_last_success_timestamp_seconds" not in prom.read_text()   # none in the default place
    en.cpctl(real_etcd, "m1", "etcd", "snapshot", "save", "relative.db", rc=2)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = en.cpctl(real_etcd, "m1", "etcd", "snapshot", "save", str(tmp_path / "link" / "x.db"), rc=2)
    assert "a symlink is refused" in linked.stderr and os.listdir(tmp_path / "real") == []
    names = [en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "save")["snapshot"]["name"] for _ in range(3)]
    pruned = en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "save", "--keep", "2", "--prometheus-textfile",
                           str(prom))
    assert pruned["pruned"] == names[:2]
    metrics = dict(line.rsplit(" ", 1) for line in prom.read_text().splitlines() if not line.startswith("#"))
    assert metrics['cpctl_etcd_snapshot_last_run_success{node="m1"}'] == "1"
    saved_at = parse_iso(pruned["snapshot"]["saved"])
    assert float(metrics['cpctl_etcd_snapshot_last_success_timestamp_seconds{node="m1"}']) == saved_at
    assert prom.stat().st_mode & 0o777 == 0o644                 # node_exporter reads it
    kept = [s["name"] for s in en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "list")["snapshots"]]
    assert kept == [names[2], pruned["snapshot"]["name"]]
    assert sorted(os.listdir(snap_dir(real_etcd))) == sorted(kept + [n + ".json" for n in kept])


# --------------------------------------------------------------------------- a stream etcd sent, changed


def _real_stream(cluster: RealEtcd) -> bytes:
    """The body etcd's gateway answers to ``POST /v3/maintenance/snapshot`` (newline-separated
    JSON messages with base64 blobs), as member m1 sends it."""
    ca, cert, key = cluster.client_pair("m1")
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    request = urllib.request.Request(cluster.members["m1"].client_url + "/v3/maintenance/snapshot", data=b"{}",
                                     method="POST")
    with urllib.request.urlopen(request, timeout=60, context=ctx) as reply:
        return bytes(reply.read())


def _serve(body: bytes, cut: bool = False) -> Iterator[str]:
    """A loopback server answering every POST with ``body`` (chunked, as etcd's gateway does); with
    ``cut`` the connection closes after the body without the last chunk."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(body), 1 << 15):
                piece = body[at:at + (1 << 15)]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            if not cut:
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d/v3/maintenance/snapshot" % server.server_port
    finally:
        server.shutdown()
        server.server_close()


def _flip_a_blob_byte(stream: bytes) -> bytes:
    lines = stream.split(b"\n")
    doc = json.loads(lines[0])
    blob = bytearray(base64.b64decode(doc["result"]["blob"]))
    blob[len(blob) // 2] ^= 0x01
    doc["result"]["blob"] = base64.b64encode(bytes(blob)).decode()
    return b"\n".join([json.dumps(doc).encode()] + lines[1:])


def _without_last_message(stream: bytes) -> bytes:
    lines = [line for line in stream.split(b"\n") if line.strip()]
    return b"\n".join(lines[:-1]) + b"\n"


CHANGES: Dict[str, Callable[[bytes], bytes]] = {
    "the last message (etcd's sha256) missing": _without_last_message,
    "a byte of the data changed": _flip_a_blob_byte,
    "cut in the middle of a message": lambda s: s[:len(s) // 2],
    "an error message at the end": lambda s: _without_last_message(s) + b'{"error":{"grpc_code":14,"message":'
                                                                         b'"etcdserver: leader changed"}}\n',
}


def test_a_cut_or_changed_stream_is_refused_and_leaves_no_file(real_etcd: RealEtcd, tmp_path: Path) -> None:
    for n in range(50):
        assert real_etcd.put(b"/k/%d" % n, os.urandom(1024))[0] == 200
    stream = _real_stream(real_etcd)
    for url in _serve(stream):                     # the stream as etcd sent it is taken
        done = etcdio.etcd_snapshot(url, str(tmp_path / "whole.db"))
        assert done["revision"] > 50 and (tmp_path / "whole.db").exists()
    for what, change in CHANGES.items():
        for cut in (False, True):
            for url in _serve(change(stream), cut=cut):
                target = tmp_path / "changed.db"
                with pytest.raises(OSError) as caught:
                    etcdio.etcd_snapshot(url, str(target))
                assert caught.value.errno is not None, what
                assert sorted(os.listdir(tmp_path)) == ["whole.db"], (what, cut, caught.value)
    for url in _serve(stream, cut=True):          # the whole data but the end of the body missing
        with pytest.raises(OSError, match="cut short"):
            etcdio.etcd_snapshot(url, str(tmp_path / "cut.db"))
    assert sorted(os.listdir(tmp_path)) == ["whole.db"]


# --------------------------------------------------------------------------- signals


def _big(cluster: RealEtcd) -> None:
    """40 MiB of live data: a snapshot stream long enough to be caught while it is written."""
    value = os.urandom(1 << 20)
    for index in range(40):
        assert cluster.put(b"/big/%04d" % index, value)[0] == 200


def _save_caught(cluster: RealEtcd, sig: int, during: Callable[[], None] = lambda: None) -> Dict[str, Any]:
    """Start ``cpctl etcd snapshot save``; once its dot-temp file has data, freeze m1's etcd (SIGSTOP:
    the stream cannot end now), call ``during``, send ``sig`` to cpctl, wait for it, let etcd go on."""
    args = [sys.executable, "-m", "cpctl", *en.node_args(cluster, "m1"), "etcd", "snapshot", "save"]
    directory = snap_dir(cluster)
    member = cluster.members["m1"].proc
    assert member is not None
    proc = subprocess.Popen(args, cwd=en.REPO, env=en.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    temps: List[str] = []
    try:
        deadline = time.monotonic() + en.RUN_TIMEOUT
        while not temps and proc.poll() is None and time.monotonic() < deadline:
            try:
                temps = [n for n in os.listdir(directory) if n.startswith(".") and (directory / n).stat().st_size]
            except OSError:
                pass
            time.sleep(0.001)
        assert temps, "cpctl ended before its snapshot had data: %s" % (proc.communicate(timeout=60),)
        os.kill(member.pid, signal.SIGSTOP)
        during()
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        os.kill(member.pid, signal.SIGCONT)
    return {"rc": proc.returncode, "stdout": out, "stderr": err, "temps": temps}


def test_sigint_during_a_save_leaves_no_file_and_says_so(real_etcd: RealEtcd) -> None:
    _big(real_etcd)
    second: List[Any] = []

    def meanwhile() -> None:
        """A second save waits for the first (exit 5 naming it); the node lock stays free."""
        second.append(en.cpctl(real_etcd, "m1", "--lock-timeout", "0.5", "etcd", "snapshot", "save", rc=5))
    seen = _save_caught(real_etcd, signal.SIGINT, meanwhile)
    assert "locked by pid" in second[0].stderr and "etcd snapshot save" in second[0].stderr
    assert seen["rc"] == 130, seen
    last = seen["stderr"].splitlines()[-1]
    assert last.startswith("cpctl: interrupted (SIGINT) while the etcd snapshot was being written: no file"), seen
    assert os.listdir(snap_dir(real_etcd)) == []
    assert [r["action"] for r in en.history(real_etcd, "m1")][-1] == "etcd-snapshot-interrupted"


def test_sigkill_during_a_save_leaves_only_a_dot_temp_that_the_next_save_removes(real_etcd: RealEtcd) -> None:
    _big(real_etcd)
    seen = _save_caught(real_etcd, signal.SIGKILL)
    assert seen["rc"] == -signal.SIGKILL, seen
    left = os.listdir(snap_dir(real_etcd))
    assert left == seen["temps"] and all(fileops.is_temp_name(n) for n in left), left
    assert valid("etcd-snapshot-list", en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "list"))["snapshots"] == []
    real_etcd.wait_healthy("m1")
    saved = en.cpctl_json(real_etcd, "m1", "etcd", "snapshot", "save")
    assert saved["swept"] == left
    name = saved["snapshot"]["name"]
    assert sorted(os.listdir(snap_dir(real_etcd))) == [name, name + ".json"]
    actions = [r["action"] for r in en.history(real_etcd, "m1")]
    assert actions[-2:] == ["etcd-snapshot-killed", "etcd-snapshot"]

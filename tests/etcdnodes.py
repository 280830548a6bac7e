"""Helpers (no tests) for etcd care (issue 46): each member of a ``tests.realetcd`` cluster seen as a
kubeadm master - its node root holds ``etc/kubernetes/manifests/etcd.yaml`` with the member's own
command line (kubeadm's flags; the files it names as node paths) and kubeadm's hostPath volumes -
and the real ``cpctl`` run against that node (``--node-root``), as on a master."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from tests.coreutil import check_result, schema_valid
from tests.realetcd import RealEtcd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: One cpctl run against a real etcd: a rolling defrag of 3 members with ~150 MB each takes well
#: under a minute on an idle machine; 600 s is a hung run on 2 busy cores, not a slow one.
RUN_TIMEOUT = 600.0


#: node root -> {flag: value} its etcd.yaml says instead of what the member runs with: a manifest
#: edited and not yet applied (the kubelet restarts etcd with it at its next sync).
EDITED: Dict[str, Dict[str, str]] = {}


def write_manifest(cluster: RealEtcd, name: str) -> Path:
    """Member ``name``'s etcd.yaml (its real command line, node paths) under its node root."""
    member = cluster.members[name]
    root = str(member.root)
    edited = EDITED.get(root, {})
    command = ["etcd"] + [a.replace(root, "") for a in member.argv if a.split("=", 1)[0] not in edited]
    command += ["%s=%s" % item for item in edited.items()]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "etcd", "namespace": "kube-system",
                        "labels": {"component": "etcd", "tier": "control-plane"}},
           "spec": {"hostNetwork": True, "priorityClassName": "system-node-critical",
                    "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.1-0", "command": command,
                                    "volumeMounts": [{"name": "etcd-data", "mountPath": "/var/lib/etcd"},
                                                     {"name": "etcd-certs", "mountPath": "/etc/kubernetes/pki/etcd"}]}],
                    "volumes": [{"name": "etcd-data", "hostPath": {"path": "/var/lib/etcd",
                                                                   "type": "DirectoryOrCreate"}},
                                {"name": "etcd-certs", "hostPath": {"path": "/etc/kubernetes/pki/etcd",
                                                                    "type": "DirectoryOrCreate"}}]}}
    manifests = member.root / "etc" / "kubernetes" / "manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    path = manifests / "etcd.yaml"
    path.write_text(yaml.safe_dump(pod))
    return path


def node_args(cluster: RealEtcd, name: str) -> List[str]:
    """The global options that make member ``name``'s node root the node cpctl acts on."""
    root = cluster.members[name].root
    write_manifest(cluster, name)
    return ["--manifests-dir", str(root / "etc/kubernetes/manifests"), "--state-dir", str(root / "var/lib/cpctl"),
            "--node-name", name, "--node-root", str(root), "--kubeconfig", str(root / "no-kubeconfig")]


def env() -> Dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("CPCTL_") or k == "CPCTL_LAB_PORTS"}
    out.setdefault("CPCTL_CONFIRM_BOOT_DIR", os.environ.get("CPCTL_CONFIRM_BOOT_DIR", ""))
    out["CPCTL_PERSIST"] = "0"
    return out


def cpctl(cluster: RealEtcd, name: str, *args: str, rc: Optional[int] = 0,
          timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """``cpctl <node options of member name> ARGS``: exit code checked (None: any), one stderr line on failure."""
    proc = subprocess.run([sys.executable, "-m", "cpctl", *node_args(cluster, name), *args], cwd=REPO, env=env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    check_result(proc, rc)
    return proc


def cpctl_json(cluster: RealEtcd, name: str, *args: str, rc: Optional[int] = 0) -> Any:
    return json.loads(cpctl(cluster, name, "-o", "json", *args, rc=rc).stdout)


def history(cluster: RealEtcd, name: str) -> List[Dict[str, Any]]:
    """``cpctl history -o json``'s records, the answer validated against history.json (the etcd
    operations' own fields: member, to, alarm, db_size_before/after, seconds, size, sha256, keys)."""
    return list(schema_valid("history", cpctl_json(cluster, name, "history", "--limit", "1000"))["history"])


# --------------------------------------------------------------------------- load


def garbage(cluster: RealEtcd, megabytes: int, chunk: int = 1 << 20, prefix: bytes = b"/garbage/") -> None:
    """``megabytes`` MiB of values written and deleted again, then compacted to the current revision:
    every member's DB keeps the pages (its size) while its size in use goes back down."""
    value = os.urandom(chunk)
    for index in range(megabytes * (1 << 20) // chunk):
        status, doc = cluster.put(prefix + b"%06d" % index, value)
        assert status == 200, doc
    name = cluster._running_name()
    status, doc = cluster.gateway(name, "/v3/kv/deleterange", {
        "key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(prefix[:-1] + b"0").decode()})
    assert status == 200, doc
    revision = int(doc["header"]["revision"])
    status, doc = cluster.gateway(name, "/v3/kv/compaction", {"revision": str(revision), "physical": True},
                                  timeout=120)
    assert status == 200, doc
    # bbolt frees the compacted pages only at a later write's commit, once no older read holds them
    # (they are "pending" until then, still counted in use): a few small writes release them.
    cluster.wait_for(lambda: _released(cluster, prefix), "the compacted pages to be released on every member")


def _released(cluster: RealEtcd, prefix: bytes) -> bool:
    cluster.put(prefix + b"release", b"x")
    return all(s["dbSizeInUse"] * 2 < s["dbSize"] for s in statuses(cluster).values())


def statuses(cluster: RealEtcd) -> Dict[str, Dict[str, Any]]:
    """Each running member's ``/v3/maintenance/status`` (sizes as ints)."""
    out = {}
    for name, member in cluster.members.items():
        if member.running:
            status, doc = cluster.gateway(name, "/v3/maintenance/status", {})
            assert status == 200, doc
            out[name] = dict(doc, dbSize=int(doc.get("dbSize", 0)), dbSizeInUse=int(doc.get("dbSizeInUse", 0)),
                             leader=int(doc.get("leader", 0)))
    return out


@dataclass
class Writer:
    """A client putting a key through the cluster every ``period`` s (trying each member in turn with
    a short timeout, as an etcd client with every endpoint does), recording when each put succeeded."""

    cluster: RealEtcd
    period: float = 0.1
    done: List[float] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: Optional[threading.Thread] = None

    def start(self) -> "Writer":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        names = [n for n, m in self.cluster.members.items() if m.running and not m.learner]
        turn = 0
        index = 0
        while not self._stop.is_set():
            for attempt in range(len(names)):
                name = names[(turn + attempt) % len(names)]
                try:
                    status, _doc = self.cluster.gateway(name, "/v3/kv/put", {
                        "key": base64.b64encode(b"/writer/key").decode(),
                        "value": base64.b64encode(b"%d" % index).decode()}, timeout=0.5)
                except OSError:
                    status = 0
                if status == 200:
                    self.done.append(time.monotonic())
                    turn = (turn + attempt) % len(names)
                    break
                self.failures += 1
            index += 1
            self._stop.wait(self.period)

    def stop(self) -> float:
        """Stop; the longest time between two successful puts."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        gaps = [b - a for a, b in zip(self.done, self.done[1:])]
        return max(gaps) if gaps else float("inf")


def defrag_intervals(cluster: RealEtcd) -> Dict[str, List[List[float]]]:
    """Each member's defragmentations as etcd's own log tells them: [[start, end], ...] (Unix time),
    from zap's "defragmenting" and "finished defragmenting directory" lines."""
    out: Dict[str, List[List[float]]] = {}
    for name, member in cluster.members.items():
        spans: List[List[float]] = []
        for line in member.log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            msg = entry.get("msg", "")
            when = _ts(entry.get("ts"))
            if msg == "defragmenting":
                spans.append([when, float("inf")])
            elif msg == "finished defragmenting directory" and spans:
                spans[-1][1] = when
        out[name] = spans
    return out


def _ts(value: Any) -> float:
    """zap's ISO8601 time (``2024-05-01T10:00:00.123Z``/``+0000``) as Unix time."""
    from datetime import datetime
    text = str(value)
    if isinstance(value, (int, float)):
        return float(value)
    text = text.replace("Z", "+00:00")
    if len(text) > 5 and text[-5] in "+-" and text[-3] != ":":
        text = text[:-2] + ":" + text[-2:]
    return datetime.fromisoformat(text).timestamp()

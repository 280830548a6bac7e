"""etcd snapshots: ``cpctl etcd snapshot save|list`` (docs/etcd.md "Snapshots").

A snapshot is taken from the node's **own** member (its etcd manifest's client URL, loopback
first) through the node's agent, with the node's etcd client certificate: etcd's v3 JSON gateway
streams ``/v3/maintenance/snapshot`` as JSON messages with base64 blobs, the agent writes them to a
dot-temp file as they come (a snapshot may be GBs: it is never held in memory), and the file gets
its name only after the sha256 etcd appends matched and the file read as an etcd database (its
revision and key count as ``etcdutl snapshot status`` counts them): ``agent.etcdio.etcd_snapshot``.

The default place is ``STATE/snapshots/`` (0700), one file per snapshot named by its UTC time,
``etcd-snapshot-YYYYmmddTHHMMSSZ.db``, beside it a record ``NAME.json`` of what was checked (read
back by ``list`` as untrusted input); ``--keep N`` removes the oldest of those beyond N. With
``-H``/``-i`` everything is on the master the agent runs on, never on this machine.
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple, TypedDict

from cpctl.agent import fileops
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode, Interrupted, Terminated, interrupted_by
from cpctl.host.base import SnapshotInfo
from cpctl.ops.etcdcare import gateway_of, record
from cpctl.probes.etcdmaint import EtcdError, Gateway, hex_id
from cpctl.timeutil import iso

SNAPSHOT = "/v3/maintenance/snapshot"
SUBDIR = "snapshots"
PREFIX = "etcd-snapshot-"
SUFFIX = ".db"
RECORD = ".json"
LOCK = "snapshot.lock"
NAME_RE = re.compile(r"^etcd-snapshot-(\d{8}T\d{6}Z)(?:-(\d{1,3}))?\.db$")
#: One snapshot's stream: etcd sends its whole database (up to its 8 GiB suggested quota); a stream
#: that takes longer than this is reported, the temp file removed.
SAVE_TIMEOUT = 3600.0
#: The largest snapshot taken: etcd's --quota-backend-bytes cannot usefully exceed 8 GiB (its docs);
#: twice that, plus the hash, is not a snapshot of a kubeadm cluster's etcd.
SIZE_LIMIT = 16 << 30
MAX_LISTED = 10000
RECORD_LIMIT = 16 << 10


class SnapshotRow(TypedDict):
    """One snapshot as ``save`` made it or ``list`` finds it (cpctl/schemas/etcd-snapshot*.json)."""

    name: str
    path: str
    size: int
    sha256: Optional[str]
    revision: Optional[int]
    keys: Optional[int]
    member: Optional[str]
    saved: Optional[str]
    verified: bool


class SaveReport(TypedDict):
    node: str
    changed: bool
    where: str
    snapshot: SnapshotRow
    pruned: List[str]
    swept: List[str]
    message: str


class ListReport(TypedDict):
    node: str
    where: str
    directory: str
    snapshots: List[SnapshotRow]
    last_good: Optional[str]
    message: str


def snapshot_dir(node: Node) -> str:
    return node.state.path + "/" + SUBDIR


def where(node: Node) -> str:
    """Which machine the files are on, as the output says it."""
    from cpctl.host.local import LocalHost
    return "this machine" if isinstance(node.host, LocalHost) else "the master %s (not this machine)" % node.node_name


def own_endpoint(node: Node) -> Tuple[str, Gateway]:
    """The node's own member's client URL (its etcd manifest's, loopback first) and the gateway."""
    gateway, endpoints = gateway_of(node)
    if not endpoints:
        raise CpctlError("no etcd client URL in node %s's manifests: a snapshot is taken from the node's own "
                         "etcd member" % node.node_name, ExitCode.ENVIRONMENT)
    return endpoints[0], gateway


def _ensure_dir(node: Node) -> str:
    """``STATE/snapshots`` (0700, no symlink), created when missing."""
    node.state.ensure(create=True)
    path = snapshot_dir(node)
    info = node.host.lstat(path)
    if info is None:
        node.host.makedirs(path, 0o700)
        info = node.host.lstat(path)
    if info is None or info["kind"] != "dir":
        raise CpctlError("%s is not a directory (a symlink is refused)" % path, ExitCode.REFUSED)
    if info["mode"] & 0o077:
        raise CpctlError("%s has loose permissions %04o: run chmod 700 %s" % (path, info["mode"], path),
                         ExitCode.REFUSED)
    return path


def _target(node: Node, file: str) -> Tuple[str, bool]:
    """(the path to write, whether it is in the default place): FILE must be absolute and new, its
    directory a real directory (not a symlink)."""
    if not file:
        directory = _ensure_dir(node)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        names = set(node.host.listdir(directory))
        name = PREFIX + stamp + SUFFIX
        for n in range(1, 1000):
            if name not in names:
                break
            name = "%s%s-%d%s" % (PREFIX, stamp, n, SUFFIX)
        return directory + "/" + name, True
    if not file.startswith("/") or "/../" in file + "/" or "/./" in file + "/":
        raise CpctlError("snapshot file %r: give an absolute path without . or .. (it is a path on the node)"
                         % file, ExitCode.USAGE)
    parent = os.path.dirname(file) or "/"
    for ancestor in _ancestors(parent):
        info = node.host.lstat(ancestor)
        if info is None or info["kind"] != "dir":
            raise CpctlError("snapshot file %s: %s is not a directory on %s (a symlink is refused)"
                             % (file, ancestor, node.node_name), ExitCode.USAGE)
    if node.host.lstat(file) is not None:
        raise CpctlError("snapshot file %s exists already: a snapshot never replaces a file" % file,
                         ExitCode.REFUSED)
    return file, False


def _ancestors(path: str) -> List[str]:
    """``/a/b/c`` -> ``/a``, ``/a/b``, ``/a/b/c``: each must be a real directory (no symlink on the way)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)]


def save(node: Node, file: str = "", keep: int = 0, timeout: float = SAVE_TIMEOUT) -> SaveReport:
    """Save a snapshot of the node's own member to ``file`` (default: ``STATE/snapshots/``), checked
    before it is called done, recorded in the history; ``keep`` > 0 prunes the default place."""
    endpoint, gateway = own_endpoint(node)
    with _save_lock(node):
        swept = _sweep(node)
        try:
            status = gateway.status(endpoint)
        except EtcdError as exc:
            raise CpctlError("node %s's own etcd member does not answer: %s" % (node.node_name, exc),
                             ExitCode.ENVIRONMENT) from None
        member = hex_id(status.member_id)
        path, default = _target(node, file)
        node.standing = "an etcd snapshot is being written to %s (under a dot-temp name until checked)" % path
        try:
            info = node.host.etcd_snapshot(endpoint.rstrip("/") + SNAPSHOT, path, gateway.tls,
                                           timeout, SIZE_LIMIT)
        except OSError as exc:
            record(node, "etcd-snapshot-failed", member, {"file": path, "reason": str(exc.strerror or exc)})
            raise CpctlError("etcd snapshot from %s failed, no file written: %s" % (endpoint, exc.strerror or exc),
                             ExitCode.ENVIRONMENT) from None
        except (KeyboardInterrupt, Terminated) as exc:
            signal = interrupted_by(exc)
            line = "interrupted (%s) while the etcd snapshot was being written: no file written at %s" % (signal, path)
            record(node, "etcd-snapshot-interrupted", member, {"file": path, "reason": line})
            raise Interrupted(signal, line) from None
        finally:
            node.standing = ""
        row = _row(path, info, member, iso())
        if default:
            node.host.write_atomic(path + RECORD, json.dumps(row, sort_keys=True).encode() + b"\n", 0o600)
        record(node, "etcd-snapshot", member, {"file": path, "size": info["size"], "sha256": info["sha256"],
                                                "revision": info["revision"], "keys": info["keys"],
                                                "reason": "snapshot saved and checked"})
        pruned = prune(node, keep) if keep > 0 else []
    message = ("snapshot of etcd member %s saved on %s: %s (%d bytes, revision %d, %d keys, sha256 %s checked)"
               % (member, where(node), path, info["size"], info["revision"], info["keys"], info["sha256"][:16]))
    if pruned:
        message += "; removed %d old snapshot(s) beyond --keep %d" % (len(pruned), keep)
    return SaveReport(node=node.node_name, changed=True, where=where(node), snapshot=row, pruned=pruned,
                      swept=swept, message=message)


@contextmanager
def _save_lock(node: Node) -> Iterator[None]:
    """One save at a time on a node (``STATE/snapshot.lock``), not the node lock: a stream of GiBs
    must not hold up a restart or an edit, and a save changes nothing cpctl's journal knows."""
    from cpctl.core.state import StateDir
    node.state.ensure(create=True)
    path = node.state.path + "/" + LOCK
    who = node.host.info()
    holder = "pid %d since %s (etcd snapshot save by %s@%s)" % (who["pid"], iso(), who.get("sudo_user") or who["user"],
                                                               who["hostname"])
    StateDir._take(lambda: node.host.lock(path, node.lock_timeout, holder), path)
    try:
        yield
    finally:
        node.host.unlock(path)


def _row(path: str, info: SnapshotInfo, member: str, saved: str) -> SnapshotRow:
    return SnapshotRow(name=os.path.basename(path), path=path, size=info["size"], sha256=info["sha256"],
                       revision=info["revision"], keys=info["keys"], member=member, saved=saved, verified=True)


def _sweep(node: Node) -> List[str]:
    """Remove the dot-temp snapshots a killed save left in the default place (under the save lock:
    no other save runs), each recorded in the history."""
    path = snapshot_dir(node)
    if node.host.lstat(path) is None:
        return []
    swept = []
    for name in node.host.listdir(path)[:MAX_LISTED]:
        if fileops.is_temp_name(name) and name.startswith("." + PREFIX):
            node.host.unlink(path + "/" + name)
            record(node, "etcd-snapshot-killed", "", {"file": path + "/" + name,
                                                      "reason": "a partial snapshot a killed save left was removed"})
            swept.append(name)
    return swept


def prune(node: Node, keep: int) -> List[str]:
    """Remove the oldest snapshots of the default place (cpctl's own names only) beyond ``keep``."""
    directory = snapshot_dir(node)
    names = sorted((n for n in node.host.listdir(directory) if NAME_RE.match(n)), key=_order)
    gone = names[:-keep] if len(names) > keep else []
    for name in gone:
        node.host.unlink(directory + "/" + name)
        node.host.unlink(directory + "/" + name + RECORD)
        record(node, "etcd-snapshot-prune", "", {"file": directory + "/" + name,
                                                 "reason": "beyond --keep %d" % keep})
    return gone


def _order(name: str) -> Tuple[str, int]:
    match = NAME_RE.match(name)
    assert match is not None
    return match.group(1), int(match.group(2) or 0)


def list_snapshots(node: Node) -> ListReport:
    """The snapshots of the default place, oldest first, with what their save checked."""
    directory = snapshot_dir(node)
    rows: List[SnapshotRow] = []
    if node.state.ensure(create=False) and node.host.lstat(directory) is not None:
        entries = node.host.listdir(directory)[:MAX_LISTED]
        for name in sorted((n for n in entries if NAME_RE.match(n)), key=_order):
            info = node.host.lstat(directory + "/" + name)
            if info is None or info["kind"] != "file":
                continue
            rows.append(_listed(node, directory + "/" + name, name, info["size"]))
    good = [r for r in rows if r["verified"]]
    last = good[-1]["saved"] if good else None
    return ListReport(node=node.node_name, where=where(node), directory=directory, snapshots=rows, last_good=last,
                      message="%d snapshot(s) in %s on %s%s" % (
                          len(rows), directory, where(node), ", the last good one saved %s" % last if last else ""))


def _listed(node: Node, path: str, name: str, size: int) -> SnapshotRow:
    """A snapshot with its record when the record is sound and names this very file (size too)."""
    row = SnapshotRow(name=name, path=path, size=size, sha256=None, revision=None, keys=None, member=None,
                      saved=None, verified=False)
    try:
        doc = json.loads(node.host.read_file(path + RECORD, RECORD_LIMIT).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return row
    if not isinstance(doc, dict) or doc.get("name") != name or doc.get("size") != size:
        return row
    digest, saved = doc.get("sha256"), doc.get("saved")
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) and isinstance(saved, str)
            and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", saved)):
        return row
    revision, keys = doc.get("revision"), doc.get("keys")
    if not (isinstance(revision, int) and isinstance(keys, int) and not isinstance(revision, bool)
            and not isinstance(keys, bool) and revision >= 0 and keys >= 0):
        return row
    member = doc.get("member")
    return SnapshotRow(name=name, path=path, size=size, sha256=digest, revision=revision, keys=keys, saved=saved,
                       verified=True,
                       member=member if isinstance(member, str) and re.fullmatch(r"[0-9a-f]{1,16}", member) else None)


def snapshot_metrics(node: str, now: float, last_good: Optional[float], failed: bool) -> str:
    """The snapshot metrics for node_exporter's textfile collector: when the last good snapshot was
    saved (absent when none is: the shipped alert's ``absent()`` rule fires then), whether the last
    run succeeded, and when it ran. The alert computes the age: ``time() - ..._timestamp_seconds``."""
    from cpctl.ops.metrics import family
    labels = {"node": node}
    text = family("cpctl_etcd_snapshot_last_run_success", "1 when the last cpctl etcd snapshot save succeeded, "
                  "0 when it failed.", "gauge", [(labels, 0.0 if failed else 1.0)])
    text += family("cpctl_etcd_snapshot_last_run_timestamp_seconds", "When the last cpctl etcd snapshot save ran.",
                   "gauge", [(labels, float(int(now)))])
    if last_good is not None:
        text += family("cpctl_etcd_snapshot_last_success_timestamp_seconds", "When the newest checked etcd snapshot "
                       "in cpctl's snapshot dir was saved (its age is time() minus this).", "gauge",
                       [(labels, float(last_good))])
    return text


def write_metrics(node: Node, textfile: str, failed: bool) -> None:
    """Write ``snapshot_metrics`` of ``node`` (its last good snapshot from ``list``) to ``textfile``."""
    from cpctl.ops.metrics import write_textfile
    from cpctl.timeutil import parse_iso
    last = list_snapshots(node)["last_good"]
    write_textfile(node.host, textfile, snapshot_metrics(node.node_name, time.time(),
                                                         parse_iso(last) if last else None, failed))

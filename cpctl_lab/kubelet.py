"""Simulated kubelet (one per lab node): static pod file source, pod workers, a fake container runtime.

Faithful to the points cpctl depends on (the kubelet's pkg/kubelet/config/file.go, file_linux.go,
common.go and pkg/kubelet/pod_workers.go in kubernetes/kubernetes):

* every non-dot regular file in the manifests dir is a candidate (no extension filter, no
  recursion, symlinks followed by ``os.stat``); inotify events act per file (add/modify re-read the
  file, remove/rename drop the pod key that file defined) and a full re-list every
  ``file_check_frequency`` seconds replaces the set, last file in sorted order winning on duplicates;
* static pod name ``<name>-<node>``, namespace defaulting to ``default``, UID == config.hash ==
  hash(decoded, defaulted pod, node, path) (:mod:`cpctl_lab.decoded`): the same pod at the same path
  gives the same hash, whatever the comments, written-out API defaults or unknown fields;
  ``metadata.uid`` pins the UID;
* a content change is a delete plus an add; the new pod starts only after the old one with the same
  full name has stopped - unless ``metadata.uid`` is pinned: then the pod (and its mirror) stays and
  each container whose decoded spec changed restarts in place;
* mirror pods are written through the API only: while no apiserver/etcd runs they can be neither
  created nor deleted, and the kubelet reconciles when the API is back (in local mode: while its
  own node's apiserver serves) - with realistic timing only at the pod worker's next try (10 s,
  scaled), the new mirror pod first without status (Pending, no Ready condition) until the status
  manager's next sync (10 s, scaled): meanwhile the API shows the old, frozen mirror pod;
  orphaned mirrors go once the pod has finished terminating (with
  realistic timing: at the next housekeeping pass, every 2 s);
* hostPath volumes: ``*OrCreate`` paths are created (inside the lab dir only), a missing
  ``File``/``Directory`` keeps the pod in ContainerCreating with a FailedMount event;
* a control-plane container whose command line the real binary rejects (see
  :mod:`cpctl_lab.componentflags`) exits and is restarted with CrashLoopBackOff: immediately, then
  after 10 s, 20 s, 40 s ... (times ``time_scale``), each attempt a new container in the same
  sandbox with ``metadata.attempt`` = restartCount;
* Ready follows the probes (:mod:`cpctl_lab.timing`) and, for containers with a readiness probe,
  what their health endpoint answers now.

The runtime objects (sandboxes, containers, workers) live in :mod:`cpctl_lab.runtime`.
"""

from __future__ import annotations

import copy
import ctypes
import ctypes.util
import hashlib
import json
import os
import random
import select
import stat as stat_module
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from . import nodefiles
from .componentflags import HostFile, check_command
from .decoded import decoded_pod, known_fields
from .profiles import go_duration
from .rbac import UserInfo
from .runtime import (
    EXITED,
    ROLES,
    RUNNING,
    SANDBOX_NOTREADY,
    SANDBOX_READY,
    Container,
    Sandbox,
    Worker,
    new_id,
    rfc3339_nano,
)
from .store import ApiError, Obj, now_micro, now_rfc3339
from .timing import Timing

__all__ = ["Container", "Inotify", "Kubelet", "ManifestError", "Sandbox", "Worker", "parse_manifest",
           "rfc3339_nano", "static_pod_hash"]

MAX_MANIFEST = 10 << 20
# go-yaml refuses a document that expands aliases past its decode budget (400,000 nodes for
# a small document: yaml.v2 decode.go allowedAliasRatio); the lab uses that count as a plain cap.
MAX_DECODED_NODES = 400_000
MIRROR = "kubernetes.io/config.mirror"
HASH = "kubernetes.io/config.hash"
SEEN = "kubernetes.io/config.seen"
SOURCE = "kubernetes.io/config.source"


def static_pod_hash(pod: Obj, node: str, path: str) -> str:
    """Stand-in for kubelet's FNV-128a over (pod, host:<node>, file:<path>): 32 hex chars."""
    h = hashlib.sha256(json.dumps(pod, sort_keys=True, separators=(",", ":"), default=str).encode())
    h.update(f"host:{node}".encode())
    h.update(f"file:{path}".encode())
    return h.hexdigest()[:32]


class ManifestError(Exception):
    """The file is not a usable static pod (kubelet logs and skips it)."""


def _first_document(raw: bytes) -> Any:
    """The first YAML document of ``raw``, decoded, after checking its alias expansion."""
    # libyaml when PyYAML has it: fast, and it caps nesting at 1000 levels itself (PyYAML's pure
    # Python scanner is quadratic in the nesting depth: a minute for 12,000 brackets).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(raw)
    try:
        if not loader.check_node():
            return None
        root = loader.get_node()
        if root is None:
            return None
        _check_aliasing(root)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _check_aliasing(root: yaml.Node) -> None:
    """Refuse a node graph that contains itself or expands past MAX_DECODED_NODES (go-yaml's errors)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ManifestError("yaml: anchor value contains itself")
        active.add(key)
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_DECODED_NODES:
                raise ManifestError("yaml: document contains excessive aliasing")
        active.discard(key)
        sizes[key] = total
        return total

    size(root)


def parse_manifest(path: str, node: str, minor: int) -> Obj:
    """Decode one file the way kubelet's file source of Kubernetes 1.``minor`` does (the fields that
    release does not know dropped), and apply its static-pod defaults."""
    st = os.stat(path)
    if st.st_size > MAX_MANIFEST:
        raise ManifestError("file exceeds 10MB")
    with open(path, "rb") as fh:
        raw = fh.read(MAX_MANIFEST)
    try:
        pod = _first_document(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(f"yaml: {problem}") from None
    except RecursionError:
        raise ManifestError("yaml: exceeded max depth") from None
    except ValueError as exc:           # e.g. an integer past Python's digit limit
        raise ManifestError(f"yaml: {str(exc).splitlines()[0][:200]}") from None
    if not isinstance(pod, dict):
        raise ManifestError("invalid pod: not an object")
    if pod.get("kind") != "Pod" or pod.get("apiVersion") != "v1":
        raise ManifestError(f"invalid pod: kind {pod.get('kind')!r} apiVersion {pod.get('apiVersion')!r}")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ManifestError("invalid pod: name is needed for the pod")
    containers = (pod.get("spec") or {}).get("containers")
    if (
        not isinstance(containers, list)
        or not containers
        or not all(isinstance(c, dict) and c.get("name") and c.get("image") for c in containers)
    ):
        raise ManifestError("invalid pod: spec.containers: Required value (name and image)")
    try:
        uid = meta.get("uid") or static_pod_hash(decoded_pod(pod, minor), node, path)
    except (TypeError, ValueError) as exc:     # keys of mixed types, values JSON cannot hold
        raise ManifestError(f"invalid pod: cannot be converted to JSON: {exc}") from None
    out = known_fields(pod, "Pod", minor)
    meta = out["metadata"]
    meta["name"] = f"{meta['name']}-{node.lower()}"
    meta["namespace"] = meta.get("namespace") or "default"
    meta["uid"] = uid
    anns = meta.setdefault("annotations", {}) or {}
    meta["annotations"] = anns
    anns[HASH] = uid
    anns[SOURCE] = "file"
    spec = out["spec"]
    spec["nodeName"] = node
    tols = spec.setdefault("tolerations", []) or []
    spec["tolerations"] = tols
    tols.append({"operator": "Exists", "effect": "NoExecute"})
    out["status"] = {"phase": "Pending"}
    return out


# --------------------------------------------------------------------------- inotify


class Inotify:
    """Minimal inotify via ctypes (standard library only); ``None`` from ``open`` means unavailable."""

    CREATE, MODIFY, ATTRIB, CLOSE_WRITE = 0x100, 0x2, 0x4, 0x8
    DELETE, MOVED_FROM, MOVED_TO = 0x200, 0x40, 0x80
    DELETE_SELF, MOVE_SELF, IGNORED = 0x400, 0x800, 0x8000
    MASK = CREATE | MODIFY | ATTRIB | CLOSE_WRITE | DELETE | MOVED_FROM | MOVED_TO | DELETE_SELF | MOVE_SELF

    def __init__(self, fd: int, libc: Any) -> None:
        self.fd = fd
        self.libc = libc

    @classmethod
    def open(cls) -> Optional["Inotify"]:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        return cls(fd, libc) if fd >= 0 else None

    def watch(self, path: str) -> int:
        return int(self.libc.inotify_add_watch(self.fd, os.fsencode(path), self.MASK))

    def read(self) -> list[tuple[int, int, str]]:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        out, off = [], 0
        while off + 16 <= len(data):
            wd, mask, _cookie, length = struct.unpack_from("iIII", data, off)
            name = data[off + 16 : off + 16 + length].rstrip(b"\0").decode(errors="replace")
            out.append((wd, mask, name))
            off += 16 + length
        return out

    def close(self) -> None:
        os.close(self.fd)


# --------------------------------------------------------------------------- kubelet


class Kubelet:
    """Per-node kubelet; all methods except the watcher thread run under the lab lock."""

    def __init__(self, lab: Any, node: str, manifests_dir: Optional[Path], hostname: str = "") -> None:
        self.lab = lab
        self.node = node
        #: The kubelet's release (1.MINOR): the pod fields its decoder knows.
        self.minor: int = lab.release.minor
        #: The simulated kernel host name (Lease holder identities are ``<hostname>_<uuid>``).
        self.hostname = hostname or node
        self.dir = manifests_dir
        #: The directory that plays this node's ``/``: hostPaths are node paths found under it.
        self.root = nodefiles.root_dir(Path(lab.dir), node)
        #: Static pods that finished terminating -> when housekeeping may delete their mirror
        #: (time.monotonic(); with realistic timing the next 2 s housekeeping pass after that).
        self.orphan_gate: dict[tuple[str, str], float] = {}
        self._parsed: dict[str, tuple[tuple[int, int, int, int], Obj]] = {}
        self._epoch = time.monotonic()
        #: UIDs of static pods an inotify Remove/Rename dropped since the last worker sync.
        self.removed: set[str] = set()
        self.static: dict[tuple[str, str], tuple[Obj, str]] = {}
        self.file_keys: dict[str, tuple[str, str]] = {}
        self.seen: dict[str, str] = {}
        self.workers: dict[str, Worker] = {}
        self.sandboxes: dict[str, Sandbox] = {}
        self.containers: dict[str, Container] = {}
        self._stop = threading.Event()
        self._ip_next = 2
        self.index = 0
        #: None before the API first answered, then whether it answered at the last reconcile.
        self.api_was_ok: Optional[bool] = None
        #: Until when (time.monotonic()) mirror pods stay frozen after the API came back.
        self.mirror_hold = 0.0
        #: The next mirror sync is the first after an API outage.
        self.api_back = False
        #: Mirror pods created after an outage -> when their first status is written.
        self.status_hold: dict[tuple[str, str], float] = {}

    def log(self, msg: str) -> None:
        self.lab.log(f"kubelet[{self.node}]: {msg}")

    # ----------------------------------------------------------- file source
    def _decode(self, path: str) -> Obj:
        """parse_manifest, re-decoding only a file whose stat changed (frequent re-lists stay cheap)."""
        st = os.stat(path)
        stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        hit = self._parsed.get(path)
        if hit is not None and hit[0] == stamp:
            pod = copy.deepcopy(hit[1])
        else:
            pod = parse_manifest(path, self.node, self.minor)
            self._parsed[path] = (stamp, copy.deepcopy(pod))
        uid = pod["metadata"]["uid"]
        pod["metadata"]["annotations"][SEEN] = self.seen.setdefault(uid, now_micro())
        return pod

    def relist(self) -> None:
        """Full re-list: replace the store with the current folder contents (last sorted file wins)."""
        if self.dir is None:
            return
        new: dict[tuple[str, str], tuple[Obj, str]] = {}
        keys: dict[str, tuple[str, str]] = {}
        if not self.dir.is_dir():
            self.log(f"path does not exist, ignoring: {self.dir}")
        else:
            for p in sorted(self.dir.glob("[!.]*")):
                path = str(p)
                try:
                    if p.is_dir():
                        self.log(f"Provided manifest path is a directory, not recursing: {path}")
                        continue
                    if not p.is_file():
                        self.log(f"Manifest path is not a directory or file: {path}")
                        continue
                    pod = self._decode(path)
                except (OSError, ManifestError) as exc:
                    self.log(f"Could not process manifest file {path}: {exc}")
                    continue
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                if key in new:
                    self.report_duplicate(key, new[key][1], path)
                new[key] = (pod, path)
                keys[path] = key
        if new != self.static:
            self.static, self.file_keys = new, keys
            self.lab.kick()
        self.file_keys = keys
        self._parsed = {path: hit for path, hit in self._parsed.items() if path in keys}

    def report_duplicate(self, key: tuple[str, str], old_path: str, new_path: str) -> None:
        msg = (
            f"duplicate static pod {key[0]}/{key[1]}: defined by {old_path} and {new_path}; "
            f"using {new_path} (last file wins)"
        )
        self.log(msg)
        self.lab.record_event(key[0], key[1], "Warning", "DuplicateStaticPod", msg, self.node)

    def on_file(self, name: str, kind: str) -> None:
        """One inotify event for basename ``name``: kind is add, modify or delete."""
        if self.dir is None or name.startswith("."):
            return
        path = str(self.dir / name)
        if kind == "delete":
            key = self.file_keys.pop(path, None)
            if key is not None and key in self.static:
                # A REMOVE reaches the pod workers even if the same pod is added back at once: the
                # pod is killed and then started again (UID reuse, kubernetes#104847).
                self.removed.add(self.static.pop(key)[0]["metadata"]["uid"])
                self.lab.kick()
            return
        try:
            if os.path.isdir(path):
                return
            if not os.path.isfile(path):
                return
            pod = self._decode(path)
        except (OSError, ManifestError) as exc:
            self.log(f"can't process config file {path}: {exc}")
            return
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        cur = self.static.get(key)
        if cur is not None and cur[1] != path:
            self.report_duplicate(key, cur[1], path)
        self.static[key] = (pod, path)
        self.file_keys[path] = key
        if cur != (pod, path):
            self.lab.kick()

    def watch_forever(self) -> None:
        """Watcher thread: inotify when available, else a 50 ms stat poll; plus the periodic re-list.
        Without inotify events (the ``inotify`` setting off) only the re-lists."""
        assert self.dir is not None
        events = self.lab.settings.inotify
        ino = Inotify.open() if events else None
        period = self.lab.timing.relist
        next_relist = time.monotonic() + (period if events else 0.0)
        snapshot: dict[str, tuple[int, int, int]] = {}
        wd = -1
        while not self._stop.is_set():
            if ino is not None and wd < 0 and self.dir.is_dir():
                wd = ino.watch(str(self.dir))
                with self.lab.lock:
                    self.relist()
            timeout = max(0.0, next_relist - time.monotonic())
            if ino is not None and wd >= 0:
                ready, _, _ = select.select([ino.fd], [], [], min(timeout, 1.0))
                if ready:
                    events = ino.read()
                    with self.lab.lock:
                        for _wd, mask, name in events:
                            if mask & (Inotify.DELETE_SELF | Inotify.MOVE_SELF | Inotify.IGNORED):
                                wd = -1
                                continue
                            if mask & (Inotify.DELETE | Inotify.MOVED_FROM):
                                self.on_file(name, "delete")
                            elif mask & (Inotify.CREATE | Inotify.MOVED_TO):
                                self.on_file(name, "add")
                            elif mask & (Inotify.MODIFY | Inotify.CLOSE_WRITE | Inotify.ATTRIB):
                                self.on_file(name, "modify")
            else:
                self._stop.wait(min(timeout, 0.05))
                if events:
                    snapshot = self._poll(snapshot)
            if time.monotonic() >= next_relist:
                next_relist = time.monotonic() + period
                with self.lab.lock:
                    self.relist()
        if ino is not None:
            ino.close()

    def _poll(self, old: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
        new: dict[str, tuple[int, int, int]] = {}
        assert self.dir is not None
        try:
            for e in os.scandir(self.dir):
                try:
                    st = e.stat()
                    new[e.name] = (st.st_mtime_ns, st.st_size, st.st_ino)
                except OSError:
                    continue
        except OSError:
            pass
        if new != old:
            with self.lab.lock:
                for name in old.keys() - new.keys():
                    self.on_file(name, "delete")
                for name in new.keys() - old.keys():
                    self.on_file(name, "add")
                for name in new.keys() & old.keys():
                    if new[name] != old[name]:
                        self.on_file(name, "modify")
        return new

    def stop(self) -> None:
        self._stop.set()

    # ----------------------------------------------------------- pod workers
    def desired(self) -> dict[str, tuple[str, Obj, str]]:
        out: dict[str, tuple[str, Obj, str]] = {}
        for pod, path in self.static.values():
            out[pod["metadata"]["uid"]] = ("file", pod, path)
        for pod in self.lab.store.list(
            "pods",
            None,
            lambda o: (
                (o.get("spec") or {}).get("nodeName") == self.node
                and MIRROR not in (o["metadata"].get("annotations") or {})
            ),
        ):
            out[pod["metadata"]["uid"]] = ("api", pod, "")
        return out

    def sync_workers(self) -> None:
        want = self.desired()
        removed, self.removed = self.removed, set()
        for uid in removed:
            gone = self.workers.get(uid)
            if gone is not None and gone.state not in ("stopping", "stopped"):
                self._stop_worker(gone)
        for uid, (src, pod, path) in want.items():
            w = self.workers.get(uid)
            if w is None:
                w = Worker(uid=uid, pod=pod, source=src, path=path)
                if pod["metadata"].get("annotations", {}).get(SEEN):
                    w.seen = time.time()
                self.workers[uid] = w
            elif src == "api":
                w.pod = pod
            elif w.state == "running" and w.pod.get("spec") != pod.get("spec") and \
                    _containers(w.pod, self.minor) != _containers(pod, self.minor):
                self._update_in_place(w, pod)
            if (
                src == "api"
                and pod["metadata"].get("deletionTimestamp")
                and w.state not in ("stopping", "stopped")
            ):
                self._stop_worker(w)
        for uid, w in list(self.workers.items()):
            if uid not in want and w.state not in ("stopping", "stopped"):
                self._stop_worker(w)
        for w in list(self.workers.values()):
            if w.state == "waiting":
                blocked = any(
                    o is not w
                    and o.full_name == w.full_name
                    and o.state != "stopped"
                    and o.state != "waiting"
                    for o in self.workers.values()
                )
                if not blocked:
                    w.state = "starting"
                    self.lab.call_later(self.lab.timing.start_delay(), lambda w=w: self._start_worker(w))

    def _update_in_place(self, w: Worker, pod: Obj) -> None:
        """A static pod whose manifest pins ``metadata.uid`` changed: same UID, so no new pod and
        no new mirror pod; each container whose spec changed is stopped and started again with the
        new spec in the same sandbox (the kubelet's container hash differs: SyncPod restarts it)."""
        old, new = _containers(w.pod, self.minor), _containers(pod, self.minor)
        w.pod = pod
        for spec in (pod.get("spec") or {}).get("containers") or []:
            cur = w.current(str(spec.get("name")))
            if old.get(spec.get("name")) == new.get(spec.get("name")) or cur is None:
                continue
            self.log(f"container {spec.get('name')} of {w.full_name[1]} changed (pinned uid {w.uid}): restarting it")
            if cur.state == RUNNING:
                cur.state, cur.finished, cur.exit_code = EXITED, time.time_ns(), 0
                if cur.fault is None:
                    self.lab.component_stopped(self, cur)
            w.previous[cur.name] = cur
            w.restarts[cur.name] = w.restarts.get(cur.name, 0) + 1
            delay = self.lab.timing.stop_delay(pod.get("spec") or {}, cur.spec)
            self.lab.call_later(delay, lambda w=w, spec=spec: self._start_changed(w, spec))
        self.lab.kick()

    def _start_changed(self, w: Worker, spec: Obj) -> None:
        if w.state == "running" and self.workers.get(w.uid) is w:
            self._start_container(w, spec)
            self.lab.kick()

    def _start_worker(self, w: Worker) -> None:
        """Mount the volumes, create the sandbox and start every container (or retry the mounts)."""
        if w.state != "starting" or self.workers.get(w.uid) is not w:
            return
        problem = self._mount_problem(w)
        if problem:
            self._mount_failed(w, problem)
            return
        w.mount_error = ""
        spec = w.pod.get("spec") or {}
        w.sandbox = self._new_sandbox(w, spec)
        w.containers = []
        for c in spec.get("containers") or []:
            self._start_container(w, c)
        w.state = "running"
        w.started = time.time()
        meta = w.pod["metadata"]
        self.log(f"started pod {meta['namespace']}/{meta['name']} uid={w.uid}")
        self.lab.kick()

    def _new_sandbox(self, w: Worker, spec: Obj) -> Sandbox:
        host_net = bool(spec.get("hostNetwork"))
        if not w.ip:
            w.ip = self.lab.node_ip if host_net else self._pod_ip()
        meta = w.pod["metadata"]
        labels = dict(meta.get("labels") or {})
        labels.update(
            {
                "io.kubernetes.pod.name": meta["name"],
                "io.kubernetes.pod.namespace": meta["namespace"],
                "io.kubernetes.pod.uid": w.uid,
            }
        )
        anns = {k: v for k, v in (meta.get("annotations") or {}).items() if k != MIRROR}
        if w.source == "api":
            anns.setdefault(SEEN, now_micro(w.seen))
            anns.setdefault(SOURCE, "api")
        sb = Sandbox(
            id=new_id(),
            name=meta["name"],
            namespace=meta["namespace"],
            uid=w.uid,
            attempt=sum(1 for s in self.sandboxes.values() if s.uid == w.uid),
            created=time.time_ns(),
            labels=labels,
            annotations=anns,
            ip=w.ip,
            host_network=host_net,
            pause_image=self.lab.pause_image,
        )
        self.sandboxes[sb.id] = sb
        return sb

    def _pod_ip(self) -> str:
        n = self._ip_next
        self._ip_next = self._ip_next % 250 + 2
        if ":" in self.lab.node_ip:
            return f"fd00:10:244:{self.index:x}::{n:x}"
        return f"10.244.{self.index}.{n}"

    # ----------------------------------------------------------- volumes
    def _mount_problem(self, w: Worker) -> str:
        """The kubelet's error for the first hostPath volume that cannot be set up ('' if none).

        ``DirectoryOrCreate``/``FileOrCreate`` paths are created when missing -- only inside the lab
        dir, the lab never writes elsewhere; ``Directory``/``File``/``Socket`` must already exist with
        that type (pkg/volume/hostpath: "hostPath type check failed: PATH is not a directory").
        """
        for vol in (w.pod.get("spec") or {}).get("volumes") or []:
            hp = vol.get("hostPath")
            if not hp:
                continue
            shown, typ = str(hp.get("path") or ""), hp.get("type") or ""
            path = self.on_node(shown)            # the kubelet's words name the node path
            if typ in ("DirectoryOrCreate", "FileOrCreate"):
                self._create_in_lab(path, directory=typ == "DirectoryOrCreate")
                continue
            wanted = {"Directory": (os.path.isdir, "a directory"), "File": (os.path.isfile, "a file"),
                      "Socket": (_is_socket, "a socket file")}.get(typ)
            if wanted is not None and not wanted[0](path):
                return (f'MountVolume.SetUp failed for volume "{vol.get("name")}" : hostPath type check '
                        f"failed: {shown} is not {wanted[1]}")
        return ""

    def _create_in_lab(self, path: str, directory: bool) -> None:
        if os.path.exists(path) or not self._in_lab(path):
            return
        try:
            if directory:
                os.makedirs(path, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "a"):
                    pass
                os.chmod(path, 0o644)
        except OSError as exc:
            self.log(f"cannot create hostPath {path}: {exc}")

    def on_node(self, path: str) -> str:
        """Where the node path ``path`` (a hostPath) is in the lab: under this node's root dir. A
        path already inside the lab dir (written by a tool that knows the lab's layout) stays."""
        if not path.startswith("/") or self._in_lab(path):
            return path
        return nodefiles.on_node(self.root, path)

    def _in_lab(self, path: str) -> bool:
        lab_dir = str(self.lab.dir)
        real = os.path.realpath(path)
        return real == lab_dir or real.startswith(lab_dir + os.sep)

    def _mount_failed(self, w: Worker, problem: str) -> None:
        if problem != w.mount_error:
            w.mount_error = problem
            ns, name = w.full_name
            self.log(f"pod {ns}/{name}: {problem}")
            self.lab.record_event(ns, name, "Warning", "FailedMount", problem, "kubelet", uid=w.uid,
                                  instance=self.node)
        self.lab.call_later(self.lab.timing.mount_retry(), lambda: self._start_worker(w))
        self.lab.kick()

    def lookup(self, w: Worker, spec: Obj) -> Callable[[str], HostFile]:
        """What a path inside container ``spec`` of ``w`` is on the node, through its volume mounts."""

        def find(path: str) -> HostFile:
            host = mounted_host_path(w.pod, spec, path, self.on_node)
            if host is None:
                return HostFile("missing")
            try:
                st = os.stat(host)
            except OSError:
                return self._would_be_created(w, host, self.on_node)
            return HostFile("dir", 0, host) if stat_is_dir(st.st_mode) else HostFile("file", st.st_size, host)

        return find

    @staticmethod
    def _would_be_created(w: Worker, host: str, on_node: Callable[[str], str]) -> HostFile:
        """A missing *OrCreate hostPath outside the lab: the kubelet would have created it empty."""
        for vol in (w.pod.get("spec") or {}).get("volumes") or []:
            hp = vol.get("hostPath") or {}
            if on_node(str(hp.get("path") or "")).rstrip("/") == host.rstrip("/"):
                if hp.get("type") == "FileOrCreate":
                    return HostFile("file", 0)
                if hp.get("type") == "DirectoryOrCreate":
                    return HostFile("dir")
        return HostFile("missing")

    # ----------------------------------------------------------- containers
    def _start_container(self, w: Worker, spec: Obj) -> Container:
        """Start the next attempt of container ``spec``: a healthy component, or one about to crash."""
        assert w.sandbox is not None
        now_ns = time.time_ns()
        name = spec["name"]
        cmd = list(spec.get("command") or [])
        base = os.path.basename(cmd[0]) if cmd else ""
        grace = (w.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        c = Container(
            id=new_id(),
            name=name,
            image=spec["image"],
            sandbox=w.sandbox,
            command=cmd,
            spec=spec,
            created=now_ns,
            started=now_ns,
            pid=random.randint(1000, 4000000),
            state=RUNNING,
            role=base if base in ROLES else "",
            attempt=w.sandbox.attempt + w.restarts.get(name, 0),
            grace=30 if grace is None else int(grace),
        )
        c.identity = f"{self.hostname}_{uuid.uuid4()}"
        if c.role and self.lab.settings.component_checks and not (c.role == "etcd" and self.lab.etcd_install):
            # (a real etcd checks its own command line: it exits with its own error)
            argv = cmd[1:] + [str(a) for a in spec.get("args") or []]
            c.fault = check_command(c.role, argv, c.image, self.lookup(w, spec))
        self.containers[c.id] = c
        w.containers = [c if old.name == name else old for old in w.containers]
        if w.current(name) is not c:
            w.containers.append(c)
        if c.fault is not None:
            c.logs = list(c.fault.lines)
            self.log(f"container {name} of {w.full_name[1]} cannot start (exit {c.fault.exit_code}): "
                     f"{c.fault.summary}")
            self.lab.call_later(self.lab.timing.crash_after(), lambda: self._crash(w, c))
            return c
        if c.role:
            self.lab.configure_component(self, w, c)
            self.lab.component_started(self, w, c)
        timing = self.lab.timing
        self.lab.call_later(timing.boot_delay(c.role), lambda: self._booted(w, c))
        self.lab.call_later(timing.startup_delay(spec, c.role), lambda: self._started(w, c))
        return c

    def _is_current(self, w: Worker, c: Container) -> bool:
        return c.state == RUNNING and w.current(c.name) is c and self.workers.get(w.uid) is w

    def _booted(self, w: Worker, c: Container) -> None:
        if self._is_current(w, c) and c.real is None:      # a real etcd has booted when it answers
            c.booted = True
            self.lab.kick()

    def _started(self, w: Worker, c: Container) -> None:
        if self._is_current(w, c) and not self.lab.real_probe_ok(c, "startupProbe"):
            self.lab.call_later(0.5, lambda: self._started(w, c))      # the real startup probe, again
            return
        if self._is_current(w, c):
            c.startup_done = True
            self.lab.call_later(self.lab.timing.readiness_delay(c.spec), lambda: self._readied(w, c))
            self.lab.kick()

    def _readied(self, w: Worker, c: Container) -> None:
        if self._is_current(w, c):
            c.ready_gate = True
            self.lab.kick()

    def crash(self, w: Worker, c: Container) -> None:
        """The attempt exited on its own (``c.fault`` says why): CrashLoopBackOff, then a restart."""
        self._crash(w, c)

    def _crash(self, w: Worker, c: Container) -> None:
        """The attempt exits on its own; schedule the restart after CrashLoopBackOff."""
        if c.state != RUNNING or c.fault is None:
            return
        c.state, c.finished, c.exit_code = EXITED, time.time_ns(), c.fault.exit_code
        w.previous[c.name] = c
        if w.state != "running" or self.workers.get(w.uid) is not w:
            self.lab.kick()
            return
        nominal = Timing.backoff_nominal(c.attempt - c.sandbox.attempt + 1)
        delay = self.lab.timing.scaled(nominal)
        w.backoff[c.name] = (time.time() + delay, nominal)
        ns, pod = w.full_name
        if nominal:
            self.lab.record_event(
                ns, pod, "Warning", "BackOff",
                f"Back-off restarting failed container {c.name} in pod {pod}_{ns}({w.uid})",
                "kubelet", uid=w.uid, instance=self.node,
            )
        self.lab.call_later(delay, lambda: self._restart(w, c))
        self.lab.kick()

    def _restart(self, w: Worker, prev: Container) -> None:
        if w.state != "running" or self.workers.get(w.uid) is not w or w.current(prev.name) is not prev:
            return
        w.backoff.pop(prev.name, None)
        w.restarts[prev.name] = w.restarts.get(prev.name, 0) + 1
        self._start_container(w, prev.spec)
        self.lab.kick()

    def _stop_worker(self, w: Worker) -> None:
        meta = w.pod["metadata"]
        if w.state in ("waiting", "starting"):
            w.state = "stopped"
            self.workers.pop(w.uid, None)
            self.lab.kick()
            return
        w.state = "stopping"
        self.log(f"stopping pod {meta['namespace']}/{meta['name']} uid={w.uid}")
        pod_spec = w.pod.get("spec") or {}
        delay = max(
            (self.lab.timing.stop_delay(pod_spec, c.spec) for c in w.containers if c.state == RUNNING),
            default=0.0,
        )
        self.lab.call_later(delay, lambda: self._stopped(w))

    def _stopped(self, w: Worker) -> None:
        now_ns = time.time_ns()
        for c in w.containers:
            if c.state == RUNNING:
                killed = self.lab.timing.sigkilled(c.spec)
                c.state, c.finished, c.exit_code = EXITED, now_ns, 137 if killed else 0
                if c.fault is None:
                    self.lab.component_stopped(self, c)
        if w.sandbox is not None:
            w.sandbox.state = SANDBOX_NOTREADY
        w.state = "stopped"
        if w.source == "file":
            self._terminated(w.full_name)
        if self.workers.get(w.uid) is w:
            del self.workers[w.uid]
        self.log(f"pod {w.full_name[0]}/{w.full_name[1]} uid={w.uid} stopped")
        self.lab.call_later(self.lab.gc_after, self._gc)
        self.lab.kick()

    def _gc(self) -> None:
        """Forget exited containers and dead sandboxes after a while (they stay in ``ps -a`` meanwhile).

        Like the kubelet's container GC (MaxPerPodContainer=1), the newest exited attempt of each
        container of a live pod is kept, so ``crictl logs --previous`` keeps working.
        """
        limit = time.time_ns() - int(self.lab.gc_after * 1e9) + 1
        keep = {id(prev) for w in self.workers.values() for prev in w.previous.values()}
        for cid, c in list(self.containers.items()):
            if c.state == EXITED and c.finished < limit and id(c) not in keep:
                del self.containers[cid]
        live = {c.sandbox.id for c in self.containers.values()}
        for sid, s in list(self.sandboxes.items()):
            if s.state != SANDBOX_READY and sid not in live:
                del self.sandboxes[sid]

    # ----------------------------------------------------------- readiness
    def container_ready(self, w: Worker, c: Container) -> bool:
        """containerStatuses[].ready: started, readiness passed once, and its readiness probe passes now."""
        if not c.healthy or not c.ready_gate:
            return False
        probe = c.spec.get("readinessProbe")
        return probe is None or self.lab.probe_passes(self.node, c, probe)

    def worker_ready(self, w: Worker) -> bool:
        """The pod's Ready condition: every container of the spec is ready."""
        names = [c.get("name") for c in (w.pod.get("spec") or {}).get("containers") or []]
        return w.state == "running" and all(
            (c := w.current(str(n))) is not None and self.container_ready(w, c) for n in names
        )

    # ----------------------------------------------------------- status and mirrors
    def _cond(self, w: Worker, ctype: str, ok: bool, reason: str = "", message: str = "") -> Obj:
        status = "True" if ok else "False"
        key = f"{ctype}={status}"
        if key not in w.transitions:
            w.transitions[key] = now_rfc3339()
        out: Obj = {
            "type": ctype,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": w.transitions[key],
        }
        if reason:
            out["reason"], out["message"] = reason, message
        return out

    def pod_status(self, w: Worker, old: Obj) -> Obj:
        spec = w.pod.get("spec") or {}
        ip = self.lab.node_ip
        st: Obj = {
            "phase": "Running" if w.running else "Pending",
            "hostIP": ip,
            "hostIPs": [{"ip": ip}],
            "startTime": now_rfc3339(w.seen)
            if w.source == "file"
            else (old.get("startTime") or now_rfc3339(w.seen)),
            "qosClass": old.get("qosClass") or "BestEffort",
        }
        if w.ip:
            st["podIP"] = w.ip
            st["podIPs"] = [{"ip": w.ip}]
        statuses = [self._container_status(w, c) for c in spec.get("containers") or []]
        unready = [s["name"] for s in statuses if not s["ready"]]
        ready = w.state == "running" and not unready
        why = ("ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]") if unready else ("", "")
        st["conditions"] = [
            self._cond(w, "PodReadyToStartContainers", w.running),
            self._cond(w, "Initialized", True),
            self._cond(w, "Ready", ready, *why),
            self._cond(w, "ContainersReady", ready, *why),
            self._cond(w, "PodScheduled", True),
        ]
        st["containerStatuses"] = statuses
        return st

    def _container_status(self, w: Worker, spec: Obj) -> Obj:
        name = spec["name"]
        cur = w.current(name)
        prev = w.previous.get(name)
        entry: Obj = {
            "name": name,
            "image": spec["image"],
            "restartCount": w.restarts.get(name, 0),
            "ready": False,
            "started": False,
            "imageID": "",
            "containerID": "",
            "lastState": {},
        }
        if cur is None:
            reason = "ContainerCreating"
            entry["state"] = {"waiting": {"reason": reason}}
            return entry
        entry["imageID"] = cur.image_ref()
        entry["containerID"] = f"containerd://{cur.id}"
        if cur.state == RUNNING:
            entry["state"] = {"running": {"startedAt": now_rfc3339(cur.started / 1e9)}}
            entry["ready"] = self.container_ready(w, cur)
            entry["started"] = cur.startup_done or (cur.fault is not None and not cur.spec.get("startupProbe"))
        elif name in w.backoff and w.state == "running":
            until, nominal = w.backoff[name]
            entry["state"] = {"waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {go_duration(nominal)} restarting failed container={name} "
                           f"pod={w.full_name[1]}_{w.full_name[0]}({w.uid})",
            }}
        else:
            entry["state"] = {"terminated": _terminated(cur)}
        if prev is not None and prev is not cur:
            entry["lastState"] = {"terminated": _terminated(prev)}
        elif "waiting" in entry["state"]:
            entry["lastState"] = {"terminated": _terminated(cur)}
        return entry

    def api_lost(self) -> None:
        """This kubelet's API does not answer: its mirror pods stay frozen as they were (before the
        API first answered - the lab starting - there is nothing to freeze)."""
        if self.api_was_ok:
            self.api_was_ok = False

    def _api_frozen(self) -> bool:
        """True while the API is back but the kubelet has not retried its mirror pods yet (the
        stale window of real-node-facts "When the API server itself restarts"): nothing changes."""
        now = time.monotonic()
        if self.api_was_ok is False:
            lag = self.lab.timing.mirror_retry()
            self.mirror_hold = now + lag
            self.api_back = True
            if lag:
                self.log(f"API answers again; mirror pods stay as they were for {lag:.1f}s (pod worker back-off)")
                self.lab.call_later(lag, self.lab.kick)
        self.api_was_ok = True
        return now < self.mirror_hold

    def sync_api(self) -> None:
        """Mirror pods and status (only while this kubelet's apiserver serves)."""
        api = self.lab.api
        store = self.lab.store
        node = store.get("nodes", "", self.node)
        if node is None or self._api_frozen():
            return
        back, self.api_back = self.api_back, False
        active_static = {
            w.full_name: w
            for w in self.workers.values()
            if w.source == "file" and w.state in ("starting", "running", "stopping")
        }
        for key, (pod, _path) in self.static.items():
            w = self.workers.get(pod["metadata"]["uid"])
            if w is None or w.state not in ("starting", "running"):
                continue
            ns, name = key
            mirror = store.get("pods", ns, name)
            uid = pod["metadata"]["uid"]
            if mirror is not None and (
                mirror["metadata"].get("deletionTimestamp")
                or (mirror["metadata"].get("annotations") or {}).get(MIRROR) != uid
            ):
                try:
                    self.delete_mirror(ns, name, mirror["metadata"]["uid"])
                    self.log(f"Deleted mirror pod {ns}/{name} because it is outdated")
                except ApiError:
                    pass
                mirror = None
            if mirror is None:
                body = copy.deepcopy(pod)
                body["metadata"]["annotations"][MIRROR] = uid
                body["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.node,
                        "uid": node["metadata"]["uid"],
                        "controller": True,
                    }
                ]
                body["status"] = {}
                try:
                    mirror = api.create(self.lab.res("pods"), ns, body, self.identity)
                    self.log(f"Creating a mirror pod for static pod {ns}/{name}")
                except ApiError as exc:
                    self.log(f"failed creating mirror pod {ns}/{name}: {exc.message}")
                    continue
                lag = self.lab.timing.status_sync() if back else 0.0
                if lag:
                    # the new mirror pod shows no Ready condition until the status manager syncs
                    self.status_hold[key] = time.monotonic() + lag
                    self.lab.call_later(lag, self.lab.kick)
            if time.monotonic() < self.status_hold.get(key, 0.0):
                continue
            self.status_hold.pop(key, None)
            self._push_status(mirror, w)
        self._delete_orphaned_mirrors(active_static)
        self._sync_api_pods()

    @property
    def identity(self) -> UserInfo:
        """Who this kubelet is to the API server (kubelet.conf's client certificate): NodeRestriction
        holds it to what a node may write."""
        return UserInfo(f"system:node:{self.node}", ("system:nodes", "system:authenticated"))

    def delete_mirror(self, ns: str, name: str, uid: str) -> None:
        """Delete a mirror pod as the kubelet does (mirror_client.go DeleteMirrorPod): at once
        (``gracePeriodSeconds: 0``; a graceful delete would leave it Terminating with no kubelet to
        finish it) and only the one with that UID."""
        self.lab.api.delete(self.lab.res("pods"), ns, name, {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
                            self.identity)

    def _terminated(self, key: tuple[str, str]) -> None:
        """A static pod finished terminating: its mirror may go at the next housekeeping pass.

        Housekeeping runs every 2 s on a real kubelet; the lab computes the next pass instead of
        waking up for every one (an idle lab stays idle) and only wakes when that pass is due.
        """
        period = self.lab.timing.housekeeping
        now = time.monotonic()
        if period is None:
            self.orphan_gate[key] = now
            return
        passes = int((now - self._epoch) // period) + 1
        gate = self._epoch + passes * period
        self.orphan_gate[key] = gate
        self.lab.call_later(gate - now, self.lab.kick)

    def _delete_orphaned_mirrors(self, active_static: dict[tuple[str, str], Worker]) -> None:
        """Mirror pods whose static pod is gone and has finished terminating (pod_manager.go)."""
        for m in self.lab.store.list(
            "pods",
            None,
            lambda o: (
                (o.get("spec") or {}).get("nodeName") == self.node
                and MIRROR in (o["metadata"].get("annotations") or {})
            ),
        ):
            key = (m["metadata"]["namespace"], m["metadata"]["name"])
            if key in self.static or key in active_static:
                continue
            if time.monotonic() < self.orphan_gate.get(key, 0.0):
                continue
            try:
                self.delete_mirror(key[0], key[1], m["metadata"]["uid"])
                self.log(f"Deleted orphaned mirror pod {key[0]}/{key[1]}")
            except ApiError:
                pass
            self.orphan_gate.pop(key, None)

    def _sync_api_pods(self) -> None:
        """API pods: status, and final deletion once terminated."""
        store = self.lab.store
        for pod in store.list(
            "pods",
            None,
            lambda o: (
                (o.get("spec") or {}).get("nodeName") == self.node
                and MIRROR not in (o["metadata"].get("annotations") or {})
            ),
        ):
            w = self.workers.get(pod["metadata"]["uid"])
            if w is None:
                if pod["metadata"].get("deletionTimestamp"):
                    try:
                        store.delete(
                            "pods",
                            pod["metadata"]["namespace"],
                            pod["metadata"]["name"],
                            uid=pod["metadata"]["uid"],
                        )
                    except ApiError:
                        pass
                continue
            self._push_status(pod, w)

    def _push_status(self, obj: Obj, w: Worker) -> None:
        status = self.pod_status(w, obj.get("status") or {})
        if status != obj.get("status"):
            obj["status"] = status
            try:
                self.lab.store.update("pods", obj["metadata"]["namespace"], obj, check_rv=False)
            except ApiError:
                pass


def _containers(pod: Obj, minor: int) -> dict[Any, Obj]:
    """The pod's containers by name as the kubelet of 1.``minor`` decodes them (defaults filled in):
    what its per-container hash is taken of, so a default written out restarts nothing."""
    spec = decoded_pod(pod, minor).get("spec") or {}
    return {c.get("name"): c for c in spec.get("containers") or [] if isinstance(c, dict)}


def _terminated(c: Container) -> Obj:
    return {
        "exitCode": c.exit_code,
        "reason": c.exit_reason,
        "startedAt": now_rfc3339(c.started / 1e9),
        "finishedAt": now_rfc3339(c.finished / 1e9),
        "containerID": f"containerd://{c.id}",
    }


def _is_socket(path: str) -> bool:
    try:
        return stat_module.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def stat_is_dir(mode: int) -> bool:
    return stat_module.S_ISDIR(mode)


def _same(path: str) -> str:
    return path


def mounted_host_path(pod: Obj, container: Obj, path: str, on_node: Callable[[str], str] = _same) -> Optional[str]:
    """The host path behind ``path`` inside ``container``, through its hostPath volume mounts
    (``on_node``: where a node path is in the lab, :meth:`Kubelet.on_node`).

    None when no hostPath mount covers the path: it then lives in the container image.
    """
    best: Optional[Obj] = None
    for m in container.get("volumeMounts") or []:
        mp = str(m.get("mountPath", "")).rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(str(best.get("mountPath", "")).rstrip("/")):
                best = m
    if best is None:
        return None
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if v.get("name") == best.get("name") and v.get("hostPath"):
            rest = path[len(str(best["mountPath"]).rstrip("/")):]
            node_path = str(v["hostPath"]["path"]).rstrip("/") + rest if rest else str(v["hostPath"]["path"])
            return on_node(node_path)
    return None


def host_path(pod: Obj, container: Obj, path: str, on_node: Callable[[str], str] = _same) -> str:
    """Like :func:`mounted_host_path`, falling back to ``path`` itself on the node (the lab's own lookups)."""
    return mounted_host_path(pod, container, path, on_node) or on_node(path)

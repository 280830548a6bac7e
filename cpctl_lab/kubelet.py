"""Simulated kubelet (one per lab node): static pod file source, pod workers, a fake container runtime.

Faithful to the points cpctl depends on (see /work/shared/reference/kubelet-kubeadm.md):

* every non-dot regular file in the manifests dir is a candidate (no extension filter, no
  recursion, symlinks followed by ``os.stat``); inotify events act per file (add/modify re-read the
  file, remove/rename drop the pod key that file defined) and a full re-list every
  ``file_check_frequency`` seconds replaces the set, last file in sorted order winning on duplicates;
* static pod name ``<name>-<node>``, namespace defaulting to ``default``, UID == config.hash ==
  hash(decoded pod, node, path): same content at the same path gives the same hash;
* a content change is a delete plus an add; the new pod starts only after the old one with the same
  full name has stopped;
* mirror pods are written through the API only: while no apiserver/etcd runs they can be neither
  created nor deleted, and the kubelet reconciles when the API is back.
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
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from .store import ApiError, Obj, now_micro, now_rfc3339

MAX_MANIFEST = 10 << 20
MIRROR = "kubernetes.io/config.mirror"
HASH = "kubernetes.io/config.hash"
SEEN = "kubernetes.io/config.seen"
SOURCE = "kubernetes.io/config.source"


def _hex(n: int = 64) -> str:
    return "".join(random.choice("0123456789abcdef") for _ in range(n))


def rfc3339_nano(ns: int) -> str:
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def static_pod_hash(pod: Obj, node: str, path: str) -> str:
    """Stand-in for kubelet's FNV-128a over (pod, host:<node>, file:<path>): 32 hex chars."""
    h = hashlib.sha256(json.dumps(pod, sort_keys=True, separators=(",", ":")).encode())
    h.update(f"host:{node}".encode())
    h.update(f"file:{path}".encode())
    return h.hexdigest()[:32]


class ManifestError(Exception):
    """The file is not a usable static pod (kubelet logs and skips it)."""


def parse_manifest(path: str, node: str) -> Obj:
    """Decode one file the way kubelet's file source does, and apply its static-pod defaults."""
    st = os.stat(path)
    if st.st_size > MAX_MANIFEST:
        raise ManifestError("file exceeds 10MB")
    with open(path, "rb") as fh:
        raw = fh.read(MAX_MANIFEST)
    try:
        docs = yaml.safe_load_all(raw)
        pod = next(iter(docs), None)
    except yaml.YAMLError as exc:
        raise ManifestError(f"yaml: {str(exc).splitlines()[0]}") from None
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
    uid = meta.get("uid") or static_pod_hash(pod, node, path)
    out = copy.deepcopy(pod)
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


# --------------------------------------------------------------------------- runtime objects


@dataclass
class Sandbox:
    id: str
    name: str
    namespace: str
    uid: str
    attempt: int
    created: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ip: str
    host_network: bool
    state: str = "SANDBOX_READY"
    pid: int = field(default_factory=lambda: random.randint(1000, 99999))

    def cri(self) -> Obj:
        return {
            "id": self.id,
            "metadata": {
                "name": self.name,
                "uid": self.uid,
                "namespace": self.namespace,
                "attempt": self.attempt,
            },
            "state": self.state,
            "createdAt": str(self.created),
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "runtimeHandler": "",
        }

    def inspect(self) -> Obj:
        return {
            "status": {
                "id": self.id,
                "metadata": self.cri()["metadata"],
                "state": self.state,
                "createdAt": rfc3339_nano(self.created),
                "network": {"additionalIps": [], "ip": self.ip},
                "linux": {
                    "namespaces": {
                        "options": {
                            "ipc": "POD",
                            "network": "NODE" if self.host_network else "POD",
                            "pid": "CONTAINER",
                            "targetId": "",
                            "usernsOptions": None,
                        }
                    }
                },
                "labels": dict(self.labels),
                "annotations": dict(self.annotations),
                "runtimeHandler": "",
            },
            "info": {
                "pid": self.pid if self.state == "SANDBOX_READY" else 0,
                "processStatus": "running" if self.state == "SANDBOX_READY" else "stopped",
                "netNamespaceClosed": self.state != "SANDBOX_READY",
                "image": "registry.k8s.io/pause:3.9",
                "snapshotter": "overlayfs",
                "runtimeHandler": "",
                "runtimeType": "io.containerd.runc.v2",
            },
        }


@dataclass
class Container:
    id: str
    name: str
    image: str
    sandbox: Sandbox
    command: list[str]
    spec: Obj
    created: int
    started: int = 0
    finished: int = 0
    pid: int = 0
    state: str = "CONTAINER_CREATED"
    exit_code: int = 0
    role: str = ""
    identity: str = ""
    serves: list[str] = field(default_factory=list)
    lease: Optional[tuple[str, str]] = None

    @property
    def labels(self) -> dict[str, str]:
        return {
            "io.kubernetes.container.name": self.name,
            "io.kubernetes.pod.name": self.sandbox.name,
            "io.kubernetes.pod.namespace": self.sandbox.namespace,
            "io.kubernetes.pod.uid": self.sandbox.uid,
        }

    @property
    def annotations(self) -> dict[str, str]:
        return {
            "io.kubernetes.container.hash": hashlib.sha1(
                json.dumps(self.spec, sort_keys=True).encode()
            ).hexdigest()[:8],
            "io.kubernetes.container.restartCount": "0",
            "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
            "io.kubernetes.container.terminationMessagePolicy": "File",
            "io.kubernetes.pod.terminationGracePeriod": "30",
        }

    def image_ref(self) -> str:
        return "sha256:" + hashlib.sha256(self.image.encode()).hexdigest()

    def cri(self) -> Obj:
        return {
            "id": self.id,
            "podSandboxId": self.sandbox.id,
            "metadata": {"name": self.name, "attempt": self.sandbox.attempt},
            "image": {"image": self.image, "annotations": {}, "userSpecifiedImage": self.image},
            "imageRef": self.image_ref(),
            "state": self.state,
            "createdAt": str(self.created),
            "labels": self.labels,
            "annotations": self.annotations,
        }

    def inspect(self) -> Obj:
        zero = "1970-01-01T00:00:00Z"
        return {
            "status": {
                "id": self.id,
                "metadata": {"name": self.name, "attempt": self.sandbox.attempt},
                "state": self.state,
                "createdAt": rfc3339_nano(self.created),
                "startedAt": rfc3339_nano(self.started) if self.started else zero,
                "finishedAt": rfc3339_nano(self.finished) if self.finished else zero,
                "exitCode": self.exit_code,
                "image": {"image": self.image},
                "imageRef": self.image_ref(),
                "reason": "Completed" if self.state == "CONTAINER_EXITED" else "",
                "message": "",
                "labels": self.labels,
                "annotations": self.annotations,
                "mounts": [],
                "logPath": f"/var/log/pods/{self.sandbox.namespace}_{self.sandbox.name}_"
                f"{self.sandbox.uid}/{self.name}/{self.sandbox.attempt}.log",
                "resources": None,
            },
            "info": {
                "sandboxID": self.sandbox.id,
                "pid": self.pid if self.state == "CONTAINER_RUNNING" else 0,
                "removing": False,
                "snapshotKey": self.id,
                "snapshotter": "overlayfs",
                "runtimeType": "io.containerd.runc.v2",
                "config": {
                    "metadata": {"name": self.name},
                    "image": {"image": self.image},
                    "command": self.spec.get("command") or [],
                    "args": self.spec.get("args") or [],
                },
            },
        }


@dataclass
class Worker:
    """One pod as the kubelet runs it; uid is config.hash for static pods, metadata.uid otherwise."""

    uid: str
    pod: Obj
    source: str
    path: str = ""
    state: str = "waiting"  # waiting -> starting -> running -> stopping -> stopped
    seen: float = field(default_factory=time.time)
    started: float = 0.0
    ready: bool = False
    sandbox: Optional[Sandbox] = None
    containers: list[Container] = field(default_factory=list)
    transitions: dict[str, str] = field(default_factory=dict)
    ip: str = ""

    @property
    def full_name(self) -> tuple[str, str]:
        return self.pod["metadata"]["namespace"], self.pod["metadata"]["name"]

    @property
    def running(self) -> bool:
        return self.state in ("running", "stopping")


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

    def __init__(self, lab: Any, node: str, manifests_dir: Optional[Path]) -> None:
        self.lab = lab
        self.node = node
        self.dir = manifests_dir
        self.static: dict[tuple[str, str], tuple[Obj, str]] = {}
        self.file_keys: dict[str, tuple[str, str]] = {}
        self.seen: dict[str, str] = {}
        self.workers: dict[str, Worker] = {}
        self.sandboxes: dict[str, Sandbox] = {}
        self.containers: dict[str, Container] = {}
        self._stop = threading.Event()
        self._ip_next = 2
        self.index = 0

    def log(self, msg: str) -> None:
        self.lab.log(f"kubelet[{self.node}]: {msg}")

    # ----------------------------------------------------------- file source
    def _decode(self, path: str) -> Obj:
        pod = parse_manifest(path, self.node)
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
                del self.static[key]
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
        """Watcher thread: inotify when available, else a 50 ms stat poll; plus the periodic re-list."""
        assert self.dir is not None
        ino = Inotify.open()
        period = self.lab.file_check_frequency
        next_relist = time.monotonic() + period
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
        for uid, (src, pod, path) in want.items():
            w = self.workers.get(uid)
            if w is None:
                w = Worker(uid=uid, pod=pod, source=src, path=path)
                if pod["metadata"].get("annotations", {}).get(SEEN):
                    w.seen = time.time()
                self.workers[uid] = w
            elif src == "api":
                w.pod = pod
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
                    self.lab.call_later(self.lab.start_lag, lambda w=w: self._start_worker(w))

    def _start_worker(self, w: Worker) -> None:
        if w.state != "starting" or self.workers.get(w.uid) is not w:
            return
        now_ns = time.time_ns()
        spec = w.pod.get("spec") or {}
        host_net = bool(spec.get("hostNetwork"))
        if not w.ip:
            if host_net:
                w.ip = "127.0.0.1"
            else:
                w.ip = f"10.244.{self.index}.{self._ip_next}"
                self._ip_next = self._ip_next % 250 + 2
        meta = w.pod["metadata"]
        attempt = sum(1 for s in self.sandboxes.values() if s.uid == w.uid)
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
            id=_hex(),
            name=meta["name"],
            namespace=meta["namespace"],
            uid=w.uid,
            attempt=attempt,
            created=now_ns,
            labels=labels,
            annotations=anns,
            ip=w.ip,
            host_network=host_net,
        )
        self.sandboxes[sb.id] = sb
        w.sandbox = sb
        w.containers = []
        for c in spec.get("containers") or []:
            cmd = list(c.get("command") or [])
            ctr = Container(
                id=_hex(),
                name=c["name"],
                image=c["image"],
                sandbox=sb,
                command=cmd,
                spec=c,
                created=now_ns,
                started=time.time_ns(),
                pid=random.randint(1000, 4000000),
                state="CONTAINER_RUNNING",
            )
            base = os.path.basename(cmd[0]) if cmd else c["name"]
            ctr.role = (
                base
                if base in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
                else ""
            )
            ctr.identity = f"{self.node}_{uuid.uuid4()}"
            if ctr.role:
                self.lab.configure_component(self, w, ctr)
            self.containers[ctr.id] = ctr
            w.containers.append(ctr)
        w.state = "running"
        w.started = time.time()
        self.log(f"started pod {meta['namespace']}/{meta['name']} uid={w.uid}")
        self.lab.call_later(self.lab.ready_lag, lambda: self._ready(w))
        self.lab.kick()

    def _ready(self, w: Worker) -> None:
        if w.state == "running" and self.workers.get(w.uid) is w:
            w.ready = True
            self.lab.kick()

    def _stop_worker(self, w: Worker) -> None:
        meta = w.pod["metadata"]
        if w.state in ("waiting", "starting"):
            w.state = "stopped"
            self.workers.pop(w.uid, None)
            self.lab.kick()
            return
        w.state = "stopping"
        w.ready = False
        self.log(f"stopping pod {meta['namespace']}/{meta['name']} uid={w.uid}")
        self.lab.call_later(self.lab.stop_lag, lambda: self._stopped(w))

    def _stopped(self, w: Worker) -> None:
        now_ns = time.time_ns()
        for c in w.containers:
            if c.state == "CONTAINER_RUNNING":
                c.state, c.finished, c.exit_code = "CONTAINER_EXITED", now_ns, 0
                self.lab.component_stopped(self, c)
        if w.sandbox is not None:
            w.sandbox.state = "SANDBOX_NOTREADY"
        w.state = "stopped"
        if self.workers.get(w.uid) is w:
            del self.workers[w.uid]
        self.log(f"pod {w.full_name[0]}/{w.full_name[1]} uid={w.uid} stopped")
        self.lab.call_later(self.lab.gc_after, self._gc)
        self.lab.kick()

    def _gc(self) -> None:
        """Forget exited containers and dead sandboxes after a while (they stay in ``ps -a`` meanwhile)."""
        limit = time.time_ns() - int(self.lab.gc_after * 1e9) + 1
        for cid, c in list(self.containers.items()):
            if c.state == "CONTAINER_EXITED" and c.finished < limit:
                del self.containers[cid]
        live = {c.sandbox.id for c in self.containers.values()}
        for sid, s in list(self.sandboxes.items()):
            if s.state != "SANDBOX_READY" and sid not in live:
                del self.sandboxes[sid]

    # ----------------------------------------------------------- status and mirrors
    def _cond(self, w: Worker, ctype: str, ok: bool) -> Obj:
        status = "True" if ok else "False"
        key = f"{ctype}={status}"
        if key not in w.transitions:
            w.transitions[key] = now_rfc3339()
        return {
            "type": ctype,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": w.transitions[key],
        }

    def pod_status(self, w: Worker, old: Obj) -> Obj:
        spec = w.pod.get("spec") or {}
        st: Obj = {
            "phase": "Running" if w.running else "Pending",
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": now_rfc3339(w.seen)
            if w.source == "file"
            else (old.get("startTime") or now_rfc3339(w.seen)),
            "qosClass": old.get("qosClass") or "BestEffort",
        }
        if w.ip:
            st["podIP"] = w.ip
            st["podIPs"] = [{"ip": w.ip}]
        st["conditions"] = [
            self._cond(w, "PodReadyToStartContainers", w.running),
            self._cond(w, "Initialized", True),
            self._cond(w, "Ready", w.ready),
            self._cond(w, "ContainersReady", w.ready),
            self._cond(w, "PodScheduled", True),
        ]
        by_name = {c.name: c for c in w.containers}
        statuses = []
        for c in spec.get("containers") or []:
            ctr = by_name.get(c["name"])
            entry: Obj = {
                "name": c["name"],
                "image": c["image"],
                "restartCount": 0,
                "ready": False,
                "started": False,
                "imageID": "",
                "containerID": "",
            }
            if ctr is not None and ctr.state == "CONTAINER_RUNNING":
                entry.update(
                    {
                        "state": {"running": {"startedAt": now_rfc3339(ctr.started / 1e9)}},
                        "ready": w.ready,
                        "started": True,
                        "imageID": ctr.image_ref(),
                        "containerID": f"containerd://{ctr.id}",
                    }
                )
            elif ctr is not None and ctr.state == "CONTAINER_EXITED":
                entry.update(
                    {
                        "state": {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": now_rfc3339(ctr.started / 1e9),
                                "finishedAt": now_rfc3339(ctr.finished / 1e9),
                                "containerID": f"containerd://{ctr.id}",
                            }
                        },
                        "containerID": f"containerd://{ctr.id}",
                    }
                )
            else:
                entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
            statuses.append(entry)
        st["containerStatuses"] = statuses
        return st

    def sync_api(self) -> None:
        """Mirror pods and status (API reachable only)."""
        api = self.lab.api
        store = self.lab.store
        node = store.get("nodes", "", self.node)
        if node is None:
            return
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
                    store.delete("pods", ns, name, uid=mirror["metadata"]["uid"])
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
                    mirror = api.create(self.lab.res("pods"), ns, body)
                    self.log(f"Creating a mirror pod for static pod {ns}/{name}")
                except ApiError as exc:
                    self.log(f"failed creating mirror pod {ns}/{name}: {exc.message}")
                    continue
            self._push_status(mirror, w)
        # orphaned mirrors: static pod gone and its worker fully terminated
        for m in store.list(
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
            try:
                store.delete("pods", key[0], key[1], uid=m["metadata"]["uid"])
                self.log(f"Deleted orphaned mirror pod {key[0]}/{key[1]}")
            except ApiError:
                pass
        # API pods: status, and final deletion once terminated
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

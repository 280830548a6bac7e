"""The lab process: nodes, kubelets, API availability, health listeners, scheduler, leases, control channel.

Everything runs in one process. One re-entrant lock (the store's) guards all state; a single loop
thread runs timers and a level-triggered ``reconcile`` whenever something changed (file event,
API write, timer), so idle CPU stays near zero (no polling except the optional 50 ms stat poll
when inotify is unavailable).
"""

from __future__ import annotations

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

from . import control, seeds
from .apiserver import RESOURCES, Api, ApiHandler, Res
from .httpserve import LabHTTPServer, free_port, serve
from .kubelet import Container, Kubelet, Worker
from .store import ApiError, Obj, Store, now_micro, now_rfc3339, parse_time

ROLES_LEASE_DEFAULT = {
    "kube-scheduler": "kube-scheduler",
    "kube-controller-manager": "kube-controller-manager",
}


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


def host_path(pod: Obj, container: Obj, path: str) -> str:
    """Translate a path inside the container to the host path through its hostPath volume mounts."""
    best: Optional[Obj] = None
    for m in container.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best.get("mountPath", "")):
                best = m
    if best is None:
        return path
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if v.get("name") == best.get("name") and v.get("hostPath"):
            rest = path[len(best["mountPath"].rstrip("/")) :]
            return v["hostPath"]["path"].rstrip("/") + rest if rest else v["hostPath"]["path"]
    return path


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


class HealthHandler(BaseHTTPRequestHandler):
    """Health endpoints of one running control-plane container (context: lab, worker, role, paths)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        lab, w, role, paths = self.server.context  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        with lab.lock:
            running = w.state in ("running", "stopping")
            ready = w.ready and (role != "kube-apiserver" or lab.etcd_ok())
        base = "/" + path.strip("/").split("/", 1)[0]
        if base == "/livez":
            ok = running
        elif base in ("/readyz", "/healthz") or path in paths:
            ok = ready
        else:
            self._reply(404, "404 page not found\n")
            return
        if ok:
            self._reply(200, "ok")
        else:
            self._reply(500, f"[-]{role or 'component'} not ready\n{base[1:]} check failed\n")

    def _reply(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


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
        else:
            self._json(404, {"error": "not found"})

    def do_GET(self) -> None:
        lab: Lab = self.server.context  # type: ignore[attr-defined]
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
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
            else:
                self._json(404, {"error": "not found"})


class Lab:
    """One simulated cluster: N masters plus one worker, on 127.0.0.1."""

    def __init__(
        self,
        directory: Path,
        masters: int = 1,
        node_name: Optional[str] = None,
        port: int = 0,
        start_lag: float = 0.3,
        ready_lag: float = 0.3,
        stop_lag: float = 0.2,
        file_check_frequency: float = 20.0,
        lease_renew: float = 2.0,
        gc_after: float = 60.0,
        aggregated_discovery: bool = True,
    ) -> None:
        self.dir = Path(directory).expanduser().resolve()
        if masters < 1:
            raise ValueError("--masters must be >= 1")
        if node_name and masters != 1:
            raise ValueError("--node-name only applies to a single-master lab")
        self.masters = [node_name] if node_name else [f"lab-master{i}" for i in range(1, masters + 1)]
        self.worker = "lab-worker1"
        self.start_lag, self.ready_lag, self.stop_lag = start_lag, ready_lag, stop_lag
        self.file_check_frequency = file_check_frequency
        self.lease_renew = lease_renew
        self.gc_after = gc_after
        self.aggregated_discovery = aggregated_discovery
        self.store = Store()
        self.lock = self.store.lock
        self.cond = threading.Condition(self.lock)
        self.api = Api(self.store, self)
        self.port = port
        self.kubelets: dict[str, Kubelet] = {}
        self.api_srv: Optional[LabHTTPServer] = None
        self.control_srv: Optional[LabHTTPServer] = None
        self.health: dict[tuple[str, int, str], tuple[LabHTTPServer, Worker]] = {}
        self.tls: Optional[ssl.SSLContext] = None
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._kicked = False
        self._stop = threading.Event()
        self._pending_events: list[Obj] = []
        self._unschedulable: set[str] = set()
        self._bind_failed: float = 0.0
        self.ports: dict[str, dict[str, int]] = {}

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
    def _running(self, role: str) -> list[Container]:
        return [
            c
            for k in self.kubelets.values()
            for c in k.containers.values()
            if c.role == role and c.state == "CONTAINER_RUNNING"
        ]

    def etcd_ok(self) -> bool:
        """etcd answers while a quorum of the masters' etcd members runs."""
        return len(self._running("etcd")) > len(self.masters) // 2

    def api_available(self) -> bool:
        return self.api_srv is not None and self.etcd_ok()

    def is_ready(self) -> bool:
        if not self.api_available():
            return False
        for k in self.kubelets.values():
            for pod, _path in k.static.values():
                w = k.workers.get(pod["metadata"]["uid"])
                if w is None or not w.ready:
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
            if node not in ports:
                ports[node] = {
                    k: free_port()
                    for k in (
                        "apiserver",
                        "controller-manager",
                        "scheduler",
                        "etcd-client",
                        "etcd-peer",
                        "etcd-metrics",
                    )
                }
        self.ports = {n: ports[n] for n in self.masters}
        ports_file.write_text(json.dumps(ports, indent=2))
        for node in self.masters:
            if seeds.write_seeds(d / f"manifests-{node}", node, self.ports[node], self.ports):
                self.log(f"lab: seeded {d / f'manifests-{node}'}")
            # not created here: cpctl creates its state dir itself, 0700, on first change
        self.tls = self._tls_context()
        if not self.port:
            prev = control.read_state(d) or {}
            self.port = int((prev.get("api") or {}).get("port") or 0) or free_port()
        self._write_kubeconfig()
        self._write_crictl()
        self._seed_objects()
        for i, node in enumerate(self.masters + [self.worker]):
            mdir = d / f"manifests-{node}" if node in self.masters else None
            k = Kubelet(self, node, mdir)
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
                        "subjectAltName=IP:127.0.0.1,DNS:localhost",
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

    def _write_kubeconfig(self) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "kubernetes-admin@cpctl-lab",
            "clusters": [{"name": "cpctl-lab", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "contexts": [
                {
                    "name": "kubernetes-admin@cpctl-lab",
                    "context": {"cluster": "cpctl-lab", "user": "kubernetes-admin"},
                }
            ],
            "users": [{"name": "kubernetes-admin", "user": {}}],
            "preferences": {},
        }
        control.atomic_write(self.dir / "admin.conf", yaml.safe_dump(cfg, sort_keys=False))

    def _write_crictl(self) -> None:
        bindir = self.dir / "bin"
        bindir.mkdir(exist_ok=True)
        src = (Path(__file__).parent / "crictl.py").read_text()
        lab_json = str(self.dir / "lab.json")
        for name, node in [("crictl", None)] + [(f"crictl-{n}", n) for n in self.masters + [self.worker]]:
            text = (
                f"#!{sys.executable} -IS\n# Generated by `cpctl lab` -- a crictl look-alike for the simulated "
                f"node(s) of this lab.\nLAB_JSON = {lab_json!r}\nNODE = {node!r}\n"
                + src
                + "\n\nimport sys  # noqa: E402\n\nif __name__ == '__main__':\n"
                + "    sys.exit(main(sys.argv[1:], LAB_JSON, NODE))\n"
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
            obj = {
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
                    "podCIDR": f"10.244.{len(self.store.list('nodes'))}.0/24",
                    "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
                    if master
                    else [],
                },
                "status": self._node_status(),
            }
            if not master:
                obj["spec"].pop("taints")
            self.store.create("nodes", "", obj)

    def _node_status(self) -> Obj:
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
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
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
                "kubeProxyVersion": "v1.30.4",
                "kubeletVersion": "v1.30.4",
                "machineID": uuid.uuid4().hex,
                "operatingSystem": "linux",
                "osImage": "cpctl lab (simulated)",
                "systemUUID": str(uuid.uuid4()),
            },
        }

    def summary(self) -> Obj:
        return {
            "pid": os.getpid(),
            "dir": str(self.dir),
            "api": {
                "port": self.port,
                "url": f"http://127.0.0.1:{self.port}",
                "up": self.api_srv is not None,
            },
            "control": {
                "url": f"http://127.0.0.1:{self.control_srv.server_address[1]}" if self.control_srv else None
            },
            "masters": [
                {
                    "name": n,
                    "manifests_dir": str(self.dir / f"manifests-{n}"),
                    "state_dir": str(self.dir / f"state-{n}"),
                    "ports": self.ports.get(n, {}),
                    "crictl": str(self.dir / "bin" / ("crictl" if i == 0 else f"crictl-{n}")),
                }
                for i, n in enumerate(self.masters)
            ],
            "worker": self.worker,
            "nodes": self.masters + [self.worker],
            "kubeconfig": str(self.dir / "admin.conf"),
            "crictl": str(self.dir / "bin" / "crictl"),
            "tls": self.tls is not None,
            "etcd_ok": self.etcd_ok() if self.kubelets else False,
            "lags": {
                "start": self.start_lag,
                "ready": self.ready_lag,
                "stop": self.stop_lag,
                "file_check_frequency": self.file_check_frequency,
                "lease_renew": self.lease_renew,
            },
        }

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
        self.log(
            f"lab: running in {self.dir}; API http://127.0.0.1:{self.port} (opens when kube-apiserver runs)"
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
        with self.lock:
            for srv, _w in self.health.values():
                srv.stop()
            self.health.clear()
            if self.api_srv:
                self.api_srv.stop()
                self.api_srv = None
        if self.control_srv:
            self.control_srv.stop()
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
                    k.sync_api()
                self._sync_leases(renew=False)
                self._schedule()
            if not self._kicked:
                break

    def _sync_listeners(self) -> None:
        api_up = bool(self._running("kube-apiserver"))
        if api_up and self.api_srv is None and time.monotonic() - self._bind_failed > 0.5:
            try:
                self.api_srv = serve("127.0.0.1", self.port, ApiHandler, context=self)
                self.log(f"lab: API listening on 127.0.0.1:{self.port}")
                self._kicked = True
            except OSError as exc:
                self._bind_failed = time.monotonic()
                self.log(f"lab: cannot listen on API port {self.port}: {exc}; retrying")
                self.call_later(0.6, lambda: None)
        elif not api_up and self.api_srv is not None:
            self.api_srv.stop()
            self.api_srv = None
            self.log("lab: no kube-apiserver running: API listener closed")
        want: dict[tuple[str, int, str], tuple[Worker, str, set[str]]] = {}
        for k in self.kubelets.values():
            for w in k.workers.values():
                if w.state not in ("running", "stopping"):
                    continue
                for c in w.containers:
                    if c.state != "CONTAINER_RUNNING":
                        continue
                    for pk in ("livenessProbe", "readinessProbe", "startupProbe"):
                        hg = (c.spec.get(pk) or {}).get("httpGet")
                        if not hg:
                            continue
                        port = hg.get("port")
                        if isinstance(port, str) and not port.isdigit():
                            port = next(
                                (
                                    p.get("containerPort")
                                    for p in c.spec.get("ports") or []
                                    if p.get("name") == port
                                ),
                                None,
                            )
                        if port is None:
                            continue
                        key = (hg.get("host") or "127.0.0.1", int(port), (hg.get("scheme") or "HTTP").upper())
                        entry = want.setdefault(key, (w, c.role, set()))
                        entry[2].add(hg.get("path") or "/")
        for key in list(self.health):
            srv, w = self.health[key]
            if key not in want or want[key][0] is not w:
                srv.stop()
                del self.health[key]
        for key, (w, role, paths) in want.items():
            if key in self.health:
                continue
            host, port, scheme = key
            try:
                srv = serve(
                    host,
                    port,
                    HealthHandler,
                    tls=self.tls if scheme == "HTTPS" else None,
                    context=(self, w, role, paths),
                )
                self.health[key] = (srv, w)
            except OSError as exc:
                self.log(
                    f"lab: health endpoint {scheme.lower()}://{host}:{port} for "
                    f"{w.full_name[1]} cannot listen: {exc}"
                )

    # ------------------------------------------------------------------ components
    def configure_component(self, kubelet: Kubelet, w: Worker, c: Container) -> None:
        """Read a starting component's flags (and scheduler config file) like the real binary would."""
        flags = _flags(c.command[1:] + list(c.spec.get("args") or []))
        elect = flags.get("leader-elect", "true").lower() != "false"
        name = flags.get("leader-elect-resource-name", ROLES_LEASE_DEFAULT.get(c.role, ""))
        ns = flags.get("leader-elect-resource-namespace", "kube-system")
        if c.role == "kube-scheduler":
            c.serves = ["default-scheduler"]
            if "config" in flags:
                path = host_path(w.pod, c.spec, flags["config"])
                try:
                    cfg = yaml.safe_load(Path(path).read_text()) or {}
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

    def component_stopped(self, kubelet: Kubelet, c: Container) -> None:
        """A stopping leader releases its Lease (ReleaseOnCancel) when the API is reachable."""
        if c.lease is None or not self.api_available():
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
            for c in k.containers.values():
                if c.state == "CONTAINER_RUNNING" and c.lease:
                    cands.setdefault(c.lease, []).append(c)
        for (ns, name), cs in cands.items():
            cs.sort(key=lambda c: c.started)
            ids = {c.identity for c in cs}
            now, stamp = time.time(), now_micro()
            lease = self.store.get("leases", ns, name)
            if lease is None:
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
                if renew:
                    spec["renewTime"] = stamp
                    self.store.update("leases", ns, lease, check_rv=False)
                continue
            last = parse_time(spec["renewTime"]) if spec.get("renewTime") else 0.0
            if holder and last + float(spec.get("leaseDurationSeconds") or 15) > now:
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

    def _holds(self, c: Container) -> bool:
        if c.lease is None:
            return True
        lease = self.store.get("leases", *c.lease)
        return lease is not None and (lease.get("spec") or {}).get("holderIdentity") == c.identity

    def _schedule(self) -> None:
        served: dict[str, Container] = {}
        for c in sorted(self._running("kube-scheduler"), key=lambda c: c.started):
            if self._holds(c):
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
                and (p.get("spec") or {}).get("schedulerName", "default-scheduler") in served
            ),
        )
        for pod in pending:
            spec, meta = pod["spec"], pod["metadata"]
            sched = served[spec.get("schedulerName", "default-scheduler")]
            sname = spec.get("schedulerName", "default-scheduler")
            fit = None
            for n in nodes:
                labels = n["metadata"].get("labels") or {}
                if (n.get("spec") or {}).get("unschedulable"):
                    continue
                if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
                    continue
                if not all(
                    _tolerates(spec.get("tolerations") or [], t)
                    for t in (n.get("spec") or {}).get("taints") or []
                    if t.get("effect") in ("NoSchedule", "NoExecute")
                ):
                    continue
                fit = n["metadata"]["name"]
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

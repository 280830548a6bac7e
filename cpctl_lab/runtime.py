"""The lab's fake container runtime: sandboxes, containers and pod workers, with their CRI views.

Nothing really runs. A :class:`Container` records what containerd would know about it (ids,
times, state, exit code, attempt, log lines) plus what the simulated component does while it runs
(``booted``: it answers its health endpoints; ``fault``: it cannot start and will exit). The
shapes of :meth:`Sandbox.cri`, :meth:`Container.cri` and the ``inspect`` views follow crictl's
JSON output (kubelet-kubeadm.md section 9, real-node-facts.md "crictl").
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from .componentflags import Fault
from .componentlogs import LogLine

Obj = dict[str, Any]
RUNNING, EXITED, CREATED = "CONTAINER_RUNNING", "CONTAINER_EXITED", "CONTAINER_CREATED"
SANDBOX_READY, SANDBOX_NOTREADY = "SANDBOX_READY", "SANDBOX_NOTREADY"
ROLES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")


def new_id(n: int = 64) -> str:
    """A random hex id like containerd's."""
    return "".join(random.choice("0123456789abcdef") for _ in range(n))


def rfc3339_nano(ns: int) -> str:
    """Unix nanoseconds as RFC 3339 with nanoseconds (crictl inspect's format)."""
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


@dataclass
class Sandbox:
    """A pod sandbox (the pause container and its namespaces)."""

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
    state: str = SANDBOX_READY
    pause_image: str = "registry.k8s.io/pause:3.9"
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
        ready = self.state == SANDBOX_READY
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
                "pid": self.pid if ready else 0,
                "processStatus": "running" if ready else "stopped",
                "netNamespaceClosed": not ready,
                "image": self.pause_image,
                "snapshotter": "overlayfs",
                "runtimeHandler": "",
                "runtimeType": "io.containerd.runc.v2",
            },
        }


@dataclass
class Container:
    """One container attempt; a restart is a new Container with ``attempt`` + 1 in the same sandbox."""

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
    state: str = CREATED
    exit_code: int = 0
    role: str = ""
    identity: str = ""
    serves: list[str] = field(default_factory=list)
    lease: Optional[tuple[str, str]] = None
    attempt: int = 0
    grace: int = 30
    #: Why this attempt exits on its own (a command line the binary rejects), if it does.
    fault: Optional[Fault] = None
    #: The component answers its health endpoints (it has finished starting up).
    booted: bool = False
    #: The kubelet's startup probe succeeded (containerStatuses[].started).
    startup_done: bool = False
    #: The readiness probe has passed since startup (the live result is checked on top of it).
    ready_gate: bool = False
    #: For a kube-apiserver: the masters whose etcd its --etcd-servers reach.
    etcd_backends: tuple[str, ...] = ()
    #: For a kube-apiserver with a valid --audit-policy-file and an --audit-log-path on the node: (the
    #: log's node path, the policy): it appends an audit event for each request it serves.
    audit: Optional[tuple[str, dict[str, Any]]] = None
    logs: list[LogLine] = field(default_factory=list)
    #: Port -> the certificate files the component serves there (pki.ServedCert: re-read as its
    #: binary does, cluster.Lab._serving_contexts).
    tls: dict[int, Any] = field(default_factory=dict)
    #: For etcd when a real etcd is installed: the process that runs it (etcdproc.Member).
    real: Any = None

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def healthy(self) -> bool:
        """Running and not about to crash: the component does its job (listeners, leases, API)."""
        return self.state == RUNNING and self.fault is None

    def log(self, line: LogLine) -> None:
        """Append one line to what ``crictl logs`` shows for this container."""
        self.logs.append(line)

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
            "io.kubernetes.container.restartCount": str(self.attempt),
            "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
            "io.kubernetes.container.terminationMessagePolicy": "File",
            "io.kubernetes.pod.terminationGracePeriod": str(self.grace),
        }

    def image_ref(self) -> str:
        return "sha256:" + hashlib.sha256(self.image.encode()).hexdigest()

    @property
    def exit_reason(self) -> str:
        """containerd's reason for an exited container: Completed (exit 0) or Error."""
        return "Completed" if self.exit_code == 0 else "Error"

    @property
    def log_path(self) -> str:
        sb = self.sandbox
        return f"/var/log/pods/{sb.namespace}_{sb.name}_{sb.uid}/{self.name}/{self.attempt}.log"

    def cri(self) -> Obj:
        return {
            "id": self.id,
            "podSandboxId": self.sandbox.id,
            "metadata": {"name": self.name, "attempt": self.attempt},
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
                "metadata": {"name": self.name, "attempt": self.attempt},
                "state": self.state,
                "createdAt": rfc3339_nano(self.created),
                "startedAt": rfc3339_nano(self.started) if self.started else zero,
                "finishedAt": rfc3339_nano(self.finished) if self.finished else zero,
                "exitCode": self.exit_code,
                "image": {"image": self.image},
                "imageRef": self.image_ref(),
                "reason": self.exit_reason if self.state == EXITED else "",
                "message": "",
                "labels": self.labels,
                "annotations": self.annotations,
                "mounts": [],
                "logPath": self.log_path,
                "resources": None,
            },
            "info": {
                "sandboxID": self.sandbox.id,
                "pid": self.pid if self.state == RUNNING else 0,
                "removing": False,
                "snapshotKey": self.id,
                "snapshotter": "overlayfs",
                "runtimeType": "io.containerd.runc.v2",
                "config": {
                    "metadata": {"name": self.name, "attempt": self.attempt},
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
    sandbox: Optional[Sandbox] = None
    #: The current attempt of each container of the pod, in spec order.
    containers: list[Container] = field(default_factory=list)
    #: The last exited attempt of each container (containerStatuses[].lastState).
    previous: dict[str, Container] = field(default_factory=dict)
    #: Restarts started so far per container (restartCount: the latest attempt's number in this sandbox).
    restarts: dict[str, int] = field(default_factory=dict)
    #: Container name -> (time.time() when the back-off ends, its nominal length in real seconds).
    backoff: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Set while a hostPath volume cannot be mounted (the pod stays ContainerCreating).
    mount_error: str = ""
    transitions: dict[str, str] = field(default_factory=dict)
    ip: str = ""

    @property
    def full_name(self) -> tuple[str, str]:
        return self.pod["metadata"]["namespace"], self.pod["metadata"]["name"]

    @property
    def running(self) -> bool:
        return self.state in ("running", "stopping")

    def current(self, name: str) -> Optional[Container]:
        """The current attempt of container ``name``."""
        return next((c for c in self.containers if c.name == name), None)

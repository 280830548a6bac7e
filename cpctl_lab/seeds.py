"""kubeadm static pod manifests that seed each lab master's manifests dir, by kubeadm release.

They follow kubeadm's layout (cmd/kubeadm/app/phases/controlplane/manifests.go,
cmd/kubeadm/app/phases/etcd/local.go, cmd/kubeadm/app/util/staticpod/utils.go): namespace
kube-system, labels component/tier, system-node-critical, hostNetwork, hostPath volumes, probes
(liveness: delay 10, timeout 15, threshold 8; readiness: period 1, threshold 3; startup: delay
10, threshold 24), resources. What changes with the release (:class:`profiles.KubeRelease`):

* etcd probes: v1.30 liveness ``/health?exclude=NOSPACE&serializable=true``, startup
  ``/health?serializable=false``, no readiness probe; v1.31+ ``/livez``, ``/readyz``, ``/readyz``;
* v1.34+: probes use the named port ``probe-port`` with a matching ``ports:`` entry;
* v1.34+ (etcd 3.6): ``--feature-gates=InitialCorruptCheck=true`` and
  ``--watch-progress-notify-interval=5s`` instead of the ``--experimental-*`` flags.

Every port is a free one picked at seed time (the real ones, 6443, 10257, 10259, 2379-2381, may be
taken or needed by a second lab); flags and probes are kept consistent with each other. Every
hostPath is the node path kubeadm writes (``/etc/kubernetes/pki``): the lab's kubelet, its
components and cpctl (``CPCTL_NODE_ROOT``) find it under the node's root dir
(``DIR/root-<node>/etc/kubernetes/pki``), so the files the flags name exist on the "node".
IPv6 clusters advertise ``::1``: probes use ``host: ::1`` and URLs ``https://[::1]:PORT``.
Stacked etcd: each apiserver lists only its own node's etcd in ``--etcd-servers``, and members
after the first join with ``--initial-cluster-state=existing``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .profiles import KubeRelease

Obj = dict[str, Any]
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
PKI = "/etc/kubernetes/pki"
PROBE_PORT = "probe-port"


@dataclass(frozen=True)
class SeedSpec:
    """What one master's manifests depend on."""

    node: str
    ports: dict[str, int]
    members: dict[str, dict[str, int]]  # every master (in order) -> its ports
    root: Path  # the node's "/" inside the lab dir
    release: KubeRelease
    loopback: str = "127.0.0.1"
    stacked_etcd: bool = False

    def hostport(self, port: int) -> str:
        """``host:port`` on the node's loopback, bracketed for IPv6."""
        return f"[{self.loopback}]:{port}" if ":" in self.loopback else f"{self.loopback}:{port}"

    @property
    def ipv6(self) -> bool:
        return ":" in self.loopback


def _probe(host: str, path: str, port: Any, scheme: str, threshold: int, delay: int = 10, period: int = 10) -> Obj:
    p: Obj = {
        "failureThreshold": threshold,
        "httpGet": {"host": host, "path": path, "port": port, "scheme": scheme},
        "periodSeconds": period,
        "timeoutSeconds": 15,
    }
    if delay:
        p["initialDelaySeconds"] = delay
    return p


def _probes(spec: SeedSpec, host: str, port: int, scheme: str, live: str, ready: str, startup: str) -> Obj:
    """The container fields for kubeadm's probes (empty ``ready``: no readiness probe)."""
    target: Any = PROBE_PORT if spec.release.named_probe_port else port
    out: Obj = {
        "livenessProbe": _probe(host, live, target, scheme, 8),
        "startupProbe": _probe(host, startup, target, scheme, 24),
    }
    if ready:
        out["readinessProbe"] = _probe(host, ready, target, scheme, 3, delay=0, period=1)
    if spec.release.named_probe_port:
        out["ports"] = [{"containerPort": port, "name": PROBE_PORT, "protocol": "TCP"}]
    return out


def _vol(spec: SeedSpec, name: str, path: str, typ: str, ro: bool = True) -> tuple[Obj, Obj]:
    """A hostPath volume of the node path ``path`` (as kubeadm writes it; the lab's kubelet finds it
    under the node's root dir) and its mount at ``path``."""
    m: Obj = {"mountPath": path, "name": name}
    if ro:
        m["readOnly"] = True
    return {"hostPath": {"path": path, "type": typ}, "name": name}, m


def _pod(name: str, annotations: Obj, container: Obj, vols: list[tuple[Obj, Obj]]) -> Obj:
    container["volumeMounts"] = [m for _, m in vols]
    meta: Obj = {
        "labels": {"component": name, "tier": "control-plane"},
        "name": name,
        "namespace": "kube-system",
    }
    if annotations:
        meta = {"annotations": annotations, **meta}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [dict(sorted(container.items()))],
            "hostNetwork": True,
            "priority": 2000001000,
            "priorityClassName": "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [v for v, _ in vols],
        },
        "status": {},
    }


def _ca_vols(spec: SeedSpec) -> list[tuple[Obj, Obj]]:
    return [
        _vol(spec, "ca-certs", "/etc/ssl/certs", "DirectoryOrCreate"),
        _vol(spec, "etc-ca-certificates", "/etc/ca-certificates", "DirectoryOrCreate"),
        _vol(spec, "k8s-certs", PKI, "DirectoryOrCreate"),
        _vol(spec, "usr-local-share-ca-certificates", "/usr/local/share/ca-certificates", "DirectoryOrCreate"),
        _vol(spec, "usr-share-ca-certificates", "/usr/share/ca-certificates", "DirectoryOrCreate"),
    ]


def _etcd_servers(spec: SeedSpec) -> str:
    if spec.stacked_etcd:
        return f"https://{spec.hostport(spec.ports['etcd-client'])}"
    return ",".join(f"https://{spec.hostport(m['etcd-client'])}" for m in spec.members.values())


def apiserver(spec: SeedSpec) -> Obj:
    """kube-apiserver.yaml of one master."""
    api, lo = spec.ports["apiserver"], spec.loopback
    return _pod(
        "kube-apiserver",
        {"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": spec.hostport(api)},
        {
            "command": [
                "kube-apiserver",
                f"--advertise-address={lo}",
                "--allow-privileged=true",
                "--authorization-mode=Node,RBAC",
                f"--client-ca-file={PKI}/ca.crt",
                "--enable-admission-plugins=NodeRestriction",
                "--enable-bootstrap-token-auth=true",
                f"--etcd-cafile={PKI}/etcd/ca.crt",
                f"--etcd-certfile={PKI}/apiserver-etcd-client.crt",
                f"--etcd-keyfile={PKI}/apiserver-etcd-client.key",
                f"--etcd-servers={_etcd_servers(spec)}",
                f"--kubelet-client-certificate={PKI}/apiserver-kubelet-client.crt",
                f"--kubelet-client-key={PKI}/apiserver-kubelet-client.key",
                "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
                f"--proxy-client-cert-file={PKI}/front-proxy-client.crt",
                f"--proxy-client-key-file={PKI}/front-proxy-client.key",
                "--requestheader-allowed-names=front-proxy-client",
                f"--requestheader-client-ca-file={PKI}/front-proxy-ca.crt",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-username-headers=X-Remote-User",
                f"--secure-port={api}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={PKI}/sa.pub",
                f"--service-account-signing-key-file={PKI}/sa.key",
                f"--service-cluster-ip-range={'fd00:10:96::/112' if spec.ipv6 else '10.96.0.0/12'}",
                f"--tls-cert-file={PKI}/apiserver.crt",
                f"--tls-private-key-file={PKI}/apiserver.key",
            ],
            "image": f"registry.k8s.io/kube-apiserver:{spec.release.version}",
            "imagePullPolicy": "IfNotPresent",
            "name": "kube-apiserver",
            "resources": {"requests": {"cpu": "250m"}},
            **_probes(spec, lo, api, "HTTPS", "/livez", "/readyz", "/livez"),
        },
        _ca_vols(spec),
    )


def controller_manager(spec: SeedSpec) -> Obj:
    """kube-controller-manager.yaml of one master."""
    kcm, conf = spec.ports["controller-manager"], "/etc/kubernetes/controller-manager.conf"
    vols = _ca_vols(spec)
    return _pod(
        "kube-controller-manager",
        {},
        {
            "command": [
                "kube-controller-manager",
                "--allocate-node-cidrs=true",
                f"--authentication-kubeconfig={conf}",
                f"--authorization-kubeconfig={conf}",
                "--bind-address=127.0.0.1",
                f"--client-ca-file={PKI}/ca.crt",
                f"--cluster-cidr={'fd00:10:244::/56' if spec.ipv6 else '10.244.0.0/16'}",
                "--cluster-name=kubernetes",
                f"--cluster-signing-cert-file={PKI}/ca.crt",
                f"--cluster-signing-key-file={PKI}/ca.key",
                "--controllers=*,bootstrapsigner,tokencleaner",
                f"--kubeconfig={conf}",
                "--leader-elect=true",
                f"--requestheader-client-ca-file={PKI}/front-proxy-ca.crt",
                f"--root-ca-file={PKI}/ca.crt",
                f"--secure-port={kcm}",
                f"--service-account-private-key-file={PKI}/sa.key",
                f"--service-cluster-ip-range={'fd00:10:96::/112' if spec.ipv6 else '10.96.0.0/12'}",
                "--use-service-account-credentials=true",
            ],
            "image": f"registry.k8s.io/kube-controller-manager:{spec.release.version}",
            "imagePullPolicy": "IfNotPresent",
            "name": "kube-controller-manager",
            "resources": {"requests": {"cpu": "200m"}},
            **_probes(spec, "127.0.0.1", kcm, "HTTPS", "/healthz", "", "/healthz"),
        },
        vols[:2]
        + [_vol(spec, "flexvolume-dir", "/usr/libexec/kubernetes/kubelet-plugins/volume/exec",
                "DirectoryOrCreate", ro=False)]
        + vols[2:3]
        + [_vol(spec, "kubeconfig", conf, "FileOrCreate")]
        + vols[3:],
    )


def scheduler(spec: SeedSpec) -> Obj:
    """kube-scheduler.yaml of one master."""
    sch, conf = spec.ports["scheduler"], "/etc/kubernetes/scheduler.conf"
    return _pod(
        "kube-scheduler",
        {},
        {
            "command": [
                "kube-scheduler",
                f"--authentication-kubeconfig={conf}",
                f"--authorization-kubeconfig={conf}",
                "--bind-address=127.0.0.1",
                f"--kubeconfig={conf}",
                "--leader-elect=true",
                f"--secure-port={sch}",
            ],
            "image": f"registry.k8s.io/kube-scheduler:{spec.release.version}",
            "imagePullPolicy": "IfNotPresent",
            "name": "kube-scheduler",
            "resources": {"requests": {"cpu": "100m"}},
            **_probes(spec, "127.0.0.1", sch, "HTTPS", "/healthz", "", "/healthz"),
        },
        [_vol(spec, "kubeconfig", conf, "FileOrCreate")],
    )


def etcd(spec: SeedSpec) -> Obj:
    """etcd.yaml of one master."""
    ec, ep, em = spec.ports["etcd-client"], spec.ports["etcd-peer"], spec.ports["etcd-metrics"]
    names = list(spec.members)
    joined = names[: names.index(spec.node) + 1] if spec.stacked_etcd else names
    cluster = ",".join(f"{n}=https://{spec.hostport(spec.members[n]['etcd-peer'])}" for n in joined)
    if spec.release.etcd36_flags:
        version_flags = ["--feature-gates=InitialCorruptCheck=true", "--watch-progress-notify-interval=5s"]
    else:
        version_flags = ["--experimental-initial-corrupt-check=true",
                         "--experimental-watch-progress-notify-interval=5s"]
    join = ["--initial-cluster-state=existing"] if spec.stacked_etcd and len(joined) > 1 else []
    command = sorted(
        [
            f"--advertise-client-urls=https://{spec.hostport(ec)}",
            f"--cert-file={PKI}/etcd/server.crt",
            "--client-cert-auth=true",
            "--data-dir=/var/lib/etcd",
            f"--initial-advertise-peer-urls=https://{spec.hostport(ep)}",
            f"--initial-cluster={cluster}",
            f"--key-file={PKI}/etcd/server.key",
            f"--listen-client-urls=https://{spec.hostport(ec)}",
            f"--listen-metrics-urls=http://{spec.hostport(em)}",
            f"--listen-peer-urls=https://{spec.hostport(ep)}",
            f"--name={spec.node}",
            f"--peer-cert-file={PKI}/etcd/peer.crt",
            "--peer-client-cert-auth=true",
            f"--peer-key-file={PKI}/etcd/peer.key",
            f"--peer-trusted-ca-file={PKI}/etcd/ca.crt",
            "--snapshot-count=10000",
            f"--trusted-ca-file={PKI}/etcd/ca.crt",
        ]
        + version_flags
        + join
    )
    if spec.release.etcd_health_probes:
        probes = _probes(spec, spec.loopback, em, "HTTP", "/health?exclude=NOSPACE&serializable=true", "",
                         "/health?serializable=false")
    else:
        probes = _probes(spec, spec.loopback, em, "HTTP", "/livez", "/readyz", "/readyz")
    return _pod(
        "etcd",
        {"kubeadm.kubernetes.io/etcd.advertise-client-urls": f"https://{spec.hostport(ec)}"},
        {
            "command": ["etcd", *command],
            "image": f"registry.k8s.io/etcd:{spec.release.etcd_image}",
            "imagePullPolicy": "IfNotPresent",
            "name": "etcd",
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
            **probes,
        },
        [
            _vol(spec, "etcd-certs", f"{PKI}/etcd", "DirectoryOrCreate", ro=False),
            _vol(spec, "etcd-data", "/var/lib/etcd", "DirectoryOrCreate", ro=False),
        ],
    )


def manifests(spec: SeedSpec) -> dict[str, Obj]:
    """The four control-plane manifests of one master."""
    return {
        "etcd": etcd(spec),
        "kube-apiserver": apiserver(spec),
        "kube-controller-manager": controller_manager(spec),
        "kube-scheduler": scheduler(spec),
    }


def write_seeds(mdir: Path, spec: SeedSpec) -> bool:
    """Write the manifests unless the dir already has content; True if written."""
    mdir.mkdir(parents=True, exist_ok=True)
    if any(mdir.iterdir()):
        return False
    for comp, pod in manifests(spec).items():
        tmp = mdir / f".{comp}.yaml.tmp"
        tmp.write_text(yaml.safe_dump(pod, sort_keys=False, default_flow_style=False))
        tmp.rename(mdir / f"{comp}.yaml")
    return True

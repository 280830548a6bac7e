"""kubeadm v1.30-style static pod manifests that seed each lab master's manifests dir.

They follow kubeadm's layout (namespace kube-system, labels component/tier, system-node-critical,
hostNetwork, hostPath volumes, probes, resources) but every port is a free one picked at seed time,
because the real ports (6443, 10257, 10259, 2379-2381) may be taken or needed by a second lab.
Flags (--secure-port, --listen-metrics-urls, ...) and probes are kept consistent with each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
K8S = "v1.30.4"
ETCD_IMAGE = "registry.k8s.io/etcd:3.5.12-0"


def _probe(path: str, port: int, scheme: str, threshold: int, delay: int = 10, period: int = 10) -> Obj:
    p: Obj = {
        "failureThreshold": threshold,
        "httpGet": {"host": "127.0.0.1", "path": path, "port": port, "scheme": scheme},
        "periodSeconds": period,
        "timeoutSeconds": 15,
    }
    if delay:
        p["initialDelaySeconds"] = delay
    return p


def _vol(name: str, path: str, typ: str, mount: str = "", ro: bool = True) -> tuple[Obj, Obj]:
    m: Obj = {"mountPath": mount or path, "name": name}
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
            "containers": [container],
            "hostNetwork": True,
            "priority": 2000001000,
            "priorityClassName": "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [v for v, _ in vols],
        },
        "status": {},
    }


def _ca_vols() -> list[tuple[Obj, Obj]]:
    return [
        _vol("ca-certs", "/etc/ssl/certs", "DirectoryOrCreate"),
        _vol("etc-ca-certificates", "/etc/ca-certificates", "DirectoryOrCreate"),
        _vol("k8s-certs", "/etc/kubernetes/pki", "DirectoryOrCreate"),
        _vol("usr-local-share-ca-certificates", "/usr/local/share/ca-certificates", "DirectoryOrCreate"),
        _vol("usr-share-ca-certificates", "/usr/share/ca-certificates", "DirectoryOrCreate"),
    ]


def manifests(node: str, ports: dict[str, int], members: dict[str, dict[str, int]]) -> dict[str, Obj]:
    """The four control-plane manifests of one master; ``members`` maps every master to its ports."""
    api, kcm, sch = ports["apiserver"], ports["controller-manager"], ports["scheduler"]
    ec, ep, em = ports["etcd-client"], ports["etcd-peer"], ports["etcd-metrics"]
    pki = "/etc/kubernetes/pki"
    apiserver = _pod(
        "kube-apiserver",
        {"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": f"127.0.0.1:{api}"},
        {
            "command": [
                "kube-apiserver",
                "--advertise-address=127.0.0.1",
                "--allow-privileged=true",
                "--authorization-mode=Node,RBAC",
                f"--client-ca-file={pki}/ca.crt",
                "--enable-admission-plugins=NodeRestriction",
                "--enable-bootstrap-token-auth=true",
                f"--etcd-cafile={pki}/etcd/ca.crt",
                f"--etcd-certfile={pki}/apiserver-etcd-client.crt",
                f"--etcd-keyfile={pki}/apiserver-etcd-client.key",
                "--etcd-servers="
                + ",".join(f"https://127.0.0.1:{m['etcd-client']}" for m in members.values()),
                f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
                f"--kubelet-client-key={pki}/apiserver-kubelet-client.key",
                "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
                f"--proxy-client-cert-file={pki}/front-proxy-client.crt",
                f"--proxy-client-key-file={pki}/front-proxy-client.key",
                "--requestheader-allowed-names=front-proxy-client",
                f"--requestheader-client-ca-file={pki}/front-proxy-ca.crt",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-username-headers=X-Remote-User",
                f"--secure-port={api}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki}/sa.pub",
                f"--service-account-signing-key-file={pki}/sa.key",
                "--service-cluster-ip-range=10.96.0.0/12",
                f"--tls-cert-file={pki}/apiserver.crt",
                f"--tls-private-key-file={pki}/apiserver.key",
            ],
            "image": f"registry.k8s.io/kube-apiserver:{K8S}",
            "imagePullPolicy": "IfNotPresent",
            "livenessProbe": _probe("/livez", api, "HTTPS", 8),
            "name": "kube-apiserver",
            "readinessProbe": _probe("/readyz", api, "HTTPS", 3, delay=0, period=1),
            "resources": {"requests": {"cpu": "250m"}},
            "startupProbe": _probe("/livez", api, "HTTPS", 24),
        },
        _ca_vols(),
    )
    kcm_conf = "/etc/kubernetes/controller-manager.conf"
    controller_manager = _pod(
        "kube-controller-manager",
        {},
        {
            "command": [
                "kube-controller-manager",
                "--allocate-node-cidrs=true",
                f"--authentication-kubeconfig={kcm_conf}",
                f"--authorization-kubeconfig={kcm_conf}",
                "--bind-address=127.0.0.1",
                f"--client-ca-file={pki}/ca.crt",
                "--cluster-cidr=10.244.0.0/16",
                "--cluster-name=kubernetes",
                f"--cluster-signing-cert-file={pki}/ca.crt",
                f"--cluster-signing-key-file={pki}/ca.key",
                "--controllers=*,bootstrapsigner,tokencleaner",
                f"--kubeconfig={kcm_conf}",
                "--leader-elect=true",
                f"--requestheader-client-ca-file={pki}/front-proxy-ca.crt",
                f"--root-ca-file={pki}/ca.crt",
                f"--secure-port={kcm}",
                f"--service-account-private-key-file={pki}/sa.key",
                "--service-cluster-ip-range=10.96.0.0/12",
                "--use-service-account-credentials=true",
            ],
            "image": f"registry.k8s.io/kube-controller-manager:{K8S}",
            "imagePullPolicy": "IfNotPresent",
            "livenessProbe": _probe("/healthz", kcm, "HTTPS", 8),
            "name": "kube-controller-manager",
            "resources": {"requests": {"cpu": "200m"}},
            "startupProbe": _probe("/healthz", kcm, "HTTPS", 24),
        },
        _ca_vols()[:2]
        + [
            _vol(
                "flexvolume-dir",
                "/usr/libexec/kubernetes/kubelet-plugins/volume/exec",
                "DirectoryOrCreate",
                ro=False,
            )
        ]
        + _ca_vols()[2:3]
        + [_vol("kubeconfig", kcm_conf, "FileOrCreate")]
        + _ca_vols()[3:],
    )
    sch_conf = "/etc/kubernetes/scheduler.conf"
    scheduler = _pod(
        "kube-scheduler",
        {},
        {
            "command": [
                "kube-scheduler",
                f"--authentication-kubeconfig={sch_conf}",
                f"--authorization-kubeconfig={sch_conf}",
                "--bind-address=127.0.0.1",
                f"--kubeconfig={sch_conf}",
                "--leader-elect=true",
                f"--secure-port={sch}",
            ],
            "image": f"registry.k8s.io/kube-scheduler:{K8S}",
            "imagePullPolicy": "IfNotPresent",
            "livenessProbe": _probe("/healthz", sch, "HTTPS", 8),
            "name": "kube-scheduler",
            "resources": {"requests": {"cpu": "100m"}},
            "startupProbe": _probe("/healthz", sch, "HTTPS", 24),
        },
        [_vol("kubeconfig", sch_conf, "FileOrCreate")],
    )
    cluster = ",".join(f"{n}=https://127.0.0.1:{m['etcd-peer']}" for n, m in members.items())
    etcd = _pod(
        "etcd",
        {"kubeadm.kubernetes.io/etcd.advertise-client-urls": f"https://127.0.0.1:{ec}"},
        {
            "command": [
                "etcd",
                f"--advertise-client-urls=https://127.0.0.1:{ec}",
                f"--cert-file={pki}/etcd/server.crt",
                "--client-cert-auth=true",
                "--data-dir=/var/lib/etcd",
                "--experimental-initial-corrupt-check=true",
                "--experimental-watch-progress-notify-interval=5s",
                f"--initial-advertise-peer-urls=https://127.0.0.1:{ep}",
                f"--initial-cluster={cluster}",
                f"--key-file={pki}/etcd/server.key",
                f"--listen-client-urls=https://127.0.0.1:{ec}",
                f"--listen-metrics-urls=http://127.0.0.1:{em}",
                f"--listen-peer-urls=https://127.0.0.1:{ep}",
                f"--name={node}",
                f"--peer-cert-file={pki}/etcd/peer.crt",
                "--peer-client-cert-auth=true",
                f"--peer-key-file={pki}/etcd/peer.key",
                f"--peer-trusted-ca-file={pki}/etcd/ca.crt",
                "--snapshot-count=10000",
                f"--trusted-ca-file={pki}/etcd/ca.crt",
            ],
            "image": ETCD_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "livenessProbe": _probe("/livez", em, "HTTP", 8),
            "name": "etcd",
            "readinessProbe": _probe("/readyz", em, "HTTP", 3, delay=0, period=1),
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
            "startupProbe": _probe("/readyz", em, "HTTP", 24),
        },
        [
            _vol("etcd-certs", f"{pki}/etcd", "DirectoryOrCreate", ro=False),
            _vol("etcd-data", "/var/lib/etcd", "DirectoryOrCreate", ro=False),
        ],
    )
    return {
        "etcd": etcd,
        "kube-apiserver": apiserver,
        "kube-controller-manager": controller_manager,
        "kube-scheduler": scheduler,
    }


def write_seeds(mdir: Path, node: str, ports: dict[str, int], members: dict[str, dict[str, int]]) -> bool:
    """Write the manifests unless the dir already has content; True if written."""
    mdir.mkdir(parents=True, exist_ok=True)
    if any(mdir.iterdir()):
        return False
    for comp, pod in manifests(node, ports, members).items():
        tmp = mdir / f".{comp}.yaml.tmp"
        tmp.write_text(yaml.safe_dump(pod, sort_keys=False, default_flow_style=False))
        tmp.rename(mdir / f"{comp}.yaml")
    return True

"""Files a kubeadm control-plane node has, laid out under the lab dir so tools can find them.

* ``DIR/root-<node>/`` stands for the node's ``/``: ``etc/kubernetes/pki/...`` (fake PEM
  certificates and keys under kubeadm's names, cmd/kubeadm/app/constants/constants.go),
  ``etc/kubernetes/{admin,super-admin,controller-manager,scheduler,kubelet}.conf``,
  ``etc/kubernetes/manifests`` (the node's static pod manifests dir, so its parent is the node's own
  ``/etc/kubernetes`` as on a kubeadm node, not a directory all masters share) and the
  directories the seeds mount (``etc/ssl/certs``, ``var/lib/etcd``, ...). Every hostPath volume of
  the seeded manifests points in here, so ``--tls-cert-file=/etc/kubernetes/pki/apiserver.crt``
  maps, through volumeMounts and hostPath, to an existing file. ``super-admin.conf`` exists only on
  the first master (the ``kubeadm init`` node, real-node-facts.md).
* ``DIR/kubelet-<node>/`` stands for ``/var/lib/kubelet``: ``config.yaml`` (a KubeletConfiguration
  as kubeadm writes it, cmd/kubeadm/app/componentconfigs/kubelet.go, with ``staticPodPath`` = the
  node's manifests dir above and ``fileCheckFrequency`` = the lab's re-list period) and
  ``kubeadm-flags.env``, which carries ``--hostname-override`` only when the node name differs from
  the host name (kubeadm ``buildKubeletArgs``; real-node-facts.md, "Node identity").

The kubeconfigs carry no credentials: the lab serves plain HTTP and trusts every caller.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

PKI_PAIRS = (
    "ca", "apiserver", "apiserver-kubelet-client", "apiserver-etcd-client", "front-proxy-ca",
    "front-proxy-client", "etcd/ca", "etcd/server", "etcd/peer", "etcd/healthcheck-client",
)
#: Host directories the seeded manifests mount (DirectoryOrCreate in kubeadm's manifests).
MOUNTED_DIRS = (
    "etc/ssl/certs", "etc/ca-certificates", "usr/local/share/ca-certificates", "usr/share/ca-certificates",
    "usr/libexec/kubernetes/kubelet-plugins/volume/exec", "var/lib/etcd",
)
CONTAINERD_SOCKET = "unix:///var/run/containerd/containerd.sock"


def root_dir(lab_dir: Path, node: str) -> Path:
    """The directory that plays the node's ``/``."""
    return lab_dir / f"root-{node}"


def manifests_dir(lab_dir: Path, node: str) -> Path:
    """The node's static pod manifests dir (kubeadm's ``/etc/kubernetes/manifests``) inside its root.

    Its parent is the node's own ``/etc/kubernetes``: tools that keep files next to the manifests dir
    (``cpctl scheduler add`` writes its config there) then see one such directory per master."""
    return root_dir(lab_dir, node) / "etc/kubernetes/manifests"


def legacy_manifests_dirs(lab_dir: Path) -> list[Path]:
    """``DIR/manifests-<node>`` dirs an older lab left in ``lab_dir`` (before the manifests dir moved
    into each node's root); such a lab dir is not migrated."""
    return sorted(p for p in lab_dir.glob("manifests-*") if p.is_dir())


def kubelet_dir(lab_dir: Path, node: str) -> Path:
    """The directory that plays the node's ``/var/lib/kubelet``."""
    return lab_dir / f"kubelet-{node}"


def on_node(root: Path, path: str) -> str:
    """The lab path of the node path ``path`` (``/etc/kubernetes/pki`` -> ``ROOT/etc/kubernetes/pki``)."""
    return str(root / path.lstrip("/"))


def _pem(kind: str, label: str) -> str:
    """A syntactically PEM block whose payload says what it stands for (not a usable key)."""
    body = base64.b64encode(f"cpctl lab fake {kind}: {label} ".encode() * 4).decode()
    lines = [body[i: i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n"


def kubeconfig(server: str, user: str, cluster: str = "kubernetes") -> str:
    """A kubeadm-style kubeconfig text for ``user`` talking to ``server``."""
    context = f"{user}@{cluster}"
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
        "users": [{"name": user, "user": {}}],
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def write_root(root: Path, servers: dict[str, str], init_node: bool) -> bool:
    """Create the node's pki and kubeconfigs once; False if the root already exists (left as it is).

    ``servers``: ``lb`` (the control-plane endpoint), ``local`` (this node's apiserver) and
    ``kubelet`` (what the kubelet talks to: ``local`` in local mode, else ``lb``).
    """
    if root.exists():
        return False
    pki = root / "etc/kubernetes/pki"
    (pki / "etcd").mkdir(parents=True)
    for name in PKI_PAIRS:
        (pki / f"{name}.crt").write_text(_pem("CERTIFICATE", name))
        key = pki / f"{name}.key"
        key.write_text(_pem("RSA PRIVATE KEY", name))
        key.chmod(0o600)
    (pki / "sa.pub").write_text(_pem("PUBLIC KEY", "sa"))
    (pki / "sa.key").write_text(_pem("RSA PRIVATE KEY", "sa"))
    (pki / "sa.key").chmod(0o600)
    for rel in MOUNTED_DIRS:
        (root / rel).mkdir(parents=True, exist_ok=True)
    etc = root / "etc/kubernetes"
    confs = {
        "admin.conf": (servers["lb"], "kubernetes-admin"),
        "controller-manager.conf": (servers["local"], "system:kube-controller-manager"),
        "scheduler.conf": (servers["local"], "system:kube-scheduler"),
        "kubelet.conf": (servers["kubelet"], "system:node"),
    }
    if init_node:
        confs["super-admin.conf"] = (servers["lb"], "kubernetes-super-admin")
    for name, (server, user) in confs.items():
        (etc / name).write_text(kubeconfig(server, user))
        (etc / name).chmod(0o600)
    (root / "etc/default").mkdir(parents=True, exist_ok=True)
    (root / "etc/default/kubelet").write_text("KUBELET_EXTRA_ARGS=\n")
    return True


def kubelet_config(static_pod_path: str, file_check_frequency: str, ca_file: str, ipv6: bool) -> dict[str, Any]:
    """The KubeletConfiguration kubeadm writes to /var/lib/kubelet/config.yaml (v1.30-v1.34)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"cacheTTL": "0s", "enabled": True},
            "x509": {"clientCAFile": ca_file},
        },
        "authorization": {"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"}},
        "cgroupDriver": "systemd",
        "clusterDNS": ["fd00:10:96::a" if ipv6 else "10.96.0.10"],
        "clusterDomain": "cluster.local",
        "containerRuntimeEndpoint": "",
        "cpuManagerReconcilePeriod": "0s",
        "evictionPressureTransitionPeriod": "0s",
        "fileCheckFrequency": file_check_frequency,
        "healthzBindAddress": "::1" if ipv6 else "127.0.0.1",
        "healthzPort": 10248,
        "httpCheckFrequency": "0s",
        "imageMaximumGCAge": "0s",
        "imageMinimumGCAge": "0s",
        "kind": "KubeletConfiguration",
        "logging": {
            "flushFrequency": 0,
            "options": {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}},
            "verbosity": 0,
        },
        "memorySwap": {},
        "nodeStatusReportFrequency": "0s",
        "nodeStatusUpdateFrequency": "0s",
        "rotateCertificates": True,
        "runtimeRequestTimeout": "0s",
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "staticPodPath": static_pod_path,
        "streamingConnectionIdleTimeout": "0s",
        "syncFrequency": "0s",
        "volumeStatsAggPeriod": "0s",
    }


def kubeadm_flags(pause_image: str, hostname_override: str = "") -> str:
    """kubeadm-flags.env: the kubelet flags kubeadm sets, sorted by name as kubeadm writes them."""
    args = {
        "container-runtime-endpoint": CONTAINERD_SOCKET,
        "pod-infra-container-image": f"registry.k8s.io/pause:{pause_image}",
    }
    if hostname_override:
        args["hostname-override"] = hostname_override
    text = " ".join(f"--{k}={v}" for k, v in sorted(args.items()))
    return f'KUBELET_KUBEADM_ARGS="{text}"\n'


def write_kubelet_dir(kdir: Path, config: dict[str, Any], flags_env: str) -> None:
    """(Re)write the kubelet's config.yaml and kubeadm-flags.env (they describe the running lab)."""
    kdir.mkdir(parents=True, exist_ok=True)
    for name, text in (("config.yaml", yaml.safe_dump(config, sort_keys=False)), ("kubeadm-flags.env", flags_env)):
        tmp = kdir / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, kdir / name)


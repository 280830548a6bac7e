"""Files a kubeadm control-plane node has, laid out under the lab dir so tools can find them.

* ``DIR/root-<node>/`` stands for the node's ``/``: ``etc/kubernetes/pki/...`` (real certificates
  and keys under kubeadm's names, cmd/kubeadm/app/constants/constants.go, made by :mod:`.pki`),
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

The kubeconfigs carry real client certificates (embedded; kubelet.conf names a file in
``DIR/kubelet-<node>/pki``), but the lab's API serves plain HTTP and trusts every caller: the
certificates are there for ``cpctl certs`` to read, and for the components' TLS endpoints.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import yaml
from cryptography.hazmat.primitives import serialization

from . import pki

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


def write_root(root: Path, info: pki.NodeInfo,
               cas: Optional[dict[str, pki.Issued]] = None) -> Optional[dict[str, pki.Issued]]:
    """Create the node's pki and kubeconfigs once: real certificates signed by ``cas`` (made when
    None: the first master's CAs are every master's). The CAs, or None if the root already exists
    (left as it is).

    ``info.servers``: ``lb`` (the control-plane endpoint), ``local`` (this node's apiserver) and
    ``kubelet`` (what the kubelet talks to: ``local`` in local mode, else ``lb``).
    """
    if root.exists():
        return None
    etc = root / "etc/kubernetes"
    (etc / "pki/etcd").mkdir(parents=True)
    made = pki.write_node_pki(etc, info, cas)
    sa = pki.new_key()
    (etc / "pki/sa.key").write_bytes(pki.key_pem(sa))
    (etc / "pki/sa.key").chmod(0o600)
    (etc / "pki/sa.pub").write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for rel in MOUNTED_DIRS:
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / "etc/default").mkdir(parents=True, exist_ok=True)
    (root / "etc/default/kubelet").write_text("KUBELET_EXTRA_ARGS=\n")
    return made


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


"""Where a path a container sees lives on the node: through its volumeMounts and hostPath volumes.

kubeadm mounts every file a control-plane component reads (certificates, kubeconfigs, configs) with
a hostPath volume whose mountPath is usually the same path, but not always (and not in every
setup): to look at the file a flag like ``--kubeconfig=/etc/kubernetes/scheduler.conf`` names, cpctl
translates the container path the way the kubelet mounts it. The longest mountPath that contains
the path wins.

``under_root`` finds a node path under the directory that holds the node's ``/`` (``--node-root``:
``/`` on a real node; a lab node's root directory in the lab, whose hostPaths are node paths too).
"""

from __future__ import annotations

from typing import Any, Dict, Optional


def mount_of(container: Dict[str, Any], path: str) -> Optional[Dict[str, Any]]:
    """The volumeMount of ``container`` that holds ``path`` (the longest mountPath containing it)."""
    best: Optional[Dict[str, Any]] = None
    for mount in container.get("volumeMounts") or []:
        if not isinstance(mount, dict) or not isinstance(mount.get("mountPath"), str):
            continue
        mount_path = mount["mountPath"].rstrip("/") or "/"
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            if best is None or len(mount_path) > len(best["mountPath"].rstrip("/")):
                best = mount
    return best


def host_path_of(pod: Dict[str, Any], container: Dict[str, Any], path: str) -> Optional[str]:
    """The node path behind ``path`` inside ``container``; None when no hostPath volume holds it."""
    best = mount_of(container, path)
    if best is None:
        return None
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(volume, dict) or volume.get("name") != best.get("name"):
            continue
        host = (volume.get("hostPath") or {}).get("path")
        if not isinstance(host, str) or not host:
            return None
        rest = path[len(best["mountPath"].rstrip("/")):]
        return host.rstrip("/") + rest if rest else host
    return None


def under_root(root: str, path: str) -> str:
    """Where the node path ``path`` is, with the node's ``/`` at ``root``. A path already inside
    ``root`` (written by a tool that knew where the root lies) is taken as it is."""
    if not root or root == "/" or not path.startswith("/"):
        return path
    base = root.rstrip("/")
    if path == base or path.startswith(base + "/"):
        return path
    return base + path


def node_path(root: str, path: str) -> str:
    """The node path of ``path``: the inverse of :func:`under_root` (a path inside ``root`` loses the
    prefix; any other path is a node path already)."""
    if not root or root == "/" or not path.startswith("/"):
        return path
    base = root.rstrip("/")
    if path == base:
        return "/"
    return path[len(base):] if path.startswith(base + "/") else path

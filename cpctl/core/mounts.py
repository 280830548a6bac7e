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

from typing import List, Mapping, Optional, Tuple


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _items(value: object) -> List[object]:
    return value if isinstance(value, list) else []


def _best_mount(container: Mapping[str, object], path: str) -> Optional[Tuple[Mapping[str, object], str]]:
    """(volumeMount, its mountPath) of ``container`` holding ``path``: the longest mountPath containing it."""
    best: Optional[Tuple[Mapping[str, object], str]] = None
    for mount in _items(container.get("volumeMounts")):
        written = mount.get("mountPath") if isinstance(mount, dict) else None
        if not isinstance(mount, dict) or not isinstance(written, str):
            continue
        mount_path = written.rstrip("/") or "/"
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            if best is None or len(mount_path) > len(best[1].rstrip("/")):
                best = (mount, written)
    return best


def mount_of(container: Mapping[str, object], path: str) -> Optional[Mapping[str, object]]:
    """The volumeMount of ``container`` that holds ``path`` (the longest mountPath containing it)."""
    best = _best_mount(container, path)
    return best[0] if best is not None else None


def host_path_of(pod: Mapping[str, object], container: Mapping[str, object], path: str) -> Optional[str]:
    """The node path behind ``path`` inside ``container``; None when no hostPath volume holds it."""
    best = _best_mount(container, path)
    if best is None:
        return None
    mount, mount_path = best
    for volume in _items(_mapping(pod.get("spec")).get("volumes")):
        if not isinstance(volume, dict) or volume.get("name") != mount.get("name"):
            continue
        host = _mapping(volume.get("hostPath")).get("path")
        if not isinstance(host, str) or not host:
            return None
        rest = path[len(mount_path.rstrip("/")):]
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

"""Companion files: files on the node a manifest's flags name (an audit policy, an EncryptionConfiguration,
an AdmissionConfiguration), changed together with the manifest.

``--with-file NODE_PATH=LOCAL_FILE`` reads LOCAL_FILE once on the operator's side (a regular file of at
most 1 MiB, not a symlink), checks NODE_PATH (absolute, below the directory holding the manifests dir
-- kubeadm's /etc/kubernetes -- unless ``--force``), and checks that the new manifest mounts it
(a hostPath volume covering NODE_PATH, mounted into a container) before anything changes. The file
is then written, mode 0600, by the same journaled change that writes the manifest
(:func:`cpctl.core.replace.replace_change`), its previous bytes kept with the same revision, so a
rollback (automatic or ``cpctl rollback``) puts both back.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict

import yaml

from cpctl.core import manifests, mounts
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host

MAX_COMPANION_BYTES = 1 << 20
MODE = 0o600                                 # the mode cpctl writes a companion file with
KUBE_DIR = "/etc/kubernetes"                 # what a flag value names inside the container (kubeadm's layout)
# How ``flags --mount`` mounts a path: a file the component reads (read-only, type File), a file it
# writes (its directory, writable, DirectoryOrCreate), a directory it writes (itself, writable).
READ, WRITES_FILE, WRITES_DIR = "read", "writes-file", "writes-dir"
MIN_WRITABLE_DEPTH = 2      # a writable hostPath is never /, /etc, /var, /x: at least /var/log, /etc/kubernetes


class CompanionDict(TypedDict):
    """A companion file in output and history: node path, local source, sha256 and size (None: absent)."""

    path: str
    source: str
    checksum: Optional[str]
    size: Optional[int]


@dataclass
class Companion:
    """One companion file: its path on the node and its new bytes (None: the file is to be absent)."""

    path: str
    data: Optional[bytes]
    source: str = ""

    def to_dict(self) -> CompanionDict:
        return {"path": self.path, "source": self.source,
                "checksum": manifests.checksum(self.data) if self.data is not None else None,
                "size": len(self.data) if self.data is not None else None}


def parse_with_file(text: str) -> Tuple[str, str]:
    """(node path, local file) from ``NODE_PATH=LOCAL_FILE``; a usage error otherwise."""
    node_path, has, local = text.partition("=")
    if not has or not node_path or not local:
        raise CpctlError("--with-file %r: expected NODE_PATH=LOCAL_FILE" % text, ExitCode.USAGE)
    if not node_path.startswith("/") or "\0" in node_path or \
            any(part in (".", "..") for part in node_path.split("/")) or node_path.endswith("/"):
        raise CpctlError("--with-file %s: the node path must be an absolute file path without . or .. parts"
                         % node_path, ExitCode.USAGE)
    return os.path.normpath(node_path), local


def read_local(node_path: str, local: str) -> Companion:
    """The companion's bytes from ``local`` (read once, here): a regular file of at most 1 MiB, not
    a symlink; anything else refused with one line, nothing changed."""
    try:
        info = os.lstat(local)
    except OSError as exc:
        raise CpctlError("--with-file %s=%s: cannot read the local file: %s" % (node_path, local, exc.strerror or exc),
                         ExitCode.USAGE) from None
    if stat.S_ISLNK(info.st_mode):
        raise CpctlError("--with-file %s=%s: the local file is a symlink: name the file itself" % (node_path, local),
                         ExitCode.USAGE)
    if not stat.S_ISREG(info.st_mode):
        raise CpctlError("--with-file %s=%s: the local file is not a regular file" % (node_path, local), ExitCode.USAGE)
    if info.st_size > MAX_COMPANION_BYTES:
        raise CpctlError("--with-file %s=%s: the local file is larger than 1 MiB" % (node_path, local), ExitCode.USAGE)
    try:
        fd = os.open(local, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_COMPANION_BYTES + 1)
    except OSError as exc:
        raise CpctlError("--with-file %s=%s: cannot read the local file: %s" % (node_path, local, exc.strerror or exc),
                         ExitCode.USAGE) from None
    if len(data) > MAX_COMPANION_BYTES:
        raise CpctlError("--with-file %s=%s: the local file is larger than 1 MiB" % (node_path, local), ExitCode.USAGE)
    return Companion(node_path, data, local)


def read_all(texts: Sequence[str]) -> List[Companion]:
    """Every ``--with-file`` read once (a node path given twice is a usage error)."""
    found: List[Companion] = []
    for text in texts:
        node_path, local = parse_with_file(text)
        if any(c.path == node_path for c in found):
            raise CpctlError("--with-file %s given twice" % node_path, ExitCode.USAGE)
        found.append(read_local(node_path, local))
    return found


def on_node(companions: Sequence[Companion], root: str) -> List[Companion]:
    """The companions with their paths as cpctl reaches them: below the node's root ``root``
    (``--node-root``, :func:`cpctl.core.mounts.under_root`; unchanged on a real node, where it is /)."""
    return [Companion(mounts.under_root(root, c.path), c.data, c.source) for c in companions]


def kube_dir_of(manifests_dir: str) -> str:
    """The node's /etc/kubernetes: the directory holding the manifests dir."""
    return os.path.dirname(os.path.normpath(manifests_dir)) or "/"


def check_places(host: Host, companions: Sequence[Companion], manifests_dir: str, state_dir: str) -> None:
    """Refuse (before anything changes, exit 4; ``--force`` does not override) a companion file outside
    the node's /etc/kubernetes, in the manifests dir or the state dir, one of kubeadm's credentials
    (``journal.companion_place``: the same rule the journal applies), or below a directory that is a
    symlink on the node (the write would land elsewhere)."""
    from cpctl.core import journal
    roots = journal.allowed_roots(manifests_dir, state_dir)
    for companion in companions:
        why = journal.companion_place(companion.path, roots)
        if why is not None:
            raise CpctlError("--with-file %s: %s: cpctl writes companion files only below %s, outside the "
                             "manifests dir; nothing changed" % (companion.path, why, roots[2]), ExitCode.REFUSED)
        link = journal.link_below(host, companion.path, roots[2])
        if link is not None:
            raise CpctlError("--with-file %s: %s is a symlink on the node (the file would land elsewhere): name the "
                             "real directory; nothing changed" % (companion.path, link), ExitCode.REFUSED)


def container_path(path: str, root: str) -> str:
    """Where a container sees the file cpctl reaches at ``path`` in kubeadm's layout: its node path
    (the hostPath), the same path inside the container."""
    return mounts.node_path(root, path)


def volume_name(path: str) -> str:
    """A volume name for ``path``: its last parts, lower-case, DNS-label safe."""
    parts = [p for p in path.split("/") if p][-2:]
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return (name or "companion")[:63].strip("-")


def _dicts(value: object) -> List[Dict[str, object]]:
    """The mappings in a list from a parsed manifest (anything else: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def mounted(pod: Mapping[str, object], node_path: str) -> bool:
    """Some container of ``pod`` sees ``node_path``: a hostPath volume covering it is mounted."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    volumes = {v.get("name"): host.get("path") for v in _dicts(spec.get("volumes"))
               for host in [v.get("hostPath")] if isinstance(host, dict)}
    for container in _dicts(spec.get("containers")):
        for mount in _dicts(container.get("volumeMounts")):
            host = volumes.get(mount.get("name")) if isinstance(mount, dict) else None
            if isinstance(host, str) and host and (node_path == host.rstrip("/") or
                                                   node_path.startswith(host.rstrip("/") + "/")):
                return True
    return False


def check_mounted(data: bytes, companions: Sequence[Companion], root: str, what: str,
                  flags: str = "cpctl flags") -> None:
    """Refuse (before anything changes) a new manifest that does not mount a companion file, naming the
    exact volume and mount to add."""
    pod = yaml.safe_load(data.decode("utf-8", "replace"))
    if not isinstance(pod, dict):
        return                                  # the manifest review says what is wrong with it
    for companion in companions:
        inside = container_path(companion.path, root)         # the node path: what a hostPath names
        if companion.data is None or mounted(pod, inside):
            continue
        name = volume_name(inside)
        raise CpctlError("%s: the manifest does not mount %s: add to spec.volumes {name: %s, hostPath: {path: %s, "
                         "type: File}} and to the container's volumeMounts {name: %s, mountPath: %s, readOnly: true} "
                         "(or use %s ... --mount); nothing changed"
                         % (what, inside, name, inside, name, inside, flags), ExitCode.REFUSED)


def add_mounts(data: bytes, container_index: int, paths: Sequence[Tuple[str, str, str]]) -> Tuple[bytes, List[str]]:
    """The manifest with a hostPath volume and a mount for each (container path, node path, kind) the
    container does not see yet, as narrow as the flag needs: a file it reads read-only (type File), the
    directory of a file it writes, or a directory it writes, writable (DirectoryOrCreate). A writable
    mount of a directory less than two levels deep (``/``, ``/etc``, ``/var``) is refused (exit 4).
    The new volumes and mounts are spliced into the text after the last ones there (comments and
    layout kept, ``flags.append_in_place``); only a manifest without volumes or mounts yet, or in a
    layout that allows no splice, is re-written as a whole (comments lost, said so): (bytes, what was
    added, one line each)."""
    pod = yaml.safe_load(data.decode("utf-8"))
    container = pod["spec"]["containers"][container_index]
    before = (len(pod["spec"].get("volumes") or []), len(container.get("volumeMounts") or []))
    said: List[str] = []
    for inside, node_path, kind in paths:
        writable = kind != READ
        if kind == WRITES_FILE:
            inside, node_path = os.path.dirname(inside), os.path.dirname(node_path)
        if writable and len([p for p in inside.split("/") if p]) < MIN_WRITABLE_DEPTH:
            raise CpctlError("--mount: %s would mount %s writable into the container (the whole of it): give the "
                             "flag a path in a directory of its own (e.g. /var/log/kubernetes/audit/audit.log); "
                             "nothing changed" % (inside if kind == WRITES_DIR else "a file directly in " + inside,
                                                  inside), ExitCode.REFUSED)
        if mounts.host_path_of(pod, container, inside) == node_path:
            continue
        name = volume_name(inside)
        taken = {v.get("name") for v in pod["spec"].get("volumes") or []}
        base, n = name, 2
        while name in taken:
            name, n = "%s-%d" % (base[:60], n), n + 1
        pod["spec"].setdefault("volumes", []).append(
            {"name": name, "hostPath": {"path": node_path, "type": "DirectoryOrCreate" if writable else "File"}})
        mount: Dict[str, object] = {"name": name, "mountPath": inside}
        if not writable:
            mount["readOnly"] = True
        container.setdefault("volumeMounts", []).append(mount)
        said.append("hostPath volume %s (%s) mounted at %s, %s" % (
            name, "DirectoryOrCreate" if writable else "File", inside, "writable" if writable else "read-only"))
    if not said:
        return data, said
    from cpctl.core.flags import append_in_place
    spliced = append_in_place(data, [(["spec", "volumes"], pod["spec"]["volumes"][before[0]:]),
                                     (["spec", "containers", container_index, "volumeMounts"],
                                      container["volumeMounts"][before[1]:])], pod)
    if spliced is not None:
        return spliced, said
    said.append("the file was re-written as a whole to add the mounts: comments are lost")
    return yaml.safe_dump(pod, default_flow_style=False, sort_keys=False).encode("utf-8"), said


def mount_wanted(sets: Sequence[Tuple[str, str]], companions: Sequence[Companion], root: str, binary: str = ""
                 ) -> List[Tuple[str, str, str]]:
    """(container path, node path, kind: READ, WRITES_FILE or WRITES_DIR) for each ``--set`` value that
    names an absolute path: written when the component's ``binary`` writes there (``knownflags``), a
    directory for its directory flags; the node path is the ``--with-file`` one ending with it, else
    the same path (kubeadm's layout: hostPaths are node paths; ``root`` is the node's root,
    :func:`cpctl.core.mounts.node_path`)."""
    from cpctl.core import knownflags
    placed = [container_path(c.path, root) for c in companions]
    written = set(knownflags.WRITE_PATH_FLAGS.get(binary, ())) | {"audit-log-path"}
    wanted = []
    for name, value in sets:
        if not value.startswith("/") or any(part in (".", "..") for part in value.split("/")):
            continue
        node_path = next((p for p in placed if p == value or p.endswith(value)), value)
        kind = READ if name not in written else WRITES_DIR if name in knownflags.WRITE_DIR_FLAGS else WRITES_FILE
        wanted.append((value.rstrip("/") or "/", node_path.rstrip("/") or "/", kind))
    return wanted

"""A change of a static pod's manifest as one typed value: every part it touches, and its inverse.

``apply``, ``edit``, ``flags`` and ``rollback`` build one :class:`Plan` from the decision code
(``ops.edits``: the review, then ``core.replace.replace_plan``, the journaled change the real run
applies) BEFORE anything is written. It lists:

* the manifest: its path, mode, bytes before and after (``FilePart``);
* each ``--with-file`` companion file: its path, the mode it is written with, its bytes before
  (None: absent) and after (None: removed);
* the hostPath mounts the new version adds (and whether each is writable);
* the ``--keep-in`` edit (``KeepPlan``: the ClusterConfiguration with the ``resourceVersion`` it was
  read at, or the kubeadm patch file);
* the revisions it records (the one keeping the bytes replaced, the one holding the bytes written).

``--dry-run`` prints it; the real run applies the journaled change it was made from. Its
:class:`Inverse` is computed when it is built (``Plan.inverse``): the previous manifest bytes, each
companion file's previous state ("absent" included), and the kept ClusterConfiguration or patch file
as a :mod:`cpctl.core.keptin` record - what the automatic rollback and the put-back after a signal
apply, and what ``rollback``, an unconfirmed revert and the recovery after a SIGKILL find kept (the
revision store holds the manifest and companion parts, ``keptin`` the kubeadm part, which is only put
back while the ConfigMap still holds cpctl's write: someone else's change since is left and named).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple, TypedDict

from cpctl.core import keptin, manifests
from cpctl.core import kubeadmconfig as kc
from cpctl.core.replace import text_diff


# --- the --keep-in parts (built by ops.keepin, carried by the Plan) -------------------------------------
@dataclass
class ConfigPlan:
    """The ClusterConfiguration change: the ConfigMap as read, and the texts before and after."""

    configmap: Dict[str, object]
    old: str
    new: str
    before: List[Tuple[str, str]]        # the section's extraArgs before (to undo)
    before_section: Dict[str, object] = field(default_factory=dict)   # extraArgs/extraVolumes/dataDir before

    @property
    def changed(self) -> bool:
        return self.old != self.new

    @property
    def resource_version(self) -> str:
        """The ConfigMap's resourceVersion when it was read (its write is conditional on it)."""
        meta = self.configmap.get("metadata")
        return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


@dataclass
class PatchPlan:
    """The patch file change: where, the bytes there now (None: no file) and the new bytes."""

    path: str
    old: Optional[bytes]
    new: bytes
    node_dir: str = ""                   # the dir as a path on the master (what kubeadm's --patches names)


@dataclass
class KeepPlan:
    """What ``--keep-in`` will write for one change of one component."""

    component: str
    section: str
    change: kc.FlagChange
    config: Optional[ConfigPlan] = None
    patch: Optional[PatchPlan] = None
    done: List[str] = field(default_factory=list)
    whole: Optional[kc.WholeChange] = None

    def diffs(self) -> str:
        out = []
        if self.config is not None and self.config.changed:
            out.append(kc.config_diff(self.config.old, self.config.new))
        if self.patch is not None and self.patch.new != (self.patch.old or b""):
            out.append(text_diff(self.patch.old or b"", self.patch.new, os.path.basename(self.patch.path)))
        return "\n".join(out)

    def to_dict(self) -> Dict[str, object]:
        return {"component": self.component, "section": self.section,
                "set": ["%s=%s" % nv for nv in self.change.sets], "unset": list(self.change.unsets),
                "kubeadm_config": None if self.config is None else {"changed": self.config.changed},
                "patch": None if self.patch is None else {"path": self.patch.path,
                                                          "changed": self.patch.new != (self.patch.old or b"")},
                "volumes": [] if self.whole is None else [str(v["name"]) for v in self.whole.volumes],
                "data_dir": None if self.whole is None else self.whole.data_dir,
                "done": list(self.done), "diff": self.diffs()}

    def warnings(self) -> List[str]:
        """What the operator must do for the kept change to last (a patch file works only with --patches)."""
        if self.patch is None:
            return []
        return ["the patch file %s works only when --patches %s is passed to EVERY later kubeadm upgrade apply, "
                "kubeadm upgrade node and kubeadm join (kubeadm remembers nothing between runs)"
                % (self.patch.path, self.patch.node_dir or os.path.dirname(self.patch.path))]


# --- the parts of a plan ------------------------------------------------------------------------------
class BytesDict(TypedDict):
    checksum: str
    size: int


class FileDict(TypedDict):
    path: str
    mode: str
    before: Optional[BytesDict]
    after: Optional[BytesDict]


def _bytes(data: Optional[bytes]) -> Optional[BytesDict]:
    return None if data is None else {"checksum": manifests.checksum(data), "size": len(data)}


@dataclass(frozen=True)
class FilePart:
    """One file a change writes: its node path, the mode it is written with, its bytes before
    (None: absent) and after (None: to be absent)."""

    path: str
    mode: int
    before: Optional[bytes]
    after: Optional[bytes]

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def inverse(self) -> "FilePart":
        return FilePart(self.path, self.mode, self.after, self.before)

    def to_dict(self) -> FileDict:
        return {"path": self.path, "mode": "%04o" % self.mode, "before": _bytes(self.before),
                "after": _bytes(self.after)}



class MountDict(TypedDict):
    volume: str
    host_path: str
    mount_path: str
    type: str
    writable: bool


@dataclass(frozen=True)
class MountPart:
    """A hostPath volume the new version mounts that the old one did not."""

    volume: str
    host_path: str
    mount_path: str
    type: str
    writable: bool

    def to_dict(self) -> MountDict:
        return {"volume": self.volume, "host_path": self.host_path, "mount_path": self.mount_path,
                "type": self.type, "writable": self.writable}



def _dicts(value: object) -> List[Dict[str, object]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _host_mounts(pod: Mapping[str, object]) -> List[MountPart]:
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    volumes = {str(v.get("name")): host for v in _dicts(spec.get("volumes"))
               for host in [v.get("hostPath")] if isinstance(host, dict)}
    found = []
    for container in _dicts(spec.get("containers")) + _dicts(spec.get("initContainers")):
        for mount in _dicts(container.get("volumeMounts")):
            host = volumes.get(str(mount.get("name")))
            if host is None:
                continue
            found.append(MountPart(str(mount.get("name")), str(host.get("path") or ""), str(mount.get("mountPath")),
                                   str(host.get("type") or ""), mount.get("readOnly") is not True))
    return found


def mounts_added(old: Mapping[str, object], new: Mapping[str, object]) -> List[MountPart]:
    """The hostPath mounts of ``new`` that ``old`` does not have (same volume, path, mount point, type
    and writability), in the new manifest's order."""
    had = set(_host_mounts(old))
    seen: List[MountPart] = []
    for part in _host_mounts(new):
        if part not in had and part not in seen:
            seen.append(part)
    return seen


# --- the plan and its inverse -------------------------------------------------------------------------
@dataclass(frozen=True)
class Inverse:
    """What undoes a :class:`Plan`: the manifest's and each companion file's previous state (the
    revision ``revision`` keeps them), and the ``--keep-in`` parts as the records ``core.keptin``
    undoes - only over cpctl's own write (resourceVersion, bytes), filled in as they are written."""

    manifest: FilePart
    companions: Tuple[FilePart, ...]
    revision: Optional[int]
    config: Optional[keptin.KeptConfig] = None
    patch: Optional[keptin.KeptPatch] = None

    def to_dict(self) -> Dict[str, object]:
        return {"manifest": self.manifest.to_dict(), "companions": [c.to_dict() for c in self.companions],
                "revision": self.revision,
                "kubeadm_config": None if self.config is None else {
                    "namespace": self.config.namespace, "name": self.config.name, "key": self.config.key,
                    "only_over": "the resourceVersion cpctl's write produces"},
                "patch": None if self.patch is None else {"path": self.patch.path,
                                                          "before": _bytes(self.patch.before)}}



@dataclass
class Plan:
    """Every part of one manifest change (see the module), and its inverse, computed when it is built."""

    node: str
    component: str
    file: str
    action: str
    op: str                              # the journaled change's id (the --keep-in records carry it)
    effect: str                          # what the kubelet does: keeps, in-place, new-pod
    manifest: FilePart
    companions: List[FilePart] = field(default_factory=list)
    mounts: List[MountPart] = field(default_factory=list)
    revision: Optional[int] = None       # the revision that keeps the bytes replaced
    new_revision: Optional[int] = None   # the revision that holds the bytes written
    keep: Optional[KeepPlan] = None
    parked: bool = False
    inverse: Inverse = field(init=False)

    def __post_init__(self) -> None:
        self.inverse = self._inverse()

    def _inverse(self) -> Inverse:
        previous, checksum = manifests.checksum(self.manifest.before or b""), manifests.checksum(
            self.manifest.after or b"")
        config = patch = None
        keep = self.keep
        if keep is not None and keep.config is not None and keep.config.changed:
            config = keptin.KeptConfig(self.op, self.component, self.file, previous, checksum, kc.NAMESPACE, kc.NAME,
                                       kc.KEY, keep.config.old, keep.config.new)
        if keep is not None and keep.patch is not None and keep.patch.new != (keep.patch.old or b""):
            patch = keptin.KeptPatch(self.op, self.component, self.file, previous, checksum, keep.patch.path,
                                     keep.patch.old, manifests.checksum(keep.patch.new))
        return Inverse(self.manifest.inverse(), tuple(c.inverse() for c in self.companions), self.revision,
                       config, patch)

    def to_dict(self) -> Dict[str, object]:
        keep = self.keep
        config = keep.config if keep is not None else None
        patch = keep.patch if keep is not None else None
        return {"component": self.component, "file": self.file, "action": self.action,
                "effect": self.effect, "parked": self.parked, "manifest": self.manifest.to_dict(),
                "companions": [c.to_dict() for c in self.companions],
                "mounts": [m.to_dict() for m in self.mounts],
                "revision": self.revision, "new_revision": self.new_revision,
                "kubeadm_config": None if config is None else {
                    "namespace": kc.NAMESPACE, "name": kc.NAME, "key": kc.KEY,
                    "resource_version": config.resource_version, "changed": config.changed,
                    "before": _bytes(config.old.encode("utf-8")), "after": _bytes(config.new.encode("utf-8"))},
                "patch": None if patch is None else FilePart(patch.path, 0o600, patch.old, patch.new).to_dict(),
                "inverse": self.inverse.to_dict()}

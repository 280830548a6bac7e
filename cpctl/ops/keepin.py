"""``--keep-in``: the same flag change written where the next ``kubeadm upgrade`` looks.

``kubeadm upgrade apply``/``node`` renders each control-plane manifest again from the
ClusterConfiguration in ``kube-system/kubeadm-config`` plus ``--patches``; a flag set only in the
manifest is gone afterwards (:mod:`cpctl.core.kubeadmconfig`). ``flags``/``apply``/``edit`` with
``--keep-in`` keep it:

* ``kubeadm-config``: read-modify-write of the ConfigMap with its ``resourceVersion``, under the
  node lock, **before** the manifest changes. A conflict (someone changed it between our read and our
  write) re-reads and retries once, then refuses (exit 10) with nothing changed. The text before and
  the resourceVersion written are recorded (:mod:`cpctl.core.keptin`): whatever puts the previous
  manifest back (a failed change, ``rollback``, an unconfirmed revert, a kill before the commit) puts
  the ClusterConfiguration back too, unless someone else changed it since.
* ``patches[=DIR]``: ``DIR/<component>+json.yaml`` (default ``/etc/kubernetes/patches``, next to the
  manifests dir), a JSON patch; written through the journal **after** the new manifest is verified.

Everything is checked before anything changes (the ConfigMap exists and parses, a patch file that is
there is a JSON patch, the component is one kubeadm renders); the diffs are shown first (and in
``--dry-run``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from cpctl.core import checks, journal, keptin, manifests, outside
from cpctl.core import kubeadmconfig as kc
from cpctl.core.node import Node
from cpctl.core.replace import text_diff
from cpctl.errors import CpctlError, ExitCode
from cpctl.ops.edits import ApplyOptions
from cpctl.probes.kubeapi import ApiError, KubeClient, client_for

PATCH_LIMIT = 1 << 20
PATCH_MODE = 0o600


@dataclass
class ConfigPlan:
    """The ClusterConfiguration change: the ConfigMap as read, and the texts before and after."""

    configmap: Dict[str, object]
    old: str
    new: str
    before: List[Tuple[str, str]]        # the section's extraArgs before (to undo)

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass
class PatchPlan:
    """The patch file change: where, the bytes there now (None: no file) and the new bytes."""

    path: str
    old: Optional[bytes]
    new: bytes


@dataclass
class KeepPlan:
    """What ``--keep-in`` will write for one change of one component."""

    component: str
    section: str
    change: kc.FlagChange
    config: Optional[ConfigPlan] = None
    patch: Optional[PatchPlan] = None
    done: List[str] = field(default_factory=list)

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
                "done": list(self.done), "diff": self.diffs()}


def patches_dir(node: Node, target: kc.KeepIn) -> str:
    """The patches directory: the one given, else ``patches`` next to the manifests dir."""
    return target.directory or os.path.join(os.path.dirname(node.manifests_dir), kc.DEFAULT_PATCHES)


# --- planning (reads only) -----------------------------------------------------------------------
def plan(node: Node, component: str, old: bytes, new: bytes, change: kc.FlagChange,
         targets: List[kc.KeepIn], container: Optional[str] = None) -> KeepPlan:
    """What to write for ``targets``; refuses (nothing changed) what cannot be kept."""
    section = kc.section_of(component)
    keep = KeepPlan(component, section, change)
    for target in targets:
        if target.target == "kubeadm-config":
            keep.config = _config_plan(_client(node), section, change)
        else:
            keep.patch = _patch_plan(node, component, old, new, change, patches_dir(node, target), container)
    return keep


def _client(node: Node) -> KubeClient:
    return client_for(node.host, node.kubeconfig)


def _read_configmap(client: KubeClient) -> Dict[str, object]:
    found = client.get_configmap(kc.NAMESPACE, kc.NAME)
    if found is None:
        raise CpctlError("ConfigMap %s/%s not found: not a kubeadm cluster (or it is not visible with this "
                         "kubeconfig); nothing changed" % (kc.NAMESPACE, kc.NAME), ExitCode.REFUSED)
    return found


def read_cluster_config(node: Node) -> Dict[str, object]:
    """The ClusterConfiguration in kube-system/kubeadm-config (REFUSED when missing or unparsable)."""
    cm = _read_configmap(_client(node))
    data = cm.get("data") if isinstance(cm.get("data"), dict) else {}
    return kc.parse_config(data.get(kc.KEY) if isinstance(data, dict) else None)


def _config_plan(client: KubeClient, section: str, change: kc.FlagChange) -> ConfigPlan:
    cm = _read_configmap(client)
    data = cm.get("data") if isinstance(cm.get("data"), dict) else {}
    text = data.get(kc.KEY) if isinstance(data, dict) else None
    config = kc.parse_config(text)
    before = kc.extra_args(config, section)
    new_config = kc.with_flags(config, section, change)
    assert isinstance(text, str)
    new_text = text if kc.extra_args(new_config, section) == before else kc.dump_config(new_config)
    return ConfigPlan(cm, text, new_text, before)


def _patch_plan(node: Node, component: str, old: bytes, new: bytes, change: kc.FlagChange, directory: str,
                container: Optional[str]) -> PatchPlan:
    from cpctl.core import flags as flagtools
    path = os.path.join(directory, kc.patch_file_name(component))
    roots = journal.allowed_roots(node.manifests_dir, node.state.path)
    if not journal.companion_path(path, roots):
        raise CpctlError("--keep-in patches=%s: cpctl writes only below %s (next to the manifests dir)"
                         % (directory, roots[2]), ExitCode.REFUSED)
    link = journal.link_below(node.host, path, roots[2])
    if link is not None:
        raise CpctlError("--keep-in patches=%s: %s is a symlink on the node (the patch would land elsewhere): name "
                         "the real directory; nothing changed" % (directory, link), ExitCode.REFUSED)
    try:
        existing: Optional[bytes] = node.host.read_file(path, PATCH_LIMIT)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise CpctlError("cannot read %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT) from None
    ops = kc.parse_patch(existing, path)
    old_pod, new_pod = checks.parse_new(old, component), checks.parse_new(new, component)
    index, old_container = flagtools.pick_container(old_pod, container)
    _, new_container = flagtools.pick_container(new_pod, container)
    return PatchPlan(path, existing, kc.dump_patch(kc.patch_ops(ops, index, old_container, new_container, change)))


# --- writing -------------------------------------------------------------------------------------
def write_config(node: Node, keep: KeepPlan) -> str:
    """PUT the new ClusterConfiguration with the resourceVersion read; on a conflict re-read, redo the
    change on what is there now and retry once; a second conflict refuses (exit 10), nothing changed.
    Returns the resourceVersion of the write ("" when nothing was written)."""
    if keep.config is None or not keep.config.changed:
        return ""
    client = _client(node)
    written: Dict[str, object] = {}
    plan_now = keep.config
    for attempt in (1, 2):
        data = plan_now.configmap.get("data")
        body = dict(plan_now.configmap, data=dict(data if isinstance(data, dict) else {}, **{kc.KEY: plan_now.new}))
        try:
            written = client.update_configmap(kc.NAMESPACE, kc.NAME, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            if attempt == 2:
                raise CpctlError("%s/%s changed between cpctl's read and write, twice (someone else is editing it): "
                                 "nothing changed; try again" % (kc.NAMESPACE, kc.NAME), ExitCode.CONFLICT) from None
            plan_now = _config_plan(client, keep.section, keep.change)
            if not plan_now.changed:
                keep.config = plan_now
                return ""
            continue
        break
    keep.config = ConfigPlan(plan_now.configmap, plan_now.old, plan_now.new, plan_now.before)
    keep.done.append("%s/%s" % (kc.NAMESPACE, kc.NAME))
    meta = written.get("metadata") if isinstance(written, dict) else None
    return str(meta.get("resourceVersion") or "?") if isinstance(meta, dict) else "?"


def config_write(node: Node, keep: KeepPlan) -> Optional[keptin.ConfigWrite]:
    """The ClusterConfiguration write as a part of the manifest change (``ApplyOptions.config_write``):
    recorded and written under the node lock before the manifest, undone with it (``core.keptin``)."""
    if keep.config is None or not keep.config.changed:
        return None

    def write() -> Tuple[str, str, str]:
        version = write_config(node, keep)
        assert keep.config is not None
        return (keep.config.old, keep.config.new, version) if version else ("", "", "")
    return keptin.ConfigWrite(kc.NAMESPACE, kc.NAME, kc.KEY, keep.config.old, keep.config.new, write)


def write_patch(node: Node, keep: KeepPlan, reason: Optional[str], manifest: Optional[Tuple[str, str, str]] = None
                ) -> None:
    """Write the patch file through the journal (one write step, the commit), recorded in history;
    ``manifest`` (file, checksum before, checksum after the change it goes with): also recorded, so
    that whatever puts that manifest's previous bytes back puts the patch file back (``core.keptin``)."""
    patch = keep.patch
    if patch is None or patch.new == (patch.old or b""):
        return
    node.host.makedirs(os.path.dirname(patch.path), 0o700)
    before = manifests.checksum(patch.old) if patch.old is not None else ""
    step = journal.write(patch.path, manifests.checksum(patch.new), mode=PATCH_MODE, before=before)
    change = journal.Change("keep-in", keep.component, kc.patch_file_name(keep.component),
                            manifests.checksum(patch.new), [step], commit=0, data={0: patch.new},
                            record={"patch": patch.path, "reason": reason,
                                    "diff": text_diff(patch.old or b"", patch.new, os.path.basename(patch.path))})
    with node.session("cpctl keep-in %s" % keep.component):
        node.apply(change)
        if manifest is not None:
            keptin.save_patch(node, keptin.KeptPatch(change.op, keep.component, manifest[0], manifest[1],
                                                     manifest[2], patch.path, patch.old, change.checksum or ""))
    keep.done.append(patch.path)


def run(node: Node, keep: Optional[KeepPlan], options: ApplyOptions, change: Callable[[ApplyOptions], Dict[str, Any]],
        show: Callable[[str], None]) -> Dict[str, Any]:
    """The manifest change ``change`` (run with ``options``) with ``keep``: diff shown, ConfigMap
    first, patch file after (nothing written while a kubeadm upgrade is in flight, unless
    ``--force``). The manifest change's own checks run first, as its dry run: a change they refuse
    (an invalid manifest, a misspelled flag) writes nothing, not even the ConfigMap."""
    if keep is None:
        return change(options)
    if not options.force:
        outside.refuse_in_flight(node, "changing %s" % keep.component)
    diff = keep.diffs()
    if options.dry_run:
        return dict(change(options), keep_in=keep.to_dict())
    change(replace(options, dry_run=True))
    if diff:
        show(diff)
    result = change(replace(options, config_write=config_write(node, keep)))   # undone with it: core.keptin
    written = (str(result.get("file")), str(result.get("previous")), str(result.get("checksum"))) \
        if result.get("changed") else None
    write_patch(node, keep, options.reason, written)
    return dict(result, keep_in=keep.to_dict())

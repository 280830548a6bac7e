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
  kubeadm applies it to what the NEXT release renders, blind to positions, so the operations are
  built against that render (``render_next`` from the ClusterConfiguration, not the current manifest),
  every positional operation is guarded by a ``test`` (:func:`cpctl.core.kubeadmconfig.patch_ops`), and kubeadm
  remembers nothing: the result warns that ``--patches DIR`` must be given to every later
  ``kubeadm upgrade apply``/``node`` and ``kubeadm join``.

A kept change is kept whole (:func:`cpctl.core.kubeadmconfig.whole_change`): the flags by name
(``extraArgs``, every instance of a repeated v1beta4 argument), the hostPath volume a kept flag's
path is on (``extraVolumes``: the audit-policy recipe), etcd's data dir as ``etcd.local.dataDir``
(kubeadm builds the etcd-data hostPath from it; an ``extraArgs`` ``data-dir`` would leave the data
unmounted). What a target cannot hold whole is refused before anything is written.

Everything is checked before anything changes (the ConfigMap exists and parses, a patch file that is
there is a JSON patch, the component is one kubeadm renders); the diffs are shown first (and in
``--dry-run``).
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Tuple

from cpctl.core import checks, journal, keptin, manifests, outside
from cpctl.core import kubeadmconfig as kc
from cpctl.core.node import Node
from cpctl.core.plan import ConfigPlan, KeepPlan, PatchPlan
from cpctl.core.replace import text_diff
from cpctl.errors import CpctlError, ExitCode
from cpctl.ops.edits import ApplyOptions, ChangeResult, InterruptedKept
from cpctl.probes.kubeapi import ApiError, KubeClient, client_for

PATCH_LIMIT = 1 << 20
PATCH_MODE = 0o600


def patch_files(node: Node, component: str, directory: Optional[str] = None,
                unchecked: Optional[List[str]] = None) -> List[Tuple[str, List[Dict[str, object]]]]:
    """The JSON patch files kubeadm would apply to ``component`` from the patches dir (default next to
    the manifests dir): ``component[suffix]+json.(yaml|json)`` in file-name order, as (name, ops);
    a file that cannot be read or is no JSON patch counts as none (check reports, never fails).
    ``unchecked`` collects the component's strategic and merge patch files (not evaluated)."""
    directory = directory or os.path.join(os.path.dirname(node.manifests_dir), kc.DEFAULT_PATCHES)
    try:
        names = sorted(node.host.listdir(directory))
    except OSError:
        return []
    out = []
    for name in names:
        stem, _, ext = name.rpartition(".")
        if ext not in ("yaml", "json") or not stem.endswith("+json") or not stem.startswith(component):
            if ext in ("yaml", "json") and stem.startswith(component) and unchecked is not None:
                unchecked.append(name)        # a strategic or merge patch: cpctl does not evaluate it
            continue
        if "+" in stem[len(component):-len("+json")]:
            continue                      # target[suffix][+patchtype]: one "+" only
        path = os.path.join(directory, name)
        try:
            ops = kc.parse_patch(node.host.read_file(path, PATCH_LIMIT), path)
        except (OSError, CpctlError):
            continue
        out.append((name, ops))
    return out


def patches_dir(node: Node, target: kc.KeepIn) -> str:
    """The patches directory: the one given, else ``patches`` next to the manifests dir."""
    return target.directory or os.path.join(os.path.dirname(node.manifests_dir), kc.DEFAULT_PATCHES)


# --- planning (reads only) -----------------------------------------------------------------------
def plan(node: Node, component: str, old: bytes, new: bytes, change: kc.FlagChange,
         targets: List[kc.KeepIn], container: Optional[str] = None,
         config: Optional[Dict[str, object]] = None) -> KeepPlan:
    """What to write for ``targets``; refuses (nothing changed) what cannot be kept whole. A patch file
    is built against what kubeadm renders from the ClusterConfiguration: ``config``, else the planned
    one (with ``kubeadm-config``), else the one in the API."""
    from cpctl.core import flags as flagtools
    section = kc.section_of(component)
    keep = KeepPlan(component, section, change)
    old_pod, new_pod = checks.parse_new(old, component), checks.parse_new(new, component)
    index, _ = flagtools.pick_container(old_pod, container)
    keep.whole = whole = kc.whole_change(old_pod, new_pod, index, component, change)
    for target in targets:
        cannot = whole.not_kept + (whole.not_in_config if target.target == "kubeadm-config" else [])
        if target.target == "patches" and whole.data_dir is not None:
            cannot = cannot + ["etcd's data dir: keep it as etcd.local.dataDir with --keep-in kubeadm-config (kubeadm "
                               "mounts it, points --data-dir at it, and no position can shift)"]
        if cannot:
            other = ("; --keep-in patches can hold it" if target.target == "kubeadm-config" and not whole.not_kept
                     else "")
            raise CpctlError("--keep-in %s cannot keep this change of %s whole: %s%s. Nothing changed (a change kept "
                             "partly would come back broken from the next kubeadm upgrade)"
                             % (target.target, component, "; ".join(cannot), other), ExitCode.REFUSED)
    for target in targets:
        if target.target == "kubeadm-config":
            keep.config = _config_plan(_client(node), section, change, whole)
    for target in targets:
        if target.target == "patches":
            if config is None:
                config = kc.parse_config(keep.config.new) if keep.config is not None else read_cluster_config(node)
            keep.patch = _patch_plan(node, component, old, new, change, patches_dir(node, target), container, whole,
                                     config)
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


def _config_plan(client: KubeClient, section: str, change: kc.FlagChange,
                 whole: Optional[kc.WholeChange] = None) -> ConfigPlan:
    cm = _read_configmap(client)
    data = cm.get("data") if isinstance(cm.get("data"), dict) else {}
    text = data.get(kc.KEY) if isinstance(data, dict) else None
    config = kc.parse_config(text)
    before = kc.extra_args(config, section)
    new_config = kc.with_whole(config, section, whole if whole is not None else kc.WholeChange(change))
    assert isinstance(text, str)
    part = _section_copy(config, section)
    new_text = text if _section_copy(new_config, section) == part else kc.dump_config(new_config)
    return ConfigPlan(cm, text, new_text, before, part)


def _section_copy(config: Dict[str, object], section: str) -> Dict[str, object]:
    """What --keep-in changes in a section: its extraArgs, extraVolumes and dataDir (a copy)."""
    part: object = config
    for key in section.split("."):
        part = part.get(key) if isinstance(part, dict) else None
    if not isinstance(part, dict):
        return {}
    return copy.deepcopy({k: part[k] for k in KEPT_KEYS if k in part})


KEPT_KEYS = ("extraArgs", "extraVolumes", "dataDir")


def _patch_plan(node: Node, component: str, old: bytes, new: bytes, change: kc.FlagChange, directory: str,
                container: Optional[str], whole: Optional[kc.WholeChange] = None,
                config: Optional[Dict[str, object]] = None) -> PatchPlan:
    """The patch file with the change's operations, built against what kubeadm will render and patch
    (:func:`_render_base`), not against the current manifest: kubeadm applies the file to its render."""
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
    index, _ = flagtools.pick_container(old_pod, container)
    _, new_container = flagtools.pick_container(new_pod, container)
    base = _render_base(node, old_pod, index, component, directory, os.path.basename(path), ops,
                        config if config is not None else read_cluster_config(node))
    _, base_container = flagtools.pick_container(base, container)
    unknown = [n for n, _ in change.sets + [(u, "") for u in change.unsets]
               if any(f.name == n and f.value == kc.UNKNOWN_DEFAULT for f in flagtools.flags_of(base_container))]
    if unknown:
        raise CpctlError("--keep-in patches cannot guard --%s: cpctl changed it before without --keep-in, so the value "
                         "kubeadm renders for it is not known here (a JSON patch would test the wrong item); keep it "
                         "with --keep-in kubeadm-config (nothing changed)" % unknown[0], ExitCode.REFUSED)
    ops = kc.patch_ops(ops, index, base_container, new_container, change)
    if whole is not None and (whole.volumes or whole.removed_volumes):
        ops = kc.volume_ops(ops, index, base, whole.volumes, whole.removed_volumes)
    from cpctl.core import mounts
    return PatchPlan(path, existing, kc.dump_patch(ops), mounts.node_path(node.node_root, directory))


def _render_base(node: Node, pod: Dict[str, object], index: int, component: str, directory: str, name: str,
                 ops: List[Dict[str, object]], config: Dict[str, object]) -> Dict[str, object]:
    """What the new operations of patch file ``name`` apply to at the next ``kubeadm upgrade --patches``:
    kubeadm's render from ``config`` (:func:`cpctl.core.kubeadmconfig.render_next`), the patch files
    sorted before ``name`` applied, then the file's own operations ``ops``. A flag set by hand in the
    manifest is not in it (kubeadm renders from the ClusterConfiguration), so no operation names the
    index such a flag has now. A patch that does not apply to it refuses the change (exit 4)."""
    from cpctl.core import outside
    earlier = [(n, o) for n, o in patch_files(node, component, directory) if n < name]
    try:
        changed = list(outside.flags_set_by_cpctl(node, component + ".yaml"))
    except CpctlError:
        changed = []
    try:
        return kc.render_next(pod, index, config, component, changed, earlier + [(name, ops)])
    except kc.PatchFailed as exc:
        raise CpctlError("--keep-in patches: the patch files of %s do not apply to what the next kubeadm upgrade "
                         "renders (%s): fix or remove them first; nothing changed" % (component, exc),
                         ExitCode.REFUSED) from None


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
            plan_now = _config_plan(client, keep.section, keep.change, keep.whole)
            if not plan_now.changed:
                keep.config = plan_now
                return ""
            continue
        break
    keep.config = plan_now
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


def write_patch(node: Node, keep: KeepPlan, reason: Optional[str], undo: Optional[keptin.KeptPatch] = None) -> None:
    """Write the patch file through the journal (one write step, the commit), recorded in history;
    ``undo``: the patch part of the manifest change's inverse (``Plan.inverse.patch``), recorded so
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
        if undo is not None:
            keptin.save_patch(node, undo)
    keep.done.append(patch.path)


def run(node: Node, keep: Optional[KeepPlan], options: ApplyOptions, change: Callable[[ApplyOptions], ChangeResult],
        show: Callable[[str], None]) -> ChangeResult:
    """The manifest change ``change`` (run with ``options``) with ``keep``: diff shown, ConfigMap
    first, patch file after (nothing written while a kubeadm upgrade is in flight, unless
    ``--force``). The manifest change's own checks run first, as its dry run: a change they refuse
    (an invalid manifest, a misspelled flag) writes nothing, not even the ConfigMap."""
    if keep is None:
        return change(options)
    if not options.force:
        outside.refuse_in_flight(node, "changing %s" % keep.component)
    diff = keep.diffs()
    options = replace(options, keep_in=keep)          # the kubeadm part of the change's Plan
    if options.dry_run:
        return _with_keep(change(options), keep)
    change(replace(options, dry_run=True))
    if diff:
        show(diff)
    try:
        result = change(replace(options, config_write=config_write(node, keep)))   # undone with it: core.keptin
    except InterruptedKept:          # the manifest change was verified and stays: so does the kept flag
        write_patch(node, keep, options.reason)
        raise
    write_patch(node, keep, options.reason, result.plan.inverse.patch if result.changed and result.plan else None)
    return _with_keep(result, keep)


def _with_keep(result: ChangeResult, keep: KeepPlan) -> ChangeResult:
    return replace(result, keep_in=keep.to_dict(), warnings=list(result.warnings) + keep.warnings())

"""What kubeadm regenerates a manifest from: the ClusterConfiguration and kubeadm patch files.

``kubeadm upgrade apply``/``node`` renders every control-plane manifest again from the
``ClusterConfiguration`` in ``kube-system/kubeadm-config`` plus ``--patches`` (real-node-facts.md,
"kubeadm upgrade and the manifests dir"): a flag set only in the manifest is gone afterwards. This
module holds the pure parts of keeping a flag change where kubeadm looks:

* ``ClusterConfiguration`` ``extraArgs`` of ``apiServer``, ``controllerManager``, ``scheduler`` and
  ``etcd.local``: a map in ``kubeadm.k8s.io/v1beta3``, a list of ``{name, value}`` in ``v1beta4``;
* kubeadm patch files ``<component>+json.yaml``: RFC 6902 JSON patches. Only a JSON patch can append
  to ``command`` (strategic and merge patches replace the list whole, kubernetes/kubeadm#3113):
  ``add`` at ``/spec/containers/0/command/-`` for a new flag, ``replace`` at its index for one the
  manifest has, ``remove`` for an unset one.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from cpctl import catalogue
from cpctl.core import flags as flagtools
from cpctl.core import manifests, mounts
from cpctl.core.settings import command_hint_here
from cpctl.errors import CpctlError, ExitCode

NAMESPACE, NAME, KEY = "kube-system", "kubeadm-config", "ClusterConfiguration"
API_VERSIONS = ("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4")
#: component (pod name) -> its ClusterConfiguration section, dotted (``etcd.local``).
SECTIONS = {c.name: c.kubeadm_section for c in catalogue.COMPONENTS}
KEEP_TARGETS = ("kubeadm-config", "patches")
#: The flags kubeadm itself writes into each manifest from the rest of its configuration
#: (cmd/kubeadm/app/phases/controlplane/manifests.go, phases/etcd/local.go): an upgrade renders
#: them again, so a manifest that has them loses nothing - unless cpctl changed their value.
KUBEADM_FLAGS = {
    catalogue.KUBE_APISERVER: frozenset("""advertise-address allow-privileged authorization-mode client-ca-file
        enable-admission-plugins enable-bootstrap-token-auth etcd-cafile etcd-certfile etcd-keyfile
        etcd-servers kubelet-client-certificate kubelet-client-key kubelet-preferred-address-types
        proxy-client-cert-file proxy-client-key-file requestheader-allowed-names requestheader-client-ca-file
        requestheader-extra-headers-prefix requestheader-group-headers requestheader-username-headers
        secure-port service-account-issuer service-account-key-file service-account-signing-key-file
        service-cluster-ip-range tls-cert-file tls-private-key-file feature-gates""".split()),
    catalogue.KUBE_CONTROLLER_MANAGER: frozenset("""allocate-node-cidrs authentication-kubeconfig
        authorization-kubeconfig bind-address client-ca-file cluster-cidr cluster-name
        cluster-signing-cert-file cluster-signing-key-file controllers kubeconfig leader-elect
        requestheader-client-ca-file root-ca-file secure-port service-account-private-key-file
        service-cluster-ip-range use-service-account-credentials feature-gates""".split()),
    catalogue.KUBE_SCHEDULER: frozenset("""authentication-kubeconfig authorization-kubeconfig bind-address
        kubeconfig leader-elect secure-port feature-gates""".split()),
    catalogue.ETCD: frozenset("""advertise-client-urls cert-file client-cert-auth data-dir
        experimental-initial-corrupt-check experimental-watch-progress-notify-interval feature-gates
        watch-progress-notify-interval initial-advertise-peer-urls initial-cluster initial-cluster-state
        key-file listen-client-urls listen-metrics-urls listen-peer-urls name peer-cert-file
        peer-client-cert-auth peer-key-file peer-trusted-ca-file snapshot-count trusted-ca-file""".split()),
}
DEFAULT_PATCHES = "patches"          # below the manifests dir's parent: /etc/kubernetes/patches
UNKNOWN_DEFAULT = "<kubeadm's default>"   # render_next: the value kubeadm renders for its own flag cpctl changed


@dataclass
class FlagChange:
    """The flags one change sets (name, value) and removes, in the order they were given."""

    sets: List[Tuple[str, str]] = field(default_factory=list)
    unsets: List[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.sets or self.unsets)


@dataclass(frozen=True)
class KeepIn:
    """One ``--keep-in`` target: ``kubeadm-config``, or ``patches`` with its directory (None: default)."""

    target: str
    directory: Optional[str] = None


def parse_keep_in(text: str) -> KeepIn:
    """``kubeadm-config``, ``patches`` or ``patches=DIR``; a usage error (exit 2) otherwise."""
    name, sep, value = text.partition("=")
    if name == "kubeadm-config" and not sep:
        return KeepIn(name)
    if name == "patches":
        if sep and not value.startswith("/"):
            raise CpctlError("--keep-in patches=%s: the directory must be an absolute path" % value, ExitCode.USAGE)
        return KeepIn(name, value or None)
    raise CpctlError("--keep-in %r: unknown target (use kubeadm-config, patches or patches=DIR)" % text,
                     ExitCode.USAGE)


def section_of(component: str) -> str:
    """The ClusterConfiguration section of a kubeadm component; REFUSED for any other pod."""
    if component not in SECTIONS:
        raise CpctlError("%s is not a kubeadm control-plane component (%s): kubeadm does not render it, there is "
                         "nothing to keep the change in" % (component, ", ".join(SECTIONS)), ExitCode.REFUSED)
    return SECTIONS[component]


def flag_change(old: Mapping[str, object], new: Mapping[str, object]) -> FlagChange:
    """The flags that differ between two versions of a container, by name: a name whose values
    changed is set to ALL its values in the new version, in order (a repeated flag such as two
    ``--service-account-issuer`` stays repeated), a name the new version lacks is removed."""
    before, after = _values_by_name(old), _values_by_name(new)
    change = FlagChange()
    for name, values in after.items():
        if before.get(name) != values:
            change.sets.extend((name, v) for v in values)
    change.unsets = [name for name in before if name not in after]
    return change


def _values_by_name(container: Mapping[str, object]) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for f in flagtools.flags_of(container):
        out.setdefault(f.name, []).append(f.value if f.value is not None else "true")
    return out


# --- ClusterConfiguration ------------------------------------------------------------------------
def parse_config(text: object) -> Dict[str, object]:
    """The ClusterConfiguration of the ConfigMap's data; REFUSED (exit 4) when it is not one."""
    if not isinstance(text, str):
        raise CpctlError("%s/%s has no %s key: not a kubeadm cluster, or not one cpctl can keep a change in"
                         % (NAMESPACE, NAME, KEY), ExitCode.REFUSED)
    try:       # bounded like a manifest: the ConfigMap comes from the cluster, untrusted
        config, _ = manifests.decode(text.encode("utf-8", "surrogateescape"))
    except manifests.InvalidManifest as exc:
        raise CpctlError("the ClusterConfiguration in %s/%s does not parse (%s): nothing changed"
                         % (NAMESPACE, NAME, flagtools.redact(str(exc))), ExitCode.REFUSED) from None
    if not isinstance(config, dict) or config.get("kind") != "ClusterConfiguration":
        raise CpctlError("the ClusterConfiguration in %s/%s does not parse (not a kind: ClusterConfiguration "
                         "object): nothing changed" % (NAMESPACE, NAME), ExitCode.REFUSED)
    if config.get("apiVersion") not in API_VERSIONS:
        raise CpctlError("the ClusterConfiguration in %s/%s is %r, not one of %s: nothing changed"
                         % (NAMESPACE, NAME, str(config.get("apiVersion"))[:60], ", ".join(API_VERSIONS)),
                         ExitCode.REFUSED)
    return config


def _section(config: Dict[str, object], section: str, create: bool) -> Optional[Dict[str, object]]:
    """The dict holding ``extraArgs`` of ``section`` (``etcd.local`` for etcd); made when ``create``."""
    keys = section.split(".")
    part = config
    for key in keys:
        value = part.get(key)
        if value is None:
            if not create:
                return None
            value = part[key] = {}
        if not isinstance(value, dict):
            raise CpctlError("the ClusterConfiguration's %s is not a mapping: nothing changed" % ".".join(keys),
                             ExitCode.REFUSED)
        part = value
    return part


def section_dict(config: Dict[str, object], section: str) -> Dict[str, object]:
    """The dict of ``section`` in ``config`` (made when absent; REFUSED when it is not a mapping)."""
    part = _section(config, section, create=True)
    assert part is not None
    return part


def extra_args(config: Dict[str, object], section: str) -> List[Tuple[str, str]]:
    """(name, value) pairs of a section's ``extraArgs``, whichever API version's shape."""
    part = _section(config, section, create=False) or {}
    raw = part.get("extraArgs")
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [(str(k), "" if v is None else str(v)) for k, v in raw.items()]
    if isinstance(raw, list) and all(isinstance(a, dict) and "name" in a for a in raw):
        return [(str(a["name"]), str(a.get("value", ""))) for a in raw]
    raise CpctlError("the ClusterConfiguration's %s.extraArgs is neither a map (v1beta3) nor a name/value list "
                     "(v1beta4): nothing changed" % section, ExitCode.REFUSED)


def with_flags(config: Dict[str, object], section: str, change: FlagChange) -> Dict[str, object]:
    """A copy of ``config`` with the change in the section's ``extraArgs``, in the shape of its version,
    by name: every instance of a name the change sets is replaced by the change's values for it, in
    order, where its first instance was (else at the end); other names are left alone (a second
    ``--service-account-issuer`` survives a change of another flag). A v1beta3 map cannot hold a name
    twice: such a change is refused (exit 4), nothing changed."""
    out = copy.deepcopy(config)
    extra_args(out, section)                     # refuses a malformed extraArgs before anything else
    part = _section(out, section, create=True)
    assert part is not None
    v1beta4 = out.get("apiVersion") == API_VERSIONS[1]
    raw = part.get("extraArgs")
    wanted: Dict[str, List[str]] = {}
    for name, value in change.sets:
        wanted.setdefault(name, []).append(value)
    if v1beta4:
        items: List[Dict[str, object]] = [dict(a) for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
        result: List[Dict[str, object]] = []
        placed = set()
        for item in items:
            name = str(item["name"])
            if name in wanted:            # every old instance of a name set is replaced, where the first was
                if name not in placed:
                    result.extend({"name": name, "value": v} for v in wanted[name])
                    placed.add(name)
            elif name not in change.unsets:
                result.append(item)
        for name, values in wanted.items():
            if name not in placed:
                result.extend({"name": name, "value": v} for v in values)
        new: object = result
    else:
        twice = sorted(n for n, values in wanted.items() if len(values) > 1)
        if twice:
            raise CpctlError("--%s is given %d times, and the ClusterConfiguration is kubeadm.k8s.io/v1beta3, whose "
                             "extraArgs map holds one value per name: nothing changed (v1beta4's list keeps every "
                             "instance: kubeadm config migrate)" % (twice[0], len(wanted[twice[0]])), ExitCode.REFUSED)
        mapping = {str(k): v for k, v in (raw.items() if isinstance(raw, dict) else ()) if str(k) not in change.unsets}
        for name, values in wanted.items():
            mapping[name] = values[0]
        new = mapping
    if new:
        part["extraArgs"] = new
    else:
        part.pop("extraArgs", None)
    return out


def dump_config(config: Mapping[str, object]) -> str:
    """The ClusterConfiguration as the ConfigMap's text (key order kept)."""
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


_SECRET_KEY = re.compile(r"(?i)^(?P<head>[+ -]?\s*(?:-\s+)?(?P<key>[A-Za-z0-9._-]+):\s*)(?P<value>\S.*)$")
_SECRET_WORD = re.compile(r"(?i)token|password|passwd|secret|credential")


def config_diff(old: str, new: str) -> str:
    """A unified diff of the ClusterConfiguration, credential-looking values redacted: ``NAME: VALUE``
    (v1beta3) and the ``value:`` after ``name: NAME`` (v1beta4) when NAME looks like a credential."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "a/%s/%s:%s" % (NAMESPACE, NAME, KEY),
                                      "b/%s/%s:%s" % (NAMESPACE, NAME, KEY), lineterm=""))
    out, secret_name = [], False
    for line in lines:
        match = _SECRET_KEY.match(line)
        if match and not line.startswith(("+++", "---")):
            key, value = match.group("key"), match.group("value")
            if (key == "value" and secret_name) or (key != "name" and _SECRET_WORD.search(key)):
                line = match.group("head") + "<redacted>"
            secret_name = key == "name" and bool(_SECRET_WORD.search(value))
        out.append(line)
    return flagtools.redact("\n".join(out))


def missing_flags(container: Mapping[str, object], config: Dict[str, object], component: str,
                  changed_by_cpctl: Sequence[str] = ()) -> List[str]:
    """``--name=value`` items of the manifest the next ``kubeadm upgrade`` would drop or reset: not in
    the ClusterConfiguration's extraArgs with that value (every instance of a repeated v1beta4
    argument counts), and not one kubeadm writes itself (KUBEADM_FLAGS) - unless cpctl changed that
    one (``changed_by_cpctl``: kubeadm puts its own value back)."""
    pairs = extra_args(config, section_of(component))
    kept, kept_names = set(pairs), {n for n, _ in pairs}
    ours = KUBEADM_FLAGS.get(component, frozenset())
    out = []
    for f in flagtools.flags_of(container):
        value = f.value if f.value is not None else "true"
        if (f.name, value) in kept or (f.name in ours and f.name not in kept_names and f.name not in changed_by_cpctl):
            continue
        if component == catalogue.ETCD and f.name == "data-dir":
            continue                     # etcd's data dir: from dataDir, compared by data_dir_drop
        out.append(_item(f))
    return out


# --- a change kept whole: flags, hostPath volumes, etcd's data dir -------------------------------
#: The volumes kubeadm mounts itself (phases/controlplane/volumes.go, phases/etcd/local.go).
KUBEADM_VOLUMES = frozenset("""ca-certs etc-ca-certificates etc-pki k8s-certs usr-local-share-ca-certificates
    usr-share-ca-certificates flexvolume-dir kubeconfig etcd-certs etcd-data""".split())
ETCD_DATA = "etcd-data"
DEFAULT_DATA_DIR = "/var/lib/etcd"


@dataclass
class WholeChange:
    """A manifest change as kubeadm can render it again: the flags (``extraArgs``), the hostPath
    volumes with their mounts (``extraVolumes``: name, hostPath, mountPath, readOnly, pathType),
    etcd's data dir (``etcd.local.dataDir``, which gives kubeadm's etcd-data hostPath, its mount and
    ``--data-dir`` together), and what none of these can hold (``not_kept``: refused up front)."""

    flags: FlagChange
    volumes: List[Dict[str, object]] = field(default_factory=list)
    removed_volumes: List[str] = field(default_factory=list)
    data_dir: Optional[str] = None
    not_kept: List[str] = field(default_factory=list)          # neither target can hold it
    not_in_config: List[str] = field(default_factory=list)     # the ClusterConfiguration cannot hold it


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> List[object]:
    return value if isinstance(value, list) else []


def _container(pod: Mapping[str, object], index: int) -> Mapping[str, object]:
    containers = _list(_mapping(pod.get("spec")).get("containers"))
    return _mapping(containers[index]) if index < len(containers) else {}


def host_volumes(pod: Mapping[str, object], container: Mapping[str, object]) -> Dict[str, Dict[str, object]]:
    """The container's hostPath mounts as ``extraVolumes`` entries, by volume name."""
    vols = {v.get("name"): v for v in _list(_mapping(pod.get("spec")).get("volumes")) if isinstance(v, dict)}
    out: Dict[str, Dict[str, object]] = {}
    for mount in _list(container.get("volumeMounts")):
        if not isinstance(mount, dict) or not isinstance(_mapping(vols.get(mount.get("name"))).get("hostPath"), dict):
            continue
        host = _mapping(_mapping(vols[mount.get("name")]).get("hostPath"))
        entry: Dict[str, object] = {"name": str(mount.get("name")), "hostPath": str(host.get("path", "")),
                                    "mountPath": str(mount.get("mountPath", "")),
                                    "readOnly": bool(mount.get("readOnly"))}
        if host.get("type"):
            entry["pathType"] = str(host.get("type"))
        out[str(mount.get("name"))] = entry
    return out


def _without(pod: Mapping[str, object], index: int) -> Dict[str, object]:
    """The pod without what the ClusterConfiguration can hold: the container's command, args and
    volumeMounts, and the pod's hostPath volumes."""
    out = copy.deepcopy(dict(pod))
    spec = out.get("spec")
    if isinstance(spec, dict):
        spec["volumes"] = [v for v in _list(spec.get("volumes")) if not (isinstance(v, dict) and "hostPath" in v)]
        containers = _list(spec.get("containers"))
        chosen = containers[index] if index < len(containers) else None
        if isinstance(chosen, dict):
            for key in ("command", "args", "volumeMounts"):
                chosen.pop(key, None)
    return out


def whole_change(old_pod: Mapping[str, object], new_pod: Mapping[str, object], index: int, component: str,
                 flags: FlagChange) -> WholeChange:
    """What keeping ``old_pod`` -> ``new_pod`` (flags ``flags`` of container ``index``) in the
    ClusterConfiguration takes. etcd: ``--data-dir`` and the etcd-data hostPath are one thing, the
    node path the data lies at (``dataDir``); etcd.local has no extraVolumes."""
    old_c, new_c = _container(old_pod, index), _container(new_pod, index)
    whole = WholeChange(FlagChange(list(flags.sets), list(flags.unsets)))
    before, after = host_volumes(old_pod, old_c), host_volumes(new_pod, new_c)
    changed = [after[n] for n in after if before.get(n) != after[n]]
    whole.removed_volumes = [n for n in before if n not in after]
    if _without(old_pod, index) != _without(new_pod, index):
        whole.not_kept.append("a change outside the flags and hostPath volumes (image, resources, probes, env, "
                              "other volumes...): the ClusterConfiguration has no place for it")
    if component == catalogue.ETCD:
        data_flag = [v for n, v in whole.flags.sets if n == "data-dir"]
        moved = any(v["name"] == ETCD_DATA for v in changed)
        if data_flag or moved or "data-dir" in whole.flags.unsets:
            flag_now = next((f.value for f in flagtools.flags_of(new_c) if f.name == "data-dir"), None) or ""
            node_path = mounts.host_path_of(new_pod, new_c, flag_now) if flag_now.startswith("/") else None
            if node_path is None:
                whole.not_in_config.append("--data-dir=%s is on no hostPath volume: kubeadm mounts "
                                           "etcd.local.dataDir there" % flag_now)
            else:
                whole.data_dir = node_path
            whole.flags.sets = [(n, v) for n, v in whole.flags.sets if n != "data-dir"]
            whole.flags.unsets = [n for n in whole.flags.unsets if n != "data-dir"]
        others = [v["name"] for v in changed if v["name"] != ETCD_DATA] + whole.removed_volumes
        if others:
            whole.not_in_config.append("etcd's volume %s: kubeadm's etcd.local has no extraVolumes (it mounts "
                                       "only etcd-data and etcd-certs)" % others[0])
        whole.volumes = changed          # for a patch file (the etcd-data volume among them)
        return whole
    # a kept flag is kept with the hostPath volume its path is on (the audit-policy recipe), also
    # when that volume did not change now: kubeadm renders only kubeadm's own volumes and extraVolumes
    for _name, value in whole.flags.sets:
        mount = mounts.mount_of(new_c, value) if value.startswith("/") else None
        needed = after.get(str(_mapping(mount).get("name"))) if mount is not None else None
        if needed is not None and needed["name"] not in KUBEADM_VOLUMES and needed not in changed:
            changed.append(needed)
    whole.volumes = changed
    return whole


def with_whole(config: Dict[str, object], section: str, whole: WholeChange) -> Dict[str, object]:
    """A copy of ``config`` with the whole change: extraArgs by name, extraVolumes by name (an entry of
    the same name replaced, removed volumes dropped), etcd.local.dataDir (and no extraArgs
    ``data-dir``: kubeadm takes the flag from dataDir)."""
    out = with_flags(config, section, whole.flags)
    if (whole.volumes or whole.removed_volumes) and section != SECTIONS[catalogue.ETCD]:   # etcd: dataDir only
        part = _section(out, section, create=True)
        assert part is not None
        raw = part.get("extraVolumes")
        if raw is not None and not (isinstance(raw, list) and all(isinstance(v, dict) for v in raw)):
            raise CpctlError("the ClusterConfiguration's %s.extraVolumes is not a list: nothing changed" % section,
                             ExitCode.REFUSED)
        names = {str(v["name"]) for v in whole.volumes} | set(whole.removed_volumes)
        kept = [v for v in (raw or []) if isinstance(v, dict) and str(v.get("name")) not in names]
        kept += [dict(v) for v in whole.volumes]
        if kept:
            part["extraVolumes"] = kept
        else:
            part.pop("extraVolumes", None)
    if whole.data_dir is not None:
        out = with_flags(out, section, FlagChange([], ["data-dir"]))
        local = _section(out, section, create=True)
        assert local is not None
        local["dataDir"] = whole.data_dir
    return out


def extra_volumes(config: Dict[str, object], section: str) -> List[Dict[str, object]]:
    """A section's ``extraVolumes`` entries (those that are mappings)."""
    part = _section(config, section, create=False) or {}
    return [v for v in _list(part.get("extraVolumes")) if isinstance(v, dict)]


def data_dir(config: Dict[str, object]) -> str:
    """``etcd.local.dataDir`` (kubeadm's default /var/lib/etcd)."""
    local = _section(config, "etcd.local", create=False) or {}
    value = local.get("dataDir")
    return value if isinstance(value, str) and value else DEFAULT_DATA_DIR


# --- what the next upgrade renders, compared with what runs -----------------------------------------
@dataclass
class Drop:
    """One thing the next ``kubeadm upgrade`` would render differently from what runs, and the command
    that keeps it (``critical``: etcd's data would be left behind)."""

    kind: str                     # "flags", "volumes", "data_dir", "patch", "adds" (flags/volumes it renders anew)
    text: str
    fix: str
    items: List[str] = field(default_factory=list)
    critical: bool = False


class PatchFailed(Exception):
    """A JSON patch operation that does not apply (kubeadm fails the upgrade)."""


def apply_json_patch(doc: object, ops: Sequence[Mapping[str, object]]) -> object:
    """``ops`` applied to a copy of ``doc`` as kubeadm applies a JSON patch file (RFC 6902, every
    operation: ``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``) - by the ``jsonpatch``
    library, a real implementation, so that an operation kubeadm accepts is judged as kubeadm judges
    it (cpctl's own subset called a valid ``copy`` a failing upgrade). PatchFailed: it does not apply."""
    import jsonpatch
    import jsonpointer
    try:
        return jsonpatch.apply_patch(copy.deepcopy(doc), [dict(o) for o in ops])
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchFailed(str(exc)[:300] or type(exc).__name__) from None
    except (TypeError, KeyError, ValueError, IndexError, AttributeError) as exc:   # a malformed operation
        raise PatchFailed("a malformed operation (%s: %s)" % (type(exc).__name__, str(exc)[:200])) from None


def render_next(pod: Mapping[str, object], index: int, config: Dict[str, object], component: str,
                changed_by_cpctl: Sequence[str] = (),
                patches: Sequence[Tuple[str, Sequence[Mapping[str, object]]]] = ()) -> Dict[str, object]:
    """What the next ``kubeadm upgrade`` writes for the running ``pod``, by kubeadm's rules
    (phases/controlplane/manifests.go, phases/etcd/local.go, util/arguments.go, util/patches): the
    flags kubeadm writes itself (their running values, a value cpctl changed as kubeadm's own, shown
    ``<kubeadm's default>``) overridden by name by ``extraArgs`` (every instance), sorted by name then
    value; kubeadm's own hostPath volumes plus ``extraVolumes`` (by name); etcd's etcd-data hostPath,
    mount and ``--data-dir`` from ``dataDir``; then the JSON patch files ``patches`` (name, ops) in
    order (PatchFailed: that upgrade fails). The image and the defaults of the next release are not
    known here: the running ones stand in for them."""
    section = section_of(component)
    out = copy.deepcopy(dict(pod))
    container = _container(out, index)
    assert isinstance(container, dict)
    ours = KUBEADM_FLAGS.get(component, frozenset())
    extras = extra_args(config, section)
    extra_names = {n for n, _ in extras}
    # a test operation cpctl wrote holds the value kubeadm rendered before cpctl changed the flag
    tested = {_names(o.get("value")): str(o.get("value")).partition("=")[2] for _, ops in patches for o in ops
              if o.get("op") == "test" and _names(o.get("value"))}
    args = []
    for f in flagtools.flags_of(container):
        if f.name in ours and f.name not in extra_names:
            value = f.value if f.value is not None else "true"
            if f.name in changed_by_cpctl:
                value = tested.get(f.name, UNKNOWN_DEFAULT)
            if component == catalogue.ETCD and f.name == "data-dir":
                value = data_dir(config)
            args.append((f.name, value))
    args += extras
    args.sort()
    first = [i for i in _list(container.get("command")) if isinstance(i, str) and not i.startswith("--")][:1]
    container["command"] = first + ["--%s=%s" % nv for nv in args]
    container.pop("args", None)
    own = {n: v for n, v in host_volumes(pod, _container(pod, index)).items() if n in KUBEADM_VOLUMES}
    if component == catalogue.ETCD and ETCD_DATA in own:
        own[ETCD_DATA] = dict(own[ETCD_DATA], hostPath=data_dir(config), mountPath=data_dir(config))
    else:
        for extra in extra_volumes(config, section):
            entry: Dict[str, object] = {"name": str(extra.get("name")), "hostPath": str(extra.get("hostPath", "")),
                                        "mountPath": str(extra.get("mountPath", "")),
                                        "readOnly": bool(extra.get("readOnly"))}
            if extra.get("pathType"):
                entry["pathType"] = str(extra.get("pathType"))
            own[str(extra.get("name"))] = entry
    spec = out.get("spec")
    assert isinstance(spec, dict)
    spec["volumes"] = [v for v in _list(spec.get("volumes")) if isinstance(v, dict) and "hostPath" not in v] + [
        {"hostPath": dict({"path": e["hostPath"]}, **({"type": e["pathType"]} if e.get("pathType") else {})),
         "name": n} for n, e in sorted(own.items())]
    container["volumeMounts"] = [m for m in _list(container.get("volumeMounts")) if isinstance(m, dict)
                                 and m.get("name") not in host_volumes(pod, _container(pod, index))] + [
        dict({"mountPath": e["mountPath"], "name": n}, **({"readOnly": True} if e.get("readOnly") else {}))
        for n, e in sorted(own.items())]
    for name, ops in patches:
        try:
            patched = apply_json_patch(out, ops)
        except PatchFailed as exc:
            raise PatchFailed("%s: %s" % (name, exc)) from None
        out = patched if isinstance(patched, dict) else out
    return out


def next_upgrade_drops(pod: Mapping[str, object], index: int, config: Dict[str, object], component: str,
                       changed_by_cpctl: Sequence[str] = (),
                       patches: Sequence[Tuple[str, Sequence[Mapping[str, object]]]] = (),
                       command: Callable[..., str] = command_hint_here) -> List[Drop]:
    """What runs now and the next upgrade would not render (:func:`render_next`), each with the
    cpctl command that keeps it whole (``command``: ``Node.command``); [] on a fresh kubeadm layout."""
    name = catalogue.BY_NAME[component].alias if component in catalogue.BY_NAME else component
    try:
        rendered = render_next(pod, index, config, component, changed_by_cpctl, patches)
    except PatchFailed as exc:
        return [Drop("patch", "the next kubeadm upgrade with --patches fails: %s (kubeadm applies a JSON patch "
                     "blind to what an index now points at; the test operation caught it)" % exc,
                     "fix or remove the patch file; keep flags with %s --set ... --keep-in "
                     "kubeadm-config instead" % command("flags", name))]
    running, future = _container(pod, index), _container(rendered, index)
    drops: List[Drop] = []
    later = [(f.name, f.value if f.value is not None else "true") for f in flagtools.flags_of(future)]
    lost = [f for f in flagtools.flags_of(running) if (f.name, f.value if f.value is not None else "true") not in later
            and not (component == catalogue.ETCD and f.name == "data-dir")]
    if lost:
        items = [_item(f) for f in lost]
        repeated = {f.name for f in lost} & set(_repeats(running))
        sets = " ".join("--set %s" % quote(i[2:]) for i in items if i[2:].partition("=")[0] not in repeated)
        fix = "%s %s --keep-in kubeadm-config" % (command("flags", name), sets) if sets else ""
        if repeated:
            fix += ("; " if fix else "") + ("add every instance of --%s to extraArgs (kubeadm.k8s.io/v1beta4 "
                                            "keeps each; kubectl -n kube-system edit cm kubeadm-config)"
                                            % sorted(repeated)[0])
        drops.append(Drop("flags", "drops or resets %s" % " ".join(items), fix, items))
    added = _added_flags(running, future, component)
    if added:
        drops.append(Drop("adds", "renders %s, which does not run now (from the ClusterConfiguration's %s.extraArgs%s)"
                          % (" ".join(added), section_of(component), " or a patch file" if patches else ""),
                          "if it should not run, remove it there (kubectl -n kube-system edit cm kubeadm-config%s); "
                          "if it should, %s %s" % (" / the patch file" if patches else "", command("flags", name),
                                                   " ".join("--set %s" % quote(i[2:]) for i in added)), added))
    now, then = host_volumes(pod, running), host_volumes(rendered, future)
    new_volumes = [v for n, v in then.items() if n not in now and not (component == catalogue.ETCD and n == ETCD_DATA)]
    for vol in new_volumes:
        drops.append(Drop("adds", "mounts hostPath volume %s (%s -> %s), which is not mounted now"
                          % (vol["name"], vol["hostPath"], vol["mountPath"]),
                          "if it should not be mounted, remove it from %s.extraVolumes (kubectl -n kube-system edit cm "
                          "kubeadm-config)" % section_of(component), [str(vol["name"])]))
    gone = [v for n, v in now.items() if then.get(n) != v and not (component == catalogue.ETCD and n == ETCD_DATA)]
    for vol in gone:
        users = [f for f in flagtools.flags_of(running) if (f.value or "").startswith("/")
                 and mounts.mount_of(running, f.value or "") is not None
                 and _mapping(mounts.mount_of(running, f.value or "")).get("name") == vol["name"]]
        fix = ("%s %s --keep-in kubeadm-config (keeps the flag and its volume together)"
               % (command("flags", name), " ".join("--set %s" % quote(_item(f)[2:]) for f in users)) if users and
               component != catalogue.ETCD else
               "add it to %s.extraVolumes (kubectl -n kube-system edit cm kubeadm-config)" % section_of(component)
               if component != catalogue.ETCD else "keep it with --keep-in patches (etcd.local has no extraVolumes)")
        drops.append(Drop("volumes", "unmounts hostPath volume %s (%s -> %s)" % (vol["name"], vol["hostPath"],
                                                                                 vol["mountPath"]), fix,
                          [str(vol["name"])]))
    if component == catalogue.ETCD:
        drop = _data_dir_drop(pod, running, rendered, future, config, name, command)
        if drop is not None:
            drops.append(drop)
    return drops


def _added_flags(running: Mapping[str, object], future: Mapping[str, object], component: str) -> List[str]:
    """``--name=value`` items the render has and what runs has not (a flag it would add, or the new
    value of one it would change): a kept flag whose change was undone, or someone else's edit of
    the ClusterConfiguration, appears at the next upgrade. kubeadm's default for a flag cpctl changed
    is not known here (that one is a reset, reported as dropped)."""
    now = [(f.name, f.value if f.value is not None else "true") for f in flagtools.flags_of(running)]
    return [_item(f) for f in flagtools.flags_of(future)
            if (f.name, f.value if f.value is not None else "true") not in now and f.value != UNKNOWN_DEFAULT
            and not (component == catalogue.ETCD and f.name == "data-dir")]


def _data_dir_drop(pod: Mapping[str, object], running: Mapping[str, object], rendered: Mapping[str, object],
                   future: Mapping[str, object], config: Dict[str, object], name: str,
                   command: Callable[..., str] = command_hint_here) -> Optional[Drop]:
    """etcd's data: the node path it is at now, and where the next upgrade points etcd."""
    flag_now = next((f.value for f in flagtools.flags_of(running) if f.name == "data-dir"), None) or ""
    flag_then = next((f.value for f in flagtools.flags_of(future) if f.name == "data-dir"), None) or ""
    here = mounts.host_path_of(pod, running, flag_now) if flag_now.startswith("/") else None
    there = mounts.host_path_of(rendered, future, flag_then) if flag_then.startswith("/") else None
    if here is None or here == there:
        return None
    fix = ("%s --set data-dir=%s --keep-in kubeadm-config (sets etcd.local.dataDir to %s: kubeadm "
           "mounts it and points --data-dir at it)" % (command("flags", name), quote(flag_now), here))
    if there is None:
        text = ("points etcd at --data-dir=%s, which no hostPath volume mounts (etcd.local.extraArgs sets the flag "
                "only; kubeadm mounts etcd.local.dataDir %s): etcd starts as a new, empty member and the data at %s "
                "is left behind" % (flag_then, data_dir(config), here))
    else:
        text = ("points etcd at %s (etcd.local.dataDir) while it runs on %s: etcd starts on the other data dir and "
                "the data at %s is left behind" % (there, here, here))
    return Drop("data_dir", text, fix, [here], critical=True)


def quote(text: str) -> str:
    """A shell word for a hint."""
    import shlex
    return shlex.quote(text)


# --- kubeadm patch files -------------------------------------------------------------------------
def patch_file_name(component: str) -> str:
    """kubeadm's patch file name for a JSON patch of ``component``: ``<target>+json.yaml``."""
    section_of(component)
    return "%s+json.yaml" % component


def parse_patch(data: Optional[bytes], path: str) -> List[Dict[str, object]]:
    """The operations of an existing patch file ([] when there is none); REFUSED when it is no JSON patch."""
    if not data or not data.strip():
        return []
    try:
        ops, _ = manifests.decode(data)
    except manifests.InvalidManifest:
        ops = None
    if not isinstance(ops, list) or not all(isinstance(o, dict) and isinstance(o.get("op"), str) for o in ops):
        raise CpctlError("%s is not a JSON patch (a list of operations): fix or move it first; nothing changed"
                         % path, ExitCode.REFUSED)
    return [o for o in ops if isinstance(o, dict)]


def patch_ops(existing: Sequence[Mapping[str, object]], index: int, old: Mapping[str, object],
              new: Mapping[str, object], change: FlagChange) -> List[Dict[str, object]]:
    """The patch file's operations after ``change`` of container ``index`` (``old`` -> ``new``).

    kubeadm applies a JSON patch to what the NEXT release renders, blind to what an index points at
    (util/patches/patches.go), and a release that adds, removes or renames a default flag shifts
    every index after it. So no positional operation goes without a guard: ``replace`` and
    ``remove`` of a flag the manifest has are each preceded by a ``test`` of the item at that index
    (a shifted render fails the upgrade loudly, before anything moves, instead of replacing another
    flag); a new flag is an ``add`` at ``-`` (no index). An operation the file already has for the
    flag gets the new value. New operations go after the file's own, with indexes into the current
    manifest (what the file's operations produce). A repeated flag has no single position: refused."""
    ops = [dict(o) for o in existing]
    base = "/spec/containers/%d/" % index
    before = {f.name: f for f in flagtools.flags_of(old)}
    after = {f.name: f for f in flagtools.flags_of(new)}
    names = [n for n, _ in change.sets] + list(change.unsets)
    repeated = sorted({n for n in names if n in set(_repeats(old)) | set(_repeats(new))}
                      | {n for n, _ in change.sets if [m for m, _ in change.sets].count(n) > 1})
    if repeated:
        raise CpctlError("--%s is given more than once: a JSON patch addresses a flag by its position, which a "
                         "repeated flag does not have; keep it with --keep-in kubeadm-config (nothing changed)"
                         % repeated[0], ExitCode.REFUSED)
    removals: List[Tuple[str, int, str]] = []
    for name, value in change.sets:
        item = "--%s=%s" % (name, value)
        mine = [o for o in ops if _names(o.get("value")) == name and o.get("op") in ("add", "replace")]
        if mine:
            mine[0]["value"] = item
        elif name in before:
            path = "%s%s/%d" % (base, before[name].where, before[name].index)
            ops.append({"op": "test", "path": path, "value": _item(before[name])})
            ops.append({"op": "replace", "path": path, "value": item})
        else:
            where = after[name].where if name in after and isinstance(old.get(after[name].where), list) \
                else "command"          # kubeadm renders every flag into command (no args list)
            ops.append({"op": "add", "path": "%s%s/-" % (base, where), "value": item})
    for name in change.unsets:
        if name in before:
            removals.append((before[name].where, before[name].index, _item(before[name])))
    for where, i, item in sorted(removals, key=lambda r: r[1], reverse=True):
        path = "%s%s/%d" % (base, where, i)
        ops.append({"op": "test", "path": path, "value": item})
        ops.append({"op": "remove", "path": path})
    return ops


def volume_ops(existing: Sequence[Mapping[str, object]], index: int, old_pod: Mapping[str, object],
               volumes: Sequence[Mapping[str, object]], removed: Sequence[str]) -> List[Dict[str, object]]:
    """``existing`` operations plus those that give the render the hostPath volumes ``volumes``
    (extraVolumes-shaped entries) and drop ``removed``: one of kubeadm's own volumes (it renders
    them) is a ``test`` + ``replace``/``remove`` at its index in the current manifest; any other is
    an ``add`` at ``-`` of the volume and of its mount (the file's own ``add`` of that name gets the
    new value; a removed one loses its ``add``)."""
    ops = [dict(o) for o in existing]
    spec = _mapping(old_pod.get("spec"))
    listings = (("/spec/volumes", [v for v in _list(spec.get("volumes")) if isinstance(v, dict)]),
                ("/spec/containers/%d/volumeMounts" % index,
                 [m for m in _list(_container(old_pod, index).get("volumeMounts")) if isinstance(m, dict)]))
    drops: List[Tuple[str, int, object]] = []
    for entry in volumes:
        name = str(entry["name"])
        host: Dict[str, object] = {"path": entry["hostPath"]}
        if entry.get("pathType"):
            host["type"] = entry["pathType"]
        mount: Dict[str, object] = {"mountPath": entry["mountPath"], "name": name}
        if entry.get("readOnly"):
            mount["readOnly"] = True
        for (path, listing), value in zip(listings, ({"hostPath": host, "name": name}, mount)):
            mine = [o for o in ops if o.get("op") in ("add", "replace") and str(o.get("path", "")).startswith(path)
                    and _mapping(o.get("value")).get("name") == name]
            at = [i for i, v in enumerate(listing) if v.get("name") == name]
            if mine:
                mine[0]["value"] = value
            elif name in KUBEADM_VOLUMES and at:
                ops.append({"op": "test", "path": "%s/%d" % (path, at[0]), "value": listing[at[0]]})
                ops.append({"op": "replace", "path": "%s/%d" % (path, at[0]), "value": value})
            else:
                ops.append({"op": "add", "path": "%s/-" % path, "value": value})
    for name in removed:
        ops = [o for o in ops if not (o.get("op") == "add" and _mapping(o.get("value")).get("name") == name)]
        if name in KUBEADM_VOLUMES:
            for path, listing in listings:
                drops.extend((path, i, v) for i, v in enumerate(listing) if v.get("name") == name)
    for path, i, value in sorted(drops, key=lambda d: (d[0], d[1]), reverse=True):
        ops.append({"op": "test", "path": "%s/%d" % (path, i), "value": value})
        ops.append({"op": "remove", "path": "%s/%d" % (path, i)})
    return ops


def _item(flag: flagtools.Flag) -> str:
    return "--%s" % flag.name if flag.value is None else "--%s=%s" % (flag.name, flag.value)


def _repeats(container: Mapping[str, object]) -> List[str]:
    seen: Dict[str, int] = {}
    for f in flagtools.flags_of(container):
        seen[f.name] = seen.get(f.name, 0) + 1
    return [n for n, count in seen.items() if count > 1]


def _names(item: object) -> Optional[str]:
    if not isinstance(item, str) or not item.startswith("--"):
        return None
    return item[2:].partition("=")[0]


def dump_patch(ops: Sequence[Mapping[str, object]]) -> bytes:
    """A patch file's bytes: one JSON operation per line of a YAML list (readable, and valid JSON-in-YAML)."""
    return ("".join("- %s\n" % json.dumps(o, sort_keys=True) for o in ops)).encode("utf-8")

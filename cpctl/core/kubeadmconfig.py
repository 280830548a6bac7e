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
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from cpctl import catalogue
from cpctl.core import flags as flagtools
from cpctl.core import manifests
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
    """The flags that differ between two versions of a container: set (new or changed) and removed."""
    before = {f.name: f.value for f in flagtools.flags_of(old)}
    after = {f.name: f.value for f in flagtools.flags_of(new)}
    change = FlagChange()
    for f in flagtools.flags_of(new):
        if f.name not in before or before[f.name] != f.value:
            change.sets.append((f.name, f.value if f.value is not None else "true"))
    change.unsets = [name for name in before if name not in after]
    return change


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
    """A copy of ``config`` with the change in the section's ``extraArgs``, in the shape of its version."""
    out = copy.deepcopy(config)
    extra_args(out, section)                     # refuses a malformed extraArgs before anything else
    part = _section(out, section, create=True)
    assert part is not None
    v1beta4 = out.get("apiVersion") == API_VERSIONS[1]
    raw = part.get("extraArgs")
    if v1beta4:
        items: List[Dict[str, object]] = [dict(a) for a in raw if isinstance(a, dict)] if isinstance(raw, list) else []
        items = [a for a in items if a["name"] not in change.unsets]
        for name, value in change.sets:
            hits = [a for a in items if a["name"] == name]
            if hits:
                hits[0]["value"] = value
                items = [a for a in items if a["name"] != name or a is hits[0]]
            else:
                items.append({"name": name, "value": value})
        new: object = items
    else:
        mapping = {str(k): v for k, v in (raw.items() if isinstance(raw, dict) else ()) if str(k) not in change.unsets}
        for name, value in change.sets:
            mapping[name] = value
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
    the ClusterConfiguration's extraArgs with that value, and not one kubeadm writes itself
    (KUBEADM_FLAGS) - unless cpctl changed that one (``changed_by_cpctl``: kubeadm puts its own value back)."""
    kept = dict(extra_args(config, section_of(component)))
    ours = KUBEADM_FLAGS.get(component, frozenset())
    out = []
    for f in flagtools.flags_of(container):
        value = f.value if f.value is not None else "true"
        if kept.get(f.name) == value or (f.name in ours and f.name not in kept and f.name not in changed_by_cpctl):
            continue
        out.append("--%s" % f.name if f.value is None else "--%s=%s" % (f.name, f.value))
    return out


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
    """The patch file's operations after ``change`` of container ``index`` (``old`` -> ``new``): an
    operation the file has for a flag gets the new value; otherwise ``replace`` at the flag's index
    in the old list (what kubeadm renders), ``add`` at ``-`` for a new flag, ``remove`` (last, from
    the end) for an unset one."""
    ops = [dict(o) for o in existing]
    base = "/spec/containers/%d/" % index
    before = {f.name: f for f in flagtools.flags_of(old)}
    after = {f.name: f for f in flagtools.flags_of(new)}
    removals: List[Tuple[str, int]] = []
    for name, value in change.sets:
        item = "--%s=%s" % (name, value)
        mine = [o for o in ops if _names(o.get("value")) == name and o.get("op") in ("add", "replace")]
        if mine:
            mine[0]["value"] = item
        elif name in before:
            ops.append({"op": "replace", "path": "%s%s/%d" % (base, before[name].where, before[name].index),
                        "value": item})
        else:
            where = after[name].where if name in after else "command"
            ops.append({"op": "add", "path": "%s%s/-" % (base, where), "value": item})
    for name in change.unsets:
        ops = [o for o in ops if not (_names(o.get("value")) == name and o.get("op") in ("add", "replace"))]
        if name in before:
            removals.append((before[name].where, before[name].index))
    for where, i in sorted(removals, key=lambda wi: wi[1], reverse=True):
        ops.append({"op": "remove", "path": "%s%s/%d" % (base, where, i)})
    return ops


def _names(item: object) -> Optional[str]:
    if not isinstance(item, str) or not item.startswith("--"):
        return None
    return item[2:].partition("=")[0]


def dump_patch(ops: Sequence[Mapping[str, object]]) -> bytes:
    """A patch file's bytes: one JSON operation per line of a YAML list (readable, and valid JSON-in-YAML)."""
    return ("".join("- %s\n" % json.dumps(o, sort_keys=True) for o in ops)).encode("utf-8")

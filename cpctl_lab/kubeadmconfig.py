"""The lab's ``kube-system/kubeadm-config`` ConfigMap and what ``kubeadm upgrade apply`` does to manifests.

kubeadm keeps the cluster-wide part of its configuration, a ``ClusterConfiguration``, under the key
``ClusterConfiguration`` of the ConfigMap ``kube-system/kubeadm-config``; ``kubeadm upgrade apply``
(cmd/kubeadm/app/phases/upgrade/staticpods.go, ``upgradeComponent``) renders every control-plane
manifest again from it, so flags set by hand in a manifest and not in the ClusterConfiguration's
``extraArgs`` are gone afterwards (real-node-facts.md, "kubeadm upgrade and the manifests dir").

* API versions: ``kubeadm.k8s.io/v1beta3`` keeps ``extraArgs`` as a map (``{name: value}``),
  ``v1beta4`` (kubeadm v1.31+) as a list of ``{name, value}``; the lab's ``kubeadm_api`` setting
  picks one (``auto``: v1beta4 from v1.31 on).
* Rendering (cmd/kubeadm/app/phases/controlplane/manifests.go, phases/etcd/local.go): the lab's
  seeded manifest of a component (:mod:`cpctl_lab.seeds`, kubeadm's defaults for the release) with
  its ``extraArgs`` merged in as ``ArgumentsToCommand`` does (an extra argument replaces every
  default of the same name, every instance of a repeated v1beta4 argument is kept, the arguments
  are sorted by name then value), its ``extraVolumes`` added as hostPath volumes and mounts, etcd's
  ``etcd-data`` hostPath, mount and ``--data-dir`` all from ``etcd.local.dataDir``, and then the
  ``--patches`` files (util/patches/patches.go: ``target[suffix][+patchtype].(json|yaml)``, in
  file-name order; a JSON patch applied with the ``jsonpatch`` library, blind to what an index now
  points at). What is node-specific (ports, advertise address, etcd members) comes from the node,
  as kubeadm takes it from the node's Init/JoinConfiguration. With an empty configuration the
  render equals the seed.
* The upgrade (phases/upgrade/staticpods.go): the new manifests go to
  ``/etc/kubernetes/tmp/kubeadm-upgraded-manifests-<time>/`` (inside the node's root); a patch that
  does not apply fails the upgrade there, before anything moved. Per component, in kubeadm's order,
  an unchanged manifest is skipped, else its certificates are renewed (unless
  ``--certificate-renewal=false``; renewCertsByComponent) and the current one moves to
  ``/etc/kubernetes/tmp/kubeadm-backup-manifests-<time>/`` and the new one moves in; then kubeadm
  waits for the mirror pod's hash to change and the pod to be Ready; when it does not, every
  manifest moved so far goes back and both tmp dirs stay (the leftovers of a failed upgrade).
  ``halt=True`` stops after staging: the tmp manifests are fresh and nothing has moved (an upgrade
  "in flight", for tests). Finally ``kubernetesVersion`` in the ConfigMap names the new release, and
  ``/version`` reports it once the new API server runs.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from . import nodefiles, profiles, seeds, store

Obj = dict[str, Any]
NAMESPACE, NAME, KEY = "kube-system", "kubeadm-config", "ClusterConfiguration"
API_VERSIONS = ("v1beta3", "v1beta4")
#: ClusterConfiguration section -> component, in kubeadm's upgrade order (etcd first).
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SECTIONS = (("etcd", "etcd"), ("apiServer", "kube-apiserver"),
            ("controllerManager", "kube-controller-manager"), ("scheduler", "kube-scheduler"))
TMP = "etc/kubernetes/tmp"
#: Go layout "2006-01-02-15-04-05", as kubeadm's CreateTimestampDir names its dirs.
STAMP = "%Y-%m-%d-%H-%M-%S"


class ConfigError(Exception):
    """The ClusterConfiguration cannot be used (one line for the CLI)."""


def api_version(settings: profiles.LabSettings) -> str:
    """The ClusterConfiguration API version the lab writes for ``settings``."""
    if settings.kubeadm_api != "auto":
        return settings.kubeadm_api
    return "v1beta4" if settings.release.minor >= 31 else "v1beta3"


def cluster_configuration(settings: profiles.LabSettings, endpoint: str) -> Obj:
    """The ClusterConfiguration ``kubeadm init`` stores for a lab with ``settings`` (no extraArgs yet)."""
    v6 = settings.ip_family == "ipv6"
    version = api_version(settings)
    cfg: Obj = {
        "apiServer": {"timeoutForControlPlane": "4m0s"} if version == "v1beta3" else {},
        "apiVersion": f"kubeadm.k8s.io/{version}",
        "certificatesDir": "/etc/kubernetes/pki",
        "clusterName": "kubernetes",
        "controlPlaneEndpoint": endpoint,
        "controllerManager": {},
        "dns": {},
        "etcd": {"local": {"dataDir": "/var/lib/etcd"}},
        "imageRepository": "registry.k8s.io",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": settings.release.version,
        "networking": {
            "dnsDomain": "cluster.local",
            "podSubnet": "fd00:10:244::/56" if v6 else "10.244.0.0/16",
            "serviceSubnet": "fd00:10:96::/112" if v6 else "10.96.0.0/12",
        },
        "scheduler": {},
    }
    if version == "v1beta4":
        cfg.update({"caCertificateValidityPeriod": "87600h0m0s", "certificateValidityPeriod": "8760h0m0s",
                    "encryptionAlgorithm": "RSA-2048", "proxy": {}})
    return cfg


def configmap(cfg: Obj) -> Obj:
    """The kubeadm-config ConfigMap holding ``cfg``."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NAMESPACE},
            "data": {KEY: yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False)}}


def parse(text: str) -> Obj:
    """The ClusterConfiguration in ``text``; ConfigError when it is no v1beta3/v1beta4 one."""
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"ClusterConfiguration does not parse: {str(exc).splitlines()[0]}") from None
    if not isinstance(cfg, dict) or cfg.get("kind") != "ClusterConfiguration":
        raise ConfigError("ClusterConfiguration does not parse: not a kind ClusterConfiguration object")
    if cfg.get("apiVersion") not in {f"kubeadm.k8s.io/{v}" for v in API_VERSIONS}:
        raise ConfigError(f"ClusterConfiguration has apiVersion {cfg.get('apiVersion')!r}, "
                          "not kubeadm.k8s.io/v1beta3 or v1beta4")
    return cfg


def extra_args(cfg: Obj, section: str) -> list[tuple[str, str]]:
    """The ``extraArgs`` of one section (``etcd`` means ``etcd.local``) as (name, value) pairs."""
    part = cfg.get(section) or {}
    if section == "etcd":
        part = part.get("local") or {}
    raw = part.get("extraArgs") if isinstance(part, dict) else None
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [(str(k), str(v)) for k, v in raw.items()]
    if isinstance(raw, list) and all(isinstance(a, dict) and "name" in a for a in raw):
        return [(str(a["name"]), str(a.get("value", ""))) for a in raw]
    raise ConfigError(f"ClusterConfiguration {section}.extraArgs is neither a map nor a name/value list")


def merge_command(command: list[str], extras: list[tuple[str, str]]) -> list[str]:
    """kubeadm's ArgumentsToCommand (cmd/kubeadm/app/util/arguments.go): an extra argument removes
    every default of the same name, every extra instance is kept (v1beta4 may repeat a name), and
    the arguments are sorted by name, then by value."""
    names = {n for n, _ in extras}
    args = []
    for arg in command[1:]:
        name, _, value = arg[2:].partition("=")
        if name not in names:
            args.append((name, value))
    args += extras
    args.sort()
    return command[:1] + [f"--{n}={v}" for n, v in args]


def extra_volumes(cfg: Obj, section: str) -> list[Obj]:
    """A section's ``extraVolumes`` (``name``, ``hostPath``, ``mountPath``, ``readOnly``, ``pathType``);
    ``etcd.local`` has none (kubeadm mounts only etcd-data and etcd-certs into etcd)."""
    part = cfg.get(section) or {}
    raw = part.get("extraVolumes") if isinstance(part, dict) and section != "etcd" else None
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, dict) and v.get("name") and v.get("hostPath")
                                            and v.get("mountPath") for v in raw):
        raise ConfigError(f"ClusterConfiguration {section}.extraVolumes: every entry needs name, hostPath and "
                          "mountPath")
    return raw


def data_dir(cfg: Obj) -> str:
    """``etcd.local.dataDir`` (kubeadm's default ``/var/lib/etcd``)."""
    local = (cfg.get("etcd") or {}).get("local") or {}
    return str(local.get("dataDir") or "/var/lib/etcd")


def _with_volumes(pod: Obj, extras: list[Obj]) -> None:
    """kubeadm's AddExtraHostPathMounts (phases/controlplane/volumes.go): each extra volume becomes a
    hostPath volume and a mount of the same name (replacing one of kubeadm's own of that name), and
    the volumes and mounts are listed sorted by name (staticpod.VolumeMapToSlice)."""
    if not extras:
        return
    container = pod["spec"]["containers"][0]
    vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
    for extra in extras:
        host: Obj = {"path": str(extra["hostPath"])}
        if extra.get("pathType"):
            host["type"] = str(extra["pathType"])
        vols[extra["name"]] = {"hostPath": host, "name": extra["name"]}
        mount: Obj = {"mountPath": str(extra["mountPath"]), "name": extra["name"]}
        if extra.get("readOnly"):
            mount["readOnly"] = True
        mounts[extra["name"]] = mount
    pod["spec"]["volumes"] = [vols[n] for n in sorted(vols)]
    container["volumeMounts"] = [mounts[n] for n in sorted(mounts)]


def _with_data_dir(pod: Obj, path: str) -> None:
    """phases/etcd/local.go GetEtcdPodSpec: the ``etcd-data`` hostPath, its mount and ``--data-dir``
    all come from ``etcd.local.dataDir`` (an extraArgs ``data-dir`` overrides the flag only)."""
    for v in pod["spec"].get("volumes") or []:
        if v.get("name") == "etcd-data":
            v["hostPath"]["path"] = path
    container = pod["spec"]["containers"][0]
    for m in container.get("volumeMounts") or []:
        if m.get("name") == "etcd-data":
            m["mountPath"] = path
    container["command"] = [f"--data-dir={path}" if a.startswith("--data-dir=") else a for a in container["command"]]


@dataclass(frozen=True)
class NodeSpec:
    """What a master's manifests depend on besides the ClusterConfiguration (read from lab.json)."""

    node: str
    root: Path
    ports: dict[str, int]
    members: dict[str, dict[str, int]]
    loopback: str
    stacked_etcd: bool

    def seed_spec(self, release: profiles.KubeRelease) -> seeds.SeedSpec:
        return seeds.SeedSpec(node=self.node, ports=self.ports, members=self.members, root=self.root,
                              release=release, loopback=self.loopback, stacked_etcd=self.stacked_etcd)


def release_of(version: str) -> profiles.KubeRelease:
    """The lab release whose image tag is ``version`` (ConfigError when the lab has none)."""
    for rel in profiles.RELEASES.values():
        if rel.version == version:
            return rel
    raise ConfigError(f"kubernetesVersion {version!r} is none of the lab's releases "
                      f"({', '.join(r.version for r in profiles.RELEASES.values())})")


def render(cfg: Obj, spec: NodeSpec, release: profiles.KubeRelease,
           patches: Optional[Path] = None) -> dict[str, str]:
    """Each component's manifest text as kubeadm renders it from ``cfg`` for ``release``: the seed with
    ``dataDir``, ``extraArgs`` and ``extraVolumes``, then the patch files of ``patches`` (a dir on the
    lab's disk; :func:`patch_pod`). PatchError when a patch does not apply."""
    pods = seeds.manifests(spec.seed_spec(release))
    _with_data_dir(pods["etcd"], data_dir(cfg))
    out = {}
    for section, comp in SECTIONS:
        pod = pods[comp]
        container = pod["spec"]["containers"][0]
        container["command"] = merge_command(container["command"], extra_args(cfg, section))
        _with_volumes(pod, extra_volumes(cfg, section))
        if patches is not None:
            pod = patch_pod(pod, comp, patches)
        out[comp] = yaml.safe_dump(pod, sort_keys=False, default_flow_style=False)
    return out


# ----------------------------------------------------------------------------------- patch files
class PatchError(ConfigError):
    """A patch file that kubeadm would refuse or that does not apply (the upgrade fails)."""


_PATCH_NAME = re.compile(r"^(?P<target>etcd|kube-apiserver|kube-controller-manager|kube-scheduler|"
                         r"kubeletconfiguration)(?P<suffix>[^.+\n]*)(?P<plus>\+)?(?P<type>json|merge|strategic)?")


def patch_files(patches: Path, target: str) -> list[tuple[Path, str]]:
    """util/patches/patches.go getPatchSetsFromPath/parseFilename: the files
    ``target[suffix][+patchtype].(json|yaml)`` under the dir, walked in lexical order (as Go's
    filepath.Walk does, sub-directories included), with their patch type (default ``strategic``); a
    ``+`` without a known type is an error, an unknown target or extension is ignored."""
    if not patches.is_dir():
        raise PatchError(f"could not list patch files for path {str(patches)!r}: not a directory")
    out = []
    for path in _walk(patches):
        if not re.match(r".+\.(json|yaml)$", path.name):
            continue
        match = _PATCH_NAME.match(path.name)
        if match is None:
            continue
        if match.group("plus") and not match.group("type"):
            raise PatchError(f"{path.name}: unknown or missing patch type after '+', must be one of "
                             "[json merge strategic]")
        if match.group("target") == target and path.stat().st_size:
            out.append((path, match.group("type") or "strategic"))
    return out


def _walk(directory: Path) -> list[Path]:
    out = []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        out.extend(_walk(entry) if entry.is_dir() else [entry])
    return out


def patch_pod(pod: Obj, comp: str, patches: Path) -> Obj:
    """The pod after every patch of every file for ``comp`` (staticpod PatchStaticPod; a file may hold
    several YAML documents, each one patch): ``json`` RFC 6902 with the ``jsonpatch`` library (no
    check that an index still points where it did - a ``test`` op is the only guard), ``merge`` RFC
    7386, ``strategic`` the strategic merge of a Pod (containers, volumes and volumeMounts merged by
    their key; ``command`` and every other list replaced whole). A patch that does not apply fails
    the render (kubeadm: "could not apply the following patch ...")."""
    for path, kind in patch_files(patches, comp):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as exc:
            raise PatchError(f"could not convert patch to JSON ({path.name}): {exc}") from None
        for patch in docs:
            pod = _apply(pod, comp, path, kind, patch)
    return pod


def _apply(pod: Obj, comp: str, path: Path, kind: str, patch: Any) -> Obj:
    failed = f"failed to patch static Pod manifest file for {comp!r}: could not apply the following patch of type " \
             f"{kind!r} to target {comp!r} ({path.name})"
    if kind == "json":
        try:    # the lab's dependency (setup.cfg extras "lab"): a real RFC 6902 implementation
            import jsonpatch
        except ImportError:
            raise PatchError("applying a JSON patch needs the jsonpatch package: pip install 'cpctl[lab]'") from None
        try:
            out: Obj = jsonpatch.apply_patch(pod, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
            raise PatchError(f"{failed}: {exc}") from None
        return out
    if not isinstance(patch, dict):
        raise PatchError(f"{failed}: a {kind} patch must be an object")
    if kind == "merge":
        merged: Obj = store.merge_patch(pod, patch)
        return merged
    strategic: Obj = _strategic(pod, patch)
    return strategic


_MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "volumeMounts": "mountPath",
               "env": "name"}


def _strategic(target: Any, patch: Any, key: str = "") -> Any:
    if isinstance(target, dict) and isinstance(patch, dict):
        out = dict(target)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = _strategic(target.get(k), v, k)
        return out
    if isinstance(target, list) and isinstance(patch, list) and key in _MERGE_KEYS:
        merge_key = _MERGE_KEYS[key]
        merged = list(target)
        for item in patch:
            at = [i for i, t in enumerate(merged) if isinstance(t, dict) and isinstance(item, dict)
                  and t.get(merge_key) == item.get(merge_key)]
            if at:
                merged[at[0]] = _strategic(merged[at[0]], item)
            else:
                merged.append(item)
        return merged
    return patch


# ----------------------------------------------------------------------------------- the upgrade
def _api(info: Obj, method: str, body: Optional[Obj] = None) -> Obj:
    url = f"{info['api']['url']}/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, method=method, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            out: Obj = json.loads(resp.read())
            return out
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"{method} configmap {NAMESPACE}/{NAME}: HTTP {exc.code}") from None
    except OSError as exc:
        raise ConfigError(f"cannot reach the lab's API ({exc})") from None


def node_specs(info: Obj, directory: Path) -> list[NodeSpec]:
    """Every master's NodeSpec, from lab.json and seed-ports.json."""
    ports = json.loads((directory / "seed-ports.json").read_text())
    names = [m["name"] for m in info["masters"]]
    members = {n: ports[n] for n in names}
    prof = info.get("profile") or {}
    loop = "::1" if prof.get("ip_family") == "ipv6" else "127.0.0.1"
    return [NodeSpec(n, nodefiles.root_dir(directory, n), ports[n], members, loop, bool(prof.get("stacked_etcd")))
            for n in names]


def next_release(current: profiles.KubeRelease) -> profiles.KubeRelease:
    """The lab release after ``current`` (itself when it is the newest)."""
    rels = list(profiles.RELEASES.values())
    i = rels.index(current)
    return rels[i + 1] if i + 1 < len(rels) else current


@dataclass
class Outcome:
    """What one master's upgrade did."""

    node: str
    upgraded: list[str]
    skipped: list[str]
    backup_dir: str
    staged_dir: str
    halted: bool
    renewed: list[str] = field(default_factory=list)


def upgrade(info: Obj, directory: Path, to: Optional[str], halt: bool, timeout: float,
            wait: Optional[Callable[[str, str, str, float], bool]] = None, patches: Optional[str] = None,
            renew_certs: bool = True) -> tuple[str, str, list[Outcome]]:
    """``kubeadm upgrade apply`` on every master in turn; (old version, new version, outcomes).

    ``wait(node, component, old_hash, timeout)`` says whether the component's mirror pod changed
    its config hash and is Ready (default: :func:`wait_mirror` on the lab's API); when it does not,
    the backup moves back and ConfigError is raised. ``patches``: the ``--patches`` dir, a path on
    the master (kubeadm remembers nothing: without it no patch file is applied). ``renew_certs``:
    ``--certificate-renewal`` (kubeadm's default true renews the certificates of each component it
    moves, just before the move; a skipped component keeps its own)."""
    wait = wait or (lambda node, comp, old, t: wait_mirror(info, node, comp, old, t))
    cm = _api(info, "GET")
    cfg = parse((cm.get("data") or {}).get(KEY, ""))
    for spec in node_specs(info, directory):
        manifest_health(spec)
    old = release_of(str(cfg.get("kubernetesVersion", "")))
    new = profiles.RELEASES[to] if to else next_release(old)
    version_policy(old, new)
    outcomes = []
    for spec in node_specs(info, directory):
        patch_dir = spec.root / patches.lstrip("/") if patches else None
        outcomes.append(_upgrade_node(cfg, spec, new, halt, timeout, wait, info, patch_dir, renew_certs))
        if halt:
            return old.version, new.version, outcomes
    cfg["kubernetesVersion"] = new.version
    cm["data"][KEY] = yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False)
    _api(info, "PUT", cm)
    return old.version, new.version, outcomes


def version_policy(old: profiles.KubeRelease, new: profiles.KubeRelease) -> None:
    """kubeadm's version skew policy (phases/upgrade/policy.go, EnforceVersionPolicies): one minor
    release up or down at a time - for a released version a mandatory error, before anything moves
    (``--to 1.31`` on the ``ha`` profile's v1.33 was carried out as a downgrade)."""
    if new.minor > old.minor + 1:
        raise ConfigError(f'Specified version to upgrade to "{new.version}" is too high; kubeadm can upgrade only 1 '
                          f"minor version at a time (the cluster runs {old.version})")
    if new.minor < old.minor - 1:
        raise ConfigError(f'Specified version to downgrade to "{new.version}" is too low; kubeadm can downgrade only '
                          f"1 minor version at a time (the cluster runs {old.version})")


def manifest_health(spec: NodeSpec) -> None:
    """kubeadm's preflight check StaticPodManifest (phases/upgrade/health.go): every control-plane
    manifest but etcd's must be on disk (a parked one is not), else the upgrade does not start."""
    mdir = spec.root / "etc/kubernetes/manifests"
    missing = [f"/etc/kubernetes/manifests/{c}.yaml" for c in COMPONENTS[1:] if not (mdir / f"{c}.yaml").exists()]
    if missing:
        raise ConfigError("[ERROR StaticPodManifest]: The control plane seems to be Static Pod-hosted, but some of "
                          "the manifests don't seem to exist on disk. This probably means you're running 'kubeadm "
                          "upgrade' on a remote machine, which is not supported for a Static Pod-hosted cluster. "
                          f"Manifest files not found: [{' '.join(missing)}]")


def _upgrade_node(cfg: Obj, spec: NodeSpec, release: profiles.KubeRelease, halt: bool, timeout: float,
                  wait: Callable[[str, str, str, float], bool], info: Obj, patches: Optional[Path] = None,
                  renew_certs: bool = True) -> Outcome:
    stamp = time.strftime(STAMP, time.gmtime())
    tmp = spec.root / TMP
    staged, backup = tmp / f"kubeadm-upgraded-manifests-{stamp}", tmp / f"kubeadm-backup-manifests-{stamp}"
    staged.mkdir(parents=True, exist_ok=True)
    backup.mkdir(parents=True, exist_ok=True)
    texts = render(cfg, spec, release, patches)    # a patch that fails: nothing has moved yet
    for comp, text in texts.items():
        (staged / f"{comp}.yaml").write_text(text)
    out = Outcome(spec.node, [], [], str(backup), str(staged), halt)
    if halt:
        return out
    mdir = spec.root / "etc/kubernetes/manifests"
    for comp, text in texts.items():
        current = mdir / f"{comp}.yaml"
        if current.exists() and current.read_text() == text:
            out.skipped.append(comp)
            continue
        old = mirror_hash(info, spec.node, comp)
        if renew_certs and (spec.root / "etc/kubernetes/pki/ca.key").is_file():
            # renewCertsByComponent: a moved component's certificates, just before its move
            from . import pki
            out.renewed += pki.renew_all(spec.root / "etc/kubernetes", spec.node, pki.BY_COMPONENT[comp])
        if current.exists():
            os.replace(current, backup / current.name)
        os.replace(staged / current.name, current)
        if not wait(spec.node, comp, old, timeout):
            # rollbackOldManifests: every manifest moved so far goes back; the tmp dirs stay
            for done in [*out.upgraded, comp]:
                if (backup / f"{done}.yaml").exists():
                    os.replace(backup / f"{done}.yaml", mdir / f"{done}.yaml")
            raise ConfigError(f"{comp} on {spec.node} did not come back within {timeout:g}s: couldn't upgrade "
                              "control plane. kubeadm has tried to recover everything into the earlier state; "
                              f"its leftovers stay in {tmp}")
        out.upgraded.append(comp)
    for leftover in staged.iterdir():
        leftover.unlink()
    staged.rmdir()
    return out


def _mirror(info: Obj, node: str, comp: str) -> Optional[Obj]:
    url = f"{info['api']['url']}/api/v1/namespaces/{NAMESPACE}/pods/{comp}-{node}"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            pod: Obj = json.loads(resp.read())
            return pod
    except (OSError, ValueError):
        return None


def mirror_hash(info: Obj, node: str, comp: str) -> str:
    """The ``kubernetes.io/config.hash`` of a component's mirror pod ("" when there is none)."""
    pod = _mirror(info, node, comp) or {}
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/config.hash", ""))


def wait_mirror(info: Obj, node: str, comp: str, old_hash: str, timeout: float) -> bool:
    """Wait until the mirror pod has a hash other than ``old_hash`` and is Ready (kubeadm's wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = _mirror(info, node, comp) or {}
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        new_hash = str((meta.get("annotations") or {}).get("kubernetes.io/config.hash", ""))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if new_hash and new_hash != old_hash and ready:
            return True
        time.sleep(0.1)
    return False

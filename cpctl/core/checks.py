"""What a careful reviewer checks before a new version of a static pod's manifest goes in.

``review`` runs before ``apply`` (and ``edit``, ``flags``, ``rollback``) touches anything:

* the bytes are a manifest the kubelet would run (one v1 Pod, checked as the kubelet's file source
  and the API server's validation would) and name the same pod (name and namespace) as the file
  they replace -- a rename would leave the old mirror pod and start a second component;
* no flag is given twice where the component takes it once (the last one silently wins);
* every file a flag names (``--tls-cert-file``, ``--kubeconfig``, ``--encryption-provider-config``...)
  exists on the node behind the container's volume mounts, and every hostPath volume whose type
  says the path must exist (``File``, ``Directory``, ``Socket``...) does: otherwise the container
  crash-loops or never starts;
* the ports it listens on (hostNetwork: its container ports and the port flags of the known
  components) are not taken by another static pod in the manifests dir.

Field names (``podfields``): every key of the pod is a field of its v1 API type in the release the
node runs (a typo such as ``volumeMount``, or a field of a newer release, is dropped by the kubelet
without a word), with the nearest known name.

Flag sanity (``sanity_doubts``): every flag name is one the component's binary knows in its release
(:mod:`cpctl.core.knownflags`), every admission plugin is a known one, the probes' ports are ports
the component listens on (``--secure-port=64430`` with probes on 6443 would be killed as
unhealthy), and every path a flag *writes* (``--audit-log-path``, etcd's ``--data-dir``) is on a
writable hostPath volume (else what is written is lost with the container). These rely on lists
that may be out of date for a newer release, so they refuse the change unless ``--force`` is
given, which turns them into warnings.

Problems refuse the change (exit 4, every problem listed). A file flag whose path no hostPath volume
mounts is a problem too: the control-plane images are distroless and hold no configuration files,
so the component would not find it. Only what the change brings refuses it: a problem the running
version has too (it runs, so something makes it work) is a warning.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from cpctl import catalogue
from cpctl.core import flags, knownflags, manifests, mounts, podfields
from cpctl.core.manifests import DirScan, Manifest
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host

_FILE_FLAG = re.compile(r"(-file|kubeconfig|^config|-config)$")
_MUST_EXIST = {"File": "file", "Directory": "dir", "Socket": "socket", "CharDevice": "char",
               "BlockDevice": "block"}
_URL_PORT_FLAGS = ("listen-client-urls", "listen-peer-urls", "listen-metrics-urls")
_HOSTPORT_FLAGS = ("bind-address", "metrics-bind-address", "healthz-bind-address")


@dataclass
class Review:
    """The verdict on a new manifest: the decoded pod, and what only looks odd."""

    pod: Dict[str, Any]
    warnings: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    doubts: List[str] = field(default_factory=list)      # refused unless --force (then warnings)
    # the doubts about where a flag writes: --force would lose what the component writes (etcd's
    # data), so their hint is the real fix, never --force
    lossy: List[str] = field(default_factory=list)
    # the release the node's kubelet decodes pods as (its pod fields), None before ``review`` sets it
    release: Optional[podfields.Release] = None

    def refuse_if_bad(self, what: str, force: bool = False, edit: str = "cpctl edit") -> None:
        """Refuse (exit 4) for any problem, and for any doubt unless ``force``; forced doubts become
        warnings, so the output still says what was overridden. ``edit``: the command that changes
        the manifest's volumes too (``cpctl edit etcd --parked``), the hint for a write-path doubt."""
        if self.problems:
            raise CpctlError("%s refused: %s (nothing changed)" % (what, "; ".join(self.problems + self.doubts)),
                             ExitCode.REFUSED)
        if self.doubts and not force:
            if any(doubt in self.lossy for doubt in self.doubts):
                hint = "change the hostPath with the flag: `%s`" % edit
            else:
                hint = "if cpctl's list is out of date for this release, pass --force to go ahead"
            raise CpctlError("%s refused: %s (nothing changed)" % (what, "; ".join(self.doubts)), ExitCode.REFUSED,
                             hint=hint)
        if self.doubts:
            self.warnings.extend("%s (--force)" % doubt for doubt in self.doubts)
            self.doubts = []


#: The words of a doubt about a written path that no hostPath volume holds.
UNMOUNTED = "is on no hostPath volume mounted"


def parse_new(data: bytes, source: str) -> Dict[str, Any]:
    """The pod the kubelet would run from ``data``; refused (exit 4) when it would run none."""
    try:
        return manifests.parse_pod(data)
    except manifests.InvalidManifest as exc:
        raise CpctlError("%s is not a manifest the kubelet would run: %s (nothing changed)" % (source, exc),
                         ExitCode.REFUSED) from None


def review(host: Host, current: Manifest, data: bytes, scan: DirScan, source: str, root: str = "/",
           coming: Sequence[str] = ()) -> Review:
    """Every check of the module docstring for ``data`` replacing ``current``; ``root`` is the
    directory that holds the node's ``/`` (``--node-root``: hostPaths are looked up under it);
    ``coming``: node paths of files the same change writes (companion files), counted as there."""
    pod = parse_new(data, source)
    verdict = Review(pod)
    meta = pod["metadata"]
    new_key = (meta.get("namespace") or "default", meta["name"])
    old_key = (current.namespace, current.pod_name)
    if new_key != old_key:
        verdict.problems.append("it defines pod %s/%s, not %s/%s (a rename would start a second pod: write a new "
                                "file for a new pod)" % (new_key + old_key))
    already = set(pod_problems(host, current.pod, root)) if current.pod else set()
    for problem in pod_problems(host, pod, root, coming):
        if problem in already:      # the running version has it too: not this change's doing
            verdict.warnings.append("%s (so does the current version)" % problem)
        else:
            verdict.problems.append(problem)
    _check_ports(pod, current, scan, verdict)
    release = verdict.release = podfields.node_release([m.pod for m in scan.valid] + [current.pod, pod])
    if release.note:
        verdict.warnings.append(release.note)
    already = set(podfields.doubts(current.pod, release) + sanity_doubts(current.pod)) if current.pod else set()
    lossy = {doubt for container in _containers(pod)
             for doubt in _write_path_doubts(pod, container, binary_of(container), flags.flags_of(container))}
    for doubt in podfields.doubts(pod, release) + sanity_doubts(pod):
        if doubt in already:
            verdict.warnings.append("%s (so does the current version)" % doubt)
        else:
            verdict.doubts.append(doubt)
            if doubt in lossy:
                verdict.lossy.append(doubt)
    return verdict


# --- flag sanity ---------------------------------------------------------------------------------
def sanity_doubts(pod: Mapping[str, object]) -> List[str]:
    """What looks wrong in the flags of ``pod``'s containers by cpctl's lists (module docstring)."""
    found: List[str] = []
    for container in _containers(pod):
        binary = binary_of(container)
        known = knownflags.known_flags(binary, str(container.get("image") or ""))
        if known is None:
            continue
        given = flags.flags_of(container)
        for flag in given:
            if flag.name not in known:
                close = manifests.close_names(flag.name, sorted(known))
                found.append("%s has no flag --%s%s" % (binary, flag.name, " (did you mean --%s?)" % close[0]
                                                         if close else ""))
            elif flag.name in knownflags.ADMISSION_FLAGS:
                found += _plugin_doubts(flag.name, flag.value or "")
        found += _write_path_doubts(pod, container, binary, given)
        found += _probe_port_doubts(pod, container, binary)
    return found


def _plugin_doubts(name: str, value: str) -> List[str]:
    found = []
    for plugin in filter(None, (p.strip() for p in value.split(","))):
        if plugin not in knownflags.ADMISSION_PLUGINS:
            close = manifests.close_names(plugin, sorted(knownflags.ADMISSION_PLUGINS))
            found.append("--%s: unknown admission plugin %s%s (the API server would not start)"
                         % (name, plugin, " (did you mean %s?)" % close[0] if close else ""))
    return found


def _write_path_doubts(pod: Mapping[str, object], container: Mapping[str, object], binary: str,
                       given: List[flags.Flag]) -> List[str]:
    """Every path a flag writes lies on a hostPath volume mounted writable into the container."""
    found = []
    for flag in given:
        if flag.name not in knownflags.WRITE_PATH_FLAGS.get(binary, ()) or not (flag.value or "").startswith("/"):
            continue
        mount = mounts.mount_of(container, flag.value or "")
        if mounts.host_path_of(pod, container, flag.value or "") is None:
            found.append("--%s=%s %s into container %s: what it writes would be lost with the container (add a "
                         "hostPath volume and a volumeMount for its directory)"
                         % (flag.name, flag.value, UNMOUNTED, container.get("name")))
        elif mount is not None and mount.get("readOnly"):
            found.append("--%s=%s is on the read-only mount %s of container %s: the component cannot write there"
                         % (flag.name, flag.value, mount.get("mountPath"), container.get("name")))
    return found


def _probe_port_doubts(pod: Mapping[str, object], container: Mapping[str, object], binary: str) -> List[str]:
    """The probes of a known component on a hostNetwork pod check a port it listens on."""
    if not _mapping(pod.get("spec")).get("hostNetwork") or binary not in catalogue.BY_NAME:
        return []
    listening: Set[object] = {port for _, port in _flag_listeners(container)}
    listening |= {p.get("containerPort") for p in _items(container.get("ports")) if isinstance(p, dict)}
    found = []
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container.get(kind)
        port = _mapping(_mapping(probe).get("httpGet")).get("port") if isinstance(probe, dict) else None
        if isinstance(port, int) and port not in listening:
            found.append("the %s of container %s checks port %d, where %s does not listen (it listens on %s): the "
                         "kubelet would kill it as unhealthy (change the probes too: cpctl apply/edit)"
                         % (kind, container.get("name"), port, binary,
                            ", ".join(str(p) for p in sorted(p for p in listening if isinstance(p, int))) or "none"))
    return found


def pod_problems(host: Host, pod: Mapping[str, object], root: str = "/", coming: Sequence[str] = ()) -> List[str]:
    """What is wrong with ``pod`` on its own: duplicated flags, missing files, missing hostPaths
    (looked up under ``root``; ``coming``: files the change itself writes, counted as there)."""
    found: List[str] = []
    for container in _containers(pod):
        name = container.get("name")
        for flag in flags.duplicated(container):
            found.append("container %s gives --%s more than once (only the last one counts)" % (name, flag))
        found += _file_flag_problems(host, pod, container, root, coming)
    return found + _host_path_problems(host, pod, root, coming)


def _mapping(value: object) -> Mapping[str, object]:
    """A decoded object field ({} when absent or not an object)."""
    return value if isinstance(value, dict) else {}


def _items(value: object) -> List[object]:
    """A decoded list field ([] when absent or not a list)."""
    return value if isinstance(value, list) else []


def _containers(pod: Mapping[str, object]) -> List[Mapping[str, object]]:
    spec = _mapping(pod.get("spec"))
    return [c for c in _items(spec.get("initContainers")) + _items(spec.get("containers")) if isinstance(c, dict)]


def _file_flag_problems(host: Host, pod: Mapping[str, object], container: Mapping[str, object], root: str = "/",
                        coming: Sequence[str] = ()) -> List[str]:
    found = []
    named = [f for f in flags.flags_of(container) if f.value and f.value.startswith("/") and _FILE_FLAG.search(f.name)]
    places = [mounts.host_path_of(pod, container, str(f.value)) for f in named]
    host.read_ahead([("lstat", {"path": mounts.under_root(root, p)}) for p in places if p and p not in coming])
    for flag, node_path in zip(named, places):
        assert flag.value is not None
        if node_path is None:
            found.append("--%s names %s, which no hostPath volume mounts into container %s (control-plane images "
                         "hold no such files: add a volume and a volumeMount for it)"
                         % (flag.name, flag.value, container.get("name")))
        elif node_path not in coming and host.lstat(mounts.under_root(root, node_path)) is None:
            shown = flag.value if node_path == flag.value else "%s (on the node: %s)" % (flag.value, node_path)
            found.append("--%s names %s, which does not exist on the node" % (flag.name, shown))
    return found


def _host_path_problems(host: Host, pod: Mapping[str, object], root: str = "/", coming: Sequence[str] = ()
                        ) -> List[str]:
    found = []
    volumes = _items(_mapping(pod.get("spec")).get("volumes"))
    host.read_ahead([("lstat", {"path": mounts.under_root(root, str(v["hostPath"]["path"]))}) for v in volumes
                     if isinstance(v, dict) and isinstance(v.get("hostPath"), dict) and "path" in v["hostPath"]])
    for volume in volumes:
        host_path = volume.get("hostPath") if isinstance(volume, dict) else None
        kind = host_path.get("type") if isinstance(host_path, dict) else None
        if not isinstance(volume, dict) or not isinstance(host_path, dict) or not isinstance(kind, str) \
                or kind not in _MUST_EXIST:
            continue
        wanted, path = _MUST_EXIST[kind], str(host_path["path"])    # a hostPath volume has a path (podspec)
        below = path.rstrip("/") + "/"
        if (wanted == "file" and path in coming) or \
                (wanted == "dir" and any(p.startswith(below) for p in coming)):
            continue                 # the change writes it (a companion file; its directory is made first)
        info = host.lstat(mounts.under_root(root, path))
        if info is None:
            found.append("hostPath volume %s: %s (type %s) does not exist on the node (the pod would never start)"
                         % (volume.get("name"), path, kind))
        elif info["kind"] != wanted and info["kind"] != "symlink":
            found.append("hostPath volume %s: %s is a %s, not a %s" % (volume.get("name"), path, info["kind"], kind))
    return found


# --- ports ---------------------------------------------------------------------------------------
Listener = Tuple[str, int]           # (address, port); "" is every address


def listeners(pod: Mapping[str, object]) -> List[Listener]:
    """Where a hostNetwork pod listens on the node: container ports, and for the known components
    their port flags (or kubeadm's defaults); a pod on the pod network only by its hostPorts."""
    spec = _mapping(pod.get("spec"))
    host_network = bool(spec.get("hostNetwork"))
    found: List[Listener] = []
    for container in _items(spec.get("containers")):
        if not isinstance(container, dict):
            continue
        for port in _items(container.get("ports")):
            if isinstance(port, dict) and port.get("protocol", "TCP") == "TCP":
                number = port.get("hostPort") or (port.get("containerPort") if host_network else 0)
                if isinstance(number, int) and number:
                    found.append((str(port.get("hostIP") or ""), number))
        if host_network:
            found += list(_flag_listeners(container))
    return sorted(set(found))


def _flag_listeners(container: Mapping[str, object]) -> Iterator[Listener]:
    given = {f.name: f.value for f in flags.flags_of(container) if f.value is not None}
    binary = binary_of(container)
    entry = catalogue.BY_NAME.get(binary)
    if entry is not None and entry.port_flag is not None:
        port = _port(given.get(entry.port_flag)) if entry.port_flag in given else entry.health.port
        if port:
            yield (_address(given.get("bind-address")), port)
    for name in _URL_PORT_FLAGS:
        for url in (given.get(name) or "").split(","):
            parsed = urllib.parse.urlsplit(url.strip())
            try:
                if parsed.port:
                    yield (_address(parsed.hostname), parsed.port)
            except ValueError:
                continue
    for name in _HOSTPORT_FLAGS:
        value = given.get(name) or ""
        host, _, port_text = value.rpartition(":")
        if host and _port(port_text):
            yield (_address(host.strip("[]")), int(port_text))


def binary_of(container: Mapping[str, object]) -> str:
    """The file name of the container's command (``kube-apiserver``), "" when it has none."""
    command = _items(container.get("command"))
    first = command[0] if command and isinstance(command[0], str) else ""
    return first.rsplit("/", 1)[-1]


def _port(text: Optional[str]) -> int:
    return int(text) if text and text.isdigit() and 0 < int(text) < 65536 else 0


def _address(text: Optional[str]) -> str:
    """"" for every address (unset, 0.0.0.0, ::), else the address as written."""
    if not text:
        return ""
    try:
        return "" if ipaddress.ip_address(text).is_unspecified else text
    except ValueError:
        return text


def _overlap(a: Listener, b: Listener) -> bool:
    return a[1] == b[1] and (not a[0] or not b[0] or a[0] == b[0])


def _check_ports(pod: Mapping[str, object], current: Manifest, scan: DirScan, verdict: Review) -> None:
    mine, before = listeners(pod), listeners(current.pod or {})
    for other in scan.valid:
        if other.file == current.file or other.pod is None:
            continue
        for theirs in listeners(other.pod):
            clash = next((m for m in mine if _overlap(m, theirs)), None)
            if clash is not None and not any(_overlap(b, theirs) for b in before):   # only a clash it brings
                verdict.problems.append("port %d is also used by %s (%s)" % (clash[1], other.pod_name, other.file))

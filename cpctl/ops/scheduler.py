"""A second kube-scheduler as a static pod, generated from the node's own kube-scheduler manifest.

Since Kubernetes 1.22 ``--scheduler-name`` is gone: a scheduler's name lives in a
``KubeSchedulerConfiguration`` file (``profiles[].schedulerName``). A second scheduler on a
master therefore needs three things the default one does not: its own config file, its own
leader-election Lease (or it fights the default scheduler for ``kube-system/kube-scheduler``)
and its own ``--secure-port`` (hostNetwork: 10259 is taken). This module derives all of that
from the existing manifest so image, kubeconfig, volumes and security settings stay exactly
what kubeadm wrote, and writes the two files crash-safely through the ``Host``:

* config first, then manifest: the kubelet never runs a pod whose ``--config`` is missing;
* both with ``write_atomic`` (dot-temp + fsync + rename): the kubelet never sees half a file;
* removal moves both into ``STATE/removed/<timestamp>/`` (never a plain delete).

No click here: the command module only parses options and prints.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import secrets
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypedDict, cast

from cpctl import catalogue
from cpctl.core import journal, manifests, views
from cpctl.core.manifests import DirScan
from cpctl.core.mounts import host_path_of, under_root
from cpctl.core.node import Node
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
from cpctl.ops import schedrbac
from cpctl.probes.base import WaitResult
from cpctl.timeutil import stamp

GENERATED_BY = "cpctl.io/generated-by"
GENERATED_VALUE = "scheduler-add"
CONFIG_ANNOTATION = "cpctl.io/scheduler-config"
SOURCE_ANNOTATION = "cpctl.io/source-manifest"
DEFAULT_SOURCE = catalogue.KUBE_SCHEDULER
DEFAULT_KUBECONFIG = "/etc/kubernetes/scheduler.conf"
FIRST_PORT = 10260
WELL_KNOWN_PORTS = catalogue.WELL_KNOWN_PORTS
# The config file holds no secret (only the path of the kubeconfig, which stays 0600); 0644 is
# what kubeadm uses for non-secret config such as /var/lib/kubelet/config.yaml and lets
# unprivileged auditing read it. The manifest keeps kubeadm's 0600.
CONFIG_MODE = 0o644
MANIFEST_MODE = 0o600
MAX_CONFIG_BYTES = 1 << 20
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Flags the config file replaces (or that no longer exist); --config/--secure-port are re-added.
_DROPPED = ("--kubeconfig", "--leader-elect", "--scheduler-name", "--lock-object-", "--config",
            "--secure-port")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


# --- names and versions -------------------------------------------------------------------------
def reserved_names() -> Set[str]:
    """Names a second scheduler may not take: the default's and every core alias (``cpctl stop
    scheduler`` must keep meaning kube-scheduler)."""
    return {catalogue.DEFAULT_SCHEDULER_NAME} | set(catalogue.ALIASES) | set(catalogue.ALIASES.values())


def validate_name(name: str) -> str:
    """NAME is a pod name, a container name, a Lease name and a file stem: a DNS-1123 label fits all."""
    if len(name) > 63 or not _DNS1123_LABEL.match(name):
        shown = name if name.isprintable() else repr(name)
        raise CpctlError("invalid scheduler name %r: use a DNS-1123 label (lowercase letters, digits and '-', "
                         "at most 63 characters, starting and ending with a letter or digit)" % shown,
                         ExitCode.USAGE)
    if name in reserved_names():
        raise CpctlError("scheduler name %r is reserved (default scheduler or a cpctl component alias)" % name,
                         ExitCode.REFUSED)
    return name


def image_version(image: str) -> Tuple[int, int]:
    """(major, minor) from ``registry.k8s.io/kube-scheduler:v1.X.Y`` (a registry port or a digest
    does not confuse it); REFUSED when the tag says nothing, since the config API depends on it."""
    version = catalogue.image_release(image)
    if version is None:
        raise CpctlError("cannot tell the Kubernetes version from image %r (want a tag like v1.30.4)" % image,
                         ExitCode.REFUSED)
    return version


def config_api_version(version: Tuple[int, int]) -> str:
    """v1 since 1.25, v1beta3 for 1.23-1.24; older releases have no profiles API cpctl targets."""
    if version < (1, 23):
        raise CpctlError("kube-scheduler v%d.%d is too old: a second scheduler needs "
                         "KubeSchedulerConfiguration v1beta3 (1.23+) or v1 (1.25+)" % version, ExitCode.REFUSED)
    return "kubescheduler.config.k8s.io/%s" % ("v1" if version >= (1, 25) else "v1beta3")


# --- command-line flags -------------------------------------------------------------------------
def flag_value(args: Sequence[object], flag: str) -> Optional[str]:
    """Value of ``--flag=value`` or ``--flag value`` (last one wins, as in pflag)."""
    found = None
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            continue
        if arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
            found = str(args[i + 1])
    return found


def _dropped(arg: str) -> bool:
    name = arg.split("=", 1)[0]
    return any(name == d or (d.endswith("-") and name.startswith(d)) or name.startswith(d + "-")
               for d in _DROPPED)


def drop_flags(args: Sequence[str]) -> List[str]:
    """``args`` without the flags the config file replaces (two-token forms included)."""
    kept: List[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            if not str(arg).startswith("-"):
                continue
        if _dropped(arg):
            skip_value = "=" not in arg and arg != "--leader-elect"
            continue
        kept.append(arg)
    return kept


def container_args(container: Mapping[str, object]) -> List[str]:
    """The container's command then args (lists of strings in a valid pod: ``podspec.check_types``)."""
    return [arg for key in ("command", "args") for arg in _strings(container.get(key))]


def _strings(value: object) -> List[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _mapping(value: object) -> Mapping[str, object]:
    """A decoded object field: the object, or an empty one when absent or null."""
    return value if isinstance(value, dict) else {}


def _items(value: object) -> List[object]:
    """A decoded list field: the list, or an empty one when absent or null."""
    return value if isinstance(value, list) else []


def scheduler_container(pod: Mapping[str, object]) -> Dict[str, object]:
    """The kube-scheduler container (by binary or name), else the first one (a valid pod has one:
    ``podspec``); the pod's own object, so a change to it changes ``pod``."""
    containers = [c for c in _items(_mapping(pod.get("spec")).get("containers")) if isinstance(c, dict)]
    for container in containers:
        command = _items(container.get("command"))
        if (command and os.path.basename(str(command[0])) == catalogue.KUBE_SCHEDULER) or \
                container.get("name") == catalogue.KUBE_SCHEDULER:
            return container
    return containers[0]


# --- generation ---------------------------------------------------------------------------------
def build_config(name: str, kubeconfig: str, api_version: str) -> bytes:
    """The KubeSchedulerConfiguration: one profile named NAME, its own Lease in kube-system."""
    import yaml
    config = {"apiVersion": api_version, "kind": "KubeSchedulerConfiguration",
              "clientConnection": {"kubeconfig": kubeconfig},
              "leaderElection": {"leaderElect": True, "resourceName": name, "resourceNamespace": "kube-system"},
              "profiles": [{"schedulerName": name}]}
    header = ("# Generated by `cpctl scheduler add %s`; remove with `cpctl scheduler remove %s`.\n"
              "# Pods opt in with spec.schedulerName: %s\n" % (name, name, name))
    return (header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)).encode("utf-8")


def _volume_name(pod: Mapping[str, object]) -> str:
    taken = {_mapping(v).get("name") for v in _items(_mapping(pod.get("spec")).get("volumes"))}
    for candidate in ("scheduler-config", "cpctl-scheduler-config"):
        if candidate not in taken:
            return candidate
    return "cpctl-scheduler-config-%s" % secrets.token_hex(3)


def _retarget_probes(container: Mapping[str, object], port: int) -> None:
    """Every httpGet probe (and a declared containerPort) to the new secure port."""
    old_ports: Set[object] = set()
    for kind in _PROBES:
        get = _mapping(container.get(kind)).get("httpGet")
        if isinstance(get, dict):
            old_ports.add(get.get("port"))
            get["port"] = port
    for entry in _items(container.get("ports")):
        if isinstance(entry, dict) and (entry.get("containerPort") in old_ports or entry.get("name") in old_ports):
            entry["containerPort"] = port
            entry.pop("hostPort", None)


def build_pod(source: Mapping[str, object], name: str, port: int, config_path: str,
              source_file: str) -> Dict[str, object]:
    """The second scheduler's Pod: the source manifest (a valid pod: ``podspec``) with name, flags,
    probes and volume changed."""
    pod: Dict[str, object] = copy.deepcopy(dict(source))
    pod.pop("status", None)
    old = _mapping(pod["metadata"])
    annotations: Dict[str, object] = {k: v for k, v in _mapping(old.get("annotations")).items()
                                      if not k.startswith("kubeadm.")}
    annotations.update({GENERATED_BY: GENERATED_VALUE, CONFIG_ANNOTATION: config_path,
                        SOURCE_ANNOTATION: source_file})
    pod["metadata"] = dict({"annotations": annotations,
                            "labels": dict(_mapping(old.get("labels")), component=name, tier="control-plane"),
                            "name": name, "namespace": old.get("namespace") or "kube-system"},
                           **{k: v for k, v in old.items() if k not in ("annotations", "labels", "name", "namespace")})
    container = scheduler_container(pod)
    args = container_args(container)
    binary = args[0] if args and not str(args[0]).startswith("-") else catalogue.KUBE_SCHEDULER
    flags = drop_flags(args[1:] if args and args[0] == binary else args)
    container["command"] = [binary] + sorted(flags + ["--config=%s" % config_path, "--secure-port=%d" % port])
    container.pop("args", None)
    container["name"] = name
    _retarget_probes(container, port)
    volume = _volume_name(pod)
    # A valid pod's spec is an object (``podspec``); its volumes and volumeMounts are lists, absent
    # or null - the kubelet decodes null as empty, so does this.
    spec = cast(Dict[str, object], pod["spec"])
    spec["volumes"] = _items(spec.get("volumes")) + [{"hostPath": {"path": config_path, "type": "File"},
                                                       "name": volume}]
    container["volumeMounts"] = _items(container.get("volumeMounts")) + [{"mountPath": config_path, "name": volume,
                                                                          "readOnly": True}]
    return pod


def dump_pod(pod: Mapping[str, object]) -> bytes:
    import yaml
    return yaml.safe_dump(pod, sort_keys=False, default_flow_style=False).encode("utf-8")


# --- ports --------------------------------------------------------------------------------------
def pod_ports(pod: Mapping[str, object]) -> Set[int]:
    """Ports a manifest's pod (a valid one: ``podspec``) will listen on: --secure-port/--port
    flags, probes, containerPorts."""
    ports: Set[int] = set()
    for container in _items(_mapping(pod.get("spec")).get("containers")):
        if not isinstance(container, dict):
            continue
        args = container_args(container)
        for flag in ("--secure-port", "--port"):
            value = flag_value(args, flag)
            if value and value.isdigit():
                ports.add(int(value))
        for kind in _PROBES:
            port = _mapping(_mapping(container.get(kind)).get("httpGet")).get("port")
            if isinstance(port, int):
                ports.add(port)
        for entry in _items(container.get("ports")):
            number = _mapping(entry).get("containerPort")
            if isinstance(number, int):
                ports.add(number)
    return ports


def ports_in_use(node: Node, scan: DirScan) -> Dict[int, str]:
    """port -> owner for every manifest in the dir and every parked one (it will come back)."""
    owners: Dict[int, str] = {port: "kubeadm default" for port in WELL_KNOWN_PORTS}
    for m in scan.valid:
        for port in pod_ports(m.pod):
            owners[port] = m.file
    for filename in node.state.parked_files():
        pod = _read_pod(node.host, node.state.parked_path(filename))
        for port in pod_ports(pod or {}):
            owners[port] = "parked %s" % filename
    return owners


def probe_address(bind: Optional[str]) -> str:
    """Where a listener on ``--bind-address`` can be reached from the node itself."""
    if not bind or bind in ("0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    return "[%s]" % bind if ":" in bind else bind


def listening(host: Host, address: str, port: int) -> bool:
    """True unless a connection to ``address:port`` on the node is refused.

    One plain-HTTP request through the Host (so it runs on the master, also over SSH): a refused
    connection means free; any answer, a TLS/protocol error or a timeout means something is there
    (timeouts are counted as taken: better skip a port than collide).
    """
    try:
        host.http("GET", "http://%s:%d/" % (address, port), timeout=1.0)
    except ConnectionRefusedError:
        return False
    except OSError:
        return True
    return True


def choose_port(node: Node, scan: DirScan, bind: Optional[str], explicit: Optional[int]) -> int:
    """The explicit --port (REFUSED when taken), else the first free port from 10260 up."""
    owners = ports_in_use(node, scan)
    address = probe_address(bind)
    if explicit is not None:
        if explicit in owners:
            raise CpctlError("port %d is used by %s" % (explicit, owners[explicit]), ExitCode.REFUSED)
        if listening(node.host, address, explicit):
            raise CpctlError("port %d is already listening on %s" % (explicit, address), ExitCode.REFUSED)
        return explicit
    for port in range(FIRST_PORT, 65536):
        if port not in owners and not listening(node.host, address, port):
            return port
    raise CpctlError("no free port from %d up" % FIRST_PORT, ExitCode.REFUSED)


# --- reading the node ---------------------------------------------------------------------------
def _read_pod(host: Host, path: str) -> Optional[Dict[str, object]]:
    try:
        return manifests.parse_pod(host.read_file(path, manifests.MAX_MANIFEST_BYTES))
    except (OSError, manifests.InvalidManifest):
        return None


def is_generated(pod: Optional[Mapping[str, object]]) -> bool:
    annotations = _mapping(_mapping((pod or {}).get("metadata")).get("annotations"))
    return annotations.get(GENERATED_BY) == GENERATED_VALUE


def find_source(node: Node, scan: DirScan, wanted: str) -> Tuple[Dict[str, object], str, bytes]:
    """(pod, file name, bytes) of the manifest to copy: in the dir, else parked (still a template)."""
    present, parked_hits = node.resolve(wanted, scan, node.parked())
    valid = [m for m in present if m.valid]
    if len(present) > 1 or len(parked_hits) > 1 or (present and parked_hits):
        files = [m.file for m in present] + ["parked " + f for f in parked_hits]
        raise CpctlError("%r matches several manifests (%s): remove the stray copy first"
                         % (wanted, ", ".join(files)), ExitCode.REFUSED)
    if valid:
        found = valid[0]
        assert found.pod is not None and found.data is not None      # valid: parsed from its bytes
        return found.pod, found.file, found.data
    if present:
        raise CpctlError("%s: %s" % (present[0].path, present[0].error), ExitCode.REFUSED)
    if parked_hits:
        path = node.state.parked_path(parked_hits[0])
        data = node.host.read_file(path, manifests.MAX_MANIFEST_BYTES)
        try:
            return manifests.parse_pod(data), parked_hits[0], data
        except manifests.InvalidManifest as exc:
            raise CpctlError("%s: %s" % (path, exc), ExitCode.REFUSED) from None
    raise CpctlError("no %s manifest in %s and none parked" % (wanted, node.manifests_dir), ExitCode.NOT_FOUND)


def check_clash(node: Node, scan: DirScan, name: str) -> None:
    """REFUSED when NAME is already a pod or a file in the manifests dir, or parked."""
    filename = name + ".yaml"
    for m in scan.manifests:
        if name in (m.pod_name, manifests.file_stem(m.file)) or m.file == filename:
            raise CpctlError("%s already defines %r: pick another scheduler name" % (m.path, name),
                             ExitCode.REFUSED)
    for parked_file, meta in node.parked().items():
        if name in (meta.get("component"), manifests.file_stem(parked_file)):
            raise CpctlError("%r is parked (%s): pick another name or `%s`"
                             % (name, node.state.parked_path(parked_file), node.command("start", name)),
                             ExitCode.REFUSED)


def check_config_path(host: Host, path: str, data: bytes) -> bool:
    """True when ``path`` is absent; False when it already holds exactly ``data`` (a re-run after
    an interrupted add). REFUSED for anything else: never overwrite someone's file."""
    info = host.lstat(path)
    if info is None:
        parent = host.lstat(os.path.dirname(path))
        if parent is None or parent["kind"] != "dir":
            raise CpctlError("config dir %s does not exist" % os.path.dirname(path), ExitCode.ENVIRONMENT)
        return True
    if info["kind"] == "file" and host.read_file(path, MAX_CONFIG_BYTES + 1) == data:
        return False
    raise CpctlError("%s already exists with other content: move it away or use --config-dir" % path,
                     ExitCode.REFUSED)


# --- add ----------------------------------------------------------------------------------------
class Plan:
    """Everything ``add`` would write, computed without changing anything (``--dry-run`` prints it)."""

    def __init__(self, name: str, source_file: str, source_data: bytes, version: Tuple[int, int], api_version: str,
                 port: int, kubeconfig: str, config_path: str, config: bytes, manifest_path: str,
                 pod: Dict[str, object]) -> None:
        self.name, self.source_file, self.source_data = name, source_file, source_data
        self.version, self.api_version, self.port = version, api_version, port
        self.kubeconfig, self.config_path, self.config = kubeconfig, config_path, config
        self.manifest_path, self.pod = manifest_path, pod
        self.manifest = dump_pod(pod)

    def diff(self) -> str:
        """Unified diff of the source manifest against the generated one."""
        old = self.source_data.decode("utf-8", "replace").splitlines(keepends=True)
        new = self.manifest.decode("utf-8").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, self.source_file, os.path.basename(self.manifest_path)))

    def to_dict(self) -> "PlanDict":
        return {"name": self.name, "source": self.source_file, "version": "%d.%d" % self.version,
                "config_api": self.api_version, "port": self.port, "kubeconfig": self.kubeconfig,
                "config_file": self.config_path, "manifest_file": self.manifest_path,
                "config": self.config.decode("utf-8"), "manifest": self.manifest.decode("utf-8"),
                "diff": self.diff()}


class PlanDict(TypedDict):
    """A second scheduler's plan in JSON: what ``scheduler add`` (and its dry run) writes."""

    name: str
    source: str
    version: str
    config_api: str
    port: int
    kubeconfig: str
    config_file: str
    manifest_file: str
    config: str
    manifest: str
    diff: str


class AddResult(PlanDict, total=False):
    """``scheduler add``'s answer: the plan, the Lease RBAC, and (not in a dry run) the wait."""

    node: str
    dry_run: bool
    changed: bool
    would_change: bool
    rbac: Dict[str, object]
    wait: Optional[Dict[str, object]]


class RemoveResult(TypedDict, total=False):
    """``scheduler remove``'s answer: its dry run names the files and where they would go; the real
    run what moved where, the wait and the RBAC it revoked."""

    node: str
    name: str
    dry_run: bool
    changed: bool
    would_change: bool
    config_kept: Optional[str]
    files: List[str]
    state: str
    state_dir: str
    moved: Optional[Dict[str, str]]
    removed_dir: Optional[str]
    wait: Optional[Dict[str, object]]
    rbac: Optional[List[str]]


def config_dir_for(node: Node, config_dir: Optional[str]) -> str:
    """Where the config goes: ``--config-dir``, by default the directory holding the manifests dir
    (/etc/kubernetes on kubeadm). It must lie below that directory: cpctl's journal changes only
    files in the manifests dir, next to it and in its own state dir."""
    parent = os.path.dirname(node.manifests_dir.rstrip("/")) or "/"
    chosen = os.path.normpath(config_dir) if config_dir else parent
    probe = os.path.join(chosen, "x-config.yaml")
    if not journal.companion_path(probe, journal.allowed_roots(node.manifests_dir, node.state.path)):
        raise CpctlError("--config-dir %s: the config must live in %s or below it (next to the manifests dir)"
                         % (config_dir, parent), ExitCode.USAGE)
    return chosen


def plan_add(node: Node, name: str, source: str = DEFAULT_SOURCE, port: Optional[int] = None,
             config_dir: Optional[str] = None) -> Plan:
    """Validate everything and compute both files; raises before any side effect."""
    validate_name(name)
    manifests.validate_component_name(source)
    scan = node.scan()
    pod, source_file, data = find_source(node, scan, source)
    check_clash(node, scan, name)
    container = scheduler_container(pod)
    version = image_version(str(container.get("image") or ""))
    api_version = config_api_version(version)
    args = container_args(container)
    kubeconfig = flag_value(args, "--kubeconfig") or flag_value(args, "--authentication-kubeconfig") \
        or DEFAULT_KUBECONFIG
    chosen = choose_port(node, scan, flag_value(args, "--bind-address"), port)
    config_path = os.path.join(config_dir_for(node, config_dir), "%s-config.yaml" % name)
    new_pod = build_pod(pod, name, chosen, config_path, source_file)
    return Plan(name, source_file, data, version, api_version, chosen, kubeconfig, config_path,
                build_config(name, kubeconfig, api_version), node.manifests_dir + "/" + name + ".yaml", new_pod)


def add(node: Node, name: str, source: str = DEFAULT_SOURCE, port: Optional[int] = None,
        config_dir: Optional[str] = None, wait: bool = True, timeout: float = 120.0,
        dry_run: bool = False, grant_rbac: bool = False) -> AddResult:
    """Check the Lease RBAC, write config then manifest under the node lock, record history, wait
    for the mirror pod."""
    # Plan read-only first: a refusal or --dry-run leaves no trace (not even the state dir); the
    # plan is recomputed under the lock, where it counts.
    plan = plan_add(node, name, source, port, config_dir)
    check_config_path(node.host, plan.config_path, plan.config)
    kubeconfig = under_root(node.node_root, scheduler_kubeconfig_on_node(plan))     # where to read it here
    if dry_run:
        identity = schedrbac.identity_of(node, kubeconfig)
        access = schedrbac.check(node, name, identity)
        dry: AddResult = {**plan.to_dict(), "node": node.node_name, "dry_run": True, "changed": False,
                          "would_change": True, "wait": None,
                          "rbac": dict(access.to_dict(), yaml=schedrbac.as_yaml(name, access.identity,
                                                                                access.create_rule))}
        return dry
    access = schedrbac.ensure(node, name, kubeconfig, grant_rbac)
    with node.session("cpctl scheduler add %s" % name):
        plan = plan_add(node, name, source, port, config_dir)
        write_config = check_config_path(node.host, plan.config_path, plan.config)
        target = node.target_for(plan.pod, name + ".yaml")
        before = node.waiter.before(target) if wait else None
        change = add_change(plan, write_config)
        change.record["rbac"] = "granted" if access.granted else "allowed" if access.allowed else \
            "not checked: %s" % access.why
        node.apply(change)
        result = node.waiter.wait_started(target, before, timeout) if wait else _not_waited()
    done: AddResult = {**plan.to_dict(), "node": node.node_name, "dry_run": False, "changed": True,
                       "would_change": True, "wait": dict(result.to_dict()),
                       "rbac": dict(access.to_dict(), yaml=schedrbac.as_yaml(name, access.identity,
                                                                             access.create_rule))}
    return done


def scheduler_kubeconfig_on_node(plan: Plan) -> str:
    """The node path of the kubeconfig the scheduler uses (its flag names a container path)."""
    return host_path_of(plan.pod, scheduler_container(plan.pod), plan.kubeconfig) or plan.kubeconfig


def add_change(plan: Plan, write_config: bool) -> journal.Change:
    """Config first (unless an identical one is there), then the manifest: the kubelet never runs a
    pod whose --config is missing. Writing the manifest is the commit step."""
    files = ([(plan.config_path, plan.config, CONFIG_MODE)] if write_config else []) + \
        [(plan.manifest_path, plan.manifest, MANIFEST_MODE)]
    steps = [journal.write(path, manifests.checksum(data), mode) for path, data, mode in files]
    return journal.Change("scheduler-add", plan.name, plan.name + ".yaml", manifests.checksum(plan.manifest),
                          steps, commit=len(steps) - 1, data={i: data for i, (_, data, _) in enumerate(files)},
                          record={"config": plan.config_path, "port": plan.port, "source": plan.source_file})


def _not_waited(why: str = "not waited (--no-wait)") -> WaitResult:
    return WaitResult(False, why)


# --- remove -------------------------------------------------------------------------------------
def _generated_manifest(node: Node, scan: DirScan, name: str
                        ) -> Tuple[Optional[str], Optional[Dict[str, object]], Optional[str]]:
    """(path, pod, 'present'|'parked') of the generated scheduler NAME; REFUSED if not cpctl's."""
    manifests.validate_component_name(name)
    for m in scan.manifests:
        if name in (m.pod_name, manifests.file_stem(m.file)):
            if not is_generated(m.pod):
                raise CpctlError("%s was not created by `cpctl scheduler add` (no %s annotation): refusing to "
                                 "remove it" % (m.path, GENERATED_BY), ExitCode.REFUSED)
            manifests.refuse_link(m, "remove")
            return m.path, m.pod, "present"
    for filename, meta in node.parked().items():
        if name in (meta.get("component"), manifests.file_stem(filename)):
            path = node.state.parked_path(filename)
            pod = _read_pod(node.host, path)
            if not is_generated(pod):
                raise CpctlError("parked %s was not created by `cpctl scheduler add`: refusing to remove it"
                                 % path, ExitCode.REFUSED)
            return path, pod, "parked"
    return None, None, None


def _last_config(node: Node, name: str) -> Optional[str]:
    """The config file the last ``scheduler-add`` of NAME wrote (for a remove whose manifest is gone)."""
    for record in reversed(node.state.read_history()):
        if record.get("component") == name and record.get("action") in ("scheduler-add", "scheduler-remove"):
            config = record.get("config")
            return config if isinstance(config, str) and record["action"] == "scheduler-add" else None
    return None


def _config_is_ours(node: Node, config: str) -> bool:
    """The config a generated manifest names is moved away only when it is a companion file a
    ``scheduler-add`` recorded writing: the manifest (and its annotation) may be anyone's words."""
    roots = journal.allowed_roots(node.manifests_dir, node.state.path)
    return journal.companion_path(config, roots) and node.changes.companion_recorded(config)


def _removed_dir(node: Node) -> str:
    """A fresh STATE/removed/<UTC timestamp>/ (0700), never a symlink."""
    base = node.state.path + "/removed"
    now = stamp()
    for suffix in [""] + ["-%d" % i for i in range(1, 100)]:
        path = "%s/%s%s" % (base, now, suffix)
        if node.host.lstat(path) is None:
            node.host.makedirs(path, 0o700)
            info = node.host.lstat(path)
            if info is None or info["kind"] != "dir":
                raise CpctlError("%s is not a directory" % path, ExitCode.ENVIRONMENT)
            return path
    raise CpctlError("too many removals in one second under %s" % base, ExitCode.ENVIRONMENT)


@dataclass
class RemovePlan:
    """What ``remove`` moves: the manifest (in the dir, parked, or gone), its files, the config."""

    name: str
    manifest: Optional[str]
    state: str
    config_file: Optional[str]
    files: List[str]
    pod: Optional[Dict[str, object]]
    config_kept: Optional[str]


def plan_remove(node: Node, name: str) -> RemovePlan:
    """Which files ``remove`` would move (the manifest, its parking metadata, the config)."""
    scan = node.scan()
    path, pod, where = _generated_manifest(node, scan, name)
    config: Optional[str]
    if pod:     # a valid pod's annotations are strings (podspec)
        written = _mapping(_mapping(pod.get("metadata")).get("annotations")).get(CONFIG_ANNOTATION)
        config = written if isinstance(written, str) else None
    else:
        config = _last_config(node, name)
    files = [p for p in (path,) if p]
    if where == "parked" and path:
        meta = node.state.meta_path(os.path.basename(path))
        files += [meta] if node.host.lstat(meta) else []
    config_info = node.host.lstat(config) if config else None
    kept = None
    if config and config_info and config_info["kind"] == "file":
        if _config_is_ours(node, config):
            files.append(config)
        else:
            kept = "%s stays: cpctl has no record of writing it" % config
    if not files:
        raise CpctlError("no scheduler %r generated by cpctl on this node" % name, ExitCode.NOT_FOUND)
    return RemovePlan(name=name, manifest=path, state=where or "gone", config_file=config, files=files, pod=pod,
                      config_kept=kept)


def remove(node: Node, name: str, wait: bool = True, timeout: float = 120.0, dry_run: bool = False
           ) -> RemoveResult:
    """Move the generated manifest (then its config) into STATE/removed/<ts>/ and wait for the pod."""
    plan = plan_remove(node, name)   # read-only: refuse (or answer --dry-run) before the session
    if dry_run:
        return {"node": node.node_name, "name": name, "dry_run": True, "changed": False, "would_change": True,
                "files": plan.files, "state": plan.state, "state_dir": node.state.path, "config_kept": plan.config_kept,
                "moved": None, "removed_dir": None, "wait": None, "rbac": None}
    with node.session("cpctl scheduler remove %s" % name):
        plan = plan_remove(node, name)
        running, pod, manifest = plan.state == "present", plan.pod, plan.manifest
        # present: the manifest is in the dir and its pod valid (is_generated read it)
        target = node.target_for(pod, os.path.basename(manifest)) if running and pod and manifest else None
        before = node.waiter.before(target) if (wait and target) else None
        dest = _removed_dir(node)
        change = remove_change(node, name, plan, dest)
        node.apply(change)
        if wait and target:
            result = node.waiter.wait_stopped(target, before, timeout)
        else:
            result = _not_waited("not waited (--no-wait)" if running else "pod was not running")
    moved = {step.src: step.path for step in change.steps}
    return {"node": node.node_name, "name": name, "dry_run": False, "changed": True, "would_change": True,
            "files": list(moved), "state": plan.state, "state_dir": node.state.path, "moved": moved,
            "removed_dir": dest, "wait": result.to_dict(), "config_kept": plan.config_kept,
            "rbac": schedrbac.revoke(node, name)}


def remove_change(node: Node, name: str, plan: RemovePlan, dest: str) -> journal.Change:
    """Every file of the scheduler moves to ``dest``, the manifest first (the commit step: the pod
    stops before its config goes); nothing is deleted."""
    steps = []
    for src in plan.files:
        info = node.host.lstat(src)
        digest = manifests.checksum(node.host.read_file(src, (info["size"] if info else 0) + 1))
        steps.append(journal.move(src, dest + "/" + os.path.basename(src), digest))
    filename = os.path.basename(plan.manifest) if plan.manifest else name + ".yaml"
    return journal.Change("scheduler-remove", name, filename, steps[0].checksum if plan.manifest else None,
                          steps, commit=0,
                          record={"config": plan.config_file, "moved_to": dest})


# --- list ---------------------------------------------------------------------------------------
def _row(node: Node, pod: Dict[str, object], filename: str, state: str) -> Dict[str, object]:
    container = scheduler_container(pod)
    args = container_args(container)
    meta = _mapping(pod["metadata"])        # a valid pod's: a string name, string annotations (podspec)
    written = _mapping(meta.get("annotations")).get(CONFIG_ANNOTATION)
    config = written if isinstance(written, str) else None
    port = flag_value(args, "--secure-port")
    row: Dict[str, object] = {"name": meta["name"], "file": filename, "state": state,
           "port": int(port) if port and port.isdigit() else None, "config": config,
           "config_present": bool(config and node.host.lstat(config)), "image": container.get("image")}
    row["pod"] = "%s-%s" % (row["name"], node.node_name.lower())
    row["pod_state"] = None
    if state == "present":
        target = node.target_for(pod, filename)
        observed = node.waiter.describe(target)
        row["observed"], row["pod_state"] = observed, views.pod_state(observed)
    return row


def list_schedulers(node: Node) -> List[Dict[str, object]]:
    """Every scheduler cpctl generated on this node, running (in the dir) or parked."""
    rows = [_row(node, m.pod, m.file, "present") for m in node.scan().valid if is_generated(m.pod)]
    if node.state.ensure(create=False):
        for filename in node.state.parked_files():
            pod = _read_pod(node.host, node.state.parked_path(filename))
            if is_generated(pod):
                rows.append(_row(node, pod or {}, filename, "parked"))
    return rows


# --- help text ----------------------------------------------------------------------------------
def usage_example(name: str) -> str:
    """A pod that opts in to the new scheduler, to print after ``add``."""
    return ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: hello-%s\nspec:\n  schedulerName: %s\n"
            "  containers:\n  - name: hello\n    image: registry.k8s.io/pause:3.9\n" % (name, name))

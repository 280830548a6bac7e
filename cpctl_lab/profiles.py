"""Lab profiles: named bundles of settings that make the simulated nodes look like a given real setup.

A profile only sets defaults; every setting is also an option of its own (``start_lab(...,
ip_family="ipv6")``, ``cpctl lab up --ip-family ipv6``) so a test can combine them, e.g. the
``ha`` profile with ``realistic_timing=True``. The settings end up in ``lab.json`` under
``"profile"`` so a test (or a curious operator) can see what the lab pretends to be.

Facts behind the settings (see the list in ``cpctl_lab/__init__.py``): the kubelet's and kubeadm's
sources (cmd/kubeadm/app/phases/controlplane/manifests.go, phases/etcd/local.go,
util/staticpod/utils.go, constants/constants.go).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

IP_FAMILIES = ("ipv4", "ipv6")
NODE_NAMINGS = ("short", "fqdn", "override")
KUBEADM_APIS = ("auto", "v1beta3", "v1beta4")
FQDN_DOMAIN = "cpctl.test"


@dataclass(frozen=True)
class KubeRelease:
    """What kubeadm of one minor release writes, as far as the lab models it."""

    name: str  # the k8s_version setting: "classic" or "1.30" ... "1.34"
    version: str  # image tags, node kubeletVersion, /version gitVersion
    etcd_image: str
    pause_image: str
    #: etcd probes: True -> /health?exclude=NOSPACE&serializable=true (liveness) and
    #: /health?serializable=false (startup), no readiness (kubeadm <= v1.30, kubernetes#110744);
    #: False -> /livez, /readyz, /readyz (kubeadm v1.31+, kubernetes#124465).
    etcd_health_probes: bool
    #: v1.34+: every probe uses the named port ``probe-port`` with a matching ``ports:`` entry
    #: (kubernetes#132776).
    named_probe_port: bool
    #: etcd 3.6 (kubeadm v1.34+): ``--feature-gates=InitialCorruptCheck=true`` and
    #: ``--watch-progress-notify-interval`` replace the ``--experimental-*`` flags.
    etcd36_flags: bool

    @property
    def minor(self) -> int:
        """The minor version number (30 for v1.30.14)."""
        return int(self.version.lstrip("v").split(".")[1])


#: "classic" is the lab's original seed set, kept as the default so older tests stay valid: v1.30.4
#: images with the etcd /livez and /readyz probes that kubeadm only writes from v1.31 on. It is not
#: an exact kubeadm release; use "1.30" for the real v1.30 layout.
RELEASES: dict[str, KubeRelease] = {
    r.name: r
    for r in (
        KubeRelease("classic", "v1.30.4", "3.5.12-0", "3.9", False, False, False),
        KubeRelease("1.30", "v1.30.14", "3.5.15-0", "3.9", True, False, False),
        KubeRelease("1.31", "v1.31.12", "3.5.15-0", "3.10", False, False, False),
        KubeRelease("1.32", "v1.32.8", "3.5.16-0", "3.10", False, False, False),
        KubeRelease("1.33", "v1.33.4", "3.5.21-0", "3.10", False, False, False),
        KubeRelease("1.34", "v1.34.1", "3.6.4-0", "3.10", False, True, True),
    )
}


@dataclass(frozen=True)
class LabSettings:
    """Everything that shapes what the simulated nodes look like (see the module docstring)."""

    profile: str = "default"
    masters: int = 1
    k8s_version: str = "classic"
    ip_family: str = "ipv4"
    node_naming: str = "short"
    #: ControlPlaneKubeletLocalMode (kubeadm v1.33+ default): each control-plane kubelet (and the
    #: controller-manager and scheduler, as kubeadm's kubeconfigs do) talks to its own apiserver.
    local_mode: bool = False
    #: Stacked etcd: each apiserver gets only its own node's etcd in --etcd-servers.
    stacked_etcd: bool = False
    #: Grace periods, probe delays, housekeeping and re-list periods of a real kubelet.
    realistic_timing: bool = False
    #: Multiplies every real-world duration (probe delays, grace periods, CrashLoopBackOff...).
    time_scale: float = 1.0
    #: With realistic timing: a busy real master's boot times - the API server answers 45 s after
    #: its container starts (30-60 s is common: many CRDs, etcd catching up), etcd 7 s (5-10 s)
    #: (real-node-facts.md, "When the API server itself restarts").
    real_master: bool = False
    #: False: the kubelets get no inotify events (a watch that could not be set up, or events
    #: lost) and see their manifests dir only at each full re-list (fileCheckFrequency), so a
    #: file moved away and back between two re-lists is never noticed.
    inotify: bool = True
    #: RBAC enforcement for component identities (implemented by the API side of the lab).
    rbac: bool = False
    #: Control-plane containers whose command line the real binary rejects (unknown flag, bad
    #: value, missing file) crash-loop (cpctl_lab.componentflags).
    component_checks: bool = True
    #: The ClusterConfiguration in the kubeadm-config ConfigMap: v1beta3 (extraArgs maps), v1beta4
    #: (name/value lists), or auto (v1beta4 from kubeadm v1.31 on, as kubeadm writes it).
    kubeadm_api: str = "auto"

    @property
    def release(self) -> KubeRelease:
        """The kubeadm release whose manifests and versions the lab shows."""
        return RELEASES[self.k8s_version]

    @property
    def loopback(self) -> str:
        """The address every simulated node listens on (127.0.0.1 or ::1)."""
        return "::1" if self.ip_family == "ipv6" else "127.0.0.1"

    def to_json(self) -> dict[str, Any]:
        """The settings as recorded in lab.json (plus the versions they imply)."""
        out = dataclasses.asdict(self)
        out["kubernetes_version"] = self.release.version
        out["etcd_image"] = f"registry.k8s.io/etcd:{self.release.etcd_image}"
        return out


#: Named profiles: the settings each one changes from LabSettings' defaults.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    **{f"kubeadm-{v}": {"k8s_version": v} for v in ("1.30", "1.31", "1.32", "1.33", "1.34")},
    "fqdn": {"k8s_version": "1.33", "node_naming": "fqdn"},
    "override": {"k8s_version": "1.33", "node_naming": "override"},
    "ipv6": {"k8s_version": "1.33", "ip_family": "ipv6"},
    "ha": {"k8s_version": "1.33", "masters": 3, "local_mode": True, "stacked_etcd": True, "rbac": True},
    "realistic": {"k8s_version": "1.33", "realistic_timing": True, "rbac": True},
    "real-master": {"k8s_version": "1.33", "realistic_timing": True, "real_master": True},
}

PROFILE_HELP = {
    "default": "the lab's original behaviour: short names, IPv4, fast fixed lags, classic seeds",
    "kubeadm-1.30": "kubeadm v1.30 manifests (etcd /health probes)",
    "kubeadm-1.31": "kubeadm v1.31 manifests (etcd /livez, /readyz)",
    "kubeadm-1.32": "kubeadm v1.32 manifests",
    "kubeadm-1.33": "kubeadm v1.33 manifests",
    "kubeadm-1.34": "kubeadm v1.34 manifests (named probe port, etcd 3.6 flags)",
    "fqdn": "the node name is the host's FQDN (no CPCTL_NODE_NAME/CPCTL_MANIFESTS_DIR exported)",
    "override": "the node name comes from --hostname-override in kubeadm-flags.env",
    "ipv6": "IPv6 single-stack: everything on ::1",
    "ha": "3 masters, v1.33 local-mode kubelets, stacked etcd, RBAC",
    "realistic": "real grace periods, probe delays, housekeeping and re-list periods, RBAC",
    "real-master": "realistic timing with a busy master's boot times: API server 45 s, etcd 7 s",
}


def resolve(profile: Optional[str] = None, **overrides: Any) -> LabSettings:
    """The settings of ``profile`` with every non-None override applied; ValueError if inconsistent."""
    name = profile or "default"
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})")
    values: dict[str, Any] = {"profile": name, **PROFILES[name]}
    fields = {f.name for f in dataclasses.fields(LabSettings)}
    for key, value in overrides.items():
        if key not in fields:
            raise TypeError(f"unknown lab setting {key!r}")
        if value is not None:
            values[key] = value
    settings = LabSettings(**values)
    check(settings)
    return settings


def check(settings: LabSettings) -> None:
    """Refuse combinations no real cluster has (ValueError with a one-line reason)."""
    if settings.k8s_version not in RELEASES:
        raise ValueError(f"unknown k8s_version {settings.k8s_version!r} (known: {', '.join(RELEASES)})")
    if settings.ip_family not in IP_FAMILIES:
        raise ValueError(f"ip_family must be one of {', '.join(IP_FAMILIES)}")
    if settings.node_naming not in NODE_NAMINGS:
        raise ValueError(f"node_naming must be one of {', '.join(NODE_NAMINGS)}")
    if settings.kubeadm_api not in KUBEADM_APIS:
        raise ValueError(f"kubeadm_api must be one of {', '.join(KUBEADM_APIS)}")
    if settings.masters < 1:
        raise ValueError("--masters must be >= 1")
    if not settings.time_scale > 0:
        raise ValueError("--time-scale must be > 0")
    if settings.real_master and not settings.realistic_timing:
        raise ValueError("--real-master needs --realistic-timing (its boot times are real-world durations)")
    if settings.local_mode and settings.release.minor < 31:
        raise ValueError("local mode (ControlPlaneKubeletLocalMode) needs kubeadm v1.31 or later")


def node_names(settings: LabSettings, node_name: Optional[str]) -> list[str]:
    """The masters' node names: the kubelet lowercases the host name or --hostname-override."""
    if node_name:
        if settings.masters != 1:
            raise ValueError("--node-name only applies to a single-master lab")
        name = node_name.strip().lower()
        if settings.node_naming == "fqdn" and "." not in name:
            raise ValueError(f"--node-name {node_name!r} is not an FQDN (node_naming=fqdn)")
        return [name]
    suffix = f".{FQDN_DOMAIN}" if settings.node_naming == "fqdn" else ""
    return [f"lab-master{i}{suffix}" for i in range(1, settings.masters + 1)]


def host_name(settings: LabSettings, node: str, index: int) -> str:
    """The simulated kernel host name of master ``index`` (1-based): what os.Hostname() returns.

    short: the node name itself. fqdn: the FQDN in mixed case (the kubelet lowercases it to get
    the node name). override: a host name unrelated to the node name, which then comes from
    ``--hostname-override`` in kubeadm-flags.env.
    """
    if settings.node_naming == "fqdn":
        first, _, rest = node.partition(".")
        return ".".join([first.title(), rest.upper()]) if rest else first.title()
    if settings.node_naming == "override":
        return f"cpctl-lab-host{index}"
    return node


def go_duration(seconds: float) -> str:
    """Format seconds like Go's time.Duration.String(): 20s, 1.5s, 500ms, 1m30s, 5m0s."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000):d}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text

"""Who the kubelet on this node thinks it is, and where it reads static pods: the kubelet's rules.

The kubelet's node name is ``--hostname-override`` when given, else the FULL host name
(``os.Hostname()``, i.e. uname's nodename) lowercased: an FQDN stays an FQDN. kubeadm writes the
override into ``/var/lib/kubelet/kubeadm-flags.env`` (``KUBELET_KUBEADM_ARGS``) only when the node
name differs from the host name; operators add flags in ``/etc/default/kubelet`` (Debian) or
``/etc/sysconfig/kubelet`` (RPM) as ``KUBELET_EXTRA_ARGS``, which the systemd drop-in passes after
kubeadm's (pflag: the last occurrence wins). ``staticPodPath`` and ``fileCheckFrequency`` (default
20 s) live in the kubelet's config file, ``/var/lib/kubelet/config.yaml`` unless ``--config``
names another (relative paths in it are relative to the file). Sources:
real-node-facts.md "Node identity and the kubelet's configuration"; kubeadm buildKubeletArgs,
cmd/kubeadm/app/componentconfigs/kubelet.go.

Every value cpctl uses comes with where it came from (``Sourced``): ``status -o json`` shows it,
and a wrong guess is visible instead of silently turning every mirror-pod lookup into a 404.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Generic, List, Optional, Tuple, TypeVar

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
from cpctl.inputs import load_yaml

DEFAULT_KUBELET_DIR = "/var/lib/kubelet"
DEFAULT_MANIFESTS_DIR = "/etc/kubernetes/manifests"
DEFAULT_FILE_CHECK_FREQUENCY = 20.0
KUBEADM_FLAGS = "kubeadm-flags.env"
KUBELET_CONFIG = "config.yaml"
EXTRA_ARGS_FILES = ("/etc/default/kubelet", "/etc/sysconfig/kubelet")
MAX_FILE = 1 << 20
NODE_NAME_MAX = 253
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NODE_NAME = re.compile(r"%s(?:\.%s)*" % (_DNS_LABEL, _DNS_LABEL))
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


V = TypeVar("V")


@dataclass(frozen=True)
class Sourced(Generic[V]):
    """A value and where it came from (an option, a file and its field, a default)."""

    value: V
    source: str

    def to_dict(self) -> Dict[str, object]:
        return {"value": self.value, "source": self.source}


@dataclass
class KubeletView:
    """What the node's kubelet configuration says (each field None when it says nothing)."""

    hostname_override: Optional[Sourced[str]] = None
    config_path: Optional[str] = None
    static_pod_path: Optional[Sourced[str]] = None
    file_check_frequency: Optional[Sourced[float]] = None
    problems: List[str] = field(default_factory=list)


def valid_node_name(name: object) -> bool:
    """``name`` is a Node name the API server accepts: a DNS-1123 subdomain (lower case letters,
    digits, ``-`` and ``.``, alphanumeric at both ends of each label), at most 253 characters."""
    return isinstance(name, str) and len(name) <= NODE_NAME_MAX and _NODE_NAME.fullmatch(name) is not None


def check_node_name(name: object, source: str, code: ExitCode = ExitCode.REFUSED) -> str:
    """``name`` when it is a valid node name, else refuse (exit 4; ``code`` for the user's own
    options). The name comes from the master (its kubelet's flags, its host name) and reaches local
    paths, prompts and API URLs: ``../../etc/profile.d/x`` or an escape sequence never gets that far."""
    if isinstance(name, str) and valid_node_name(name):
        return name
    shown = repr(name[:80] + ("..." if len(name) > 80 else "")) if isinstance(name, str) else type(name).__name__
    raise CpctlError("node name %s (from %s) is not a valid Kubernetes node name (a DNS-1123 subdomain: "
                     "lower case letters, digits, '-' and '.', at most %d characters); refusing to use it"
                     % (shown, source, NODE_NAME_MAX), code,
                     hint="pass --node-name, or fix the kubelet's --hostname-override / the host name")


def identity_reads(kubelet_dir: str,
                   extra_args_files: Tuple[str, ...] = EXTRA_ARGS_FILES) -> List[Tuple[str, Dict[str, object]]]:
    """The reads ``discover`` makes (for ``Host.prefetched``: one round trip over SSH)."""
    paths = [os.path.join(kubelet_dir, KUBEADM_FLAGS), *extra_args_files, os.path.join(kubelet_dir, KUBELET_CONFIG)]
    reads: List[Tuple[str, Dict[str, object]]] = [("info", {})]
    return reads + [("read_file", {"path": path, "limit": MAX_FILE}) for path in paths]


def read_kubelet(host: Host, kubelet_dir: str, extra_args_files: Tuple[str, ...] = EXTRA_ARGS_FILES) -> KubeletView:
    """Read the kubelet's flags files and config file on ``host``; unreadable or odd files become
    ``problems`` (the caller shows them), never an exception."""
    view = KubeletView()
    flags_files = [(os.path.join(kubelet_dir, KUBEADM_FLAGS), "KUBELET_KUBEADM_ARGS")]
    flags_files += [(path, "KUBELET_EXTRA_ARGS") for path in extra_args_files]
    config = Sourced(os.path.join(kubelet_dir, KUBELET_CONFIG), "default")
    for path, variable in flags_files:        # later files win, as the drop-in passes them later
        text = _read_text(host, path, view.problems)
        if text is None:
            continue
        for flag, value in _flags(_env_value(text, variable)):
            where = "%s (%s %s)" % (path, variable, flag)
            if flag == "--hostname-override" and value:
                view.hostname_override = Sourced(value.strip().lower(), where)
            elif flag == "--config" and value:
                config = Sourced(value, where)
    view.config_path = config.value
    _read_config(host, config.value, view)
    return view


def _read_text(host: Host, path: str, problems: List[str]) -> Optional[str]:
    try:
        return host.read_file(path, MAX_FILE).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append("cannot read %s: %s" % (path, exc.strerror or exc))
        return None


def _env_value(text: str, variable: str) -> str:
    """The value of ``VARIABLE=...`` in a systemd EnvironmentFile (quotes removed), "" if absent."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(variable + "="):
            value = line[len(variable) + 1:].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            return value
    return ""


_SHELL_QUOTING = frozenset("\"'\\")


def _flags(text: str) -> List[Tuple[str, str]]:
    """``--flag=value`` and ``--flag value`` pairs of a kubelet command line, in order."""
    if _SHELL_QUOTING.isdisjoint(text):     # no quote, no escape: shlex.split's words, without shlex
        words = [w for w in text.replace("\t", " ").replace("\r", " ").replace("\n", " ").split(" ") if w]
    else:
        import shlex
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
    pairs = []
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        if "=" in word:
            name, _, value = word.partition("=")
        else:
            name = word
            following = words[index + 1] if index + 1 < len(words) else ""
            value = following if not following.startswith("-") else ""
        pairs.append((name, value))
    return pairs


def _read_config(host: Host, path: str, view: KubeletView) -> None:
    text = _read_text(host, path, view.problems)
    if text is None:
        return
    import yaml
    try:
        config = load_yaml(text)
    except yaml.YAMLError:
        view.problems.append("%s is not valid YAML" % path)
        return
    if not isinstance(config, dict):
        view.problems.append("%s is not a KubeletConfiguration" % path)
        return
    static = config.get("staticPodPath")
    if isinstance(static, str) and static:
        resolved = static if static.startswith("/") else os.path.join(os.path.dirname(path), static)
        view.static_pod_path = Sourced(os.path.normpath(resolved), "%s (staticPodPath)" % path)
    frequency = config.get("fileCheckFrequency")
    if frequency is not None:
        seconds = go_duration(frequency)
        if seconds is None or seconds <= 0:
            view.problems.append("%s: fileCheckFrequency %r is not a duration" % (path, frequency))
        else:
            view.file_check_frequency = Sourced(seconds, "%s (fileCheckFrequency)" % path)


def host_node_name(host: Host) -> str:
    """The node name the kubelet derives from the host name (the FULL name, lowercased), checked."""
    hostname = host.info().get("hostname")
    return check_node_name(hostname.lower() if isinstance(hostname, str) else hostname,
                           "the host name %s reports" % host.name)


def go_duration(value: object) -> Optional[float]:
    """Seconds of a Go duration string (``20s``, ``1m30s``, ``500ms``); None when it is not one."""
    if not isinstance(value, str) or not value:
        return None
    total, position = 0.0, 0
    for match in _GO_DURATION.finditer(value):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total if position == len(value) else None


@dataclass
class NodeIdentity:
    """The node name, manifests dir and re-list period cpctl works with, each with its source."""

    node_name: Sourced[str]
    manifests_dir: Sourced[str]
    file_check_frequency: Sourced[float]
    kubelet_dir: str
    problems: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        data: Dict[str, object] = {name: getattr(self, name).to_dict()
                                for name in ("node_name", "manifests_dir", "file_check_frequency")}
        data["kubelet_dir"] = self.kubelet_dir
        if self.problems:
            data["problems"] = list(self.problems)
        return data


def discover(host: Host, node_name: Optional[str] = None, manifests_dir: Optional[str] = None,
             kubelet_dir: str = DEFAULT_KUBELET_DIR,
             extra_args_files: Tuple[str, ...] = EXTRA_ARGS_FILES) -> NodeIdentity:
    """The identity by the kubelet's rules; explicit options win (they say ``--node-name`` etc.).

    The kubelet's files are always read: its re-list period matters to waits even when both the
    node name and the manifests dir are given."""
    view = read_kubelet(host, kubelet_dir, extra_args_files)
    if node_name:
        name = Sourced(check_node_name(node_name, "--node-name / CPCTL_NODE_NAME", ExitCode.USAGE),
                       "--node-name / CPCTL_NODE_NAME")
    elif view.hostname_override is not None:
        name = view.hostname_override
        check_node_name(name.value, name.source)
    else:
        name = Sourced(host_node_name(host), "host name (the kubelet's default)")
    if manifests_dir:
        where = Sourced(manifests_dir.rstrip("/") or "/", "--manifests-dir / CPCTL_MANIFESTS_DIR")
    elif view.static_pod_path is not None:
        where = view.static_pod_path
    else:
        where = Sourced(DEFAULT_MANIFESTS_DIR, "default (no staticPodPath in %s)" % (view.config_path or "-"))
    frequency = view.file_check_frequency or Sourced(DEFAULT_FILE_CHECK_FREQUENCY, "kubelet default")
    return NodeIdentity(name, where, frequency, kubelet_dir, view.problems)

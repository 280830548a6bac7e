"""Static pod manifests as the kubelet sees them: which files it loads and which pod each defines.

The kubelet loads every non-dot regular file of the directory (no extension filter, not
recursive, symlinks followed), YAML or JSON, exactly one Pod per file. cpctl mirrors those
rules so that "what is running" and "what would a file do" are answered the kubelet's way.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Dict, Optional, Union

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host

# Real kubeadm manifests are a few KiB; the kubelet's own cap is 10 MiB. Anything over 1 MiB
# is treated as invalid rather than parsed (it is almost certainly not a hand-made manifest).
MAX_MANIFEST_BYTES = 1 << 20

ALIASES = {
    "scheduler": "kube-scheduler",
    "controller-manager": "kube-controller-manager",
    "apiserver": "kube-apiserver",
    "etcd": "etcd",
}
# kubeadm's order for bringing a control plane up; stopping goes the other way.
START_ORDER = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]

_COMPONENT_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def validate_component_name(name: str) -> str:
    """Refuse anything that could be a path or shell trick before it reaches the filesystem."""
    if not name:
        raise CpctlError("empty component name", ExitCode.USAGE)
    if len(name) > 253:
        raise CpctlError("component name too long (%d characters, at most 253)" % len(name), ExitCode.USAGE)
    if not _COMPONENT_RE.match(name) or ".." in name:
        shown = name if name.isprintable() else repr(name)
        raise CpctlError("invalid component name %r: use letters, digits, '.', '-', '_' only" % shown,
                         ExitCode.USAGE)
    return name


def file_stem(filename: str) -> str:
    for suffix in _FILE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return filename


def checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _yaml_loader() -> Any:
    import yaml
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- names editors, package managers and humans leave next to a manifest -----------------------
# Matched on the whole name's end, so a real component name never matches by accident.
VIM_WRITE_TEST = "4913"     # vim writes and deletes this non-dot file to test the directory
_LEFTOVER_RE = re.compile(r"(~|\.bak\d*|\.backup|\.orig|\.old|\.save|\.sw[a-px]|\.tmp|\.rej"
                          r"|\.dpkg-(old|new|dist|bak)|\.rpm(save|new|orig)|\.ucf-(old|dist))$", re.IGNORECASE)
_SWAP_RE = re.compile(r"^\.(.+)\.sw[a-px]$")   # vim: .swp, then .swo ... .swa; .swx while testing


def leftover_kind(name: str) -> Optional[str]:
    """What kind of leftover copy a file name looks like, or None for an ordinary name."""
    if name == VIM_WRITE_TEST:
        return "vim's write-test file"
    if name.endswith("~"):
        return "an editor backup"
    if _LEFTOVER_RE.search(name):
        return "a backup/editor leftover name"
    return None


def swap_file_of(name: str) -> Optional[str]:
    """The file a vim swap file (``.kube-apiserver.yaml.swp``) belongs to, None for other names."""
    match = _SWAP_RE.match(name)
    return match.group(1) if match else None


class InvalidManifest(ValueError):
    """The file is not something the kubelet would run (the message says why)."""


_PARSED: Dict[bytes, Union[dict, InvalidManifest]] = {}
_PARSED_MAX = 128               # entries; real manifests are a few KB, so at most ~8 MB
_PARSED_MAX_BYTES = 64 * 1024


def parse_pod(data: bytes) -> dict:
    """Parse and check a manifest the way the kubelet's file source would accept it.

    Byte-identical manifests are parsed once per process: kubeadm writes the same scheduler and
    controller-manager files on every master, and a fan-out over 20 masters would otherwise
    parse each 20 times (0.7 ms for a kubeadm apiserver manifest, against 0.03 ms to copy the
    result). Every caller gets its own copy, so none can change what another one sees.
    """
    known = _PARSED.get(data)
    if known is None:
        try:
            known = _parse_pod(data)
        except InvalidManifest as exc:
            known = exc
        if len(data) <= _PARSED_MAX_BYTES:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[data] = known
    if isinstance(known, InvalidManifest):
        raise InvalidManifest(str(known))
    return _copy_tree(known)


def _copy_tree(value: Any) -> Any:
    """A deep copy of parsed YAML (dicts, lists, immutable scalars), 2x faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {key: _copy_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_tree(item) for item in value]
    if isinstance(value, (tuple, set)):      # !!omap / !!pairs, !!set
        return type(value)(_copy_tree(item) for item in value)
    return value


def _parse_pod(data: bytes) -> dict:
    import yaml
    if not data.strip():
        raise InvalidManifest("empty file")
    if len(data) > MAX_MANIFEST_BYTES:
        raise InvalidManifest("too large (%d bytes, at most %d)" % (len(data), MAX_MANIFEST_BYTES))
    if b"\0" in data:
        raise InvalidManifest("binary content (NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidManifest("not UTF-8 text") from None
    try:
        docs = [d for d in yaml.load_all(text, Loader=_yaml_loader()) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = " at line %d" % (mark.line + 1) if mark is not None else ""
        raise InvalidManifest("invalid YAML%s: %s" % (where, getattr(exc, "problem", None) or exc)) from None
    if len(docs) != 1:
        raise InvalidManifest("%d YAML documents (one Pod per file)" % len(docs))
    pod = docs[0]
    if not isinstance(pod, dict):
        raise InvalidManifest("not a mapping")
    if pod.get("kind") != "Pod" or pod.get("apiVersion") != "v1":
        raise InvalidManifest("not a v1 Pod (kind=%s, apiVersion=%s)" % (pod.get("kind"), pod.get("apiVersion")))
    meta = pod.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidManifest("metadata.name is missing")
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
        raise InvalidManifest("spec.containers is missing")
    return pod


class Manifest:
    """One directory entry the kubelet would consider, with its parse result."""

    def __init__(self, name: str, path: str, entry: dict) -> None:
        self.file = name
        self.path = path
        self.kind: str = entry["kind"]
        self.mode: int = entry["mode"]
        self.uid: int = entry["uid"]
        self.gid: int = entry["gid"]
        self.size: int = entry["size"]
        self.mtime: float = entry["mtime"]
        self.data: Optional[bytes] = entry.get("data")
        self.pod: Optional[dict] = None
        self.error: Optional[str] = None
        if self.kind == "symlink":
            self.error = "symlink (cpctl never moves or writes through links)"
        elif self.kind != "file":
            self.error = "not a regular file"
        elif self.data is None:
            self.error = entry.get("error") or "too large (%d bytes, at most %d)" % (self.size, MAX_MANIFEST_BYTES)
        else:
            try:
                self.pod = parse_pod(self.data)
            except InvalidManifest as exc:
                self.error = str(exc)

    @property
    def valid(self) -> bool:
        return self.pod is not None

    @property
    def pod_name(self) -> Optional[str]:
        return self.pod["metadata"]["name"] if self.pod else None

    @property
    def namespace(self) -> str:
        if not self.pod:
            return ""
        return self.pod["metadata"].get("namespace") or "default"

    @property
    def checksum(self) -> Optional[str]:
        return checksum(self.data) if self.data is not None else None

    def matches(self, wanted: str) -> bool:
        """True when ``wanted`` names this manifest by pod name, alias or file stem."""
        target = ALIASES.get(wanted, wanted)
        return target in (self.pod_name, file_stem(self.file)) or wanted in (self.pod_name, file_stem(self.file))


class DirScan:
    """What the kubelet would load from the manifests dir, plus what it would skip."""

    def __init__(self, path: str, manifests: list, ignored: list) -> None:
        self.path = path
        self.manifests: list = manifests   # non-dot entries (valid or not)
        self.ignored: list = ignored       # dot files and directories: the kubelet skips them

    @property
    def valid(self) -> list:
        return [m for m in self.manifests if m.valid]

    def duplicates(self) -> dict:
        """(namespace, pod name) -> files, for pods defined by more than one file."""
        seen: dict = {}
        for m in self.valid:
            seen.setdefault((m.namespace, m.pod_name), []).append(m.file)
        return {key: files for key, files in seen.items() if len(files) > 1}

    def find(self, wanted: str) -> list:
        return [m for m in self.manifests if m.matches(wanted)]


def require_directory(info: Optional[Dict[str, Any]], what: str, path: str, missing: str = "does not exist") -> None:
    """Fail with one clear line unless ``info`` (an lstat) is a real directory: absent (exit 7), a
    symlink (refused: cpctl uses real paths only, exit 4) or another kind of file (exit 7)."""
    if info is None:
        raise CpctlError("%s %s %s" % (what, path, missing), ExitCode.ENVIRONMENT)
    if info["kind"] == "symlink":
        raise CpctlError("%s %s is a symlink: pass the real directory" % (what, path), ExitCode.REFUSED)
    if info["kind"] != "dir":
        raise CpctlError("%s %s is not a directory" % (what, path), ExitCode.ENVIRONMENT)


def check_manifests_dir(host: Host, path: str) -> None:
    """Fail with one clear line when the manifests dir cannot be used."""
    require_directory(host.lstat(path), "manifests dir", path)


def scan(host: Host, path: str) -> DirScan:
    """Read the whole manifests dir in one round trip and classify each entry."""
    check_manifests_dir(host, path)
    try:
        entries = host.scan_dir(path, MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise CpctlError("cannot read manifests dir %s: %s" % (path, exc.strerror or exc),
                         ExitCode.ENVIRONMENT) from None
    manifests, ignored = [], []
    for entry in entries:
        name = entry["name"]
        if name.startswith(".") or entry["kind"] == "dir":
            ignored.append(name)
            continue
        manifests.append(Manifest(name, path.rstrip("/") + "/" + name, entry))
    return DirScan(path, manifests, ignored)

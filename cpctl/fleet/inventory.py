"""YAML inventory of masters, Ansible-like, so existing inventories carry over with little work.

Two equivalent forms are accepted.

Ansible form (``all`` at the top; groups nest under ``children``, to any depth)::

    all:
      vars: {user: ubuntu, become: true}
      hosts:
        master1: {host: 10.0.0.11, port: 22, node_name: cp1}
        master2: {host: 10.0.0.12}
      children:
        masters:
          vars: {state_dir: /var/lib/cpctl}
          hosts: {master1: {}, master2: {}}

Simple form (flat groups listing host names)::

    vars: {user: ubuntu}
    hosts:
      master1: {host: 10.0.0.11}
      master2: {host: 10.0.0.12}
    groups:
      masters: [master1, master2]

Per-host keys: ``host`` (address or ssh_config alias; defaults to the inventory name), ``port``,
``user``, ``become``, ``python``, ``node_name``, ``manifests_dir``, ``kubelet_dir``, ``state_dir``, ``kubeconfig``,
``node_root``,
``crictl``. ``ansible_host``/``ansible_port``/``ansible_user``/``ansible_become``/
``ansible_python_interpreter`` are read as their short names; other ``ansible_*`` keys are
ignored; any other key is an error (a typo must not silently fall back to a default).
Precedence, lowest first: ``all`` vars, group vars (parents before children), host vars.

Patterns for :meth:`Inventory.select`: a host name, a group name, ``all`` (or ``*``), a comma
list of those, and ``!name`` to exclude; hosts come back in inventory order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from cpctl.errors import CpctlError, ExitCode
from cpctl.inputs import load_yaml

STR_KEYS = ("host", "user", "python", "node_name", "manifests_dir", "kubelet_dir", "state_dir", "kubeconfig",
            "crictl", "node_root")
PATH_KEYS = ("manifests_dir", "kubelet_dir", "state_dir", "kubeconfig", "node_root")
ANSIBLE_ALIASES = {"ansible_host": "host", "ansible_port": "port", "ansible_user": "user",
                   "ansible_become": "become", "ansible_python_interpreter": "python"}
KNOWN_KEYS = set(STR_KEYS) | {"port", "become"}


#: A checked inventory var: ``port`` an int, ``become`` a bool, every other one a string.
Var = Union[str, int, bool]
Vars = Dict[str, Var]


@dataclass
class HostSpec:
    """One master: its inventory ``name``, the SSH ``target`` built from its vars, and the vars."""

    name: str
    target: str
    vars: Vars = field(default_factory=dict)
    groups: List[str] = field(default_factory=list)

    def get(self, key: str, default: Optional[Var] = None) -> Optional[Var]:
        return self.vars.get(key, default)

    def text(self, key: str) -> Optional[str]:
        """A string var (every var but ``port`` and ``become``), None when unset."""
        value = self.vars.get(key)
        return value if isinstance(value, str) else None

    @property
    def node_name(self) -> Optional[str]:
        return self.text("node_name")

    @property
    def manifests_dir(self) -> Optional[str]:
        return self.text("manifests_dir")

    @property
    def kubelet_dir(self) -> Optional[str]:
        return self.text("kubelet_dir")

    @property
    def state_dir(self) -> Optional[str]:
        return self.text("state_dir")

    @property
    def kubeconfig(self) -> Optional[str]:
        return self.text("kubeconfig")

    @property
    def crictl(self) -> Optional[str]:
        return self.text("crictl")

    @property
    def node_root(self) -> Optional[str]:
        return self.text("node_root")

    @property
    def become(self) -> bool:
        return bool(self.vars.get("become", True))

    @property
    def python(self) -> str:
        return self.text("python") or "python3"


class _Bad(Exception):
    """A structural problem at a dotted location inside the file."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__("%s: %s" % (where, what) if where else what)


def _mapping(value: object, where: str) -> Dict[object, object]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(where, "must be a mapping, got %s" % type(value).__name__)
    return value


def _check_vars(raw: object, where: str) -> Vars:
    """Validate one vars mapping; normalise ansible_* names."""
    out: Vars = {}
    for key, value in _mapping(raw, where).items():
        key = str(key)
        key = ANSIBLE_ALIASES.get(key, key)
        if key.startswith("ansible_"):
            continue
        if key not in KNOWN_KEYS:
            raise _Bad(where, "unknown key %r (known: %s)" % (key, ", ".join(sorted(KNOWN_KEYS))))
        out[key] = _check_value(key, value, "%s.%s" % (where, key))
    return out


def _check_value(key: str, value: object, where: str) -> Var:
    if key == "port":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            raise _Bad(where, "must be an integer from 1 to 65535")
        return value
    if key == "become":
        if not isinstance(value, bool):
            raise _Bad(where, "must be true or false")
        return value
    if not isinstance(value, str) or not value.strip():
        raise _Bad(where, "must be a non-empty string")
    if key in PATH_KEYS and not value.startswith("/"):
        raise _Bad(where, "must be an absolute path")
    return value


class _Builder:
    """Collects hosts (in order of first appearance), group memberships and vars layers."""

    def __init__(self) -> None:
        self.host_vars: Dict[str, Vars] = {}
        self.groups: Dict[str, List[str]] = {"all": []}
        self.group_vars: Dict[str, Vars] = {}
        self.group_depth: Dict[str, int] = {"all": 0}
        self.children: Dict[str, List[str]] = {}

    def add_host(self, raw_name: object, raw: object, group: str, where: str) -> None:
        name = _name(raw_name, where)
        merged = self.host_vars.setdefault(name, {})
        merged.update(_check_vars(raw, "%s.%s" % (where, name)))
        for target in (group, "all"):
            if name not in self.groups.setdefault(target, []):
                self.groups[target].append(name)

    def add_group(self, name: str, raw: object, where: str, depth: int) -> None:
        body = _mapping(raw, where)
        extra = set(body) - {"hosts", "vars", "children"}
        if extra:
            raise _Bad(where, "unknown key %r (a group has hosts, vars, children)" % min(extra, key=str))
        self.groups.setdefault(name, [])
        self.group_depth[name] = max(depth, self.group_depth.get(name, 0))
        self.group_vars.setdefault(name, {}).update(_check_vars(body.get("vars"), where + ".vars"))
        for host, host_raw in _mapping(body.get("hosts"), where + ".hosts").items():
            self.add_host(host, host_raw, name, where + ".hosts")
        for child, child_raw in _mapping(body.get("children"), where + ".children").items():
            child = _name(child, where + ".children")
            self.children.setdefault(name, []).append(child)
            self.add_group(child, child_raw, "%s.children.%s" % (where, child), depth + 1)


def _name(value: object, where: str) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip() \
            or any(c in str(value) for c in ",!: \t"):
        raise _Bad(where, "bad name %r" % (value,))
    return str(value)


def _parse_ansible(doc: Mapping[object, object], builder: _Builder) -> None:
    extra = set(doc) - {"all"}
    if extra:
        raise _Bad("", "unexpected top-level key %r next to 'all'" % min(extra, key=str))
    builder.add_group("all", doc["all"], "all", 0)


def _parse_simple(doc: Mapping[object, object], builder: _Builder) -> None:
    extra = set(doc) - {"vars", "hosts", "groups"}
    if extra:
        raise _Bad("", "unknown top-level key %r (use all:, or vars/hosts/groups)" % min(extra, key=str))
    builder.group_vars["all"] = _check_vars(doc.get("vars"), "vars")
    for host, raw in _mapping(doc.get("hosts"), "hosts").items():
        builder.add_host(host, raw, "all", "hosts")
    for raw_group, members in _mapping(doc.get("groups"), "groups").items():
        group = _name(raw_group, "groups")
        if not isinstance(members, list):
            raise _Bad("groups." + group, "must be a list of host names")
        builder.groups.setdefault(group, [])
        builder.group_depth[group] = 1
        for raw_member in members:
            member = _name(raw_member, "groups." + group)
            if member not in builder.host_vars:
                raise _Bad("groups." + group, "unknown host %r" % member)
            builder.groups[group].append(member)


def _expand(group: str, builder: _Builder, seen: Tuple[str, ...] = ()) -> List[str]:
    """Hosts of a group including its children's, in inventory order; refuses cycles."""
    if group in seen:
        raise _Bad("children", "group cycle: %s" % " -> ".join(seen + (group,)))
    hosts = list(builder.groups.get(group, []))
    for child in builder.children.get(group, []):
        hosts += [h for h in _expand(child, builder, seen + (group,)) if h not in hosts]
    return hosts


def _target(name: str, values: Vars) -> str:
    host = values.get("host")
    host = host if isinstance(host, str) and host else name
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    text = host
    if values.get("user"):
        text = "%s@%s" % (values["user"], text)
    port = values.get("port")
    if isinstance(port, int) and port:
        text = "%s:%d" % (text, port)
    return text


class Inventory:
    """Hosts and groups of one inventory file; ``select`` resolves patterns to ``HostSpec``s."""

    def __init__(self, path: str, hosts: List[HostSpec], groups: Dict[str, List[str]]) -> None:
        self.path, self.hosts, self.groups = path, hosts, groups
        self._by_name = {h.name: h for h in hosts}

    def select(self, patterns: Union[str, Iterable[str]]) -> List[HostSpec]:
        words = _words(patterns)
        if not words:
            raise CpctlError("no hosts pattern given (use a host, a group or 'all')", ExitCode.USAGE)
        wanted: List[str] = []
        excluded: Set[str] = set()
        for word in words:
            names = self._names(word.lstrip("!"))
            if word.startswith("!"):
                excluded.update(names)
            else:
                wanted += [n for n in names if n not in wanted]
        order = [h.name for h in self.hosts]
        return [self._by_name[n] for n in order if n in wanted and n not in excluded]

    def _names(self, word: str) -> List[str]:
        if word in ("all", "*"):
            return [h.name for h in self.hosts]
        if word in self.groups:
            return list(self.groups[word])
        if word in self._by_name:
            return [word]
        raise CpctlError("inventory %s: no host or group named %r" % (self.path, word), ExitCode.USAGE,
                         "known groups: %s" % ", ".join(sorted(self.groups)))


def _words(patterns: Union[str, Iterable[str]]) -> List[str]:
    items = [patterns] if isinstance(patterns, str) else list(patterns)
    return [w.strip() for item in items for w in str(item).split(",") if w.strip()]


def _build(path: str, doc: object) -> Inventory:
    if not isinstance(doc, dict) or not doc:
        raise _Bad("", "expected a mapping with 'all:' (Ansible form) or 'hosts:' (simple form)")
    builder = _Builder()
    (_parse_ansible if "all" in doc else _parse_simple)(doc, builder)
    clash = set(builder.groups) & set(builder.host_vars)
    if clash:
        raise _Bad("", "%r is both a host and a group" % sorted(clash)[0])
    groups = {g: _expand(g, builder) for g in builder.groups}
    hosts = []
    for name in groups["all"]:
        member_of = sorted((g for g in groups if name in groups[g] and g != "all"),
                           key=lambda g: (builder.group_depth.get(g, 1), g))
        values: Vars = dict(builder.group_vars.get("all", {}))
        for group in member_of:
            values.update(builder.group_vars.get(group, {}))
        values.update(builder.host_vars[name])
        hosts.append(HostSpec(name, _checked_target(name, values), values, member_of))
    return Inventory(path, hosts, groups)


def _checked_target(name: str, values: Vars) -> str:
    from cpctl.host.sshconfig import parse_target
    target = _target(name, values)
    try:
        parse_target(target)
    except CpctlError as exc:
        raise _Bad("host " + name, exc.message) from None
    return target


def load_inventory(path: str) -> Inventory:
    """Read and validate an inventory; every problem is one CpctlError line, never a traceback."""
    import yaml

    from cpctl.inputs import read_input_file
    text = read_input_file(path, "inventory")
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = " at line %d" % (mark.line + 1) if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CpctlError("inventory %s: invalid YAML%s: %s" % (path, where, problem),
                         ExitCode.USAGE) from None
    try:
        return _build(path, doc)
    except _Bad as exc:
        raise CpctlError("inventory %s: %s" % (path, exc), ExitCode.USAGE) from None

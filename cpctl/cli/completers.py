"""What the shell gets for a parameter's value: click's public per-parameter completion hook.

Each function here is a parameter's ``shell_complete=`` callback (``click.Parameter``'s public
API): click finds which parameter the cursor is on and calls it with that command's context.
COMPONENT arguments complete from this machine's manifests dir and its parked manifests,
revision numbers (``revisions COMPONENT N``, ``--diff``, ``rollback --to``) from the names in the
state dir's revisions, ``-H`` from the inventory's host and group names, ``flags --set`` from the
catalogue's known flags of the component (``core.knownflags``) and ``--unset`` from the flags its
manifest has - read with plain ``os.listdir`` and a bounded read: no lock, no journal recovery,
nothing written. Only stdlib and click at import time: ``cli.main`` imports this module for
``-H`` on every start.
"""

from __future__ import annotations

import contextvars
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import click

PRESENT_ONLY = frozenset({"stop", "restart"})               # a COMPONENT that runs now
PARKED_ONLY = frozenset({"start"})                          # ...one that is parked
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_MANIFEST = 1 << 20                                      # a bigger file is not read for a completion
_REVISION_META = re.compile(r"^(?P<file>.+)\.(?P<number>[1-9][0-9]{0,8})\.json$")

#: The words of the command line being completed (set by ``cli.completion`` for one request):
#: click leaves the arguments unparsed while an option still waits for its value
#: (``rollback scheduler --to <TAB>``), so a callback finds COMPONENT in them.
WORDS: "contextvars.ContextVar[Tuple[str, ...]]" = contextvars.ContextVar("cpctl_completion_words", default=())


def components(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """COMPONENT: the names not given yet on this command line."""
    given = ctx.params.get(param.name or "") or ()
    return [name for name in component_names(ctx, incomplete)
            if name not in (given if isinstance(given, tuple) else (given,))]


def revisions(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """A revision number of the COMPONENT already typed."""
    return revision_numbers(ctx, incomplete, WORDS.get())


def hosts(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """``-H``: the inventory's host and group names."""
    return host_names(ctx, incomplete)


def set_flags(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """``flags COMPONENT --set``: ``NAME=`` for each flag the catalogue knows the component's binary
    has (the release of its manifest's image, for etcd); nothing once the ``=`` is typed."""
    from cpctl import catalogue
    from cpctl.core.knownflags import known_flags
    if "=" in incomplete:
        return []
    component = _component(ctx)
    if component is None:
        return []
    container = _container(ctx, component)
    binary = catalogue.canonical(component)
    image = str(container.get("image") or "") if container else ""
    names = known_flags(binary, image) or frozenset()
    return ["%s=" % name for name in sorted(names - {"help"}) if name.startswith(incomplete)]


def unset_flags(ctx: click.Context, param: click.Parameter, incomplete: str) -> List[str]:
    """``flags COMPONENT --unset``: the flags its manifest (the parked copy with ``--parked``) has,
    minus those already given."""
    from cpctl.core.flags import flags_of
    component = _component(ctx)
    container = _container(ctx, component) if component else None
    if container is None:
        return []
    given = {name[2:] if name.startswith("--") else name for name in ctx.params.get(param.name or "") or ()}
    names = dict.fromkeys(flag.name for flag in flags_of(container))
    return [name for name in names if name.startswith(incomplete) and name not in given]


def _component(ctx: click.Context) -> Optional[str]:
    component = ctx.params.get("component") or _first_argument(ctx, WORDS.get())
    return component if isinstance(component, str) and component else None


def _container(ctx: click.Context, component: str) -> Optional[Dict[str, Any]]:
    """The container ``flags`` would change (``--container``, else the only one or the one named
    like the pod) of COMPONENT's manifest, or of its parked copy with ``--parked``; None when
    there is no such readable, decodable file."""
    import yaml

    from cpctl import catalogue
    from cpctl.core.flags import pick_container
    params = ctx.find_root().params
    if ctx.params.get("parked"):
        directory = os.path.join(params.get("state_dir") or "/var/lib/cpctl", "parked")
    else:
        directory = manifests_dir(params)
    for name in dict.fromkeys((component, catalogue.canonical(component))):
        for suffix in MANIFEST_SUFFIXES:
            text = _bounded_read(os.path.join(directory, name + suffix))
            if text is None:
                continue
            try:
                pod = yaml.safe_load(text)
                return pick_container(pod, ctx.params.get("container"))[1] if isinstance(pod, dict) else None
            except Exception:  # noqa: BLE001 - a file cpctl cannot decode completes nothing
                return None
    return None


def _bounded_read(path: str) -> Optional[str]:
    """A regular file's text (not through a symlink), at most ``MAX_MANIFEST`` bytes; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        import stat
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = handle.read(MAX_MANIFEST + 1)
    return data.decode("utf-8", "replace") if len(data) <= MAX_MANIFEST else None


def component_names(ctx: click.Context, incomplete: str = "") -> List[str]:
    """Component names starting with ``incomplete``: file stems (and kubeadm's short names) of the
    effective manifests dir and of the parked manifests - only the running ones for stop/restart,
    only the parked ones for start. Unreadable dirs give nothing."""
    params = ctx.find_root().params
    command = ctx.command.name or ""
    names: Set[str] = set()
    if command not in PARKED_ONLY:
        names |= _names_in(manifests_dir(params))
    if command not in PRESENT_ONLY:
        names |= _names_in(os.path.join(params.get("state_dir") or "/var/lib/cpctl", "parked"))
    return sorted(name for name in names if name.startswith(incomplete))


def _first_argument(ctx: click.Context, args: Sequence[str]) -> Optional[str]:
    """The first positional word after the command word in ``args`` (click leaves the arguments
    unparsed while an option still waits for its value: ``rollback scheduler --to <TAB>``)."""
    name = ctx.command.name
    if name is None or name not in args:
        return None
    takes_value = {opt for param in ctx.command.get_params(ctx) if isinstance(param, click.Option)
                   and not param.is_flag for opt in param.opts + param.secondary_opts}
    words = list(args)[list(args).index(name) + 1:]
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in takes_value
        else:
            return word
    return None


def revision_numbers(ctx: click.Context, incomplete: str = "", args: Sequence[str] = ()) -> List[str]:
    """The numbers of the kept revisions of the COMPONENT already typed (``revisions COMPONENT
    <TAB>``, ``--diff``, ``rollback --to``), oldest first: from the names in ``STATE/revisions``
    (no metadata is read)."""
    from cpctl.core.manifests import ALIASES
    component = ctx.params.get("component") or _first_argument(ctx, args)
    if not isinstance(component, str) or not component:
        return []
    wanted = {component, ALIASES.get(component, component), _stem(component) or component}
    directory = os.path.join(ctx.find_root().params.get("state_dir") or "/var/lib/cpctl", "revisions")
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    numbers = set()
    for entry in entries:
        match = _REVISION_META.match(entry)
        if match and (match.group("file") in wanted or _stem(match.group("file")) in wanted):
            numbers.add(int(match.group("number")))
    return [str(n) for n in sorted(numbers) if str(n).startswith(incomplete)]


def host_names(ctx: click.Context, incomplete: str = "") -> List[str]:
    """``-H`` values: the host and group names (and ``all``) of the inventory given with ``-i`` or
    $CPCTL_INVENTORY; after a comma, the next name of the list. Nothing without an inventory."""
    from cpctl.fleet.inventory import load_inventory
    path = ctx.find_root().params.get("inventory") or os.environ.get("CPCTL_INVENTORY")
    if not path:
        return []
    inventory = load_inventory(str(path))
    done, _, last = incomplete.rpartition(",")
    prefix = done + "," if done else ""
    given = set(done.split(",")) if done else set()
    names = ["all"] + sorted(inventory.groups.keys() - {"all"}) + [h.name for h in inventory.hosts]
    return [prefix + name for name in dict.fromkeys(names) if name.startswith(last) and name not in given]


def manifests_dir(params: Mapping[str, object]) -> str:
    """The manifests dir cpctl would use: ``--manifests-dir`` or $CPCTL_MANIFESTS_DIR, else the
    kubelet's staticPodPath (its config under ``--kubelet-dir``), else kubeadm's default."""
    from cpctl.core import identity
    if params.get("manifests_dir"):
        return str(params["manifests_dir"])
    from cpctl.host.local import LocalHost
    view = identity.read_kubelet(LocalHost(), str(params.get("kubelet_dir") or identity.DEFAULT_KUBELET_DIR))
    return str(view.static_pod_path.value) if view.static_pod_path else identity.DEFAULT_MANIFESTS_DIR


def _names_in(directory: str) -> Set[str]:
    from cpctl.catalogue import ALIASES
    short = {target: alias for alias, target in ALIASES.items()}
    names: Set[str] = set()
    try:
        entries = os.listdir(directory)
    except OSError:
        return names
    for entry in entries:
        stem = _stem(entry)
        if stem:
            names.add(stem)
            names.add(short.get(stem, stem))
    return names


def _stem(filename: str) -> Optional[str]:
    """The component name of a manifest file (None for a dot file or another kind of file)."""
    if filename.startswith(".") or not filename.isprintable():
        return None
    for suffix in MANIFEST_SUFFIXES:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            return filename[: -len(suffix)]
    return None

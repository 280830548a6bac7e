"""Run one cpctl command on many masters: targets, connections, parallel or rolling, recap.

The command itself is a plain function ``action(node) -> dict`` - the same one the local CLI
runs - applied to a ``Node`` whose ``Host`` is an ``SSHHost``. Read-only commands fan out in
parallel (``forks``); changes roll one batch at a time (``serial``) and stop at the first
failure unless ``keep_going``.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.inventory import HostSpec, load_inventory
from cpctl.fleet.runner import ConnectionPool, HostResult, run_parallel, run_rolling

READ_ONLY_HOST_TIMEOUT = 60.0     # seconds; a change is bounded by its own --timeout waits


class RemoteOptions:
    """Everything about *where* a command runs (the *what* is in ``app.Settings``)."""

    def __init__(self, hosts: Optional[List[str]] = None, inventory: Optional[str] = None,
                 ssh_options: Any = None, forks: int = 10, serial: str = "1", keep_going: bool = False,
                 host_timeout: Optional[float] = None) -> None:
        self.hosts = hosts or []
        self.inventory = inventory
        self.ssh_options = ssh_options
        self.forks = forks
        self.serial = serial
        self.keep_going = keep_going
        self.host_timeout = host_timeout
        self._pool: Optional[ConnectionPool] = None

    def pool(self) -> ConnectionPool:
        """One SSH connection per host for the whole run, shared by preflight and action."""
        if self._pool is None:
            from cpctl.host.sshconfig import remember_login_name
            remember_login_name()           # before any connecting thread starts
            self._pool = ConnectionPool(self.ssh_options)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def split_hosts(values: List[str]) -> List[str]:
    """``-H a -H b,c`` -> [a, b, c] (order kept, duplicates dropped)."""
    out: List[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


def select_specs(remote: RemoteOptions) -> List[HostSpec]:
    """The hosts to act on: inventory patterns (default ``all``) or plain SSH targets."""
    if remote.inventory:
        inventory = load_inventory(remote.inventory)
        return inventory.select(remote.hosts or ["all"])
    from cpctl.host.sshconfig import parse_target
    specs = []
    for target in remote.hosts:
        parse_target(target)   # strict: a bad target is a usage error before anything connects
        specs.append(HostSpec(name=target, target=target))
    return specs


def all_inventory_specs(remote: RemoteOptions) -> List[HostSpec]:
    """Every host of the inventory (fleet-safety checks count the masters not targeted too)."""
    if not remote.inventory:
        return []
    return load_inventory(remote.inventory).select(["all"])


def settings_for(settings: Any, spec: HostSpec) -> Any:
    """Per-host inventory vars override the global options (paths are on that host)."""
    return settings.with_overrides(manifests_dir=spec.manifests_dir, state_dir=spec.state_dir,
                                   node_name=spec.node_name, kubeconfig=spec.kubeconfig, crictl=spec.crictl)


def run_on_hosts(settings: Any, remote: RemoteOptions, specs: List[HostSpec], action: Callable[[Any], dict],
                 changing: bool) -> List[HostResult]:
    """Apply ``action`` to a Node on each host; connections are reused for the whole run."""
    from cpctl.ops.lifecycle import open_node
    pool = remote.pool()

    def on_host(spec: HostSpec) -> dict:
        node = open_node(settings_for(settings, spec), host=pool.get(spec))
        return action(node)

    if changing:
        return run_rolling(specs, on_host, serial=_serial(remote.serial), keep_going=remote.keep_going,
                           timeout=remote.host_timeout, on_timeout=pool.abandon)
    timeout = remote.host_timeout if remote.host_timeout is not None else READ_ONLY_HOST_TIMEOUT
    return run_parallel(specs, on_host, forks=remote.forks, timeout=timeout, on_timeout=pool.abandon)


def _serial(value: str) -> Any:
    text = str(value).strip()
    if text.endswith("%"):
        number = text[:-1]
        if number.isdigit() and 0 < int(number) <= 100:
            return text
    elif text.isdigit() and int(text) > 0:
        return int(text)
    raise CpctlError("--serial %r: a positive number or a percentage like 30%%" % value, ExitCode.USAGE)


def exit_code(results: List[HostResult]) -> int:
    """0 when every host is fine; else the first failed host's code (unreachable: 8)."""
    for result in results:
        if result.status == "failed":
            return int(result.code or ExitCode.INTERNAL)
    if any(r.status == "unreachable" for r in results):
        return int(ExitCode.UNREACHABLE)
    return 0


def failure_line(results: List[HostResult]) -> str:
    """The one stderr line of a remote run that failed: the error behind ``exit_code`` (the first
    failed host, else the first unreachable one), prefixed with its host, and how many hosts failed."""
    bad = [r for r in results if r.failed]
    if not bad:
        return ""
    first = next((r for r in bad if r.status == "failed"), bad[0])
    error = first.error or first.status
    text = error if error.startswith(first.host + ":") else "%s: %s" % (first.host, error)
    if len(results) > 1:
        skipped = sum(r.status == "skipped" for r in results)
        text += " (%d of %d hosts failed or unreachable%s; see the recap)" % (
            len(bad), len(results), ", %d skipped" % skipped if skipped else "")
    return text


QUORUM_RULES = {"etcd": "etcd keeps quorum only while a majority of its members run",
                "kube-apiserver": "at least one API server must keep running"}


def fleet_preflight(settings: Any, remote: RemoteOptions, verb: str, components: List[str], force: bool,
                    reason: Optional[str]) -> Optional[str]:
    """Refuse a stop/restart of etcd or the API server that would take the cluster down.

    Counts, over every inventory host (not only the targeted ones), where the component runs;
    unreachable masters count as not running. Returns the reason to record (marked when forced).
    """
    from cpctl.core import manifests
    from cpctl.ops import lifecycle as app
    guarded = [manifests.ALIASES.get(c, c) for c in components if manifests.ALIASES.get(c, c) in QUORUM_RULES]
    if not guarded:
        return reason
    targets = {spec.name for spec in select_specs(remote)}
    census = run_on_hosts(settings.with_overrides(probe="none"), remote, all_inventory_specs(remote),
                          lambda node: app.status(node), changing=False)
    problems = [p for p in (_quorum_problem(c, verb, census, targets, remote.serial) for c in guarded) if p]
    if problems and not force:
        raise CpctlError("refused: %s (use --force to override; it is recorded)" % "; ".join(problems),
                         ExitCode.REFUSED)
    if problems:
        return "[forced past: %s] %s" % ("; ".join(problems), reason or "")
    return reason


def _quorum_problem(component: str, verb: str, census: List[HostResult], targets: set, serial: str) -> str:
    running, members, dark = [], [], []
    for result in census:
        if result.failed:
            dark.append(result.host)
            members.append(result.host)
            continue
        rows = [r for r in result.data["components"] if r["component"] == component]
        if rows:
            members.append(result.host)
        if any(r["state"] == "running" for r in rows):
            running.append(result.host)
    hit = [h for h in running if h in targets]
    down_at_once = len(hit) if verb == "stop" else min(len(hit), _batch(serial, len(targets)))
    left = len(running) - down_at_once
    need = len(members) // 2 + 1 if component == "etcd" else 1
    if left >= need:
        return ""
    return "%s %s on %s would leave %d of %d running (%s%s)" % (
        verb, component, ",".join(hit) or "-", left, len(members), QUORUM_RULES[component],
        "; unreachable: %s" % ",".join(dark) if dark else "")


def _batch(serial: str, total: int) -> int:
    value = _serial(serial)
    if isinstance(value, int):
        return value
    return max(1, int(total * int(value[:-1]) / 100))

"""Where a command runs: the selected masters (``-H``/``--inventory``), how many at a time, and how
a fan-out's results become one exit code and one line on stderr. No domain knowledge here: what
runs on each master is the caller's ``action``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, List, Optional

from cpctl.errors import ExitCode
from cpctl.fleet.inventory import HostSpec, load_inventory
from cpctl.fleet.pool import ConnectionPool
from cpctl.fleet.runner import HostResult, Serial, parse_serial

if TYPE_CHECKING:
    from cpctl.host.base import Host
    from cpctl.host.sshconfig import SSHOptions

READ_ONLY_HOST_TIMEOUT = 60.0     # seconds; a change is bounded by its own --timeout waits


@dataclass
class RemoteOptions:
    """Everything about *where* a command runs (the *what* is in ``core.settings.Settings``)."""

    hosts: List[str] = field(default_factory=list)
    inventory: Optional[str] = None
    ssh_options: Optional["SSHOptions"] = None
    forks: int = 10
    serial: Serial = field(default_factory=lambda: parse_serial(1))
    keep_going: bool = False
    host_timeout: Optional[float] = None
    census: str = "inventory"          # where the quorum check counts: "inventory" or "cluster"
    _pool: Optional["ConnectionPool[HostSpec, Host]"] = field(default=None, repr=False)

    def pool(self, connector: Callable[[HostSpec], "Host"]) -> "ConnectionPool[HostSpec, Host]":
        """One connection per host for the whole run, shared by preflight and action."""
        if self._pool is None:
            self._pool = ConnectionPool(connector)
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
        text += " (%d of %d hosts failed or unreachable%s; see above)" % (
            len(bad), len(results), ", %d skipped" % skipped if skipped else "")
    return text

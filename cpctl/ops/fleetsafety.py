"""Fleet safety: refuse a stop or restart of etcd or the API server that would take the cluster down.

The caller takes a census (``status`` of every inventory master, not only the targeted ones) and
hands it here; unreachable masters count as members that do not run the component. The rules:

* etcd keeps quorum only while a majority of its members run;
* at least one API server must keep running.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Set

from cpctl.core import manifests
from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.runner import HostResult, Serial

QUORUM_RULES = {"etcd": "etcd keeps quorum only while a majority of its members run",
                "kube-apiserver": "at least one API server must keep running"}


def guarded(components: Sequence[str]) -> List[str]:
    """The components of ``components`` whose loss a fleet can feel (etcd, the API server)."""
    return [manifests.ALIASES.get(c, c) for c in components if manifests.ALIASES.get(c, c) in QUORUM_RULES]


def preflight(census: List[HostResult], targets: Set[str], verb: str, components: Sequence[str], serial: Serial,
              force: bool, reason: Optional[str]) -> Optional[str]:
    """Refuse (exit 4) what the rules forbid; return the reason to record (marked when forced)."""
    problems = [p for p in (_problem(c, verb, census, targets, serial) for c in guarded(components)) if p]
    if problems and not force:
        raise CpctlError("refused: %s (use --force to override; it is recorded)" % "; ".join(problems),
                         ExitCode.REFUSED)
    if problems:
        return "[forced past: %s] %s" % ("; ".join(problems), reason or "")
    return reason


def _problem(component: str, verb: str, census: List[HostResult], targets: Set[str], serial: Serial) -> str:
    running, members, dark = _count(component, census)
    hit = [h for h in running if h in targets]
    down_at_once = len(hit) if verb == "stop" else min(len(hit), serial.batch(len(targets)))
    left = len(running) - down_at_once
    need = len(members) // 2 + 1 if component == "etcd" else 1
    if left >= need:
        return ""
    return "%s %s on %s would leave %d of %d running (%s%s)" % (
        verb, component, ",".join(hit) or "-", left, len(members), QUORUM_RULES[component],
        "; unreachable: %s" % ",".join(dark) if dark else "")


def _count(component: str, census: List[HostResult]) -> Any:
    """(masters running it, masters that are members, masters that could not be asked)."""
    running: List[str] = []
    members: List[str] = []
    dark: List[str] = []
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
    return running, members, dark

"""The probes by name: what ``--probe`` accepts, and how a waiter is built from it.

Adding a probe: write its module (a class with ``name``, ``max_call`` and ``observe``, see
``base.Probe``) and add one line to ``PROBES``; the CLI reads its ``--probe`` choices from ``CHOICES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

if TYPE_CHECKING:
    from cpctl.probes.base import Waiter

# --probe name -> "module:class" (imported only when used: `cpctl --help` reads this table).
PROBES: Dict[str, str] = {
    "api": "cpctl.probes.api:ApiProbe",
    "crictl": "cpctl.probes.crictl:CrictlProbe",
    "health": "cpctl.probes.health:HealthProbe",
}
CHOICES = ("auto",) + tuple(PROBES) + ("none",)


def make_waiter(kind: str, **options: Any) -> "Waiter":
    """The waiter for ``--probe kind``: ``none`` trusts the file move; the others poll probes.
    (Imports here, not at the top: ``cpctl --help`` reads ``CHOICES`` and nothing else.)"""
    from cpctl.errors import CpctlError, ExitCode
    from cpctl.probes.base import NoWait
    if kind == "none":
        return NoWait()
    if kind not in CHOICES:
        raise CpctlError("unknown probe %r (one of %s)" % (kind, ", ".join(CHOICES)), ExitCode.USAGE)
    from cpctl.probes.waiter import VerifyingWaiter
    return VerifyingWaiter(mode=kind, **options)

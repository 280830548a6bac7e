"""The probes by name: what ``--probe`` accepts and the probes a waiter is built from.

Adding a probe: write its module (a class with ``name``, ``max_call``, ``via_api``, ``identifies``,
``observe`` and ``from_options``, see ``base.Probe``) and add one line to ``PROBES``. The waiter
builds every probe listed here (``build_probes``) and asks them in this order in ``auto`` mode; the
CLI reads its ``--probe`` choices from ``CHOICES`` (``tests/probes/test_probes_registry.py`` keeps the two
in step). Nothing here imports a probe module until a waiter is made: ``cpctl --help`` reads this
table and nothing else (``cpctl.ops.wiring.make_waiter`` makes the waiter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List

if TYPE_CHECKING:
    from cpctl.probes.base import Probe, ProbeClass, ProbeOptions

# --probe name -> "module:class", in the order ``auto`` asks them (imported only when used).
PROBES: Dict[str, str] = {
    "api": "cpctl.probes.api:ApiProbe",
    "crictl": "cpctl.probes.crictl:CrictlProbe",
    "health": "cpctl.probes.health:HealthProbe",
}
CHOICES = ("auto",) + tuple(PROBES) + ("none",)


def names() -> List[str]:
    """Every probe's name, in the order ``auto`` asks them."""
    return list(PROBES)


def probe_class(name: str) -> "ProbeClass":
    """The class registered as ``name`` (imported now); ``KeyError`` when there is none."""
    import importlib
    module, _, attr = PROBES[name].partition(":")
    found: ProbeClass = getattr(importlib.import_module(module), attr)
    return found


def build_probes(options: "ProbeOptions") -> List["Probe"]:
    """One instance of every registered probe, made from the run's options, in ``PROBES`` order."""
    return [probe_class(name).from_options(options) for name in PROBES]

"""Human durations for ``--for`` and friends: ``90s``, ``30m``, ``1h30m``, ``2d``."""

from __future__ import annotations

import re

from cpctl.errors import CpctlError, ExitCode

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d{1,6})([smhdw])")
MAX_SECONDS = 366 * 86400


def parse_duration(text: str, option: str = "--for") -> int:
    """Seconds in ``text``; anything else (0, negative, units missing, > 366 days) is refused."""
    cleaned = text.strip().lower()
    pos, total = 0, 0
    for match in _PART.finditer(cleaned):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not cleaned or pos != len(cleaned):
        raise CpctlError("%s %r: not a duration (examples: 90s, 30m, 1h30m, 2d)" % (option, text), ExitCode.USAGE)
    if total <= 0:
        raise CpctlError("%s %r: must be longer than zero" % (option, text), ExitCode.USAGE)
    if total > MAX_SECONDS:
        raise CpctlError("%s %r: longer than 366 days" % (option, text), ExitCode.USAGE)
    return total


def format_duration(seconds: float) -> str:
    """Compact form for tables: 45s, 12m, 3h5m, 2d4h."""
    seconds = int(max(0, seconds))
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if seconds >= size:
            rest = (seconds % size) // subsize
            return "%d%s%s" % (seconds // size, unit, "%d%s" % (rest, sub) if rest else "")
    return "%ds" % seconds

"""Times and durations, one parser and one formatter per kind.

* durations for ``--for``, ``--persist`` and friends: ``90s``, ``30m``, ``1h30m``, ``2d``;
* ``iso``: the UTC seconds timestamp of every record cpctl writes (history, metadata, journal);
* ``iso_millis``: watch's event times; ``stamp``: names of directories made per change;
* ``parse_rfc3339``: Kubernetes timestamps (fractions optional), never raising on garbage.
"""

from __future__ import annotations

import re
import time
from typing import Optional

from cpctl.errors import CpctlError, ExitCode

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = r"(\d{1,6})([smhdw])"     # compiled on first use (re's cache): a status parses no duration
MAX_SECONDS = 366 * 86400


def parse_duration(text: str, option: str = "--for") -> int:
    """Seconds in ``text``; anything else (0, negative, units missing, > 366 days) is refused."""
    cleaned = text.strip().lower()
    pos, total = 0, 0
    for match in re.finditer(_PART, cleaned):
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


ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(ts: Optional[float] = None) -> str:
    """UTC timestamp as RFC 3339 with seconds, the format of every record cpctl writes."""
    return time.strftime(ISO_FORMAT, time.gmtime(time.time() if ts is None else ts))


def parse_iso(text: object) -> float:
    """Epoch seconds of an ``iso`` timestamp; ValueError for anything else (state files are input)."""
    seconds = _utc_seconds(text[:-1] if isinstance(text, str) and text.endswith("Z") else None)
    if seconds is None:
        raise ValueError("not a timestamp: %r" % (text,))
    return float(seconds)


_CIVIL = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\Z")
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _utc_seconds(text: Optional[str]) -> Optional[int]:
    """Epoch seconds of ``YYYY-MM-DDTHH:MM:SS`` read as UTC; None for anything else (a day the month
    does not have included). Plain arithmetic: ``time.strptime`` costs a status ~2 ms of imports."""
    match = _CIVIL.match(text) if text is not None else None
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month - 1] + (leap and month == 2)
            and hour <= 23 and minute <= 59 and second <= 61):
        return None
    # days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return days * 86400 + hour * 3600 + minute * 60 + second


def iso_millis(ts: Optional[float] = None) -> str:
    """UTC timestamp with milliseconds (watch's event lines)."""
    now = time.time() if ts is None else ts
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % int((now % 1) * 1000)


def stamp(ts: Optional[float] = None) -> str:
    """Compact UTC time for directory names (``STATE/strays/20261203T101500Z``)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if ts is None else ts))


def parse_rfc3339(text: Optional[str]) -> Optional[float]:
    """A Kubernetes RFC 3339 time (optional fraction) as epoch seconds; None for None or garbage."""
    if not text or not isinstance(text, str):
        return None
    main, _, frac = text.rstrip("Z").partition(".")
    seconds = _utc_seconds(main)
    if seconds is None:
        return None
    return seconds + (float("0." + frac) if frac.isdigit() else 0.0)


def parse_persist(text: Optional[str]) -> Optional[float]:
    """``--persist``: a duration in seconds, 0 for ``0``/``off``/``no``/``none``, None when not
    given (the keeper's default idle time then applies: ``cpctl.host.keeper.DEFAULT_PERSIST``)."""
    if text is None:
        return None
    if text.strip().lower() in ("", "0", "off", "no", "none"):
        return 0.0
    return float(parse_duration(text, "--persist"))

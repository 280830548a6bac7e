"""timeutil's ISO/RFC 3339 readers: plain arithmetic that must agree with calendar.timegm."""

from __future__ import annotations

import calendar
import random
import time

import pytest

from cpctl.timeutil import iso, parse_iso, parse_rfc3339


def test_parse_iso_agrees_with_timegm() -> None:
    rng = random.Random(38)
    samples = [0, 951782400, 951868799, 1709208000, 4102444800]
    samples += [rng.randrange(-2 ** 31, 2 ** 34) for _ in range(20000)]
    for epoch in samples:
        text = iso(epoch)
        assert parse_iso(text) == calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")) == epoch, text


@pytest.mark.parametrize("text", ["2026-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
                                  "2026-04-31T00:00:00Z", "2026-12-04T24:00:00Z", "2026-12-04T10:60:00Z",
                                  "2026-12-04T10:00:00", "2026-12-04 10:00:00Z", "2026-1-04T10:00:00Z",
                                  "2026-12-04T10:00:00ZZ", "", None, 5])
def test_parse_iso_refuses_what_cpctl_never_writes(text: object) -> None:
    with pytest.raises(ValueError):
        parse_iso(text)


def test_parse_iso_leap_day() -> None:
    assert parse_iso("2024-02-29T12:00:00Z") == calendar.timegm((2024, 2, 29, 12, 0, 0))
    assert parse_iso("2000-02-29T00:00:00Z") == calendar.timegm((2000, 2, 29, 0, 0, 0))


def test_parse_rfc3339() -> None:
    assert parse_rfc3339("2026-12-04T10:00:00.25Z") == calendar.timegm((2026, 12, 4, 10, 0, 0)) + 0.25
    assert parse_rfc3339("2026-12-04T10:00:00Z") == calendar.timegm((2026, 12, 4, 10, 0, 0))
    assert parse_rfc3339("garbage") is None and parse_rfc3339(None) is None and parse_rfc3339("") is None

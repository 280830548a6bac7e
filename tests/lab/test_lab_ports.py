"""CPCTL_LAB_PORTS: labs started side by side (parallel test workers) take ports from disjoint ranges."""

from __future__ import annotations

import socket

import pytest

from cpctl_lab import httpserve


def test_ports_come_from_the_range_until_it_is_used_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserve, "_HANDED_OUT", set())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        low = max(1024, taken - 2)
        monkeypatch.setenv("CPCTL_LAB_PORTS", "%d-%d" % (low, low + 4))
        got = set()
        with pytest.raises(OSError, match="no free port left in CPCTL_LAB_PORTS"):
            for _ in range(6):
                got.add(httpserve.free_port())
    # Every port of the range but the one bound here (and any bound elsewhere), each once.
    assert got <= set(range(low, low + 5)) - {taken} and len(got) >= 1


@pytest.mark.parametrize("spec", ["x", "10-", "100-200", "3000-2000", "60000-70000"])
def test_a_malformed_range_is_refused(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv("CPCTL_LAB_PORTS", spec)
    with pytest.raises(ValueError, match="CPCTL_LAB_PORTS"):
        httpserve.free_port()

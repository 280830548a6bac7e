"""The GIL switch interval while SSH handshakes run: Python's default during any handshake (CPU in
many threads), the fast one of a fan-out again once the last has ended - where an entry point chose
it (``use_handshake_switch``); the library alone never changes the process-wide interval (issue 47)."""

from __future__ import annotations

import sys
import threading
from typing import Iterator

import pytest

from cpctl.host import base, ssh
from cpctl.host.base import FAST_SWITCH, HANDSHAKE_SWITCH
from tests.sshfixture import *  # noqa: F403
from tests.sshfixture import SSHServer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def fast_switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As a fan-out's entry point leaves the process: fast switching, the handshake switch installed."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(FAST_SWITCH)
    monkeypatch.setattr(base, "handshake_guard", base._no_switch)
    base.use_handshake_switch()
    yield
    sys.setswitchinterval(before)


def test_the_library_alone_leaves_the_interval_alone(sshd: SSHServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "handshake_guard", base._no_switch)
    during = []
    real = ssh.paramiko.SSHClient.connect

    def connect(self: object, *args: object, **kwargs: object) -> None:
        during.append(sys.getswitchinterval())
        real(self, *args, **kwargs)    # type: ignore[arg-type]

    before = sys.getswitchinterval()
    monkeypatch.setattr(ssh.paramiko.SSHClient, "connect", connect)
    sshd.connect().close()
    assert during == [before] and sys.getswitchinterval() == before


def test_overlapping_handshakes_keep_the_default_until_the_last_ends(fast_switch: None) -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def second() -> None:
        with ssh.handshaking():
            second_in.set()
            first_out.wait(5)
            seen.append(sys.getswitchinterval())       # the first one ended, this one still runs

    with ssh.handshaking():
        first_in.set()
        thread = threading.Thread(target=second)
        thread.start()
        assert second_in.wait(5)
        assert sys.getswitchinterval() == pytest.approx(HANDSHAKE_SWITCH)
    first_out.set()
    thread.join(5)
    assert seen == [pytest.approx(HANDSHAKE_SWITCH)]
    assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH)


def test_a_failed_handshake_restores_the_interval(fast_switch: None) -> None:
    with pytest.raises(RuntimeError):
        with ssh.handshaking():
            raise RuntimeError("handshake failed")
    assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH)


def test_a_connection_handshakes_at_the_default_interval(sshd: SSHServer, fast_switch: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    during = []
    real = ssh.paramiko.SSHClient.connect

    def connect(self: object, *args: object, **kwargs: object) -> None:
        during.append(sys.getswitchinterval())
        real(self, *args, **kwargs)    # type: ignore[arg-type]

    monkeypatch.setattr(ssh.paramiko.SSHClient, "connect", connect)
    sshd.connect().close()
    assert during == [pytest.approx(HANDSHAKE_SWITCH)]
    assert sys.getswitchinterval() == pytest.approx(FAST_SWITCH)

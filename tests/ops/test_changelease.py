"""The cluster's change lease (issue 32): when a waiting run may take it over."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from cpctl.ops import changelease
from cpctl.ops.changelease import LeaseSeen, Waiting, holder_identity


def test_a_holder_of_this_machine_whose_process_is_gone_is_taken_over_at_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()                                       # a pid that existed and is gone now
    gone = "cpctl root@%s pid %d 0123abcd" % (socket.gethostname(), child.pid)
    assert Waiting().expired_version(LeaseSeen(False, gone, "41")) == "41"


def test_a_live_or_remote_holder_keeps_it_until_it_has_not_changed_for_the_lease_time() -> None:
    waiting = Waiting()
    me = holder_identity()
    assert str(os.getpid()) in me and socket.gethostname() in me
    assert waiting.expired_version(LeaseSeen(False, me, "7")) == ""              # alive: this process
    other = "cpctl ops@another-machine pid 1 0123abcd"
    assert waiting.expired_version(LeaseSeen(False, other, "7")) == ""           # cannot be looked up
    assert waiting.expired_version(LeaseSeen(False, "not cpctl's words", "7")) == ""
    waiting.first_seen -= changelease.LEASE_SECONDS + 1                          # seen unchanged that long
    assert waiting.expired_version(LeaseSeen(False, other, "7")) == "7"
    assert waiting.expired_version(LeaseSeen(False, other, "8")) == ""           # it was renewed: a new clock

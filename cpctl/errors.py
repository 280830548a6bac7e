"""cpctl's error type, its documented exit codes (README "Exit codes" mirrors this table) and the
one mapping from any exception to a code and a line of text."""

from __future__ import annotations

import enum
from typing import NamedTuple

from cpctl.host.ops import LockBusy


class ExitCode(enum.IntEnum):
    OK = 0
    DRIFT = 1          # `cpctl check` found drift (monitoring-plugin style)
    USAGE = 2          # bad command line: unknown option, bad component name, bad --for value
    NOT_FOUND = 3      # component neither in the manifests dir nor parked; pod/node not found
    REFUSED = 4        # a safety rule refused the change (duplicate pod, invalid manifest, symlink, ...)
    LOCKED = 5         # another cpctl run holds the node lock
    TIMEOUT = 6        # the kubelet / component did not reach the wanted state in time
    ENVIRONMENT = 7    # manifests dir or state dir missing, unreadable, unsafe; I/O error
    UNREACHABLE = 8    # a remote host could not be reached or its connection broke
    API = 9            # the Kubernetes API answered with an error or is unreachable
    CONFLICT = 10      # the API refused because of the object's state (e.g. pod already bound)
    INTERNAL = 70      # a bug in cpctl: please report it


class CpctlError(Exception):
    """A failure the user can act on: printed as one line on stderr, exits with ``code``."""

    def __init__(self, message: str, code: ExitCode = ExitCode.ENVIRONMENT, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint


class Failure(NamedTuple):
    """How a failure is reported: its documented exit code, one line of text, an optional hint."""

    code: ExitCode
    message: str
    hint: str = ""


def failure_of(exc: BaseException) -> Failure:
    """The exit code and message for any exception that reaches the top of a command or of a
    host's run in a fan-out: the one place that maps exceptions to documented codes."""
    if isinstance(exc, CpctlError):
        return Failure(exc.code, exc.message, exc.hint)
    if isinstance(exc, LockBusy):
        return Failure(ExitCode.LOCKED, "node locked by %s" % exc.holder, "wait for it, or raise --lock-timeout")
    if isinstance(exc, OSError):
        where = ": %s" % exc.filename if exc.filename else ""
        return Failure(ExitCode.ENVIRONMENT, "%s%s" % (exc.strerror or exc, where))
    return Failure(ExitCode.INTERNAL, "internal error: %s: %s" % (type(exc).__name__, exc))

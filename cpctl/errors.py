"""cpctl's error type, its documented exit codes (README "Exit codes" mirrors this table) and the
one mapping from any exception to a code and a line of text."""

from __future__ import annotations

import enum
from typing import NamedTuple


class ExitCode(enum.IntEnum):
    OK = 0
    DRIFT = 1          # `cpctl check` found drift (monitoring-plugin style); `is-running`: not all run
    USAGE = 2          # bad command line: unknown option, bad component name, bad --for value
    NOT_FOUND = 3      # component neither in the manifests dir nor parked; pod/node not found
    REFUSED = 4        # a safety rule refused the change (duplicate pod, invalid manifest, symlink, ...)
    LOCKED = 5         # another cpctl run holds the node lock
    TIMEOUT = 6        # the kubelet / component did not reach the wanted state in time
    ENVIRONMENT = 7    # manifests dir or state dir missing, unreadable, unsafe; I/O error
    UNREACHABLE = 8    # a remote host could not be reached, its connection broke, or its agent's reply is invalid
    API = 9            # the Kubernetes API answered with an error or is unreachable
    CONFLICT = 10      # the API refused because of the object's state (e.g. pod already bound)
    ROLLED_BACK = 11   # apply/edit/flags/rollback: the new version did not become healthy and was rolled back
    ROLLBACK_FAILED = 12  # ... and the rolled-back version did not become healthy either: act now
    INTERNAL = 70      # a bug in cpctl: please report it
    INTERRUPTED = 130  # SIGINT (Ctrl-C) or SIGTERM: the message says where each component was left


class Terminated(BaseException):
    """SIGTERM arrived (the entry point turns the signal into this): unwinds like Ctrl-C does, so
    every change on the way puts back what it must. A BaseException: no ``except Exception`` eats it."""


class CpctlError(Exception):
    """A failure the user can act on: printed as one line on stderr, exits with ``code``.

    ``where`` says where a change left things when the failure came after it (e.g. "its manifest
    stays parked at ..."): printed after the message, kept apart so a caller that puts things back
    (restart) can say so instead."""

    def __init__(self, message: str, code: ExitCode = ExitCode.ENVIRONMENT, hint: str = "", where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint
        self.where = where

    @property
    def full_message(self) -> str:
        """The message and, when set, where things were left."""
        return "%s; %s" % (self.message, self.where) if self.where else self.message


class Corrupt(CpctlError):
    """A state file cpctl wrote no longer holds what cpctl writes (exit 7): the command that
    replaces the file as a whole (``baseline --accept``) may go on, every reader stops."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.ENVIRONMENT)


class Interrupted(CpctlError):
    """SIGINT or SIGTERM arrived while a command waited; the message says where things were left."""

    def __init__(self, signal: str, message: str, where: str = "") -> None:
        super().__init__(message, ExitCode.INTERRUPTED, where=where)
        self.signal = signal


def interrupted_by(exc: BaseException) -> str:
    """"SIGINT"/"SIGTERM" when ``exc`` is an interruption (raw or reported), else ""."""
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    if isinstance(exc, Terminated):
        return "SIGTERM"
    return exc.signal if isinstance(exc, Interrupted) else ""


class Failure(NamedTuple):
    """How a failure is reported: its documented exit code, one line of text, an optional hint."""

    code: ExitCode
    message: str
    hint: str = ""


def failure_of(exc: BaseException) -> Failure:
    """The exit code and message for any exception that reaches the top of a command or of a
    host's run in a fan-out: the one place that maps exceptions to documented codes."""
    if isinstance(exc, CpctlError):
        return Failure(exc.code, exc.full_message, exc.hint)
    from cpctl.agent.fileops import LockBusy  # here, not at the top: ``cpctl --help`` needs no host code
    if isinstance(exc, LockBusy):
        return Failure(ExitCode.LOCKED, "node locked by %s" % exc.holder, "wait for it, or raise --lock-timeout")
    if isinstance(exc, OSError):
        where = ": %s" % exc.filename if exc.filename else ""
        return Failure(ExitCode.ENVIRONMENT, "%s%s" % (exc.strerror or exc, where))
    return Failure(ExitCode.INTERNAL, "internal error: %s: %s" % (type(exc).__name__, exc))

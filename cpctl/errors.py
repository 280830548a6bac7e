"""cpctl's error type and its documented exit codes (README "Exit codes" mirrors this table)."""

from __future__ import annotations

import enum


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

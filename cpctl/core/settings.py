"""What cpctl acts on, on one node: the global options after validation.

Paths are paths on the node being acted on (over SSH: on the master). Per-host values from an
inventory override the global ones (``with_overrides``). The ``Node`` they open is made in one
place, ``cpctl.ops.wiring.open_node``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from cpctl.core.identity import DEFAULT_KUBELET_DIR, DEFAULT_MANIFESTS_DIR  # noqa: F401 (re-exported)

DEFAULT_STATE_DIR = "/var/lib/cpctl"
DEFAULT_KUBECONFIG = "/etc/kubernetes/admin.conf"


@dataclass(frozen=True)
class Settings:
    """Global options, already validated. ``manifests_dir``/``node_name`` None: as the kubelet says.
    A value: a command that adds its own (``--verify``'s ``canary``) makes a copy with ``with_overrides``."""

    manifests_dir: Optional[str] = None
    state_dir: str = DEFAULT_STATE_DIR
    node_name: Optional[str] = None
    kubeconfig: str = DEFAULT_KUBECONFIG
    probe: str = "auto"
    lock_timeout: float = 10.0
    crictl: str = "crictl"
    canary: bool = False
    kubelet_dir: str = DEFAULT_KUBELET_DIR
    node_root: str = "/"                 # the directory holding the node's / (a lab node's root dir)
    # The global options that reach this node again (``-i INV -H NAME``, ``--ssh-config``, paths given
    # on the command line): every hint naming a cpctl command repeats them (``command_hint``).
    invocation: Tuple[str, ...] = ()

    def with_overrides(self, **overrides: Any) -> "Settings":
        """A copy with these values applied (``None`` values are ignored: not set per host)."""
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None and k in known})


def command_hint(invocation: Sequence[str], *words: str) -> str:
    """The cpctl command line a hint shows: ``cpctl``, the options that reach the node the hint is
    about (``-H m1``, ``-i inv.yaml -H m1``, ``--state-dir ...``: ``Settings.invocation``), then
    ``words``, each quoted for a POSIX shell: pasted, it runs against that node, not this machine.
    The one way a hint names a cpctl command (``Node.command`` for a node's)."""
    return " ".join(["cpctl"] + [_quoted(word) for word in list(invocation) + list(words)])


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def _quoted(word: str) -> str:
    """``word`` for a POSIX shell, as ``shlex.quote`` writes it (not imported: a ``status`` with a
    pending confirmation names a command, and its start-up imports stay small)."""
    if word and all(c in _SAFE for c in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def command_hint_here(*words: str) -> str:
    """``command_hint`` for this machine as the run was started on it (no ``-H``/``-i``)."""
    return command_hint((), *words)

"""A ``Node`` with the features that follow its changes attached: the one place they are wired.

The core calls its change listeners after every recorded change and knows nothing about who they
are; here the drift baseline subscribes, so that a stop or start cpctl made is not drift.
"""

from __future__ import annotations

from typing import Callable, Optional

from cpctl.core.journal import Change
from cpctl.core.node import Node
from cpctl.core.settings import Settings
from cpctl.core.settings import open_node as open_core_node
from cpctl.host.base import Host


def open_node(settings: Settings, host: Host, probe: Optional[str] = None,
              log: Optional[Callable[[str], None]] = None,
              progress: Optional[Callable[[str], None]] = None) -> Node:
    """The node on ``host`` as every command uses it: waiter configured, listeners attached."""
    node = open_core_node(settings, host, probe=probe, log=log, progress=progress)
    node.listeners.append(baseline_listener(node))
    return node


def baseline_listener(node: Node) -> Callable[[Change, bool], None]:
    """Keep the drift baseline current after each change cpctl made (imported lazily: only
    changes pay for difflib)."""
    def note(change: Change, recovered: bool) -> None:
        from cpctl.ops import drift
        drift.note_change(node, change.action, change.file, change.checksum)
    return note

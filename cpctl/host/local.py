"""``LocalHost``: this machine, the node primitives of :mod:`cpctl.agent` run in-process."""

from __future__ import annotations

from typing import Any

from cpctl.agent import etcdio, rpc, txn
from cpctl.host.base import Host

#: The modules whose ops add themselves to ``rpc.OPS`` when they run (on a master, sent when needed).
_SELF_REGISTERING = (etcdio, txn)


class LocalHost(Host):
    """This machine: the primitives run in-process."""

    def _call(self, op: str, **args: object) -> Any:
        return rpc.OPS[op](**args)

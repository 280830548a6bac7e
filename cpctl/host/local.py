"""``LocalHost``: this machine, the node primitives of :mod:`cpctl.agent` run in-process."""

from __future__ import annotations

from typing import Any

from cpctl.agent import rpc
from cpctl.host.base import Host


class LocalHost(Host):
    """This machine: the primitives run in-process."""

    def _call(self, op: str, **args: object) -> Any:
        return rpc.OPS[op](**args)

"""Shared fixtures: a kubeadm-like node in a temp dir, the lab simulator and real OpenSSH servers.

* ``node``: a fresh ``NodeDirs`` (manifests dir with the four kubeadm manifests, no state yet);
* ``mock_node``: a core ``Node`` on a ``MockHost`` over the same kind of dirs, for in-process tests
  with injected failures (no subprocess: milliseconds per test);
* ``lab``/``lab3`` (tests.labfixture) and ``sshd``/``sshd_many``/... (tests.sshfixture).

Marker ``end_to_end``: tests that drive a whole system (real systemd in a container, a whole lab
walkthrough); ``pytest -m "not end_to_end"`` leaves them out.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.coreutil import NODE, NodeDirs

pytest_plugins = ["tests.labfixture", "tests.sshfixture"]


@pytest.fixture
def node(tmp_path: Any) -> NodeDirs:
    """A fresh node: the four kubeadm manifests in ``tmp_path/manifests``, state in ``tmp_path/state``."""
    return NodeDirs(str(tmp_path))


@pytest.fixture
def mock_node(node: NodeDirs) -> Any:
    """A core ``Node`` on a ``MockHost`` (``.host``) over ``node``'s dirs, no probe."""
    from cpctl.core.node import Node
    from cpctl.host.mock import MockHost
    return Node(MockHost(), node.manifests, node.state, NODE, lock_timeout=0.5)


def _confine_lab_ports_to_this_worker() -> None:
    """Under pytest-xdist, give each worker its own slice of lab ports (``CPCTL_LAB_PORTS``).

    A lab picks its ports before it binds them, and a parked kube-apiserver leaves its port
    unbound for a while: a second worker's lab could take it meanwhile. Disjoint ranges rule
    that out; every lab and sshd a worker starts inherits the variable.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return
    index = int(worker[2:])
    span = (32000 - 10000) // count
    low = 10000 + index * span
    os.environ["CPCTL_LAB_PORTS"] = "%d-%d" % (low, low + span - 1)


_confine_lab_ports_to_this_worker()

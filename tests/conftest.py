"""Shared fixtures: a kubeadm-like node in a temp dir, the lab simulator and real OpenSSH servers.

* ``node``: a fresh ``NodeDirs`` (manifests dir with the four kubeadm manifests, no state yet);
* ``mock_node``: a core ``Node`` on a ``MockHost`` over the same kind of dirs, for in-process tests
  with injected failures (no subprocess: milliseconds per test);
* ``lab``/``lab3`` (tests.labfixture) and ``sshd``/``sshd_many``/... (tests.sshfixture).

Marker ``end_to_end``: tests that drive a whole system (real systemd in a container, a whole lab
walkthrough); ``pytest -m "not end_to_end"`` leaves them out.
"""

from __future__ import annotations

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

"""Shared fixtures: a kubeadm-like node in a temp dir, the lab simulator and real OpenSSH servers.

* ``node``: a fresh ``NodeDirs`` (manifests dir with the four kubeadm manifests, no state yet);
* ``mock_node``: a core ``Node`` on a ``MockHost`` over the same kind of dirs, for in-process tests
  with injected failures (no subprocess: milliseconds per test);
* ``lab``/``lab3`` (tests.labfixture) and ``sshd``/``sshd_many``/... (tests.sshfixture).

Tiers (markers, see pyproject.toml): ``unit`` (no lab, no sshd, no container: ``pytest -m unit``
is the fast suite), ``lab`` (a lab or a real sshd on 127.0.0.1) and ``end_to_end`` (a whole system:
real systemd in a container, a whole walkthrough). ``unit`` and ``lab`` are set here from the
fixtures a test uses; ``slow`` marks the few unit tests that take seconds (kill-point sweeps) and
leaves them out of the fast tier.
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

#: Fixtures that start a lab, an sshd or sudo users: a test that uses one (directly or through
#: another fixture) is in the ``lab`` tier.
LAB_FIXTURES = frozenset({"lab", "lab3", "lab_factory", "sshd", "sshd_many", "sshd_factory", "ssh_session",
                          "sudo_users", "keeper_dir"})


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    """Mark each test's tier: ``end_to_end`` as declared, else ``lab`` or ``unit`` by its fixtures."""
    for item in items:
        if item.get_closest_marker("end_to_end"):
            continue
        uses = set(getattr(item, "fixturenames", ()))
        item.add_marker(pytest.mark.lab if uses & LAB_FIXTURES or item.get_closest_marker("lab")
                        else pytest.mark.unit)

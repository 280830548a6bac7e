"""--with-file over SSH (issue #24 item 3): the local file is read once on the operator's side and goes
to every master through three real sshd, mounted by ``--mount``, written by each master's journaled
change and checked there (checksum) -- identical bytes everywhere."""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import hashlib
import os
from typing import Any, Iterator, List

import pytest

from tests.fleet.test_remote_fleet import Fleet, _statuses
from tests.labfixture import lab3  # noqa: F401
from tests.remoteutil import read_history
from tests.sshfixture import SSHServer, sshd_many  # noqa: F401

pytestmark = pytest.mark.timeout(300)
LABELS = "/etc/kubernetes/metrics/allow-labels.yaml"


@pytest.fixture
def fleet(sshd_many: List[SSHServer], lab3: Any, tmp_path: Any) -> Iterator[Fleet]:
    yield Fleet(sshd_many, lab3, str(tmp_path))


def test_the_same_companion_file_goes_to_every_master(fleet: Fleet, tmp_path: Any) -> None:
    local = tmp_path / "allow-labels.yaml"
    content = b'"apiserver_request_total,code": "200,404,500"\n'
    local.write_bytes(content)
    doc = fleet.json("flags", "scheduler", "--set", "allow-metric-labels-manifest=" + LABELS, "--mount",
                     "--with-file", "%s=%s" % (LABELS, local), "--timeout", "30", "--settle", "1")
    assert _statuses(doc) == [("master1", "changed"), ("master2", "changed"), ("master3", "changed")]
    for i in (1, 2, 3):
        on_node = os.path.join(str(fleet.lab.root_dir(i)), LABELS.lstrip("/"))
        with open(on_node, "rb") as handle:
            assert handle.read() == content
        assert os.stat(on_node).st_mode & 0o777 == 0o600
        [record] = read_history(fleet.state(i))
        assert record["companions"] == [{"path": on_node, "source": str(local),
                                         "checksum": hashlib.sha256(content).hexdigest(), "size": len(content)}]
        with open(os.path.join(fleet.manifests(i), "kube-scheduler.yaml"), "rb") as handle:
            manifest = handle.read()
        assert ("--allow-metric-labels-manifest=" + LABELS).encode() in manifest
        assert ("path: " + LABELS).encode() in manifest and b"readOnly: true" in manifest   # a node path

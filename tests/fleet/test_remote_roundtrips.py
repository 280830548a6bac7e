"""How many SSH round trips a remote run makes (issue 47), counted by the run itself
(``CPCTL_TRACE_ROUNDTRIPS``: every request written to an agent, a ``batch`` of reads is one), against
a three-master lab behind a real sshd (three: a change of the API server keeps a quorum serving):

* ``status`` of one master: one batch of file reads, then one ``http_many`` of every HTTP request its
  probes make from the node (the local API check, the pods list, etcd's member list with its alarms:
  ``Host.http_ahead``);
* the review flow, ``-H m1 flags kube-apiserver --set ... --keep-in kubeadm-config --confirm-within``:
  its round trips apart from the waits' polls (HTTP from the node, crictl) and the reads of the
  kubeconfig each new API client makes (how many depends on how fast the kubelet is, not on cpctl),
  which the agent's one-call transaction (issue 47's other half) cuts further.

Counts, not times: the bounds are what this code makes; a change that adds round trips fails here.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from tests.labfixture import lab3  # noqa: F401
from tests.remoteutil import Cli, clean_env, lab_vars, write_inventory
from tests.sshfixture import SSHServer, sshd  # noqa: F401

pytestmark = pytest.mark.timeout(400)

#: status: one batch of reads, then HTTP from the node in one ``http_many``: the API server's /healthz (is
#: the kubelet's API this node's own), the node's pods (one list), etcd's member list and alarms; 4 before
#: ``Host.http_ahead`` (each of those asked when its probe came to it)
STATUS_TRIPS = 2
#: the review flow on a fresh lab (its state dirs made by it), apart from the polls and the kubeconfig reads;
#: 304 before issue 47's cut (and status 11: a read after each HTTP request asked again)
REVIEW_TRIPS = 147
POLLS = ("http", "http_many", "run")


def _trace(path: str) -> Dict[str, Any]:
    with open(path) as handle:
        report: Dict[str, Any] = json.load(handle)
    os.unlink(path)
    return report


def test_status_and_the_review_flow_count_their_round_trips(sshd: SSHServer, lab3: Any, tmp_path: Any) -> None:
    trace = str(tmp_path / "trips.json")
    cli = Cli(sshd.ssh_config, sshd.known_hosts, clean_env(str(tmp_path / "home"), CPCTL_TRACE_ROUNDTRIPS=trace))
    inv = write_inventory(str(tmp_path / "inv.yaml"), {
        "m%d" % n: dict(host="master", **lab_vars(lab3, n)) for n in (1, 2, 3)})

    cli.run("-i", inv, "-H", "m1", "status")
    status = _trace(trace)
    assert status["total"] <= STATUS_TRIPS and status["ops"]["batch"] == 1, status
    assert set(status["ops"]) <= {"batch", "http_many"}, status      # every file read in the one batch, all HTTP in one

    cli.run("-i", inv, "-H", "m1", "flags", "kube-apiserver", "--set", "audit-log-maxage=11", "--keep-in",
            "kubeadm-config", "--confirm-within", "5m", "--timeout", "120", "--settle", "1")
    review = _trace(trace)
    kubeconfig = "read_file " + lab3.kubeconfig            # an API client made: as many as the waits make
    apart = review["total"] - sum(review["ops"].get(op, 0) for op in POLLS) - review["calls"].count(kubeconfig)
    assert apart <= REVIEW_TRIPS, (apart, review["ops"], review["calls"])
    assert review["ops"]["lock"] == 2, review["ops"]       # the change's session, then the arm's (one each)
    cli.run("-i", inv, "-H", "m1", "confirm", "kube-apiserver")

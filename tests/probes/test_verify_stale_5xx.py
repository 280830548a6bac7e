"""A 5xx from the node's own API counts as a stale view (issue #21, item 3).

HA lab (``ha``: local-mode kubelets, stacked etcd): master2's etcd crash-loops after a hand edit, so
master2's API server runs but answers 5xx (its --etcd-servers names only its own etcd), its kubelet
cannot update the mirror pods, and the other API servers keep serving the frozen ones. ``stop
scheduler`` on master2 must see the scheduler go through crictl instead of waiting on "still
present (api)" until its timeout.
"""

# ruff: noqa: F811  (pytest fixtures are imported by name and then used as parameters)
from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.labfixture import lab_factory, mirror, run_cpctl, wait_for  # noqa: F401

pytestmark = pytest.mark.end_to_end


def _answers_5xx(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/healthz", timeout=2)
    except urllib.error.HTTPError as exc:
        return exc.code >= 500
    except OSError:
        return False
    return False


def test_stop_sees_the_pod_go_when_the_local_api_answers_5xx(lab_factory: Any) -> None:
    lab = lab_factory(profile="ha")
    env = lab.env_for(2)
    path = lab.manifests_dir(2) / "etcd.yaml"
    text = path.read_text()
    broken = path.parent / ".etcd.yaml.tmp"
    broken.write_text(text.replace("- etcd\n", "- etcd\n    - --no-such-flag=1\n", 1))
    broken.rename(path)
    wait_for(lambda: _answers_5xx(lab.api_url_for(2)), 20, "master2's own API server answering 5xx")
    stop = run_cpctl(env, "stop", "scheduler", "--timeout", "20")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "gone (crictl)" in stop.stdout, stop.stdout
    assert mirror(lab, "kube-scheduler", 2) is not None, "the other API servers still serve the frozen mirror"

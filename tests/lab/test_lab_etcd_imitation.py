"""The lab's Python imitation of etcd (``CPCTL_LAB_ETCD=none``, the fallback where no binary installs)
is never kinder than a real member: the same scenario on both, the same answers.

The scenario: kubeadm 1.30's etcd probes (liveness ``/health?exclude=NOSPACE&serializable=true``,
startup ``/health?serializable=false``) on master 1 of three, with all three members, then with the
members of masters 2 and 3 stopped (their manifests moved away). The real etcd 3.5 checks for a
leader before anything else, whatever ``serializable`` says: without one every ``/health`` query
answers 503 ``{"health":"false","reason":"RAFT NO LEADER"}`` (real-node-facts.md "etcd, measured on
the real binaries"; etcd's ``etcdhttp/metrics.go``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest

from cpctl_lab import etcdbin
from tests.lab.test_lab_profiles import manifest, probe_url
from tests.lab.test_lab_realetcd import real_etcd  # noqa: F401 - the fixture
from tests.labfixture import wait_for

pytestmark = pytest.mark.timeout(600)

QUERIES = ("/health", "/health?serializable=true", "/health?exclude=NOSPACE&serializable=true",
           "/health?serializable=false", "/health?exclude=NOSPACE")
NO_LEADER = (503, {"health": "false", "reason": "RAFT NO LEADER"})
Answers = Dict[str, Tuple[int, Any]]


def _get(url: str) -> Tuple[int, Any]:
    """(HTTP status, the JSON body) of GET ``url``."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def _scenario(start: Callable[..., Any], tmp_path: Path, name: str, binary: str) -> Tuple[Answers, Answers]:
    """Master 1's answers to QUERIES with three members, then once two are stopped and it has no leader."""
    lab = start(name=name, profile="kubeadm-1.30", masters=3, etcd_binary=binary)
    try:
        live = probe_url(manifest(lab, "etcd", 1), "livenessProbe")
        base = live.split("/health", 1)[0]
        healthy = {query: _get(base + query) for query in QUERIES}
        others = [probe_url(manifest(lab, "etcd", master), "livenessProbe") for master in (2, 3)]
        for master in (2, 3):        # the kubelets see the manifests go: those members stop
            (lab.manifests_dir(master) / "etcd.yaml").rename(tmp_path / f"{name}-etcd{master}.yaml")
        # both gone first: between the two stops, members 1 and 3 elect a leader again, and a /health
        # asked during that election is a passing "no leader" (seen on a busy machine)
        for url in others:
            wait_for(lambda url=url: _down(url), 120, f"{name}: {url} stopped")
        # the same wait on both: until the plain /health says it (the imitation always said this one)
        wait_for(lambda: _no_leader(_get(base + "/health")), 120, f"{name}: master 1's etcd without a leader")
        return healthy, {query: _get(base + query) for query in QUERIES}
    finally:
        lab.stop()


def _down(url: str) -> bool:
    """Nothing answers ``url`` any more (the member's process is gone)."""
    try:
        _get(url)
    except urllib.error.HTTPError:
        return False
    except (OSError, ValueError):
        return True
    return False


def _no_leader(answer: Tuple[int, Any]) -> bool:
    """503 RAFT NO LEADER (etcd 3.4 writes no reason)."""
    code, body = answer
    return code == 503 and body.get("health") == "false" and body.get("reason", NO_LEADER[1]["reason"]) == \
        NO_LEADER[1]["reason"]


def _comparable(answers: Answers, with_reason: bool) -> Answers:
    """The answers as both can give them: etcd 3.4 writes no ``reason``."""
    return {q: (code, body if with_reason else {k: v for k, v in body.items() if k != "reason"})
            for q, (code, body) in answers.items()}


def test_the_imitation_answers_health_as_etcd_3_5_was_measured(lab_factory: Callable[..., Any],
                                                              tmp_path: Path) -> None:
    """The imitation alone (runs where no real etcd installs), against the measured answers."""
    healthy, alone = _scenario(lab_factory, tmp_path, "imitation", "none")
    assert all(answer == (200, {"health": "true", "reason": ""}) for answer in healthy.values()), healthy
    assert all(answer == NO_LEADER for answer in alone.values()), alone       # never 200 without a leader


def test_the_imitation_answers_health_as_the_real_etcd_does(real_etcd: etcdbin.EtcdInstall,  # noqa: F811
                                                              lab_factory: Callable[..., Any], tmp_path: Path) -> None:
    """The same scenario on the real etcd and on the imitation: the same answers."""
    real_healthy, real_alone = _scenario(lab_factory, tmp_path, "real", real_etcd.etcd)
    fake_healthy, fake_alone = _scenario(lab_factory, tmp_path, "imitation", "none")
    assert all(answer[0] == 200 for answer in real_healthy.values()), real_healthy
    assert all(answer[0] == 503 for answer in real_alone.values()), real_alone      # the real one: never 200
    with_reason = real_etcd.major_minor >= (3, 5)
    assert _comparable(fake_healthy, with_reason) == _comparable(real_healthy, with_reason)
    assert _comparable(fake_alone, with_reason) == _comparable(real_alone, with_reason)

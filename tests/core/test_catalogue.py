"""One catalogue of kubeadm component facts (cpctl/catalogue.py): nothing else in the product
defines a component's name, alias, port or rule, and the catalogue agrees with kubeadm."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import List

from cpctl import catalogue
from tests.coreutil import MANIFESTS

ROOT = Path(__file__).resolve().parents[2] / "cpctl"
#: The words and numbers that are component facts: they may appear only in the catalogue. (The
#: alias "scheduler" is left out: it is also the name of cpctl's own command and a JSON field.)
FACT_WORDS = {c.name for c in catalogue.COMPONENTS} | {catalogue.DEFAULT_SCHEDULER_NAME} \
    | {c.alias for c in catalogue.COMPONENTS if c.alias != "scheduler"}
FACT_NUMBERS = set(catalogue.WELL_KNOWN_PORTS)


def _docstrings(tree: ast.AST) -> set:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def facts_outside_the_catalogue() -> List[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "catalogue.py" and path.parent == ROOT:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in docs:
                continue
            value = node.value
            if (isinstance(value, str) and value in FACT_WORDS) or \
                    (isinstance(value, int) and not isinstance(value, bool) and value in FACT_NUMBERS):
                found.append("%s:%d: %r" % (path.relative_to(ROOT.parent), node.lineno, value))
    return found


def test_no_component_fact_is_defined_outside_the_catalogue() -> None:
    assert facts_outside_the_catalogue() == []


def test_the_scan_finds_a_fact_written_elsewhere(tmp_path, monkeypatch) -> None:
    """The guard itself works: a module that spells out a component's port is reported."""
    package = tmp_path / "cpctl"
    package.mkdir()
    (package / "catalogue.py").write_text("X = 6443\n")
    (package / "probe.py").write_text('"""Doc: kube-scheduler."""\nPORT = 10259\nNAME = "kube-scheduler"\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", package)
    assert facts_outside_the_catalogue() == ["cpctl/probe.py:2: 10259", "cpctl/probe.py:3: 'kube-scheduler'"]


def test_catalogue_matches_kubeadm_manifests() -> None:
    """Names, order and one entry per kubeadm manifest."""
    assert sorted(c.name + ".yaml" for c in catalogue.COMPONENTS) == sorted(MANIFESTS)
    assert catalogue.START_ORDER == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    assert catalogue.canonical("scheduler") == "kube-scheduler" and catalogue.canonical("my-pod") == "my-pod"
    assert [c.name for c in catalogue.COMPONENTS if c.carries_api] == ["etcd", "kube-apiserver"]
    assert [c.name for c in catalogue.COMPONENTS if c.leader_elected] == ["kube-controller-manager",
                                                                         "kube-scheduler"]
    assert [c.name for c in catalogue.COMPONENTS if c.quorum_rule] == ["etcd", "kube-apiserver"]

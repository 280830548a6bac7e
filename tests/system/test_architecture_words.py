"""Issue 20 item 3: one meaning per word, as the glossary of docs/architecture.md says.

``pod_name`` meant the manifest's ``metadata.name`` (``Manifest.pod_name``) and the mirror pod's
``<name>-<node>`` (``PodTarget.pod_name``): the latter is now ``PodTarget.mirror_name``. There was
a second public ``open_node`` in ``core/settings.py`` that silently left out the drift listener:
there is one, ``ops/wiring.open_node``. ``Node.stop`` and ``Node.start`` took their parameters in
different orders: the same keywords now, in the same order.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from cpctl.core import settings
from cpctl.core.node import Node
from cpctl.ops import wiring
from cpctl.probes.base import PodTarget

ROOT = Path(__file__).resolve().parents[2]


def test_the_mirror_pod_name_has_its_own_word() -> None:
    target = PodTarget("kube-scheduler", "kube-system", "CP-1")
    assert target.mirror_name == "kube-scheduler-cp-1"
    assert not hasattr(target, "pod_name")
    glossary = (ROOT / "docs" / "architecture.md").read_text()
    assert "`PodTarget.mirror_name`" in glossary and "`PodTarget.pod_name`" not in glossary


def test_one_open_node() -> None:
    assert not hasattr(settings, "open_node")
    assert callable(wiring.open_node)
    defined = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "cpctl").rglob("*.py"))
               if "\ndef open_node(" in path.read_text()]
    assert defined == ["cpctl/ops/wiring.py"]


def test_stop_and_start_take_the_same_keywords_in_the_same_order() -> None:
    def keywords(method: object) -> list:
        params = list(inspect.signature(method).parameters.values())   # type: ignore[arg-type]
        assert [p.name for p in params[:2]] == ["self", "wanted"]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:])
        return [p.name for p in params[2:]]
    assert keywords(Node.stop) == ["reason", "until", "wait", "timeout"]
    # a start may bring a new etcd member on purpose (issue 45): its one keyword more comes last
    assert keywords(Node.start) == ["reason", "wait", "timeout", "new_member"]

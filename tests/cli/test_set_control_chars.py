"""Issue 49: a ``flags --set`` value with a control or format character (a newline that would add a
manifest line or fake an output row, an ESC sequence, a U+202E bidi override that shows a value
reversed) is refused before anything changes: exit 2, one line, the manifest and history untouched."""

from __future__ import annotations

import os
from typing import Any

import pytest

from cpctl.cli.main import run
from tests.coreutil import NODE, NodeDirs


@pytest.mark.parametrize("value", ["1\n    - --anonymous-auth=true", "\x1b[2J4", "abc\u202edef", "4\r", "a\tb",
                                   "x\u200by", "\x00"])
def test_a_set_value_with_a_control_character_is_refused_before_the_change(capsys: Any, node: NodeDirs,
                                                                           value: str) -> None:
    path = os.path.join(node.manifests, "kube-scheduler.yaml")
    with open(path, "rb") as handle:
        before = handle.read()
    for extra in ([], ["--dry-run"]):
        rc = run(["--manifests-dir", node.manifests, "--state-dir", node.state, "--probe", "none", "--node-name", NODE,
                  "flags", "scheduler", "--set", "v=" + value, *extra])
        out, err = capsys.readouterr()
        assert rc == 2, (value, out, err)
        assert "--set v: the value holds a control or format character (U+%04X" % ord(
            next(c for c in value if not c.isprintable())) in err, err
        assert "refused, nothing changed" in err and len(err.strip().splitlines()) == 1, err
        assert "\x1b" not in err and "\u202e" not in err, err
    with open(path, "rb") as handle:
        assert handle.read() == before
    assert not os.path.exists(os.path.join(node.state, "history.jsonl"))


def test_a_plain_value_is_accepted(capsys: Any, node: NodeDirs) -> None:
    rc = run(["--manifests-dir", node.manifests, "--state-dir", node.state, "--probe", "none", "--node-name", NODE,
              "flags", "scheduler", "--set", "v=4", "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0, err

"""The agent ships without its typing (``host.agentcut``): annotations, typing imports, TypedDicts and
aliases are mypy's alone; the program a master compiles has none of them and runs as the source does."""

import ast
import subprocess
import sys

import pytest

from cpctl.host import agent as host_module
from cpctl.host import agentcut

TYPED = b'''"""A module typed as the agent's are."""

import os
from typing import Dict, List, Optional, TypedDict

Names = List[str]


class Reply(TypedDict):
    ok: bool
    names: Names


def names(path: str,   # a comment stays
          limit: int = 3, *extra: str, prefix: Optional[str] = None, **rest: Dict[str, int]) -> Reply:
    found: Names = sorted(n for n in os.listdir(path) if not prefix or n.startswith(prefix))[:limit]
    return {"ok": True, "names": found + list(extra)}


class Box:
    def __init__(self, value: "Dict[str, \xc3\xa9]") -> None:
        self.value: Dict[str, int] = dict(value)
'''


def test_the_cut_takes_out_the_typing_alone(tmp_path) -> None:
    text = agentcut.untyped("sample", TYPED, set())
    assert "typing" not in text and "TypedDict" not in text and "Names" not in text and "->" not in text
    assert "def names(path,   # a comment stays\n          limit=3, *extra, prefix=None, **rest):" in text
    assert "    found = sorted(" in text and "self.value = dict(value)" in text and "import os" in text
    tree = ast.parse(text)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)]
    (tmp_path / "b").write_text("")
    (tmp_path / "a").write_text("")
    program = text + "\nprint(names(%r, 5, 'x', prefix='a'), Box({'k': 1}).value)\n" % str(tmp_path)
    run = subprocess.run([sys.executable, "-S", "-c", "import sys\n" + program + "\nprint('typing' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["{'ok': True, 'names': ['a', 'x']} {'k': 1}", "False"]


@pytest.mark.parametrize("source, said", [
    (b"from typing import cast\n\ndef f(x: object) -> int:\n    return cast(int, x)\n", "cast, which exists"),
    (b"from typing import Dict\n\ndef f() -> None:\n    x: Dict[str, int]\n", "bare annotation"),
    (b"import typing\n\ndef f(x: typing.Any) -> None:\n    pass\n", "an import of typing"),
    (b"from typing import TypedDict\n\nclass R(TypedDict):\n    a: int\n\nR2 = R\nisinstance(1, R2)\n", "R2, which"),
])
def test_typing_the_master_would_need_is_refused(source: bytes, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        agentcut.untyped("sample", source, set())


def test_the_shipped_agent_has_no_typing_left() -> None:
    """Every module of the agent, as shipped: compiled without a typing import, no annotation left."""
    program = host_module.agent_source().decode()
    tree = ast.parse(program)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
                or (isinstance(n, ast.arg) and n.annotation is not None)]
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                and "typing" in ([a.name for a in n.names] + [getattr(n, "module", "") or ""])]
    compile(program, "cpctl-agent", "exec")

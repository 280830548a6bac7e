"""The agent ships without its typing (``host.agentcut``): annotations, typing imports, TypedDicts and
aliases are mypy's alone; the program a master compiles has none of them and runs as the source does."""

import ast
import io
import re
import subprocess
import sys
from pathlib import Path
from typing import List

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


# --- the agent is held to mypy --strict (issue 47): pyproject's override, checked against mypy's own --strict ---

ROOT = Path(__file__).resolve().parents[2]
#: Beyond --strict: no explicit Any in the agent (Any only for arbitrary JSON, and json.loads gives it)
BEYOND_STRICT = {"disallow_any_explicit": True}


def _agent_modules() -> List[str]:
    return ["cpctl.agent"] + ["cpctl.agent." + name for name in host_module.AGENT_MODULES]


def test_every_agent_module_is_checked_as_mypy_strict_checks_it(tmp_path) -> None:
    """What ``mypy --strict`` sets (asked of mypy itself, so a flag a new mypy adds to it counts) is what
    pyproject's configuration gives every module of the agent, and no explicit Any: `.ci/run`'s one
    ``mypy cpctl cpctl_lab`` then fails when the agent loses strictness - or when this config does."""
    from mypy.config_parser import parse_config_file
    from mypy.main import process_options
    from mypy.options import PER_MODULE_OPTIONS, Options
    empty = tmp_path / "empty.ini"
    empty.write_text("[mypy]\n")
    _, strict = process_options(["--strict", "--config-file", str(empty), "-c", "pass"])
    plain = Options()
    names = set(PER_MODULE_OPTIONS) | {"warn_redundant_casts", "warn_unused_configs"}
    wanted = {k: getattr(strict, k) for k in sorted(names) if getattr(strict, k) != getattr(plain, k)}
    assert {"disallow_untyped_defs", "disallow_any_generics", "warn_return_any"} <= set(wanted), wanted
    wanted.pop("warn_unused_configs", None)   # about the config file itself, not the code checked
    wanted.update(BEYOND_STRICT)
    configured = Options()
    parse_config_file(configured, lambda: None, str(ROOT / "pyproject.toml"), io.StringIO(), io.StringIO())
    for module in _agent_modules():
        effective = configured.clone_for_module(module)
        loose = {k: getattr(effective, k) for k in wanted if getattr(effective, k) != wanted[k]}
        assert not loose, "%s is not checked as mypy --strict checks it: %s" % (module, loose)


def test_no_agent_type_ignore_without_its_code_and_why() -> None:
    """A ``# type: ignore`` in the agent names the error it silences and says why."""
    ignore = re.compile(r"#\s*type:\s*ignore(?P<rest>.*)$")
    wrong = []
    for name in host_module.AGENT_MODULES:
        path = ROOT / "cpctl" / "agent" / (name + ".py")
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = ignore.search(line)
            if found and not re.match(r"\[[a-z-]+(, *[a-z-]+)*\]\s+#\s*\S", found.group("rest")):
                wrong.append("%s:%d %s" % (path.name, number, line.strip()))
    assert not wrong, wrong


def test_the_agent_keeps_to_python_3_8() -> None:
    """The masters run python3 >= 3.8: every agent module, and the program shipped, parse as 3.8 does."""
    for name in host_module.AGENT_MODULES:
        ast.parse((ROOT / "cpctl" / "agent" / (name + ".py")).read_text(), name, feature_version=(3, 8))
    ast.parse(host_module.agent_source().decode(), "cpctl-agent", feature_version=(3, 8))


def test_an_import_of_cpctl_inside_a_function_is_refused() -> None:
    """A master has no cpctl to import: a sibling imported inside a function (not cut out with the
    top-level ones) would fail there at run time, so assembling refuses it, as it did before the cut."""
    from cpctl.host.agentcut import untyped
    source = b"def f():\n    from cpctl.agent.fileops import run\n    return run\n"
    with pytest.raises(ValueError, match="not an earlier sibling"):
        untyped("noderevert", source, {"fileops"})
    with pytest.raises(ValueError, match="imports cpctl as a module"):
        untyped("noderevert", b"def f():\n    import cpctl.agent\n", {"fileops"})

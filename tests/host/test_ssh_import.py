"""cpctl.host.ssh keeps invoke (paramiko's optional ``Match exec`` helper) out of its import; only the
direct connection imports paramiko, never a run through the keeper (issue 38)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, Tuple

import pytest


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_skips_invoke_and_leaves_it_importable():
    pytest.importorskip("invoke")
    out = _run("""
        import sys
        import cpctl.host.ssh
        print("invoke" in sys.modules)
        import invoke                      # not poisoned for later importers
        print(invoke.__name__)
    """)
    assert out.splitlines() == ["False", "invoke"]


def test_match_exec_config_still_works(tmp_path):
    pytest.importorskip("invoke")
    config = tmp_path / "ssh_config"
    config.write_text('Match host master exec "true"\n  Port 2222\nHost other\n  Port 2223\n')
    out = _run("""
        import sys
        from cpctl.host.ssh import load_ssh_config
        config = load_ssh_config(%r)
        print(config.lookup("master").get("port"), config.lookup("other").get("port"))
    """ % str(config))
    assert out == "2222 2223"


def test_config_without_match_exec_does_not_load_invoke(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host master\n  Port 2222\n  # exec in a comment is harmless\n")
    out = _run("""
        import sys
        from cpctl.host.ssh import load_ssh_config
        print(load_ssh_config(%r).lookup("master").get("port"), "invoke" in sys.modules)
    """ % str(config))
    assert out == "2222 False"


# --- issue 38: a run through the keeper never imports paramiko ------------------------------

_CPCTL = Path(__file__).resolve().parents[2] / "cpctl"


def _paramiko_imports() -> List[Tuple[str, int, str, bool]]:
    """Every import of paramiko or cpctl.host.ssh in cpctl: (file, line, enclosing function or
    "", under ``if TYPE_CHECKING``)."""
    found = []
    for path in sorted(_CPCTL.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
            else:
                continue
            if not any(name == "paramiko" or name.startswith("paramiko.") or name == "cpctl.host.ssh"
                       for name in names):
                continue
            function, typing_only, up = "", False, parents.get(node)
            while up is not None:
                if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) and not function:
                    function = up.name
                if isinstance(up, ast.If) and ast.unparse(up.test) == "TYPE_CHECKING":
                    typing_only = True
                up = parents.get(up)
            found.append((str(path.relative_to(_CPCTL.parent)), node.lineno, function, typing_only))
    return found


def test_only_the_direct_path_imports_paramiko():
    """Structural: paramiko is imported by cpctl.host.ssh (the direct connection, through
    sshconfig's invoke-free import) and, lazily, by the keeper process and by
    ``connect.open_host`` after its keeper branch returned; no module a run through the keeper
    loads imports it."""
    imports = _paramiko_imports()
    assert {item[0] for item in imports} == {"cpctl/host/ssh.py", "cpctl/host/keeperd.py", "cpctl/host/connect.py",
                                             "cpctl/host/sshconfig.py"}
    for path, line, function, typing_only in imports:
        if path == "cpctl/host/sshconfig.py":     # called by cpctl.host.ssh before its own import
            assert function == "import_paramiko_without_invoke", "sshconfig.py:%d" % line
        if path == "cpctl/host/keeperd.py":
            assert function or typing_only, "keeperd.py:%d imports paramiko at module level" % line
        if path == "cpctl/host/connect.py":
            assert function == "open_host", "connect.py:%d" % line
    source = (_CPCTL / "host" / "connect.py").read_text()
    body = source[source.index("def open_host("):]
    assert body.index("return keeper.attach(") < body.index("from cpctl.host import ssh")


def test_the_modules_of_a_warm_run_load_no_paramiko():
    """What a remote status through the keeper imports (CLI, fan-out, pool, keeper client, the
    node and its views) leaves paramiko and cryptography unloaded."""
    out = _run("""
        import sys
        import cpctl.cli.main, cpctl.cli.fanout, cpctl.cli.commands.views
        import cpctl.fleet.pool, cpctl.fleet.targets, cpctl.fleet.runner, cpctl.fleet.inventory
        import cpctl.host.connect, cpctl.host.keeper, cpctl.host.agent, cpctl.host.replies
        import cpctl.ops.wiring, cpctl.core.views
        print(sorted(m for m in ("paramiko", "cryptography", "nacl", "cpctl.host.ssh") if m in sys.modules))
    """)
    assert out == "[]"

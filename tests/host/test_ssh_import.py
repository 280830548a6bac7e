"""cpctl.host.ssh keeps invoke (paramiko's optional ``Match exec`` helper) out of its import."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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

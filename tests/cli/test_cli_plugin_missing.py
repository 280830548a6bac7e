"""Issue #37: ``cpctl lab`` in an install without the lab (examples/Dockerfile copies cpctl/ only, so
the ``cpctl.commands`` entry point names a module that is not there) says how to get it: exit 7
``environment``, one line with a hint, no "internal error ... please report it"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_a_declared_command_whose_module_is_missing_says_how_to_install_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    meta = site / "cpctl-0.1.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "entry_points.txt").write_text("[cpctl.commands]\nlab = no_such_lab_module.cli:lab\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site)] + sys.path))
    for args in (["lab", "up"], ["-o", "json", "lab", "profiles"]):
        proc = subprocess.run([sys.executable, "-m", "cpctl", *args], capture_output=True, text=True, env=env,
                              timeout=60, cwd=str(tmp_path))
        assert proc.returncode == 7, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
        if "json" in args:
            error = json.loads(proc.stderr.strip().splitlines()[-1])["error"]
            assert error["reason"] == "environment" and "no module no_such_lab_module" in error["message"]
            assert "pip install" in error["hint"]
        else:
            assert proc.stderr.count("\n") == 1 and "hint: install cpctl with it: pip install" in proc.stderr

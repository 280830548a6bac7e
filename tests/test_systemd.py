"""systemd units: repo copies equal the rendered ones, systemd-analyze accepts them, install works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from cpctl.cli.commands import systemd as units
from cpctl.cli.main import run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANALYZE = "/usr/bin/systemd-analyze"


def test_repo_copies_equal_rendered_units() -> None:
    rendered = units.render()
    assert sorted(os.listdir(os.path.join(REPO, "systemd"))) == sorted(rendered)
    for name, text in rendered.items():
        with open(os.path.join(REPO, "systemd", name)) as handle:
            assert handle.read() == text, "systemd/%s drifted from cpctl/commands/systemd.py" % name


def test_unit_semantics() -> None:
    check, timer, watch = (units.render()[n] for n in ("cpctl-check.service", "cpctl-check.timer",
                                                       "cpctl-watch.service"))
    assert "Type=oneshot" in check and "SuccessExitStatus=1\n" in check
    assert "ExecStart=/usr/local/bin/cpctl check --prometheus-textfile " \
           "/var/lib/node_exporter/textfile_collector/cpctl.prom\n" in check
    assert "ReadWritePaths=/etc/kubernetes/manifests /var/lib/cpctl -/var/lib/node_exporter/textfile_collector" \
        in check
    for unit in (check, watch):
        for line in ("ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes",
                     "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "RestrictAddressFamilies="):
            assert line in unit
    for line in ("OnCalendar=*:0/5", "Persistent=true", "RandomizedDelaySec=30s", "OnBootSec=",
                 "WantedBy=timers.target"):
        assert line in timer
    assert "Restart=on-failure" in watch and "ExecStart=/usr/local/bin/cpctl -o json watch" in watch


@pytest.mark.skipif(not os.path.exists(ANALYZE), reason="systemd-analyze not installed")
def test_systemd_analyze_verify(tmp_path: Any) -> None:
    """Rendered with an ExecStart binary that exists; any complaint about our units fails the test."""
    for name, text in units.render(sys.executable).items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / n) for n in sorted(units.UNITS)]
    proc = subprocess.run([ANALYZE, "verify", *paths], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice"))
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "cpctl-" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


def test_install_writes_units_and_prints_commands(tmp_path: Any, capsys: Any) -> None:
    prefix = tmp_path / "system"
    rc = run(["systemd", "install", "--prefix", str(prefix), "--cpctl-path", "/opt/cpctl/bin/cpctl"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert sorted(os.listdir(prefix)) == sorted(units.UNITS)
    for name in units.UNITS:
        assert os.stat(prefix / name).st_mode & 0o777 == 0o644
        assert (prefix / name).read_text() == units.render("/opt/cpctl/bin/cpctl")[name]
    assert "systemctl daemon-reload && systemctl enable --now cpctl-check.timer" in out
    assert not [n for n in os.listdir(prefix) if n.startswith(".")]


def test_install_json_and_default_path(tmp_path: Any, capsys: Any, monkeypatch: Any) -> None:
    fake = tmp_path / "bin" / "cpctl"
    fake.parent.mkdir()
    shutil.copy(sys.executable, fake)
    monkeypatch.setattr(sys, "argv", [str(fake)])
    rc = run(["-o", "json", "systemd", "install", "--prefix", str(tmp_path / "u")])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["cpctl"] == str(fake) and data["ran"] == []
    assert "ExecStart=%s check" % fake in (tmp_path / "u" / "cpctl-check.service").read_text()


@pytest.mark.parametrize("bad", ["cpctl", "/opt/my cpctl", "/usr/bin/cpctl;reboot", "/opt/%i/cpctl"])
def test_install_refuses_unsafe_paths(tmp_path: Any, capsys: Any, bad: str) -> None:
    rc = run(["systemd", "install", "--prefix", str(tmp_path), "--cpctl-path", bad])
    assert rc == 2 and "--cpctl-path" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_show(capsys: Any) -> None:
    assert run(["systemd", "show", "--cpctl-path", "/usr/local/bin/cpctl", "cpctl-check.timer"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# cpctl-check.timer\n") and "Persistent=true" in out and "cpctl-watch" not in out
    assert "systemctl enable --now cpctl-check.timer" in out

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
from cpctl.errors import CpctlError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANALYZE = "/usr/bin/systemd-analyze"


def test_repo_copies_equal_rendered_units() -> None:
    rendered = dict(units.render(), **units.render_snapshot())       # the snapshot units as --every 6h --keep 28
    assert sorted(os.listdir(os.path.join(REPO, "systemd"))) == sorted(rendered)
    for name, text in rendered.items():
        with open(os.path.join(REPO, "systemd", name)) as handle:
            assert handle.read() == text, "systemd/%s drifted from cpctl/commands/systemd.py" % name


def test_unit_semantics() -> None:
    check, timer, watch = (units.render()[n] for n in ("cpctl-check.service", "cpctl-check.timer",
                                                       "cpctl-watch.service"))
    assert "Type=oneshot" in check and "SuccessExitStatus=1\n" in check
    # issue 35: the check never reverts; an overdue arm is reverted by an explicit step before it
    assert "ExecStart=-/usr/local/bin/cpctl revert-unconfirmed --overdue\n" \
           "ExecStart=/usr/local/bin/cpctl check --prometheus-textfile " \
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


def test_snapshot_unit_semantics() -> None:
    """``cpctl etcd snapshot schedule`` (issue 46): the drift check's sandbox, its state dir, the
    metric file beside the check's, a calendar that Persistent= catches up."""
    service, timer = (units.render_snapshot(every="15min", keep=3)[n] for n in units.SNAPSHOT_UNITS)
    assert "Type=oneshot" in service and "ExecStart=/usr/local/bin/cpctl etcd snapshot save --keep 3 " \
        "--prometheus-textfile /var/lib/node_exporter/textfile_collector/cpctl-etcd-snapshot.prom\n" in service
    assert "ReadWritePaths=/var/lib/cpctl -/var/lib/node_exporter/textfile_collector\n" in service
    assert units._HARDENING in service and units._HARDENING in units.render()["cpctl-check.service"]
    for line in ("OnCalendar=*-*-* *:00/15:00", "Persistent=true", "OnBootSec=", "WantedBy=timers.target"):
        assert line in timer
    assert [units.calendar_of(e)[0] for e in ("6h", "1d", "24h", "30min")] == \
        ["*-*-* 00/6:00:00", "*-*-* 00:00:00", "*-*-* 00:00:00", "*-*-* *:00/30:00"]
    for bad in ("7h", "5d", "0h", "45min", "6", "every day"):
        with pytest.raises(CpctlError):
            units.calendar_of(bad)


@pytest.mark.skipif(not os.path.exists(ANALYZE), reason="systemd-analyze not installed")
def test_snapshot_calendars_mean_what_they_say() -> None:
    """systemd's own reading of each calendar ``--every`` can give (``systemd-analyze calendar``)."""
    for every, normalized in (("6h", "*-*-* 00/6:00:00"), ("1h", "*-*-* 00/1:00:00"), ("15min", "*-*-* *:00/15:00"),
                              ("1d", "*-*-* 00:00:00")):
        proc = subprocess.run([ANALYZE, "calendar", units.calendar_of(every)[0]], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0 and "Normalized form: %s" % normalized in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(not os.path.exists(ANALYZE), reason="systemd-analyze not installed")
def test_systemd_analyze_verify(tmp_path: Any) -> None:
    """Rendered with an ExecStart binary that exists; any complaint about our units fails the test."""
    rendered = dict(units.render(sys.executable), **units.render_snapshot(sys.executable))
    for name, text in rendered.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / n) for n in sorted(rendered)]
    proc = subprocess.run([ANALYZE, "verify", *paths], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice"))
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if "cpctl-" in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


@pytest.fixture
def tmp_is_visible(monkeypatch: Any) -> None:
    """The tests' files live under /tmp, which PrivateTmp hides from the real units: for these
    tests only, /tmp and /var/tmp count as visible (every other hidden place still counts)."""
    monkeypatch.setattr(units, "HIDDEN_FROM_UNITS", {root: setting for root, setting in units.HIDDEN_FROM_UNITS.items()
                                                     if root not in ("/tmp", "/var/tmp")})


def executable(path: Any, text: str = "#!/bin/sh\nexit 0\n") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_install_writes_units_and_prints_commands(tmp_path: Any, capsys: Any, tmp_is_visible: None) -> None:
    prefix = tmp_path / "system"
    cpctl = executable(tmp_path / "opt" / "cpctl" / "bin" / "cpctl")
    rc = run(["systemd", "install", "--prefix", str(prefix), "--cpctl-path", cpctl])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert sorted(os.listdir(prefix)) == sorted(units.UNITS)
    for name in units.UNITS:
        assert os.stat(prefix / name).st_mode & 0o777 == 0o644
        assert (prefix / name).read_text() == units.render(cpctl)[name]
    assert "systemctl daemon-reload && systemctl enable --now cpctl-check.timer" in out
    assert not [n for n in os.listdir(prefix) if n.startswith(".")]


def test_install_json_and_default_path(tmp_path: Any, capsys: Any, monkeypatch: Any, tmp_is_visible: None) -> None:
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


INSTALL_HINT = ("python3 -m venv /opt/cpctl", "--cpctl-path /opt/cpctl/bin/cpctl",
                "PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install")


def _refused(tmp_path: Any, capsys: Any, cpctl: str, why: str) -> None:
    """``systemd install`` refuses ``cpctl`` as ExecStart: exit 4, one line saying ``why`` and how
    to install cpctl properly; no unit written."""
    prefix = tmp_path / "units"
    rc = run(["systemd", "install", "--prefix", str(prefix), "--cpctl-path", cpctl])
    err = capsys.readouterr().err
    assert rc == 4 and len(err.splitlines()) == 1, err
    assert err.startswith("cpctl: refusing to install units with ExecStart=%s: " % cpctl) and why in err, err
    assert all(hint in err for hint in INSTALL_HINT), err
    assert not prefix.exists()


@pytest.mark.parametrize("where, why", [("/tmp", "is under /tmp, which PrivateTmp=yes hides from the unit"),
                                        ("/var/tmp", "is under /var/tmp, which PrivateTmp=yes hides from the unit"),
                                        ("/home/ops/.local/bin", "ProtectHome=yes hides from the unit"),
                                        ("/root/.local/bin", "is under /root, which ProtectHome=yes hides"),
                                        ("/opt/no-such-dir/bin", "/opt/no-such-dir/bin/cpctl does not exist")])
def test_install_refuses_paths_the_sandbox_cannot_run(tmp_path: Any, capsys: Any, where: str, why: str) -> None:
    _refused(tmp_path, capsys, where + "/cpctl", why)


def test_install_refuses_an_existing_cpctl_in_tmp(tmp_path: Any, capsys: Any) -> None:
    cpctl = executable(tmp_path / "bin" / "cpctl")
    _refused(tmp_path, capsys, cpctl, "which PrivateTmp=yes hides from the unit")


def test_install_refuses_what_it_cannot_execute(tmp_path: Any, capsys: Any, tmp_is_visible: None) -> None:
    plain = tmp_path / "bin" / "cpctl"
    executable(plain)
    plain.chmod(0o644)
    _refused(tmp_path, capsys, str(plain), "is not an executable file")
    _refused(tmp_path, capsys, str(tmp_path), "is not an executable file")


def test_install_refuses_a_venv_the_sandbox_hides(tmp_path: Any, capsys: Any, tmp_is_visible: None) -> None:
    """A console script outside the hidden dirs whose interpreter (its venv's python) is inside:
    the unit would fail with 203/EXEC all the same."""
    script = executable(tmp_path / "usr" / "local" / "bin" / "cpctl", "#!/root/venv/bin/python3\nimport cpctl\n")
    _refused(tmp_path, capsys, script, "its interpreter (#!/root/venv/bin/python3): /root/venv/bin/python3 is "
                                       "under /root, which ProtectHome=yes hides from the unit")


def test_a_venv_made_from_a_hidden_python_gets_a_hint_that_works(tmp_path: Any, capsys: Any,
                                                                 monkeypatch: Any) -> None:
    """A venv under /opt made from a pyenv Python in /root: its python links there. Repeating "python3
    -m venv /opt/cpctl" with that python3 would be refused again: the hint names a Python the units
    see (issue #39, item 5)."""
    home = tmp_path / "root"
    pyenv = executable(home / ".pyenv" / "versions" / "3.11.7" / "bin" / "python3.11")
    venv_python = tmp_path / "opt" / "cpctl" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(pyenv)
    script = executable(tmp_path / "opt" / "cpctl" / "bin" / "cpctl", "#!%s\nimport cpctl\n" % venv_python)
    monkeypatch.setattr(units, "HIDDEN_FROM_UNITS", {str(home): "ProtectHome=yes"})
    system = executable(tmp_path / "usr" / "bin" / "python3")
    monkeypatch.setattr(units, "SYSTEM_PYTHONS", (str(tmp_path / "usr" / "local" / "bin" / "python3"), system))
    rc = run(["systemd", "install", "--prefix", str(tmp_path / "units"), "--cpctl-path", script])
    err = capsys.readouterr().err
    assert rc == 4 and len(err.splitlines()) == 1, err
    assert "its python %s is a link to %s, which the units cannot see" % (venv_python, pyenv) in err, err
    assert "make it from %s instead (%s -m venv /opt/cpctl && " % (system, system) in err, err
    assert "e.g. python3 -m venv /opt/cpctl" not in err, "not the recipe that was just refused"


def test_install_refuses_a_symlink_into_a_hidden_dir(tmp_path: Any, capsys: Any, monkeypatch: Any) -> None:
    home = tmp_path / "home"
    target = executable(home / "ops" / "venv" / "bin" / "cpctl")
    link = tmp_path / "usr" / "local" / "bin" / "cpctl"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    monkeypatch.setattr(units, "HIDDEN_FROM_UNITS", {str(home): "ProtectHome=yes"})
    _refused(tmp_path, capsys, str(link), "%s (symlink target) is under %s, which ProtectHome=yes" % (target, home))


def test_show(capsys: Any) -> None:
    assert run(["systemd", "show", "--cpctl-path", "/usr/local/bin/cpctl", "cpctl-check.timer"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# cpctl-check.timer\n") and "Persistent=true" in out and "cpctl-watch" not in out
    assert "systemctl enable --now cpctl-check.timer" in out

"""Issue #35, the node side of ``--confirm-within``: arming is refused before anything changes when
the revert unit could not run; a revert that finds the node lock held keeps the arm, says why in it,
and is retried until it succeeds; the node's clock - not the operator's - decides when it reverts.

Cheap tests: a node in a temporary directory, ``--probe none``; the clock test runs the real agent
in a child process (its clock is the node's) while this process's clock is put 5 minutes behind or
1 hour ahead."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List

import pytest

from cpctl.core import confirmations
from cpctl.core.confirmations import Arm
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.agent import SubprocessAgentHost
from cpctl.host.local import LocalHost
from cpctl.ops import confirm, drift, edits, metrics
from cpctl.ops.wiring import open_node
from cpctl.timeutil import iso
from tests.coreutil import MANIFESTS, NODE, NodeDirs, sha

SCHEDULER = MANIFESTS["kube-scheduler.yaml"]
NEW_SCHEDULER = SCHEDULER.replace(b"    - --leader-elect=true\n", b"    - --leader-elect=true\n    - --v=4\n")
OPTIONS = edits.ApplyOptions(timeout=1, settle=0)
OP = "00112233445566aa"


def _settings(node: NodeDirs, lock_timeout: float = 1) -> Settings:
    return Settings(manifests_dir=node.manifests, state_dir=node.state, node_name=NODE, probe="none",
                    lock_timeout=lock_timeout)


def _manifest(node: NodeDirs) -> bytes:
    with open(os.path.join(node.manifests, "kube-scheduler.yaml"), "rb") as handle:
        return handle.read()


def _arm_record(node: NodeDirs) -> Any:
    path = os.path.join(node.state, "confirm", "kube-scheduler.yaml.json")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


# --- 3. refused before anything changes -------------------------------------------------------
def test_arming_is_refused_before_the_change_when_the_unit_could_not_run(tmp_path: Any, monkeypatch: Any) -> None:
    """Where the revert is a systemd unit, an interpreter under /root (ProtectHome) or a state dir
    under /tmp (PrivateTmp) could never run: refused, exit 4, the manifest untouched, nothing armed,
    no history - the rule ``cpctl systemd install`` refuses by."""
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    monkeypatch.setenv(confirm.TIMER_ENV, "systemd")
    opened = open_node(_settings(node), LocalHost())
    with pytest.raises(CpctlError) as caught:
        confirm.preflight(opened, confirm.Launcher(["/root/venv/bin/python", "-m", "cpctl"]))
    assert caught.value.code == ExitCode.REFUSED
    assert "/root/venv/bin/python is under /root, which ProtectHome=yes hides" in caught.value.message
    assert node.state.startswith(("/tmp/", "/var/tmp/")), "pytest's tmp dir is where PrivateTmp hides it"
    with pytest.raises(CpctlError) as caught:
        confirm.preflight(opened, confirm.Launcher([os.path.realpath("/usr/bin/python3"), "-m", "cpctl"]))
    assert caught.value.code == ExitCode.REFUSED
    assert "the state dir: %s is under" % node.state in caught.value.message, caught.value.message
    assert "PrivateTmp=yes hides" in caught.value.message
    proc = subprocess.run(node.argv("flags", "scheduler", "--set", "v=4", "--confirm-within", "1m"),
                          env=node.env(CPCTL_CONFIRM_TIMER="systemd"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4, proc.stderr
    assert "hides from the unit" in proc.stderr and "nothing changed, nothing armed" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    dry = subprocess.run(node.argv("flags", "scheduler", "--set", "v=4", "--confirm-within", "1m", "--dry-run"),
                         env=node.env(CPCTL_CONFIRM_TIMER="systemd"), capture_output=True, text=True, timeout=60)
    assert dry.returncode == 4 and "hides from the unit" in dry.stderr, dry.stderr     # its dry run says so too
    assert _manifest(node) == SCHEDULER and _arm_record(node) is None
    assert not os.path.exists(node.history_file) or b"flags" not in open(node.history_file, "rb").read()


def test_the_revert_unit_is_persistent_and_writable_where_the_plan_writes() -> None:
    """The unit texts: an absolute UTC OnCalendar with Persistent=true, enabled by timers.target,
    the shipped sandbox, ReadWritePaths exactly the dirs given (missing ones ignored), ExecStart
    words quoted so that no specifier or variable expands, and a cleanup that keeps the units
    while the arm is there."""
    armed = Arm(OP, "kube-apiserver", "kube-apiserver.yaml", "a" * 64, "b" * 64, 3, "flags", iso(0),
                "2026-12-04T14:05:00Z", "root", "m1", NODE, None, "systemd")
    texts = confirm.unit_texts(armed, ["/opt/cpctl/bin/python", "-c", "print('100%$x')"],
                               ["/etc/kubernetes/audit", "/etc/kubernetes/manifests", "/var/lib/cpctl"],
                               ["ProtectHome=yes", "PrivateTmp=yes"], confirmations.StateDir(LocalHost(),
                                                                                              "/var/lib/cpctl"))
    service = texts["/etc/systemd/system/cpctl-confirm-kube-apiserver.service"]
    timer = texts["/etc/systemd/system/cpctl-confirm-kube-apiserver.timer"]
    assert "OnCalendar=2026-12-04 14:05:00 UTC\n" in timer and "Persistent=true\n" in timer
    assert "WantedBy=timers.target" in timer
    assert "ReadWritePaths=-/etc/kubernetes/audit -/etc/kubernetes/manifests -/var/lib/cpctl\n" in service
    assert 'ExecStart="/opt/cpctl/bin/python" "-c" "print(\'100%%$$x\')"\n' in service
    assert "ProtectHome=yes" in service and "Restart=on-failure" in service and "StartLimitIntervalSec=0" in service
    assert "grep -qs -- %s /var/lib/cpctl/confirm/kube-apiserver.yaml.json ||" % OP in service


# --- 2. fail closed, retried ------------------------------------------------------------------
def _changed_and_armed(node: NodeDirs, due_in: float) -> None:
    opened = open_node(_settings(node), LocalHost())
    edits.replace(opened, "scheduler", NEW_SCHEDULER, "test", "apply", OPTIONS)
    clock = confirmations.node_clock(opened.host)
    armed = Arm(OP, "kube-scheduler", "kube-scheduler.yaml", sha(NEW_SCHEDULER), sha(SCHEDULER), 1, "apply",
                iso(clock.time), iso(clock.time + due_in), "root", "test", NODE, "lock test", "none",
                boot_id=clock.boot_id, due_boottime=clock.boottime + due_in)
    with opened.session("arm"):
        opened.host.makedirs(confirmations.directory(opened.state), 0o700)
        opened.apply(confirmations.arm_change(opened.state, armed))


def test_a_revert_that_finds_the_lock_held_keeps_the_arm_says_why_and_succeeds_on_retry(tmp_path: Any,
                                                                                       monkeypatch: Any) -> None:
    """Another process holds the node lock past --lock-timeout when the arm is due (a 250 s API
    server wait): the revert does not give up. The arm stays, its record says "revert failing" with
    the attempt and the next try (status, check and the metrics show it), and the next try, once
    the lock is free, reverts the change."""
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    _changed_and_armed(node, 0.5)
    monkeypatch.setattr(confirm, "RETRY_FIRST", 0.5)         # the back-off's first step, 5 s in production
    hold = ("import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT, 0o600); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, os.path.join(node.state, "lock")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == b"held\n"
    pauses: List[float] = []
    seen: List[Any] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        record = _arm_record(node)
        if record and record.get("attempts") and holder.poll() is None:   # in the first retry's back-off
            seen.append(record)
            opened = open_node(_settings(node), LocalHost())
            report = drift.check(opened)
            seen.append([f.to_dict() for f in report.findings if f.kind == "unconfirmed"])
            seen.append(metrics.check_metrics(time.time(), report))
            holder.stdin.close()                                            # the other cpctl is done
            holder.wait(30)
        else:
            time.sleep(min(seconds, 0.05))
    logged: List[str] = []
    try:
        done = confirm.timer_run(open_node(_settings(node), LocalHost()), "kube-scheduler", OP,
                                 None, lambda message, loud: logged.append(message), sleep=sleep)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert done["reverted"] is True, done
    assert _manifest(node) == SCHEDULER and _arm_record(node) is None
    record, findings, prom = seen
    assert record["op"] == OP and record["attempts"] == 1 and record["next_try"], record
    assert "lock" in record["failing"], record
    assert findings and findings[0]["severity"] == "warning" and "revert failing" in findings[0]["message"], findings
    assert findings[0]["attempts"] == 1
    assert 'cpctl_change_revert_failed_attempts{component="kube-scheduler",file="kube-scheduler.yaml"} 1' in prom, prom
    assert any("(attempt 1)" in line and "the arm stays, next try in" in line for line in logged), logged
    actions = [r["action"] for r in node.history()]
    assert actions[-3:] == ["armed", "rollback", "reverted"], actions


# --- 4. the node's clock decides ---------------------------------------------------------------
@pytest.mark.parametrize("skew", [-300.0, 3600.0], ids=["operator-5min-behind", "operator-1h-ahead"])
def test_the_node_clock_decides_when_a_remote_arm_reverts(tmp_path: Any, monkeypatch: Any, skew: float) -> None:
    """A remote arm (the agent in a child process: its clock is the node's) while this process's
    clock is ``skew`` seconds off: the arm's deadline is the node's now + 3 s, the change is still
    in place a second after the arm (5 min behind used to revert at once) and reverted within
    seconds of the deadline (1 h ahead used to make 3 s an hour)."""
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    monkeypatch.setenv(confirm.TIMER_ENV, "process")
    host = SubprocessAgentHost()
    real = time.time
    pid = 0
    try:
        opened = open_node(_settings(node, 10), host)
        result = edits.replace(opened, "scheduler", NEW_SCHEDULER, "test", "apply", OPTIONS)
        monkeypatch.setattr(time, "time", lambda: real() + skew)          # the operator's clock only
        armed = confirm.arm(opened, result, confirm.ConfirmOptions(3), confirm.Launcher([], remote=True))
        monkeypatch.setattr(time, "time", real)
        state = armed.confirm                # a typed ChangeResult (issue 33)
        assert isinstance(state, dict)
        pid = int(state["pid"])
        node_now = real()
        assert node_now - 1 <= confirmations.parse_iso(str(state["deadline"])) <= node_now + 4, state
        started = time.monotonic()
        time.sleep(1)
        assert _manifest(node) == NEW_SCHEDULER, "reverted at once: the operator's clock decided"
        while _manifest(node) != SCHEDULER and time.monotonic() - started < 60:
            time.sleep(0.1)
        took = time.monotonic() - started
        assert _manifest(node) == SCHEDULER, "not reverted within 60 s of a 3 s window"
        assert 1.5 <= took <= 30, took
        while len(node.history()) < 3 and time.monotonic() - started < 60:   # its record follows the write
            time.sleep(0.1)
    finally:
        if pid > 1:
            try:
                os.kill(pid, signal.SIGKILL)     # its verification waits for a health endpoint nobody serves
            except ProcessLookupError:
                pass
        host.close()
    assert [r["action"] for r in node.history()][-3:] == ["apply", "armed", "rollback"]


def test_a_wall_clock_step_does_not_change_when_an_arm_is_due() -> None:
    """Within the boot it was armed in, CLOCK_BOOTTIME decides: a wall clock stepped an hour ahead
    (NTP) does not make it overdue, one stepped back does not delay it; after a reboot (another
    boot id) the wall-clock deadline - the persistent timer's - decides."""
    armed = Arm(OP, "kube-scheduler", "kube-scheduler.yaml", "a" * 64, "b" * 64, 1, "apply", iso(1000),
                iso(1060), "root", "m1", NODE, None, "systemd", boot_id="b1" * 8, due_boottime=560.0)
    same_boot = confirmations.NodeClock
    assert not armed.overdue(same_boot(1000 + 3600, 520.0, "b1" * 8))       # wall +1 h, boot clock 40 s early
    assert armed.overdue(same_boot(1000 - 3600, 561.0, "b1" * 8))           # wall -1 h, boot clock past it
    assert not armed.overdue(same_boot(1059, 5.0, "b2" * 8))                # rebooted: the wall deadline
    assert armed.overdue(same_boot(1061, 5.0, "b2" * 8))
    old = dataclasses.replace(armed, boot_id="", due_boottime=0.0)          # a record from before issue 35
    assert old.overdue(same_boot(1061, 561.0, "b1" * 8)) and not old.overdue(same_boot(1059, 999.0, "b1" * 8))


def test_a_revert_meeting_erofs_keeps_the_arm_and_the_change_is_not_dropped(tmp_path: Any) -> None:
    """Issue #35 item 2: the revert's write of the manifest fails with EROFS (a sandbox that makes
    it read-only, a remounted filesystem): the arm is NOT dropped (it was, and the unconfirmed change
    stayed for good); the error says it is retried; nothing half-done."""
    from cpctl.core.node import Node
    from cpctl.host.mock import Fault, MockHost
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    _changed_and_armed(node, 0.0)
    host = MockHost([Fault("write_atomic", "EROFS", times=50, path=node.manifests)])
    opened = Node(host, node.manifests, node.state, NODE, lock_timeout=1)
    with pytest.raises(CpctlError) as caught:
        confirm.revert(opened, "kube-scheduler", "test", op=OP, stop_timer=False)
    assert caught.value.code == ExitCode.ENVIRONMENT
    assert "the arm stays and the revert is retried" in caught.value.message, caught.value.message
    assert _manifest(node) == NEW_SCHEDULER and _arm_record(node)["op"] == OP
    assert "dropped" not in [r["action"] for r in node.history()]
    done = confirm.revert(open_node(_settings(node), LocalHost()), "kube-scheduler", "test", op=OP,
                          stop_timer=False)                       # the filesystem writable again: the retry
    assert done["reverted"] is True and _manifest(node) == SCHEDULER and _arm_record(node) is None


# --- 1. a node without systemd: the @reboot entry ------------------------------------------------
def _boot_entry(cron: Any) -> str:
    path = os.path.join(str(cron), "cpctl-confirm-kube-scheduler")
    if not os.path.exists(path):
        return ""
    with open(path) as handle:
        return handle.read()


def _reboot_line(text: str) -> str:
    """The command of the entry's @reboot line, as cron hands it to /bin/sh (``\\%`` is a ``%``)."""
    line = next(line for line in text.splitlines() if line.startswith("@reboot "))
    user, command = line[len("@reboot "):].split(" ", 1)
    assert user == "root", line
    return command.replace("\\%", "%")


def test_without_systemd_a_boot_entry_restarts_the_revert_after_a_reboot(tmp_path: Any) -> None:
    """No systemd as PID 1: the detached revert process dies with the machine, so the arm also writes
    an ``@reboot`` entry into the node's cron.d. The "reboot" here: the process killed inside the
    window (SIGKILL, as a power cut), nothing reverts by itself past the deadline; then the entry's
    command run as cron runs it at boot (``/bin/sh -c``, cron's bare environment) reverts the change
    and removes the entry. A confirmed arm's entry is removed by ``confirm``."""
    cron = tmp_path / "cron.d"
    cron.mkdir()
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    env = node.env(CPCTL_CONFIRM_TIMER="process", CPCTL_CONFIRM_BOOT_DIR=str(cron))
    armed = subprocess.run(node.argv("flags", "scheduler", "--set", "v=4", "--confirm-within", "3s"), env=env,
                           capture_output=True, text=True, timeout=120)
    assert armed.returncode == 0, armed.stderr
    record = _arm_record(node)
    text = _boot_entry(cron)
    assert record["op"] in text and "@reboot root " in text, text
    # issue 49: a short line (a wrapper's path and digest), far below Vixie cron's 1000-byte command limit
    assert len(_reboot_line(text)) < 500 and "revert-unconfirmed" not in _reboot_line(text), text
    confirm_dir = os.path.join(node.state, "confirm")
    assert sorted(n.split(".")[-1] for n in os.listdir(confirm_dir) if record["op"] in n) == ["boot", "log"]
    os.kill(int(record["pid"]), signal.SIGKILL)          # the machine goes down: the process with it
    time.sleep(max(0.0, confirmations.parse_iso(record["deadline"]) - time.time()) + 1.5)
    assert _manifest(node) != SCHEDULER and _arm_record(node) is not None, "nothing reverts a lost process"
    boot = subprocess.run(["/bin/sh", "-c", _reboot_line(text)], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert boot.returncode == 0, boot.stderr
    assert _manifest(node) == SCHEDULER and _arm_record(node) is None
    assert _boot_entry(cron) == "", "the entry removes itself once it ran"
    assert os.listdir(confirm_dir) == [], "the arm's log and wrapper go with it"
    assert [r["action"] for r in node.history()][-3:] == ["armed", "rollback", "reverted"]
    # confirmed: confirm removes the entry (no revert at the next boot)
    again = subprocess.run(node.argv("flags", "scheduler", "--set", "v=4", "--confirm-within", "5m"), env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and _arm_record(node)["op"] in _boot_entry(cron), again.stderr
    done = subprocess.run(node.argv("confirm", "scheduler"), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _boot_entry(cron) == "" and _arm_record(node) is None
    assert os.listdir(confirm_dir) == [], "confirm removes the arm's log and wrapper"


def test_a_boot_entry_runs_only_the_wrapper_it_was_written_with(tmp_path: Any) -> None:
    """The wrapper lives in the state dir; its sha256 lives in the cron line: a wrapper changed since
    the arm is not run at boot (the entry still removes itself)."""
    cron = tmp_path / "cron.d"
    cron.mkdir()
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    env = node.env(CPCTL_CONFIRM_TIMER="process", CPCTL_CONFIRM_BOOT_DIR=str(cron))
    armed = subprocess.run(node.argv("flags", "scheduler", "--set", "v=4", "--confirm-within", "5m"), env=env,
                           capture_output=True, text=True, timeout=120)
    assert armed.returncode == 0, armed.stderr
    record = _arm_record(node)
    text = _boot_entry(cron)
    wrapper = os.path.join(node.state, "confirm", "kube-scheduler.yaml.%s.boot" % record["op"])
    marker = tmp_path / "ran"
    with open(wrapper) as handle:
        script = handle.read()
    with open(wrapper, "w") as handle:        # what a writer of the state dir would run as root at boot
        handle.write("#!/bin/sh\ntouch %s\n%s" % (marker, script))
    boot = subprocess.run(["/bin/sh", "-c", _reboot_line(text)],
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert boot.returncode == 0 and not marker.exists() and _boot_entry(cron) == "", boot.stderr
    assert subprocess.run(node.argv("confirm", "scheduler"), env=env, timeout=120).returncode == 0


def test_a_refusal_under_an_arm_judges_overdue_on_the_nodes_clock(tmp_path: Any, monkeypatch: Any) -> None:
    """A change of the armed component is refused either way (exit 4); whether the arm is "overdue
    since T" or "reverts at T" is the node's to say: with the operator's clock two hours ahead, an
    arm due in an hour on the node (the agent in a child process: its clock is the node's) is not
    overdue - it said "overdue since" before."""
    node = NodeDirs(str(tmp_path / "n"), files={"kube-scheduler.yaml": SCHEDULER})
    _changed_and_armed(node, 3600.0)
    host = SubprocessAgentHost()
    real = time.time
    try:
        opened = open_node(_settings(node), host)
        monkeypatch.setattr(time, "time", lambda: real() + 7200)          # the operator's clock only
        with pytest.raises(CpctlError) as caught:
            confirmations.refuse_armed(opened.host, opened.state, "kube-scheduler.yaml", "flags", opened.command)
        monkeypatch.setattr(time, "time", real)
    finally:
        host.close()
    assert caught.value.code == ExitCode.REFUSED
    assert "reverts at %s" % _arm_record(node)["deadline"] in caught.value.message, caught.value.message
    assert "overdue" not in caught.value.message

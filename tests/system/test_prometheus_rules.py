"""The shipped alerting rules (examples/prometheus/cpctl.rules.yml, issue 36): promtool accepts
them, ``promtool test rules`` passes for the shipped unit tests, every alert is shown firing by at
least one of them, and every cpctl metric a rule names is one cpctl writes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from cpctl.ops import drift, etcdcare, etcdsnap, metrics

RULES_DIR = Path(__file__).resolve().parents[2] / "examples" / "prometheus"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None and not os.environ.get("CI"),
                                reason="needs promtool (Debian's prometheus package; .ci/run installs it)")


# Finding kinds no rule on cpctl_drift_findings names, and why: info only (nothing is wrong), reported only by
# `check --kubeadm` (its own run before an upgrade), or alerted through their own metrics.
QUIET_KINDS = {
    "unconfirmed",                  # info; an overdue revert: CpctlRevertFailing (the deadline metric)
    "editor_swap", "no_baseline", "check_skipped",      # info
    "upgrade_in_flight",            # a warning while kubeadm upgrades, gone when it is done (else upgrade_failed)
    "kubeadm_drops", "kubeadm_adds", "kubeadm_data_dir", "kubeadm_patch_fails", "kubeadm_patch_unchecked",
    "cert_expiring", "cert_stale",  # CpctlCertificateExpiring / the stale-certificate alert on cpctl_cert_* metrics
    "etcd_alarm",                   # CpctlEtcdNospace / CpctlEtcdCorrupt on cpctl_etcd_alarm_active (issue 45)
    "etcd_alarm_unknown",           # info: the alarms could not be read (the alarm metric is then absent)
}


def alerts() -> dict[str, str]:
    rules = yaml.safe_load((RULES_DIR / "cpctl.rules.yml").read_text())
    return {r["alert"]: r["expr"] for group in rules["groups"] for r in group["rules"]}


def test_promtool_checks_and_tests_the_rules() -> None:
    assert PROMTOOL, "promtool is not installed"
    check = subprocess.run([PROMTOOL, "check", "rules", "cpctl.rules.yml"], cwd=RULES_DIR, capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0 and "SUCCESS: %d rules found" % len(alerts()) in check.stdout, check.stdout
    tested = subprocess.run([PROMTOOL, "test", "rules", "cpctl.rules.test.yml"], cwd=RULES_DIR,
                            capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_alert_is_shown_firing_and_every_metric_is_written() -> None:
    cases = yaml.safe_load((RULES_DIR / "cpctl.rules.test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in cases for case in test.get("alert_rule_test", []) if case["exp_alerts"]}
    assert fired == set(alerts())
    report = drift.Report("master-1", time.time())
    report.components = {"etcd": 5.0}
    report.parked_since = {"etcd": time.time() - 5}
    report.parked_until = {"etcd": time.time() + 60}
    report.unconfirmed = [("kube-scheduler", "kube-scheduler.yaml", time.time() + 60)]
    report.certs = {"node": "master-1", "kube_dir": "/etc/kubernetes", "stale": [], "certificates": [
        {"name": "pki/ca.crt", "path": "", "embedded": None, "subject": "CN=kubernetes", "issuer": "", "chain": "",
         "not_after": "2035-01-01T00:00:00Z", "days_left": 3000.0, "error": ""}], "components": [
        {"component": "etcd", "verdict": "current", "why": "", "started": None, "started_source": "",
         "evidence": []}]}
    report.etcd_alarms = etcdcare.AlarmsSeen([{"member_id": "1", "member": "master-1", "alarm": "NOSPACE"}])
    text = metrics.check_metrics(report.time, report) + etcdsnap.snapshot_metrics("master-1", time.time(), 1.0, False)
    written = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    named = {name for expr in alerts().values() for name in re.findall(r"\bcpctl_\w+", expr)}
    # issue 48: a failed kubeadm upgrade has an alert of its own
    assert any('kind="upgrade_failed"' in expr for expr in alerts().values())
    # every finding kind that is a problem is alerted on, or said here why not (issue 49: unknown was missing)
    alerted = {kind for expr in alerts().values() for match in re.findall(r'kind=~?"([^"]+)"', expr)
               for kind in match.split("|")}
    assert set(drift.KINDS) - alerted == QUIET_KINDS, set(drift.KINDS) - alerted
    assert named and named <= written, named - written
    # issue 45: each etcd alarm kind has an alert of its own, critical
    wanted = {'cpctl_etcd_alarm_active{alarm="%s"} == 1' % kind for kind in etcdcare.ALARM_KINDS}
    assert wanted <= set(alerts().values())
    assert {n for n in named if n.startswith("cpctl_etcd_snapshot_")} == {n for n in written if "snapshot" in n}

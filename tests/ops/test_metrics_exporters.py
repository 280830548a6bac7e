"""The textfile of every ``cpctl check`` outcome, read by the real consumers (issue 36).

A real node_exporter (Debian's ``prometheus-node-exporter``, textfile collector only, on 127.0.0.1)
scrapes the file of each outcome - a clean check, drift with a duplicate manifest, a stray and a
component parked with ``--for``, a failed check, and a report whose components are defined twice
with different certificate verdicts, with odd label values and a change awaiting confirmation - and
must log no error and report ``node_textfile_scrape_error 0`` with cpctl's series in its answer;
``promtool check metrics`` must be clean for each. A file with a series written twice (what cpctl
wrote before) is shown to make node_exporter log an error, so the test can fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from cpctl.ops import drift, etcdcare, metrics
from cpctl_lab.httpserve import free_port
from tests.coreutil import NodeDirs

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    (NODE_EXPORTER is None or PROMTOOL is None) and not os.environ.get("CI"),
    reason="needs Debian's prometheus-node-exporter and prometheus (promtool); .ci/run installs them")


class Exporter:
    """One node_exporter process reading ``directory``; its log goes to a file."""

    def __init__(self, directory: Path, log: Path) -> None:
        assert NODE_EXPORTER, "prometheus-node-exporter is not installed"
        self.port = free_port()
        self.log = log
        self._log_handle = open(log, "wb")
        self.proc = subprocess.Popen(
            [NODE_EXPORTER, "--web.listen-address=127.0.0.1:%d" % self.port, "--collector.disable-defaults",
             "--collector.textfile", "--collector.textfile.directory=%s" % directory],
            stdout=self._log_handle, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.scrape()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("node_exporter did not come up: %s" % log.read_text()) from None
                time.sleep(0.1)

    def scrape(self) -> str:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port, timeout=30) as reply:
            assert reply.status == 200
            return reply.read().decode()

    def errors_after(self, offset: int) -> list[str]:
        """Log lines at level error written after byte ``offset``."""
        text = self.log.read_bytes()[offset:].decode(errors="replace")
        return [line for line in text.splitlines() if "level=error" in line]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        finally:
            self._log_handle.close()


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[Exporter, Path]]:
    directory = tmp_path / "textfile"
    directory.mkdir()
    handle = Exporter(directory, tmp_path / "node_exporter.log")
    try:
        yield handle, directory
    finally:
        handle.stop()


def check_file(node: NodeDirs, prom: Path, *args: str, rc: int) -> str:
    node.run("check", "--prometheus-textfile", str(prom), *args, rc=rc)
    return prom.read_text()


def duplicated_report() -> str:
    """What a check writes for a node whose scheduler is defined twice with different certificate
    verdicts, odd label values and a change awaiting confirmation (the certificate report is as
    ``cpctl certs`` makes it: one entry per manifest)."""
    report = drift.Report("master-1", time.time())
    report.components = {"kube-scheduler": 0.0, 'odd"comp\\onent\nname': 30.0}
    report.parked_since = {'odd"comp\\onent\nname': time.time() - 30}
    report.unconfirmed = [("kube-apiserver", "kube-apiserver.yaml", time.time() + 600)]
    cert = {"name": "pki/apiserver.crt", "path": "/etc/kubernetes/pki/apiserver.crt", "embedded": None,
            "subject": "CN=kube-apiserver", "issuer": "CN=kubernetes", "not_after": "2030-01-01T00:00:00Z",
            "days_left": 1000.0, "chain": "ok", "error": ""}
    comps: list[Any] = [
        {"component": "kube-scheduler", "verdict": "STALE", "why": "", "started": None, "started_source": "",
         "evidence": []},
        {"component": "kube-scheduler", "verdict": "current", "why": "", "started": None, "started_source": "",
         "evidence": []},
        {"component": "kube-apiserver", "verdict": "reloading", "why": "", "started": None, "started_source": "",
         "evidence": []}]
    report.certs = {"node": "master-1", "kube_dir": "/etc/kubernetes", "certificates": [cert, dict(cert)],
                    "components": comps, "stale": ["kube-scheduler"]}
    # etcd 3.5.1 may raise one NOSPACE alarm per member (etcd-io/etcd#13467): one series per kind
    report.etcd_alarms = etcdcare.AlarmsSeen([{"member_id": "a", "member": "m1", "alarm": "NOSPACE"},
                                              {"member_id": "b", "member": "m2", "alarm": "NOSPACE"}])
    return metrics.check_metrics(report.time, report)


def test_node_exporter_and_promtool_accept_every_check_outcome(node: NodeDirs, tmp_path: Path,
                                                               exporter: tuple[Exporter, Path]) -> None:
    handle, directory = exporter
    prom = directory / "cpctl.prom"
    node.run("baseline")
    outcomes = {"clean": check_file(node, prom, rc=0)}
    node.run("stop", "etcd", "--for", "1h", "--no-wait")
    scheduler = (Path(node.manifests) / "kube-scheduler.yaml").read_bytes()
    (Path(node.manifests) / "kube-scheduler-copy.yaml").write_bytes(scheduler)        # a duplicate
    (Path(node.manifests) / "kube-apiserver.yaml.bak").write_bytes(scheduler)          # a stray
    outcomes["drift"] = check_file(node, prom, rc=1)
    os.rename(node.manifests, node.manifests + ".gone")
    outcomes["failed"] = check_file(node, prom, rc=7)
    os.rename(node.manifests + ".gone", node.manifests)
    outcomes["duplicates"] = duplicated_report()

    assert 'cpctl_drift_findings{kind="duplicate"} 1' in outcomes["drift"]
    assert 'cpctl_component_parked_until_timestamp_seconds{component="etcd"}' in outcomes["drift"]
    assert outcomes["duplicates"].count('cpctl_component_cert_stale{component="kube-scheduler"') == 1
    assert 'cpctl_component_cert_stale{component="kube-scheduler",node="master-1"} 1' in outcomes["duplicates"]
    assert "cpctl_drift_findings" not in outcomes["failed"]
    assert outcomes["duplicates"].count('cpctl_etcd_alarm_active{alarm="NOSPACE"} 1') == 1
    assert 'cpctl_etcd_alarm_active{alarm="CORRUPT"} 0' in outcomes["duplicates"]
    for name, text in outcomes.items():
        prom.write_text(text)
        offset = handle.log.stat().st_size
        scraped = handle.scrape()
        assert "node_textfile_scrape_error 0" in scraped, name
        assert "cpctl_check_success %d" % (name != "failed") in scraped, (name, scraped)
        assert handle.errors_after(offset) == [], name
        lint = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=60)
        assert lint.returncode == 0 and lint.stdout + lint.stderr == "", (name, lint.stdout, lint.stderr)

    # the test can fail: the same series written twice (cpctl before issue 36) is an error
    prom.write_text("# HELP cpctl_component_cert_stale x\n# TYPE cpctl_component_cert_stale gauge\n"
                    'cpctl_component_cert_stale{component="kube-scheduler"} 1\n'
                    'cpctl_component_cert_stale{component="kube-scheduler"} 0\n')
    offset = handle.log.stat().st_size
    handle.scrape()
    deadline = time.monotonic() + 30
    while not handle.errors_after(offset) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any("collected before with the same name and label values" in line
               for line in handle.errors_after(offset)), handle.log.read_text()


def test_etcd_alarm_series_are_absent_when_unknown_never_zero() -> None:
    """No etcd to ask, or its alarms unreadable: no series (a 0 would clear the alert while nothing
    could look); read and none active: 0 for each kind."""
    report = drift.Report("master-1", time.time())
    assert "cpctl_etcd_alarm_active" not in metrics.check_metrics(report.time, report)
    report.etcd_alarms = etcdcare.AlarmsSeen([], error="https://127.0.0.1:2379: connection refused")
    assert "cpctl_etcd_alarm_active" not in metrics.check_metrics(report.time, report)
    report.etcd_alarms = etcdcare.AlarmsSeen([])
    text = metrics.check_metrics(report.time, report)
    assert 'cpctl_etcd_alarm_active{alarm="NOSPACE"} 0' in text and 'cpctl_etcd_alarm_active{alarm="CORRUPT"} 0' in text

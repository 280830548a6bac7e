"""Flag sanity before the write (issue #23, item 5): names, admission plugins, probe ports and the
paths a flag writes are checked against cpctl's own lists before anything changes -- in --dry-run
too -- and ``--force`` turns the refusal into a warning (the lists may lag a new release).

The lab models how the binaries react to the same command lines (``cpctl_lab.componentflags``); the
product keeps its own lists (``cpctl.core.knownflags``): the first test checks they agree.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cpctl.core import checks, knownflags
from cpctl_lab import componentflags
from tests.labfixture import run_cpctl


def _manifest(lab: Any, component: str) -> bytes:
    with open(os.path.join(str(lab.manifests_dir()), component + ".yaml"), "rb") as handle:
        return handle.read()


def test_the_product_lists_agree_with_the_labs() -> None:
    assert knownflags.KUBE_APISERVER == frozenset(componentflags.KUBE_APISERVER)
    assert knownflags.KUBE_CONTROLLER_MANAGER == frozenset(componentflags.KUBE_CONTROLLER_MANAGER)
    assert knownflags.KUBE_SCHEDULER == frozenset(componentflags.KUBE_SCHEDULER)
    assert knownflags.known_flags("etcd", "registry.k8s.io/etcd:3.5.15-0") == frozenset(
        componentflags.etcd_flags("registry.k8s.io/etcd:3.5.15-0"))
    assert knownflags.known_flags("etcd", "registry.k8s.io/etcd:3.6.4-0") == frozenset(
        componentflags.etcd_flags("registry.k8s.io/etcd:3.6.4-0"))
    assert knownflags.ADMISSION_PLUGINS == componentflags.ADMISSION_PLUGINS
    assert knownflags.known_flags("my-own-binary", "x:1") is None


def test_etcd_flags_follow_its_release() -> None:
    pod = {"metadata": {"name": "etcd"}, "spec": {"containers": [
        {"name": "etcd", "image": "registry.k8s.io/etcd:3.5.15-0", "command": ["etcd", "--feature-gates=X=true"]}]}}
    assert any("has no flag --feature-gates" in d for d in checks.sanity_doubts(pod))
    pod["spec"]["containers"][0]["image"] = "registry.k8s.io/etcd:v3.6.4"
    assert not any("--feature-gates" in d for d in checks.sanity_doubts(pod))


def test_misspelled_flag_and_plugin_are_refused_in_dry_run_and_forced_past(lab: Any) -> None:
    before = _manifest(lab, "kube-scheduler")
    proc = run_cpctl(lab, "flags", "scheduler", "--set", "bind-adress=0.0.0.0", "--dry-run")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "has no flag --bind-adress (did you mean --bind-address?)" in proc.stderr
    assert "--force" in proc.stderr, "the way past a list that may be out of date"
    forced = run_cpctl(lab, "-o", "json", "flags", "scheduler", "--set", "bind-adress=0.0.0.0", "--dry-run",
                       "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    doc = json.loads(forced.stdout)
    assert any("--bind-adress" in w and "(--force)" in w for w in doc["warnings"]), doc
    assert _manifest(lab, "kube-scheduler") == before, "dry-run changes nothing"

    plugin = run_cpctl(lab, "flags", "apiserver", "--set", "enable-admission-plugins=NodeRestriction,AlwaysPulImages",
                       "--dry-run")
    assert plugin.returncode == 4, plugin.stdout + plugin.stderr
    assert "unknown admission plugin AlwaysPulImages (did you mean AlwaysPullImages?)" in plugin.stderr
    good = run_cpctl(lab, "flags", "apiserver", "--set", "enable-admission-plugins=NodeRestriction,AlwaysPullImages",
                     "--dry-run")
    assert good.returncode == 0, good.stdout + good.stderr


def test_a_port_the_probes_do_not_check_is_refused(lab: Any) -> None:
    proc = run_cpctl(lab, "flags", "apiserver", "--set", "secure-port=64430", "--dry-run")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "checks port" in proc.stderr and "does not listen (it listens on 64430)" in proc.stderr
    real = run_cpctl(lab, "flags", "apiserver", "--set", "secure-port=64430", "--timeout", "5")
    assert real.returncode == 4 and "nothing changed" in real.stderr


def test_a_written_path_must_be_on_a_writable_host_path(lab: Any, tmp_path: Any) -> None:
    proc = run_cpctl(lab, "flags", "apiserver", "--set", "audit-log-path=/var/log/kubernetes/audit/audit.log",
                     "--dry-run")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--audit-log-path=/var/log/kubernetes/audit/audit.log is on no hostPath volume" in proc.stderr
    on_pki = run_cpctl(lab, "flags", "apiserver", "--set", "audit-log-path=/etc/kubernetes/pki/audit.log", "--dry-run")
    assert on_pki.returncode == 4 and "read-only mount /etc/kubernetes/pki" in on_pki.stderr, on_pki.stderr
    # with the volume and its mount in the same change, the flag is fine
    data = _manifest(lab, "kube-apiserver").decode()
    audit_dir = tmp_path / "audit"
    flag = "    - --audit-log-path=/var/log/kubernetes/audit/audit.log\n"
    data = data.replace("    - kube-apiserver\n", "    - kube-apiserver\n" + flag, 1)
    data = data.replace("    volumeMounts:\n", "    volumeMounts:\n    - mountPath: /var/log/kubernetes/audit\n"
                        "      name: audit-log\n", 1)
    data = data.replace("  volumes:\n", "  volumes:\n  - hostPath:\n      path: %s\n      type: DirectoryOrCreate\n"
                        "    name: audit-log\n" % audit_dir, 1)
    new = tmp_path / "api.yaml"
    new.write_text(data)
    ok = run_cpctl(lab, "apply", "apiserver", "-f", str(new), "--dry-run")
    assert ok.returncode == 0, ok.stdout + ok.stderr

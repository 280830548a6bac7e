"""KUBECONFIG as kubectl reads it (issue #13): a colon-separated list, merged - missing files
skipped, the first file to set a value or a named entry wins, relative paths from their own file."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.probes.kubeapi import load_kubeconfig
from tests.labfixture import run_cpctl


def _write(path: str, value: Any) -> str:
    with open(path, "w") as handle:
        json.dump(value, handle)
    return path


def test_a_list_is_merged_like_kubectl_does(tmp_path: Any) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first = _write(str(one / "config"), {
        "current-context": "admin",
        "contexts": [{"name": "admin", "context": {"cluster": "prod", "user": "admin"}}],
        "users": [{"name": "admin", "user": {"tokenFile": "token"}}]})
    (one / "token").write_text("t0k3n\n")
    second = _write(str(two / "config"), {
        "current-context": "other",
        "clusters": [{"name": "prod",
                      "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "admin", "user": {"token": "not-this-one"}}]})
    access = load_kubeconfig(LocalHost(), "%s:%s:%s" % (tmp_path / "missing", first, second))
    assert access.server == "https://10.0.0.1:6443"
    assert access.tls["ca_file"] == str(two / "ca.crt"), "relative to the file that names it"
    assert access.headers["Authorization"] == "Bearer t0k3n", "the first file's user wins"


def test_a_list_of_missing_files_is_one_clear_error(tmp_path: Any) -> None:
    with pytest.raises(CpctlError) as err:
        load_kubeconfig(LocalHost(), "%s:%s" % (tmp_path / "a", tmp_path / "b"))
    assert err.value.code == ExitCode.ENVIRONMENT and "none of the kubeconfig files" in err.value.message


def test_status_through_a_kubeconfig_list(lab: Any, tmp_path: Any) -> None:
    listed = "%s:%s" % (tmp_path / "nope.conf", lab.kubeconfig)
    data = json.loads(run_cpctl(lab, "-o", "json", "status", "scheduler", KUBECONFIG=listed,
                                CPCTL_CRICTL="/nonexistent").stdout)
    (row,) = data["components"]
    assert row["observed"]["source"] == "api" and row["pod_state"] == "running"

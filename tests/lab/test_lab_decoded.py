"""The lab's kubelet decodes a static pod as a real kubelet of the lab's release does
(cpctl_lab/decoded.py): a field that release does not have is dropped before the pod is hashed, so
adding one (``hostnameOverride`` on a 1.30 node) keeps the pod, as a typo does (issue #37)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict

from cpctl.core import podschema
from cpctl_lab import decoded
from cpctl_lab.kubelet import HASH, parse_manifest

POD: Dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-scheduler", "namespace": "kube-system"},
    "spec": {"hostNetwork": True,
             "containers": [{"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.30.4",
                             "command": ["kube-scheduler"],
                             "volumeMounts": [{"name": "kubeconfig", "mountPath": "/etc/kubernetes/scheduler.conf",
                                               "readOnly": True}]}],
             "volumes": [{"name": "kubeconfig", "hostPath": {"path": "/etc/kubernetes/scheduler.conf"}}]},
}


def _with(**spec: Any) -> Dict[str, Any]:
    pod = copy.deepcopy(POD)
    pod["spec"].update(spec)
    return pod


def test_a_field_newer_than_the_release_is_dropped_like_a_typo() -> None:
    newer = _with(hostnameOverride="cp")                                  # PodSpec.hostnameOverride: 1.34+
    assert decoded.decoded_pod(newer, 30) == decoded.decoded_pod(POD, 30)
    assert decoded.decoded_pod(newer, 33) == decoded.decoded_pod(POD, 33)
    assert decoded.decoded_pod(newer, 34) != decoded.decoded_pod(POD, 34)
    assert decoded.decoded_pod(newer, 34)["spec"]["hostnameOverride"] == "cp"
    assert decoded.decoded_pod(newer) == decoded.decoded_pod(newer, decoded.NEWEST)
    sized = _with(resources={"limits": {"cpu": "1"}})                   # PodSpec.resources: 1.32+
    assert decoded.decoded_pod(sized, 31) == decoded.decoded_pod(POD, 31)
    assert decoded.decoded_pod(sized, 32) != decoded.decoded_pod(POD, 32)
    # a field inside a container and inside a mount, and a typo, at any depth
    deep = copy.deepcopy(POD)
    deep["spec"]["containers"][0]["restartPolicyRules"] = [{"action": "Restart"}]         # Container: 1.34+
    deep["spec"]["containers"][0]["volumeMounts"][0]["recursiveReadOnly"] = "Disabled"    # VolumeMount: 1.30+
    deep["spec"]["containers"][0]["volumeMount"] = []                                     # no release has it
    at30, at34 = decoded.decoded_pod(deep, 30), decoded.decoded_pod(deep, 34)
    container = at30["spec"]["containers"][0]
    assert "restartPolicyRules" not in container and "volumeMount" not in container
    assert at30["spec"]["containers"][0]["volumeMounts"][0]["recursiveReadOnly"] == "Disabled"
    assert at34["spec"]["containers"][0]["restartPolicyRules"] == [{"action": "Restart"}]
    assert "recursiveReadOnly" not in decoded.decoded_pod(deep, 29)["spec"]["containers"][0]["volumeMounts"][0]


def test_known_fields_drops_only_what_the_release_does_not_have() -> None:
    pod = _with(hostnameOverride="cp", hostPID=False, bogus=1)
    kept = decoded.known_fields(pod, "Pod", 30)
    assert "hostnameOverride" not in kept["spec"] and "bogus" not in kept["spec"]
    assert kept["spec"]["hostPID"] is False                               # a zero value stays: only names count
    assert kept["spec"]["containers"] == POD["spec"]["containers"] and kept["metadata"] == POD["metadata"]
    assert decoded.known_fields(pod, "Pod", 34)["spec"]["hostnameOverride"] == "cp"
    assert pod["spec"]["hostnameOverride"] == "cp"                        # the input is unchanged


def test_the_lab_field_releases_agree_with_upstreams_schemas() -> None:
    """_SINCE is the lab's own list; upstream's OpenAPI schemas (as cpctl's generated table holds them)
    must give the same first release for every field the lab models, from the oldest table on."""
    oldest = podschema.MINORS[0]
    for kind, fields in decoded._FIELDS.items():
        schema = podschema.TYPES.get(kind)
        if schema is None:                                      # PodStatus: not in the tables (the kubelet's)
            continue
        for name in fields:
            if name == "targetContainerName":                   # the lab's Container stands for EphemeralContainer too
                assert name in podschema.TYPES["EphemeralContainer"]
                continue
            assert name in schema, "%s.%s is not an upstream field" % (kind, name)
            first, last = podschema.SPANS.get("%s.%s" % (kind, name), (oldest, podschema.MINORS[-1]))
            assert last >= decoded.NEWEST, "%s.%s was removed" % (kind, name)
            assert max(decoded._SINCE.get("%s.%s" % (kind, name), 0), oldest) == first, (kind, name)
        for name in schema:
            span = podschema.SPANS.get("%s.%s" % (kind, name))
            if name not in fields:                  # a field the lab leaves out must be newer than the lab
                assert span is not None and span[0] > decoded.NEWEST, "%s.%s is not modelled" % (kind, name)


def test_the_lab_kubelet_names_the_pod_by_its_release(tmp_path: Path) -> None:
    import yaml

    plain, newer = tmp_path / "plain.yaml", tmp_path / "newer.yaml"
    plain.write_text(yaml.safe_dump(POD))
    newer.write_text(yaml.safe_dump(_with(hostnameOverride="cp")))
    same = tmp_path / "same.yaml"

    def uid(source: Path, minor: int) -> str:
        same.write_bytes(source.read_bytes())                    # one path: the hash includes it
        pod = parse_manifest(str(same), "cp1", minor)
        assert pod["metadata"]["annotations"][HASH] == pod["metadata"]["uid"]
        return str(pod["metadata"]["uid"])

    assert uid(plain, 30) == uid(newer, 30)
    assert "hostnameOverride" not in parse_manifest(str(same), "cp1", 30)["spec"]         # nor in the mirror pod
    assert uid(plain, 34) != uid(newer, 34)
    assert parse_manifest(str(same), "cp1", 34)["spec"]["hostnameOverride"] == "cp"

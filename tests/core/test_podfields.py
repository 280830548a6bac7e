"""Issue #37: an unknown field in a pod cpctl writes or applies is a doubt with the nearest known name
(the kubelet's lenient decoder drops it without a word: cpctl_lab/decoded.py models that)."""

from __future__ import annotations

import copy
from typing import Any, Dict

import pytest

from cpctl.core import podfields

POD: Dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-scheduler", "namespace": "kube-system",
                                                   "creationTimestamp": None, "labels": {"tier": "control-plane"}},
    "spec": {"hostNetwork": True, "priorityClassName": "system-node-critical",
             "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
             "containers": [{"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.30.4",
                             "command": ["kube-scheduler", "--v=2"], "resources": {"requests": {"cpu": "100m"}},
                             "livenessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/livez", "port": 10259,
                                                           "scheme": "HTTPS"}, "failureThreshold": 8},
                             "volumeMounts": [{"mountPath": "/etc/kubernetes/scheduler.conf", "name": "kubeconfig",
                                               "readOnly": True}]}],
             "volumes": [{"name": "kubeconfig", "hostPath": {"path": "/etc/kubernetes/scheduler.conf",
                                                             "type": "FileOrCreate"}}]},
    "status": {},
}


def test_a_kubeadm_pod_has_no_unknown_field() -> None:
    assert podfields.doubts(POD) == []


@pytest.mark.parametrize("path, typo, wanted", [
    (("spec", "containers", 0), "volumeMount", "volumeMounts"),
    (("spec", "containers", 0), "resourcez", "resources"),
    (("spec",), "hostnetwork", "hostNetwork"),
    (("spec", "volumes", 0, "hostPath"), "paht", "path"),
    (("spec", "containers", 0, "livenessProbe", "httpGet"), "shceme", "scheme"),
    (("metadata",), "label", "labels"),
])
def test_a_typo_names_the_nearest_field(path: tuple, typo: str, wanted: str) -> None:
    pod = copy.deepcopy(POD)
    holder: Any = pod
    for step in path:
        holder = holder[step]
    holder[typo] = holder.pop(wanted) if wanted in holder else "x"
    (doubt,) = podfields.doubts(pod)
    where = ".".join(str(p) for p in path).replace(".0", "[0]")
    assert doubt.startswith("%s: unknown field %s (did you mean %s?)" % (where, typo, wanted)), doubt


def test_types_it_does_not_describe_are_not_judged() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["affinity"] = {"nodeAffinity": {"anything": 1}}
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"sleep": {"seconds": 5}}, "stopSignal": "SIGTERM"}
    assert podfields.doubts(pod) == []
    pod["spec"]["containers"][0]["zzz"] = 1
    assert podfields.doubts(pod) == ["spec.containers[0]: unknown field zzz: the kubelet drops it without a word"]

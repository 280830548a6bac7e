"""What the kubelet counts as a change (issue #21, item 1), against the lab's kubelet.

The lab's kubelet names a static pod by a hash of the decoded, DEFAULTED pod (cpctl_lab.decoded,
its own model of pkg/kubelet/config/common.go), so a manifest that only writes out API defaults,
drops ``status: {}`` or adds a field the decoder drops keeps the running pod. cpctl must say so
and exit 0 at once, instead of waiting for a pod that never comes and rolling back.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict

import yaml

from cpctl.core import manifests, podview
from tests.labfixture import FAST, crictl, is_ready, mirror, run_cpctl, wait_for


def _path(lab: Any, component: str = "kube-scheduler") -> str:
    return os.path.join(str(lab.manifests_dir()), component + ".yaml")


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _healthy(lab: Any, component: str = "kube-scheduler") -> Dict[str, Any]:
    return wait_for(lambda: is_ready(mirror(lab, component)) and mirror(lab, component), 20, component + " Ready")


def _hash(pod: Dict[str, Any]) -> str:
    return pod["metadata"]["annotations"]["kubernetes.io/config.hash"]


def _running_ids(lab: Any, component: str = "kube-scheduler") -> set:
    proc = crictl(lab.crictl, "ps", "--name", "^%s$" % component, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return {c["id"] for c in json.loads(proc.stdout)["containers"]}


def _defaults_written_out(data: bytes) -> bytes:
    """The same pod with API defaults written out, ``status: {}`` dropped, an unknown field and
    a zero value added: all things the kubelet's decoder makes disappear."""
    pod = yaml.safe_load(data)
    pod.pop("status", None)
    pod["metadata"]["creationTimestamp"] = None
    spec = pod["spec"]
    spec.update(restartPolicy="Always", dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
                terminationGracePeriodSeconds=30, enableServiceLinks=True, hostPID=False)
    container = spec["containers"][0]
    container.update(terminationMessagePath="/dev/termination-log", terminationMessagePolicy="File",
                     imagePullPolicy="IfNotPresent", stdin=False, unknownField="dropped by the decoder")
    for kind in ("livenessProbe", "startupProbe", "readinessProbe"):
        probe = container.get(kind)
        if probe:
            probe.update(timeoutSeconds=probe.get("timeoutSeconds", 1), periodSeconds=probe.get("periodSeconds", 10),
                         successThreshold=1)
            probe["httpGet"].setdefault("scheme", "HTTP")
    for port in container.get("ports") or []:
        port["protocol"] = "TCP"
    return yaml.safe_dump(pod, sort_keys=False).encode()


def test_the_rule_keeps_defaults_comments_and_unknown_fields_and_sees_a_rename() -> None:
    """podview: defaults written out and a comment are the same pod; a rename and a flag are not;
    a pinned metadata.uid keeps the pod (in place)."""
    from tests.coreutil import MANIFESTS
    data = MANIFESTS["kube-scheduler.yaml"]
    assert manifests.pod_effect(data, _defaults_written_out(data)) == manifests.KEEPS
    assert manifests.pod_effect(data, b"# a comment\n" + data) == manifests.KEEPS
    renamed = data.replace(b"name: kube-scheduler\n  namespace", b"name: kube-scheduler2\n  namespace", 1)
    assert renamed != data and manifests.pod_effect(data, renamed) == manifests.NEW_POD
    flagged = data.replace(b"- kube-scheduler\n", b"- kube-scheduler\n    - --v=2\n", 1)
    assert flagged != data and manifests.pod_effect(data, flagged) == manifests.NEW_POD
    pinned = data.replace(b"  namespace: kube-system", b"  namespace: kube-system\n  uid: pinned-1", 1)
    assert manifests.pod_effect(pinned, pinned.replace(b"- kube-scheduler\n", b"- kube-scheduler\n    - --v=2\n", 1)) \
        == manifests.IN_PLACE
    view = podview.kubelet_view(manifests.parse_pod(data))
    assert view["spec"]["restartPolicy"] == "Always" and "status" not in view


def test_defaults_only_and_comments_only_apply_keep_the_running_pod(lab: Any, tmp_path: Any) -> None:
    """The lab's kubelet keeps the pod for both edits: cpctl writes, records, says so, exits 0 at once."""
    before = _healthy(lab)
    ids = _running_ids(lab)
    old = _read(_path(lab))
    for kind, new in (("defaults", _defaults_written_out(old)), ("comments", b"# reviewed by ops\n" + old)):
        source = os.path.join(str(tmp_path), kind + ".yaml")
        with open(source, "wb") as handle:
            handle.write(new)
        forced: tuple = ()
        if kind == "defaults":      # it also carries a field the kubelet's decoder drops: refused unless forced
            refused = run_cpctl(lab, "apply", "scheduler", "-f", source, "--reason", kind, "--settle", "1")
            assert refused.returncode == 4 and "unknown field unknownField" in refused.stderr, refused.stderr
            assert _read(_path(lab)) == old
            forced = ("--force",)
        proc = run_cpctl(lab, "apply", "scheduler", "-f", source, "--reason", kind, "--settle", "1", *forced)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "the kubelet keeps the running pod: nothing to restart" in proc.stdout, proc.stdout
        assert _read(_path(lab)) == new
    history = json.loads(run_cpctl(lab, "-o", "json", "history").stdout)["history"]
    assert [h.get("reason") for h in history if h.get("action") == "apply"][-2:] == ["defaults", "comments"]
    # the kubelet re-read the file (a re-list at least) and still runs the same pod and container
    time.sleep(FAST["file_check_frequency"] + 0.5)
    now = _healthy(lab)
    assert _hash(now) == _hash(before) and now["metadata"]["uid"] == before["metadata"]["uid"]
    assert _running_ids(lab) == ids


def test_a_pinned_uid_restarts_the_changed_container_in_place(lab: Any, tmp_path: Any) -> None:
    """metadata.uid set: the kubelet keeps the pod's UID (no new mirror pod) and restarts the
    changed container in place; cpctl waits for that new container."""
    _healthy(lab)
    old = _read(_path(lab))
    pinned = old.replace(b"  namespace: kube-system\n", b"  namespace: kube-system\n  uid: 7d1c0ffe-pinned\n", 1)
    assert pinned != old
    source = os.path.join(str(tmp_path), "pinned.yaml")
    with open(source, "wb") as handle:
        handle.write(pinned)
    first = run_cpctl(lab, "apply", "scheduler", "-f", source, "--timeout", "30", "--settle", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    before = _healthy(lab)
    assert _hash(before) == "7d1c0ffe-pinned"
    ids = _running_ids(lab)
    proc = run_cpctl(lab, "-o", "json", "flags", "scheduler", "--set", "v=2", "--timeout", "30", "--settle", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["effect"] == manifests.IN_PLACE
    now = _healthy(lab)
    assert now["metadata"]["uid"] == before["metadata"]["uid"], "the same mirror pod"
    assert _running_ids(lab).isdisjoint(ids), "a new container"

"""The pod the kubelet sees in a manifest: the object its static-pod UID is a hash of.

The kubelet's file source (pkg/kubelet/config/common.go ``tryDecodeSinglePod`` and
``applyDefaults``) decodes a manifest with the defaulting, non-strict decoder into the Go ``Pod``
struct and, when ``metadata.uid`` is empty, names the pod by ``hash.DeepHashObject`` of that struct
plus ``host:<node>`` and ``file:<path>``. ``kubernetes.io/config.hash`` is that UID. So two
manifests give the same pod exactly when their decoded, defaulted structs are equal, and
``kubelet_view`` builds a plain-data stand-in for that struct:

* nulls, unknown fields (in the types whose field list is complete here: ``KNOWN``) and a
  non-pointer field holding Go's zero value (``hostNetwork: false``, ``initialDelaySeconds: 0``,
  ``status: {}``, ``creationTimestamp: null``) are absent, as in the struct;
* the API defaults the decoder fills in (``DEFAULTS_DOC``; pkg/apis/core/v1/defaults.go) are
  written out, so writing one out by hand changes nothing.

What is not modelled errs on the side of "a new pod" (an unknown field of a type not in ``KNOWN``
counts; defaults behind feature gates such as ``resizePolicy`` are not filled in): cpctl then
waits for a restart, the pre-existing behaviour, rather than skipping a wait the kubelet needs.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple

from cpctl import catalogue
from cpctl.core.podspec import VOLUME_SOURCES, canonical

# The defaults the decoder applies that kubeadm's and operators' manifests meet (the list
# docs/verification.md shows; pkg/apis/core/v1/defaults.go SetDefaults_*).
DEFAULTS_DOC = (
    ("spec.restartPolicy", "Always", "SetDefaults_PodSpec"),
    ("spec.dnsPolicy", "ClusterFirst", "SetDefaults_PodSpec"),
    ("spec.schedulerName", catalogue.DEFAULT_SCHEDULER_NAME, "SetDefaults_PodSpec"),
    ("spec.terminationGracePeriodSeconds", "30", "SetDefaults_PodSpec"),
    ("spec.securityContext", "{}", "SetDefaults_PodSpec"),
    ("spec.enableServiceLinks", "true", "SetDefaults_PodSpec"),
    ("containers[].imagePullPolicy", "Always for :latest or no tag, else IfNotPresent", "SetDefaults_Container"),
    ("containers[].terminationMessagePath", "/dev/termination-log", "SetDefaults_Container"),
    ("containers[].terminationMessagePolicy", "File", "SetDefaults_Container"),
    ("containers[].ports[].protocol", "TCP", "SetDefaults_ContainerPort"),
    ("containers[].ports[].hostPort", "= containerPort with hostNetwork", "SetDefaults_Pod"),
    ("containers[].resources.requests", "= limits where not set", "SetDefaults_Pod"),
    ("probes timeoutSeconds/periodSeconds/successThreshold/failureThreshold", "1 / 10 / 1 / 3",
     "SetDefaults_Probe"),
    ("httpGet.path / httpGet.scheme", "/ / HTTP", "SetDefaults_HTTPGetAction"),
    ("volumes[].hostPath.type", "\"\"", "SetDefaults_HostPathVolumeSource"),
    ("volumes[] without a source", "emptyDir: {}", "SetDefaults_Volume"),
    ("volumes[].projected.defaultMode", "420 (0644)", "SetDefaults_ProjectedVolumeSource"),
    ("env[].valueFrom.fieldRef.apiVersion", "v1", "SetDefaults_ObjectFieldSelector"),
)

_VOLUME = frozenset(("name",) + VOLUME_SOURCES)

# type -> (every field of the Go struct, the fields that are pointers or structs-by-pointer:
# their zero value is NOT the same as absent). Field types for the walk: ``_CHILD``.
KNOWN: Dict[str, Tuple[FrozenSet[str], FrozenSet[str]]] = {
    "Pod": (frozenset(("apiVersion", "kind", "metadata", "spec", "status")), frozenset()),
    "ObjectMeta": (frozenset((
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
        "ownerReferences", "finalizers", "managedFields")),
        frozenset(("deletionTimestamp", "deletionGracePeriodSeconds"))),
    "PodSpec": (frozenset((
        "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
        "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork",
        "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
        "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority",
        "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
        "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims",
        "resources", "hostnameOverride")),
        frozenset(("terminationGracePeriodSeconds", "activeDeadlineSeconds", "automountServiceAccountToken",
                   "shareProcessNamespace", "securityContext", "affinity", "priority", "dnsConfig",
                   "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "setHostnameAsFQDN", "os",
                   "hostUsers", "resources", "hostnameOverride"))),
    "Container": (frozenset((
        "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
        "resizePolicy", "restartPolicy", "restartPolicyRules", "volumeMounts", "volumeDevices", "livenessProbe",
        "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy",
        "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty", "targetContainerName")),
        frozenset(("livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "securityContext",
                   "restartPolicy"))),
    "ContainerPort": (frozenset(("name", "hostPort", "containerPort", "protocol", "hostIP")), frozenset()),
    "Probe": (frozenset(("exec", "httpGet", "tcpSocket", "grpc", "initialDelaySeconds", "timeoutSeconds",
                         "periodSeconds", "successThreshold", "failureThreshold", "terminationGracePeriodSeconds")),
              frozenset(("exec", "httpGet", "tcpSocket", "grpc", "terminationGracePeriodSeconds"))),
    "HTTPGetAction": (frozenset(("path", "port", "host", "scheme", "httpHeaders")), frozenset()),
    "TCPSocketAction": (frozenset(("port", "host")), frozenset()),
    "VolumeMount": (frozenset(("name", "readOnly", "recursiveReadOnly", "mountPath", "subPath", "mountPropagation",
                               "subPathExpr")), frozenset(("recursiveReadOnly", "mountPropagation"))),
    "Volume": (_VOLUME, _VOLUME - {"name"}),
    "HostPathVolumeSource": (frozenset(("path", "type")), frozenset(("type",))),
    "EnvVar": (frozenset(("name", "value", "valueFrom")), frozenset(("valueFrom",))),
    "ResourceRequirements": (frozenset(("limits", "requests", "claims")), frozenset()),
}

# (type, field) -> the type of the object (or of each list item) it holds.
_CHILD: Dict[Tuple[str, str], str] = {
    ("Pod", "metadata"): "ObjectMeta", ("Pod", "spec"): "PodSpec",
    ("PodSpec", "containers"): "Container", ("PodSpec", "initContainers"): "Container",
    ("PodSpec", "ephemeralContainers"): "Container", ("PodSpec", "volumes"): "Volume",
    ("Container", "ports"): "ContainerPort", ("Container", "livenessProbe"): "Probe",
    ("Container", "readinessProbe"): "Probe", ("Container", "startupProbe"): "Probe",
    ("Container", "volumeMounts"): "VolumeMount", ("Container", "env"): "EnvVar",
    ("Container", "resources"): "ResourceRequirements",
    ("Probe", "httpGet"): "HTTPGetAction", ("Probe", "tcpSocket"): "TCPSocketAction",
    ("Volume", "hostPath"): "HostPathVolumeSource",
}
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _is_zero(value: object, struct: bool) -> bool:
    """Go's zero value of a non-pointer field: "", 0, false, or (``struct``) an empty struct.
    An empty map or list is kept: the decoder makes it a non-nil empty one."""
    if isinstance(value, dict):
        return struct and not value
    return not isinstance(value, (float, list)) and value in ("", 0, False)


def _strip(value: object, kind: Optional[str]) -> object:
    """``value`` (nulls already gone: ``podspec.canonical``) as the Go struct holds it: for the
    types in ``KNOWN`` no unknown fields and no zero non-pointer fields; other values as they are."""
    if isinstance(value, list):
        return [_strip(item, kind) for item in value]
    if not isinstance(value, dict) or kind not in KNOWN:
        return value
    fields, pointers = KNOWN[kind]
    out = {}
    for key, item in value.items():
        if key not in fields:
            continue
        child = _CHILD.get((kind, key))
        inner = _strip(item, child)
        if key not in pointers and _is_zero(inner, child is not None or (kind, key) == ("Pod", "status")):
            continue
        out[key] = inner
    return out


def _image_pull_policy(image: str) -> str:
    """Always when the image has no tag or the tag ``latest`` (a digest alone: IfNotPresent)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if "@" in image and not tag:
        return "IfNotPresent"
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _list(value: object) -> List[object]:
    """``value`` when it is a list, else an empty one (a decoded field of another type)."""
    return value if isinstance(value, list) else []


def _default_http(action: object) -> None:
    if isinstance(action, dict):
        action.setdefault("path", "/")
        action.setdefault("scheme", "HTTP")


def _default_probe(probe: object) -> None:
    if not isinstance(probe, dict):
        return
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                       ("failureThreshold", 3)):
        probe.setdefault(key, value)
    _default_http(probe.get("httpGet"))


def _default_container(container: Dict[str, object], host_network: bool) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = container.get("image")
    if isinstance(image, str):
        container.setdefault("imagePullPolicy", _image_pull_policy(image))
    for port in _list(container.get("ports")):
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if host_network and not port.get("hostPort") and port.get("containerPort"):
                port["hostPort"] = port["containerPort"]
    for name in _PROBES:
        _default_probe(container.get(name))
    lifecycle = container.get("lifecycle")
    for hook in lifecycle.values() if isinstance(lifecycle, dict) else ():
        if isinstance(hook, dict):
            _default_http(hook.get("httpGet"))
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, dict) else None
    if isinstance(resources, dict) and isinstance(limits, dict) and limits:
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for key, value in limits.items():
                requests.setdefault(key, value)
    for env in _list(container.get("env")):
        source = env.get("valueFrom") if isinstance(env, dict) else None
        ref = source.get("fieldRef") if isinstance(source, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _default_volume(volume: Dict[str, object]) -> None:
    if not any(key in volume for key in VOLUME_SOURCES):
        volume["emptyDir"] = {}
    host_path, projected = volume.get("hostPath"), volume.get("projected")
    if isinstance(host_path, dict):
        host_path.setdefault("type", "")
    if isinstance(projected, dict):
        projected.setdefault("defaultMode", 420)


def _apply_defaults(pod: Dict[str, object]) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for key, value in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"),
                       ("schedulerName", catalogue.DEFAULT_SCHEDULER_NAME), ("terminationGracePeriodSeconds", 30),
                       ("securityContext", {}), ("enableServiceLinks", True)):
        spec.setdefault(key, value)
    host_network = spec.get("hostNetwork") is True
    for where in _CONTAINER_LISTS:
        for container in _list(spec.get(where)):
            if isinstance(container, dict):
                _default_container(container, host_network)
    for volume in _list(spec.get("volumes")):
        if isinstance(volume, dict):
            _default_volume(volume)


def kubelet_view(pod: Mapping[str, object]) -> Dict[str, object]:
    """A decoded pod (``manifests.parse_pod``) as the kubelet's decoder leaves it: stripped as the
    Go struct holds it, then with the API defaults filled in (a new object; ``pod`` is unchanged).
    Equal views at the same path and node: the same static pod UID and config hash."""
    view = _strip(canonical(dict(pod)), "Pod")
    out: Dict[str, object] = dict(view) if isinstance(view, dict) else {}
    _apply_defaults(out)
    return out


def pinned_uid(pod: Mapping[str, object]) -> Optional[str]:
    """``metadata.uid`` when the manifest sets it: the kubelet then keeps that UID whatever else
    changes (no hash is computed, no new mirror pod; changed containers restart in place)."""
    meta = pod.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) and uid else None

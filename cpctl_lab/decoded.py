"""What the lab's kubelet hashes into a static pod's UID: the pod as the real kubelet decodes it.

pkg/kubelet/config/common.go decodes a manifest with the defaulting, non-strict decoder into the
Go ``Pod`` struct and hashes that struct (``hash.DeepHashObject``) with ``host:<node>`` and
``file:<path>`` (reference: real-node-facts.md, "What the kubelet counts as a change"). The
struct has no nulls, no unknown fields, no zero-valued non-pointer fields, and every API default
filled in (pkg/apis/core/v1/defaults.go). ``decoded_pod`` builds that object from the YAML
value, so in the lab - as on a real node - comments, written-out defaults, ``status: {}``,
``creationTimestamp: null`` or an unknown field keep the pod, and a rename gives a new one.

"Unknown" is the kubelet's release's: its Go struct has only the fields of that release, so a field
added later (``hostnameOverride`` before 1.34, ``resources`` of a PodSpec before 1.32) is dropped
like a typo - adding one to a 1.30 node's manifest gives the same pod, not a new one. ``_SINCE``
says which release added each modelled field that not every release of the lab has. It is the
lab's own list (written from the upstream API changes); a unit test checks it against the field
spans cpctl generates from upstream's OpenAPI schemas (``cpctl/core/podschema.py``), so neither can
drift from upstream unnoticed, and a bug in cpctl's reading of them is not copied into the lab.

This is the lab's own model (the product is never imported here), so a test fails when cpctl's
idea of "the same pod" differs from the kubelet's.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

# Field lists of the Go structs the lab models. A set per struct; ``*name`` marks a pointer field
# (its zero value is not "absent"), ``name:Type`` an object (or list of objects) of a modelled type.
_STRUCTS: dict[str, str] = {
    "Pod": "apiVersion kind metadata:ObjectMeta spec:PodSpec status:PodStatus",
    "PodStatus": "phase conditions message reason nominatedNodeName hostIP hostIPs podIP podIPs startTime "
                 "initContainerStatuses containerStatuses qosClass ephemeralContainerStatuses resize "
                 "resourceClaimStatuses observedGeneration",
    "ObjectMeta": "name generateName namespace selfLink uid resourceVersion generation creationTimestamp "
                  "*deletionTimestamp *deletionGracePeriodSeconds labels annotations ownerReferences finalizers "
                  "managedFields",
    "PodSpec": "volumes:Volume initContainers:Container containers:Container ephemeralContainers:Container "
               "restartPolicy *terminationGracePeriodSeconds *activeDeadlineSeconds dnsPolicy nodeSelector "
               "serviceAccountName serviceAccount *automountServiceAccountToken nodeName hostNetwork hostPID "
               "hostIPC *shareProcessNamespace *securityContext imagePullSecrets hostname subdomain *affinity "
               "schedulerName tolerations hostAliases priorityClassName *priority *dnsConfig readinessGates "
               "*runtimeClassName *enableServiceLinks *preemptionPolicy overhead topologySpreadConstraints "
               "*setHostnameAsFQDN *os *hostUsers schedulingGates resourceClaims *resources *hostnameOverride",
    "Container": "name image command args workingDir ports:ContainerPort envFrom env:EnvVar "
                 "resources:ResourceRequirements resizePolicy *restartPolicy restartPolicyRules "
                 "volumeMounts:VolumeMount volumeDevices *livenessProbe:Probe *readinessProbe:Probe "
                 "*startupProbe:Probe *lifecycle terminationMessagePath terminationMessagePolicy imagePullPolicy "
                 "*securityContext stdin stdinOnce tty targetContainerName",
    "ContainerPort": "name hostPort containerPort protocol hostIP",
    "Probe": "*exec *httpGet:HTTPGetAction *tcpSocket:TCPSocketAction *grpc initialDelaySeconds timeoutSeconds "
             "periodSeconds successThreshold failureThreshold *terminationGracePeriodSeconds",
    "HTTPGetAction": "path port host scheme httpHeaders",
    "TCPSocketAction": "port host",
    "VolumeMount": "name readOnly *recursiveReadOnly mountPath subPath *mountPropagation subPathExpr",
    "Volume": "name *hostPath:HostPathVolumeSource *emptyDir *gcePersistentDisk *awsElasticBlockStore *gitRepo "
              "*secret *nfs *iscsi *glusterfs *persistentVolumeClaim *rbd *flexVolume *cinder *cephfs *flocker "
              "*downwardAPI *fc *azureFile *configMap *vsphereVolume *quobyte *azureDisk *photonPersistentDisk "
              "*projected *portworxVolume *scaleIO *storageos *csi *ephemeral *image",
    "HostPathVolumeSource": "path *type",
    "EnvVar": "name value *valueFrom",
    "ResourceRequirements": "limits requests claims",
}


def _fields(spec: str) -> dict[str, tuple[bool, str]]:
    """name -> (is a pointer, modelled type or "")."""
    out: dict[str, tuple[bool, str]] = {}
    for word in spec.split():
        pointer = word.startswith("*")
        name, _, kind = word.lstrip("*").partition(":")
        out[name] = (pointer, kind)
    return out


#: "Type.field" -> the minor release (1.MINOR) whose Go struct first has the field; a field not
#: listed is in every release the lab models. The kubelet of an older release drops it on decode.
_SINCE: dict[str, int] = {
    "PodSpec.schedulingGates": 26, "PodSpec.resourceClaims": 26, "PodSpec.resources": 32,
    "PodSpec.hostnameOverride": 34, "Container.resizePolicy": 27, "Container.restartPolicy": 28,
    "Container.restartPolicyRules": 34, "VolumeMount.recursiveReadOnly": 30, "Volume.image": 31,
    "ResourceRequirements.claims": 26,
}

#: The newest release whose fields the lab models (``decoded_pod`` without a release).
NEWEST = 34

_FIELDS = {name: _fields(spec) for name, spec in _STRUCTS.items()}
_VOLUME_SOURCES = [name for name in _FIELDS["Volume"] if name != "name"]


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def known_in(kind: str, field: str, minor: int) -> bool:
    """Whether the Go struct ``kind`` of Kubernetes 1.``minor`` has ``field``."""
    return field in _FIELDS[kind] and _SINCE.get(f"{kind}.{field}", 0) <= minor


def _as_struct(value: Any, kind: str, minor: int) -> Any:
    """``value`` as the Go struct ``kind`` of release 1.``minor`` holds it."""
    if isinstance(value, list):
        return [_as_struct(v, kind, minor) for v in value]
    if not isinstance(value, dict):
        return value
    fields = _FIELDS[kind]
    out: Obj = {}
    for key, item in value.items():
        if not known_in(kind, key, minor):
            continue                                # unknown field (in this release): the decoder drops it
        pointer, inner = fields[key]
        if inner:
            item = _as_struct(item, inner, minor)
        if not pointer and (item == {} and (inner or key in ("metadata", "spec", "status"))
                            or (not isinstance(item, (dict, list, float)) and item in ("", 0, False))):
            continue                                # a zero non-pointer field is the same as absent
        out[key] = item
    return out


def _pull_policy(image: str) -> str:
    repo, _, digest = image.partition("@")
    last = repo.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if digest and not tag:
        return "IfNotPresent"
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _http(action: Any) -> None:
    if isinstance(action, dict):
        action.setdefault("path", "/")
        action.setdefault("scheme", "HTTP")


def _container(c: Obj, host_network: bool) -> None:
    if isinstance(c.get("image"), str):
        c.setdefault("imagePullPolicy", _pull_policy(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if host_network and not port.get("hostPort") and port.get("containerPort"):
                port["hostPort"] = port["containerPort"]
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = c.get(kind)
        if isinstance(probe, dict):
            for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                               ("failureThreshold", 3)):
                probe.setdefault(key, value)
            _http(probe.get("httpGet"))
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in lifecycle.values():
            if isinstance(hook, dict):
                _http(hook.get("httpGet"))
    res = c.get("resources")
    if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
        req = res.setdefault("requests", {})
        for key, value in res["limits"].items():
            if isinstance(req, dict):
                req.setdefault(key, value)
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _defaults(pod: Obj) -> None:
    """pkg/apis/core/v1/defaults.go: SetDefaults_Pod, _PodSpec, _Container, _ContainerPort,
    _Probe, _HTTPGetAction, _Volume, _HostPathVolumeSource, _ProjectedVolumeSource,
    _ObjectFieldSelector."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            if isinstance(c, dict):
                _container(c, spec.get("hostNetwork") is True)
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        if not any(source in vol for source in _VOLUME_SOURCES):
            vol["emptyDir"] = {}
        if isinstance(vol.get("hostPath"), dict):
            vol["hostPath"].setdefault("type", "")
        if isinstance(vol.get("projected"), dict):
            vol["projected"].setdefault("defaultMode", 420)


def known_fields(value: Any, kind: str = "Pod", minor: int = NEWEST) -> Any:
    """``value`` without the fields the kubelet of 1.``minor`` drops on decode (unknown in that
    release, in the structs the lab models), nothing else changed: what its mirror pod and its
    containers are made of (a new object)."""
    if isinstance(value, list):
        return [known_fields(v, kind, minor) for v in value]
    if not isinstance(value, dict):
        return copy.deepcopy(value)
    out: Obj = {}
    for key, item in value.items():
        if known_in(kind, key, minor):
            inner = _FIELDS[kind][key][1]
            out[key] = known_fields(item, inner, minor) if inner else copy.deepcopy(item)
    return out


def decoded_pod(raw: Obj, minor: int = NEWEST) -> Obj:
    """The decoded, defaulted pod the kubelet of Kubernetes 1.``minor`` hashes (a new object;
    ``raw`` is unchanged)."""
    pod = _as_struct(_drop_nulls(copy.deepcopy(raw)), "Pod", minor)
    _defaults(pod)
    return pod

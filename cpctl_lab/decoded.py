"""What the lab's kubelet hashes into a static pod's UID: the pod as the real kubelet decodes it.

pkg/kubelet/config/common.go decodes a manifest with the defaulting, non-strict decoder into the
Go ``Pod`` struct and hashes that struct (``hash.DeepHashObject``) with ``host:<node>`` and
``file:<path>`` (reference: real-node-facts.md, "What the kubelet counts as a change"). The
struct has no nulls, no unknown fields, no zero-valued non-pointer fields, and every API default
filled in (pkg/apis/core/v1/defaults.go). ``decoded_pod`` builds that object from the YAML
value, so in the lab - as on a real node - comments, written-out defaults, ``status: {}``,
``creationTimestamp: null`` or an unknown field keep the pod, and a rename gives a new one.

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


_FIELDS = {name: _fields(spec) for name, spec in _STRUCTS.items()}
_VOLUME_SOURCES = [name for name in _FIELDS["Volume"] if name != "name"]


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _as_struct(value: Any, kind: str) -> Any:
    """``value`` as the Go struct ``kind`` holds it."""
    if isinstance(value, list):
        return [_as_struct(v, kind) for v in value]
    if not isinstance(value, dict):
        return value
    fields = _FIELDS[kind]
    out: Obj = {}
    for key, item in value.items():
        if key not in fields:
            continue                                # unknown field: the decoder drops it
        pointer, inner = fields[key]
        if inner:
            item = _as_struct(item, inner)
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


def decoded_pod(raw: Obj) -> Obj:
    """The decoded, defaulted pod the kubelet hashes (a new object; ``raw`` is unchanged)."""
    pod = _as_struct(_drop_nulls(copy.deepcopy(raw)), "Pod")
    _defaults(pod)
    return pod

"""The field names of a v1 Pod, as the API defines them: a typo in a manifest cpctl writes or
applies (``volumeMount:``, ``resourcez:``) is a doubt with the nearest known name.

The kubelet's file source decodes a static pod leniently: an unknown field is dropped without a
word (``kubectl apply --validate=strict`` would warn), so a mount spelled ``volumeMount`` is simply
not there and the component crash-loops on a missing file. This module walks a decoded pod along
the types of the core/v1 API (``k8s.io/api/core/v1/types.go``) that a static pod can use, up to
Kubernetes 1.34, and names every key that no field of its type has. Types cpctl does not describe
(affinity, topology spread, resource claims...) are not walked: only known names are judged.

A field a newer release added is not known here: the finding is a *doubt* (``checks.sanity_doubts``),
refused unless ``--force``, as flag names are. Operator side only: the agent on a master never
imports it.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Mapping, Optional, Tuple

#: type name -> {field name: the field's type name (walked), or None (not walked)}. A type name in
#: brackets is a list of that type; "map" is a string map.
TYPES: Dict[str, Dict[str, Optional[str]]] = {
    "Pod": {"apiVersion": None, "kind": None, "metadata": "ObjectMeta", "spec": "PodSpec", "status": None},
    "ObjectMeta": {
        "name": None, "generateName": None, "namespace": None, "selfLink": None, "uid": None,
        "resourceVersion": None, "generation": None, "creationTimestamp": None, "deletionTimestamp": None,
        "deletionGracePeriodSeconds": None, "labels": None, "annotations": None, "ownerReferences": None,
        "finalizers": None, "managedFields": None,
    },
    "PodSpec": {
        "volumes": "[Volume]", "initContainers": "[Container]", "containers": "[Container]",
        "ephemeralContainers": None, "restartPolicy": None, "terminationGracePeriodSeconds": None,
        "activeDeadlineSeconds": None, "dnsPolicy": None, "nodeSelector": None, "serviceAccountName": None,
        "serviceAccount": None, "automountServiceAccountToken": None, "nodeName": None, "hostNetwork": None,
        "hostPID": None, "hostIPC": None, "shareProcessNamespace": None, "securityContext": "PodSecurityContext",
        "imagePullSecrets": None, "hostname": None, "subdomain": None, "affinity": None, "schedulerName": None,
        "tolerations": "[Toleration]", "hostAliases": None, "priorityClassName": None, "priority": None,
        "dnsConfig": None, "readinessGates": None, "runtimeClassName": None, "enableServiceLinks": None,
        "preemptionPolicy": None, "overhead": None, "topologySpreadConstraints": None,
        "setHostnameAsFQDN": None, "os": None, "hostUsers": None, "schedulingGates": None,
        "resourceClaims": None, "resources": "ResourceRequirements", "hostnameOverride": None,
    },
    "Container": {
        "name": None, "image": None, "command": None, "args": None, "workingDir": None,
        "ports": "[ContainerPort]", "envFrom": None, "env": "[EnvVar]", "resources": "ResourceRequirements",
        "resizePolicy": None, "restartPolicy": None, "restartPolicyRules": None,
        "volumeMounts": "[VolumeMount]", "volumeDevices": None,
        "livenessProbe": "Probe", "readinessProbe": "Probe", "startupProbe": "Probe", "lifecycle": None,
        "terminationMessagePath": None, "terminationMessagePolicy": None, "imagePullPolicy": None,
        "securityContext": "SecurityContext", "stdin": None, "stdinOnce": None, "tty": None,
    },
    "VolumeMount": {"name": None, "readOnly": None, "recursiveReadOnly": None, "mountPath": None, "subPath": None,
                    "mountPropagation": None, "subPathExpr": None},
    "Volume": {
        "name": None, "hostPath": "HostPathVolumeSource", "emptyDir": None, "secret": None, "configMap": None,
        "projected": None, "downwardAPI": None, "persistentVolumeClaim": None, "csi": None, "ephemeral": None,
        "image": None, "nfs": None, "iscsi": None, "fc": None, "gcePersistentDisk": None,
        "awsElasticBlockStore": None, "gitRepo": None, "glusterfs": None, "rbd": None, "flexVolume": None,
        "cinder": None, "cephfs": None, "flocker": None, "azureFile": None, "vsphereVolume": None, "quobyte": None,
        "azureDisk": None, "photonPersistentDisk": None, "portworxVolume": None, "scaleIO": None, "storageos": None,
    },
    "HostPathVolumeSource": {"path": None, "type": None},
    "ContainerPort": {"name": None, "hostPort": None, "containerPort": None, "protocol": None, "hostIP": None},
    "EnvVar": {"name": None, "value": None, "valueFrom": None},
    "ResourceRequirements": {"limits": None, "requests": None, "claims": None},
    "Probe": {
        "exec": "ExecAction", "httpGet": "HTTPGetAction", "tcpSocket": "TCPSocketAction", "grpc": None,
        "initialDelaySeconds": None, "timeoutSeconds": None, "periodSeconds": None, "successThreshold": None,
        "failureThreshold": None, "terminationGracePeriodSeconds": None,
    },
    "ExecAction": {"command": None},
    "HTTPGetAction": {"path": None, "port": None, "host": None, "scheme": None, "httpHeaders": None},
    "TCPSocketAction": {"port": None, "host": None},
    "SecurityContext": {
        "capabilities": None, "privileged": None, "seLinuxOptions": None, "windowsOptions": None,
        "runAsUser": None, "runAsGroup": None, "runAsNonRoot": None, "readOnlyRootFilesystem": None,
        "allowPrivilegeEscalation": None, "procMount": None, "seccompProfile": "SeccompProfile",
        "appArmorProfile": None,
    },
    "PodSecurityContext": {
        "seLinuxOptions": None, "windowsOptions": None, "runAsUser": None, "runAsGroup": None,
        "runAsNonRoot": None, "supplementalGroups": None, "supplementalGroupsPolicy": None, "fsGroup": None,
        "sysctls": None, "fsGroupChangePolicy": None, "seccompProfile": "SeccompProfile", "appArmorProfile": None,
        "seLinuxChangePolicy": None,
    },
    "SeccompProfile": {"type": None, "localhostProfile": None},
    "Toleration": {"key": None, "operator": None, "value": None, "effect": None, "tolerationSeconds": None},
}


def unknown_fields(pod: Mapping[str, object]) -> List[Tuple[str, str, List[str]]]:
    """(where, the unknown key, the nearest known names) for every key of ``pod`` that its type
    does not have; ``where`` is the path of the object that holds it (``spec.containers[0]``)."""
    return list(_walk(pod, "Pod", ""))


def doubts(pod: Mapping[str, object]) -> List[str]:
    """One sentence per unknown field, with the nearest known name: ``spec.containers[0]: unknown
    field volumeMount (did you mean volumeMounts?): the kubelet drops it without a word``."""
    found = []
    for where, key, close in unknown_fields(pod):
        found.append("%s: unknown field %s%s: the kubelet drops it without a word" % (
            where or "the pod", key, " (did you mean %s?)" % close[0] if close else ""))
    return found


def _walk(value: object, type_name: str, where: str) -> Iterator[Tuple[str, str, List[str]]]:
    if type_name.startswith("["):
        if isinstance(value, list):
            for index, item in enumerate(value):
                yield from _walk(item, type_name[1:-1], "%s[%d]" % (where, index))
        return
    fields = TYPES[type_name]
    if not isinstance(value, Mapping):
        return
    for key, item in value.items():
        key_text = str(key)
        if key_text not in fields:
            yield where, key_text, _close(key_text, fields)
            continue
        inner = fields[key_text]
        if inner is not None:
            yield from _walk(item, inner, "%s.%s" % (where, key_text) if where else key_text)


def _close(key: str, known: Mapping[str, object]) -> List[str]:
    """The known names ``key`` is probably a typo of: difflib's, and a case-insensitive match first
    (``volumemounts``)."""
    import difflib
    same = [name for name in known if name.lower() == key.lower()]
    return same + [name for name in difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6) if name not in same]

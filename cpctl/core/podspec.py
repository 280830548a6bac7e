"""The kubelet's checks of a decoded static pod, so that cpctl calls valid what the kubelet runs.

The kubelet's file source (pkg/kubelet/config/common.go, ``tryDecodeSinglePod``) decodes a
manifest into the typed ``v1.Pod`` (a field of the wrong type fails the decode; unknown fields are
dropped), applies the API defaults, requires a name, runs ``ValidatePodCreate``
(pkg/apis/core/validation) and, for static pods, refuses references to API objects
(``HasAPIObjectReference``, pkg/api/pod/util.go): a ServiceAccount, a ConfigMap, a Secret, a
ClusterTrustBundle, a ResourceClaim, a PersistentVolumeClaim, a CSI driver. This module re-states
the rules that matter for control-plane manifests - it is not a copy of the API server's
validation, and rules it does not know are not checked (the kubelet stays the last word).

Two results, both from ``validate``:

* the pod, type-checked against the fields cpctl and the kubelet rely on, so that code reading
  ``spec.containers[0].command`` later can trust it is a list of strings (an integral float such
  as ``10.0`` in an integer field is stored as ``10``, as the JSON round trip the kubelet makes
  does);
* ``InvalidPod`` with the kubelet's kind of message: ``field.path: problem`` lines.

``canonical`` gives the pod in a form whose equality means "the kubelet decodes the same pod"
(see ``cpctl.core.manifests.decoded_digest``).
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from cpctl.probes.shape import kind_of

if TYPE_CHECKING:
    from decimal import Decimal

# --- errors --------------------------------------------------------------------------------------

MAX_REPORTED_ERRORS = 5


class InvalidPod(ValueError):
    """The decoded pod fails a kubelet check; ``errors`` are ``field: problem`` lines."""

    def __init__(self, errors: List[str], prefix: str = "invalid pod: ") -> None:
        shown = errors[:MAX_REPORTED_ERRORS]
        more = len(errors) - len(shown)
        text = ", ".join(shown) + (", and %d more" % more if more > 0 else "")
        super().__init__(prefix + ("[%s]" % text if prefix else text))
        self.errors = errors


def shown(value: object, limit: int = 60) -> str:
    """A value as an error message quotes it: JSON-quoted, one line, at most ``limit`` characters."""
    if isinstance(value, (dict, list)):
        return type_name(value)
    text = json.dumps(value, ensure_ascii=True) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def path_key(key: str) -> str:
    """A mapping key as a field path shows it: as it is when plain, else quoted on one line."""
    return key if len(key) <= 63 and key.isprintable() and "]" not in key else shown(key)


def type_name(value: object) -> str:
    """How a message about a manifest names the type of a decoded value (YAML's words)."""
    return kind_of(value, yaml=True)


def _required(path: str, detail: str = "") -> str:
    return "%s: Required value%s" % (path, ": " + detail if detail else "")


def _invalid(path: str, value: object, detail: str) -> str:
    return "%s: Invalid value: %s: %s" % (path, shown(value), detail)


def _unsupported(path: str, value: object, supported: Tuple[str, ...]) -> str:
    return "%s: Unsupported value: %s: supported values: %s" % (
        path, shown(value), ", ".join('"%s"' % s for s in supported))


def _duplicate(path: str, value: object) -> str:
    return "%s: Duplicate value: %s" % (path, shown(value))


def _forbidden(path: str, detail: str) -> str:
    return "%s: Forbidden: %s" % (path, detail)


# --- the typed shape: which fields the decode checks ---------------------------------------------
# A field type is a scalar name, ("list", T), ("map", T) (string keys) or ("obj", SCHEMA). ANY is
# not checked (cpctl does not read it and the kubelet's own decode is the judge). Fields missing
# from a schema are not checked either: the kubelet drops fields it does not know.

#: A field type: a scalar name, or ("list", item type), ("map", value type), ("obj", schema name).
FieldType = Union[str, Tuple[str, "FieldType"]]
STR, BOOL, INT32, INT64, INTSTR, QUANTITY, TIME, ANY = "str", "bool", "int32", "int64", "intstr", "quantity", \
    "time", "any"


def _list(item: FieldType) -> FieldType:
    return ("list", item)


def _map(item: FieldType) -> FieldType:
    return ("map", item)


def _obj(name: str) -> FieldType:
    return ("obj", name)


_REF: Dict[str, FieldType] = {"name": STR, "key": STR, "optional": BOOL}
_HANDLER: Dict[str, FieldType] = {"exec": _obj("ExecAction"), "httpGet": _obj("HTTPGetAction"),
                             "tcpSocket": _obj("TCPSocketAction")}
SCHEMAS: Dict[str, Dict[str, FieldType]] = {
    "Pod": {"apiVersion": STR, "kind": STR, "metadata": _obj("ObjectMeta"), "spec": _obj("PodSpec"), "status": ANY},
    "ObjectMeta": {
        "name": STR, "generateName": STR, "namespace": STR, "uid": STR, "resourceVersion": STR,
        "generation": INT64, "labels": _map(STR), "annotations": _map(STR), "creationTimestamp": TIME,
        "deletionTimestamp": TIME, "deletionGracePeriodSeconds": INT64, "finalizers": _list(STR),
        "ownerReferences": ANY, "managedFields": ANY},
    "PodSpec": {
        "containers": _list(_obj("Container")), "initContainers": _list(_obj("Container")),
        "ephemeralContainers": _list(_obj("Container")), "volumes": _list(_obj("Volume")),
        "restartPolicy": STR, "terminationGracePeriodSeconds": INT64, "activeDeadlineSeconds": INT64,
        "dnsPolicy": STR, "dnsConfig": _obj("PodDNSConfig"), "nodeSelector": _map(STR),
        "serviceAccountName": STR, "serviceAccount": STR, "automountServiceAccountToken": BOOL, "nodeName": STR,
        "hostNetwork": BOOL, "hostPID": BOOL, "hostIPC": BOOL, "shareProcessNamespace": BOOL, "hostUsers": BOOL,
        "securityContext": _obj("PodSecurityContext"), "imagePullSecrets": _list(_obj("LocalObjectReference")),
        "hostname": STR, "subdomain": STR, "affinity": ANY, "schedulerName": STR,
        "tolerations": _list(_obj("Toleration")), "hostAliases": ANY, "priorityClassName": STR, "priority": INT32,
        "readinessGates": ANY, "runtimeClassName": STR, "enableServiceLinks": BOOL, "preemptionPolicy": STR,
        "overhead": _map(QUANTITY), "topologySpreadConstraints": ANY, "setHostnameAsFQDN": BOOL, "os": ANY,
        "schedulingGates": ANY, "resourceClaims": ANY, "resources": _obj("ResourceRequirements")},
    "PodDNSConfig": {"nameservers": _list(STR), "searches": _list(STR), "options": ANY},
    "PodSecurityContext": {
        "runAsUser": INT64, "runAsGroup": INT64, "runAsNonRoot": BOOL, "supplementalGroups": _list(INT64),
        "fsGroup": INT64, "seccompProfile": _obj("SeccompProfile"), "seLinuxOptions": ANY, "sysctls": ANY,
        "windowsOptions": ANY, "fsGroupChangePolicy": STR, "appArmorProfile": ANY},
    "SecurityContext": {
        "capabilities": _obj("Capabilities"), "privileged": BOOL, "runAsUser": INT64, "runAsGroup": INT64,
        "runAsNonRoot": BOOL, "readOnlyRootFilesystem": BOOL, "allowPrivilegeEscalation": BOOL, "procMount": STR,
        "seccompProfile": _obj("SeccompProfile"), "seLinuxOptions": ANY, "windowsOptions": ANY,
        "appArmorProfile": ANY},
    "Capabilities": {"add": _list(STR), "drop": _list(STR)},
    "SeccompProfile": {"type": STR, "localhostProfile": STR},
    "LocalObjectReference": {"name": STR},
    "Toleration": {"key": STR, "operator": STR, "value": STR, "effect": STR, "tolerationSeconds": INT64},
    "Container": {
        "name": STR, "image": STR, "command": _list(STR), "args": _list(STR), "workingDir": STR,
        "ports": _list(_obj("ContainerPort")), "envFrom": _list(_obj("EnvFromSource")),
        "env": _list(_obj("EnvVar")), "resources": _obj("ResourceRequirements"), "resizePolicy": ANY,
        "restartPolicy": STR, "volumeMounts": _list(_obj("VolumeMount")), "volumeDevices": ANY,
        "livenessProbe": _obj("Probe"), "readinessProbe": _obj("Probe"), "startupProbe": _obj("Probe"),
        "lifecycle": _obj("Lifecycle"), "terminationMessagePath": STR, "terminationMessagePolicy": STR,
        "imagePullPolicy": STR, "securityContext": _obj("SecurityContext"), "stdin": BOOL, "stdinOnce": BOOL,
        "tty": BOOL, "targetContainerName": STR},
    "ContainerPort": {"name": STR, "hostPort": INT32, "containerPort": INT32, "protocol": STR, "hostIP": STR},
    "EnvVar": {"name": STR, "value": STR, "valueFrom": _obj("EnvVarSource")},
    "EnvVarSource": {"fieldRef": _obj("ObjectFieldSelector"), "resourceFieldRef": _obj("ResourceFieldSelector"),
                     "configMapKeyRef": _obj("KeyRef"), "secretKeyRef": _obj("KeyRef"), "fileKeyRef": ANY},
    "ObjectFieldSelector": {"apiVersion": STR, "fieldPath": STR},
    "ResourceFieldSelector": {"containerName": STR, "resource": STR, "divisor": QUANTITY},
    "KeyRef": _REF,
    "EnvFromSource": {"prefix": STR, "configMapRef": _obj("KeyRef"), "secretRef": _obj("KeyRef")},
    "ResourceRequirements": {"limits": _map(QUANTITY), "requests": _map(QUANTITY), "claims": ANY},
    "VolumeMount": {"name": STR, "readOnly": BOOL, "mountPath": STR, "subPath": STR, "mountPropagation": STR,
                    "subPathExpr": STR, "recursiveReadOnly": STR},
    "Probe": dict(_HANDLER, grpc=_obj("GRPCAction"), initialDelaySeconds=INT32, timeoutSeconds=INT32,
                  periodSeconds=INT32, successThreshold=INT32, failureThreshold=INT32,
                  terminationGracePeriodSeconds=INT64),
    "Lifecycle": {"postStart": _obj("LifecycleHandler"), "preStop": _obj("LifecycleHandler"), "stopSignal": STR},
    "LifecycleHandler": dict(_HANDLER, sleep=_obj("SleepAction")),
    "SleepAction": {"seconds": INT64},
    "ExecAction": {"command": _list(STR)},
    "HTTPGetAction": {"path": STR, "port": INTSTR, "host": STR, "scheme": STR,
                      "httpHeaders": _list(_obj("HTTPHeader"))},
    "HTTPHeader": {"name": STR, "value": STR},
    "TCPSocketAction": {"port": INTSTR, "host": STR},
    "GRPCAction": {"port": INT32, "service": STR},
    "Volume": {"name": STR, "hostPath": _obj("HostPathVolumeSource"), "emptyDir": _obj("EmptyDirVolumeSource"),
               "projected": _obj("ProjectedVolumeSource")},
    "HostPathVolumeSource": {"path": STR, "type": STR},
    "EmptyDirVolumeSource": {"medium": STR, "sizeLimit": QUANTITY},
    "ProjectedVolumeSource": {"sources": _list(_map(ANY)), "defaultMode": INT32},
}

# Every volume source the API knows (pkg/apis/core/types.go VolumeSource); a key not listed is an
# unknown field the kubelet drops, and a volume without a source defaults to an emptyDir.
VOLUME_SOURCES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image")

_INT_RANGES = {INT32: (-(1 << 31), (1 << 31) - 1), INT64: (-(1 << 63), (1 << 63) - 1)}
# (compiled on first use, through re's cache: kubeadm's manifests carry no such field)
_RFC3339 = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
            r"([Zz]|[+-][0-9]{2}:[0-9]{2})")


class _TypeError(Exception):
    """A value of the wrong type: the kubelet's JSON decode stops at the first one."""


def _as_int(value: object, kind: str, path: str) -> int:
    """An integer field of ``kind`` (INT32 or INT64): an int, or an integral float below 1e21 (the
    kubelet's YAML-to-JSON step writes it as digits), within the range of the kind."""
    number: Optional[int] = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        number = int(value)
    if number is None:
        raise _wrong(path, "an integer", value)
    low, high = _INT_RANGES[kind]
    if not low <= number <= high:
        raise _TypeError("%s: %s does not fit in an %s" % (path, number, kind))
    return number


def _wrong(path: str, wanted: str, value: object) -> _TypeError:
    """The decode error for a value of another type: what was wanted, what was found."""
    found = type_name(value)
    if not isinstance(value, (dict, list)) and value is not None:
        found += " (%s)" % shown(value)
    return _TypeError("%s: must be %s, not %s" % (path, wanted, found))


def _scalar(value: object, kind: str, path: str) -> object:
    """Check (and normalise) one scalar field; raises _TypeError."""
    if kind == STR:
        if not isinstance(value, str):
            raise _wrong(path, "a string", value)
        return value
    if kind == BOOL:
        if not isinstance(value, bool):
            raise _wrong(path, "true or false", value)
        return value
    if kind in (INT32, INT64):
        return _as_int(value, kind, path)
    if kind == INTSTR:
        return value if isinstance(value, str) else _as_int(value, INT32, path)
    if kind == QUANTITY:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not is_quantity(value):
            raise _TypeError("%s: quantities must match the regular expression "
                             "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (%s)" % (path, shown(value)))
        return value
    if kind == TIME:
        if not isinstance(value, str) or not re.fullmatch(_RFC3339, value):
            raise _wrong(path, "an RFC 3339 time or null", value)
        return value
    return value


_ZERO: Mapping[str, object] = {STR: "", BOOL: False, INT32: 0, INT64: 0, INTSTR: 0, QUANTITY: "0"}


def _zero(kind: FieldType) -> object:
    """What Go's decode makes of a null list item or map value of ``kind``: the zero value (a null
    struct field, by contrast, stays null here: it reads as absent)."""
    if isinstance(kind, tuple):
        return {} if kind[0] == "obj" else None
    return _ZERO.get(kind)


def _typed(value: object, kind: FieldType, path: str) -> object:
    """``value`` checked against ``kind``: the normalised value, or _TypeError. A null field is
    left null (absent); a null list item or map value becomes its type's zero value, as in Go."""
    if value is None or kind == ANY:
        return value
    if isinstance(kind, str):
        return _scalar(value, kind, path)
    shape, inner = kind
    if shape == "list":
        if not isinstance(value, list):
            raise _wrong(path, "a list", value)
        for index, item in enumerate(value):
            value[index] = _zero(inner) if item is None else _typed(item, inner, "%s[%d]" % (path, index))
        return value
    if not isinstance(value, dict):
        raise _wrong(path, "a mapping", value)
    if shape == "map":
        for key, item in value.items():
            value[key] = _zero(inner) if item is None else _typed(item, inner, "%s[%s]" % (path, path_key(key)))
        return value
    for key, field_type in _schema(kind).items():
        if key in value:
            value[key] = _typed(value[key], field_type, _child(path, key))
    return value


def _schema(kind: FieldType) -> Dict[str, FieldType]:
    """The fields of an ("obj", name) type."""
    name = kind[1] if isinstance(kind, tuple) else kind
    return SCHEMAS[name] if isinstance(name, str) else {}


def _child(path: str, key: str) -> str:
    return "%s.%s" % (path, key) if path else key


def check_types(pod: Mapping[str, object]) -> None:
    """Raise InvalidPod (one message, as the kubelet's decode stops at the first) for a field of the
    wrong type; integral floats in integer fields become ints."""
    try:
        _typed(pod, _obj("Pod"), "")
    except _TypeError as exc:
        raise InvalidPod([str(exc)], prefix="cannot decode the pod: ") from None


# --- names ---------------------------------------------------------------------------------------

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_PORT_NAME = r"[-a-z0-9]+"     # compiled on first use (re's cache): kubeadm names no port
_LABEL_TEXT = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
               "start and end with an alphanumeric character")
_SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                   "'.', and must start and end with an alphanumeric character")


def dns_label_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a DNS-1123 label (container, volume, namespace names), or None."""
    if len(name) > 63:
        return "must be no more than 63 characters"
    return None if _LABEL.fullmatch(name) else _LABEL_TEXT


def dns_subdomain_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a DNS-1123 subdomain, or None."""
    if len(name) > 253:
        return "must be no more than 253 characters"
    return None if _SUBDOMAIN.fullmatch(name) else _SUBDOMAIN_TEXT


def qualified_name_problem(name: str) -> Optional[str]:
    """Why ``name`` is not a label/annotation key (``[prefix/]name``), or None."""
    prefix, _, base = name.rpartition("/")
    if "/" in name and (not prefix or dns_subdomain_problem(prefix)):
        return "prefix part " + (dns_subdomain_problem(prefix) or "must be non-empty")
    if not base:
        return "name part must be non-empty"
    if len(base) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED.fullmatch(base):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                "an alphanumeric character")
    return None


def port_name_problem(name: str) -> Optional[str]:
    """Why ``name`` is not an IANA service name (a named port), or None."""
    if len(name) > 15:
        return "must be no more than 15 characters"
    if not re.fullmatch(_PORT_NAME, name):
        return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    if "--" in name:
        return "must not contain consecutive hyphens"
    if not re.search("[a-z]", name):
        return "must contain at least one letter (a-z)"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with a hyphen"
    return None


def _name_errors(path: str, name: str, problem: Callable[[str], Optional[str]]) -> List[str]:
    why = problem(name)
    return [_invalid(path, name, why)] if why else []


# --- quantities ----------------------------------------------------------------------------------

_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
# (The fractions as text: ``decimal`` is imported on the first quantity, not with this module.)
_SUFFIX: Dict[str, Union[int, str]] = {
    "": 1, "n": "1e-9", "u": "1e-6", "m": "1e-3", "k": 10 ** 3, "M": 10 ** 6,
    "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30,
    "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}


def _quantity_parts(value: Union[str, int, float]) -> Optional[Tuple[str, str]]:
    """(number, suffix) of a resource quantity's text, None when it is not one."""
    text = value.strip() if isinstance(value, str) else repr(value)
    match = _QUANTITY.fullmatch(text) if len(text) <= 64 else None
    return (match.group(1), match.group(2) or "") if match else None


def is_quantity(value: Union[str, int, float]) -> bool:
    """``parse_quantity(value) is not None``, with ``decimal`` imported only for an exponent (the
    one form whose amount can be out of range): kubeadm's ``250m`` and ``1Gi`` always have one."""
    parts = _quantity_parts(value)
    if parts is None:
        return False
    return parse_quantity(value) is not None if parts[1][:1] in ("e", "E") else True


def _negative(value: Union[str, int, float]) -> bool:
    """``parse_quantity(value) < 0`` for a quantity, without ``decimal`` unless it has an exponent:
    the suffix's factor is positive, so the sign is the number's (``-0.0`` is not below 0)."""
    parts = _quantity_parts(value)
    if parts is None:
        return False
    if parts[1][:1] in ("e", "E"):
        amount = parse_quantity(value)
        return amount is not None and amount < 0
    return parts[0].startswith("-") and any(c in "123456789" for c in parts[0])


def parse_quantity(value: Union[str, int, float]) -> Optional[Decimal]:
    """The amount a resource quantity (``250m``, ``1Gi``, ``1e3``, ``2``) stands for, or None."""
    parts = _quantity_parts(value)
    if parts is None:
        return None
    from decimal import Decimal
    try:
        number, suffix = Decimal(parts[0]), parts[1]
        if suffix[:1] in ("e", "E"):
            return number * Decimal(10) ** int(suffix[1:])
        factor = _SUFFIX[suffix]
        return number * (Decimal(factor) if isinstance(factor, str) else factor)
    except (ArithmeticError, ValueError):          # decimal's Overflow and InvalidOperation included
        return None


# --- ValidatePodCreate, the parts that matter for static pods -----------------------------------

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
PROTOCOLS = ("SCTP", "TCP", "UDP")
SCHEMES = ("HTTP", "HTTPS")
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice")
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")
MOUNT_PROPAGATIONS = ("Bidirectional", "HostToContainer", "None")
FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations",
               "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
               "status.podIPs")
_FIELD_PATH_KEYED = r"metadata\.(labels|annotations)\['[^']+'\]"   # compiled on first use (re's cache)
CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
ANNOTATIONS_MAX_BYTES = 256 << 10
NAME_SUFFIX = "-node"   # the kubelet validates "<name>-<node name>"; a stand-in node name


def _mapping(value: object) -> Mapping[str, object]:
    """A decoded object field: the mapping, or an empty one when absent (or not a mapping)."""
    return value if isinstance(value, dict) else {}


def _items(value: object) -> List[object]:
    """A decoded list field: the list, or an empty one when absent (or not a list)."""
    return value if isinstance(value, list) else []


def _text(value: object) -> str:
    """A string field after ``check_types``: the string, "" when absent or null."""
    return value if isinstance(value, str) else ""


def _int(value: object) -> int:
    """An integer field after ``check_types`` (which made integral floats ints): 0 when absent or null."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def validate_metadata(meta: Mapping[str, object]) -> List[str]:
    """metadata: the pod name (as "<name>-<node>"), namespace, labels and annotations."""
    errors: List[str] = []
    name = _text(meta.get("name"))
    if not name:
        errors.append(_required("metadata.name", "name is needed for the pod"))
    else:
        why = dns_subdomain_problem(name + NAME_SUFFIX)
        if why:
            errors.append(_invalid("metadata.name", name, why + " (the kubelet checks the name + \"-<node name>\")"))
    namespace = _text(meta.get("namespace"))
    if namespace:
        errors += _name_errors("metadata.namespace", namespace, dns_label_problem)
    errors += label_errors("metadata.labels", _mapping(meta.get("labels")))
    annotations = _mapping(meta.get("annotations"))
    for key in annotations:
        errors += _name_errors("metadata.annotations", key.lower(), qualified_name_problem)
    size = sum(len(k) + len(_text(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        errors.append("metadata.annotations: Too long: may not be more than %d bytes" % ANNOTATIONS_MAX_BYTES)
    return errors


def label_errors(path: str, labels: Mapping[str, object]) -> List[str]:
    """Label keys (qualified names) and values (63 characters, alphanumeric ends): labels and nodeSelector."""
    errors: List[str] = []
    for key, value in labels.items():
        errors += _name_errors(path, key, qualified_name_problem)
        text = _text(value)
        if len(text) > 63 or not _LABEL_VALUE.fullmatch(text):
            errors.append(_invalid("%s[%s]" % (path, path_key(key)), text, "a valid label value must be 63 "
                                   "characters or less and be empty or begin and end with an alphanumeric character"))
    return errors


def validate_spec(spec: Mapping[str, object]) -> List[str]:
    """spec: containers, volumes and the pod-wide settings."""
    volumes, errors = validate_volumes(_items(spec.get("volumes")))
    containers, init = _items(spec.get("containers")), _items(spec.get("initContainers"))
    if not containers:
        errors.append(_required("spec.containers"))
    seen = set()
    for kind, group in (("containers", containers), ("initContainers", init)):
        for index, container in enumerate(group):
            path = "spec.%s[%d]" % (kind, index)
            errors += validate_container(_mapping(container), path, volumes, kind == "initContainers")
            name = _mapping(container).get("name") or ""
            if name and name in seen:
                errors.append(_duplicate(path + ".name", name))
            seen.add(name)
    if _items(spec.get("ephemeralContainers")):
        errors.append(_forbidden("spec.ephemeralContainers", "cannot be set on create"))
    host_network = spec.get("hostNetwork") is True
    errors += _host_port_errors("spec.initContainers", init, host_network, conflicts=False)
    errors += _host_port_errors("spec.containers", containers, host_network, conflicts=True)
    errors += _policy_errors(spec)
    errors += _toleration_errors(_items(spec.get("tolerations")))
    errors += label_errors("spec.nodeSelector", _mapping(spec.get("nodeSelector")))
    return errors


def _policy_errors(spec: Mapping[str, object]) -> List[str]:
    """restartPolicy, dnsPolicy, preemptionPolicy values; the deadline and the names of spec."""
    errors: List[str] = []
    for key, allowed in (("restartPolicy", RESTART_POLICIES), ("dnsPolicy", DNS_POLICIES),
                         ("preemptionPolicy", PREEMPTION_POLICIES)):
        value = spec.get(key)
        if value and value not in allowed:
            errors.append(_unsupported("spec." + key, value, allowed))
    if spec.get("dnsPolicy") == "None" and not _items(_mapping(spec.get("dnsConfig")).get("nameservers")):
        errors.append(_required("spec.dnsConfig", "must provide `dnsConfig` when `dnsPolicy` is None"))
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not 1 <= deadline <= (1 << 31) - 1:
        errors.append(_invalid("spec.activeDeadlineSeconds", deadline, "must be between 1 and 2147483647, inclusive"))
    for key, problem in (("hostname", dns_label_problem), ("subdomain", dns_label_problem),
                         ("schedulerName", dns_subdomain_problem), ("priorityClassName", dns_subdomain_problem),
                         ("runtimeClassName", dns_subdomain_problem)):
        if spec.get(key):
            errors += _name_errors("spec." + key, _text(spec[key]), problem)
    return errors


def _toleration_errors(tolerations: List[object]) -> List[str]:
    """Toleration keys, operators (Exists takes no value) and effects."""
    errors: List[str] = []
    for index, item in enumerate(tolerations):
        toleration, path = _mapping(item), "spec.tolerations[%d]" % index
        key, operator, effect = _text(toleration.get("key")), _text(toleration.get("operator")), \
            _text(toleration.get("effect"))
        if key:
            errors += _name_errors(path + ".key", key, qualified_name_problem)
        elif operator != "Exists":
            errors.append(_invalid(path + ".operator", operator, "operator must be Exists when `key` is empty"))
        if operator and operator not in TOLERATION_OPERATORS:
            errors.append(_unsupported(path + ".operator", operator, TOLERATION_OPERATORS))
        if operator == "Exists" and toleration.get("value"):
            errors.append(_invalid(path + ".operator", toleration["value"],
                                   "value must be empty when `operator` is 'Exists'"))
        if effect and effect not in TAINT_EFFECTS:
            errors.append(_unsupported(path + ".effect", effect, TAINT_EFFECTS))
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            errors.append(_invalid(path + ".effect", effect,
                                   "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    return errors


def validate_volumes(volumes: List[object]) -> Tuple[Dict[str, Mapping[str, object]], List[str]]:
    """(name -> volume, errors): names, exactly one source each, hostPath paths and types."""
    named: Dict[str, Mapping[str, object]] = {}
    errors: List[str] = []
    for index, item in enumerate(volumes):
        volume, path = _mapping(item), "spec.volumes[%d]" % index
        name = _text(volume.get("name"))
        if not name:
            errors.append(_required(path + ".name"))
        else:
            errors += _name_errors(path + ".name", name, dns_label_problem)
            if name in named:
                errors.append(_duplicate(path + ".name", name))
            named[name] = volume
        sources = [s for s in VOLUME_SOURCES if volume.get(s) is not None]
        if len(sources) > 1:
            errors.append(_forbidden(path + "." + sources[1], "may not specify more than 1 volume type"))
        host = _mapping(volume.get("hostPath")) if volume.get("hostPath") is not None else None
        if host is not None:
            errors += _host_path_errors(host, path + ".hostPath")
    return named, errors


def _host_path_errors(host: Mapping[str, object], path: str) -> List[str]:
    """A hostPath volume needs a path without '..' and a known type."""
    errors: List[str] = []
    where = _text(host.get("path"))
    if not where:
        errors.append(_required(path + ".path"))
    elif ".." in where.split("/"):
        errors.append(_invalid(path + ".path", where, "must not contain '..'"))
    kind = _text(host.get("type"))
    if kind not in HOST_PATH_TYPES:
        errors.append(_unsupported(path + ".type", kind, HOST_PATH_TYPES[1:]))
    return errors


def validate_container(container: Mapping[str, object], path: str, volumes: Dict[str, Mapping[str, object]],
                       init: bool) -> List[str]:
    """One container: name, image, policies, ports, env, mounts, resources and probes."""
    errors: List[str] = []
    name = _text(container.get("name"))
    if not name:
        errors.append(_required(path + ".name"))
    else:
        errors += _name_errors(path + ".name", name, dns_label_problem)
    image = _text(container.get("image"))
    if not image:
        errors.append(_required(path + ".image"))
    elif image.strip() != image:
        errors.append(_invalid(path + ".image", image, "must not have leading or trailing whitespace"))
    for key, allowed in (("imagePullPolicy", PULL_POLICIES),
                         ("terminationMessagePolicy", TERMINATION_MESSAGE_POLICIES)):
        value = container.get(key)
        if value and value not in allowed:
            errors.append(_unsupported("%s.%s" % (path, key), value, allowed))
    restart = container.get("restartPolicy")
    if restart and not init:
        errors.append(_forbidden(path + ".restartPolicy", "may not be set for non-init containers"))
    elif restart and restart != "Always":
        errors.append(_unsupported(path + ".restartPolicy", restart, ("Always",)))
    errors += validate_ports(_items(container.get("ports")), path + ".ports")
    errors += validate_env(container, path)
    errors += validate_mounts(_items(container.get("volumeMounts")), path + ".volumeMounts", volumes)
    errors += validate_resources(_mapping(container.get("resources")), path + ".resources")
    errors += _container_probe_errors(container, path, init and restart != "Always")
    return errors


def validate_ports(ports: List[object], path: str) -> List[str]:
    """containerPort 1-65535, hostPort 0 or 1-65535, protocol, unique IANA port names."""
    errors: List[str] = []
    names = set()
    for index, item in enumerate(ports):
        port, where = _mapping(item), "%s[%d]" % (path, index)
        name = _text(port.get("name"))
        if name:
            errors += _name_errors(where + ".name", name, port_name_problem)
            if name in names:
                errors.append(_duplicate(where + ".name", name))
            names.add(name)
        number = _int(port.get("containerPort"))
        if number == 0:
            errors.append(_required(where + ".containerPort"))
        elif not 1 <= number <= 65535:
            errors.append(_invalid(where + ".containerPort", number, "must be between 1 and 65535, inclusive"))
        host = _int(port.get("hostPort"))
        if host and not 1 <= host <= 65535:
            errors.append(_invalid(where + ".hostPort", host, "must be between 1 and 65535, inclusive"))
        protocol = port.get("protocol") or "TCP"
        if protocol not in PROTOCOLS:
            errors.append(_unsupported(where + ".protocol", protocol, PROTOCOLS))
    return errors


def _host_port_errors(path: str, containers: List[object], host_network: bool, conflicts: bool) -> List[str]:
    """hostNetwork: hostPort must equal containerPort (and defaults to it); among the regular
    containers (they run side by side, init containers one after another) no host port twice."""
    errors: List[str] = []
    taken = set()
    for index, item in enumerate(containers):
        for number, entry in enumerate(_items(_mapping(item).get("ports"))):
            port, where = _mapping(entry), "%s[%d].ports[%d]" % (path, index, number)
            container_port, host = _int(port.get("containerPort")), _int(port.get("hostPort"))
            if host_network and host and host != container_port:
                errors.append(_invalid(where + ".hostPort", host,
                                       "must match `containerPort` when `hostNetwork` is true"))
            host = host or (container_port if host_network else 0)
            key = (_text(port.get("hostIP")), host, port.get("protocol") or "TCP")
            if conflicts and host and key in taken:
                errors.append(_duplicate(where + ".hostPort", "%d/%s" % (host, key[2])))
            taken.add(key)
    return errors


def validate_env(container: Mapping[str, object], path: str) -> List[str]:
    """env names and exactly one valueFrom source; envFrom sources."""
    errors: List[str] = []
    for index, item in enumerate(_items(container.get("env"))):
        env, where = _mapping(item), "%s.env[%d]" % (path, index)
        name = _text(env.get("name"))
        if not name:
            errors.append(_required(where + ".name"))
        elif "=" in name or not all(" " <= c <= "~" for c in name):
            errors.append(_invalid(where + ".name", name, "must consist only of printable ASCII characters "
                                                           "other than '='"))
        source = env.get("valueFrom")
        if source is not None:
            errors += _env_source_errors(_mapping(source), where + ".valueFrom", bool(env.get("value")))
    for index, item in enumerate(_items(container.get("envFrom"))):
        source, where = _mapping(item), "%s.envFrom[%d]" % (path, index)
        refs = [k for k in ("configMapRef", "secretRef") if source.get(k) is not None]
        if len(refs) != 1:
            errors.append(_invalid(where, "", "must specify one of: `configMapRef` or `secretRef`"
                                   if not refs else "may not have more than one field specified at a time"))
    return errors


def _env_source_errors(source: Mapping[str, object], path: str, has_value: bool) -> List[str]:
    """valueFrom: exactly one source, not with a value; a supported fieldRef path."""
    kinds = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
             if source.get(k) is not None]
    if has_value:
        return [_invalid(path, "", "may not be specified when `value` is not empty")]
    if not kinds:
        return [_invalid(path, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or "
                                   "`secretKeyRef`")]
    if len(kinds) > 1:
        return [_invalid(path, "", "may not have more than one field specified at a time")]
    field = _mapping(source.get("fieldRef"))
    if kinds[0] == "fieldRef":
        where = _text(field.get("fieldPath"))
        if not where:
            return [_required(path + ".fieldRef.fieldPath")]
        if where not in FIELD_PATHS and not re.fullmatch(_FIELD_PATH_KEYED, where):
            return [_unsupported(path + ".fieldRef.fieldPath", where, FIELD_PATHS)]
    if kinds[0] == "resourceFieldRef" and not _mapping(source.get("resourceFieldRef")).get("resource"):
        return [_required(path + ".resourceFieldRef.resource")]
    return []


def validate_mounts(mounts: List[object], path: str, volumes: Dict[str, Mapping[str, object]]) -> List[str]:
    """Each mount names a volume of the pod, has a unique absolute-or-relative mountPath, and a
    subPath without '..'."""
    errors: List[str] = []
    paths = set()
    for index, item in enumerate(mounts):
        mount, where = _mapping(item), "%s[%d]" % (path, index)
        name = _text(mount.get("name"))
        if not name:
            errors.append(_required(where + ".name"))
        elif name not in volumes:
            errors.append("%s.name: Not found: %s" % (where, shown(name)))
        target = _text(mount.get("mountPath"))
        if not target:
            errors.append(_required(where + ".mountPath"))
        elif target in paths:
            errors.append(_invalid(where + ".mountPath", target, "must be unique"))
        paths.add(target)
        sub = _text(mount.get("subPath"))
        if sub.startswith("/"):
            errors.append(_invalid(where + ".subPath", sub, "must be a relative path"))
        elif ".." in sub.split("/"):
            errors.append(_invalid(where + ".subPath", sub, "must not contain '..'"))
        propagation = mount.get("mountPropagation")
        if propagation and propagation not in MOUNT_PROPAGATIONS:
            errors.append(_unsupported(where + ".mountPropagation", propagation, MOUNT_PROPAGATIONS))
    return errors


def validate_resources(resources: Mapping[str, object], path: str) -> List[str]:
    """Resource names, non-negative quantities, requests not above limits."""
    errors: List[str] = []
    amounts: Dict[str, Dict[str, Union[str, int, float]]] = {"limits": {}, "requests": {}}
    for section in ("limits", "requests"):
        for name, value in _mapping(resources.get(section)).items():
            where = "%s.%s[%s]" % (path, section, path_key(name))
            errors += _resource_name_errors(name, where)
            if not isinstance(value, (str, int, float)) or not is_quantity(value):
                continue
            if _negative(value):
                errors.append(_invalid(where, value, "must be greater than or equal to 0"))
            amounts[section][name] = value
    for name, requested_value in amounts["requests"].items():
        limited_value = amounts["limits"].get(name)
        if limited_value is None or name not in CONTAINER_RESOURCES:
            continue        # (amounts compared only here: kubeadm's manifests set requests alone)
        request, limit = parse_quantity(requested_value), parse_quantity(limited_value)
        if request is not None and limit is not None and request > limit:
            requested, limited = _mapping(resources.get("requests"))[name], _mapping(resources.get("limits"))[name]
            errors.append(_invalid("%s.requests[%s]" % (path, path_key(name)), requested,
                                   "must be less than or equal to %s limit of %s" % (name, limited)))
    return errors


def _resource_name_errors(name: str, path: str) -> List[str]:
    """A container resource: cpu, memory, ephemeral-storage, hugepages-*, or a qualified extended name."""
    if "/" not in name:
        if name in CONTAINER_RESOURCES or name.startswith("hugepages-"):
            return []
        return [_invalid(path, name, "must be a standard resource for containers")]
    return _name_errors(path, name, qualified_name_problem)


def _container_probe_errors(container: Mapping[str, object], path: str, plain_init: bool) -> List[str]:
    """The container's probes (none on a plain init container) and lifecycle hooks."""
    errors: List[str] = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(kind)
        if probe is None:
            continue
        if plain_init:
            errors.append(_forbidden("%s.%s" % (path, kind),
                                     "may not be set for init containers without restartPolicy=Always"))
            continue
        errors += validate_probe(_mapping(probe), "%s.%s" % (path, kind), kind)
    lifecycle = _mapping(container.get("lifecycle"))
    for hook in ("postStart", "preStop"):
        if lifecycle.get(hook) is not None:
            errors += _handler_errors(_mapping(lifecycle[hook]), "%s.lifecycle.%s" % (path, hook),
                                      ("exec", "httpGet", "tcpSocket", "sleep"))
    return errors


def validate_probe(probe: Mapping[str, object], path: str, kind: str) -> List[str]:
    """One handler with a valid port, non-negative timings, the liveness/startup rules."""
    errors = _handler_errors(probe, path, ("exec", "httpGet", "tcpSocket", "grpc"))
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        value = probe.get(key)
        if isinstance(value, int) and value < 0:
            errors.append(_invalid("%s.%s" % (path, key), value, "must be greater than or equal to 0"))
    success = probe.get("successThreshold") or 1
    if kind != "readinessProbe" and success != 1:
        errors.append(_invalid(path + ".successThreshold", success, "must be 1"))
    grace = probe.get("terminationGracePeriodSeconds")
    if grace is not None and kind == "readinessProbe":
        errors.append(_invalid(path + ".terminationGracePeriodSeconds", grace, "must not be set for readinessProbes"))
    elif isinstance(grace, int) and grace <= 0:
        errors.append(_invalid(path + ".terminationGracePeriodSeconds", grace, "must be greater than 0"))
    return errors


def _handler_errors(handler: Mapping[str, object], path: str, kinds: Tuple[str, ...]) -> List[str]:
    """Exactly one of ``kinds`` (exec, httpGet, tcpSocket, grpc or sleep), and that one valid."""
    present = [k for k in kinds if handler.get(k) is not None]
    if not present:
        return [_required(path, "must specify a handler type")]
    if len(present) > 1:
        return [_forbidden("%s.%s" % (path, present[1]), "may not specify more than 1 handler type")]
    kind, action = present[0], _mapping(handler[present[0]])
    where = "%s.%s" % (path, kind)
    if kind == "exec":
        return [] if _items(action.get("command")) else [_required(where + ".command")]
    if kind == "httpGet":
        scheme = action.get("scheme") or "HTTP"
        errors = port_errors(action.get("port"), where + ".port")
        return errors + ([_unsupported(where + ".scheme", scheme, SCHEMES)] if scheme not in SCHEMES else [])
    if kind == "tcpSocket":
        return port_errors(action.get("port"), where + ".port")
    if kind == "grpc":
        number = _int(action.get("port"))
        return [] if 1 <= number <= 65535 else [_invalid(where + ".port", number,
                                                         "must be between 1 and 65535, inclusive")]
    seconds = _int(action.get("seconds"))
    return [] if seconds >= 0 else [_invalid(where + ".seconds", seconds, "must be non-negative")]


def port_errors(port: object, path: str) -> List[str]:
    """A probe port: a number 1-65535 or an IANA port name (a quoted number is a bad name)."""
    if isinstance(port, str):
        return _name_errors(path, port, port_name_problem)
    number = _int(port)
    return [] if 1 <= number <= 65535 else [_invalid(path, number, "must be between 1 and 65535, inclusive")]


# --- static pods may not reference API objects --------------------------------------------------

_SECRET_VOLUME_REFS = ("azureFile", "cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos", "csi")
_VOLUME_REFERENCES = (("configMap", "configmaps (via configmap volumes)"),
                      ("secret", "secrets (via secret volumes)"),
                      ("csi", "csidrivers (via CSI volumes)"),
                      ("glusterfs", "endpoints (via glusterFS volumes)"),
                      ("persistentVolumeClaim", "persistentvolumeclaims"),
                      ("ephemeral", "persistentvolumeclaims (via ephemeral volumes)"),
                      ("azureFile", "secrets (via azureFile volumes)"))
# Volume types that need nothing from the API (the kubelet's list, HasAPIObjectReference).
_LOCAL_VOLUMES = ("awsElasticBlockStore", "azureDisk", "cephfs", "cinder", "downwardAPI", "emptyDir", "fc",
                  "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "hostPath", "image", "iscsi", "nfs",
                  "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos",
                  "vsphereVolume")
_PROJECTIONS = (("configMap", "configmaps (via projected volumes)"), ("secret", "secrets (via projected volumes)"),
                ("serviceAccountToken", "serviceaccounts (via projected volumes)"),
                ("clusterTrustBundle", "clustertrustbundles"), ("podCertificate", "podcertificates"))


def _all_containers(spec: Mapping[str, object]) -> Iterator[Tuple[str, Mapping[str, object]]]:
    """(field path, container) for init, regular and ephemeral containers."""
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(_items(spec.get(kind))):
            yield "spec.%s[%d]" % (kind, index), _mapping(container)


def _env_references(spec: Mapping[str, object], key_ref: str, from_ref: str) -> Iterator[str]:
    """Paths of env valueFrom.<key_ref> and envFrom[].<from_ref> in every container."""
    for path, container in _all_containers(spec):
        for index, env in enumerate(_items(container.get("env"))):
            if _mapping(_mapping(env).get("valueFrom")).get(key_ref) is not None:
                yield "%s.env[%d].valueFrom.%s" % (path, index, key_ref)
        for index, env in enumerate(_items(container.get("envFrom"))):
            if _mapping(env).get(from_ref) is not None:
                yield "%s.envFrom[%d].%s" % (path, index, from_ref)


def _secret_references(spec: Mapping[str, object]) -> Iterator[str]:
    """Paths of every Secret reference, in the kubelet's order (pull secrets, env, volumes)."""
    for index, _ in enumerate(_items(spec.get("imagePullSecrets"))):
        yield "spec.imagePullSecrets[%d]" % index
    yield from _env_references(spec, "secretKeyRef", "secretRef")
    for index, item in enumerate(_items(spec.get("volumes"))):
        volume, path = _mapping(item), "spec.volumes[%d]" % index
        if volume.get("secret") is not None:
            yield path + ".secret"
        for kind in _SECRET_VOLUME_REFS:
            source = volume.get(kind)
            ref = "nodePublishSecretRef" if kind == "csi" else "secretName" if kind == "azureFile" else "secretRef"
            if source is not None and (kind == "azureFile" or _mapping(source).get(ref) is not None):
                yield "%s.%s" % (path, kind)
        for number, projection in enumerate(_items(_mapping(volume.get("projected")).get("sources"))):
            if _mapping(projection).get("secret") is not None:
                yield "%s.projected.sources[%d].secret" % (path, number)


def _configmap_references(spec: Mapping[str, object]) -> Iterator[str]:
    """Paths of every ConfigMap reference (env, volumes, projections)."""
    yield from _env_references(spec, "configMapKeyRef", "configMapRef")
    for index, item in enumerate(_items(spec.get("volumes"))):
        volume, path = _mapping(item), "spec.volumes[%d]" % index
        if volume.get("configMap") is not None:
            yield path + ".configMap"
        for number, projection in enumerate(_items(_mapping(volume.get("projected")).get("sources"))):
            if _mapping(projection).get("configMap") is not None:
                yield "%s.projected.sources[%d].configMap" % (path, number)


def _volume_reference(spec: Mapping[str, object]) -> Optional[str]:
    """The refusal for the first volume whose type needs the API (or is an unknown projection)."""
    for index, item in enumerate(_items(spec.get("volumes"))):
        volume, path = _mapping(item), "spec.volumes[%d]" % index
        if any(volume.get(key) is not None for key in _LOCAL_VOLUMES):
            continue
        for key, what in _VOLUME_REFERENCES:
            if volume.get(key) is not None:
                return "%s (%s.%s)" % (what, path, key)
        for number, projection in enumerate(_items(_mapping(volume.get("projected")).get("sources"))):
            source, where = _mapping(projection), "%s.projected.sources[%d]" % (path, number)
            for key, what in _PROJECTIONS:
                if source.get(key) is not None:
                    return "%s (%s.%s)" % (what, where, key)
            if source.get("downwardAPI") is None:
                return "an unknown source for projected volume %s (%s)" % (shown(_text(volume.get("name"))), where)
    return None


def api_reference(pod: Mapping[str, object]) -> Optional[str]:
    """What API object a static pod refers to, in the words of the kubelet's refusal ("static pods
    may not reference <this>"), with the field; None when it refers to none. Checked in the
    kubelet's order: service account, secrets, config maps, resource claims, volume types."""
    spec = _mapping(pod.get("spec"))
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        field = "serviceAccountName" if spec.get("serviceAccountName") else "serviceAccount"
        return "serviceaccounts (spec.%s: %s)" % (field, shown(account))
    for what, found in (("secrets", _secret_references(spec)), ("configmaps", _configmap_references(spec))):
        first = next(found, None)
        if first is not None:
            return "%s (%s)" % (what, first)
    if _items(spec.get("resourceClaims")):
        return "resourceclaims (spec.resourceClaims)"
    return _volume_reference(spec)


def validate(pod: Mapping[str, object]) -> Mapping[str, object]:
    """The kubelet's checks of a decoded v1 Pod, in its order: types (the decode), the name,
    ValidatePodCreate, then the static-pod API-reference rule. Returns the pod (integers
    normalised in place); raises InvalidPod."""
    check_types(pod)
    meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    if not meta.get("name"):
        raise InvalidPod(["name is needed for the pod (metadata.name)"])
    errors = validate_metadata(meta) + validate_spec(spec)
    if errors:
        raise InvalidPod(errors)
    reference = api_reference(pod)
    if reference:
        raise InvalidPod(["static pods may not reference %s" % reference], prefix="")
    return pod


# --- the decoded pod's canonical form -----------------------------------------------------------

def canonical(value: object, kind: FieldType = ("obj", "Pod")) -> object:
    """``value`` without the nulls the kubelet's decode turns into "absent": a null field of a
    known object (any field: unknown ones are dropped anyway) is removed; nulls inside maps
    (labels: {a: null} is the label a="") and inside unchecked subtrees are kept."""
    if isinstance(value, list):
        inner = kind[1] if isinstance(kind, tuple) and kind[0] == "list" else ANY
        return [canonical(item, inner) for item in value]
    if not isinstance(value, dict):
        return value
    if isinstance(kind, tuple) and kind[0] == "obj":
        schema = _schema(kind)
        return {k: canonical(v, schema.get(k, ANY)) for k, v in value.items() if v is not None}
    inner = kind[1] if isinstance(kind, tuple) and kind[0] == "map" else ANY
    return {k: canonical(v, inner) for k, v in value.items()}

"""parse_pod runs the kubelet's checks of a static pod (issue #16 item 3, kubelet parity): the typed
decode (a field of the wrong type is an invalid manifest, never a crash later), ValidatePodCreate's
rules that matter for control-plane pods, and the static-pod rule against API object references.
Each message names the field, as the kubelet's "invalid pod: ..." log line does."""

from __future__ import annotations

import json

import pytest
import yaml

from cpctl.core import manifests

# A kubeadm v1.30 kube-apiserver manifest as `kubeadm init` writes it (only the address changed).
APISERVER = b"""\
apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 192.168.56.10:6443
  creationTimestamp: null
  labels:
    component: kube-apiserver
    tier: control-plane
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=192.168.56.10
    - --allow-privileged=true
    - --authorization-mode=Node,RBAC
    - --client-ca-file=/etc/kubernetes/pki/ca.crt
    - --enable-admission-plugins=NodeRestriction
    - --enable-bootstrap-token-auth=true
    - --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt
    - --etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt
    - --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key
    - --etcd-servers=https://127.0.0.1:2379
    - --kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt
    - --kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key
    - --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname
    - --proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt
    - --proxy-client-key-file=/etc/kubernetes/pki/front-proxy-client.key
    - --requestheader-allowed-names=front-proxy-client
    - --requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt
    - --requestheader-extra-headers-prefix=X-Remote-Extra-
    - --requestheader-group-headers=X-Remote-Group
    - --requestheader-username-headers=X-Remote-User
    - --secure-port=6443
    - --service-account-issuer=https://kubernetes.default.svc.cluster.local
    - --service-account-key-file=/etc/kubernetes/pki/sa.pub
    - --service-account-signing-key-file=/etc/kubernetes/pki/sa.key
    - --service-cluster-ip-range=10.96.0.0/12
    - --tls-cert-file=/etc/kubernetes/pki/apiserver.crt
    - --tls-private-key-file=/etc/kubernetes/pki/apiserver.key
    image: registry.k8s.io/kube-apiserver:v1.30.0
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 8
      httpGet:
        host: 192.168.56.10
        path: /livez
        port: 6443
        scheme: HTTPS
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    name: kube-apiserver
    readinessProbe:
      failureThreshold: 3
      httpGet:
        host: 192.168.56.10
        path: /readyz
        port: 6443
        scheme: HTTPS
      periodSeconds: 1
      timeoutSeconds: 15
    resources:
      requests:
        cpu: 250m
    startupProbe:
      failureThreshold: 24
      httpGet:
        host: 192.168.56.10
        path: /livez
        port: 6443
        scheme: HTTPS
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    volumeMounts:
    - mountPath: /etc/ssl/certs
      name: ca-certs
      readOnly: true
    - mountPath: /etc/kubernetes/pki
      name: k8s-certs
      readOnly: true
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /etc/ssl/certs
      type: DirectoryOrCreate
    name: ca-certs
  - hostPath:
      path: /etc/kubernetes/pki
      type: DirectoryOrCreate
    name: k8s-certs
status: {}
"""


DELETE = object()


def pod_with(*edits: tuple) -> bytes:
    """The kubeadm apiserver manifest with ``(dotted.path, value)`` edits (value DELETE deletes;
    a path component that is a number indexes a list)."""
    pod = yaml.safe_load(APISERVER)
    for path, value in edits:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = pod
        for part in parents:
            node = node[part]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return json.dumps(pod).encode()


def rejected(data: bytes) -> str:
    with pytest.raises(manifests.InvalidManifest) as caught:
        manifests.parse_pod(data)
    return str(caught.value)


def test_a_real_kubeadm_manifest_is_valid_and_decodes_as_plain_data() -> None:
    pod = manifests.parse_pod(APISERVER)
    assert pod == yaml.safe_load(APISERVER)
    assert manifests.parse_pod(json.dumps(pod).encode()) == pod


CONTAINER = "spec.containers.0"
RULES = [
    # (what, edits, words the message must hold)
    ("upper-case name", [("metadata.name", "Kube-APIServer")], "metadata.name: Invalid value"),
    ("a newline after the name", [("metadata.name", "kube-apiserver\n")], 'Invalid value: "kube-apiserver\\n"'),
    ("name is required", [("metadata.name", DELETE)], "name is needed for the pod"),
    ("namespace is a DNS label", [("metadata.namespace", "kube_system")], "metadata.namespace: Invalid value"),
    ("label value", [("metadata.labels.tier", "control plane")], "metadata.labels[tier]: Invalid value"),
    ("label key", [("metadata.labels", {"-bad": "x"})], "metadata.labels: Invalid value"),
    ("at least one container", [("spec.containers", [])], "spec.containers: Required value"),
    ("unique container names", [("spec.initContainers", [{"name": "kube-apiserver", "image": "x"}])],
     "spec.initContainers[0].name: Duplicate value"),
    ("an image", [(CONTAINER + ".image", DELETE)], "spec.containers[0].image: Required value"),
    ("no blanks around the image", [(CONTAINER + ".image", " registry.k8s.io/x ")],
     "must not have leading or trailing whitespace"),
    ("container port range", [(CONTAINER + ".ports", [{"containerPort": 70000}])],
     "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535"),
    ("container port required", [(CONTAINER + ".ports", [{"name": "https"}])],
     "spec.containers[0].ports[0].containerPort: Required value"),
    ("port protocol", [(CONTAINER + ".ports", [{"containerPort": 6443, "protocol": "HTTP"}])],
     'spec.containers[0].ports[0].protocol: Unsupported value: "HTTP"'),
    ("port name", [(CONTAINER + ".ports", [{"containerPort": 6443, "name": "Secure_Port"}])],
     "spec.containers[0].ports[0].name: Invalid value"),
    ("host port = container port with hostNetwork",
     [(CONTAINER + ".ports", [{"containerPort": 6443, "hostPort": 443}])],
     "must match `containerPort` when `hostNetwork` is true"),
    ("probe port as quoted digits", [(CONTAINER + ".livenessProbe.httpGet.port", "6443")],
     'spec.containers[0].livenessProbe.httpGet.port: Invalid value: "6443"'),
    ("probe port range", [(CONTAINER + ".readinessProbe.httpGet.port", 0)],
     "spec.containers[0].readinessProbe.httpGet.port: Invalid value: 0"),
    ("probe needs a handler", [(CONTAINER + ".startupProbe", {"periodSeconds": 10})],
     "spec.containers[0].startupProbe: Required value: must specify a handler type"),
    ("probe has one handler", [(CONTAINER + ".livenessProbe.tcpSocket", {"port": 6443})],
     "may not specify more than 1 handler type"),
    ("probe scheme", [(CONTAINER + ".livenessProbe.httpGet.scheme", "TLS")],
     'livenessProbe.httpGet.scheme: Unsupported value: "TLS"'),
    ("liveness success threshold", [(CONTAINER + ".livenessProbe.successThreshold", 2)],
     "livenessProbe.successThreshold: Invalid value: 2: must be 1"),
    ("negative probe timing", [(CONTAINER + ".readinessProbe.periodSeconds", -1)],
     "readinessProbe.periodSeconds: Invalid value: -1"),
    ("restart policy", [("spec.restartPolicy", "Sometimes")], 'spec.restartPolicy: Unsupported value: "Sometimes"'),
    ("dns policy", [("spec.dnsPolicy", "Google")], 'spec.dnsPolicy: Unsupported value: "Google"'),
    ("hostPath needs a path", [("spec.volumes.0.hostPath.path", DELETE)],
     "spec.volumes[0].hostPath.path: Required value"),
    ("hostPath type", [("spec.volumes.0.hostPath.type", "Folder")], 'spec.volumes[0].hostPath.type: Unsupported'),
    ("unique volume names", [("spec.volumes.1.name", "ca-certs")], "spec.volumes[1].name: Duplicate value"),
    ("one source per volume", [("spec.volumes.0.emptyDir", {})], "may not specify more than 1 volume type"),
    ("mount of a missing volume", [(CONTAINER + ".volumeMounts.0.name", "nope")],
     'spec.containers[0].volumeMounts[0].name: Not found: "nope"'),
    ("env value and valueFrom", [(CONTAINER + ".env", [{"name": "A", "value": "x",
                                                         "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])],
     "spec.containers[0].env[0].valueFrom: Invalid value"),
    ("negative resources", [(CONTAINER + ".resources.requests.cpu", "-1")],
     "resources.requests[cpu]: Invalid value"),
    ("requests above limits", [(CONTAINER + ".resources.limits", {"cpu": "100m"})],
     "must be less than or equal to cpu limit"),
    ("ephemeral containers on create", [("spec.ephemeralContainers", [{"name": "debug", "image": "busybox"}])],
     "spec.ephemeralContainers: Forbidden"),
]


@pytest.mark.parametrize("what, edits, words", RULES, ids=[r[0] for r in RULES])
def test_validate_pod_create_rules(what: str, edits: list, words: str) -> None:
    message = rejected(pod_with(*edits))
    assert message.startswith("invalid pod: [") and words in message, message
    assert "\n" not in message


REFERENCES = [
    ("serviceAccountName", [("spec.serviceAccountName", "robot")], "serviceaccounts (spec.serviceAccountName"),
    ("deprecated serviceAccount", [("spec.serviceAccount", "robot")], "serviceaccounts (spec.serviceAccount"),
    ("image pull secret", [("spec.imagePullSecrets", [{"name": "regcred"}])], "secrets (spec.imagePullSecrets[0])"),
    ("secret volume", [("spec.volumes.1", {"name": "k8s-certs", "secret": {"secretName": "certs"}})],
     "secrets (spec.volumes[1].secret)"),
    ("env secretKeyRef", [(CONTAINER + ".env", [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s",
                                                                                             "key": "k"}}}])],
     "secrets (spec.containers[0].env[0].valueFrom.secretKeyRef)"),
    ("configMap volume", [("spec.volumes.1", {"name": "k8s-certs", "configMap": {"name": "certs"}})],
     "configmaps (spec.volumes[1].configMap)"),
    ("envFrom configMapRef", [(CONTAINER + ".envFrom", [{"configMapRef": {"name": "settings"}}])],
     "configmaps (spec.containers[0].envFrom[0].configMapRef)"),
    ("projected token", [("spec.volumes.1", {"name": "k8s-certs", "projected": {
        "sources": [{"serviceAccountToken": {"path": "token"}}]}})],
     "serviceaccounts (via projected volumes) (spec.volumes[1].projected.sources[0].serviceAccountToken)"),
    ("cluster trust bundle", [("spec.volumes.1", {"name": "k8s-certs", "projected": {
        "sources": [{"clusterTrustBundle": {"name": "ca", "path": "ca.crt"}}]}})], "clustertrustbundles"),
    ("persistent volume claim", [("spec.volumes.1", {"name": "k8s-certs",
                                                     "persistentVolumeClaim": {"claimName": "data"}})],
     "persistentvolumeclaims (spec.volumes[1].persistentVolumeClaim)"),
    ("csi driver", [("spec.volumes.1", {"name": "k8s-certs", "csi": {"driver": "x"}})], "csidrivers"),
    ("resource claims", [("spec.resourceClaims", [{"name": "gpu"}])], "resourceclaims (spec.resourceClaims)"),
]


@pytest.mark.parametrize("what, edits, words", REFERENCES, ids=[r[0] for r in REFERENCES])
def test_static_pods_may_not_reference_api_objects(what: str, edits: list, words: str) -> None:
    message = rejected(pod_with(*edits))
    assert message.startswith("static pods may not reference ") and words in message, message


def test_volumes_that_need_no_api_are_allowed() -> None:
    volumes = [{"name": "ca-certs", "hostPath": {"path": "/etc/ssl/certs"}},
               {"name": "k8s-certs", "projected": {"sources": [{"downwardAPI": {"items": []}}]}},
               {"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}, {"name": "defaulted"}]
    assert manifests.parse_pod(pod_with(("spec.volumes", volumes)))["spec"]["volumes"] == volumes


TYPES = [
    # The typed decode: the first field of a wrong type makes the whole file invalid.
    ("namespace a list", [("metadata.namespace", ["a"])], "metadata.namespace: must be a string, not a list"),
    ("name a number", [("metadata.name", 7)], "metadata.name: must be a string, not an integer (7)"),
    ("containers a mapping", [("spec.containers", {"name": "x"})], "spec.containers: must be a list, not a mapping"),
    ("command a string", [(CONTAINER + ".command", "kube-apiserver --secure-port=6443")],
     "spec.containers[0].command: must be a list, not a string"),
    ("an argument a number", [(CONTAINER + ".args", ["--v", 4])],
     "spec.containers[0].args[1]: must be a string, not an integer (4)"),
    ("ports a list of numbers", [(CONTAINER + ".ports", [6443])],
     "spec.containers[0].ports[0]: must be a mapping, not an integer"),
    ("a probe a list", [(CONTAINER + ".livenessProbe", [])], "livenessProbe: must be a mapping, not a list"),
    ("a fractional port", [(CONTAINER + ".livenessProbe.httpGet.port", 6443.5)],
     "httpGet.port: must be an integer, not a number (6443.5)"),
    ("a port beyond int32", [(CONTAINER + ".ports", [{"containerPort": 1 << 40}])],
     "containerPort: 1099511627776 does not fit in an int32"),
    ("a label value a number", [("metadata.labels.tier", 1)], "metadata.labels[tier]: must be a string"),
    ("hostNetwork a string", [("spec.hostNetwork", "true")], 'spec.hostNetwork: must be true or false, not a string'),
    ("a bad quantity", [(CONTAINER + ".resources.requests.cpu", "a lot")], "resources.requests[cpu]: quantities"),
    ("an endless quantity", [(CONTAINER + ".resources.requests.cpu", "1e" + "9" * 40)], "requests[cpu]: quantities"),
    ("a time in other digits", [("metadata.creationTimestamp", "\u0662024-01-01T00:00:00Z")],
     "metadata.creationTimestamp: must be an RFC 3339 time"),
    ("a time that is not one", [("metadata.creationTimestamp", "yesterday")],
     "metadata.creationTimestamp: must be an RFC 3339 time or null"),
]


@pytest.mark.parametrize("what, edits, words", TYPES, ids=[t[0] for t in TYPES])
def test_a_field_of_the_wrong_type_is_an_invalid_manifest(what: str, edits: list, words: str) -> None:
    message = rejected(pod_with(*edits))
    assert message.startswith("cannot decode the pod: [") and words in message, message


def test_types_are_normalised_as_the_kubelet_reads_them() -> None:
    """An integral float in an integer field is that integer (the kubelet's JSON round trip);
    a port may be a number or a name; a null field is absent, a null list item or map value the
    zero value of its type (as Go decodes it); unknown fields are kept."""
    pod = manifests.parse_pod(pod_with((CONTAINER + ".livenessProbe.httpGet.port", 6443.0),
                                       (CONTAINER + ".args", ["--v=2", None]), ("metadata.labels.extra", None),
                                       (CONTAINER + ".readinessProbe.httpGet.port", "https"),
                                       (CONTAINER + ".ports", [{"containerPort": 6443, "name": "https"}]),
                                       ("spec.priority", DELETE), ("spec.hostNetwork", None),
                                       ("spec.dnsConfig", None), ("spec.someFutureField", {"x": [1]})))
    container = pod["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["port"] == 6443
    assert type(container["livenessProbe"]["httpGet"]["port"]) is int
    assert container["readinessProbe"]["httpGet"]["port"] == "https"
    assert pod["spec"]["someFutureField"] == {"x": [1]} and pod["spec"]["dnsConfig"] is None
    assert pod["spec"]["hostNetwork"] is None and "priority" not in pod["spec"]
    assert container["args"] == ["--v=2", ""] and pod["metadata"]["labels"]["extra"] == ""


def test_messages_list_at_most_five_problems_on_one_line() -> None:
    edits = [(CONTAINER + ".ports", [{"containerPort": 70000 + i} for i in range(8)])]
    message = rejected(pod_with(*edits))
    assert message.count("must be between 1 and 65535") == 5 and message.endswith(", and 3 more]"), message

"""The flags each control-plane binary knows, and the admission plugins: what ``flags``, ``apply``
and ``edit`` check a new manifest against before writing it.

The lists are kubeadm's manifests plus the commonly used flags of ``kube-apiserver --help``,
``kube-controller-manager --help``, ``kube-scheduler --help`` (v1.30-v1.34) and ``etcd --help``
(v3.5; v3.6 adds the ``ETCD_36_ONLY`` names). Flags removed upstream are absent on purpose
(``--insecure-port``, ``--address``/``--port``, ``--scheduler-name``...). A list may be out of date
for a newer release: a name missing here refuses the change unless ``--force`` is given, then it
is a warning. ``tests/core/test_flags_sanity.py`` checks that these names agree with the simulator's
(its ``componentflags`` module), which models how the binaries react to the same command lines.
"""

from __future__ import annotations

import re
from typing import FrozenSet, Optional

from cpctl import catalogue

KUBE_APISERVER = frozenset({
    "admission-control-config-file", "advertise-address", "aggregator-reject-forwarding-redirect",
    "allow-metric-labels", "allow-metric-labels-manifest", "allow-privileged", "anonymous-auth", "api-audiences",
    "audit-log-batch-buffer-size", "audit-log-batch-max-size", "audit-log-batch-max-wait",
    "audit-log-batch-throttle-burst", "audit-log-batch-throttle-enable", "audit-log-batch-throttle-qps",
    "audit-log-compress", "audit-log-format", "audit-log-maxage", "audit-log-maxbackup", "audit-log-maxsize",
    "audit-log-mode", "audit-log-path", "audit-log-truncate-enabled", "audit-log-truncate-max-batch-size",
    "audit-log-truncate-max-event-size", "audit-log-version", "audit-policy-file",
    "audit-webhook-batch-buffer-size", "audit-webhook-batch-max-size", "audit-webhook-batch-max-wait",
    "audit-webhook-batch-throttle-burst", "audit-webhook-batch-throttle-enable",
    "audit-webhook-batch-throttle-qps", "audit-webhook-config-file", "audit-webhook-initial-backoff",
    "audit-webhook-mode", "audit-webhook-truncate-enabled", "audit-webhook-truncate-max-batch-size",
    "audit-webhook-truncate-max-event-size", "audit-webhook-version", "authentication-config",
    "authentication-token-webhook-cache-ttl", "authentication-token-webhook-config-file",
    "authentication-token-webhook-version", "authorization-config", "authorization-mode",
    "authorization-policy-file", "authorization-webhook-cache-authorized-ttl",
    "authorization-webhook-cache-unauthorized-ttl", "authorization-webhook-config-file",
    "authorization-webhook-version", "bind-address", "cert-dir", "client-ca-file", "cloud-config",
    "cloud-provider", "contention-profiling", "cors-allowed-origins", "debug-socket-path",
    "default-not-ready-toleration-seconds", "default-unreachable-toleration-seconds", "default-watch-cache-size",
    "delete-collection-workers", "disable-admission-plugins", "disabled-metrics", "egress-selector-config-file",
    "enable-admission-plugins", "enable-aggregator-routing", "enable-bootstrap-token-auth",
    "enable-garbage-collector", "enable-logs-handler", "enable-priority-and-fairness",
    "encryption-provider-config", "encryption-provider-config-automatic-reload", "endpoint-reconciler-type",
    "etcd-cafile", "etcd-certfile", "etcd-compaction-interval", "etcd-count-metric-poll-period",
    "etcd-db-metric-poll-interval", "etcd-healthcheck-timeout", "etcd-keyfile", "etcd-prefix",
    "etcd-readycheck-timeout", "etcd-servers", "etcd-servers-overrides", "event-ttl", "external-hostname",
    "feature-gates", "goaway-chance", "help", "http2-max-streams-per-connection", "kubelet-certificate-authority",
    "kubelet-client-certificate", "kubelet-client-key", "kubelet-preferred-address-types", "kubelet-timeout",
    "kubernetes-service-node-port", "lease-reuse-duration-seconds", "livez-grace-period", "log-flush-frequency",
    "log-json-info-buffer-size", "log-json-split-stream", "log-text-info-buffer-size", "log-text-split-stream",
    "logging-format", "max-connection-bytes-per-sec", "max-mutating-requests-inflight", "max-requests-inflight",
    "min-request-timeout", "oidc-ca-file", "oidc-client-id", "oidc-groups-claim", "oidc-groups-prefix",
    "oidc-issuer-url", "oidc-required-claim", "oidc-signing-algs", "oidc-username-claim", "oidc-username-prefix",
    "peer-advertise-ip", "peer-advertise-port", "peer-ca-file", "permit-address-sharing", "permit-port-sharing",
    "profiling", "proxy-client-cert-file", "proxy-client-key-file", "request-timeout",
    "requestheader-allowed-names", "requestheader-client-ca-file", "requestheader-extra-headers-prefix",
    "requestheader-group-headers", "requestheader-uid-headers", "requestheader-username-headers",
    "runtime-config", "secure-port", "service-account-extend-token-expiration", "service-account-issuer",
    "service-account-jwks-uri", "service-account-key-file", "service-account-lookup",
    "service-account-max-token-expiration", "service-account-signing-key-file", "service-cluster-ip-range",
    "service-node-port-range", "show-hidden-metrics-for-version", "shutdown-delay-duration",
    "shutdown-send-retry-after", "shutdown-watch-termination-grace-period", "storage-backend",
    "storage-media-type", "strict-transport-security-directives", "tls-cert-file", "tls-cipher-suites",
    "tls-min-version", "tls-private-key-file", "tls-sni-cert-key", "token-auth-file", "tracing-config-file", "v",
    "version", "vmodule", "watch-cache", "watch-cache-sizes"
})
KUBE_CONTROLLER_MANAGER = frozenset({
    "allocate-node-cidrs", "allow-metric-labels", "allow-metric-labels-manifest",
    "attach-detach-reconcile-sync-period", "authentication-kubeconfig", "authentication-skip-lookup",
    "authentication-token-webhook-cache-ttl", "authentication-tolerate-lookup-failure",
    "authorization-always-allow-paths", "authorization-kubeconfig", "authorization-webhook-cache-authorized-ttl",
    "authorization-webhook-cache-unauthorized-ttl", "bind-address", "cert-dir", "cidr-allocator-type",
    "client-ca-file", "cloud-config", "cloud-provider", "cluster-cidr", "cluster-name",
    "cluster-signing-cert-file", "cluster-signing-duration", "cluster-signing-key-file",
    "cluster-signing-kube-apiserver-client-cert-file", "cluster-signing-kube-apiserver-client-key-file",
    "cluster-signing-kubelet-client-cert-file", "cluster-signing-kubelet-client-key-file",
    "cluster-signing-kubelet-serving-cert-file", "cluster-signing-kubelet-serving-key-file",
    "cluster-signing-legacy-unknown-cert-file", "cluster-signing-legacy-unknown-key-file",
    "concurrent-cron-job-syncs", "concurrent-daemonset-syncs", "concurrent-deployment-syncs",
    "concurrent-endpoint-syncs", "concurrent-ephemeralvolume-syncs", "concurrent-gc-syncs",
    "concurrent-horizontal-pod-autoscaler-syncs", "concurrent-job-syncs", "concurrent-namespace-syncs",
    "concurrent-rc-syncs", "concurrent-replicaset-syncs", "concurrent-resource-quota-syncs",
    "concurrent-service-endpoint-syncs", "concurrent-service-syncs", "concurrent-serviceaccount-token-syncs",
    "concurrent-statefulset-syncs", "concurrent-ttl-after-finished-syncs",
    "concurrent-validating-admission-policy-status-syncs", "configure-cloud-routes", "contention-profiling",
    "controller-start-interval", "controllers", "disable-attach-detach-reconcile-sync",
    "disable-force-detach-on-timeout", "disabled-metrics", "enable-dynamic-provisioning",
    "enable-garbage-collector", "enable-hostpath-provisioner", "enable-leader-migration",
    "endpoint-updates-batch-period", "feature-gates", "help",
    "horizontal-pod-autoscaler-cpu-initialization-period", "horizontal-pod-autoscaler-downscale-stabilization",
    "horizontal-pod-autoscaler-initial-readiness-delay", "horizontal-pod-autoscaler-sync-period",
    "horizontal-pod-autoscaler-tolerance", "http2-max-streams-per-connection", "kube-api-burst",
    "kube-api-content-type", "kube-api-qps", "kubeconfig", "large-cluster-size-threshold", "leader-elect",
    "leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-resource-lock",
    "leader-elect-resource-name", "leader-elect-resource-namespace", "leader-elect-retry-period",
    "leader-migration-config", "log-flush-frequency", "log-json-info-buffer-size", "log-json-split-stream",
    "log-text-info-buffer-size", "log-text-split-stream", "logging-format", "master", "min-resync-period",
    "namespace-sync-period", "node-cidr-mask-size", "node-cidr-mask-size-ipv4", "node-cidr-mask-size-ipv6",
    "node-eviction-rate", "node-monitor-grace-period", "node-monitor-period", "node-startup-grace-period",
    "permit-address-sharing", "permit-port-sharing", "profiling", "pv-recycler-increment-timeout-nfs",
    "pv-recycler-minimum-timeout-hostpath", "pv-recycler-minimum-timeout-nfs",
    "pv-recycler-pod-template-filepath-hostpath", "pv-recycler-pod-template-filepath-nfs",
    "pv-recycler-timeout-increment-hostpath", "pvclaimbinder-sync-period", "requestheader-allowed-names",
    "requestheader-client-ca-file", "requestheader-extra-headers-prefix", "requestheader-group-headers",
    "requestheader-uid-headers", "requestheader-username-headers", "resource-quota-sync-period", "root-ca-file",
    "route-reconciliation-period", "secondary-node-eviction-rate", "secure-port",
    "service-account-private-key-file", "service-cluster-ip-range", "show-hidden-metrics-for-version",
    "terminated-pod-gc-threshold", "tls-cert-file", "tls-cipher-suites", "tls-min-version",
    "tls-private-key-file", "tls-sni-cert-key", "unhealthy-zone-threshold", "use-service-account-credentials",
    "v", "version", "vmodule"
})
KUBE_SCHEDULER = frozenset({
    "allow-metric-labels", "allow-metric-labels-manifest", "authentication-kubeconfig",
    "authentication-skip-lookup", "authentication-token-webhook-cache-ttl",
    "authentication-tolerate-lookup-failure", "authorization-always-allow-paths", "authorization-kubeconfig",
    "authorization-webhook-cache-authorized-ttl", "authorization-webhook-cache-unauthorized-ttl", "bind-address",
    "cert-dir", "client-ca-file", "config", "contention-profiling", "disabled-metrics", "feature-gates", "help",
    "http2-max-streams-per-connection", "kube-api-burst", "kube-api-content-type", "kube-api-qps", "kubeconfig",
    "leader-elect", "leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-resource-lock",
    "leader-elect-resource-name", "leader-elect-resource-namespace", "leader-elect-retry-period",
    "log-flush-frequency", "log-json-info-buffer-size", "log-json-split-stream", "log-text-info-buffer-size",
    "log-text-split-stream", "logging-format", "master", "permit-address-sharing", "permit-port-sharing",
    "pod-max-in-unschedulable-pods-duration", "profiling", "requestheader-allowed-names",
    "requestheader-client-ca-file", "requestheader-extra-headers-prefix", "requestheader-group-headers",
    "requestheader-uid-headers", "requestheader-username-headers", "secure-port",
    "show-hidden-metrics-for-version", "tls-cert-file", "tls-cipher-suites", "tls-min-version",
    "tls-private-key-file", "tls-sni-cert-key", "v", "version", "vmodule", "write-config-to"
})
ETCD_35 = frozenset({
    "advertise-client-urls", "auth-token", "auth-token-ttl", "auto-compaction-mode", "auto-compaction-retention",
    "auto-tls", "backend-batch-interval", "backend-batch-limit", "backend-bbolt-freelist-type", "bcrypt-cost",
    "cert-file", "cipher-suites", "client-cert-allowed-hostname", "client-cert-auth", "client-crl-file",
    "config-file", "cors", "data-dir", "discovery", "discovery-fallback", "discovery-proxy", "discovery-srv",
    "discovery-srv-name", "election-timeout", "enable-log-rotation", "enable-pprof", "enable-v2",
    "experimental-bootstrap-defrag-threshold-megabytes", "experimental-compact-hash-check-enabled",
    "experimental-compact-hash-check-time", "experimental-compaction-batch-limit",
    "experimental-compaction-sleep-interval", "experimental-corrupt-check-time",
    "experimental-enable-distributed-tracing", "experimental-enable-lease-checkpoint",
    "experimental-enable-lease-checkpoint-persist", "experimental-initial-corrupt-check",
    "experimental-max-learners", "experimental-memory-mlock", "experimental-peer-skip-client-san-verification",
    "experimental-snapshot-catchup-entries", "experimental-stop-grpc-service-on-defrag",
    "experimental-txn-mode-write-with-shared-buffer", "experimental-warning-apply-duration",
    "experimental-warning-unary-request-duration", "experimental-watch-progress-notify-interval",
    "force-new-cluster", "grpc-keepalive-interval", "grpc-keepalive-min-time", "grpc-keepalive-timeout",
    "heartbeat-interval", "help", "host-whitelist", "initial-advertise-peer-urls", "initial-cluster",
    "initial-cluster-state", "initial-cluster-token", "initial-election-tick-advance", "key-file",
    "listen-client-http-urls", "listen-client-urls", "listen-metrics-urls", "listen-peer-urls", "log-format",
    "log-level", "log-outputs", "log-rotation-config-json", "logger", "max-request-bytes", "max-snapshots",
    "max-txn-ops", "max-wals", "metrics", "name", "peer-auto-tls", "peer-cert-allowed-cn",
    "peer-cert-allowed-hostname", "peer-cert-file", "peer-client-cert-auth", "peer-crl-file", "peer-key-file",
    "peer-trusted-ca-file", "pre-vote", "quota-backend-bytes", "self-signed-cert-validity", "snapshot-count",
    "socket-reuse-address", "socket-reuse-port", "strict-reconfig-check", "tls-max-version", "tls-min-version",
    "trusted-ca-file", "unsafe-no-fsync", "v2-deprecation", "version", "wal-dir"
})
ETCD_36_ONLY = frozenset({
    "bootstrap-defrag-threshold-megabytes", "compact-hash-check-time", "compaction-batch-limit",
    "compaction-sleep-interval", "corrupt-check-time", "downgrade-check-time", "enable-distributed-tracing",
    "feature-gates", "max-learners", "memory-mlock", "peer-skip-client-san-verification",
    "snapshot-catchup-entries", "warning-apply-duration", "warning-unary-request-duration",
    "watch-progress-notify-interval"
})
ADMISSION_PLUGINS = frozenset({
    "AlwaysAdmit", "AlwaysDeny", "AlwaysPullImages", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "ClusterTrustBundleAttest", "DefaultIngressClass", "DefaultStorageClass",
    "DefaultTolerationSeconds", "DenyServiceExternalIPs", "EventRateLimit", "ExtendedResourceToleration",
    "ImagePolicyWebhook", "LimitPodHardAntiAffinityTopology", "LimitRanger", "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook", "NamespaceAutoProvision", "NamespaceExists", "NamespaceLifecycle",
    "NodeRestriction", "OwnerReferencesPermissionEnforcement", "PersistentVolumeClaimResize", "PodNodeSelector",
    "PodSecurity", "PodTolerationRestriction", "Priority", "ResourceQuota", "RuntimeClass", "ServiceAccount",
    "StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook"
})

#: The flags whose value is a list of admission plugin names.
ADMISSION_FLAGS = ("enable-admission-plugins", "disable-admission-plugins")
#: Flags naming a path the component WRITES to (logs, data, generated files): the path must be on a
#: writable hostPath volume, else what is written is lost with the container.
WRITE_PATH_FLAGS = {catalogue.KUBE_APISERVER: ("audit-log-path", "cert-dir"),
                    catalogue.KUBE_CONTROLLER_MANAGER: ("cert-dir",),
                    catalogue.KUBE_SCHEDULER: ("cert-dir", "write-config-to"), catalogue.ETCD: ("data-dir", "wal-dir")}

#: Of those, the flags whose value is a DIRECTORY the component writes in (the others name a file).
WRITE_DIR_FLAGS = ("cert-dir", "data-dir", "wal-dir")

_KUBE = {catalogue.KUBE_APISERVER: KUBE_APISERVER, catalogue.KUBE_CONTROLLER_MANAGER: KUBE_CONTROLLER_MANAGER,
         catalogue.KUBE_SCHEDULER: KUBE_SCHEDULER}
_ETCD_TAG = re.compile(r"v?(\d+)\.(\d+)")


def known_flags(binary: str, image: str) -> Optional[FrozenSet[str]]:
    """The flag names ``binary`` (the command's file name) knows in the release of ``image``; None for
    a binary cpctl has no list for (nothing is checked then)."""
    if binary == catalogue.ETCD:
        match = _ETCD_TAG.match(image.rsplit(":", 1)[-1]) if ":" in image else None
        newer = bool(match) and (int(match.group(1)), int(match.group(2))) >= (3, 6)  # type: ignore[union-attr]
        return ETCD_35 | ETCD_36_ONLY if newer else ETCD_35
    return _KUBE.get(binary)

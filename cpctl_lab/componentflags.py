"""The flags each control-plane binary knows, and what it does with a command line it cannot use.

Where the lists come from: the flags kubeadm writes into its manifests
(cmd/kubeadm/app/phases/controlplane/manifests.go, cmd/kubeadm/app/phases/etcd/local.go) plus the
commonly used ones of ``kube-apiserver --help``, ``kube-controller-manager --help``,
``kube-scheduler --help`` (v1.30-v1.34: generic, secure serving, audit, authentication,
authorization, admission, features, metrics, logs, leader election) and ``etcd --help`` (v3.5 and
v3.6). Flags removed upstream are deliberately absent, so they fail like on a real node:
``--insecure-port`` (kube-apiserver, removed in v1.24), ``--address``/``--port`` (controller-manager
and scheduler), ``--scheduler-name`` (v1.22, kubernetes#102805), ``--lock-object-name`` (v1.28,
kubernetes#119130); ``--feature-gates`` does not exist before etcd v3.6. Admission plugins follow
plugin/pkg/admission (``SecurityContextDeny`` was removed in v1.30); feature gates are a selection
of pkg/features/kube_features.go.

A container whose command line cannot be used starts, writes what the real binary writes (see
:mod:`cpctl_lab.componentlogs`) and exits: (a) an unknown flag, (b) a value its flag type cannot
parse (pflag: ``invalid argument "abc" for "--secure-port" flag: strconv.ParseInt: ...``), or a
value validated later (an unknown admission plugin or authorization mode), (c) a flag naming a file
(certificate, key, kubeconfig, config) whose host path -- through the container's volume mounts --
does not exist.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Optional

from . import componentlogs as logs
from . import configfiles
from .componentlogs import LogLine

STR, BOOL, INT, FLOAT, DURATION, IP, LEVEL = "string", "bool", "int", "float", "duration", "ip", "level"
GATES, ADMISSION, AUTHZ, FILE, KUBECONFIG, URLS, STATE = (
    "mapStringBool", "admission", "authz", "file", "kubeconfig", "urls", "state",
)

_LOGGING = {"v": LEVEL, "vmodule": STR, "log-flush-frequency": DURATION, "logging-format": STR,
            "log-json-info-buffer-size": STR, "log-json-split-stream": BOOL,
            "log-text-info-buffer-size": STR, "log-text-split-stream": BOOL}
_METRICS = {"allow-metric-labels": STR, "allow-metric-labels-manifest": FILE, "disabled-metrics": STR,
            "show-hidden-metrics-for-version": STR}
_SERVING = {"bind-address": IP, "cert-dir": STR, "http2-max-streams-per-connection": INT,
            "permit-address-sharing": BOOL, "permit-port-sharing": BOOL, "secure-port": INT,
            "tls-cert-file": FILE, "tls-cipher-suites": STR, "tls-min-version": STR,
            "tls-private-key-file": FILE, "tls-sni-cert-key": STR}
_REQUESTHEADER = {"requestheader-allowed-names": STR, "requestheader-client-ca-file": FILE,
                  "requestheader-extra-headers-prefix": STR, "requestheader-group-headers": STR,
                  "requestheader-username-headers": STR, "requestheader-uid-headers": STR}
_DELEGATED_AUTH = {"authentication-kubeconfig": KUBECONFIG, "authentication-skip-lookup": BOOL,
                   "authentication-token-webhook-cache-ttl": DURATION,
                   "authentication-tolerate-lookup-failure": BOOL, "authorization-always-allow-paths": STR,
                   "authorization-kubeconfig": KUBECONFIG,
                   "authorization-webhook-cache-authorized-ttl": DURATION,
                   "authorization-webhook-cache-unauthorized-ttl": DURATION, "client-ca-file": FILE}
_LEADER_ELECTION = {"leader-elect": BOOL, "leader-elect-lease-duration": DURATION,
                    "leader-elect-renew-deadline": DURATION, "leader-elect-resource-lock": STR,
                    "leader-elect-resource-name": STR, "leader-elect-resource-namespace": STR,
                    "leader-elect-retry-period": DURATION}
_CLIENT = {"kubeconfig": KUBECONFIG, "master": STR, "kube-api-burst": INT, "kube-api-content-type": STR,
           "kube-api-qps": FLOAT}
_COMMON = {"feature-gates": GATES, "contention-profiling": BOOL, "profiling": BOOL, "help": BOOL,
           "version": STR, **_LOGGING, **_METRICS}

_AUDIT = {
    f"audit-{kind}-{name}": typ
    for kind in ("log", "webhook")
    for name, typ in {"batch-buffer-size": INT, "batch-max-size": INT, "batch-max-wait": DURATION,
                      "batch-throttle-burst": INT, "batch-throttle-enable": BOOL, "batch-throttle-qps": FLOAT,
                      "mode": STR, "truncate-enabled": BOOL, "truncate-max-batch-size": INT,
                      "truncate-max-event-size": INT, "version": STR}.items()
}
_AUDIT.update({"audit-log-compress": BOOL, "audit-log-format": STR, "audit-log-maxage": INT,
               "audit-log-maxbackup": INT, "audit-log-maxsize": INT, "audit-log-path": STR,
               "audit-policy-file": FILE, "audit-webhook-config-file": FILE,
               "audit-webhook-initial-backoff": DURATION})

KUBE_APISERVER: dict[str, str] = {
    **_COMMON, **_SERVING, **_REQUESTHEADER, **_AUDIT,
    "advertise-address": IP, "aggregator-reject-forwarding-redirect": BOOL, "allow-privileged": BOOL,
    "anonymous-auth": BOOL, "api-audiences": STR, "admission-control-config-file": FILE,
    "authentication-config": FILE, "authentication-token-webhook-cache-ttl": DURATION,
    "authentication-token-webhook-config-file": FILE, "authentication-token-webhook-version": STR,
    "authorization-config": FILE, "authorization-mode": AUTHZ, "authorization-policy-file": FILE,
    "authorization-webhook-cache-authorized-ttl": DURATION,
    "authorization-webhook-cache-unauthorized-ttl": DURATION, "authorization-webhook-config-file": FILE,
    "authorization-webhook-version": STR, "client-ca-file": FILE, "cloud-config": FILE, "cloud-provider": STR,
    "cors-allowed-origins": STR, "debug-socket-path": STR, "default-not-ready-toleration-seconds": INT,
    "default-unreachable-toleration-seconds": INT, "default-watch-cache-size": INT,
    "delete-collection-workers": INT, "disable-admission-plugins": ADMISSION, "egress-selector-config-file": FILE,
    "enable-admission-plugins": ADMISSION, "enable-aggregator-routing": BOOL, "enable-bootstrap-token-auth": BOOL,
    "enable-garbage-collector": BOOL, "enable-logs-handler": BOOL, "enable-priority-and-fairness": BOOL,
    "encryption-provider-config": FILE, "encryption-provider-config-automatic-reload": BOOL,
    "endpoint-reconciler-type": STR, "etcd-cafile": FILE, "etcd-certfile": FILE,
    "etcd-compaction-interval": DURATION, "etcd-count-metric-poll-period": DURATION,
    "etcd-db-metric-poll-interval": DURATION, "etcd-healthcheck-timeout": DURATION, "etcd-keyfile": FILE,
    "etcd-prefix": STR, "etcd-readycheck-timeout": DURATION, "etcd-servers": STR,
    "etcd-servers-overrides": STR, "event-ttl": DURATION, "external-hostname": STR, "goaway-chance": FLOAT,
    "kubelet-certificate-authority": FILE, "kubelet-client-certificate": FILE, "kubelet-client-key": FILE,
    "kubelet-preferred-address-types": STR, "kubelet-timeout": DURATION,
    "kubernetes-service-node-port": INT, "lease-reuse-duration-seconds": INT, "livez-grace-period": DURATION,
    "max-connection-bytes-per-sec": INT, "max-mutating-requests-inflight": INT,
    "max-requests-inflight": INT, "min-request-timeout": INT, "oidc-ca-file": FILE, "oidc-client-id": STR,
    "oidc-groups-claim": STR, "oidc-groups-prefix": STR, "oidc-issuer-url": STR, "oidc-required-claim": STR,
    "oidc-signing-algs": STR, "oidc-username-claim": STR, "oidc-username-prefix": STR,
    "peer-advertise-ip": STR, "peer-advertise-port": STR, "peer-ca-file": FILE,
    "proxy-client-cert-file": FILE, "proxy-client-key-file": FILE, "request-timeout": DURATION,
    "runtime-config": STR, "service-account-extend-token-expiration": BOOL, "service-account-issuer": STR,
    "service-account-jwks-uri": STR, "service-account-key-file": FILE, "service-account-lookup": BOOL,
    "service-account-max-token-expiration": DURATION, "service-account-signing-key-file": FILE,
    "service-cluster-ip-range": STR, "service-node-port-range": STR, "shutdown-delay-duration": DURATION,
    "shutdown-send-retry-after": BOOL, "shutdown-watch-termination-grace-period": DURATION,
    "storage-backend": STR, "storage-media-type": STR, "strict-transport-security-directives": STR,
    "token-auth-file": FILE, "tracing-config-file": FILE, "watch-cache": BOOL, "watch-cache-sizes": STR,
}

_CONCURRENT = {f"concurrent-{name}-syncs": INT for name in (
    "cron-job", "daemonset", "deployment", "endpoint", "ephemeralvolume", "gc", "horizontal-pod-autoscaler",
    "job", "namespace", "rc", "replicaset", "resource-quota", "service", "service-endpoint",
    "serviceaccount-token", "statefulset", "ttl-after-finished", "validating-admission-policy-status")}
_SIGNING = {f"cluster-signing-{name}-{part}-file": FILE for name in (
    "kube-apiserver-client", "kubelet-client", "kubelet-serving", "legacy-unknown") for part in ("cert", "key")}

KUBE_CONTROLLER_MANAGER: dict[str, str] = {
    **_COMMON, **_SERVING, **_REQUESTHEADER, **_DELEGATED_AUTH, **_LEADER_ELECTION, **_CLIENT,
    **_CONCURRENT, **_SIGNING,
    "allocate-node-cidrs": BOOL, "attach-detach-reconcile-sync-period": DURATION, "cidr-allocator-type": STR,
    "cloud-config": FILE, "cloud-provider": STR, "cluster-cidr": STR, "cluster-name": STR,
    "cluster-signing-cert-file": FILE, "cluster-signing-duration": DURATION, "cluster-signing-key-file": FILE,
    "configure-cloud-routes": BOOL, "controller-start-interval": DURATION, "controllers": STR,
    "disable-attach-detach-reconcile-sync": BOOL, "disable-force-detach-on-timeout": BOOL,
    "enable-dynamic-provisioning": BOOL, "enable-garbage-collector": BOOL, "enable-hostpath-provisioner": BOOL,
    "enable-leader-migration": BOOL, "endpoint-updates-batch-period": DURATION,
    "horizontal-pod-autoscaler-cpu-initialization-period": DURATION,
    "horizontal-pod-autoscaler-downscale-stabilization": DURATION,
    "horizontal-pod-autoscaler-initial-readiness-delay": DURATION,
    "horizontal-pod-autoscaler-sync-period": DURATION, "horizontal-pod-autoscaler-tolerance": FLOAT,
    "large-cluster-size-threshold": INT, "leader-migration-config": FILE, "min-resync-period": DURATION,
    "namespace-sync-period": DURATION, "node-cidr-mask-size": INT, "node-cidr-mask-size-ipv4": INT,
    "node-cidr-mask-size-ipv6": INT, "node-eviction-rate": FLOAT, "node-monitor-grace-period": DURATION,
    "node-monitor-period": DURATION, "node-startup-grace-period": DURATION,
    "pv-recycler-increment-timeout-nfs": INT, "pv-recycler-minimum-timeout-hostpath": INT,
    "pv-recycler-minimum-timeout-nfs": INT, "pv-recycler-pod-template-filepath-hostpath": FILE,
    "pv-recycler-pod-template-filepath-nfs": FILE, "pv-recycler-timeout-increment-hostpath": INT,
    "pvclaimbinder-sync-period": DURATION, "resource-quota-sync-period": DURATION, "root-ca-file": FILE,
    "route-reconciliation-period": DURATION, "secondary-node-eviction-rate": FLOAT,
    "service-account-private-key-file": FILE, "service-cluster-ip-range": STR,
    "terminated-pod-gc-threshold": INT, "unhealthy-zone-threshold": FLOAT,
    "use-service-account-credentials": BOOL,
}

KUBE_SCHEDULER: dict[str, str] = {
    **_COMMON, **_SERVING, **_REQUESTHEADER, **_DELEGATED_AUTH, **_LEADER_ELECTION, **_CLIENT,
    "config": FILE, "pod-max-in-unschedulable-pods-duration": DURATION, "write-config-to": STR,
}

_ETCD_35: dict[str, str] = {
    "name": STR, "data-dir": STR, "wal-dir": STR, "snapshot-count": INT, "heartbeat-interval": INT,
    "election-timeout": INT, "initial-election-tick-advance": BOOL, "listen-peer-urls": URLS,
    "listen-client-urls": URLS, "listen-client-http-urls": URLS, "max-snapshots": INT, "max-wals": INT,
    "quota-backend-bytes": INT, "backend-bbolt-freelist-type": STR, "backend-batch-interval": DURATION,
    "backend-batch-limit": INT, "max-txn-ops": INT, "max-request-bytes": INT,
    "grpc-keepalive-min-time": DURATION, "grpc-keepalive-interval": DURATION,
    "grpc-keepalive-timeout": DURATION, "socket-reuse-port": BOOL, "socket-reuse-address": BOOL,
    "initial-advertise-peer-urls": URLS, "initial-cluster": STR, "initial-cluster-state": STATE,
    "initial-cluster-token": STR, "advertise-client-urls": URLS, "discovery": STR, "discovery-fallback": STR,
    "discovery-proxy": STR, "discovery-srv": STR, "discovery-srv-name": STR, "strict-reconfig-check": BOOL,
    "pre-vote": BOOL, "auto-compaction-retention": STR, "auto-compaction-mode": STR, "enable-v2": BOOL,
    "v2-deprecation": STR, "cert-file": FILE, "key-file": FILE, "client-cert-auth": BOOL,
    "client-crl-file": FILE, "client-cert-allowed-hostname": STR, "trusted-ca-file": FILE, "auto-tls": BOOL,
    "peer-cert-file": FILE, "peer-key-file": FILE, "peer-client-cert-auth": BOOL, "peer-crl-file": FILE,
    "peer-trusted-ca-file": FILE, "peer-cert-allowed-cn": STR, "peer-cert-allowed-hostname": STR,
    "peer-auto-tls": BOOL, "self-signed-cert-validity": INT, "cipher-suites": STR, "cors": STR,
    "host-whitelist": STR, "tls-min-version": STR, "tls-max-version": STR, "logger": STR, "log-outputs": STR,
    "log-level": STR, "log-format": STR, "enable-log-rotation": BOOL, "log-rotation-config-json": STR,
    "enable-pprof": BOOL, "metrics": STR, "listen-metrics-urls": URLS, "auth-token": STR, "bcrypt-cost": INT,
    "auth-token-ttl": INT, "experimental-initial-corrupt-check": BOOL,
    "experimental-corrupt-check-time": DURATION, "experimental-compact-hash-check-enabled": BOOL,
    "experimental-compact-hash-check-time": DURATION, "experimental-enable-lease-checkpoint": BOOL,
    "experimental-enable-lease-checkpoint-persist": BOOL, "experimental-compaction-batch-limit": INT,
    "experimental-compaction-sleep-interval": DURATION, "experimental-peer-skip-client-san-verification": BOOL,
    "experimental-watch-progress-notify-interval": DURATION, "experimental-warning-apply-duration": DURATION,
    "experimental-warning-unary-request-duration": DURATION,
    "experimental-bootstrap-defrag-threshold-megabytes": INT, "experimental-memory-mlock": BOOL,
    "experimental-snapshot-catchup-entries": INT, "experimental-txn-mode-write-with-shared-buffer": BOOL,
    "experimental-stop-grpc-service-on-defrag": BOOL, "experimental-max-learners": INT,
    "experimental-enable-distributed-tracing": BOOL, "unsafe-no-fsync": BOOL, "force-new-cluster": BOOL,
    "version": BOOL, "config-file": FILE, "help": BOOL,
}
_ETCD_36_ONLY: dict[str, str] = {
    "feature-gates": GATES, "watch-progress-notify-interval": DURATION, "snapshot-catchup-entries": INT,
    "corrupt-check-time": DURATION, "compact-hash-check-time": DURATION, "compaction-batch-limit": INT,
    "compaction-sleep-interval": DURATION, "peer-skip-client-san-verification": BOOL,
    "warning-apply-duration": DURATION, "warning-unary-request-duration": DURATION,
    "bootstrap-defrag-threshold-megabytes": INT, "memory-mlock": BOOL, "max-learners": INT,
    "downgrade-check-time": DURATION, "enable-distributed-tracing": BOOL,
}

FLAGS: dict[str, dict[str, str]] = {
    "kube-apiserver": KUBE_APISERVER,
    "kube-controller-manager": KUBE_CONTROLLER_MANAGER,
    "kube-scheduler": KUBE_SCHEDULER,
}

ADMISSION_PLUGINS = frozenset({
    "AlwaysAdmit", "AlwaysDeny", "AlwaysPullImages", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "ClusterTrustBundleAttest", "DefaultIngressClass", "DefaultStorageClass",
    "DefaultTolerationSeconds", "DenyServiceExternalIPs", "EventRateLimit", "ExtendedResourceToleration",
    "ImagePolicyWebhook", "LimitPodHardAntiAffinityTopology", "LimitRanger", "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook", "NamespaceAutoProvision", "NamespaceExists", "NamespaceLifecycle",
    "NodeRestriction", "OwnerReferencesPermissionEnforcement", "PersistentVolumeClaimResize",
    "PodNodeSelector", "PodSecurity", "PodTolerationRestriction", "Priority", "ResourceQuota", "RuntimeClass",
    "ServiceAccount", "StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
})
AUTHZ_MODES = frozenset({"AlwaysAllow", "AlwaysDeny", "ABAC", "Webhook", "RBAC", "Node"})
KUBE_FEATURE_GATES = frozenset({
    "AdmissionWebhookMatchConditions", "AggregatedDiscoveryEndpoint", "AllAlpha", "AllBeta",
    "AnonymousAuthConfigurableEndpoints", "AnyVolumeDataSource", "APIResponseCompression", "APIServerIdentity",
    "APIServerTracing", "AppArmor", "AppArmorFields", "AuthorizeNodeWithSelectors", "AuthorizeWithSelectors",
    "CloudControllerManagerWebhook", "CloudDualStackNodeIPs", "ClusterTrustBundle",
    "ClusterTrustBundleProjection", "ComponentSLIs", "ConsistentListFromCache", "ContainerCheckpoint",
    "ContextualLogging", "CoordinatedLeaderElection", "CPUManagerPolicyAlphaOptions",
    "CPUManagerPolicyBetaOptions", "CPUManagerPolicyOptions", "CRDValidationRatcheting",
    "CronJobsScheduledAnnotation", "CrossNamespaceVolumeDataSource", "CSIMigrationPortworx", "CSIVolumeHealth",
    "CustomCPUCFSQuotaPeriod", "CustomResourceFieldSelectors", "DevicePluginCDIDevices", "DisableAllocatorDualWrite",
    "DisableCloudProviders", "DisableKubeletCloudCredentialProviders", "DisableNodeKubeProxyVersion",
    "DRAAdminAccess", "DRAResourceClaimDeviceStatus", "DynamicResourceAllocation", "ElasticIndexedJob",
    "EventedPLEG", "ExecProbeTimeout", "GracefulNodeShutdown", "GracefulNodeShutdownBasedOnPodPriority",
    "HonorPVReclaimPolicy", "HPAScaleToZero", "ImageMaximumGCAge", "ImageVolume", "InPlacePodVerticalScaling",
    "InPlacePodVerticalScalingAllocatedStatus", "InTreePluginPortworxUnregister", "JobBackoffLimitPerIndex",
    "JobManagedBy", "JobPodFailurePolicy", "JobPodReplacementPolicy", "JobSuccessPolicy", "KMSv1", "KMSv2",
    "KMSv2KDF", "KubeletCgroupDriverFromCRI", "KubeletInUserNamespace", "KubeletPodResourcesDynamicResources",
    "KubeletPodResourcesGet", "KubeletSeparateDiskGC", "KubeletTracing", "KubeProxyDrainingTerminatingNodes",
    "LegacyServiceAccountTokenCleanUp", "LoadBalancerIPMode", "LocalStorageCapacityIsolationFSQuotaMonitoring",
    "LoggingAlphaOptions", "LoggingBetaOptions", "MatchLabelKeysInPodAffinity", "MatchLabelKeysInPodTopologySpread",
    "MaxUnavailableStatefulSet", "MemoryManager", "MemoryQoS", "MultiCIDRServiceAllocator",
    "MutatingAdmissionPolicy", "NFTablesProxyMode", "NodeInclusionPolicyInPodTopologySpread", "NodeLogQuery",
    "NodeSwap", "OpenAPIEnums", "PodAndContainerStatsFromCRI", "PodDeletionCost", "PodDisruptionConditions",
    "PodHostIPs", "PodIndexLabel", "PodLevelResources", "PodLifecycleSleepAction", "PodLifecycleSleepActionAllowZero",
    "PodReadyToStartContainersCondition", "PodSchedulingReadiness", "PortForwardWebsockets", "ProcMountType",
    "QOSReserved", "RecoverVolumeExpansionFailure", "RecursiveReadOnlyMounts", "ReduceDefaultCrashLoopBackOffDecay",
    "RelaxedDNSSearchValidation", "RelaxedEnvironmentVariableValidation", "RemoteRequestHeaderUID",
    "ResilientWatchCacheInitialization", "RetryGenerateName", "RotateKubeletServerCertificate",
    "RuntimeClassInImageCriApi", "SchedulerAsyncPreemption", "SchedulerQueueingHints", "SELinuxMount",
    "SELinuxMountReadWriteOncePod", "SeparateTaintEvictionController", "ServiceAccountTokenJTI",
    "ServiceAccountTokenNodeBinding", "ServiceAccountTokenNodeBindingValidation",
    "ServiceAccountTokenPodNodeInfo", "ServiceTrafficDistribution", "SidecarContainers",
    "SizeMemoryBackedVolumes", "StatefulSetAutoDeletePVC", "StatefulSetStartOrdinal", "StorageNamespaceIndex",
    "StorageVersionAPI", "StorageVersionHash", "StorageVersionMigrator", "StrictCostEnforcementForVAP",
    "StrictCostEnforcementForWebhooks", "StructuredAuthenticationConfiguration",
    "StructuredAuthorizationConfiguration", "TopologyAwareHints", "TopologyManagerPolicyAlphaOptions",
    "TopologyManagerPolicyBetaOptions", "TopologyManagerPolicyOptions", "TranslateStreamCloseWebsocketRequests",
    "UnauthenticatedHTTP2DOSMitigation", "UserNamespacesPodSecurityStandards", "UserNamespacesSupport",
    "ValidatingAdmissionPolicy", "VolumeAttributesClass", "VolumeCapacityPriority",
    "WatchCacheInitializationPostStartHook",
    "WatchFromStorageWithoutResourceVersion", "WatchList", "WatchListClient", "WindowsHostNetwork",
    "WinDSR", "WinOverlay", "ZeroLimitedNominalConcurrencyShares",
})
ETCD_FEATURE_GATES = frozenset({
    "CompactHashCheck", "InitialCorruptCheck", "LeaseCheckpoint", "LeaseCheckpointPersist",
    "SetMemberLocalAddr", "StopGRPCServiceOnDefrag", "TxnModeWriteWithSharedBuffer",
})

_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")
_KUBECONFIG_EMPTY = ("invalid configuration: no configuration has been provided, try setting "
                     "KUBERNETES_MASTER environment variable")


@dataclass(frozen=True)
class HostFile:
    """What a container path is on the node: ``missing``, ``file`` (with its size) or ``dir``."""

    kind: str
    size: int = 0
    host: Optional[str] = None       # where it is on the node (to read a config file's content)


@dataclass
class Fault:
    """Why a container exits right after starting, with the log lines the real binary writes."""

    exit_code: int
    summary: str
    lines: list[LogLine]


def etcd_flags(image: str) -> dict[str, str]:
    """The flags of the etcd release in ``image`` (``--feature-gates`` and friends from v3.6)."""
    tag = image.rsplit(":", 1)[-1]
    match = re.match(r"v?(\d+)\.(\d+)", tag)
    v36 = bool(match) and (int(match.group(1)), int(match.group(2))) >= (3, 6)  # type: ignore[union-attr]
    return {**_ETCD_35, **_ETCD_36_ONLY} if v36 else dict(_ETCD_35)


def check_command(
    role: str, argv: list[str], image: str, lookup: Callable[[str], HostFile]
) -> Optional[Fault]:
    """The fault that makes this control-plane container exit, or None if the command line is usable.

    ``argv`` is the command plus args without the binary; ``lookup`` maps a path inside the
    container to what is there on the node (through the volume mounts).
    """
    if role == "etcd":
        return _check_etcd(argv, etcd_flags(image), lookup)
    known = FLAGS.get(role)
    if known is None:
        return None
    return _check_kube(role, argv, known, lookup)


# --------------------------------------------------------------------------- Kubernetes components (pflag)


def _check_kube(
    role: str, argv: list[str], known: dict[str, str], lookup: Callable[[str], HostFile]
) -> Optional[Fault]:
    parsed, problem = _pflag_parse(argv, known)
    if problem is not None:
        return Fault(1, problem, logs.cobra_parse_error(role, list(known), problem))
    values, positional = parsed
    if positional:
        message = f'"{role}" does not take any arguments, got {_go_list(positional)}'
        return Fault(1, message, [logs.plain(f"Error: {message}")])
    for name, value in values:
        err = _validate_value(known[name], value)
        if err is not None:
            message = f'invalid argument "{value}" for "{_flag_title(name)}" flag: {err}'
            return Fault(1, message, logs.cobra_parse_error(role, list(known), message))
    for name, value in values:
        problem = _semantic_error(known[name], name, value) or _config_file_error(role, name, value, lookup) or \
            _file_error(known[name], value, lookup)
        if problem is not None:
            return Fault(1, problem, logs.command_failed(problem, _first_line(role)))
    return None


Parsed = tuple[list[tuple[str, str]], list[str]]


def _pflag_parse(argv: list[str], known: dict[str, str]) -> tuple[Parsed, Optional[str]]:
    """Split argv the way pflag does: (flag values, positional args), or the parse error message."""
    values: list[tuple[str, str]] = []
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional += argv[i:]
            break
        if arg.startswith("--"):
            name, has_value, value = arg[2:].partition("=")
            if name not in known:
                return ([], []), f"unknown flag: --{name}"
            if not has_value:
                if known[name] == BOOL:
                    value = "true"
                elif i < len(argv):
                    value, i = argv[i], i + 1
                else:
                    return ([], []), f"flag needs an argument: --{name}"
            values.append((name, value))
        elif arg.startswith("-") and len(arg) > 1:
            short = arg[1]
            if short != "v":
                return ([], []), f"unknown shorthand flag: '{short}' in {arg}"
            rest = arg[2:].lstrip("=")
            if not rest:
                if i >= len(argv):
                    return ([], []), "flag needs an argument: 'v' in -v"
                rest, i = argv[i], i + 1
            values.append(("v", rest))
        else:
            positional.append(arg)
    return (values, positional), None


def _flag_title(name: str) -> str:
    return "-v, --v" if name == "v" else f"--{name}"


def _validate_value(typ: str, value: str) -> Optional[str]:
    """pflag's parse error for ``value`` as a flag of type ``typ`` (None if it parses)."""
    if typ in (INT, LEVEL):
        if not _parses_int(value, base_zero=typ == INT):
            return f'strconv.ParseInt: parsing "{value}": invalid syntax'
    elif typ == BOOL:
        if value not in ("1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"):
            return f'strconv.ParseBool: parsing "{value}": invalid syntax'
    elif typ == FLOAT:
        try:
            float(value)
        except ValueError:
            return f'strconv.ParseFloat: parsing "{value}": invalid syntax'
    elif typ == DURATION:
        if value != "0" and not _DURATION.match(value):
            return f'time: invalid duration "{value}"'
    elif typ == IP:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return f'failed to parse IP: "{value}"'
    elif typ == GATES:
        return _gates_error(value, KUBE_FEATURE_GATES)
    return None


def _parses_int(value: str, base_zero: bool) -> bool:
    try:
        int(value, 0 if base_zero else 10)
    except ValueError:
        return False
    return True


def _gates_error(value: str, known: frozenset[str]) -> Optional[str]:
    for item in filter(None, (s.strip() for s in value.split(","))):
        key, has_value, setting = item.partition("=")
        if not has_value:
            return f"missing bool value for {key}"
        if setting.strip() not in ("true", "false", "True", "False", "1", "0", "t", "f", "TRUE", "FALSE"):
            return f"invalid value of {key}={setting}, err: strconv.ParseBool: parsing {setting!r}: invalid syntax"
        if key.strip() not in known:
            return f"unrecognized feature gate: {key.strip()}"
    return None


def _semantic_error(typ: str, name: str, value: str) -> Optional[str]:
    """Errors the component reports after parsing (options validation), as its log says them."""
    if typ == ADMISSION:
        for plugin in filter(None, (p.strip() for p in value.split(","))):
            if plugin not in ADMISSION_PLUGINS:
                return f'{name} plugin "{plugin}" is unknown'
    if typ == AUTHZ:
        for mode in filter(None, (m.strip() for m in value.split(","))):
            if mode not in AUTHZ_MODES:
                return f'authorization-mode "{mode}" is not a valid mode'
    return None


def _config_file_error(role: str, name: str, value: str, lookup: Callable[[str], HostFile]) -> Optional[str]:
    """kube-apiserver's error for an audit policy, EncryptionConfiguration or AdmissionConfiguration it
    cannot see (no mount covers it) or that is not a valid one (:mod:`cpctl_lab.configfiles`)."""
    if role != "kube-apiserver" or name not in configfiles.CONFIG_FLAGS:
        return None
    found = lookup(value)
    return configfiles.config_error(name, value, found.host if found.kind != "missing" else None)


def _file_error(typ: str, path: str, lookup: Callable[[str], HostFile]) -> Optional[str]:
    """The error of a flag naming a file that is not there (or, for a kubeconfig, is empty)."""
    if typ not in (FILE, KUBECONFIG) or not path:
        return None
    found = lookup(path)
    if typ == KUBECONFIG:
        if found.kind == "missing":
            return f"stat {path}: no such file or directory"
        if found.kind == "dir":
            return f"read {path}: is a directory"
        if found.size == 0:
            return _KUBECONFIG_EMPTY
        return None
    if found.kind == "missing":
        return f"open {path}: no such file or directory"
    if found.kind == "dir":
        return f"read {path}: is a directory"
    return None


def _first_line(role: str) -> LogLine:
    if role == "kube-apiserver":
        return logs.klog_plain("I", "options.go:228", "external host was not specified, using the advertise address")
    return logs.klog_plain("I", "serving.go:380", "Generated self-signed cert in-memory")


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(f'"{s}"' for s in items) + "]"


# --------------------------------------------------------------------------- etcd (Go flag package)


def _check_etcd(argv: list[str], known: dict[str, str], lookup: Callable[[str], HostFile]) -> Optional[Fault]:
    values: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            message = f"'{arg}' is not a valid flag"
            return Fault(1, message, [logs.zap("warn", "etcdmain/etcd.go:75", "failed to verify flags",
                                               {"error": message})])
        i += 1
        name, has_value, value = arg.lstrip("-").partition("=")
        typ = known.get(name)
        if typ is None:
            message = f"flag provided but not defined: -{name}"
            return Fault(2, message, logs.etcd_parse_error(message))
        if not has_value:
            if typ == BOOL:
                value = "true"
            elif i < len(argv):
                value, i = argv[i], i + 1
            else:
                message = f"flag needs an argument: -{name}"
                return Fault(2, message, logs.etcd_parse_error(message))
        err = _etcd_value_error(typ, value)
        if err is not None:
            what = f"boolean value \"{value}\" for" if typ == BOOL else f"value \"{value}\" for flag"
            message = f"invalid {what} -{name}: {err}"  # Go's flag package words the two cases so
            return Fault(2, message, logs.etcd_parse_error(message))
        values.append((name, value))
    for name, value in values:
        missing = _file_error(known[name], value, lookup)
        if missing is not None:
            return Fault(1, missing, logs.etcd_fatal("discovery failed", missing))
    return None


def _etcd_value_error(typ: str, value: str) -> Optional[str]:
    if typ in (INT, BOOL, DURATION, FLOAT):
        return "parse error" if _validate_value(typ, value) is not None else None
    if typ == URLS:
        for url in value.split(","):
            parts = urllib.parse.urlsplit(url.strip())
            if parts.scheme not in ("http", "https", "unix", "unixs"):
                return f"URL scheme must be http, https, unix, or unixs: {url}"
            if not parts.netloc:
                return f"URL address does not have the form \"host:port\": {url}"
    if typ == STATE and value not in ("new", "existing"):
        return f'invalid value "{value}"'
    if typ == GATES:
        return _gates_error(value, ETCD_FEATURE_GATES)
    return None

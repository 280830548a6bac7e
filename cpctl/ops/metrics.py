"""node_exporter textfile metrics for ``cpctl check`` (Prometheus text exposition format 0.0.4).

The file is written with ``Host.write_atomic`` (dot-temp sibling + rename, mode 0644) because
node_exporter reads the collector dir at any moment: a half-written file would make it drop
the whole file with a parse error, and alerts on ``cpctl_check_success`` would flap.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from cpctl.host.base import Host

if TYPE_CHECKING:
    from cpctl.ops.certs import Report as CertsReport
    from cpctl.ops.drift import Report

#: One sample of a family: (labels, value).
Sample = Tuple[Dict[str, str], float]


def escape_label(value: str) -> str:
    """Label value escaping of the exposition format: backslash, double quote and newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text escaping: only backslash and newline."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def family(name: str, help_text: str, kind: str, samples: Iterable[Sample],
           merge: Callable[[float, float], float] = max) -> str:
    """One metric family: # HELP, # TYPE and its samples, sorted by labels for stable diffs; "" when
    it has no sample. ONE sample per label set, always: two with the same labels (a component
    defined by two manifests, the very case ``check`` exists to catch) would make node_exporter drop
    the whole file ("was collected before with the same name and label values"), so they are merged
    (``merge``: the larger value by default - 1 wins over 0, the later time over the earlier)."""
    merged: Dict[Tuple[Tuple[str, str], ...], float] = {}
    for labels, value in samples:
        key = tuple(sorted((k, str(v)) for k, v in labels.items()))
        merged[key] = merge(merged[key], value) if key in merged else value
    if not merged:
        return ""
    lines = ["# HELP %s %s" % (name, escape_help(help_text)), "# TYPE %s %s" % (name, kind)]
    for key, value in sorted(merged.items()):
        label_text = ",".join('%s="%s"' % (k, escape_label(v)) for k, v in key)
        lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", format_value(value)))
    return "\n".join(lines) + "\n"


def check_metrics(now: float, report: "Optional[Report]") -> str:
    """All cpctl check metrics. ``report``: the check's findings, None when the check failed: then
    only ``cpctl_check_success 0`` and the run's time are written - no counts at all, rather than
    zeros that would clear every drift alert while the check is broken.

    A component is in one of three states: its manifest in the manifests dir, parked by cpctl, or
    missing (in the baseline, neither present nor parked): ``cpctl_component_parked`` and
    ``cpctl_component_missing`` tell them apart (0 in both: the manifest is in place, which says
    nothing about its pod). Times are Unix timestamps (``..._timestamp_seconds``, as node_exporter's
    ``node_boot_time_seconds``), never ages: an age is stale the moment the file is written, a
    timestamp lets an alert compare it with ``time()``."""
    parts = [
        family("cpctl_last_check_timestamp_seconds", "Unix time of the last cpctl check run.", "gauge",
               [({}, round(now, 3))]),
        family("cpctl_check_success", "1 when the last cpctl check could run (drift or not), 0 when it failed "
               "(then no other cpctl series is written).", "gauge", [({}, 1 if report is not None else 0)]),
    ]
    if report is None:
        return "".join(parts)
    from cpctl.ops.drift import KINDS
    counts = report.counts()
    components = report.components
    parts += [
        family("cpctl_drift_findings", "Findings of the last cpctl check, by kind (info kinds included).",
               "gauge", [({"kind": k}, counts.get(k, 0)) for k in KINDS]),
        family("cpctl_component_parked", "1 when the static pod's manifest is parked by cpctl, else 0.",
               "gauge", [({"component": c}, 1 if s > 0 else 0) for c, s in components.items()]),
        family("cpctl_component_missing", "1 when the static pod's manifest is in the baseline but neither in the "
               "manifests dir nor parked (it vanished), else 0.",
               "gauge", [({"component": c}, 1 if c in report.missing else 0) for c in components]),
        family("cpctl_component_parked_since_timestamp_seconds", "Unix time the component was parked by cpctl "
               "(only parked components).", "gauge",
               [({"component": c}, round(t, 3)) for c, t in report.parked_since.items()]),
        family("cpctl_component_parked_until_timestamp_seconds", "Unix time a parked component's --for deadline "
               "ends (only components parked with --for).", "gauge",
               [({"component": c}, round(t, 3)) for c, t in report.parked_until.items()]),
        family("cpctl_change_unconfirmed_deadline_timestamp_seconds", "Unix time the node reverts a change made "
               "with --confirm-within unless cpctl confirm keeps it (one series per change awaiting it).", "gauge",
               [({"component": c, "file": f}, round(t, 3)) for c, f, t in report.unconfirmed]),
        family("cpctl_change_revert_failed_attempts", "Failed attempts of the node-side revert of an unconfirmed "
               "change (an environment error: the node keeps the arm and retries with back-off); only changes "
               "whose revert is failing.", "gauge",
               [({"component": c, "file": f}, n) for c, f, n in report.revert_failing]),
        family("cpctl_api_view_stale", "1 when the API's view of this node's pods cannot be trusted (its API server "
               "or etcd parked, or - local mode - its own API server not answering): pod states come from the "
               "runtime and the health endpoints only, else they are unknown.", "gauge",
               [({}, 1 if report.api_stale else 0)]),
        family("cpctl_change_revert_timer_running", "1 while the node-side timer that reverts an unconfirmed "
               "change runs, 0 when it died (nothing reverts the change by itself: cpctl revert-unconfirmed does); "
               "absent when that is unknown.", "gauge",
               [({"component": c, "file": f}, n) for c, f, n in report.timer_running]),
        family("cpctl_cert_not_after_seconds", "Unix time a kubeadm certificate (file, kubeconfig) expires.",
               "gauge", _cert_samples(report.certs), merge=min),
        family("cpctl_component_cert_stale", "1 when the running component still uses an old certificate "
               "(restart it), 0 when it uses the files on disk or re-reads them by itself; absent when that is "
               "unknown.", "gauge", _stale_samples(report.certs)),
        family("cpctl_etcd_alarm_active", "1 while the etcd cluster has an active alarm of this kind (NOSPACE: it "
               "refuses writes; CORRUPT: members' data differ), else 0; absent when the node has no etcd to ask or "
               "its alarms could not be read.", "gauge", _alarm_samples(report)),
    ]
    return "".join(parts)


def _cert_samples(certs: "Optional[CertsReport]") -> List[Sample]:
    """(labels, not-after) of each readable certificate in a ``cpctl certs`` report."""
    import calendar
    import time
    out: List[Sample] = []
    if not certs:
        return out
    for cert in certs["certificates"]:
        not_after = cert["not_after"]
        if not_after:
            stamp = calendar.timegm(time.strptime(not_after, "%Y-%m-%dT%H:%M:%SZ"))
            out.append(({"node": certs["node"], "file": cert["name"], "subject": cert["subject"]}, stamp))
    return out


def _stale_samples(certs: "Optional[CertsReport]") -> List[Sample]:
    """(labels, 1/0) of each component whose verdict is known (a component defined twice: one
    series, 1 when either is STALE - ``family`` merges them)."""
    from cpctl.ops.certs import CURRENT, RELOADING, STALE
    if not certs:
        return []
    return [({"node": certs["node"], "component": c["component"]}, 1 if c["verdict"] == STALE else 0)
            for c in certs["components"] if c["verdict"] in (STALE, CURRENT, RELOADING)]


def _alarm_samples(report: "Report") -> List[Sample]:
    """(labels, 1/0) per alarm kind: NOSPACE and CORRUPT always, any other kind while active."""
    seen = report.etcd_alarms
    if seen is None or seen.error:
        return []
    from cpctl.ops.etcdcare import ALARM_KINDS
    active = seen.kinds()
    return [({"alarm": kind}, 1 if kind in active else 0) for kind in sorted(set(ALARM_KINDS) | set(active))]


def write_textfile(host: Host, path: str, text: str) -> None:
    """Atomically replace ``path``; 0644 so node_exporter (often not root) can read it."""
    if not path.endswith(".prom"):
        from cpctl.errors import CpctlError, ExitCode
        raise CpctlError("--prometheus-textfile %s: node_exporter only reads files ending in .prom" % path,
                         ExitCode.USAGE)
    host.write_atomic(path, text.encode("utf-8"), 0o644)

"""Text renderings of cpctl's results (JSON output needs none: it is the data itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from cpctl.core.views import Report as StatusReport
    from cpctl.ops.certs import Report as CertsReport

from cpctl.cli.context import wide


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, like kubectl's tables."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


# How ``status`` says a component's last change (its history action) in words.
_CHANGED = {"stop": "stopped", "start": "started", "restart": "restarted", "apply": "applied", "edit": "edited",
            "flags": "flags changed", "rollback": "rolled back", "armed": "changed, awaiting confirmation",
            "confirmed": "change confirmed", "reverted": "reverted unconfirmed change",
            "rearmed": "revert timer restarted", "dropped": "unconfirmed change dropped",
            "displaced": "replaced by another writer",
            "keep-in": "flags kept for kubeadm upgrade", "move-stray": "stray moved away",
            "restore-missing": "restored from the baseline", "scheduler-add": "added", "scheduler-remove": "removed"}


def last_change_text(change: Optional[Mapping[str, object]], now: Optional[float] = None) -> str:
    """``reverted unconfirmed change 2m ago`` (by whom when not an automatic one); "" when none."""
    if not change or not isinstance(change.get("action"), str):
        return ""
    import time

    from cpctl.timeutil import format_duration, parse_iso
    action = str(change["action"])
    words = _CHANGED.get(action, action)
    if action == "outside":           # not cpctl's change: kubeadm's upgrade, or someone else (core.outside)
        reason = str(change.get("reason") or "replaced outside cpctl")
        return reason if reason.startswith("replaced") else "replaced by %s" % reason
    if action == "rollback" and change.get("automatic"):
        words = "rolled back automatically"
    try:
        ago = " %s ago" % format_duration((time.time() if now is None else now) - parse_iso(change.get("time")))
    except ValueError:
        ago = ""
    by = " by %s" % change["user"] if change.get("user") and action not in ("reverted", "dropped") \
        and not change.get("automatic") else ""
    return "%s%s%s" % (words, ago, by)


def _age(pod: Optional[Mapping[str, object]], key: str) -> str:
    value = (pod or {}).get(key) if (pod or {}).get("present") else None
    if not isinstance(value, (int, float)):
        return "-"
    from cpctl.timeutil import format_duration
    return format_duration(value)


def _restarts(pod: Optional[Mapping[str, object]]) -> str:
    value = (pod or {}).get("restarts") if (pod or {}).get("present") else None
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "-"


def _via(pod: Optional[Mapping[str, object]]) -> str:
    if not pod:
        return "not observed"
    return "%s%s" % (pod.get("source") or "?", " (stale: this node's API server is parked)" if pod.get("stale") else "")


def _detail(c: Mapping[str, object]) -> str:
    """What the file's state needs said (parked: since, by, until, why; invalid: why; missing: the
    fix; unconfirmed: the deadline), else the component's last change."""
    if c.get("unconfirmed"):
        armed = c["unconfirmed"]
        if not isinstance(armed, Mapping):
            return "unconfirmed, reverts at ?"
        failing = ", revert failing: %s" % armed["failing"] if armed.get("failing") else ""
        if armed.get("timer_problem"):
            return "unconfirmed, %s %s, revert timer NOT running: %s" % (
                "overdue since" if armed.get("overdue") else "reverts at", armed.get("deadline"),
                armed["timer_problem"])
        if armed.get("overdue"):
            return "unconfirmed, overdue since %s: reverts now by the node's timer%s" % (armed.get("deadline"), failing)
        return "unconfirmed, reverts at %s%s" % (armed.get("deadline"), failing)
    if c["state"] == "parked":
        detail = "since %s by %s" % (c.get("since") or "?", c.get("by") or "?")
        if c.get("until"):
            detail += ", until %s%s" % (c["until"], " (OVERDUE)" if c.get("overdue") else "")
        if c.get("reason"):
            detail += ": %s" % c["reason"]
        return detail
    if c["state"] == "invalid":
        return str(c.get("error") or "")
    if c["state"] == "missing":
        return "in the baseline, but neither here nor parked: %s" % c.get("fix")
    change = c.get("last_change")
    return last_change_text(change if isinstance(change, Mapping) else None)


def status_text(data: "StatusReport") -> str:
    """kubectl's columns: STATUS (the pod: running and Ready, not-ready, absent, unknown), RESTARTS,
    AGE (the pod's); ``-o wide`` adds the phase, how long the container is up, which probe saw it,
    the mirror pod, its UID and the whole checksum."""
    rows = []
    for c in data["components"]:
        pod = c.get("observed")
        row: List[object] = [c["component"], c["file"], c["state"], c.get("pod_state") or "-", _restarts(pod),
                             _age(pod, "age_seconds"), _detail(c)]
        if wide():
            row[6:6] = [(pod or {}).get("phase") or "-", _age(pod, "container_age_seconds"),
                        _via(pod) if c["state"] == "present" else "-",
                        c.get("pod") or "-", (pod or {}).get("uid") or "-", c.get("checksum") or "-"]
        rows.append(row)
    headers = ["COMPONENT", "FILE", "STATE", "STATUS", "RESTARTS", "AGE", "DETAIL"]
    if wide():
        headers[6:6] = ["PHASE", "CONTAINER UP", "VIA", "MIRROR POD", "UID", "SHA256"]
    lines = ["node %s  manifests %s" % (data["node"], data["manifests_dir"])]
    lines.append(table(headers, rows) if rows else "(no static pod manifests and nothing parked)")
    lines += ["warning: %s" % w for w in data.get("warnings", [])]
    lines += ["recovered: %s" % r for r in data.get("recovered", [])]
    return "\n".join(lines)


def history_text(records: Sequence[Mapping[str, object]]) -> str:
    if not records:
        return "(no history)"
    rows = [[r.get("time"), r.get("user"), r.get("host"), r.get("action"), r.get("component"),
             str(r.get("checksum") or "")[:None if wide() else 12], r.get("origin") or "-",
             str(r.get("reason") or "") + (" [recovered]" if r.get("recovered") else "")]
            for r in records]
    headers = ["TIME", "USER", "HOST", "ACTION", "COMPONENT", "SHA256", "ORIGIN", "REASON"]
    if wide():                    # -o wide: the node, the file, the change's id, the revision it kept
        headers[5:5] = ["NODE", "FILE", "OP", "REV"]
        for row, record in zip(rows, records):
            row[5:5] = [record.get("node") or "-", record.get("file") or "-", record.get("op") or "-",
                        "-" if record.get("revision") is None else record.get("revision")]
    return table(headers, rows)


def outcomes_text(data: dict) -> str:
    """stop/start/restart: one line per component with what the waits established."""
    lines = ["recovered: %s" % r for r in data.get("recovered", [])]
    if not data["results"] and data.get("all_parked"):
        lines.append("nothing parked on node %s" % data["node"])
    if not data["results"] and data.get("stale_certs"):
        lines.append("no component uses an old certificate on node %s" % data["node"])
    for result in data["results"]:
        line = "%s: %s" % (result["component"], result["message"])
        waits = [result.get("wait")] + [(result.get(step) or {}).get("wait") for step in ("stop", "start")]
        details = [w["detail"] for w in waits if isinstance(w, dict) and w.get("detail")]
        lines.append(line + "".join(" - %s" % d for d in details))
        if result.get("leadership"):
            lines.append("%s: %s" % (result["component"], result["leadership"]))
    lines += ["%s: not restarted (%s) - %s" % (left["component"], left["verdict"], left["why"])
              for left in data.get("left") or []]
    return "\n".join(lines)


def plan_text(data: dict) -> str:
    """A dry run: the moves in order, then the manifests-dir listing before/after as a diff."""
    lines = ["dry run on node %s (nothing changed):" % data["node"]]
    if not data["plan"]:
        lines.append("  nothing parked" if data.get("all_parked") else
                     "  no component uses an old certificate" if data.get("stale_certs") else "  nothing to do")
    for n, step in enumerate(data["plan"], 1):
        if step.get("move"):
            lines.append("  %d. %s %s: move %s -> %s" % (n, step["action"], step["component"], step["move"][0],
                                                       step["move"][1]))
            if step.get("note"):
                lines.append("     note: %s" % step["note"])
        else:
            lines.append("  %d. %s %s: %s" % (n, step["action"], step["component"], step["note"]))
    lines += ["  not restarted: %s (%s) - %s" % (left["component"], left["verdict"], left["why"])
              for left in data.get("left") or []]
    if data.get("diff"):
        lines.append(data["diff"].rstrip("\n"))
    return "\n".join(lines)


def certs_text(data: "CertsReport") -> str:
    """``cpctl certs``: the certificates (like ``kubeadm certs check-expiration``), then whether
    each running component uses them."""
    rows = []
    for cert in data["certificates"]:
        left = cert.get("days_left")
        rows.append([cert["name"] + ("" if cert.get("embedded") is not False else " (file)"),
                     cert.get("subject") or "-", (cert.get("not_after") or "-").replace("T", " "),
                     "-" if left is None else ("%dd" % left if left >= 0 else "EXPIRED"),
                     cert.get("error") or cert.get("chain") or "-"])
    head = "node %s  %s" % (data["node"], data.get("kube_dir", ""))
    comps = [[c["component"], c["verdict"], (c.get("started") or "-").replace("T", " "), c.get("why") or ""]
             for c in data["components"]]
    # a STARTED of "-" says why below the table (etcd: judged by what it serves, no start time needed)
    unknown = ["STARTED - for %s: %s" % (c["component"], c.get("started_source") or "no start time")
               for c in data["components"] if not c.get("started") and c.get("started_source")]
    return "\n\n".join([head, table(["CERTIFICATE", "SUBJECT", "NOT AFTER", "LEFT", "CHAIN"], rows),
                        "\n".join([table(["COMPONENT", "VERDICT", "STARTED", "WHY"], comps)] + unknown)])

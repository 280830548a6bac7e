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


def _pod_column(word: Optional[str], pod: Optional[Mapping[str, object]]) -> str:
    """The pod as systemctl's "active" column: running / not-ready / absent / unknown, then what
    was seen (phase, age, which probe saw it, and whether that view is stale)."""
    if not word:
        return "-"
    if not pod:
        return word if word != "unknown" else "unknown (not observed)"
    seen = [str(pod.get("phase") or "")] if pod.get("present") else []
    age, container_age = pod.get("age_seconds"), pod.get("container_age_seconds")
    if pod.get("present") and isinstance(age, (int, float)):
        from cpctl.timeutil import format_duration
        seen.append("pod %s" % format_duration(age))
    if pod.get("present") and isinstance(container_age, (int, float)):
        from cpctl.timeutil import format_duration
        restarts = pod.get("restarts")
        seen.append("container up %s%s" % (format_duration(container_age),
                                           "" if not isinstance(restarts, int) else ", %d restart%s" % (
                                               restarts, "" if restarts == 1 else "s")))
    seen.append("via %s" % (pod.get("source") or "?"))
    if pod.get("stale"):
        seen.append("stale: this node's API server is parked")
    return "%s (%s)" % (word, ", ".join(s for s in seen if s))


def status_text(data: "StatusReport") -> str:
    rows = []
    for c in data["components"]:
        detail = ""
        if c["state"] == "parked":
            detail = "since %s by %s" % (c.get("since") or "?", c.get("by") or "?")
            if c.get("until"):
                detail += ", until %s%s" % (c["until"], " (OVERDUE)" if c.get("overdue") else "")
            if c.get("reason"):
                detail += ": %s" % c["reason"]
        elif c["state"] == "invalid":
            detail = c.get("error") or ""
        elif c["state"] == "missing":
            detail = "in the baseline, but neither here nor parked: %s" % c.get("fix")
        if c.get("unconfirmed"):
            detail = "unconfirmed, reverts at %s" % c["unconfirmed"].get("deadline")
        checksum = c.get("checksum") or ""
        row: List[object] = [c["component"], c["file"], c["state"], _pod_column(c.get("pod_state"), c.get("observed")),
               checksum if wide() else checksum[:12], detail]
        if wide():
            row[4:4] = [c.get("pod") or "-", (c.get("observed") or {}).get("uid") or "-"]
        rows.append(row)
    headers = ["COMPONENT", "FILE", "STATE", "POD", "SHA256", "DETAIL"]
    if wide():
        headers[4:4] = ["MIRROR POD", "UID"]
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
    return "\n\n".join([head, table(["CERTIFICATE", "SUBJECT", "NOT AFTER", "LEFT", "CHAIN"], rows),
                        table(["COMPONENT", "VERDICT", "STARTED", "WHY"], comps)])

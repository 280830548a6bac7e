"""``cpctl baseline`` and ``cpctl check``: thin click layer over :mod:`cpctl.ops.drift`.

Exit codes follow the monitoring-plugin convention so a timer, node-problem-detector or a
Nagios-style runner can use them directly: 0 clean, 1 drift found (after --fix, what remains),
and the usual cpctl codes when the check itself could not run (2 usage, 4 refused, 5 locked,
7 environment, ...). With --prometheus-textfile the metrics file is written in every case,
``cpctl_check_success 0`` when the check failed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict

import click

from cpctl.cli.context import note
from cpctl.cli.fanout import execute

if TYPE_CHECKING:                   # the CLI loads these modules when a command runs
    from cpctl.core.node import Node
    from cpctl.host.base import Host
    from cpctl.ops.drift import FixAction, Report


class CheckRun(TypedDict):
    """One node's check: the first report, the one after ``--fix`` (else the same), what the fix did."""

    report: "Report"
    final: "Report"
    actions: Optional[List["FixAction"]]
    dry_run: bool


def _object(value: object) -> Mapping[str, object]:
    """A JSON object of a command's result (anything else: an empty one)."""
    return value if isinstance(value, Mapping) else {}


def _objects(value: object) -> List[Mapping[str, object]]:
    """The JSON objects of a list in a command's result."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _strings(value: object) -> List[str]:
    """The strings of a list in a command's result."""
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


@click.command()
@click.option("--accept", is_flag=True, help="Replace an existing baseline with the current state "
              "(e.g. after kubeadm upgrade).")
@click.pass_context
def baseline(ctx: click.Context, accept: bool) -> None:
    """Record the expected manifests (files, pod names, content) in STATE/baseline.json.

    Without --accept an existing baseline is kept and the differences are shown.
    """
    from cpctl.ops import drift

    def action(node: "Node") -> Dict[str, object]:
        # one shape: the node, and "replaced" false when nothing was recorded (docs/json.md)
        recorded = drift.record(node, accept)
        return dict(recorded, node=node.node_name, replaced=bool(recorded.get("replaced")),
                    changed=bool(recorded.get("recorded")))
    execute(ctx, action, baseline_text, changing=True, probe="none")


def baseline_text(result: Mapping[str, object]) -> str:
    summary = _object(result["baseline"])
    files = _object(summary["manifests"])
    listed = ", ".join("%s%s" % (f, " (parked)" if _object(e).get("state") == "parked" else "")
                       for f, e in files.items())
    diffs = _strings(result["differences"])
    if not result["recorded"]:
        lines = ["baseline %s exists (recorded %s by %s): %d manifests: %s"
                 % (result["path"], summary["created"], summary["by"], len(files), listed)]
        if diffs:
            lines.append("the current state differs: %s" % "; ".join(diffs))
            lines.append("run cpctl baseline --accept to make the current state the baseline")
        else:
            lines.append("the current state matches it")
        return "\n".join(lines)
    verb = "replaced" if result.get("replaced") else "recorded"
    text = "baseline %s in %s: %d manifests: %s" % (verb, result["path"], len(files), listed or "none")
    return text + ("\nchanges: %s" % "; ".join(diffs) if result.get("replaced") and diffs else "")


@click.command()
@click.option("--fix", is_flag=True, help="Restore parks past their --for deadline and finish interrupted "
              "operations.")
@click.option("--remove-strays", is_flag=True, help="With --fix: move strays to STATE/strays/<time>/ (never "
              "deletes).")
@click.option("--allow-restart", is_flag=True, help="With --remove-strays: also move a stray that defines a pod "
              "the kubelet runs (its pod stops; when another file defines it too, cpctl makes the kubelet re-read "
              "that file at once and waits until the pod is back).")
@click.option("--restore-missing", is_flag=True, help="With --fix: write a manifest that vanished (in the baseline, "
              "neither in the manifests dir nor parked) back from the baseline's copy, and wait for its pod.")
@click.option("--max-parked", default=None, metavar="DURATION", help="Also report parks older than this "
              "(e.g. 4h).")
@click.option("--prometheus-textfile", default=None, metavar="PATH",
              help="Write node_exporter textfile metrics to PATH (*.prom, atomically).")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True,
              help="Seconds --fix waits for a restored pod.")
@click.option("--dry-run", is_flag=True, help="With --fix: print what would be repaired; change nothing.")
@click.option("--kubeadm", is_flag=True, help="Also list the flags the next `kubeadm upgrade` would drop: in a "
              "manifest, not in the ClusterConfiguration of kube-system/kubeadm-config.")
@click.option("--cert-warn", default="30d", show_default=True, metavar="DURATION",
              help="Report certificates that expire within this (and components on an old certificate).")
@click.pass_context
def check(ctx: click.Context, fix: bool, remove_strays: bool, allow_restart: bool, restore_missing: bool,
          max_parked: Optional[str], prometheus_textfile: Optional[str], timeout: float, dry_run: bool,
          kubeadm: bool, cert_warn: str) -> None:
    """Find drift: overdue parks, missing/changed/unexpected manifests, strays, duplicates,
    interrupted operations, loose state dir permissions and (with a probe) mirror pods. Each
    finding says how to fix it.

    Exit 0 clean, 1 drift found, other codes when the check could not run.
    """
    from cpctl.errors import CpctlError, ExitCode
    from cpctl.timeutil import parse_duration
    if remove_strays and not fix:
        raise CpctlError("--remove-strays only works together with --fix", ExitCode.USAGE)
    if restore_missing and not fix:
        raise CpctlError("--restore-missing only works together with --fix", ExitCode.USAGE)
    if allow_restart and not remove_strays:
        raise CpctlError("--allow-restart only works together with --fix --remove-strays", ExitCode.USAGE)
    if dry_run and not fix:
        raise CpctlError("--dry-run goes with --fix (check alone changes nothing)", ExitCode.USAGE)
    max_seconds = parse_duration(max_parked, "--max-parked") if max_parked else None
    warn_seconds = parse_duration(cert_warn, "--cert-warn")

    def action(node: "Node") -> Dict[str, object]:
        try:
            result = _run_check(node, fix, remove_strays, max_seconds, timeout, dry_run, allow_restart,
                                restore_missing, kubeadm, warn_seconds)
        except CpctlError:
            _write_metrics(node.host, prometheus_textfile, None)
            raise
        _write_metrics(node.host, prometheus_textfile, result["final"])
        data = _check_data(result)
        changed = bool(result["actions"]) and not dry_run
        # a dry run of --fix says what the real one would repair (docs/json.md); without --fix, nothing
        would = any(a.ok for a in result["actions"] or []) if dry_run else changed
        data.update(problems=len(result["final"].problems), changed=changed, dry_run=dry_run, would_change=would)
        data["summary"] = check_text(data)
        return data

    reports = execute(ctx, action, check_text, changing=fix and not dry_run)
    problems = sum(_count(data["problems"]) for data in reports)
    if problems:
        raise CpctlError("drift found: %d problem%s" % (problems, "" if problems == 1 else "s"), ExitCode.DRIFT)


def _count(value: object) -> int:
    """A count in a command's result (``problems``)."""
    return value if isinstance(value, int) else 0


def _run_check(node: "Node", fix: bool, remove_strays: bool, max_seconds: Optional[float], timeout: float,
               dry_run: bool = False, allow_restart: bool = False, restore_missing: bool = False,
               kubeadm: bool = False, cert_warn: Optional[float] = None) -> CheckRun:
    from cpctl.ops import drift
    report = drift.check(node, max_seconds, kubeadm=kubeadm, cert_warn=cert_warn)
    result: CheckRun = {"report": report, "final": report, "actions": None, "dry_run": dry_run}
    if fix and dry_run:
        result["actions"] = drift.plan_fix(node, report, remove_strays, timeout, allow_restart, restore_missing)
    elif fix:
        result["actions"] = drift.fix(node, report, remove_strays, timeout, allow_restart, restore_missing)
        result["final"] = drift.check(node, max_seconds, kubeadm=kubeadm, cert_warn=cert_warn)
    return result


def _write_metrics(host: "Host", path: Optional[str], report: Optional["Report"]) -> None:
    """The textfile is written on the node checked (where its node_exporter runs). A node without
    node_exporter's textfile directory is not a failed check: the metrics are skipped with a note."""
    if not path:
        return
    import os

    from cpctl.errors import CpctlError, ExitCode
    from cpctl.ops import metrics
    directory = os.path.dirname(path) or "/"
    info = host.lstat(directory)
    if info is None or info["kind"] != "dir":
        note("skipped the metrics: %s %s (node_exporter's textfile collector is not set up here)"
             % (directory, "does not exist" if info is None else "is not a directory"))
        return
    text = metrics.check_metrics(time.time() if report is None else report.time, report)
    try:
        metrics.write_textfile(host, path, text)
    except OSError as exc:
        raise CpctlError("cannot write --prometheus-textfile %s: %s" % (path, exc.strerror or exc),
                         ExitCode.ENVIRONMENT) from None


def _check_data(result: CheckRun) -> Dict[str, object]:
    data = result["report"].to_dict()
    if result["actions"] is not None:
        final = result["final"]
        data.update(drift=final.drift, actions=[a.to_dict() for a in result["actions"]],
                    remaining=[f.to_dict() for f in final.findings])
    else:                  # no --fix: nothing was tried (null), and every finding remains
        data.update(actions=None, remaining=[f.to_dict() for f in result["report"].findings])
    return data


def _finding_lines(findings: Sequence[Mapping[str, object]]) -> List[str]:
    lines = []
    for f in findings:
        lines.append("%-8s %-16s %s" % (str(f["severity"]).upper(), f["kind"], f["message"]))
        diff = f.get("diff")
        if diff:
            lines.extend("    " + line for line in str(diff).rstrip("\n").split("\n"))
        if f.get("fix"):
            lines.append("    how to fix: %s" % f["fix"])
    return lines


def _finding_key(finding: Mapping[str, object]) -> Tuple[object, ...]:
    """What makes two reports' findings the same problem (a message may say more the second time)."""
    if finding.get("file") or finding.get("component"):
        return finding["kind"], finding.get("file"), finding.get("component")
    return finding["kind"], finding["message"]


def check_text(data: Mapping[str, object]) -> str:
    """The check's report for a person, each finding once: the findings, then (with --fix) what was
    done, the findings the fix itself brought up, and what remains in the last line."""
    findings = _objects(data["findings"])
    lines = _finding_lines(findings)
    actions = data.get("actions")
    fixed = actions is not None and not data.get("dry_run")
    for a in _objects(actions):
        label = ("WOULD" if a["ok"] else "WOULD-NOT") if data.get("dry_run") else ("FIXED" if a["ok"] else "NOT-FIXED")
        lines.append("%-8s %-16s %s%s" % (label, a["action"], "%s: " % a["file"] if a["file"] else "", a["message"]))
    final = _objects(data["remaining"]) if fixed else findings
    if fixed:
        seen = {_finding_key(f) for f in findings}
        new = [f for f in final if _finding_key(f) not in seen]
        if new:
            lines.append("new after --fix:")
            lines.extend(_finding_lines(new))
    problems = [f for f in final if f["severity"] != "info"]
    if not problems and any(f["kind"] == "check_skipped" for f in final):    # never "OK" about what it did not see
        lines.append("no drift in the files on %s%s; its pods NOT checked (the probe cannot describe pods)"
                     % (data["node"], " after --fix" if fixed else ""))
    elif not problems:
        lines.append("OK: no drift on %s%s" % (data["node"], " after --fix" if fixed else ""))
    else:
        critical = sum(1 for f in problems if f["severity"] == "critical")
        lines.append("DRIFT: %d problem%s %s on %s%s (%d critical, %d warning)"
                     % (len(problems), "" if len(problems) == 1 else "s",
                        "remain" if fixed and len(problems) != 1 else "remains" if fixed else "found",
                        data["node"], " after --fix" if fixed else "", critical, len(problems) - critical))
    return "\n".join(lines)

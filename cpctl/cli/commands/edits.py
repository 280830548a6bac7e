"""``cpctl apply|edit|flags|rollback|revisions``: change a static pod's manifest, verified, with rollback.

Each change runs on one master at a time (rolling) and stops at the first master whose new version
does not become healthy; etcd and the API server honour the fleet quorum guard like ``stop``.
The flow itself is :mod:`cpctl.ops.edits`; this module parses, runs the editor, asks, prints.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

import click

from cpctl.cli import completers
from cpctl.cli.commands.confirm import ChangeAction, NodeAction, armed_text, confirm_options, guarded, parse_confirm
from cpctl.cli.commands.lifecycle import check_reason, guarded_reason, move_leader, no_move_leader_option, reason_option
from cpctl.cli.context import note, printable
from cpctl.cli.fanout import execute
from cpctl.errors import CpctlError, ExitCode

if TYPE_CHECKING:
    from signal import _HANDLER  # typeshed's name for what signal.signal takes and returns

    from cpctl.core.companions import Companion
    from cpctl.core.node import Node
    from cpctl.ops.confirm import ConfirmOptions
    from cpctl.ops.edits import ChangeResult

MAX_NEW_MANIFEST = 10 << 20
NAME_MAX_LOCAL = 255       # bytes in one file name: the local copy's name is cut there
EDIT_MARK = "# cpctl: "


change_force_option = click.option(
    "--force", is_flag=True,
    help="Go ahead although a flag name, an admission plugin, a probe port or a written path looks wrong by "
         "cpctl's lists (they may be out of date; shown as warnings), and override the fleet quorum check for "
         "etcd/apiserver (recorded in history).")


new_member_option = click.option(
    "--new-member", is_flag=True, expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__("cpctl.new_member", bool(value)),
    help="etcd: the new version starts a NEW member on purpose (a member added with etcdctl member add, or a "
         "snapshot restored into a new data dir: docs/etcd-restore.md): an empty or missing data dir is not "
         "refused, and the member that comes back may have another member ID or an older revision.")


def _change_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options every manifest change shares."""
    for option in reversed([
        click.option("--timeout", type=click.FloatRange(1, 3600), default=None,
                     help="Seconds the new version has to become Running, Ready and healthy (and the "
                          "previous one, after a rollback). Default: the version's own startupProbe "
                          "budget (initialDelaySeconds + failureThreshold x periodSeconds), else 120."),
        click.option("--no-rollback", is_flag=True, help="Leave a new version that does not become healthy in "
                                                         "place; only report."),
        click.option("--dry-run", is_flag=True, help="Validate and show the diff; change nothing."),
        reason_option,
        click.option("--keep-revisions", type=click.IntRange(1, 100), default=10, show_default=True,
                     envvar="CPCTL_KEEP_REVISIONS",
                     help="Versions kept per manifest besides the original (env CPCTL_KEEP_REVISIONS)."),
        click.option("--settle", type=click.FloatRange(0, 600), default=5.0, show_default=True,
                     help="Seconds the new pod must stay Ready after it first is."),
        change_force_option,
        new_member_option,
        no_move_leader_option,
    ]):
        function = option(function)
    return function


parked_option = click.option(
    "--parked", is_flag=True,
    help="Change the PARKED copy of a stopped component (e.g. etcd's --data-dir for a restore): validated and "
         "kept as a revision like any change, not waited for (nothing runs it until cpctl start).")


def _options(ctx: click.Context, component: str, timeout: Optional[float], no_rollback: bool, dry_run: bool,
             reason: Optional[str], keep_revisions: int, settle: float, force: bool, parked: bool = False,
             confirming: bool = False) -> Any:
    from cpctl.core import manifests
    from cpctl.ops.edits import ApplyOptions
    manifests.validate_component_name(component)
    check_reason(reason)
    if not parked:        # a parked copy runs nowhere: changing it takes nothing down
        reason = guarded_reason(ctx, "apply", [component], force, reason, dry_run)
    return ApplyOptions(timeout=timeout, rollback=not no_rollback, dry_run=dry_run, reason=reason,
                        keep=keep_revisions, settle=settle, force=force, parked=parked,
                        keep_verified=not confirming, new_member=bool(ctx.meta.get("cpctl.new_member")),
                        move_leader=move_leader(ctx))


keep_in_option = click.option(
    "--keep-in", "keep_in", multiple=True, metavar="TARGET",
    help="Also keep the flag change where the next `kubeadm upgrade` looks: kubeadm-config (the "
         "ClusterConfiguration's extraArgs in kube-system/kubeadm-config) or patches[=DIR] (a kubeadm JSON "
         "patch DIR/<component>+json.yaml, default /etc/kubernetes/patches). Repeatable.")


with_file_option = click.option(
    "--with-file", "with_files", multiple=True, metavar="NODE_PATH=LOCAL_FILE",
    help="Also write LOCAL_FILE (read once here; a regular file of at most 1 MiB) to NODE_PATH on the node "
         "(every master), mode 0600, by the same journaled change as the manifest, kept with its revision and "
         "rolled back with it. The new manifest must mount NODE_PATH; outside /etc/kubernetes needs --force. "
         "Repeatable.")


def _companions(with_files: Tuple[str, ...], parked: bool = False) -> List["Companion"]:
    """The --with-file companion files, each local file read once (usage error before anything changes)."""
    from cpctl.core.companions import read_all
    if with_files and parked:
        raise CpctlError("--with-file goes with a change of the running manifest, not with --parked", ExitCode.USAGE)
    return read_all(with_files)


def _keep_targets(keep_in: Tuple[str, ...], parked: bool = False) -> List[Any]:
    """The parsed --keep-in targets (usage error for an unknown one, before anything is read)."""
    from cpctl.core.kubeadmconfig import parse_keep_in
    if keep_in and parked:
        raise CpctlError("--keep-in goes with a change of the running manifest, not with --parked: keep the "
                         "change in kubeadm's config when the component is started again", ExitCode.USAGE)
    return [parse_keep_in(t) for t in keep_in]


def _kept(node: Any, component: str, data: bytes, new: bytes, targets: List[Any], sets: Any = None,
          unsets: Any = None, container: Optional[str] = None) -> Any:
    """The --keep-in plan (None without targets): the flags --set/--unset, else those that differ."""
    if not targets:
        return None
    from cpctl.core import kubeadmconfig as kc
    from cpctl.core.checks import parse_new
    from cpctl.core.flags import pick_container
    from cpctl.ops import edits, keepin
    pod_name = edits.current(node, component, "flags").pod_name or component
    if sets is not None:
        change = kc.FlagChange(list(sets), list(unsets or []))
    else:
        change = kc.flag_change(pick_container(parse_new(data, component), container)[1],
                                pick_container(parse_new(new, component), container)[1])
    return keepin.plan(node, pod_name, data, new, change, targets, container)


def _confirm(ctx: click.Context, within: Optional[str], check: Optional[str], reason: Optional[str], dry_run: bool,
             parked: bool = False) -> Optional["ConfirmOptions"]:
    """``--confirm-within``/``--confirm-check`` parsed (usage errors before anything is read)."""
    if parked and within is not None:
        raise CpctlError("--confirm-within goes with a change of the running manifest, not with --parked",
                         ExitCode.USAGE)
    return parse_confirm(ctx, within, check, reason, dry_run)


def _guard(ctx: click.Context, component: str, action_name: str, action: ChangeAction,
           confirm: Optional["ConfirmOptions"], dry_run: bool, parked: bool = False) -> NodeAction:
    """The node action refused while the component's last change awaits confirmation - a dry run
    refused the same way - and armed with ``--confirm-within`` (not in a dry run). A --parked change
    is the action as it is: the parked copy is not what an arm reverts. Its typed result
    (``ops.edits.ChangeResult``) becomes the JSON answer here."""
    if parked:
        return shaped(lambda node: action(node).to_dict())
    return shaped(guarded(ctx, component, action_name, action, confirm, dry_run))


#: The fields of a change's JSON answer (docs/json.md) that a no-op, a dry run or a refusal has no
#: value for: null rather than left out, so that one schema reads every answer.
CHANGE_FIELDS = ("revision", "new_revision", "checksum", "previous", "effect", "wait", "diff", "plan")


def change_shape(data: Dict[str, object]) -> Dict[str, object]:
    """apply/edit/flags/rollback's answer in its one shape: every documented field present (null when
    it has no value), ``dry_run`` always said, and ``would_change`` - whether the run (a dry run:
    would) change the manifest - next to ``changed`` (what this run changed: nothing, in a dry run)."""
    shaped_data = dict(data)
    for field in CHANGE_FIELDS:
        shaped_data.setdefault(field, None)
    shaped_data.setdefault("warnings", [])
    shaped_data.setdefault("dry_run", False)
    shaped_data["would_change"] = bool(shaped_data["diff"]) if shaped_data["dry_run"] else bool(shaped_data["changed"])
    return shaped_data


def shaped(action: NodeAction) -> NodeAction:
    """``action`` whose answer has the one shape of a change (:func:`change_shape`)."""
    def run(node: "Node") -> Dict[str, object]:
        return change_shape(action(node))
    return run


def _show_diff(text: str) -> None:
    click.echo(printable(text, block=True), err=True)


def change_text(data: Dict[str, Any]) -> str:
    lines = ["%s: %s" % (data.get("component"), data.get("message"))]
    lines += ["  %s" % line for line in data.get("flags") or []]
    lines += ["  %s" % line for line in companion_lines(data)]
    lines += ["  warning: %s" % w for w in data.get("warnings") or []]
    keep = data.get("keep_in") or {}
    if keep:
        lines.append("  kept in: %s" % (", ".join(keep.get("done") or []) or "nothing to change there"
                                         if not data.get("dry_run") else "(dry run)"))
        whole = (["volumes %s" % ", ".join(keep["volumes"])] if keep.get("volumes") else []) + (
            ["etcd.local.dataDir %s" % keep["data_dir"]] if keep.get("data_dir") else [])
        if whole:
            lines.append("  kept with the flags: %s" % "; ".join(whole))
    plan = data.get("plan")
    if data.get("dry_run") and isinstance(plan, Mapping):
        lines.append("  plan (what the real run applies; undo: what a rollback puts back):")
        lines += ["    %s" % line for line in plan_lines(plan)]
    if data.get("diff"):
        lines.append(data["diff"])
    if keep.get("diff") and data.get("dry_run"):
        lines.append(keep["diff"])
    return "\n".join(lines)


def _bytes_text(value: object) -> str:
    if not isinstance(value, Mapping):
        return "absent"
    return "sha256 %s (%s bytes)" % (str(value.get("checksum"))[:12], value.get("size"))


def _file_text(part: object) -> str:
    part = part if isinstance(part, Mapping) else {}
    return "%s (mode %s): %s -> %s" % (part.get("path"), part.get("mode"), _bytes_text(part.get("before")),
                                       _bytes_text(part.get("after")))


def _items(value: object) -> List[Mapping[str, object]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def plan_lines(plan: Mapping[str, object]) -> List[str]:
    """A change's plan (``core.plan.Plan.to_dict``) as text, one part a line, then its undo."""
    lines = ["manifest %s" % _file_text(plan.get("manifest"))]
    if plan.get("revision") is not None:
        lines.append("revisions: the bytes replaced kept as revision %s%s" % (
            plan["revision"], "" if plan.get("new_revision") is None else
            ", the bytes written as revision %s" % plan["new_revision"]))
    lines += ["companion %s" % _file_text(c) for c in _items(plan.get("companions"))]
    lines += ["mount hostPath %s (%s) at %s as volume %s, %s" % (
        m.get("host_path"), m.get("type") or "no type", m.get("mount_path"), m.get("volume"),
        "writable" if m.get("writable") else "read-only") for m in _items(plan.get("mounts"))]
    config = plan.get("kubeadm_config")
    if isinstance(config, Mapping):
        lines.append("%s/%s %s: %s (read at resourceVersion %s)" % (
            config.get("namespace"), config.get("name"), config.get("key"),
            "%s -> %s" % (_bytes_text(config.get("before")), _bytes_text(config.get("after")))
            if config.get("changed") else "unchanged", config.get("resource_version") or "?"))
    if isinstance(plan.get("patch"), Mapping):
        lines.append("patch %s" % _file_text(plan.get("patch")))
    undo = plan.get("inverse")
    undo = undo if isinstance(undo, Mapping) else {}
    manifest = undo.get("manifest")
    if isinstance(manifest, Mapping):
        lines.append("undo: manifest back to %s%s" % (_bytes_text(manifest.get("after")), "" if undo.get(
            "revision") is None else " (revision %s)" % undo["revision"]))
    for companion in _items(undo.get("companions")):
        if companion.get("before") != companion.get("after"):
            lines.append("undo: companion %s %s" % (companion.get("path"), "removed (absent before)" if
                                                    companion.get("after") is None else
                                                    "back to " + _bytes_text(companion.get("after"))))
    kept = undo.get("kubeadm_config")
    if isinstance(kept, Mapping):
        lines.append("undo: %s/%s %s back to the text before, unless someone else changed it since "
                     "(resourceVersion)" % (kept.get("namespace"), kept.get("name"), kept.get("key")))
    patch = undo.get("patch")
    if isinstance(patch, Mapping):
        lines.append("undo: %s %s, unless someone else changed it since" % (
            patch.get("path"), "removed" if patch.get("before") is None else "back to " + _bytes_text(
                patch.get("before"))))
    return lines


def companion_lines(data: Mapping[str, object]) -> List[str]:
    """One line per companion file a change (or its dry run) writes or removes beside the manifest."""
    out = []
    would = "would " if data.get("dry_run") else ""
    items = data.get("companions")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        if item.get("checksum") is None:
            out.append("%s%s %s (absent in that version)" % (would, "remove" if would else "removed", item.get("path")))
        else:
            source = " from %s" % item["source"] if item.get("source") else ""
            out.append("%s%s %s%s (%s bytes, sha256 %s)" % (would, "write" if would else "wrote", item.get("path"),
                                                          source, item.get("size"), str(item["checksum"])[:12]))
    return out


def _read_new(source: str) -> bytes:
    """The new manifest's bytes from FILE or stdin (``-``), bounded."""
    from cpctl.inputs import read_input_file
    if source != "-":
        return read_input_file(source, "manifest", MAX_NEW_MANIFEST).encode("utf-8")
    data = sys.stdin.buffer.read(MAX_NEW_MANIFEST + 1)
    if len(data) > MAX_NEW_MANIFEST:
        raise CpctlError("manifest on stdin: larger than %d bytes" % MAX_NEW_MANIFEST, ExitCode.USAGE)
    return data


@click.command()
@click.argument("component", shell_complete=completers.components)
@click.option("-f", "--filename", "source", required=True, help="The new manifest (- reads stdin).")
@parked_option
@keep_in_option
@with_file_option
@_change_options
@confirm_options
@click.pass_context
def apply(ctx: click.Context, component: str, source: str, parked: bool, keep_in: Tuple[str, ...],
          with_files: Tuple[str, ...], timeout: Optional[float], no_rollback: bool, dry_run: bool,
          reason: Optional[str], keep_revisions: int, settle: float, force: bool, confirm_within: Optional[str],
          confirm_check: Optional[str]) -> None:
    """Replace COMPONENT's manifest with FILE, verify the new pod, roll back if it does not come up.

    Validates first (a pod the kubelet would run, same name, no duplicated flag, the files its flags
    name exist, no port taken), keeps the previous version as a revision, writes atomically, then
    waits for the NEW pod to be Running, Ready and healthy. Exit 11: rolled back; 12: the rollback
    did not come back healthy either. --parked: replace the parked copy of a stopped component.
    """
    from cpctl.ops import edits, keepin
    targets = _keep_targets(keep_in, parked)
    files = _companions(with_files, parked)
    confirm = _confirm(ctx, confirm_within, confirm_check, reason, dry_run, parked)
    options = _options(ctx, component, timeout, no_rollback, dry_run, reason, keep_revisions, settle, force, parked,
                       confirming=confirm is not None)
    new = _read_new(source)
    where = "stdin" if source == "-" else source

    def action(node: Any) -> "ChangeResult":
        if not targets:
            return edits.replace(node, component, new, where, "apply", options, companions=files)
        return edits.until_fresh(node, lambda: kept_apply(node))      # the kept flags made again from it

    def kept_apply(node: "Node") -> "ChangeResult":
        from cpctl.core.manifests import checksum
        _, data = edits.read_current(node, component, "apply")
        keep = _kept(node, component, data, new, targets)
        return keepin.run(node, keep, options, lambda how: edits.replace(node, component, new, where, "apply", how,
                                                                         expect=checksum(data), companions=files),
                          _show_diff)
    execute(ctx, _guard(ctx, component, "apply", action, confirm, dry_run, parked), armed_text(change_text),
            changing=not dry_run)


@click.command()
@click.argument("component", shell_complete=completers.components)
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
              shell_complete=completers.set_flags, help="Set --NAME=VALUE (repeatable).")
@click.option("--unset", "unsets", multiple=True, metavar="NAME",
              shell_complete=completers.unset_flags, help="Remove --NAME (repeatable).")
@click.option("--container", default=None, help="The container (default: the only one, or the one named like the pod).")
@click.option("--mount", is_flag=True,
              help="For each --set value that is an absolute path the container does not see: add a hostPath "
                   "volume (type File) and a read-only mount; for --audit-log-path its directory, writable.")
@parked_option
@keep_in_option
@with_file_option
@_change_options
@confirm_options
@click.pass_context
def flags(ctx: click.Context, component: str, sets: Tuple[str, ...], unsets: Tuple[str, ...], container: Optional[str],
          mount: bool, parked: bool, keep_in: Tuple[str, ...], with_files: Tuple[str, ...], timeout: Optional[float],
          no_rollback: bool, dry_run: bool, reason: Optional[str], keep_revisions: int, settle: float,
          force: bool, confirm_within: Optional[str], confirm_check: Optional[str]) -> None:
    """Set or remove --NAME=VALUE flags of COMPONENT's container, then apply like `cpctl apply`.

    Without --set/--unset: list the container's flags (of the parked copy when it is parked). The
    file is changed in place (comments and layout kept) and checked to decode to exactly the
    intended command. --parked: change the parked copy of a stopped component.
    """
    from cpctl.core import flags as flagtools
    from cpctl.ops import edits, keepin
    targets = _keep_targets(keep_in, parked)
    if not sets and not unsets:
        if targets or with_files or mount or confirm_within or confirm_check:
            raise CpctlError("--keep-in, --with-file, --mount and --confirm-within need --set or --unset",
                             ExitCode.USAGE)
        _list_flags(ctx, component, container, parked)
        return
    wanted = [flagtools.parse_assignment(s) for s in sets]
    removed = [flagtools.parse_name(u) for u in unsets]
    files = _companions(with_files, parked)
    confirm = _confirm(ctx, confirm_within, confirm_check, reason, dry_run, parked)
    options = _options(ctx, component, timeout, no_rollback, dry_run, reason, keep_revisions, settle, force, parked,
                       confirming=confirm is not None)

    def action(node: Any) -> "ChangeResult":
        return edits.until_fresh(node, lambda: attempt(node))    # another change first: made again from it

    def attempt(node: "Node") -> "ChangeResult":
        from cpctl.core.manifests import checksum
        _, data = edits.read_current(node, component, "flags", parked)
        new, said = edits.flags_version(data, component, container, wanted, removed, node.command("edit", component))
        if mount:
            new, added = edits.mounts_version(new, node.node_root, component, container, wanted, files)
            said = said + added
        keep = _kept(node, component, data, new, targets, wanted, removed, container)
        result = keepin.run(node, keep, options, lambda how: edits.replace(
            node, component, new, "flags", "flags", how, {"flags": said}, expect=checksum(data),
            companions=files), _show_diff)
        return dataclasses.replace(result, flags=said)
    execute(ctx, _guard(ctx, component, "flags", action, confirm, dry_run, parked), armed_text(change_text),
            changing=not dry_run)


def _list_flags(ctx: click.Context, component: str, container: Optional[str], parked: bool) -> None:
    """The flags of the manifest in the dir, or of the parked copy (``--parked``, or when parked)."""
    from cpctl.core import flags as flagtools
    from cpctl.ops import edits

    def action(node: Any) -> Dict[str, Any]:
        if parked:
            _, data = edits.read_current(node, component, "flags", parked=True)
            is_parked = True
        else:
            _, data, is_parked = edits.read_any(node, component)
        if is_parked and not parked:
            note("%s is parked: the flags of its parked copy" % component)
        from cpctl.core.checks import parse_new
        pod = parse_new(data, component)
        _, chosen = flagtools.pick_container(pod, container)
        found = [{"name": f.name, "value": f.value, "in": f.where} for f in flagtools.flags_of(chosen)]
        name = (pod.get("metadata") or {}).get("name") or component
        return {"node": node.node_name, "component": name, "container": chosen.get("name"), "flags": found,
                "parked": is_parked}

    def text(data: Dict[str, Any]) -> str:
        items = ["--%s" % f["name"] if f["value"] is None else "--%s=%s" % (f["name"], f["value"])
                 for f in data["flags"]]
        return flagtools.redact("\n".join(items))
    execute(ctx, action, text)


@click.command()
@click.argument("component", shell_complete=completers.components)
@click.option("--to", "to", type=click.IntRange(1), default=None, shell_complete=completers.revisions,
              help="The revision to go back to (default: the newest earlier one that did not fail); one "
                   "marked failed needs --force.")
@_change_options
@confirm_options
@click.pass_context
def rollback(ctx: click.Context, component: str, to: Optional[int], timeout: Optional[float], no_rollback: bool,
             dry_run: bool, reason: Optional[str], keep_revisions: int, settle: float, force: bool,
             confirm_within: Optional[str], confirm_check: Optional[str]) -> None:
    """Put a kept revision of COMPONENT's manifest back: an apply of its bytes (verified, rolled back)."""
    from cpctl.ops import edits
    confirm = _confirm(ctx, confirm_within, confirm_check, reason, dry_run)
    options = _options(ctx, component, timeout, no_rollback, dry_run, reason, keep_revisions, settle, force,
                       confirming=confirm is not None)

    def action(node: Any) -> "ChangeResult":
        revision, data, expect = edits.rollback_target(node, component, to, force)
        return edits.replace(node, component, data, "revision %d" % revision.number, "rollback", options,
                             {"to_revision": revision.number}, expect=expect,
                             companions=edits.rollback_companions(node, revision))
    execute(ctx, _guard(ctx, component, "rollback", action, confirm, dry_run), armed_text(change_text),
            changing=not dry_run)


@click.command()
@click.argument("component", shell_complete=completers.components)
@click.argument("number", type=click.IntRange(1), required=False, shell_complete=completers.revisions)
@click.option("--diff", "diff", type=click.IntRange(1), nargs=2, default=None, metavar="N M",
              shell_complete=completers.revisions,
              help="Show what changed from revision N to revision M.")
@click.pass_context
def revisions(ctx: click.Context, component: str, number: Optional[int], diff: Optional[Tuple[int, int]]) -> None:
    """List the kept versions of COMPONENT's manifest (oldest first), show revision NUMBER, or --diff N M.

    Each revision is one version of the file, labelled with the change that made it (its action,
    time, user and reason); "original" is the first version cpctl saw, kept for good; "current" the
    bytes in place now; "failed" a version that was applied and did not become healthy.
    """
    from cpctl.ops import edits
    if diff is not None and number is not None:
        raise CpctlError("give a revision NUMBER or --diff N M, not both", ExitCode.USAGE)
    if diff is not None:
        first, second = diff
        execute(ctx, lambda node: edits.diff_revisions(node, component, first, second), revision_diff_text,
                probe="none")
    elif number is not None:
        chosen = number
        execute(ctx, lambda node: edits.show_revision(node, component, chosen), revision_text, probe="none")
    else:
        execute(ctx, lambda node: edits.list_revisions(node, component), revisions_text, probe="none")


def _notes(row: Mapping[str, object]) -> str:
    """original / current / failed, the marks of one revision ("-" when none)."""
    marks = [word for word, on in (("original", row.get("original")), ("current", row.get("current")),
                                   ("failed", row.get("failed"))) if on]
    return ",".join(marks) or "-"


def _reason(row: Mapping[str, object]) -> str:
    if row.get("action") == "outside":
        return str(row.get("reason") or "changed outside cpctl")
    return str(row.get("reason") or "")


def revisions_text(data: Dict[str, Any]) -> str:
    """The revisions as a table; ``-o wide`` adds the host, the size and the full checksum."""
    from cpctl.cli.context import wide
    from cpctl.cli.render import table
    rows = data.get("revisions") or []
    found = data.get("outside")
    head = [] if rows else ["%s: no revisions kept (%s)" % (data.get("component"), data.get("file"))]
    if not rows and not found:
        return head[0]
    whole = wide()
    cells = [[row["number"], row["saved_at"], row["saved_by"]] + ([row["host"]] if whole else []) +
             [row["action"]] + ([row["size"]] if whole else []) +
             [row["checksum"] if whole else row["checksum"][:12], _notes(row), _reason(row)] for row in rows]
    if found:          # the bytes in place now, kept by no revision: a row of the same table (issue 48)
        current = str(found["current"])
        cells.append(["-", "-", "not cpctl"] + (["-"] if whole else []) + ["outside"] + (["-"] if whole else []) +
                     [current if whole else current[:12], "current", found["note"]])
    headers = ["REV", "SAVED AT", "BY"] + (["HOST"] if whole else []) + ["ACTION"] + (["SIZE"] if whole else []) + \
        ["SHA256", "NOTE", "REASON"]
    return "\n".join(head + [table(headers, cells)] + _companions_by_revision(rows, whole))


def _companions_by_revision(rows: List[Mapping[str, object]], whole: bool) -> List[str]:
    """Below the table, the companion files each revision had (``absent``: it did not exist then)."""
    lines = []
    for row in rows:
        items = row.get("companions")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, Mapping):
                checksum = item.get("checksum")
                lines.append("  %s  %s  %s" % (row["number"], item.get("path"), "absent" if checksum is None else
                                               (str(checksum) if whole else str(checksum)[:12])))
    return ["companion files (REV  PATH  SHA256):"] + lines if lines else []


def _label(row: Mapping[str, object]) -> str:
    reason = _reason(row)
    return "revision %s of %s: %s at %s by %s (%s)%s" % (
        row["number"], row["file"], row["action"], row["saved_at"], row["saved_by"], _notes(row),
        ": " + reason if reason else "")


def _row_of(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def revision_text(data: Mapping[str, object]) -> str:
    return "# %s\n%s" % (_label(_row_of(data["revision"])), str(data["manifest"]).rstrip("\n"))


def revision_diff_text(data: Mapping[str, object]) -> str:
    lines = ["# from %s" % _label(_row_of(data["from"])), "# to   %s" % _label(_row_of(data["to"]))]
    lines.append(str(data["diff"]) if data["diff"] else "(identical)")
    return "\n".join(lines)


# --- edit ---------------------------------------------------------------------------------------------
EDIT_ROUNDS = 3                 # editor rounds on a terminal before an invalid result fails (without one: 1)
EDITOR_TIMEOUT = 3600.0         # seconds an editor may run before it is stopped (--editor-timeout)
EDITOR_GRACE = 5.0              # seconds between SIGTERM and SIGKILL for an editor that overran


@click.command()
@click.argument("component", shell_complete=completers.components)
@click.option("-y", "--yes", is_flag=True, help="Apply without asking after the diff.")
@click.option("--editor-timeout", type=click.FloatRange(1, 86400), default=EDITOR_TIMEOUT, show_default=True,
              envvar="CPCTL_EDITOR_TIMEOUT",
              help="Seconds the editor may run; then it is stopped and the edit fails, the copy kept "
                   "(env CPCTL_EDITOR_TIMEOUT).")
@parked_option
@keep_in_option
@with_file_option
@_change_options
@confirm_options
@click.pass_context
def edit(ctx: click.Context, component: str, yes: bool, editor_timeout: float, parked: bool,
         keep_in: Tuple[str, ...], with_files: Tuple[str, ...], timeout: Optional[float], no_rollback: bool,
         dry_run: bool, reason: Optional[str], keep_revisions: int, settle: float, force: bool,
         confirm_within: Optional[str], confirm_check: Optional[str]) -> None:
    """Edit COMPONENT's manifest in $VISUAL/$EDITOR on a private copy, then apply it like `cpctl apply`.

    The copy lives outside the manifests dir (no swap or backup file can land there). On a
    terminal an invalid result re-opens the editor with the problem on top, at most 3 rounds;
    without a terminal there is one round. A valid result shows the diff and asks (--yes skips
    the question). Whenever the edit fails, the copy is kept and its path printed. With several
    masters, each one's manifest is edited in turn. --parked: edit the parked copy of a stopped
    component.
    """
    targets = _keep_targets(keep_in, parked)
    files = _companions(with_files, parked)
    confirm = _confirm(ctx, confirm_within, confirm_check, reason, dry_run, parked)
    options = _options(ctx, component, timeout, no_rollback, dry_run, reason, keep_revisions, settle, force, parked,
                       confirming=confirm is not None)
    tty = sys.stdin.isatty()
    if not yes and not dry_run and not tty:
        raise CpctlError("cpctl edit asks before it applies: without a terminal, pass --yes", ExitCode.USAGE)
    rounds = EDIT_ROUNDS if tty else 1
    execute(ctx, _guard(ctx, component, "edit", lambda node: _edit_node(node, component, options, yes, targets,
                                                                        files, rounds, editor_timeout),
                        confirm, dry_run, parked), armed_text(change_text), changing=not dry_run)


def _edit_node(node: "Node", component: str, options: Any, yes: bool, targets: Optional[List[Any]] = None,
               files: Optional[List["Companion"]] = None, rounds: int = EDIT_ROUNDS,
               editor_timeout: float = EDITOR_TIMEOUT) -> "ChangeResult":
    """One master's edit: the editor rounds on a private copy, the diff, the question, the apply.
    The copy (and its private directory) stays only when the edit did not apply and holds your work
    (bytes that differ from the manifest): then the message says where; otherwise it is removed."""
    from cpctl.core.manifests import checksum
    from cpctl.errors import Interrupted, Terminated, interrupted_by
    from cpctl.ops import edits
    filename, data = edits.read_current(node, component, "edit", options.parked)
    name = edits.pod_name(node, component, "edit", options.parked)
    if options.parked:    # refused before the editor opens (the change checks again under the lock)
        edits.refuse_now(node, edits.parked_current(node, component, "edit")[0], "edit", options.force, True)
    else:
        edits.refuse_now(node, edits.current(node, component, "edit"), "edit", options.force)
    workdir = tempfile.mkdtemp(prefix="cpctl-edit-")
    path = _copy_path(workdir, node.node_name, filename)
    kept = "your edited copy is at %s" % path
    done = False
    try:
        new, checked = _edit_until_valid(node, component, path, data, rounds, editor_timeout, options.force,
                                         options.parked, files or [])
        if new is None or checked is None:
            done = True
            return edits.ChangeResult(node.node_name, name, filename, "edit", False,
                                      message="edit cancelled, no changes made", dry_run=options.dry_run,
                                      recovered=list(node.recovered))
        from cpctl.ops import keepin
        keep = _kept(node, component, data, new, targets or [])
        if options.dry_run:
            done = True
            if keep is None:
                return checked
            return keepin.run(node, keep, options, lambda how: edits.replace(      # the plan with its kubeadm part
                node, component, new, "your edit", "edit", how, expect=checksum(data), companions=files or []),
                _show_diff)
        if checked.diff:
            click.echo(printable(checked.diff, block=True), err=True)
        if keep is not None and keep.diffs():
            _show_diff(keep.diffs())
        for warning in checked.warnings:
            note("%s: warning: %s" % (component, warning))
        question = printable("Apply this change to %s on %s?" % (component, node.node_name))
        try:
            answer = yes or click.confirm(question, err=True)
        except click.Abort:            # Ctrl-C or end of input at the question: the same "no"
            raise Interrupted("SIGINT", "edit of %s: not applied (no answer)" % component,
                              where="nothing changed") from None
        if not answer:
            return edits.ChangeResult(node.node_name, name, filename, "edit", False,
                                      message="not applied; %s" % kept, copy=path)
        result = keepin.run(node, keep, options, lambda how: edits.replace(
            node, component, new, "your edit", "edit", how, expect=checksum(data), companions=files or []),
            lambda _diff: None)
        done = True
        return result
    except CpctlError as exc:
        if _holds_work(path, data) and not _applied(exc):
            exc.where = (exc.where + "; " if exc.where else "") + kept
        else:
            done = True
        raise
    except (KeyboardInterrupt, Terminated) as exc:
        if not _holds_work(path, data):
            done = True
        raise Interrupted(interrupted_by(exc), "edit of %s interrupted" % component,
                          where="nothing changed" + ("" if done else "; " + kept)) from None
    except Exception:
        if _holds_work(path, data):      # an unexpected failure: still say where the work is
            note("edit of %s failed: %s" % (component, kept))
        else:
            done = True
        raise
    finally:
        if done:
            shutil.rmtree(workdir, ignore_errors=True)


def _holds_work(path: str, data: bytes) -> bool:
    """The private copy exists and holds something other than the manifest (the person's edit)."""
    try:
        with open(path, "rb") as handle:
            return _strip_marks(handle.read(MAX_NEW_MANIFEST + 1)) != data
    except OSError:
        return False


def _applied(exc: CpctlError) -> bool:
    """The failure came after the edit was in place and stays (kept after verification): nothing to redo."""
    from cpctl.ops.edits import InterruptedKept
    return isinstance(exc, InterruptedKept)


def _copy_path(workdir: str, node_name: str, filename: str) -> str:
    """The private copy's path: ``<node>-<file>`` directly in ``workdir``. Both names come from the
    master; the node name is checked where the node is opened, and a file name that is not one
    plain, printable path component (a compromised agent can send ``../x``) is not used at all."""
    plain = filename if (filename.isprintable() and "/" not in filename and filename not in (".", "..")
                         and not filename.startswith(".")) else "manifest.yaml"
    name = "%s-%s" % (node_name, plain)
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX_LOCAL:
        name = plain if len(plain.encode("utf-8", "surrogateescape")) <= NAME_MAX_LOCAL else "manifest.yaml"
    path = os.path.join(workdir, name)
    if os.path.dirname(os.path.abspath(path)) != os.path.abspath(workdir):
        raise CpctlError("edit: refusing the local copy name %r" % name, ExitCode.REFUSED)
    return path


def _edit_until_valid(node: Any, component: str, path: str, data: bytes, rounds: int = EDIT_ROUNDS,
                      editor_timeout: float = EDITOR_TIMEOUT, force: bool = False, parked: bool = False,
                      files: Optional[List["Companion"]] = None) -> Tuple[Optional[bytes], Optional["ChangeResult"]]:
    """Open the editor until the result is valid (it mounts every --with-file too), at most ``rounds``
    times: (new bytes or None when unchanged, the plan). An invalid last round, or the same invalid
    bytes saved twice, fails (exit 4)."""
    from cpctl.core.companions import on_node
    from cpctl.ops import edits
    placed = on_node(files or [], node.node_root)
    problems: List[str] = []
    last_invalid: Optional[bytes] = None
    text = data
    for round_number in range(1, rounds + 1):
        header = "".join("%s%s\n" % (EDIT_MARK, line) for line in problems)
        if problems:
            header += EDIT_MARK + "round %d of %d: fix the problems above and save, or quit without saving to " \
                                  "cancel (these lines go)\n" % (round_number, rounds)
        _write_private(path, header.encode("utf-8") + text)
        _run_editor(path, editor_timeout)
        with open(path, "rb") as handle:
            raw = handle.read(MAX_NEW_MANIFEST + 1)
        if len(raw) > MAX_NEW_MANIFEST:
            raise CpctlError("edit of %s: the result is larger than %d bytes" % (component, MAX_NEW_MANIFEST),
                             ExitCode.REFUSED)
        edited = _strip_marks(raw)
        if edited == data:
            return None, None
        if last_invalid is not None and edited == last_invalid:
            raise CpctlError("edit of %s: still invalid (%s)" % (component, "; ".join(problems)), ExitCode.REFUSED)
        try:
            return edited, edits.plan(node, component, edited, "your edit", "edit", force, parked, placed)
        except CpctlError as exc:
            if exc.code is not ExitCode.REFUSED:
                raise
            problems, last_invalid, text = [exc.message], edited, edited
    _write_private(path, "".join("%s%s\n" % (EDIT_MARK, line) for line in problems).encode("utf-8") + text)
    raise CpctlError("edit of %s: still invalid after %d editor round%s%s (%s)" % (
        component, rounds, "" if rounds == 1 else "s", "" if rounds > 1 else " (no terminal: one round)",
        "; ".join(problems)), ExitCode.REFUSED)


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _strip_marks(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    while lines and lines[0].startswith(EDIT_MARK.encode()):
        lines.pop(0)
    return b"".join(lines)


def _run_editor(path: str, timeout: float = EDITOR_TIMEOUT) -> None:
    """$VISUAL, else $EDITOR, else vi, on ``path``; a failing, killed or overrunning editor fails the
    edit (exit 7, or 6 after ``timeout`` seconds: it gets SIGTERM, then SIGKILL)."""
    command = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CpctlError("cannot parse the editor command %r: %s" % (command, exc), ExitCode.USAGE) from None
    if not argv:
        raise CpctlError("the editor command is empty (set VISUAL or EDITOR)", ExitCode.USAGE)
    deferred: List[int] = []
    previous = _defer_interruptions(deferred)
    try:
        editor = subprocess.Popen(argv + [path])
    except BaseException as exc:
        _restore_handlers(previous)          # whatever failed, Ctrl-C acts again
        if isinstance(exc, OSError):
            raise CpctlError("cannot run the editor %r: %s (set VISUAL or EDITOR)" % (argv[0], exc.strerror or exc),
                             ExitCode.ENVIRONMENT) from None
        raise
    try:
        _restore_handlers(previous)          # a Ctrl-C or SIGTERM from here on stops the editor below
        for signum in deferred:
            signal.raise_signal(signum)
        code = editor.wait(timeout)
    except subprocess.TimeoutExpired:
        _stop_editor(editor)
        raise CpctlError("the editor %r was still running after %.0fs (--editor-timeout): stopped it"
                         % (argv[0], timeout), ExitCode.TIMEOUT) from None
    except BaseException:
        _stop_editor(editor)
        raise
    if code < 0:
        raise CpctlError("the editor %r was killed by signal %d" % (argv[0], -code), ExitCode.ENVIRONMENT)
    if code != 0:
        raise CpctlError("the editor %r exited with status %d" % (argv[0], code), ExitCode.ENVIRONMENT)


#: The interruptions deferred while the editor is started (``_defer_interruptions``).
_INTERRUPTIONS = (signal.SIGINT, signal.SIGTERM)


def _defer_interruptions(deferred: List[int]) -> Dict[int, _HANDLER]:
    """Record a Ctrl-C or SIGTERM in ``deferred`` instead of acting on it, until ``_restore_handlers``:
    one that came while ``subprocess.Popen`` was still returning escaped before cpctl held the editor,
    and the editor outlived cpctl (seen at load 9: cpctl said "interrupted" and its editor kept the
    terminal's pipes). The previous handlers, to restore; none changed outside the main thread (only it
    receives signals)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, lambda got, _frame: deferred.append(got)) for signum in _INTERRUPTIONS}


def _restore_handlers(previous: Dict[int, _HANDLER]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _stop_editor(editor: "subprocess.Popen[bytes]") -> None:
    """SIGTERM the editor, SIGKILL it after EDITOR_GRACE seconds, and reap it."""
    if editor.poll() is not None:
        return
    editor.terminate()
    try:
        editor.wait(EDITOR_GRACE)
    except subprocess.TimeoutExpired:
        editor.kill()
        editor.wait()

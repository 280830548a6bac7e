"""The revert plan (``host.base.RevertPlan``): how the timer starts the armed agent (``VERIFY_LOADER``)
and every field of a plan checked before any of it is used (``plan_problem``).

Standard library only, Python 3.8 syntax: shipped to masters as part of the agent (``cpctl.agent``)."""

import os
from typing import Callable, Dict, List, Optional, Tuple

from cpctl.agent.fileops import lstat
from cpctl.agent.putback import KEPT_OP, PATCH_FILE_NAME
from cpctl.agent.shapes import JournalEntry, JournalStep, RevertPlan, Stat

#: A plan field's check: (the value, where it is in the plan) -> why it is wrong ("" when it is not)
Check = Callable[[object, str], str]

# How the timer starts this file (``ops.confirm._start_remote``): ``python3 -c VERIFY_LOADER AGENT SHA256
# revert-plan PLAN --plan-sha256 SHA256 [--at EPOCH]``. The loader reads the agent file once, runs it only
# when its sha256 is the one recorded at arm time (in the timer's own command line, not in the state
# dir), and the agent applies the plan only when ITS sha256 is the one recorded. No ``%``, ``$`` or
# backslash: a unit's command line would expand or unescape them.
VERIFY_LOADER = (
    "import hashlib,sys;p,h=sys.argv[1],sys.argv[2];d=open(p,'rb').read();"
    "ok=hashlib.sha256(d).hexdigest()==h;"
    "ok or sys.stderr.write('cpctl: '+p+' is not the agent cpctl armed (sha256 differs): not run (exit 7)'+chr(10));"
    "ok or sys.exit(7);sys.argv=[p]+sys.argv[3:];exec(compile(d,p,'exec'),{'__name__':'__main__','__file__':p})")


def link_below(path: str, top: str, look: Optional[Callable[[str], Optional[Stat]]] = None) -> Optional[str]:
    """The first directory between ``top`` (excluded) and ``path`` (excluded) that is a symlink, or
    None: a write or removal below it would land elsewhere (``look``: an lstat returning a dict with
    ``kind``, this module's by default)."""
    look = look or lstat
    top = top.rstrip("/")
    if not path.startswith(top + "/"):
        return None
    current = top
    for part in path[len(top) + 1:].split("/")[:-1]:
        current += "/" + part
        found = look(current)
        if found is None:
            return None
        if found["kind"] == "symlink":
            return current
    return None


# --- the revert plan (``host.base.RevertPlan``): its every field checked before any of it is used -----------
_PLAN_TEXT = 4096          # characters of one text field (a path, a name, a reason, a URL)
_PLAN_ITEMS = 64           # steps of one change; companion files, keep-in records, patch files of a plan
_PLAN_PATTERNS = 32       # regexes of what text is secret (``secret_patterns``)
_PLAN_RECORD = 4 << 20     # bytes of one history record as JSON (a diff is in it)
_HEX64 = "^[0-9a-f]{64}$"
_PLAN_NAME = "^[A-Za-z0-9][-A-Za-z0-9_.+]*$"     # a component, a manifest or patch file's name, an action


def _text(pattern: Optional[str] = None) -> Check:
    """A plan field's check: text of at most ``_PLAN_TEXT`` characters (matching ``pattern``)."""
    def check(value: object, where: str) -> str:
        import re
        if not isinstance(value, str):
            return "%s is not text" % where
        if len(value) > _PLAN_TEXT:
            return "%s is longer than %d characters" % (where, _PLAN_TEXT)
        if pattern and not re.fullmatch(pattern, value):
            return "%s is not of the form %s: %r" % (where, pattern, value[:80])
        return ""
    return check


def _path(value: object, where: str) -> str:
    """An absolute, clean path (no ``.``, ``..``, ``//``, trailing slash or NUL)."""
    problem = _text()(value, where)
    if not problem and isinstance(value, str) and (not value.startswith("/") or os.path.normpath(value) != value
                                                   or value.startswith("//") or "\0" in value):
        return "%s is not an absolute clean path: %r" % (where, value[:80])
    return problem


def _absolute(value: object, where: str) -> str:
    """An absolute path the revert only reads or runs (the kubeconfig, its TLS files, crictl)."""
    problem = _text()(value, where)
    if problem or not isinstance(value, str):
        return problem
    return "" if value.startswith("/") and "\0" not in value else "%s is not an absolute path: %r" % (where, value[:80])


def _number(top: int) -> Check:
    """A plan field's check: a whole number from 0 to ``top``."""
    def check(value: object, where: str) -> str:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
            return "%s is not a whole number from 0 to %d" % (where, top)
        return ""
    return check


def _flag(value: object, where: str) -> str:
    return "" if isinstance(value, bool) else "%s is not true or false" % where


def _seconds(value: object, where: str) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12
    return "" if ok else "%s is not a time in seconds" % where


def _maybe(check: Check) -> Check:
    """``check``, or null."""
    return lambda value, where: "" if value is None else check(value, where)


def _either(first: Check, second: Check) -> Check:
    """``first``'s check, or else ``second``'s."""
    return lambda value, where: first(value, where) and second(value, where)


def _list(check: Check, least: int = 0, most: int = _PLAN_ITEMS) -> Check:
    """A list of ``least`` to ``most`` items, each passing ``check``."""
    def checked(value: object, where: str) -> str:
        if not isinstance(value, list) or not least <= len(value) <= most:
            return "%s is not a list of %d to %d items" % (where, least, most)
        for index, item in enumerate(value):
            problem = check(item, "%s[%d]" % (where, index))
            if problem:
                return problem
        return ""
    return checked


def _pattern(value: object, where: str) -> str:
    """A regex source (``secret_patterns``) that compiles, of at most ``_PLAN_TEXT`` characters."""
    import re
    problem = _text()(value, where)
    if problem or not isinstance(value, str):
        return problem
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        return "%s is no regular expression: %s" % (where, str(exc)[:120])
    return ""


def _record(value: object, where: str) -> str:
    """A history record: a JSON object of at most ``_PLAN_RECORD`` bytes."""
    import json
    if not isinstance(value, dict):
        return "%s is not an object" % where
    if len(json.dumps(value)) > _PLAN_RECORD:
        return "%s is larger than %d bytes" % (where, _PLAN_RECORD)
    return ""


def _object(fields: Dict[str, Check], optional: Optional[Dict[str, Check]] = None) -> Check:
    """A plan field's check: an object with exactly ``fields`` (name: check) and any of ``optional``."""
    extra = optional or {}

    def check(value: object, where: str) -> str:
        if not isinstance(value, dict):
            return "%s is not an object" % where
        for key in value:
            if key not in fields and key not in extra:
                return "%s.%s is not a field of a revert plan" % (where, str(key)[:80])
        for key in fields:
            if key not in value:
                return "%s.%s is missing" % (where, key)
        for key, field in list(fields.items()) + list(extra.items()):
            problem = field(value[key], "%s.%s" % (where, key)) if key in value else ""
            if problem:
                return problem
        return ""
    return check


_STEP_NEEDS = {"move": ("src", "checksum"), "write": ("checksum", "staged"), "remove": ("kept",), "touch": ()}
_step_fields = _object({"kind": _text("^(move|write|remove|touch)$"), "path": _path, "mode": _number(0o7777)},
                       {"src": _path, "checksum": _text(_HEX64), "staged": _path, "before": _text(_HEX64),
                        "kept": _path, "uid": _number(1 << 32), "gid": _number(1 << 32)})


def _step(value: object, where: str) -> str:
    """A step as ``StepRunner`` runs it from a plan: its kind's paths and sha256 there (a write's new
    bytes staged, the bytes it replaces kept)."""
    problem = _step_fields(value, where)
    if problem or not isinstance(value, dict):
        return problem
    for key in _STEP_NEEDS[value["kind"]] + (("kept",) if value.get("before") else ()):
        if not value.get(key):
            return "%s.%s is missing (a %s step)" % (where, key, value["kind"])
    return ""


def _entry(value: object, where: str) -> str:
    """A journal entry (``core.journal.entry_of``) whose commit step is one of its steps."""
    problem = _entry_fields(value, where)
    if not problem and isinstance(value, dict) and value["commit"] >= len(value["steps"]):
        return "%s.commit is not one of its steps" % where
    return problem


_ENTRY_FIELDS: Dict[str, Check] = {
    "version": _number(1 << 16), "op": _text(KEPT_OP), "action": _text(_PLAN_NAME), "component": _text(_PLAN_NAME),
    "file": _text(_PLAN_NAME), "checksum": _maybe(_text(_HEX64)), "commit": _number(_PLAN_ITEMS),
    "steps": _list(_step, 1), "record": _record, "started": _text(), "pid": _number(1 << 32),
    "companions": _list(_path)}
_entry_fields = _object(_ENTRY_FIELDS)
#: A journal entry as STATE/journal.json holds it: any op (an arm's is ``<op>-arm``), with its seal
_journal_fields = _object(dict(_ENTRY_FIELDS, op=_text("^[0-9a-f]{8,64}(-arm)?$")), {"seal": _text(_HEX64)})


def journal_entry_of(value: object) -> Optional[JournalEntry]:
    """A journal entry read from STATE/journal.json (its seal checked first: ``seal_problem``) as a
    ``JournalEntry``, rebuilt field by field once each is checked as a plan's entry is; None when it
    is not one."""
    if _journal_fields(value, "journal") or not isinstance(value, dict) or value["commit"] >= len(value["steps"]):
        return None
    return {"version": value["version"], "op": value["op"], "action": value["action"], "component": value["component"],
            "file": value["file"], "checksum": value["checksum"], "commit": value["commit"], "steps": value["steps"],
            "record": value["record"], "started": value["started"], "pid": value["pid"],
            "companions": value["companions"]}
_identity = _object({"present": _flag, "uid": _text(), "containers": _list(_text()), "started": _maybe(_seconds)})
_api = _object({"server": _text("^https?://[^\\s]+$"), "kubeconfig": _absolute, "sha256": _text(_HEX64),
                "tls": _object({}, {"insecure": _flag, "ca_file": _absolute, "cert_file": _absolute,
                                    "key_file": _absolute}),
                "slices": _object({}, dict((k, _list(_number(4 << 20), 2, 2)) for k in ("ca_data", "cert_data",
                                                                                       "key_data")))})
_plan_shape = _object({
    "version": _number(1), "op": _text(KEPT_OP), "armed": _text(_HEX64), "arm": _path, "lock": _path,
    "journal": _path, "entry": _entry, "record": _record,
    "verdict": _object(dict([(k, _text()) for k in ("user", "host", "node", "reason", "armed_op", "origin")] + [
        ("component", _text(_PLAN_NAME)), ("file", _text(_PLAN_NAME)), ("checksum", _text(_HEX64)),
        ("revision", _number(1 << 32))])),
    "verify": _object({"url": _text("^(https?://[^\\s]+)?$"), "crictl": _either(_absolute, _text("^[-A-Za-z0-9_.]*$")),
                       "pod": _text(), "namespace": _text(), "before": _maybe(_identity),
                       "timeout": _number(86400), "settle": _number(3600)}),
    "keepin": _list(_path), "shown_keys": _list(_text(), 0, _PLAN_ITEMS * 16),
    "secret_patterns": _list(_pattern, 1, _PLAN_PATTERNS), "api": _maybe(_api),
    "check_hint": _text(),
    "patches": _list(_object({"entry": _entry, "history": _record, "record": _path, "after": _text(_HEX64),
                              "was": _maybe(_text(_HEX64))}))})


def plan_problem(plan: object) -> str:
    """Why the revert plan cannot be run ("" when it can), in one line: checked in full before any of
    it is used - every field of ``host.base.RevertPlan`` present with its type and within its bounds,
    each step as ``StepRunner`` runs it, and every path where a revert may touch (``_plan_paths_problem``).
    The rest of the node-side revert reads the plan as that shape (``plan_of``)."""
    return plan_of(plan)[1]


def plan_of(value: object) -> Tuple[Optional[RevertPlan], str]:
    """``value`` (read from the state dir: untrusted) as a ``RevertPlan``, rebuilt field by field once
    every field is checked (``plan_problem``); or None and why it cannot be run. The one way from what a
    file holds to the plan the node-side revert runs."""
    problem = _plan_shape(value, "plan")
    if problem or not isinstance(value, dict):
        return None, problem
    plan: RevertPlan = {
        "version": value["version"], "op": value["op"], "armed": value["armed"], "arm": value["arm"],
        "lock": value["lock"], "journal": value["journal"], "entry": value["entry"], "record": value["record"],
        "verdict": value["verdict"], "verify": value["verify"], "keepin": value["keepin"],
        "shown_keys": value["shown_keys"], "secret_patterns": value["secret_patterns"], "api": value["api"],
        "check_hint": value["check_hint"], "patches": value["patches"]}
    problem = _plan_state_problem(plan) or _plan_paths_problem(plan)
    return (None, problem) if problem else (plan, "")


def _plan_state_problem(plan: RevertPlan) -> str:
    """Why the plan's state files are not where cpctl keeps them ("" when they are): the journal
    (``STATE/journal.json``), the lock, the arm record of its manifest (``STATE/confirm/<file>.json``)
    and the keep-in records (``STATE/keepin/*.json``), STATE never ``/``."""
    state_dir = os.path.dirname(plan["journal"])
    wanted = (("journal", state_dir + "/journal.json"), ("lock", state_dir + "/lock"),
              ("arm", "%s/confirm/%s.json" % (state_dir, plan["entry"]["file"])))
    for key, path in wanted:
        named = plan["journal"] if key == "journal" else plan["lock"] if key == "lock" else plan["arm"]
        if named != path or state_dir == "/":
            return "plan.%s is %s, not the state dir's %s" % (key, named, path)
    for path in plan["keepin"]:
        if os.path.dirname(path) != state_dir + "/keepin" or not path.endswith(".json"):
            return "the plan names %r as a keep-in record" % path
    return ""


def _plan_paths_problem(plan: RevertPlan) -> str:
    """Why the plan names a path outside its allowance ("" when it does not; part of ``plan_problem``):
    each step's paths lie in the manifests dir (the file itself), below the state dir, or are one of
    its recorded companion files below the kube dir, or - in a patch file's undo - that kubeadm patch
    file below the kube dir; nothing below a symlinked directory (checked now, on this node)."""
    import re
    entry = plan["entry"]
    manifests_dir = os.path.dirname(entry["steps"][entry["commit"]]["path"])
    state_dir = os.path.dirname(plan["journal"])
    kube_dir = os.path.dirname(manifests_dir)

    def outside(path: str, allowed: bool, manifest_ok: bool = True) -> str:   # absolute and clean (plan_problem)
        if (manifest_ok and path == manifests_dir + "/" + entry["file"]) or path.startswith(state_dir + "/"):
            return ""
        if allowed and kube_dir != "/" and path.startswith(kube_dir + "/") \
                and not path.startswith(manifests_dir + "/") and link_below(path, kube_dir) is None:
            return ""
        return "the plan names %s, outside what a revert of %s may touch" % (path, entry["file"])

    companions = set(entry["companions"])
    for step in entry["steps"]:
        for key, path in _step_paths(step):
            problem = outside(path, key == "path" and path in companions)
            if problem:
                return problem
    for item in plan["patches"]:
        record = item["record"]
        if os.path.dirname(record) != state_dir + "/keepin" or not record.endswith(".patch.json"):
            return "the plan names %r as a keep-in record" % record
        for step in item["entry"]["steps"]:
            for key, path in _step_paths(step):
                problem = outside(path, key == "path" and re.match(PATCH_FILE_NAME, os.path.basename(path)) is not None,
                                  manifest_ok=False)
                if problem:
                    return problem
    return ""


def _step_paths(step: JournalStep) -> List[Tuple[str, str]]:
    """(field, path) of each path a step names - ``path``, ``src``, ``staged``, ``kept`` - that is set."""
    named = [("path", step.get("path")), ("src", step.get("src")), ("staged", step.get("staged")),
             ("kept", step.get("kept"))]
    return [(key, path) for key, path in named if path]


RETRY_FIRST, RETRY_MAX = 5.0, 300.0    # a revert that meets an environment error: again after 5 s, 10 s, ... 5 min

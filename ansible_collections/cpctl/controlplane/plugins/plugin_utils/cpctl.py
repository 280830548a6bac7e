# -*- coding: utf-8 -*-
# Copyright: (c) 2026, cpctl maintainers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller side of every cpctl.controlplane module: run cpctl against one master.

Each task runs the cpctl installed on the controller (``python -m cpctl`` in the Python that runs
Ansible, or ``cpctl_command``) with a one-host inventory made from the task's host variables, and
``--census cluster``: cpctl reaches the master over its own SSH transport with its
standard-library agent (nothing is installed on the master), and its etcd/API server quorum rules
count through the cluster, since under ``serial`` a task sees only its own host. With a local
connection (``connection: local``, ``ansible-pull``, ``delegate_to: localhost``) the machine that runs
Ansible is the master: cpctl runs there without SSH, its node options from the same variables, and
its quorum rules count through this node's API server (``--census cluster`` locally). Check mode is
cpctl's ``--dry-run``; cpctl's JSON answer becomes the task's result; an unreachable master is
``unreachable``, not ``failed``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

# cpctl's exit codes (README "Exit codes"): the reason words of a failure.
EXIT_WORDS = {1: "drift found", 2: "usage", 3: "not found", 4: "refused", 5: "locked", 6: "timeout",
              7: "environment", 8: "unreachable", 9: "API error", 10: "conflict", 11: "rolled back",
              12: "rollback failed", 70: "internal error", 130: "interrupted"}
# Host variables that become the one-host cpctl inventory (cpctl key: Ansible variables, first set wins).
HOST_KEYS = (
    ("host", ("ansible_host",)),
    ("port", ("ansible_port", "ansible_ssh_port")),
    ("user", ("ansible_user", "ansible_ssh_user")),
    ("node_name", ("cpctl_node_name",)),
    ("manifests_dir", ("cpctl_manifests_dir",)),
    ("state_dir", ("cpctl_state_dir",)),
    ("kubelet_dir", ("cpctl_kubelet_dir",)),
    ("kubeconfig", ("cpctl_kubeconfig",)),
    ("crictl", ("cpctl_crictl",)),
    ("node_root", ("cpctl_node_root",)),
)
# The same variables as cpctl's global options, when cpctl runs on this machine (a local connection).
LOCAL_OPTIONS = (
    ("--node-name", "cpctl_node_name"),
    ("--manifests-dir", "cpctl_manifests_dir"),
    ("--state-dir", "cpctl_state_dir"),
    ("--kubelet-dir", "cpctl_kubelet_dir"),
    ("--kubeconfig", "cpctl_kubeconfig"),
    ("--crictl", "cpctl_crictl"),
    ("--node-root", "cpctl_node_root"),
)
UNREACHABLE = 8         # cpctl's exit code for a master it could not reach
# Leave the master's paths and the run's options to the inventory and the task: the controller's
# environment variables for cpctl's global options must not leak in (CPCTL_KEEPER_DIR may).
DROPPED_ENV = ("KUBECONFIG", "CPCTL_MANIFESTS_DIR", "CPCTL_KUBELET_DIR", "CPCTL_STATE_DIR", "CPCTL_NODE_NAME",
               "CPCTL_PROBE", "CPCTL_CRICTL", "CPCTL_NODE_ROOT", "CPCTL_INVENTORY", "CPCTL_PERSIST", "CPCTL_HOST_TIMEOUT",
               "CPCTL_KEEP_REVISIONS")


class CpctlAction(ActionBase):
    """Base of the collection's action plugins: argument validation, the cpctl run, its result."""

    TRANSFERS_FILES = False
    _requires_connection = False       # cpctl opens its own SSH connection (or takes the keeper's)
    ARGUMENT_SPEC = {}                  # the module's (plugins/modules/NAME.py), set by each plugin
    MUTUALLY_EXCLUSIVE = []
    REQUIRED_ONE_OF = []

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        validated, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC,
                                                      mutually_exclusive=self.MUTUALLY_EXCLUSIVE,
                                                      required_one_of=self.REQUIRED_ONE_OF)
        self._workdir = tempfile.mkdtemp(prefix="cpctl-ansible-")
        try:
            result.update(self.act(args, task_vars or {}))
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)
        # The values of no_log options (a manifest's content, a --confirm-check command) and of the
        # flags that carry a credential never show in the result, as a module's exit_json masks them.
        # Only secrets: a flag value such as "2" masked everywhere would turn rc into "********".
        secrets = set(getattr(validated, "_no_log_values", set())) | self.secret_values(args)
        return remove_values(result, secrets) if secrets else result

    def secret_values(self, args):
        """Values of this task's options that are secrets although the option is not no_log as a
        whole (static_pod_flags: the values of the flags named like a credential)."""
        del args
        return set()

    def act(self, args, task_vars):
        """The module's work: a dict merged into the task's result."""
        raise NotImplementedError

    # ------------------------------------------------------------------ running cpctl

    def _var(self, task_vars, names):
        for name in names:
            if task_vars.get(name) not in (None, ""):
                return self._templar.template(task_vars[name])
        return None

    def _inventory(self, task_vars):
        """The one-host cpctl inventory file for this task's host; its host name."""
        name = to_text(task_vars.get("inventory_hostname"))
        entry = {}
        for key, names in HOST_KEYS:
            value = self._var(task_vars, names)
            if value is not None:
                entry[key] = int(value) if key == "port" else to_text(value)
        python = self._var(task_vars, ("ansible_python_interpreter",))
        if python and to_text(python).startswith("/"):
            entry["python"] = to_text(python)      # "auto" and friends: cpctl's own default (python3)
        entry["become"] = bool(self._play_context.become)
        path = os.path.join(self._workdir, "inventory.json")
        with open(path, "w") as handle:
            json.dump({"all": {"hosts": {name: entry}}}, handle)
        return path, name

    def runs_locally(self):
        """True when this task's connection is the machine running Ansible (``connection: local``,
        ``ansible-pull``, ``delegate_to: localhost``): cpctl then acts on this node, without SSH."""
        connection = getattr(self, "_connection", None)
        return getattr(connection, "transport", None) in ("local", "ansible.builtin.local")

    def _base_argv(self, task_vars):
        command = self._var(task_vars, ("cpctl_command",))
        if isinstance(command, str):
            argv = command.split()
        elif isinstance(command, (list, tuple)):
            argv = [to_text(word) for word in command]
        else:
            argv = [sys.executable, "-m", "cpctl"]
        if self.runs_locally():
            if self._play_context.become and os.geteuid() != 0:
                argv = ["sudo", "-n", "--"] + argv
            argv += ["--census", "cluster", "-o", "json"]
            for option, var in LOCAL_OPTIONS + (("--probe", "cpctl_probe"),):
                value = self._var(task_vars, (var,))
                if value not in (None, ""):
                    argv += [option, to_text(value)]
            return argv
        inventory, name = self._inventory(task_vars)
        argv += ["-i", inventory, "-H", name, "--census", "cluster", "-o", "json"]
        config = self._ssh_config(task_vars)
        if config:
            argv += ["--ssh-config", config]
        for option, var in (("--known-hosts", "cpctl_known_hosts"),
                            ("--persist", "cpctl_persist"), ("--probe", "cpctl_probe")):
            value = self._var(task_vars, (var,))
            if value not in (None, ""):
                argv += [option, to_text(value)]
        if self._var(task_vars, ("cpctl_accept_new_host_key",)) in (True, "true", "yes", "1"):
            argv.append("--accept-new-host-key")
        return argv

    def _ssh_config(self, task_vars):
        """cpctl's --ssh-config: ``cpctl_ssh_config``; with ``ansible_ssh_private_key_file``, a private
        config that includes it (or ~/.ssh/config) and adds that key for every host."""
        config = self._var(task_vars, ("cpctl_ssh_config",))
        config = os.path.abspath(os.path.expanduser(to_text(config))) if config else None
        key = self._var(task_vars, ("ansible_ssh_private_key_file", "ansible_private_key_file"))
        if not key:
            return config
        base = config or os.path.expanduser("~/.ssh/config")
        lines = ["Include %s" % base] if os.path.exists(base) else []
        lines += ["Host *", "  IdentityFile %s" % os.path.abspath(os.path.expanduser(to_text(key)))]
        written = os.path.join(self._workdir, "ssh_config")
        if os.path.exists(written):       # an earlier cpctl run of this same task wrote it (same variables)
            return written
        return self.write_private("ssh_config", "\n".join(lines) + "\n")

    def cpctl(self, task_vars, args, ok_codes=(0,), timeout=None):
        """Run ``cpctl ARGS`` for this host: (exit code, the host's data or None, error message).

        The answer is the same whichever way cpctl ran: the one host's data (``-H``), or the data
        itself (on this node). A run that exits 0 without a JSON answer is an error too."""
        argv = self._base_argv(task_vars) + list(args)
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        # this task's temp dir (its inventory, ssh_config): cpctl's hints name no file in it, and speak
        # of the play (serial: 1) instead of cpctl's own options
        env["CPCTL_ANSIBLE_TASK_DIR"] = self._workdir
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise AnsibleActionFail("cpctl not found on the controller (%s): install it in the Python that runs "
                                    "Ansible, or set cpctl_command" % exc)
        except subprocess.TimeoutExpired:
            raise AnsibleActionFail("cpctl did not finish within %ss" % timeout)
        data, error = None, ""
        try:
            doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
        except ValueError:
            doc = {}
        rc = proc.returncode
        hosts = doc.get("hosts") if isinstance(doc, dict) and not self.runs_locally() else None
        if isinstance(hosts, list) and hosts and isinstance(hosts[0], dict):
            data = hosts[0].get("data")
            error = hosts[0].get("error") or ""
            if hosts[0].get("status") == "unreachable":
                rc = UNREACHABLE
        elif isinstance(doc, dict) and doc and "error" not in doc:
            data = doc
        if rc not in ok_codes and not error:
            error = _error_line(proc.stderr) or _error_line(proc.stdout) or "cpctl exited %d" % rc
        if rc == 0 and not isinstance(data, dict):
            rc, error = 70, "cpctl gave no JSON answer (%s)" % (_error_line(proc.stderr) or "exit %d" % proc.returncode)
        return rc, data, error

    def failed(self, rc, error, data=None):
        """The task's result for a failed cpctl run (``rc`` is cpctl's documented exit code); a master
        cpctl could not reach is ``unreachable`` (Ansible's recap, ``ignore_unreachable``)."""
        result = {"failed": True, "changed": False, "rc": rc,
                  "msg": "cpctl: %s (exit %d: %s)" % (error, rc, EXIT_WORDS.get(rc, "error"))}
        if rc == UNREACHABLE:        # (no rc: Ansible counts a result with a non-zero rc as failed)
            del result["failed"], result["rc"]
            result["unreachable"] = True
        if isinstance(data, dict):
            result["cpctl"] = data
            result["changed"] = bool(data.get("changed"))
        return result

    def diff_of(self, text):
        """Ansible's diff for cpctl's unified diff text."""
        return {"prepared": text} if text else {}

    def write_private(self, name, content):
        """A file only this user reads, removed after the task."""
        path = os.path.join(self._workdir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        return path


def _error_line(stderr):
    """cpctl's one failure line on stderr (a JSON object with -o json), as text."""
    for line in reversed((stderr or "").strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            error = doc["error"]
            return "%s%s" % (error.get("message", ""), " (hint: %s)" % error["hint"] if error.get("hint") else "")
    lines = (stderr or "").strip().splitlines()
    return lines[-1] if lines else ""


def command(words, options, component):
    """cpctl's argv for one component: the command words, its options, then ``--`` and the
    component, so that a component that looks like an option (``--help``) is a name cpctl refuses
    with its own message, not an option."""
    return list(words) + list(options) + ["--", component]


def dry_run(argv):
    """``argv`` (made by :func:`command`) as a dry run: ``--dry-run`` before the ``--``."""
    at = argv.index("--")
    return argv[:at] + ["--dry-run"] + argv[at:]


def change_options(args):
    """The options every verified manifest change shares (cpctl apply/flags/rollback)."""
    argv = ["--timeout", str(args["timeout"]), "--settle", str(args["settle"]),
            "--keep-revisions", str(args["keep_revisions"])]
    if args.get("reason"):
        argv += ["--reason", args["reason"]]
    if not args["rollback"]:
        argv.append("--no-rollback")
    if args["force"]:
        argv.append("--force")
    if not args.get("move_leader", True):
        argv.append("--no-move-leader")
    if args.get("confirm_within"):
        argv += ["--confirm-within", args["confirm_within"]]
    if args.get("confirm_check"):
        argv += ["--confirm-check", args["confirm_check"]]
    for target in args.get("keep_in") or []:
        argv += ["--keep-in", target]
    return argv


def companion_options(action, args):
    """``--with-file NODE_PATH=LOCAL_FILE`` for each O(with_file) entry, the local file found like
    ``src`` (the role's or play's ``files/``): (argv, None) or (None, the task's failure)."""
    argv = []
    for node_path, source in sorted((args.get("with_file") or {}).items()):
        try:
            local = action._find_needle("files", to_text(source))
        except AnsibleError as exc:
            return None, {"failed": True, "msg": "with_file %s: %s" % (node_path, exc)}
        argv += ["--with-file", "%s=%s" % (node_path, local)]
    return argv, None


def manifest_change(action, task_vars, argv):
    """apply/flags/rollback: check mode is cpctl's --dry-run; with --diff a dry run first gives the
    diff; the real run's answer says whether anything changed (the same bytes: changed=false)."""
    if action._play_context.check_mode:
        rc, data, error = action.cpctl(task_vars, dry_run(argv))
        if rc != 0:
            return action.failed(rc, error, data)
        changed = bool(data.get("diff"))
        result = {"changed": changed, "msg": data.get("message", ""), "cpctl": data}
        if action._task.diff and changed:
            result["diff"] = action.diff_of(data["diff"])
        return result
    planned = None
    if action._task.diff:
        rc, planned, error = action.cpctl(task_vars, dry_run(argv))
        if rc != 0:
            return action.failed(rc, error, planned)
    rc, data, error = action.cpctl(task_vars, argv)
    if rc != 0:
        return action.failed(rc, error, data)
    result = {"changed": bool(data.get("changed")), "msg": data.get("message", ""), "cpctl": data}
    if planned and result["changed"] and planned.get("diff"):
        result["diff"] = action.diff_of(planned["diff"])
    return result


def is_secret_flag(name):
    """cpctl's one redaction rule for a flag name (``cpctl.redaction.is_secret_name``: ``--token``,
    ``--db-pass``, ``--initial-cluster-token``..., not ``--token-auth-file``), from the cpctl this
    controller runs; a controller whose Python cannot import it masks every value (fail closed)."""
    try:
        from cpctl.redaction import is_secret_name
    except ImportError:
        return True
    return bool(is_secret_name(to_text(name)))

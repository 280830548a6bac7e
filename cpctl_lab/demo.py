"""``cpctl lab demo``: the CKA manual-scheduling task, replayed step by step against the lab.

Every step runs the real command (cpctl itself, and the real kubectl against the lab's API
server), prints it like a shell transcript, and checks the result; the demo fails loudly
(non-zero exit) the moment reality differs from the walkthrough.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from typing import Callable, Optional


class DemoFailed(Exception):
    """A demo step did not do what the walkthrough says it does."""


CONFLICT = 10   # cpctl's documented exit code for "the API refused: e.g. the pod is already bound"
ROLLED_BACK = 11  # ... for "the new version did not become healthy and was rolled back"


class Step:
    """Run one command with the lab's environment and show it."""

    def __init__(self, env: dict, echo: Callable[[str], None]) -> None:
        self.env = env
        self.echo = echo
        self.count = 0

    def title(self, text: str) -> None:
        self.count += 1
        self.echo("\n== %d. %s" % (self.count, text))

    def run(self, argv: list, expect_rc: int = 0) -> str:
        shown = " ".join(shlex.quote(a) for a in argv)
        self.echo("$ %s" % shown)
        cmd = [sys.executable, "-m", "cpctl"] + argv[1:] if argv[0] == "cpctl" else argv
        proc = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
        out = proc.stdout.decode("utf-8", "replace").rstrip()
        if out:
            self.echo(out)
        if proc.returncode != expect_rc:
            raise DemoFailed("demo step failed: %s exited %d (expected %d)" % (shown, proc.returncode, expect_rc))
        return out


def pod_field(step: Step, name: str, jsonpath: str) -> str:
    proc = subprocess.run(["kubectl", "get", "pod", name, "-o", "jsonpath={%s}" % jsonpath], env=step.env,
                          capture_output=True, timeout=30)
    return proc.stdout.decode().strip()


def wait_for(step: Step, what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise DemoFailed("demo: %s did not happen within %.0fs" % (what, timeout))
        time.sleep(0.1)


def run_demo(env: dict, master: str, worker: str, echo: Callable[[str], None] = print,
             pause: float = 1.0) -> None:
    """The walkthrough; ``env`` points cpctl and kubectl at the lab."""
    step = Step(dict(os.environ, **env), echo)
    step.title("The lab: one control-plane node (%s) and one worker (%s)" % (master, worker))
    step.run(["kubectl", "get", "nodes", "-o", "wide"])
    step.run(["kubectl", "-n", "kube-system", "get", "pods"])
    step.run(["cpctl", "status"])

    step.title("Stop the scheduler: cpctl parks its manifest and waits until the mirror pod is gone")
    step.run(["cpctl", "stop", "scheduler", "--reason", "CKA: manual scheduling", "--for", "30m"])
    step.run(["cpctl", "status", "scheduler"])

    step.title("Create a pod: with no scheduler running it stays Pending")
    step.run(["kubectl", "run", "manual-schedule", "--image=httpd:2.4-alpine"])
    time.sleep(pause)
    if pod_field(step, "manual-schedule", ".spec.nodeName"):
        raise DemoFailed("demo: manual-schedule was scheduled although the scheduler is stopped")
    step.run(["kubectl", "get", "pod", "manual-schedule", "-o", "wide"])
    step.run(["cpctl", "pending"])

    step.title("Be the scheduler: bind the pod to %s through pods/binding" % master)
    step.run(["cpctl", "bind", "manual-schedule", "--node", master, "--wait"])
    step.run(["kubectl", "get", "pod", "manual-schedule", "-o", "wide"])
    step.run(["cpctl", "bind", "manual-schedule", "--node", worker], expect_rc=CONFLICT)

    step.title("Start the scheduler again: cpctl waits for a new Ready pod and a renewed Lease")
    step.run(["cpctl", "start", "scheduler"])

    step.title("A new pod now lands on the worker by itself")
    step.run(["kubectl", "run", "manual-schedule2", "--image=httpd:2.4-alpine"])
    wait_for(step, "manual-schedule2 Running",
             lambda: pod_field(step, "manual-schedule2", ".status.phase") == "Running")
    node = pod_field(step, "manual-schedule2", ".spec.nodeName")
    step.run(["kubectl", "get", "pod", "manual-schedule2", "-o", "wide"])
    if node != worker:
        raise DemoFailed("demo: manual-schedule2 landed on %r, expected the worker %s" % (node, worker))

    step.title("Change a flag safely: the new pod is verified, a typo is rolled back automatically")
    step.run(["cpctl", "flags", "scheduler", "--set", "v=2", "--settle", "1", "--reason", "more logs"])
    step.run(["cpctl", "flags", "scheduler", "--set", "profiling=maybe", "--timeout", "8", "--settle", "1"],
             expect_rc=ROLLED_BACK)
    step.run(["cpctl", "revisions", "scheduler"])

    step.title("Everything cpctl changed is on record")
    step.run(["cpctl", "history"])
    echo("\nThat was the CKA task: stop -> Pending -> manual bind -> start -> scheduled on %s; then a flag "
         "change verified, and a broken one rolled back by itself." % worker)
    echo(NEXT_STEPS)


KUBECTL_MISSING = ("cpctl lab demo needs kubectl (the demo runs it against the lab), and there is none on PATH: "
                   "install it (https://kubernetes.io/docs/tasks/tools/#kubectl, e.g. apt-get install kubectl from "
                   "pkgs.k8s.io) and run the demo again")

# What to try next, self-contained: an installed wheel holds no docs/ or examples/ (and may be offline), so
# this names no file and no URL - the commands themselves, and their --help (issue 48).
NEXT_STEPS = """
Next, try it yourself in a lab of your own (each command explains itself: cpctl COMMAND --help):
  eval "$(cpctl lab up)"         # start a lab in the background; cpctl and kubectl now talk to it
  cpctl status                   # the static pods: file, parked or not, mirror pod
  cpctl stop scheduler --reason "my first park" && kubectl run web --image=nginx
  kubectl get pod web -o wide    # Pending: no scheduler runs
  cpctl bind web --node lab-master1 --wait    # be the scheduler
  cpctl start scheduler          # waits for a new Ready pod and a renewed Lease
  cpctl history                  # everything cpctl changed, on record
  cpctl lab down                 # when done"""


def kubectl_path() -> Optional[str]:
    """The kubectl the demo's steps will run (None: not installed)."""
    import shutil
    return shutil.which("kubectl")


def demo_in_lab(directory: Optional[str], echo: Callable[[str], None] = print, keep: bool = False) -> None:
    """Start a fresh lab (in ``directory`` or a temp dir), run the demo, stop the lab.

    A temp dir the demo made (``cpctl-demo-*``) is removed afterwards, also when a step fails or
    the demo is interrupted; ``keep`` leaves the lab running in it instead."""
    import shutil
    import tempfile

    from cpctl_lab import start_lab
    workdir = directory or tempfile.mkdtemp(prefix="cpctl-demo-")
    lab = None
    try:
        lab = start_lab(workdir)
        echo("lab running in %s (API %s)" % (workdir, lab.api_url))
        run_demo(lab.env, lab.node_name(1), lab.worker, echo)
    finally:
        if keep and lab is not None:
            echo("lab left running: cpctl lab down --dir %s" % workdir)
        else:
            if lab is not None:
                lab.stop()
            if directory is None:
                shutil.rmtree(workdir, ignore_errors=True)

"""The one way a command reaches a node: this machine, or every selected master as the registry says.

``cli.registry`` declares each command's mode; ``enforce`` refuses hosts for a local-only command
before it runs, and ``execute`` runs a command's ``action(node)`` here or on every selected master
(in parallel for reads, rolling for changes, once for a one-master API call). ``local_node`` and
``local_host`` are the only other ways to reach this machine, and they refuse when hosts were
given: no command can quietly run locally then.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Dict, Generic, List, Mapping, Optional, Set, Tuple, TypedDict, TypeVar, cast

import click

from cpctl.cli import registry
from cpctl.cli.context import emit, fail, gone_after_task, note, printable, progress_for, state
from cpctl.errors import CpctlError, ExitCode, interrupted_by

if TYPE_CHECKING:                   # types only: the CLI loads these modules when a command runs
    from cpctl.core.node import Node
    from cpctl.fleet.inventory import HostSpec
    from cpctl.fleet.runner import HostResult
    from cpctl.fleet.targets import RemoteOptions
    from cpctl.host.base import Host
    from cpctl.host.local import LocalHost
    from cpctl.host.sshconfig import SSHOptions
    from cpctl.ops.changelease import Holder, LeaseSeen

#: A command's result on one node: its JSON output, which its ``text_of`` renders as text.
R = TypeVar("R", bound=Mapping[str, object])
T = TypeVar("T")


class HostBlock(TypedDict):
    """One master's part of a fan-out's output (``-o json``: the ``hosts`` list)."""

    host: str
    status: str
    error: Optional[str]
    elapsed_seconds: float
    data: object


def enforce(ctx: click.Context, path: str, plugin: bool = False) -> None:
    """Before ``path`` runs: a local-only command given hosts is a usage error (exit 2)."""
    cli_state = state(ctx)
    cli_state.command = path
    if cli_state.remote is None:
        return
    spec = registry.spec_for(path)
    if plugin or (spec is not None and spec.mode is registry.Mode.LOCAL):
        why = registry.PLUGIN_WHY % path.split()[0] if plugin or spec is None else spec.why
        raise CpctlError("cpctl %s runs only on this machine (%s): drop -H/--inventory, or run it on the master"
                         % (path, why), ExitCode.USAGE)
    options = cli_state.remote.ssh_options
    if options is not None and options.persist > 0 and options.become_password is None:
        from cpctl.host import keeper  # its start overlaps with loading the command's code
        keeper.start_soon(options.persist)


def _mode(ctx: click.Context) -> registry.Mode:
    spec = registry.spec_for(state(ctx).command)
    if spec is None or spec.mode is None:
        raise CpctlError("command %r has no declared fan-out mode (a bug: please report it)"
                         % state(ctx).command, ExitCode.INTERNAL)
    return spec.mode


def local_host(ctx: click.Context) -> "LocalHost":
    """This machine, for a command that declared itself local-only."""
    if state(ctx).remote is not None:
        raise CpctlError("cpctl %s tried to act on this machine although hosts were given (a bug: please "
                         "report it)" % state(ctx).command, ExitCode.INTERNAL)
    from cpctl.host.local import LocalHost
    return LocalHost()


def local_node(ctx: click.Context, probe: Optional[str] = None) -> "Node":
    """The ``Node`` of this machine, for a local-only command (``watch``)."""
    from cpctl.ops.wiring import open_node
    return open_node(state(ctx).settings, local_host(ctx), probe=probe, log=note, progress=progress_for(ctx))


def execute(ctx: click.Context, action: Callable[["Node"], R], text_of: Callable[[R], str],
            changing: bool = False, probe: Optional[str] = None) -> List[R]:
    """Run ``action(node)`` on this machine, or on every selected master as the command's mode
    says; print the result(s). Returns the data of every host that produced some (failed hosts
    already set the exit code)."""
    mode = _mode(ctx)
    if changing and mode is registry.Mode.READ:        # (a change's --dry-run runs as a read)
        raise CpctlError("cpctl %s declared %r but ran as a change (a bug: please report it)"
                         % (state(ctx).command, mode.value), ExitCode.INTERNAL)
    if mode is not registry.Mode.READ:
        action = _restarting_timers(ctx, action)
    cli_state = state(ctx)
    if cli_state.remote is None:
        from cpctl.host.local import LocalHost
        from cpctl.ops.wiring import open_node
        data = action(open_node(cli_state.settings, LocalHost(), probe=probe, log=note, progress=progress_for(ctx)))
        data = hosted(data, None)
        emit(ctx, data, text_of(printable(data)))
        if changing and cli_state.change_lease is not None and cli_state.change_lease.lost:
            # no next master to stop before: the change is done, but another run may have changed too
            fail("this run lost the cluster's change lease (kube-system/cpctl-control-plane-changes) to %s while it "
                 "ran: another run may have changed the cluster's etcd/API servers meanwhile"
                 % cli_state.change_lease.lost, int(ExitCode.LOCKED))
            ctx.exit(int(ExitCode.LOCKED))
        return [data]
    return _fan_out(ctx, mode, action, text_of, changing, probe)


def hosted(data: T, host: Optional[str]) -> T:
    """A node's answer with the one field that says which master it is about: ``host``, the name the
    run reached it by (``-H``/inventory; the ``hosts`` block's own ``host``), ``None`` on this machine.
    A local run and each host's ``data`` of a ``-H`` run then have one shape (docs/json.md)."""
    if not isinstance(data, dict):
        return data
    return cast(T, dict(data, host=host))


def _restarting_timers(ctx: click.Context, action: Callable[["Node"], R]) -> Callable[["Node"], R]:
    """``action`` on a node whose change sessions first restart the revert timer of every arm whose
    timer died (``ops.confirm.restart_dead_timers``, issue 49): the next cpctl change on a node
    brings it back, locally and with -H/-i. A read-only command, a dry run and ``confirm`` open no
    change session: they only report a dead timer, they never start a revert."""
    def run(node: "Node") -> R:
        def restart() -> List[str]:
            from cpctl.cli.launcher import launcher
            from cpctl.ops.confirm import restart_dead_timers
            return restart_dead_timers(node, launcher(ctx, node))
        node.change_hooks.append(restart)
        return action(node)
    return run


def _fan_out(ctx: click.Context, mode: registry.Mode, action: Callable[["Node"], R], text_of: Callable[[R], str],
             changing: bool, probe: Optional[str]) -> List[R]:
    from cpctl.fleet.runner import stats
    from cpctl.fleet.targets import exit_code, failure_line, select_specs
    remote = state(ctx).remote
    assert remote is not None
    specs = select_specs(remote)
    if mode is registry.Mode.ONE and len(specs) != 1:
        raise CpctlError("cpctl %s acts on the cluster once: select exactly one master (-H NAME), not %d"
                         % (state(ctx).command, len(specs)), ExitCode.USAGE)
    results, interrupted = _run_tracked(ctx, specs, action, changing or mode is registry.Mode.ONE, probe)
    results = [dataclasses.replace(r, data=hosted(r.data, r.host)) for r in results]
    blocks: List[HostBlock] = [{"host": r.host, "status": r.status, "error": r.error,
                                "elapsed_seconds": round(r.elapsed, 3), "data": r.data} for r in results]
    data = {"hosts": blocks, "recap": stats(results)}
    code = int(ExitCode.INTERRUPTED) if interrupted else exit_code(results)
    line = failure_line(results) if code else ""
    if interrupted and not line.startswith("interrupted") and interrupted not in line:
        line = "interrupted (%s)%s" % (interrupted, "; " + line if line else "")
    emit(ctx, data, "" if state(ctx).output in ("json", "yaml") else _fanned_text(results, blocks, text_of, line))
    if code:
        fail(line, code)
        ctx.exit(code)
    return [r.data for r in results if isinstance(r.data, dict)]


def _fanned_text(results: List["HostResult[R]"], blocks: List[HostBlock], text_of: Callable[[R], str],
                 line: str) -> str:
    """The text output of a fan-out (``-o text``/``wide``; ``-o json``/``yaml`` print ``data`` and
    skip this: at 50 masters it cost ~3 ms): each host's block, then the recap. Each error is
    printed once: in its host's block, or - for the one the last line reports - there."""
    from cpctl.fleet.runner import recap
    reported = _reported_host(results, line)
    counts_only = [dataclasses.replace(r, host=printable(r.host), error=None) for r in results]
    bodies = [text_of(printable(r.data)) if isinstance(r.data, dict) else "" for r in results]
    shown = _hosts_text([printable(block) for block in blocks], bodies, printable(reported))
    return shown + "\n\n" + recap(counts_only)


def _reported_host(results: List["HostResult[T]"], line: str) -> Optional[str]:
    """The host whose error the final stderr line quotes (its block then does not repeat it)."""
    for result in results:
        if result.failed and result.error and result.error in line:
            return str(result.host)
    return None


def run_on_hosts(ctx: click.Context, specs: List["HostSpec"], action: Callable[["Node"], T], changing: bool,
                 probe: Optional[str] = None) -> List["HostResult[T]"]:
    """Apply ``action`` to a Node on each host; connections are reused for the whole run. A Ctrl-C
    or SIGTERM is passed on to every host's run (see ``_Interruption``), then raised again here:
    a caller that asked the masters something (``census``) must not go on with half the answers."""
    results, interrupted = _run_tracked(ctx, specs, action, changing, probe)
    if interrupted:
        raise CpctlError("interrupted (%s) while cpctl %s was asking the masters" % (interrupted, state(ctx).command),
                         ExitCode.INTERRUPTED)
    return results


def _run_tracked(ctx: click.Context, specs: List["HostSpec"], action: Callable[["Node"], T], changing: bool,
                 probe: Optional[str] = None) -> Tuple[List["HostResult[T]"], str]:
    """``run_on_hosts`` and the signal that interrupted it ("SIGINT"/"SIGTERM", "" if none)."""
    from cpctl.errors import Terminated
    from cpctl.fleet.runner import run_parallel, run_rolling
    from cpctl.fleet.targets import READ_ONLY_HOST_TIMEOUT
    from cpctl.ops.wiring import open_node
    cli_state = state(ctx)
    remote = cli_state.remote
    assert remote is not None
    prepare_process_for_fanout(remote.ssh_options)
    pool = remote.pool(_connector(remote.ssh_options))
    interruption: _Interruption[T] = _Interruption(pool.abandon, lambda host: hint_for(ctx, host, "status"))

    def on_host(spec: "HostSpec") -> T:
        from cpctl.fleet.runner import host_name
        if changing:
            lease_lost(ctx, host_name(spec))      # a run that lost the cluster's change lease stops here
        settings = cli_state.settings.with_overrides(
            manifests_dir=spec.manifests_dir, kubelet_dir=spec.kubelet_dir, state_dir=spec.state_dir,
            node_name=spec.node_name, kubeconfig=spec.kubeconfig, crictl=spec.crictl, node_root=spec.node_root,
            invocation=host_invocation(ctx, spec))
        node = open_node(settings, pool.get(spec), probe=probe, log=host_note(host_name(spec)),
                         progress=interruption.check)
        interruption.nodes[host_name(spec)] = node
        return action(node)

    tracked = interruption.track(on_host)
    try:
        if changing:
            return run_rolling(specs, tracked, serial=remote.serial, keep_going=remote.keep_going,
                               timeout=remote.host_timeout, on_timeout=pool.abandon), ""
        timeout = remote.host_timeout if remote.host_timeout is not None else READ_ONLY_HOST_TIMEOUT
        return run_parallel(specs, tracked, forks=remote.forks, timeout=timeout, on_timeout=pool.abandon), ""
    except (KeyboardInterrupt, Terminated) as exc:
        return interruption.stop(exc, specs), interrupted_by(exc)


#: the longest line a master's session says on stderr (``host_note``): it quotes what the master holds
HOST_NOTE_CHARS_MAX = 4096


def host_note(host: str) -> Callable[[str], None]:
    """What a master's session says besides its result (``Node.log``: what its recovery put back or
    could not - a ``--keep-in`` write the master's own revert left in conflict -, a change hook's
    restarted timer), on stderr as a local run says it, prefixed with the master's name. The line
    quotes what the master holds (its ClusterConfiguration's keys, its API's words): at most
    HOST_NOTE_CHARS_MAX characters, control characters escaped (``note``)."""
    from cpctl.probes.diagnose import cut_line

    def log(message: str) -> None:
        note(cut_line("%s: %s" % (host, message), HOST_NOTE_CHARS_MAX))
    return log


def host_invocation(ctx: click.Context, spec: "HostSpec") -> Tuple[str, ...]:
    """The global options that reach this one master again, for the hints its run prints: ``-i
    INVENTORY -H NAME`` (or ``-H TARGET``), the ``--ssh-config``/``--known-hosts`` given, then the
    node options given on the command line (``CliState.node_options``): ``Settings.invocation``."""
    cli_state = state(ctx)
    remote = cli_state.remote
    assert remote is not None
    kept = remote.inventory and not gone_after_task(remote.inventory)
    words = ["-i", remote.inventory or "", "-H", spec.name] if kept else ["-H", spec.target]
    return tuple(words + _ssh_files(remote)) + cli_state.node_options


def _ssh_files(remote: "RemoteOptions") -> List[str]:
    """``--ssh-config``/``--known-hosts`` as given, for a hint; not a file of the Ansible task this run
    is (``context.gone_after_task``: the collection's temp files are gone when the hint is read)."""
    options = remote.ssh_options
    words: List[str] = []
    if options is not None and options.ssh_config and not gone_after_task(options.ssh_config):
        words += ["--ssh-config", options.ssh_config]
    for known in (options.known_hosts or []) if options is not None else []:
        if not gone_after_task(known):
            words += ["--known-hosts", known]
    return words


def run_hint(ctx: click.Context, *words: str) -> str:
    """A cpctl command line for every master this run selected (``-i INV -H`` as given, the SSH
    options, the node options), or for this machine: for a message about the whole run."""
    from cpctl.core.settings import command_hint
    cli_state = state(ctx)
    remote = cli_state.remote
    if remote is None:
        return command_hint((), *words)
    if remote.inventory and gone_after_task(remote.inventory):
        from cpctl.fleet.targets import select_specs
        selection = ["-H", ",".join(spec.target for spec in select_specs(remote))]
    else:
        selection = (["-i", remote.inventory] if remote.inventory else []) + (["-H", ",".join(remote.hosts)]
                                                                              if remote.hosts else [])
    return command_hint(tuple(selection + _ssh_files(remote)) + cli_state.node_options, *words)


def hint_for(ctx: click.Context, host: str, *words: str) -> str:
    """A cpctl command line about master ``host`` (its name in the run's results), for a message
    the fan-out itself prints (``settings.command_hint``)."""
    from cpctl.core.settings import command_hint
    from cpctl.fleet.targets import select_specs
    remote = state(ctx).remote
    spec = next((s for s in select_specs(remote) if s.name == host), None) if remote is not None else None
    return command_hint(host_invocation(ctx, spec) if spec is not None else ("-H", host), *words)


class _Interruption(Generic[T]):
    """Ctrl-C or SIGTERM during a fan-out: Python delivers it to the main thread, which waits for
    the hosts' threads; each host's run must still unwind like a local run does (a restart puts
    its manifest back, a stop says where its manifest stays). So the main thread raises a flag,
    every host's waiter sees it at its next poll (``check`` is their progress callback) and raises
    the same interruption in its own thread, and the main thread waits (``GRACE`` seconds, or
    until a second signal) for each running host to report where it left things."""

    GRACE = 20.0

    def __init__(self, abandon: Callable[["HostSpec"], None] = lambda spec: None,
                 status_hint: Callable[[str], str] = lambda host: "cpctl -H %s status" % host) -> None:
        self.signal: Optional[BaseException] = None
        self.changed = threading.Condition()
        self.running: Dict[str, float] = {}
        self.results: Dict[str, HostResult[T]] = {}
        self.nodes: Dict[str, "Node"] = {}       # each host's node: what stands there (``Node.standing``)
        self.abandon = abandon
        self.status_hint = status_hint

    def _standing(self, name: str) -> str:
        node = self.nodes.get(name)
        return node.standing if node is not None else ""

    def check(self, _text: str = "") -> None:
        """A host's progress callback: raise the interruption in that host's thread once it came."""
        if self.signal is not None:
            raise type(self.signal)()

    def track(self, on_host: Callable[["HostSpec"], T]) -> Callable[["HostSpec"], T]:
        """``on_host`` recording each host's result (the runner's results are lost when the main
        thread is interrupted) and turning a raw interruption into that host's failure."""
        from cpctl.fleet.runner import host_name, run_one

        def run(spec: "HostSpec") -> T:
            name = host_name(spec)
            with self.changed:
                if self.signal is not None:       # reported "skipped" by ``stop``
                    raise CpctlError("not run: interrupted", ExitCode.INTERRUPTED)
                self.running[name] = time.monotonic()
            result = run_one(spec, _interruptions_reported(on_host))
            with self.changed:
                self.results[name] = result
                self.running.pop(name, None)
                self.changed.notify_all()
            if not result.failed and result.data is not None:
                return result.data
            raise CpctlError(result.error or result.status, ExitCode(result.code or ExitCode.INTERNAL))
        return run

    def stop(self, exc: BaseException, specs: List["HostSpec"]) -> List["HostResult[T]"]:
        """Pass the interruption on, wait for the running hosts, and the result of every host."""
        from cpctl.errors import Terminated
        from cpctl.fleet.runner import HostResult, host_name
        signal = interrupted_by(exc)
        deadline = time.monotonic() + self.GRACE
        try:
            with self.changed:
                self.signal = exc
                # a host blocked in a step that says what stands (``Node.standing``) is not waited for
                while self.running and time.monotonic() < deadline and \
                        not all(self._standing(name) for name in self.running):
                    self.changed.wait(0.1)
        except (KeyboardInterrupt, Terminated):
            pass                          # a second signal: report what is known now
        results: List[HostResult[T]] = []
        with self.changed:
            for spec in specs:
                name = host_name(spec)
                if name in self.results:
                    results.append(self.results[name])
                elif name in self.running and self._standing(name):
                    results.append(HostResult(name, "failed", None, "interrupted (%s): %s" % (
                        signal, self._standing(name)), time.monotonic() - self.running[name],
                        int(ExitCode.INTERRUPTED)))
                    self.abandon(spec)        # its blocked request ends; it acts no further
                elif name in self.running:
                    results.append(HostResult(name, "failed", None, "interrupted (%s) while it ran; it did not say "
                                              "where it left things: check with %s" % (signal, self.status_hint(name)),
                                              time.monotonic() - self.running[name], int(ExitCode.INTERRUPTED)))
                else:
                    results.append(HostResult(name, "skipped", None, "not run: interrupted (%s)" % signal))
        return results


def _interruptions_reported(on_host: Callable[["HostSpec"], T]) -> Callable[["HostSpec"], T]:
    """A host's run whose raw Ctrl-C/SIGTERM (outside a wait) ends as that host's failure (exit 130)."""
    def run(spec: "HostSpec") -> T:
        try:
            return on_host(spec)
        except BaseException as exc:  # noqa: BLE001 - only the two interruptions are turned into a failure
            signal = interrupted_by(exc)
            if not signal or isinstance(exc, CpctlError):
                raise
            raise CpctlError("interrupted (%s)" % signal, ExitCode.INTERRUPTED) from None
    return run


def census(ctx: click.Context) -> List["HostResult[Dict[str, object]]"]:
    """What every inventory master runs (no probes), for the fleet safety rules."""
    from cpctl.fleet.targets import all_inventory_specs
    from cpctl.ops.fleetsafety import census_of
    remote = state(ctx).remote
    assert remote is not None
    return run_on_hosts(ctx, all_inventory_specs(remote), lambda node: dict(census_of(node)), False, probe="none")


def cluster_census(ctx: click.Context) -> Tuple[List["HostResult"], Set[str], str]:
    """``--census cluster``: each selected master's own census and its API server's view of the
    other control-plane nodes (``fleetsafety.cluster_census_of``), merged for the rules."""
    from cpctl.fleet.targets import select_specs
    from cpctl.ops.fleetsafety import cluster_census_of, cluster_results
    remote = state(ctx).remote
    if remote is None:           # on the master itself (Ansible's connection: local, ansible-pull)
        from cpctl.fleet.runner import HostResult
        try:
            node = local_node(ctx, probe="none")
            own: HostResult[Dict[str, object]] = HostResult(node.node_name, "ok", dict(cluster_census_of(node)))
        except CpctlError as exc:
            own = HostResult("this node", "failed", error=exc.message, code=int(exc.code))
        return cluster_results([own])
    return cluster_results(run_on_hosts(ctx, select_specs(remote), lambda node: dict(cluster_census_of(node)), False,
                                        probe="none"))


CLUSTER_LOCK_WAIT = 3600.0     # seconds: another run's guarded change is bounded by its own --timeout waits


def hold_cluster_lock(ctx: click.Context, cluster: str) -> bool:
    """Take this machine's lock for ``cluster`` (kube-system's uid) until the run ends; waits for
    another cpctl run holding it. False when the cluster has no name to lock by."""
    import fcntl
    import hashlib
    import os
    if not cluster:
        return False
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "cpctl")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, "cluster-%s.lock" % hashlib.sha256(cluster.encode()).hexdigest()[:16])
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    ctx.call_on_close(lambda: os.close(fd))
    deadline = time.monotonic() + CLUSTER_LOCK_WAIT
    waiting = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise CpctlError("another cpctl run on this machine kept changing the same cluster's etcd/API "
                                 "servers for %ds (lock %s)" % (CLUSTER_LOCK_WAIT, path), ExitCode.LOCKED) from None
            if not waiting and state(ctx).output == "text":
                note("waiting for another cpctl run on this machine that changes the same cluster")
            waiting = True
            time.sleep(0.2)


def hold_change_lease(ctx: click.Context, required: bool) -> None:
    """Take the cluster's own lock for guarded changes (``ops.changelease``: a Lease in kube-system)
    through the first selected master's API server (this node's, on the node itself), held until
    the run ends, so that runs from other machines take turns too; waits for another run holding it.
    ``required``: an API that cannot be asked refuses (``--census cluster`` counts through it
    anyway); otherwise (the inventory census, which needs no API: an outage is when it is needed) a
    warning says other machines are not kept out."""
    from cpctl.ops import changelease
    me, waiting = changelease.holder_identity(), changelease.Waiting()
    deadline = time.monotonic() + CLUSTER_LOCK_WAIT
    noted = expired = ""
    while True:
        result = _lease_hosts(ctx, functools.partial(changelease.try_take, me=me, expired_version=expired))[0]
        if result.failed or not isinstance(result.data, changelease.LeaseSeen):
            why = "cannot take the cluster's change lease (kube-system/%s) through %s: %s" % (
                changelease.LEASE_NAME, result.host, result.error or result.status)
            if required:
                from cpctl.ops.fleetsafety import UNASKED_HINT
                raise CpctlError("refused: %s" % why, ExitCode.REFUSED, hint=UNASKED_HINT)
            note("%s; runs from other machines are not kept out" % why)
            return
        seen = result.data
        if seen.taken:
            holder = changelease.Holder(me, functools.partial(_renew_change_lease, ctx, me))
            state(ctx).change_lease = holder
            ctx.call_on_close(functools.partial(_release_change_lease, ctx, holder))
            holder.start()
            return
        expired = waiting.expired_version(seen)       # its holder gone: the next try takes it over
        if time.monotonic() > deadline:
            raise CpctlError("another cpctl run kept the cluster's change lease for %ds: %s (kube-system/%s)"
                             % (CLUSTER_LOCK_WAIT, changelease.describe(seen), changelease.LEASE_NAME),
                             ExitCode.LOCKED)
        if noted != seen.holder and state(ctx).output == "text":
            note("waiting for the cluster's change lease, held by %s" % changelease.describe(seen))
        noted = seen.holder
        time.sleep(1.0)


def _renew_change_lease(ctx: click.Context, me: str) -> "LeaseSeen":
    """Renew the lease once, through the first master whose API server answers (the run may have
    taken the first one's down); a CpctlError saying why when none does."""
    from cpctl.ops import changelease
    results = _lease_hosts(ctx, functools.partial(changelease.renew, me=me), every=True)
    for result in results:
        if not result.failed and isinstance(result.data, changelease.LeaseSeen):
            return result.data
    raise CpctlError("; ".join("%s: %s" % (r.host, r.error or r.status) for r in results) or "no master to ask",
                     ExitCode.API)


def _release_change_lease(ctx: click.Context, holder: "Holder") -> None:
    """Stop renewing, then give the lease back at the end of the run, through the first master whose
    API server answers (the change may just have taken the first one's down: a stacked etcd parked).
    A release that fails is said (the lease then expires by itself), and so is a lease another run
    holds by now."""
    from cpctl.ops import changelease
    holder.stop()
    try:
        results = _lease_hosts(ctx, lambda node: changelease.release(node, holder.me), every=True)
    except (CpctlError, KeyboardInterrupt) as exc:
        note("could not give back the cluster's change lease (kube-system/%s): %s; it expires by itself %ds after "
             "its last renewal" % (changelease.LEASE_NAME, getattr(exc, "message", None) or "interrupted",
                                   changelease.LEASE_SECONDS))
        return
    done = [r for r in results if not r.failed]
    if not done:
        note("could not give back the cluster's change lease (kube-system/%s) through any master (%s); it expires by "
             "itself %ds after its last renewal" % (changelease.LEASE_NAME, "; ".join(
                 "%s: %s" % (r.host, r.error or r.status) for r in results) or "no master to ask",
                 changelease.LEASE_SECONDS))
    elif done[0].data and not holder.lost:
        note("the cluster's change lease (kube-system/%s) was held by %s at the end of this run: this run had lost it"
             % (changelease.LEASE_NAME, done[0].data))


def lease_lost(ctx: click.Context, before: str) -> None:
    """Before the next master of a change: LOCKED when this run no longer surely holds the cluster's
    change lease (``changelease.Holder.check``); nothing without a lease."""
    holder = state(ctx).change_lease
    if holder is not None:
        holder.check(before)


def _lease_hosts(ctx: click.Context, action: Callable[["Node"], T], every: bool = False) -> List["HostResult[T]"]:
    """``action`` on this node (no ``-H``: cpctl runs on the master itself), else on the first selected
    master; ``every``: then on the other selected and inventory masters until one succeeds."""
    from cpctl.fleet.runner import HostResult
    from cpctl.fleet.targets import all_inventory_specs, select_specs
    remote = state(ctx).remote
    if remote is None:
        try:
            node = local_node(ctx, probe="none")
            return [HostResult(node.node_name, "ok", action(node))]
        except CpctlError as exc:
            return [HostResult("this node", "failed", error=exc.message, code=int(exc.code))]
    selected = select_specs(remote)
    specs = selected + [s for s in (all_inventory_specs(remote) if remote.inventory and every else [])
                        if s.name not in {t.name for t in selected}]
    results: List[HostResult[T]] = []
    for spec in specs if every else specs[:1]:
        results += run_on_hosts(ctx, [spec], action, False, probe="none")
        if not results[-1].failed:
            break
    return results


def _connector(options: Optional["SSHOptions"]) -> Callable[["HostSpec"], "Host"]:
    def connect(spec: "HostSpec") -> "Host":
        from cpctl.host.connect import open_host
        return open_host(spec.target, options, become=spec.become, python=spec.python)
    return connect


_PREPARED: List[bool] = []


def prepare_process_for_fanout(ssh_options: Optional["SSHOptions"]) -> None:
    """Process-wide settings a fan-out wants, made once by the entry point before threads start:
    a login name for paramiko's config lookups (every Host/Match block asks for it), and a short
    GIL switch interval (host threads hand small answers around)."""
    if _PREPARED:
        return
    _PREPARED.append(True)
    from cpctl.host.base import FAST_SWITCH, use_handshake_switch
    from cpctl.host.sshconfig import remember_login_name
    remember_login_name()
    sys.setswitchinterval(min(sys.getswitchinterval(), FAST_SWITCH))
    use_handshake_switch()      # SSH handshakes (CPU in many threads) at Python's default interval


def _hosts_text(hosts: List[HostBlock], bodies: List[str], reported: Optional[str] = None) -> str:
    """One block per host (``bodies``: its result as text): its status, its result, and its error
    unless the final line reports it."""
    blocks = []
    for host, body in zip(hosts, bodies):
        status = host["status"]
        if host["error"] and host["host"] == reported:
            status += ", error below"
        elif host["error"]:
            error = host["error"]          # connect errors start with the host name: not twice
            error = error[len(host["host"]) + 2:] if error.startswith(host["host"] + ": ") else error
            body = (body + "\n" if body else "") + "error: %s" % error
        if not body and not host["error"]:
            body = "(nothing to report)"
        blocks.append("== %s: %s ==%s" % (host["host"], status, "\n" + body if body else ""))
    return "\n".join(blocks)

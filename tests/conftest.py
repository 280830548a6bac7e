"""Shared fixtures: a kubeadm-like node in a temp dir, the lab simulator and real OpenSSH servers.

* ``node``: a fresh ``NodeDirs`` (manifests dir with the four kubeadm manifests, no state yet);
* ``mock_node``: a core ``Node`` on a ``MockHost`` over the same kind of dirs, for in-process tests
  with injected failures (no subprocess: milliseconds per test);
* ``lab``/``lab3`` (tests.labfixture) and ``sshd``/``sshd_many``/... (tests.sshfixture);
* ``real_etcd``/``real_etcd_factory`` (tests.realetcd): a real etcd cluster with kubeadm's flags and
  PKI; a test that uses one is marked ``real_etcd`` (and ``lab``), and CI never skips it.

Tiers (markers, see pyproject.toml): ``unit`` (no lab, no sshd, no container: ``pytest -m unit``
is the fast suite), ``lab`` (a lab or a real sshd on 127.0.0.1) and ``end_to_end`` (a whole system:
real systemd in a container, a whole walkthrough). ``unit`` and ``lab`` are set here from the
fixtures a test uses; ``slow`` marks the few unit tests that take seconds (kill-point sweeps) and
leaves them out of the fast tier.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import os
import re
import resource
import shutil
import signal
import tempfile
import time
from typing import Any, Iterator, List

import pytest

from tests.coreutil import NODE, NodeDirs

pytest_plugins = ["tests.labfixture", "tests.sshfixture", "tests.realetcd"]


@pytest.fixture
def node(tmp_path: Any) -> NodeDirs:
    """A fresh node: the four kubeadm manifests in ``tmp_path/manifests``, state in ``tmp_path/state``."""
    return NodeDirs(str(tmp_path))


@pytest.fixture
def mock_node(node: NodeDirs) -> Any:
    """A core ``Node`` on a ``MockHost`` (``.host``) over ``node``'s dirs, no probe."""
    from cpctl.core.node import Node
    from cpctl.host.mock import MockHost
    return Node(MockHost(), node.manifests, node.state, NODE, lock_timeout=0.5)


def _confine_lab_ports_to_this_worker() -> None:
    """Under pytest-xdist, give each worker its own slice of lab ports (``CPCTL_LAB_PORTS``).

    A lab picks its ports before it binds them, and a parked kube-apiserver leaves its port
    unbound for a while: a second worker's lab could take it meanwhile. Disjoint ranges rule
    that out; every lab and sshd a worker starts inherits the variable. A range already given
    (several people on one machine) is the one split, so the slices stay inside it.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return
    first, last = 10000, 31999
    given = os.environ.get("CPCTL_LAB_PORTS", "").split("-")
    if len(given) == 2 and all(end.strip().isdigit() for end in given):
        first, last = int(given[0]), int(given[1])
    index = int(worker[2:])
    span = (last - first + 1) // count
    low = first + index * span
    os.environ["CPCTL_LAB_PORTS"] = "%d-%d" % (low, low + span - 1)


_confine_lab_ports_to_this_worker()


def _cache_bytecode_outside_the_tree() -> None:
    """Let the ``python -m cpctl`` processes the tests start reuse their compiled modules.

    With ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines) every such process compiles every
    module it imports: ~0.3 s of a 0.5 s ``cpctl stop``, paid hundreds of times by the fast tier,
    and paid by no installed copy. The cache goes to a directory of its own under the temp dir
    (``PYTHONPYCACHEPREFIX``), so the checkout stays free of ``__pycache__`` as that setting wants.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "cpctl-tests-pycache-%d" % os.getuid())
    del os.environ["PYTHONDONTWRITEBYTECODE"]


_cache_bytecode_outside_the_tree()

#: In the environment of every process this test run starts (and so of every keeper a cpctl run
#: started): how ``no_keeper_left`` tells this run's keepers from other people's on the machine.
RUN_MARK = "PYTEST_CPCTL_RUN"


def _keep_no_connections_by_default() -> None:
    """A remote run keeps its connections for 60 s by default (a keeper process, docs/keeper.md).
    The suite's hundreds of remote runs must not leave keepers behind, nor share one between
    tests: ``CPCTL_PERSIST=0`` here (and in ``remoteutil.clean_env``); a test of the keeper asks
    for it explicitly, in a ``keeper_dir`` of its own that is stopped afterwards."""
    os.environ["CPCTL_PERSIST"] = "0"
    # this process's own mark (each xdist worker sets its own over the one it inherited): a
    # worker checks only the keepers its own tests started, never another worker's running one
    os.environ[RUN_MARK] = "%d-%d" % (os.getpid(), int(time.time()))


_keep_no_connections_by_default()


def _boot_entries_in_a_scratch_dir() -> None:
    """A commit-confirmed arm on a node without systemd writes an ``@reboot`` entry into the node's
    /etc/cron.d (``ops.confirm.boot_entry_path``); the tests' nodes without a node root of their own
    are this machine: their entries go to a scratch dir (``CPCTL_CONFIRM_BOOT_DIR``), never to this
    machine's /etc/cron.d (``no_boot_entry_on_this_machine`` checks it)."""
    if "CPCTL_CONFIRM_BOOT_DIR" not in os.environ:
        scratch = tempfile.mkdtemp(prefix="cpctl-test-cron.d-")
        os.environ["CPCTL_CONFIRM_BOOT_DIR"] = scratch
        atexit.register(shutil.rmtree, scratch, True)     # made by this process: gone with it


_boot_entries_in_a_scratch_dir()


def _ctrl_c_reaches_the_processes_we_start() -> None:
    """A suite started in the background by a non-interactive shell (``.ci/run &``, ``nohup ... &``)
    inherits SIGINT ignored (POSIX: no job control), every process it starts would inherit that too,
    and Python keeps an inherited SIG_IGN: the tests' Ctrl-C (``os.kill(pid, SIGINT)``) would then
    never reach a cpctl they started, and a dozen interruption tests fail for a reason that is not
    cpctl's. This process takes Python's usual handler back, so what it starts gets SIGINT's default
    (a handler is reset at exec; an ignored signal would stay ignored)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_ctrl_c_reaches_the_processes_we_start()


@pytest.fixture(scope="session", autouse=True)
def no_boot_entry_on_this_machine() -> Iterator[None]:
    """Fails the run if a test wrote a cpctl @reboot entry into this machine's own /etc/cron.d."""
    def ours() -> List[str]:
        try:
            return sorted(n for n in os.listdir("/etc/cron.d") if n.startswith("cpctl-confirm-"))
        except OSError:
            return []
    before = ours()
    yield
    assert ours() == before, "a test wrote a cpctl boot entry into this machine's /etc/cron.d"


def keepers_of_this_run() -> List[int]:
    """Pids of the keeper processes (``python -m cpctl.host.keeperd``) started by this test run."""
    mark = ("%s=%s" % (RUN_MARK, os.environ[RUN_MARK])).encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as handle:
                if b"cpctl.host.keeperd" not in handle.read().split(b"\0"):
                    continue
            with open("/proc/%s/environ" % name, "rb") as handle:
                if mark in handle.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


@pytest.fixture(scope="module", autouse=True)
def no_keeper_left() -> Iterator[None]:
    """After each test module: no keeper started by it is still running (each is stopped by the
    test that asked for it, or ends after its idle time). One left over fails the module (and is
    killed: it is ours)."""
    before = set(keepers_of_this_run())
    yield
    deadline = time.monotonic() + 15.0          # a stopped keeper closes its connections first
    left = [pid for pid in keepers_of_this_run() if pid not in before]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in keepers_of_this_run() if pid not in before]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, "keeper process(es) %s left running by this module" % left

#: The lab's etcd for each test (issue 44/45). ``cpctl lab up`` runs the real etcd binary wherever one
#: is installed; the tests do so where etcd is what they judge - its quorum, members, learners,
#: alarms, certificates, data, snapshots and restores, its leadership, and the README's walkthrough as
#: a user sees it: a test whose node id matches ``REAL_ETCD_WORDS``, or that is marked ``lab_etcd``.
#: Every other lab test runs the lab's imitation (``CPCTL_LAB_ETCD=none``): on CI's 2 cores the real
#: etcd made each lab start 1.5 s slower (a 3-master lab 12 s), idled at 0.02-0.07 of a core per lab
#: and took as much CPU as the labs themselves (benchmarks/RESULTS.md §13); every lab test on it made
#: CI 23 minutes against its 15. ``CPCTL_TEST_LAB_ETCD=real`` runs every lab test on the real etcd;
#: a ``CPCTL_LAB_ETCD`` already set (a DIR, or none) is every test's.
REAL_ETCD_WORDS = re.compile(r"etcd|quorum|census|learner|member|alarm|defrag|snapshot|restore|cert|leader|readme",
                             re.I)


def runs_the_real_etcd(item: Any) -> bool:
    """Whether this test's labs run the real etcd (see ``REAL_ETCD_WORDS``)."""
    return bool(item.get_closest_marker("lab_etcd") or REAL_ETCD_WORDS.search(item.nodeid))


@pytest.fixture(autouse=True)
def lab_etcd_choice(request: Any, monkeypatch: Any) -> None:
    """The real etcd for the labs of a test that judges etcd, the imitation for the others (see
    ``REAL_ETCD_WORDS``): the lab processes a test starts read ``CPCTL_LAB_ETCD`` from its environment."""
    if "CPCTL_LAB_ETCD" in os.environ or os.environ.get("CPCTL_TEST_LAB_ETCD") == "real":
        return
    if not runs_the_real_etcd(request.node):
        monkeypatch.setenv("CPCTL_LAB_ETCD", "none")


#: Fixtures that start a lab, an sshd or sudo users: a test that uses one (directly or through
#: another fixture) is in the ``lab`` tier. So is one that uses a fixture named ``*_lab`` or
#: ``sshd*``, or whose own code or fixtures call ``start_lab(`` (see ``starts_a_lab``).
LAB_FIXTURES = frozenset({"lab", "lab3", "lab_factory", "sshd", "sshd_many", "sshd_factory", "ssh_session",
                          "sudo_users", "keeper_dir", "real_etcd", "real_etcd_factory"})

#: Fixtures that run a real etcd cluster (tests.realetcd): a test that uses one is marked ``real_etcd``.
REAL_ETCD_FIXTURES = frozenset({"real_etcd", "real_etcd_factory"})

#: Fixtures that build and install cpctl (wheels, venvs with pip) as a user would: a test that uses
#: one follows a whole install recipe and is in the ``end_to_end`` tier.
END_TO_END_FIXTURES = frozenset({"wheelhouse"})

_STARTS_A_LAB = re.compile(r"\bstart_lab\(")


def _is_lab_fixture(name: str) -> bool:
    """A fixture that starts a lab or an sshd, by the names the tests give them."""
    return name in LAB_FIXTURES or name.endswith("_lab") or name.startswith("sshd")


@functools.cache
def _calls_start_lab(function: Any) -> bool:
    """True when ``function``'s source starts a lab in-process (``cpctl_lab.control.start_lab``)."""
    try:
        return bool(_STARTS_A_LAB.search(inspect.getsource(function)))
    except (OSError, TypeError):
        return False


def starts_a_lab(item: Any) -> bool:
    """True when the test, or a fixture it uses, starts a lab or an sshd.

    Decided from the fixtures' names and from the source of the test and of its fixtures, so a
    new test lands in the right tier without a marker; a test that starts one another way (a
    ``cpctl lab up`` subprocess) says so with ``@pytest.mark.lab``.
    """
    uses = set(getattr(item, "fixturenames", ()))
    if any(_is_lab_fixture(name) for name in uses) or item.get_closest_marker("lab"):
        return True
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        functions.extend(fixturedef.func for fixturedef in defs)
    return any(function is not None and _calls_start_lab(function) for function in functions)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    """Keep each test's call report on its item (``item.call_report``): a fixture's teardown can then
    tell a passed test from a failed one (tests/realetcd.py keeps a failed test's etcd logs)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.call_report = report


#: ``CPCTL_TEST_CPU_LOG=FILE``: each test's wall time and the CPU it cost, as JSON lines appended to FILE:
#: the worker's own CPU and its waited-for children's (cpctl's CLI, Ansible, kubectl; not a lab: it runs
#: detached, so its CPU and its etcd members' reach no test's count), the setup, call and teardown
#: together. Where CI's minutes go when the cores are the limit, which ``--durations`` (wall time,
#: inflated by the other workers' load) cannot tell.
CPU_LOG_ENV = "CPCTL_TEST_CPU_LOG"


def _cpu_seconds() -> tuple:
    """(this process's CPU, its waited-for children's CPU), user + system, in seconds."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    """With ``CPCTL_TEST_CPU_LOG`` set, one line per test in that file (see ``CPU_LOG_ENV``)."""
    path = os.environ.get(CPU_LOG_ENV)
    if not path:
        yield
        return
    started, (own, children) = time.monotonic(), _cpu_seconds()
    yield
    own_after, children_after = _cpu_seconds()
    line = json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - started, 3),
                       "cpu": round(own_after - own, 3), "children_cpu": round(children_after - children, 3)})
    with open(path, "a") as log:
        log.write(line + "\n")


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    """Mark each test's tier: ``end_to_end`` as declared or by its fixtures, else ``lab`` or ``unit``;
    then order them, the long jobs first (``longest_first``)."""
    for item in items:
        if set(getattr(item, "fixturenames", ())) & REAL_ETCD_FIXTURES:
            item.add_marker(pytest.mark.real_etcd)
        if set(getattr(item, "fixturenames", ())) & END_TO_END_FIXTURES:
            item.add_marker(pytest.mark.end_to_end)
        if item.get_closest_marker("end_to_end"):
            continue
        item.add_marker(pytest.mark.lab if starts_a_lab(item) else pytest.mark.unit)
    items[:] = longest_first(items)


#: A test module that declares a module- or session-scoped fixture of its own (the systemd container
#: booted once, one lab for the examples, the wheelhouse built once): its tests share what it makes.
_OWN_SHARED_FIXTURE = re.compile(r"@pytest\.fixture\(\s*scope=[\"'](?:module|session)[\"']")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def shares_a_fixture(module: str) -> bool:
    """Whether the test module ``module`` (its path from the repository's root, as in a node id)
    declares a module- or session-scoped fixture of its own (``_OWN_SHARED_FIXTURE``)."""
    try:
        with open(os.path.join(_REPO, module), encoding="utf-8") as handle:
            return bool(_OWN_SHARED_FIXTURE.search(handle.read()))
    except OSError:
        return False


def job_of(nodeid: str) -> str:
    """The job a test is handed out in: its whole module where the module shares a fixture of its own
    (``shares_a_fixture``: one worker makes it once), else the test alone."""
    module = nodeid.split("::", 1)[0]
    return module if shares_a_fixture(module) else nodeid


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """``--dist loadgroup``: the tests handed out one job (``job_of``) at a time, in collection order
    (``longest_first``: the long jobs first), as workers free up. pytest-xdist's own loadgroup groups
    by an ``@group`` suffix it writes into each node id, which pytest 9.2 no longer reads (node ids are
    derived): with the locked pytest 9.2.0 and pytest-xdist 3.8.0 its groups were never kept (the
    systemd container booted on three workers). Its scope scheduler also reorders jobs by test count
    unless told not to; here the order is ours."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneJobAtATime(LoadScopeScheduling):
        def __init__(self, config: Any, log: Any = None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return job_of(nodeid)

    return OneJobAtATime(config, log)


#: A test's rough cost by its tier, in seconds (CI's --durations: a whole system ~30-100 s, a lab or a
#: real etcd ~5-30 s, a unit test milliseconds). Only the order of the tests depends on it.
TIER_COST = (("end_to_end", 60.0), ("real_etcd", 12.0), ("lab", 8.0))
#: A job of at least this many seconds (measured, else estimated) goes first (``longest_first``).
LONG_JOB = 15.0


def estimated_cost(item: Any) -> float:
    """The rough cost of one test: its most expensive tier's (``TIER_COST``), else a unit test's."""
    for marker, cost in TIER_COST:
        if item.get_closest_marker(marker):
            return cost
    return 0.05


def longest_first(items: list) -> list:
    """The long jobs first, the longest of them first; then every other test in collection order. A
    job's length is what its tests took in a measured CI run (``MEASURED``, tests/durations.json), else
    its tier's estimate (``estimated_cost``); a module that shares a fixture (``job_of``) is one job.
    pytest-xdist (``--dist loadgroup``) hands out jobs in this order, one at a time as workers free up:
    75 tests of 15 s and more make half of the suite's summed time, and started first they never run
    alone at the end (list scheduling), while the rest stays mixed - the CPU work of the unit and
    real-etcd tests beside the lab tests that mostly wait on the simulated kubelet. Sorting every test
    by its tier ran the lab tests together after the CPU-heavy ones, the cores half idle in between
    (run q7, load 3.4); the tier's estimate alone put 80 s lab tests at the end (q8); handing out whole
    files (``--dist loadfile``) left one worker with a file of four minutes at the end."""
    jobs: dict = {}
    for item in items:
        jobs.setdefault(job_of(item.nodeid), []).append(item)

    def order(tests: list) -> float:
        cost = sum(MEASURED.get(t.nodeid, estimated_cost(t)) for t in tests)
        return -cost if cost >= LONG_JOB else 0.0

    ordered = sorted(jobs.values(), key=order)
    return [item for tests in ordered for item in tests]


def _measured() -> dict:
    """tests/durations.json: {node id: seconds} of the tests that took 15 s and more in a quiet CI run
    (``CPCTL_TEST_CPU_LOG``'s wall times); refreshed by hand when the long tests change - a test it does
    not name falls back to its tier's estimate, so a stale file only orders less well."""
    try:
        with open(os.path.join(_REPO, "tests", "durations.json")) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float))}


#: Seconds the long tests took in a measured CI run (``_measured``).
MEASURED = _measured()

"""The shapes of what crosses the agent boundary: each op's arguments and answers, the journal entry
and the revert plan, as TypedDicts (``host.base`` and the whole product use them from here).

For mypy alone: a master runs the agent without them (``host.agentcut``); the agent checks what it
reads from disk against them (``revertplan.plan_problem``), the operator's side each reply
(``host.replies``). Standard library only, Python 3.8 syntax."""

from typing import Dict, List, Mapping, Optional, Protocol, TypedDict


class TlsOptions(TypedDict, total=False):
    """How ``http`` verifies and authenticates (a kubeconfig's cluster and user, or ``insecure``
    for a node-local health endpoint): inline PEM data or files on the node."""

    insecure: bool
    ca_data: bytes
    ca_file: str
    cert_data: bytes
    key_data: bytes
    cert_file: str
    key_file: str


class HistoryBounds(TypedDict):
    """How the history file is kept (``core.state``'s bounds, sent with each transaction)."""

    rotate: int
    keep: int
    tail: int


class PeerCert(TypedDict):
    """What ``peer_cert`` returns across the agent boundary: the served certificate, DER bytes, and
    the node's clock (Unix time) at the handshake, to compare with the file's mtime on that clock."""

    der: bytes
    time: float


class Stat(TypedDict):
    """What ``lstat`` returns across the agent boundary (checked by ``replies``): the entry itself,
    a symlink not followed. ``kind`` is one of ``replies.STAT_KINDS``."""

    kind: str
    mode: int
    uid: int
    gid: int
    size: int
    mtime: float
    dev: int


class _NamedStat(Stat):
    name: str


class DirEntry(_NamedStat, total=False):
    """One entry of ``scan_dir``: its lstat and name; for a symlink what it points to; for a
    regular file (or a link to one) of at most the limit its bytes, else why they are missing."""

    data: bytes
    error: str
    target: str
    target_kind: Optional[str]
    target_size: int


class PodIdentity(TypedDict):
    """What tells one instance of a static pod from the next (``agent.crictlread.is_new_since`` compares
    two): ``crictl_pod``'s answer has these keys, and so does ``PodState.identity()``; a revert
    plan carries the one seen at arm time."""

    present: bool
    uid: str
    containers: List[str]
    started: Optional[float]


class NodeApiAccess(TypedDict):
    """How a node-side revert reaches the API server with the node's kubeconfig and no copy of a
    credential (``probes.kubeapi.node_access`` builds it, ``agent.putback._api_from`` uses it): the server,
    the TLS options that name files (or ``insecure``), and for each credential embedded in the file
    the byte range of its base64 text, valid only while the file's sha256 is ``sha256``."""

    server: str
    kubeconfig: str
    sha256: str
    tls: TlsOptions
    slices: Dict[str, List[int]]


class JournalStep(TypedDict, total=False):
    """One step of a journal entry on the wire (``core.journal.Step.to_wire``: the fields that are
    set), as ``agent.txn.StepRunner`` runs it: ``kind`` and ``path`` always, ``mode`` always."""

    kind: str
    path: str
    src: str
    checksum: str
    staged: str
    before: str
    kept: str
    mode: int
    uid: int
    gid: int


class JournalEntry(TypedDict):
    """A journal entry (``core.journal.entry_of``): the one format cpctl's journal writes and a
    revert plan carries for the node to run (``agent.txn.Transaction``)."""

    version: int
    op: str
    action: str
    component: str
    file: str
    checksum: Optional[str]
    commit: int
    steps: List[JournalStep]
    record: Dict[str, object]
    started: str
    pid: int
    companions: List[str]


class PlanVerify(TypedDict):
    """How the node-side revert checks the reverted version (``agent.crictlread._plan_verify``): the health
    endpoint (""), crictl ("": not used), the mirror pod, the pod seen at arm time, the seconds."""

    url: str
    crictl: str
    pod: str
    namespace: str
    before: Optional[PodIdentity]
    timeout: int
    settle: int


class PlanVerdict(TypedDict):
    """The history record ``reverted`` the node-side revert writes (it adds the time and outcome)."""

    user: str
    host: str
    node: str
    component: str
    file: str
    checksum: str
    revision: int
    reason: str
    armed_op: str
    origin: str


class PlanPatch(TypedDict):
    """A ``--keep-in patches`` file the revert puts back: the journaled change that does it, its
    history record, the keep-in record (``STATE/keepin/*.patch.json``), the sha256 of cpctl's bytes
    and of the bytes before (None: there was no file)."""

    entry: JournalEntry
    history: Dict[str, object]
    record: str
    after: str
    was: Optional[str]


class RevertPlan(TypedDict):
    """The node-side revert of a remote ``--confirm-within`` (``ops.confirm._plan`` builds it, the
    agent's ``agent.noderevert.revert_plan_main`` runs it after ``agent.revertplan.plan_problem`` checked every field
    of this shape): the arm (``op``, the armed bytes' sha256, its record), the state dir's lock and
    journal, the journaled revert and its history record, the ``reverted`` record, the check, and the
    ``--keep-in`` parts (ClusterConfiguration records, the keys of theirs whose values are no secret - cpctl's
    redaction rule, for a refused put-back's history record -, its text patterns of a secret (``secret_patterns``,
    for any text from the cluster the agent records), how to reach the API, the check's hint; patch
    files)."""

    version: int
    op: str
    armed: str
    arm: str
    lock: str
    journal: str
    entry: JournalEntry
    record: Dict[str, object]
    verdict: PlanVerdict
    verify: PlanVerify
    keepin: List[str]
    shown_keys: List[str]
    secret_patterns: List[str]
    api: Optional[NodeApiAccess]
    check_hint: str
    patches: List[PlanPatch]


class HttpReply(TypedDict):
    """What ``http`` returns across the agent boundary: the status, headers and (bounded) body."""

    status: int
    headers: Dict[str, str]
    body: bytes


class HttpRequest(TypedDict, total=False):
    """One request of ``http_many`` (``http``'s arguments; its own ``timeout`` optional, within the
    call's): for ``http_ahead``, exactly the arguments ``http`` will be called with."""

    method: str
    url: str
    headers: Optional[Mapping[str, str]]
    body: Optional[bytes]
    tls: Optional[TlsOptions]
    limit: int
    timeout: float


class HttpManyAnswer(TypedDict, total=False):
    """One answer of ``http_many``: ``reply`` (``http``'s answer), or ``errno`` and ``error`` (text)."""

    reply: HttpReply
    errno: int
    error: str


class SnapshotInfo(TypedDict):
    """A saved etcd snapshot as the node checked it: bytes in the file, the sha256 etcd appended
    (hex), and what ``etcdutl snapshot status`` reports as revision, totalKey and totalSize."""

    size: int
    sha256: str
    revision: int
    keys: int
    total_size: int


class HostInfo(TypedDict):
    """Who and where the process acting on the node is (``Host.info``)."""

    hostname: str
    user: str
    sudo_user: Optional[str]
    pid: int
    euid: int
    python: str


class ClockReading(TypedDict):
    """The node's clocks at one instant (``Host.clock``): wall time, CLOCK_BOOTTIME, boot id."""

    time: float
    boottime: float
    boot_id: str


class TransactionRequest(TypedDict):
    """One journaled change for ``Host.transaction`` (``agent.txn.Transaction``): ``do`` apply or
    recover; the journal ``entry`` (``core.journal.entry_of``); for apply the new bytes of each
    write step by index (None for other steps); the history record without its time; where the
    state dir is, how much of a file a step reads back (``limit``), the history's bounds."""

    do: str
    state_dir: str
    entry: JournalEntry
    data: List[Optional[bytes]]
    record: Dict[str, object]
    limit: int
    history: HistoryBounds


class TransactionOutcome(TypedDict, total=False):
    """What ``Host.transaction`` did (checked by ``replies``): ``state`` is completed, aborted,
    rolled_back, nowhere or unrecordable - or, before anything changed, bad_key, no_key, conflict or
    unstaged; ``failed`` and ``not_undone`` name steps as text ("<what the step does>: <why>"),
    ``kept`` says the journal stays, ``why`` and ``path`` say what stopped it, ``errno`` its number."""

    state: str
    failed: List[str]
    not_undone: List[str]
    kept: bool
    why: str
    path: str
    errno: Optional[int]


class _RunAnswer(TypedDict):
    rc: int
    stdout: bytes
    stderr: bytes


class RunAnswer(_RunAnswer, total=False):
    """What ``run`` returns across the agent boundary: the exit code (127: not found, 124: timed out)
    and the output; with a ``limit``, ``cut``: how many bytes of the output were dropped."""

    cut: int


class Request(TypedDict, total=False):
    """One line to the agent: the ``op`` (a name of ``rpc.OPS``), its ``args`` (bytes as ``{"b64"}``,
    ``rpc.encode``) and, with an op the agent may lack, ``load``: the compressed modules that define it."""

    op: str
    args: Dict[str, object]
    load: object


class Reply(TypedDict, total=False):
    """One line from the agent (``rpc.handle``; the operator's side checks each, ``host.replies``):
    ``ok`` and the op's ``result``, or what failed - ``kind`` "lock" (``holder``), "os" (``errno``,
    ``strerror``, ``filename``) or "error" (``message``)."""

    ok: bool
    result: object
    kind: str
    holder: str
    errno: Optional[int]
    strerror: str
    filename: Optional[str]
    message: str


class ResetAnswer(TypedDict):
    """What ``reset`` returns: the agent's pid and the sha256 of each program it loaded."""

    pid: int
    loaded: List[str]


class NodeFs(Protocol):
    """The node's file primitives a journaled change and the history use: ``host.base.Host`` (locally, or
    each call over SSH), or on the node the agent's own (``journalseal.NodeFiles``)."""

    def lstat(self, path: str) -> Optional[Stat]: ...

    def listdir(self, path: str) -> List[str]: ...

    def read_file(self, path: str, limit: int, follow: bool = False) -> bytes: ...

    def read_tail(self, path: str, limit: int) -> bytes: ...

    def compress(self, src: str, dst: str) -> None: ...

    def write_atomic(self, path: str, data: bytes, mode: int = 0o600, uid: Optional[int] = None,
                     gid: Optional[int] = None, expect: Optional[str] = None) -> None: ...

    def move(self, src: str, dst: str) -> str: ...

    def unlink(self, path: str, missing_ok: bool = True) -> bool: ...

    def chmod(self, path: str, mode: int) -> None: ...

    def append(self, path: str, data: bytes) -> None: ...

    def info(self) -> HostInfo: ...


class CrictlPod(TypedDict):
    """The static pod as the runtime sees it (``crictlread.crictl_pod``): its newest ready sandbox and
    the containers running in it. Its ``PodIdentity`` keys tell one instance from the next."""

    present: bool
    ready: bool
    phase: str
    uid: str
    containers: List[str]
    started: Optional[float]
    created: Optional[float]
    restarts: Optional[int]

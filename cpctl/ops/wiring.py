"""The one way a ``Node`` is opened: from the settings, with its waiter and the features that
follow its changes attached.

The core calls its change listeners after every recorded change and knows nothing about who they
are; here the drift baseline subscribes, so that a stop or start cpctl made is not drift. The
waiter is the one ``--probe`` names (``cpctl.probes.registry``), with the canary gate
(``ops/canary.py``) added when the run asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Optional

from cpctl.core import identity
from cpctl.core.node import Node
from cpctl.core.settings import Settings
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host
from cpctl.probes import registry
from cpctl.probes.base import NoWait, Waiter

if TYPE_CHECKING:
    from cpctl.core.journal import Change  # the journal code loads with a node's first change
    from cpctl.probes.gates import Gate


def open_node(settings: Settings, host: Host, probe: Optional[str] = None,
              log: Optional[Callable[[str], None]] = None,
              progress: Optional[Callable[[str], None]] = None) -> Node:
    """The node on ``host`` as every command uses it: waiter configured (``probe`` overrides
    ``settings.probe``), listeners attached. An unconfirmed change past its deadline is NOT
    reverted here: reverting is the node-side timer's job, or ``revert-unconfirmed``'s (docs/confirm.md).
    The node name and the manifests dir follow the kubelet's own configuration unless given."""
    if settings.manifests_dir and settings.node_name:       # nothing waits for the kubelet's files
        node = Node(host, settings.manifests_dir, settings.state_dir, settings.node_name,
                    lock_timeout=settings.lock_timeout, log=log, kubeconfig=settings.kubeconfig)
        node.defer_identity(lambda: identity.discover(host, settings.node_name, settings.manifests_dir,
                                                      settings.kubelet_dir),
                            identity.identity_reads(settings.kubelet_dir))
    else:
        with host.prefetched(identity.identity_reads(settings.kubelet_dir)):
            found = identity.discover(host, settings.node_name, settings.manifests_dir, settings.kubelet_dir)
        node = Node(host, found.manifests_dir.value, settings.state_dir, found.node_name.value,
                    lock_timeout=settings.lock_timeout, log=log, kubeconfig=settings.kubeconfig, identity=found)
    node.crictl = settings.crictl
    node.invocation = settings.invocation
    node.node_root = settings.node_root
    node.waiter = make_waiter(probe or settings.probe, host=host, kubeconfig=settings.kubeconfig,
                              crictl=settings.crictl, progress=progress)
    from cpctl.probes.waiter import VerifyingWaiter
    if isinstance(node.waiter, VerifyingWaiter):         # --probe none verifies nothing, no gate either
        node.waiter.add_gate_later(lambda: _etcd_identity_gate(node))   # etcd comes back as the same member
        if settings.canary:
            from cpctl.ops.canary import CanaryGate
            node.waiter.add_gate(CanaryGate())
    node.listeners.append(baseline_listener(node))
    node.recovery_hooks.append(lambda: settle_kept(node))
    return node


def _etcd_identity_gate(node: Node) -> "Gate":
    """The gate that holds an etcd change to its member's identity (``ops.etcdidentity``, loaded
    with a wait's first gate)."""
    from cpctl.ops.etcdidentity import EtcdIdentityGate
    return EtcdIdentityGate(node)


def make_waiter(kind: str, **options: Any) -> Waiter:
    """The waiter for ``--probe kind``: ``none`` trusts the file move (``NoWait``); ``auto`` and
    each registered probe's name poll the registry's probes (``VerifyingWaiter``, imported only
    then); anything else is a usage error."""
    if kind == "none":
        return NoWait()
    if kind != "auto" and kind not in registry.PROBES:
        choices = ("auto",) + tuple(registry.PROBES) + ("none",)
        raise CpctlError("unknown probe %r (one of %s)" % (kind, ", ".join(choices)), ExitCode.USAGE)
    from cpctl.probes.waiter import VerifyingWaiter
    return VerifyingWaiter(mode=kind, **options)


def settle_kept(node: Node) -> List[str]:
    """A ``--keep-in kubeadm-config`` change whose manifest change did not stay (killed before its
    commit, put back): its ClusterConfiguration goes back too (``core.keptin``, imported only then)."""
    from cpctl.core import keptin
    if node.host.lstat(keptin.directory(node)) is None:
        return []
    return keptin.settle(node)


def baseline_listener(node: Node) -> Callable[[Change, bool], None]:
    """Keep the drift baseline current after each change cpctl made (imported lazily: only
    changes pay for difflib)."""
    def note(change: Change, recovered: bool) -> None:
        from cpctl.ops import drift
        drift.note_change(node, change.action, change.file, change.checksum)
    return note

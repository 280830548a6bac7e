"""NodeRestriction, the part a kubelet meets when it writes pods (plugin/pkg/admission/noderestriction),
as measured on a real kube-apiserver (real-node-facts.md, "The real API server, measured").

A node identity (user ``system:node:<name>`` in group ``system:nodes``) may create only **mirror
pods** of its own node: the ``kubernetes.io/config.mirror`` annotation, ``spec.nodeName`` = itself,
exactly one ownerReference to its own Node with that Node's real UID and ``controller: true`` (and no
``blockOwnerDeletion: true``), and no reference to Secrets, ConfigMaps, a ServiceAccount or PVCs. It
may create its own Node object only, and delete only pods bound to itself. Every refusal is a 403
Forbidden whose message is the real one (``pods "NAME" is forbidden: ...``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .store import ApiError, Obj

NODES_GROUP = "system:nodes"
NODE_PREFIX = "system:node:"
MIRROR = "kubernetes.io/config.mirror"


def node_of(user: Any) -> Optional[str]:
    """The node a user is (``system:node:NAME`` in ``system:nodes``), None for anyone else."""
    name = str(getattr(user, "name", "") or "")
    groups = tuple(getattr(user, "groups", ()) or ())
    if name.startswith(NODE_PREFIX) and NODES_GROUP in groups:
        return name[len(NODE_PREFIX):]
    return None


def forbidden(plural: str, name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'{plural} "{name}" is forbidden: {why}', {"name": name, "kind": plural})


def admit_create(user: Any, plural: str, obj: Obj, get: Callable[[str, str, str], Optional[Obj]]) -> None:
    """Refuse what NodeRestriction refuses a node creating ``obj`` (``get(resource, ns, name)`` reads
    the store: the Node's UID)."""
    node = node_of(user)
    if node is None:
        return
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if plural == "nodes":
        if name != node:
            raise forbidden(plural, name, f'node "{node}" is not allowed to modify node "{name}"')
        return
    if plural != "pods":
        return
    if MIRROR not in (meta.get("annotations") or {}):
        raise forbidden(plural, name, f'pod does not have "{MIRROR}" annotation, node "{node}" can only create '
                                      "mirror pods")
    spec = obj.get("spec") or {}
    if spec.get("nodeName") != node:
        raise forbidden(plural, name, f'node "{node}" can only create pods with spec.nodeName set to itself')
    _owner_is_the_node(plural, name, node, meta.get("ownerReferences") or [], get)
    for kind, found in _references(spec):
        if found:
            raise forbidden(plural, name, f"a mirror pod may not reference {kind}")


def _owner_is_the_node(plural: str, name: str, node: str, owners: list[Any],
                       get: Callable[[str, str, str], Optional[Obj]]) -> None:
    ref = owners[0] if len(owners) == 1 and isinstance(owners[0], dict) else None
    if (ref is None or ref.get("apiVersion") != "v1" or ref.get("kind") != "Node" or ref.get("name") != node
            or ref.get("controller") is not True or ref.get("blockOwnerDeletion") is True):
        raise forbidden(plural, name, f'node "{node}" can only create pods with an owner reference set to itself')
    stored = get("nodes", "", node)
    uid = ((stored or {}).get("metadata") or {}).get("uid")
    if ref.get("uid") != uid:
        raise forbidden(plural, name, f"node {node} UID mismatch: expected {uid} got {ref.get('uid')}")


def _references(spec: Obj) -> list[tuple[str, bool]]:
    """(what, referenced) for the API objects a mirror pod may not reference."""
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
    containers = [c for key in ("containers", "initContainers", "ephemeralContainers")
                  for c in spec.get(key) or [] if isinstance(c, dict)]
    env = [e for c in containers for e in (c.get("env") or []) if isinstance(e, dict)]
    env_from = [e for c in containers for e in (c.get("envFrom") or []) if isinstance(e, dict)]
    projected = [s for v in volumes for s in ((v.get("projected") or {}).get("sources") or []) if isinstance(s, dict)]
    secrets = (any("secret" in v for v in volumes) or any("secret" in s for s in projected)
               or any("secretRef" in e for e in env_from)
               or any("secretKeyRef" in (e.get("valueFrom") or {}) for e in env)
               or bool(spec.get("imagePullSecrets")))
    configmaps = (any("configMap" in v for v in volumes) or any("configMap" in s for s in projected)
                  or any("configMapRef" in e for e in env_from)
                  or any("configMapKeyRef" in (e.get("valueFrom") or {}) for e in env))
    return [("secrets", secrets), ("configmaps", configmaps),
            ("serviceaccounts", bool(spec.get("serviceAccountName") or spec.get("serviceAccount"))),
            ("persistentvolumeclaims", any("persistentVolumeClaim" in v for v in volumes))]


def admit_delete(user: Any, plural: str, name: str, old: Obj) -> None:
    """A node deletes only pods bound to itself."""
    node = node_of(user)
    if node is None or plural != "pods":
        return
    if (old.get("spec") or {}).get("nodeName") != node:
        raise forbidden(plural, name, f'node "{node}" can only delete pods with spec.nodeName set to itself')

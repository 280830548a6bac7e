"""The field names of a v1 Pod in the release the node runs: a typo in a manifest cpctl writes or
applies (``volumeMount:``, ``resourcez:``), or a field the node's release does not have yet, is a
doubt with the nearest known name.

The kubelet's file source decodes a static pod leniently: an unknown field is dropped without a
word (``kubectl apply --validate=strict`` would warn), so a mount spelled ``volumeMount`` is simply
not there and the component crash-loops on a missing file; and a field newer than the kubelet's
release (``restartPolicyRules`` on a 1.30 node) is dropped the same way. The names come from
upstream's OpenAPI schema of each release (:mod:`cpctl.core.podschema`, generated at build time by
``tools/gen_podschema.py`` from the ``kubernetes-validate`` package; nothing of it runs on a master).

The release is the node's control plane's: the image tag of its kube-apiserver manifest (else of
another kube-* component's) - kubeadm writes every manifest with the ClusterConfiguration's
``kubernetesVersion``, and the kubelet is never newer than the API server (the version skew policy).
A release newer than the newest table is checked against the newest one, one older than the oldest
against the oldest, and an unknown one against the newest (the most lenient): each of these is
said in a warning (:func:`release_note`).

A finding is a *doubt* (``checks.sanity_doubts``), refused unless ``--force``, as flag names are.
Operator side only: the agent on a master never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from cpctl import catalogue
from cpctl.core import podschema

#: The components whose image tag is the Kubernetes release (etcd's is etcd's own), in the order
#: they are asked.
RELEASE_FROM = (catalogue.KUBE_APISERVER, catalogue.KUBE_CONTROLLER_MANAGER, catalogue.KUBE_SCHEDULER)


@dataclass(frozen=True)
class Release:
    """The table a pod is checked against: ``minor`` (1.MINOR) of :data:`podschema.MINORS`, and
    ``note``: why it is not the node's own release ("" when it is)."""

    minor: int
    note: str = ""


def table_for(version: Optional[Tuple[int, int]], source: str = "") -> Release:
    """The table for Kubernetes ``version`` (major, minor), found in ``source`` (an image, for the
    note): its own, else the nearest older one (the newest for an unknown release), said so."""
    newest, oldest = podschema.MINORS[-1], podschema.MINORS[0]
    if version is None:
        return Release(newest, "the node's Kubernetes release is unknown (no kube-apiserver image tag): pod fields "
                               "checked against 1.%d, the newest cpctl knows" % newest)
    major, minor = version
    where = " (%s)" % source if source else ""
    if major != 1 or minor > newest:
        return Release(newest, "the node runs Kubernetes %d.%d%s, newer than cpctl's pod field tables: checked "
                               "against 1.%d, the nearest older one" % (major, minor, where, newest))
    if minor < oldest:
        return Release(oldest, "the node runs Kubernetes 1.%d%s, older than cpctl's pod field tables: checked "
                               "against 1.%d, the oldest one" % (minor, where, oldest))
    known = max(m for m in podschema.MINORS if m <= minor)
    if known != minor:
        return Release(known, "no pod field table for Kubernetes 1.%d%s: checked against 1.%d, the nearest older "
                              "one" % (minor, where, known))
    return Release(minor)


def node_release(pods: Iterable[Optional[Mapping[str, object]]]) -> Release:
    """The table for the release ``pods`` (the manifests on the node) run: the image tag of the
    first kube-apiserver, kube-controller-manager or kube-scheduler among them (:data:`RELEASE_FROM`)."""
    images = {}
    for pod in pods:
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if name in RELEASE_FROM and name not in images:
            image = _image_of(pod or {}, str(name))
            if image and catalogue.image_release(image) is not None:
                images[str(name)] = image
    for name in RELEASE_FROM:
        if name in images:
            return table_for(catalogue.image_release(images[name]), images[name])
    return table_for(None)


def _image_of(pod: Mapping[str, object], name: str) -> str:
    """The image of the container named like the pod (else the first one)."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    found = [c for c in containers if isinstance(c, Mapping)] if isinstance(containers, list) else []
    chosen = next((c for c in found if c.get("name") == name), found[0] if found else {})
    return str(chosen.get("image") or "")


def _newest() -> Release:
    return Release(podschema.MINORS[-1])


def unknown_fields(pod: Mapping[str, object], release: Optional[Release] = None
                   ) -> List[Tuple[str, str, List[str], Optional[Tuple[int, int]]]]:
    """(where, the unknown key, the nearest names ``release`` knows, the (first, last) minor that has
    the field - None when no release has it) for every key of ``pod`` that its type does not have in
    ``release`` (default: the newest); ``where`` is the path of the object that holds it
    (``spec.containers[0]``)."""
    return list(_walk(pod, "Pod", "", (release or _newest()).minor))


def doubts(pod: Mapping[str, object], release: Optional[Release] = None) -> List[str]:
    """One sentence per unknown field, with the nearest known name: ``spec.containers[0]: unknown
    field volumeMount (did you mean volumeMounts?): the kubelet drops it without a word``; a field of
    other releases says which (``... field restartPolicyRules is not in Kubernetes 1.30 (1.34 and
    later) ...``)."""
    chosen = release or _newest()
    found = []
    for where, key, close, span in unknown_fields(pod, chosen):
        holder = where or "the pod"
        if span is not None:
            first, last = span
            when = "1.%d and later" % first if last == podschema.MINORS[-1] else \
                "1.%d to 1.%d" % span if first != last else "1.%d only" % first
            found.append("%s: field %s is not in Kubernetes 1.%d (%s): the kubelet drops it without a word"
                         % (holder, key, chosen.minor, when))
        else:
            found.append("%s: unknown field %s%s: the kubelet drops it without a word" % (
                holder, key, " (did you mean %s?)" % close[0] if close else ""))
    return found


def known_only(pod: Mapping[str, object], release: Release) -> Mapping[str, object]:
    """``pod`` as the kubelet of ``release`` decodes it, as far as field names go: every field its
    type does not have in that release (a typo, a newer field) left out, the rest as it is; ``pod``
    itself when it has none (no copy)."""
    if not unknown_fields(pod, release):
        return pod
    kept = _known(pod, "Pod", release.minor)
    return kept if isinstance(kept, Mapping) else pod


def _known(value: object, type_name: str, minor: int) -> object:
    if isinstance(value, list):
        return [_known(item, type_name, minor) for item in value]
    if not isinstance(value, Mapping):
        return value
    fields = podschema.TYPES[type_name]
    return {key: _known(item, fields[str(key)], minor) if fields[str(key)] else item
            for key, item in value.items() if _has(type_name, str(key), minor)}


def _has(type_name: str, field: str, minor: int) -> bool:
    span = podschema.SPANS.get("%s.%s" % (type_name, field))
    return field in podschema.TYPES.get(type_name, {}) and (span is None or span[0] <= minor <= span[1])


def _walk(value: object, type_name: str, where: str, minor: int
          ) -> Iterator[Tuple[str, str, List[str], Optional[Tuple[int, int]]]]:
    if isinstance(value, list):                     # a list of the type's objects
        for index, item in enumerate(value):
            yield from _walk(item, type_name, "%s[%d]" % (where, index), minor)
        return
    fields = podschema.TYPES[type_name]
    if not isinstance(value, Mapping):
        return
    for key, item in value.items():
        key_text = str(key)
        if not _has(type_name, key_text, minor):
            known = [name for name in fields if _has(type_name, name, minor)]
            yield where, key_text, _close(key_text, known), podschema.SPANS.get("%s.%s" % (type_name, key_text))
            continue
        inner = fields[key_text]
        if inner:
            yield from _walk(item, inner, "%s.%s" % (where, key_text) if where else key_text, minor)


def _close(key: str, known: Sequence[str]) -> List[str]:
    """The known names ``key`` is probably a typo of: difflib's, and a case-insensitive match first
    (``volumemounts``)."""
    import difflib
    same = [name for name in known if name.lower() == key.lower()]
    return same + [name for name in difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6) if name not in same]

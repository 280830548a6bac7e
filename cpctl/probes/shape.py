"""Typed reads from decoded JSON/YAML documents that cpctl did not write: API answers, crictl output,
kubeconfigs.

Such a document can hold anything: a list where an object belongs, a number where a string
belongs, ``null``. Reading it with ``dict.get`` chains turns that into an ``AttributeError`` deep
in a probe (exit 70), or worse into a wrong conclusion. These readers return the empty value for
an absent (or ``null``) field, as Kubernetes omits empty fields, and raise ``ShapeError`` naming
the field path for a field of another type. The message never contains the value: in a kubeconfig
it may be a token or a password.
"""

from __future__ import annotations

from typing import Dict, List, Mapping


class ShapeError(ValueError):
    """A field is not of the type its reader expects; the message names the field, not its value."""


def kind_of(value: object, yaml: bool = False) -> str:
    """What a decoded value is, for messages: "an object", "a list", "a string", ...

    ``yaml=True`` uses YAML's words, as a manifest's author knows them: "a mapping", and
    "an integer" apart from "a number".
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping" if yaml else "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if yaml and isinstance(value, int):
        return "an integer"
    if isinstance(value, (int, float)):
        return "a number"
    return "a %s" % type(value).__name__


def as_object(value: object, where: str) -> Dict[str, object]:
    """``value`` itself, which must be an object (a whole answer, a list item)."""
    if not isinstance(value, dict):
        raise ShapeError("%s is %s, not an object" % (where, kind_of(value)))
    return value


def _field(parent: Mapping[str, object], key: str) -> object:
    return parent.get(key) if isinstance(parent, dict) else None


def get_object(parent: Mapping[str, object], key: str, where: str) -> Dict[str, object]:
    """``parent[key]`` as an object ({} when absent or null)."""
    value = _field(parent, key)
    if value is None:
        return {}
    return as_object(value, "%s.%s" % (where, key))


def get_list(parent: Mapping[str, object], key: str, where: str) -> List[object]:
    """``parent[key]`` as a list ([] when absent or null)."""
    value = _field(parent, key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError("%s.%s is %s, not a list" % (where, key, kind_of(value)))
    return value


def get_objects(parent: Mapping[str, object], key: str, where: str) -> List[Dict[str, object]]:
    """``parent[key]`` as a list of objects ([] when absent or null)."""
    path = "%s.%s" % (where, key)
    return [as_object(item, "%s[%d]" % (path, n)) for n, item in enumerate(get_list(parent, key, where))]


def get_str(parent: Mapping[str, object], key: str, where: str) -> str:
    """``parent[key]`` as a string ("" when absent or null)."""
    value = _field(parent, key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ShapeError("%s.%s is %s, not a string" % (where, key, kind_of(value)))
    return value


def get_bool(parent: Mapping[str, object], key: str, where: str) -> bool:
    """``parent[key]`` as a boolean (False when absent or null)."""
    value = _field(parent, key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ShapeError("%s.%s is %s, not a boolean" % (where, key, kind_of(value)))
    return value

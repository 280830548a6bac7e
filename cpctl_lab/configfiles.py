"""Config files kube-apiserver reads at start: an audit policy, an EncryptionConfiguration, an
AdmissionConfiguration -- what the real binary says when one is missing (no mount covers it) or is
not a valid policy/config, and the audit policy a healthy API server then applies.

The checks are minimal but honest: the file parses as YAML (or JSON), has the right ``apiVersion``
and ``kind``, and the fields the real loaders require (an audit policy needs rules, each with a known
level; an EncryptionConfiguration needs resources, each with resources and providers, an aescbc /
aesgcm / secretbox key of the right size; an AdmissionConfiguration needs plugins with names). The
messages follow k8s.io/apiserver (audit/policy/reader.go, server/options/encryptionconfig/config.go,
admission/config.go).
"""

from __future__ import annotations

import base64
import time
import urllib.parse
from pathlib import Path
from typing import Any, Optional

import yaml

AUDIT_LEVELS = ("None", "Metadata", "Request", "RequestResponse")
AUDIT_VERSIONS = ("audit.k8s.io/v1",)
ENCRYPTION_VERSIONS = ("apiserver.config.k8s.io/v1",)
ADMISSION_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.k8s.io/v1alpha1")
KEY_SIZES = {"aescbc": (16, 24, 32), "aesgcm": (16, 24, 32), "secretbox": (32,)}
CONFIG_FLAGS = ("audit-policy-file", "encryption-provider-config", "admission-control-config-file")


def config_error(flag: str, path: str, host: Optional[str]) -> Optional[str]:
    """The error kube-apiserver exits with for config flag ``flag`` naming container path ``path``
    (``host``: where it is on the node, None when no mount covers it); None when the file is usable."""
    if flag not in CONFIG_FLAGS or not path:
        return None
    text, problem = _read(path, host)
    if flag == "audit-policy-file":
        why = problem or _audit_problem(text)
        return f"loading audit policy file: {why}" if why else None
    if flag == "encryption-provider-config":
        if problem:
            return f"error opening encryption provider configuration file {path!r}: {problem}"
        why = _encryption_problem(text)
        return f"error while parsing file: {why}" if why else None
    if problem:
        return f"unable to read admission control configuration from {path!r} [{problem}]"
    why = _admission_problem(text)
    return f"unable to read admission control configuration from {path!r} [{why}]" if why else None


def audit_policy(path: str, host: Optional[str]) -> Optional[dict[str, Any]]:
    """The parsed audit policy at ``path`` (None when it is not a valid one)."""
    text, problem = _read(path, host)
    if problem or _audit_problem(text):
        return None
    value = yaml.safe_load(text)
    return value if isinstance(value, dict) else None


def audit_level(policy: dict[str, Any], user: str, verb: str, resource: str, namespace: str) -> str:
    """The level of the first rule that matches the request (audit's policy checker, simplified:
    users, verbs, resources by name, namespaces); "None" when no rule does."""
    for rule in policy.get("rules") or []:
        if rule.get("users") and user not in rule["users"]:
            continue
        if rule.get("verbs") and verb not in rule["verbs"]:
            continue
        if rule.get("namespaces") and namespace not in rule["namespaces"]:
            continue
        kinds = [r for group in rule.get("resources") or [] for r in group.get("resources") or []]
        if rule.get("resources") and kinds and resource not in kinds:
            continue
        return str(rule.get("level"))
    return "None"


def _read(path: str, host: Optional[str]) -> tuple[str, str]:
    """(text, "") or ("", the error the Go loader reports when it cannot read the file)."""
    if host is None:
        return "", f"open {path}: no such file or directory"
    try:
        return Path(host).read_text(), ""
    except IsADirectoryError:
        return "", f"read {path}: is a directory"
    except FileNotFoundError:
        return "", f"open {path}: no such file or directory"
    except (OSError, UnicodeDecodeError) as exc:
        return "", f"open {path}: {exc}"


def _load(text: str, versions: tuple[str, ...], kind: str) -> tuple[Any, str]:
    """(the object, "") or (None, the decoding error)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"failed decoding: {str(exc).splitlines()[0]}"
    if not isinstance(value, dict):
        return None, "failed decoding: Object 'Kind' is missing in the file"
    if value.get("kind") != kind or value.get("apiVersion") not in versions:
        return None, (f'failed decoding: no kind "{value.get("kind")}" is registered for version '
                      f'"{value.get("apiVersion")}" (want {kind} in {", ".join(versions)})')
    return value, ""


def _audit_problem(text: str) -> str:
    policy, problem = _load(text, AUDIT_VERSIONS, "Policy")
    if problem:
        return problem
    rules = policy.get("rules")
    if not isinstance(rules, list) or not rules:
        return "loaded illegal policy with 0 rules"
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or rule.get("level") not in AUDIT_LEVELS:
            level = rule.get("level") if isinstance(rule, dict) else None
            return (f'failed to validate policy: rules[{index}].level: Unsupported value: "{level}": '
                    f'supported values: {", ".join(AUDIT_LEVELS)}')
    return ""


def _encryption_problem(text: str) -> str:
    config, problem = _load(text, ENCRYPTION_VERSIONS, "EncryptionConfiguration")
    if problem:
        return problem
    resources = config.get("resources")
    if not isinstance(resources, list) or not resources:
        return "resources: Required value: EncryptionConfiguration.Resources must contain at least one resource"
    for index, entry in enumerate(resources):
        where = f"resources[{index}]"
        if not isinstance(entry, dict) or not entry.get("resources"):
            return f"{where}.resources: Required value: at least one resource is required"
        providers = entry.get("providers")
        if not isinstance(providers, list) or not providers:
            return f"{where}.providers: Required value: at least one provider is required"
        for number, provider in enumerate(providers):
            why = _provider_problem(provider)
            if why:
                return f"{where}.providers[{number}]{why}"
    return ""


def _provider_problem(provider: Any) -> str:
    """Why one provider entry is not usable ("" when it is)."""
    if not isinstance(provider, dict) or len(provider) != 1:
        return ": Invalid value: exactly one provider must be configured per entry"
    (name, body), = provider.items()
    if name == "identity":
        return ""
    if name not in KEY_SIZES:
        return f": Invalid value: unknown provider {name!r} in the lab (identity, aescbc, aesgcm, secretbox)"
    keys = (body or {}).get("keys") if isinstance(body, dict) else None
    if not isinstance(keys, list) or not keys:
        return f".{name}.keys: Required value: at least one key is required"
    for index, key in enumerate(keys):
        if not isinstance(key, dict) or not key.get("name"):
            return f".{name}.keys[{index}].name: Required value"
        try:
            size = len(base64.b64decode(str(key.get("secret") or ""), validate=True))
        except ValueError:
            return f".{name}.keys[{index}].secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"
        if size not in KEY_SIZES[name]:
            return (f".{name}.keys[{index}].secret: Invalid value: \"REDACTED\": secret is not of the expected "
                    f"length, got {size}, expected one of {list(KEY_SIZES[name])}")
    return ""


def _admission_problem(text: str) -> str:
    config, problem = _load(text, ADMISSION_VERSIONS, "AdmissionConfiguration")
    if problem:
        return problem
    plugins = config.get("plugins")
    if plugins is None:
        return ""
    if not isinstance(plugins, list):
        return "plugins: Invalid value: must be a list"
    for index, plugin in enumerate(plugins):
        if not isinstance(plugin, dict) or not plugin.get("name"):
            return f"plugins[{index}].name: Required value"
        if plugin.get("configuration") is None and not plugin.get("path"):
            return f"plugins[{index}]: Required value: configuration or path"
    return ""


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "HEAD": "get"}


def audit_event(method: str, uri: str, user: str, groups: list[str], code: int, audit_id: str, source: str,
                agent: str) -> dict[str, Any]:
    """An audit.k8s.io/v1 Event (stage ResponseComplete) for one request, ``level`` left to the policy."""
    url = urllib.parse.urlsplit(uri)
    parts = [p for p in url.path.split("/") if p]
    ref: dict[str, str] = {}
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        ref["namespace"], rest = rest[1], rest[2:]
    if rest:
        ref["resource"] = rest[0]
        if len(rest) > 1:
            ref["name"] = rest[1]
        if len(rest) > 2:
            ref["subresource"] = rest[2]
    if parts[:1] in (["api"], ["apis"]) and len(parts) > 1:
        ref["apiVersion"] = parts[1] if parts[0] == "api" else "/".join(parts[1:3])
    query = urllib.parse.parse_qs(url.query)
    if method == "GET":
        verb = "watch" if query.get("watch", [""])[-1] in ("1", "true") else ("get" if "name" in ref else "list")
    else:
        verb = _VERBS.get(method, method.lower())
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    event: dict[str, Any] = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
                             "auditID": audit_id, "stage": "ResponseComplete", "requestURI": uri, "verb": verb,
                             "user": {"username": user, "groups": groups}, "sourceIPs": [source],
                             "userAgent": agent, "responseStatus": {"metadata": {}, "code": code},
                             "requestReceivedTimestamp": now, "stageTimestamp": now}
    if ref:
        event["objectRef"] = ref
    return event

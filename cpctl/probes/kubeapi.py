"""A small Kubernetes API client that works wherever a ``Host`` works.

The kubeconfig is read through the Host (it lives on the master) and parsed here; requests
are made by the Host too (``Host.http``), so the same code talks to ``https://127.0.0.1:6443``
from this machine or from a master reached over SSH. Only what cpctl needs: get/list pods,
nodes, leases and events, create/delete a pod, and the pods/binding subresource.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Optional
from urllib.parse import quote, urlencode

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host


class ApiError(CpctlError):
    """The API answered with an error status (``status`` is the HTTP code)."""

    def __init__(self, message: str, status: int, reason: str = "") -> None:
        code = {404: ExitCode.NOT_FOUND, 409: ExitCode.CONFLICT}.get(status, ExitCode.API)
        super().__init__(message, code)
        self.status = status
        self.reason = reason


class ApiUnreachable(CpctlError):
    """No answer at all: connection refused, timeout, TLS failure."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.API)


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise CpctlError("kubeconfig: %s is not valid base64" % what, ExitCode.ENVIRONMENT) from None


def _named(items: Any, name: str, kind: str, path: str) -> dict:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item.get(kind) or {}
    raise CpctlError("kubeconfig %s: %s %r not found" % (path, kind, name), ExitCode.ENVIRONMENT)


class Access:
    """Server URL, TLS material and auth headers taken from a kubeconfig."""

    def __init__(self, server: str, tls: dict, headers: dict, source: str) -> None:
        self.server = server.rstrip("/")
        self.tls = tls
        self.headers = headers
        self.source = source


def load_kubeconfig(host: Host, path: str, context: Optional[str] = None) -> Access:
    """Parse a kubeconfig the way kubectl does for the fields cpctl needs."""
    import yaml
    try:
        raw = host.read_file(path, 4 << 20)
    except OSError as exc:
        raise CpctlError("cannot read kubeconfig %s: %s" % (path, exc.strerror or exc), ExitCode.ENVIRONMENT,
                         hint="pass --kubeconfig or set KUBECONFIG") from None
    try:
        config = yaml.safe_load(raw.decode("utf-8", "replace"))
    except yaml.YAMLError:
        raise CpctlError("kubeconfig %s is not valid YAML" % path, ExitCode.ENVIRONMENT) from None
    if not isinstance(config, dict):
        raise CpctlError("kubeconfig %s is not a kubeconfig" % path, ExitCode.ENVIRONMENT)
    ctx_name = context or config.get("current-context")
    if not ctx_name:
        raise CpctlError("kubeconfig %s has no current-context" % path, ExitCode.ENVIRONMENT)
    ctx = _named(config.get("contexts"), str(ctx_name), "context", path)
    cluster = _named(config.get("clusters"), str(ctx.get("cluster") or ""), "cluster", path)
    user = _named(config.get("users"), str(ctx["user"]), "user", path) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server or not str(server).startswith(("http://", "https://")):
        raise CpctlError("kubeconfig %s: cluster has no http(s) server" % path, ExitCode.ENVIRONMENT)
    base = os.path.dirname(path)
    return Access(server, _tls(cluster, user, base), _auth_headers(host, user, base, path), path)


def _rel(base: str, value: str) -> str:
    return value if value.startswith("/") else os.path.join(base, value)


def _tls(cluster: dict, user: dict, base: str) -> dict:
    tls: dict = {}
    if cluster.get("insecure-skip-tls-verify"):
        tls["insecure"] = True
    elif cluster.get("certificate-authority-data"):
        tls["ca_data"] = _b64(cluster["certificate-authority-data"], "certificate-authority-data")
    elif cluster.get("certificate-authority"):
        tls["ca_file"] = _rel(base, cluster["certificate-authority"])
    # A certificate without its key would only fail later as an obscure TLS error.
    if user.get("client-certificate-data"):
        if not user.get("client-key-data"):
            raise CpctlError("kubeconfig: client-certificate-data needs client-key-data", ExitCode.ENVIRONMENT)
        tls["cert_data"] = _b64(user["client-certificate-data"], "client-certificate-data")
        tls["key_data"] = _b64(user["client-key-data"], "client-key-data")
    elif user.get("client-certificate"):
        if not user.get("client-key"):
            raise CpctlError("kubeconfig: client-certificate needs client-key", ExitCode.ENVIRONMENT)
        tls["cert_file"] = _rel(base, user["client-certificate"])
        tls["key_file"] = _rel(base, user["client-key"])
    return tls


def _auth_headers(host: Host, user: dict, base: str, path: str) -> dict:
    if user.get("exec") or user.get("auth-provider"):
        raise CpctlError("kubeconfig %s: exec/auth-provider credentials are not supported; use a "
                         "certificate or token kubeconfig such as /etc/kubernetes/admin.conf" % path,
                         ExitCode.ENVIRONMENT)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token_file = _rel(base, user["tokenFile"])
        try:   # a CpctlError, so that status/verification can fall back to crictl like for any bad kubeconfig
            token = host.read_file(token_file, 64 << 10).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise CpctlError("kubeconfig %s: cannot read tokenFile %s: %s" % (path, token_file, reason),
                             ExitCode.ENVIRONMENT) from None
    if token:
        return {"Authorization": "Bearer %s" % token}
    if user.get("username"):
        pair = "%s:%s" % (user["username"], user.get("password", ""))
        return {"Authorization": "Basic %s" % base64.b64encode(pair.encode()).decode()}
    return {}


class KubeClient:
    """JSON requests to one API server through a Host."""

    def __init__(self, host: Host, access: Access, timeout: float = 5.0) -> None:
        self.host = host
        self.access = access
        self.timeout = timeout

    def request(self, method: str, path: str, body: Optional[dict] = None, query: Optional[dict] = None,
                timeout: Optional[float] = None) -> dict:
        url = self.access.server + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = dict(self.access.headers, Accept="application/json")
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        try:
            resp = self.host.http(method, url, headers=headers, body=data, timeout=timeout or self.timeout,
                                  tls=self.access.tls or None)
        except OSError as exc:
            raise ApiUnreachable("API server %s unreachable: %s" % (self.access.server, exc.strerror or exc)) from None
        return self._decode(method, path, resp)

    def _decode(self, method: str, path: str, resp: dict) -> dict:
        try:
            payload = json.loads(resp["body"].decode("utf-8")) if resp["body"] else {}
        except ValueError:
            payload = {"message": resp["body"][:200].decode("utf-8", "replace")}
        if resp["status"] >= 400:
            message = payload.get("message") if isinstance(payload, dict) else None
            raise ApiError("API %s %s: %d %s" % (method, path, resp["status"], message or ""), resp["status"],
                           payload.get("reason", "") if isinstance(payload, dict) else "")
        return payload

    # --- typed helpers ----------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> Optional[dict]:
        """The pod, or None when it does not exist."""
        try:
            return self.request("GET", "/api/v1/namespaces/%s/pods/%s" % (quote(namespace), quote(name)))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list_pods(self, namespace: Optional[str] = None, field_selector: Optional[str] = None,
                  label_selector: Optional[str] = None) -> list:
        path = "/api/v1/namespaces/%s/pods" % quote(namespace) if namespace else "/api/v1/pods"
        result = self.request("GET", path, query={"fieldSelector": field_selector, "labelSelector": label_selector})
        return result.get("items") or []

    def get_node(self, name: str) -> Optional[dict]:
        try:
            return self.request("GET", "/api/v1/nodes/%s" % quote(name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def get_lease(self, namespace: str, name: str) -> Optional[dict]:
        try:
            return self.request("GET", "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s"
                                % (quote(namespace), quote(name)))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def events_for(self, namespace: str, name: str, limit: int = 5) -> list:
        """The newest events about one object (for timeout hints)."""
        try:
            items = self.request("GET", "/api/v1/namespaces/%s/events" % quote(namespace),
                                 query={"fieldSelector": "involvedObject.name=%s" % name}).get("items") or []
        except CpctlError:
            return []
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return items[-limit:]

    def bind(self, namespace: str, pod: str, node: str) -> dict:
        """POST pods/binding: the only way to set spec.nodeName of an existing pod."""
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        return self.request("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (quote(namespace), quote(pod)), body)

    def create_pod(self, namespace: str, pod: dict) -> dict:
        return self.request("POST", "/api/v1/namespaces/%s/pods" % quote(namespace), pod)

    def delete_pod(self, namespace: str, name: str, grace: int = 0) -> None:
        try:
            self.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (quote(namespace), quote(name)),
                         query={"gracePeriodSeconds": grace})
        except ApiError as exc:
            if exc.status != 404:
                raise


def client_for(host: Host, kubeconfig: str) -> KubeClient:
    return KubeClient(host, load_kubeconfig(host, kubeconfig))

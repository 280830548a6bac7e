"""A small Kubernetes API client that works wherever a ``Host`` works.

The kubeconfig is read through the Host (it lives on the master) and parsed here; requests
are made by the Host too (``Host.http``), so the same code talks to ``https://127.0.0.1:6443``
from this machine or from a master reached over SSH. Only what cpctl needs: get/list pods,
nodes, leases and events, create/delete a pod, and the pods/binding subresource.

Nothing an API server (or a proxy in front of it) answers is trusted. Each request has a total
deadline and a body limit (``cpctl.agent.httpops.http``); an error status becomes ``ApiError``, no answer
at all ``ApiUnreachable``, an answer that is not the JSON it must be (a proxy's HTML, a list or a
string where an object belongs, nesting too deep, too large, another object than the one asked
for, a field of the wrong type) ``ApiBadAnswer``. All three are ``ApiFailure``, a ``CpctlError``
(exit 9; 3 and 10 for a 404 and a 409).

No credential reaches a message: kubeconfig values are checked by field name (a token, password or
key is never quoted), ``http`` errors are cpctl's own words, and whatever a server says is cut to
one short line with the credentials in use redacted (a hostile server may echo them).
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from cpctl.agent import httpops
from cpctl.errors import CpctlError, ExitCode
from cpctl.host.base import Host, HttpReply, HttpRequest, NodeApiAccess, TlsOptions
from cpctl.inputs import load_yaml
from cpctl.probes.shape import ShapeError, get_bool, get_list, get_object, get_objects, get_str, kind_of

if TYPE_CHECKING:
    from urllib.parse import SplitResult


# urllib.parse (and the ipaddress module it imports, ~3 ms) is imported when a URL is first made or
# read: every probe imports this module, and a status without a kubeconfig never makes a request.
def quote(text: str, safe: str = "/") -> str:
    if set(text) <= _NEVER_QUOTED:     # a name (pods, namespaces, nodes): quote would return it as it is
        return text
    from urllib.parse import quote as url_quote
    return url_quote(text, safe=safe)


_NEVER_QUOTED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def urlencode(query: Mapping[str, object]) -> str:
    words = [(_ascii_quote_plus(str(k)), _ascii_quote_plus(str(v))) for k, v in query.items()
             if not isinstance(k, bytes) and not isinstance(v, bytes)]
    if len(words) == len(query) and all(k is not None and v is not None for k, v in words):
        return "&".join("%s=%s" % pair for pair in words)   # what urllib.parse.urlencode writes
    from urllib.parse import urlencode as url_encode
    return url_encode(query)


def _ascii_quote_plus(text: str) -> Optional[str]:
    """``urllib.parse.quote_plus(text)`` for ASCII text (None for any other)."""
    if not text.isascii():
        return None
    return "".join(c if c in _NEVER_QUOTED else "+" if c == " " else "%%%02X" % ord(c) for c in text)


def urlsplit(url: str) -> SplitResult:
    from urllib.parse import urlsplit as url_split
    return url_split(url)

OBJECT_LIMIT = 4 << 20      # one object: etcd keeps at most ~1.5 MiB per object
LIST_LIMIT = 32 << 20       # a list answer
MESSAGE_LIMIT = 200         # characters of a server's message quoted in an error
TOKEN_FILE_LIMIT = 64 << 10


class ApiFailure(CpctlError):
    """No usable answer to one API request: the base of ``ApiUnreachable``, ``ApiError`` and
    ``ApiBadAnswer``. A probe turns any of them into "could not look"."""


class ApiUnreachable(ApiFailure):
    """No answer at all: connection refused or reset, timeout, TLS failure, a malformed HTTP answer."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.API)


class ApiError(ApiFailure):
    """The API answered with an error status (``status`` is the HTTP code).

    ``reason``, ``details`` and ``status_message`` (cleaned, see ``KubeClient.clean``) come from a
    ``kind: Status`` body; ``is_status`` says whether the answer was one (a proxy's HTML page is not).
    """

    def __init__(self, message: str, status: int, reason: str = "", is_status: bool = False,
                 details: Optional[Mapping[str, object]] = None, status_message: str = "") -> None:
        code = {404: ExitCode.NOT_FOUND, 409: ExitCode.CONFLICT}.get(status, ExitCode.API)
        super().__init__(message, code)
        self.status = status
        self.reason = reason
        self.is_status = is_status
        self.details = details or {}
        self.status_message = status_message

    def is_not_found(self, name: str) -> bool:
        """A real "not found" of the object ``name``: a 404 carrying a Kubernetes Status about it.

        A 404 page of a proxy or of a wrong URL prefix says nothing about the object: reading it
        as "gone" would verify a stop that nobody saw."""
        return (self.status == 404 and self.is_status
                and self.details.get("name") in (None, "", name))


class ApiBadAnswer(ApiFailure):
    """An answer that is not what the request must get (see the module docstring)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.API)


# --- the kubeconfig ----------------------------------------------------------------------------------
def _env_error(message: str, hint: str = "") -> CpctlError:
    return CpctlError(message, ExitCode.ENVIRONMENT, hint=hint)


def _b64(value: object, what: str) -> bytes:
    """Base64 field ``what``; like Go's decoder, line breaks inside are ignored."""
    if not isinstance(value, str):
        raise _env_error("kubeconfig: %s is %s, not a base64 string" % (what, kind_of(value)))
    try:
        return base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
    except (ValueError, binascii.Error):
        raise _env_error("kubeconfig: %s is not valid base64" % what) from None


def _named(config: Mapping[str, object], section: str, name: str, kind: str, path: str) -> Dict[str, object]:
    """The ``kind`` object of the entry called ``name`` in the list ``section`` (contexts, ...)."""
    for item in get_list(config, section, "kubeconfig"):
        if isinstance(item, dict) and item.get("name") == name:
            return get_object(item, kind, "%s[%s]" % (section, name))
    raise _env_error("kubeconfig %s: %s %r not found" % (path, kind, name))


def _has_control(text: str) -> bool:
    """True when ``text`` holds a control character (a line break, a NUL, DEL...)."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


class Access:
    """Server URL, TLS material and auth headers taken from a kubeconfig.

    ``secrets`` are the credential strings in use (token, password, their encoded header form):
    ``redact`` removes them from any text before it can reach a message."""

    def __init__(self, server: str, tls: TlsOptions, headers: Dict[str, str], source: str,
                 secrets: Tuple[str, ...] = ()) -> None:
        self.server = server.rstrip("/")
        self.tls = tls
        self.headers = headers
        self.source = source
        self.secrets = tuple(s for s in secrets if len(s) >= 4)

    @property
    def display_server(self) -> str:
        """The server URL for messages: scheme, host and port only (never user:password@)."""
        parts = urlsplit(self.server)
        host = parts.hostname or "?"
        host = "[%s]" % host if ":" in host else host
        return "%s://%s%s" % (parts.scheme, host, ":%d" % parts.port if parts.port else "")

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "<redacted>")
        return text


def kubeconfig_files(value: str) -> List[str]:
    """The files a ``--kubeconfig``/``KUBECONFIG`` value names: one path, or kubectl's
    colon-separated list (empty entries ignored)."""
    return [part for part in value.split(":") if part] or [value]


def any_kubeconfig(host: Host, value: str) -> bool:
    """True when at least one of the files ``value`` names exists on ``host``."""
    return any(host.lstat(path) is not None for path in kubeconfig_files(value))


#: At most this many bytes of a kubeconfig are read.
MAX_KUBECONFIG_BYTES = 4 << 20


def kubeconfig_reads(value: str) -> List[Tuple[str, Dict[str, object]]]:
    """The reads ``any_kubeconfig`` and ``load_kubeconfig`` make of the files ``value`` names (lstat,
    then the bytes), for ``Host.prefetched``: a view asks them with its other reads, in one round trip."""
    reads: List[Tuple[str, Dict[str, object]]] = []
    for path in kubeconfig_files(value):
        reads += [("lstat", {"path": path}), ("read_file", {"path": path, "limit": MAX_KUBECONFIG_BYTES})]
    return reads


def load_kubeconfig(host: Host, path: str, context: Optional[str] = None) -> Access:
    """Parse a kubeconfig the way kubectl does for the fields cpctl needs: one file, or a
    ``KUBECONFIG``-style list merged by kubectl's rule (missing files are skipped, the first file
    to set a value or a named entry wins, relative paths are relative to the file that has them).

    Every failure is a ``CpctlError`` (exit 7) naming the file and the field, never a value."""
    files = kubeconfig_files(path)
    try:
        if len(files) == 1:
            return _access(host, _read_kubeconfig(host, files[0]), files[0], context)
        return _access(host, _merged(host, files, path), path, context)
    except ShapeError as exc:
        raise _env_error("kubeconfig %s: %s" % (path, exc)) from None


_PATH_FIELDS = {"clusters": ("cluster", ("certificate-authority",)),
                "users": ("user", ("client-certificate", "client-key", "tokenFile"))}


def _merged(host: Host, files: List[str], value: str) -> Dict[str, object]:
    """One kubeconfig from a list of files: the first to set a key or a named entry wins."""
    sections: Dict[str, List[Dict[str, object]]] = {"clusters": [], "users": [], "contexts": []}
    current = ""
    found = 0
    for path in files:
        if host.lstat(path) is None:
            continue                        # kubectl skips a listed file that does not exist
        config = _read_kubeconfig(host, path)
        found += 1
        current = current or get_str(config, "current-context", "kubeconfig")
        for section, entries in sections.items():
            known = {item.get("name") for item in entries}
            for item in get_list(config, section, "kubeconfig"):
                if isinstance(item, dict) and item.get("name") not in known:
                    entries.append(_absolute(section, item, os.path.dirname(path)))
                    known.add(item.get("name"))
    if not found:
        raise _env_error("none of the kubeconfig files in %s exists" % value,
                         hint="pass --kubeconfig or set KUBECONFIG")
    merged: Dict[str, object] = dict(sections)
    if current:
        merged["current-context"] = current
    return merged


def _absolute(section: str, item: Dict[str, object], base: str) -> Dict[str, object]:
    """``item`` with the relative file paths of its cluster/user made absolute (from ``base``)."""
    if section not in _PATH_FIELDS:
        return item
    kind, fields = _PATH_FIELDS[section]
    inner = item.get(kind)
    if not isinstance(inner, dict):
        return item
    fixed = dict(inner)
    for field in fields:
        text = fixed.get(field)
        if isinstance(text, str) and text:
            fixed[field] = _rel(base, text)
    return dict(item, **{kind: fixed})


def _read_kubeconfig(host: Host, path: str) -> Dict[str, object]:
    import yaml
    try:
        raw = host.read_file(path, MAX_KUBECONFIG_BYTES)
    except OSError as exc:
        raise _env_error("cannot read kubeconfig %s: %s" % (path, exc.strerror or exc),
                         hint="pass --kubeconfig or set KUBECONFIG") from None
    try:   # the parser's messages quote the file: never shown, a token may be right there
        config = load_yaml(raw.decode("utf-8", "replace"))
    except (yaml.YAMLError, ValueError, RecursionError):
        raise _env_error("kubeconfig %s is not valid YAML" % path) from None
    if not isinstance(config, dict):
        raise _env_error("kubeconfig %s is not a kubeconfig" % path)
    return config


def _access(host: Host, config: Mapping[str, object], path: str, context: Optional[str]) -> Access:
    ctx_name = context or get_str(config, "current-context", "kubeconfig")
    if not ctx_name:
        raise _env_error("kubeconfig %s has no current-context" % path)
    ctx = _named(config, "contexts", ctx_name, "context", path)
    cluster = _named(config, "clusters", get_str(ctx, "cluster", "context"), "cluster", path)
    user_name = get_str(ctx, "user", "context")
    user = _named(config, "users", user_name, "user", path) if user_name else {}
    server = _server(cluster, path)
    base = os.path.dirname(path)
    headers, secrets = _auth_headers(host, user, base, path)
    return Access(server, _tls(cluster, user, base), headers, path, secrets)


def _server(cluster: Mapping[str, object], path: str) -> str:
    """The cluster's http(s) URL; an IPv6 literal needs its brackets, as in any URL."""
    server = get_str(cluster, "server", "cluster")
    if not server.startswith(("http://", "https://")):
        raise _env_error("kubeconfig %s: cluster has no http(s) server" % path)
    if httpops.split_url(server) is not None:   # scheme://host[:port]/...: no user info, a valid port
        return server
    try:
        parts = urlsplit(server)
        valid = bool(parts.hostname) and (parts.port or 0) >= 0   # .port raises ValueError when invalid
    except ValueError:
        valid = False
    if not valid:
        raise _env_error("kubeconfig %s: cluster server URL is not valid (no host, a bad port, or an IPv6 "
                         "address without brackets: https://[fd00::1]:6443)" % path)
    if parts.username is not None or parts.password is not None:
        raise _env_error("kubeconfig %s: cluster server URL carries credentials (user:password@); "
                         "not supported, and not shown" % path)
    return server


def _rel(base: str, value: str) -> str:
    return value if value.startswith("/") else os.path.join(base, value)


def _tls(cluster: Mapping[str, object], user: Mapping[str, object], base: str) -> TlsOptions:
    tls: TlsOptions = {}
    if get_bool(cluster, "insecure-skip-tls-verify", "cluster"):
        tls["insecure"] = True
    elif cluster.get("certificate-authority-data"):
        tls["ca_data"] = _b64(cluster["certificate-authority-data"], "certificate-authority-data")
    elif get_str(cluster, "certificate-authority", "cluster"):
        tls["ca_file"] = _rel(base, get_str(cluster, "certificate-authority", "cluster"))
    # A certificate without its key would only fail later as an obscure TLS error.
    if user.get("client-certificate-data"):
        if not user.get("client-key-data"):
            raise _env_error("kubeconfig: client-certificate-data needs client-key-data")
        tls["cert_data"] = _b64(user["client-certificate-data"], "client-certificate-data")
        tls["key_data"] = _b64(user["client-key-data"], "client-key-data")
    elif get_str(user, "client-certificate", "user"):
        if not get_str(user, "client-key", "user"):
            raise _env_error("kubeconfig: client-certificate needs client-key")
        tls["cert_file"] = _rel(base, get_str(user, "client-certificate", "user"))
        tls["key_file"] = _rel(base, get_str(user, "client-key", "user"))
    return tls


def _credential(user: Mapping[str, object], field: str, path: str) -> str:
    """The string ``user[field]``, refused (by name, never by value) when it has a control character.

    kubectl sends an inline token as it is, so a trailing line break (``token: |``) makes Go's
    HTTP client refuse the Authorization header: cpctl refuses it too, before any request."""
    value = get_str(user, field, "user")
    if _has_control(value):
        raise _env_error("kubeconfig %s: user field %s contains a control character (a line break from a "
                         "`%s: |` block?); its value is not shown" % (path, field, field))
    return value


def _token_file(host: Host, token_path: str, path: str) -> str:
    """The token in ``tokenFile``, whitespace trimmed as client-go does (a file ends with a newline)."""
    try:   # a CpctlError, so that status/verification can fall back to crictl like for any bad kubeconfig
        raw = host.read_file(token_path, TOKEN_FILE_LIMIT)
    except OSError as exc:
        raise _env_error("kubeconfig %s: cannot read tokenFile %s: %s" % (path, token_path, exc.strerror or "error")
                         ) from None
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise _env_error("kubeconfig %s: tokenFile %s is not UTF-8 text" % (path, token_path)) from None
    if not token:
        raise _env_error("kubeconfig %s: tokenFile %s is empty" % (path, token_path))
    if _has_control(token):
        raise _env_error("kubeconfig %s: tokenFile %s: the token contains a control character; its value "
                         "is not shown" % (path, token_path))
    return token


def _auth_headers(host: Host, user: Mapping[str, object], base: str, path: str
                  ) -> Tuple[Dict[str, str], Tuple[str, ...]]:
    """(headers, the secrets in them) for the user's credentials, as client-go builds them."""
    if user.get("exec") or user.get("auth-provider"):
        raise _env_error("kubeconfig %s: exec/auth-provider credentials are not supported; use a "
                         "certificate or token kubeconfig such as /etc/kubernetes/admin.conf" % path)
    token = _credential(user, "token", path)
    token_file = get_str(user, "tokenFile", "user")
    if not token and token_file:
        token = _token_file(host, _rel(base, token_file), path)
    username, password = _credential(user, "username", path), _credential(user, "password", path)
    if token and username:
        raise _env_error("kubeconfig %s: username/password or bearer token may be set, but not both" % path)
    if token:
        return {"Authorization": "Bearer %s" % token}, (token,)
    if username:
        if ":" in username:
            raise _env_error("kubeconfig %s: user field username contains a colon (not allowed in basic "
                             "authentication)" % path)
        pair = base64.b64encode(("%s:%s" % (username, password)).encode("utf-8")).decode("ascii")
        return {"Authorization": "Basic %s" % pair}, (password, pair)
    return {}, ()


# --- requests ----------------------------------------------------------------------------------------
def node_http(host: Host, method: str, url: str, timeout: float, limit: int,
              headers: Optional[Mapping[str, str]] = None, body: Optional[bytes] = None,
              tls: Optional[TlsOptions] = None) -> HttpReply:
    """``Host.http`` with a body limit: an answer over ``limit`` bytes is an OSError (EFBIG)."""
    return host.http(method, url, headers=headers, body=body, timeout=timeout, tls=tls, limit=limit)


def _content_type(resp: HttpReply) -> str:
    """The answer's media type (no parameters), printable and short."""
    headers = resp.get("headers") or {}
    value = next((v for k, v in headers.items() if str(k).lower() == "content-type"), "")
    kind = str(value).split(";", 1)[0].strip().lower()
    return "".join(c for c in kind if " " < c <= "~")[:60]


def _parse_json(body: bytes, ctype: str) -> Tuple[object, str]:
    """(decoded value, "") or (None, what is wrong with the body)."""
    if not body:
        return None, "an empty body"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, "a body that is not UTF-8 text (%s)" % (ctype or "no content type")
    try:
        return json.loads(text), ""
    except RecursionError:
        return None, "JSON nested too deeply"
    except ValueError:
        if ctype and "json" not in ctype:
            return None, "%s, not JSON" % ctype
        return None, "a body that is not valid JSON"


class KubeClient:
    """JSON requests to one API server through a Host; see the module docstring."""

    def __init__(self, host: Host, access: Access, timeout: float = 5.0) -> None:
        self.host = host
        self.access = access
        self.timeout = timeout

    def clean(self, text: str, limit: int = MESSAGE_LIMIT) -> str:
        """A server's (or a system's) words fit for a one-line message: credentials redacted,
        control characters gone, at most ``limit`` characters."""
        text = " ".join("".join(c if c.isprintable() else " " for c in self.access.redact(text[:20 * limit])).split())
        return text if len(text) <= limit else text[:limit] + "..."

    def request(self, method: str, path: str, body: Optional[Mapping[str, object]] = None,
                query: Optional[Mapping[str, object]] = None,
                timeout: Optional[float] = None, limit: int = OBJECT_LIMIT) -> Dict[str, object]:
        """One request; the answer, which must be a JSON object (else an ``ApiFailure``)."""
        try:
            resp = self.host.http(**self.http_request(method, path, body, query, timeout, limit))
        except OSError as exc:
            why = self.clean(exc.strerror or str(exc))
            if exc.errno == errno.EFBIG:   # an answer over the limit
                raise ApiBadAnswer("API %s %s: %s" % (method, path, why)) from None
            raise ApiUnreachable("API server %s unreachable: %s" % (self.access.display_server, why)) from None
        return self._decode(method, path, resp)

    def http_request(self, method: str, path: str, body: Optional[Mapping[str, object]] = None,
                     query: Optional[Mapping[str, object]] = None, timeout: Optional[float] = None,
                     limit: int = OBJECT_LIMIT) -> HttpRequest:
        """What ``request`` asks the node to send (``Host.http``'s arguments): a view asks it ahead
        (``Host.http_ahead``) with exactly these."""
        url = self.access.server + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = dict(self.access.headers, Accept="application/json")
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        return HttpRequest(method=method, url=url, headers=headers, body=data, timeout=timeout or self.timeout,
                           tls=self.access.tls or None, limit=limit)

    def request_text(self, path: str, query: Optional[Mapping[str, object]] = None, timeout: Optional[float] = None,
                     limit: int = OBJECT_LIMIT) -> str:
        """A GET whose answer is ``text/plain``, not an object (``pods/log``): the body as UTF-8
        (bytes that are not: replaced), the credentials in use redacted (a hostile server may echo
        them). Failures as for ``request``: an error status is an ``ApiError`` (from its ``Status``),
        no answer ``ApiUnreachable``; a body over ``limit`` bytes or of another type (a proxy's
        HTML page, JSON) ``ApiBadAnswer``."""
        url = self.access.server + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        where = "API GET %s" % path
        try:   # client-go's Accept: the answer is text/plain, an error a JSON Status
            resp = node_http(self.host, "GET", url, timeout or self.timeout, limit,
                             headers=dict(self.access.headers, Accept="application/json, */*"),
                             tls=self.access.tls or None)
        except OSError as exc:
            why = self.clean(exc.strerror or str(exc))
            if exc.errno == errno.EFBIG:
                raise ApiBadAnswer("%s: %s" % (where, why)) from None
            raise ApiUnreachable("API server %s unreachable: %s" % (self.access.display_server, why)) from None
        status, ctype = int(resp["status"]), _content_type(resp)
        if status >= 400:
            raise self._status_error(where, status, _parse_json(resp["body"], ctype)[0], ctype)
        if not 200 <= status < 300:
            raise ApiBadAnswer("%s: unexpected HTTP %d" % (where, status))
        if ctype not in ("", "text/plain"):
            raise ApiBadAnswer("%s: answered %d with %s, not text/plain" % (where, status, ctype))
        return self.access.redact(bytes(resp["body"]).decode("utf-8", "replace"))

    def _decode(self, method: str, path: str, resp: HttpReply) -> Dict[str, object]:
        where = "API %s %s" % (method, path)
        status, ctype = int(resp["status"]), _content_type(resp)
        payload, problem = _parse_json(resp["body"], ctype)
        if status >= 400:
            raise self._status_error(where, status, payload, ctype)
        if not 200 <= status < 300:
            raise ApiBadAnswer("%s: unexpected HTTP %d" % (where, status))
        if problem:
            raise ApiBadAnswer("%s: answered %d with %s" % (where, status, problem))
        if not isinstance(payload, dict):
            raise ApiBadAnswer("%s: answered %s, not a JSON object" % (where, kind_of(payload)))
        return payload

    def _status_error(self, where: str, status: int, payload: object, ctype: str) -> ApiError:
        status_body = payload if isinstance(payload, dict) else {}
        message = status_body.get("message")
        reason = status_body.get("reason")
        details = status_body.get("details")
        text = self.clean(message, 10 * MESSAGE_LIMIT) if isinstance(message, str) else ""
        shown = self.clean(text) or ("(%s answer)" % ctype if ctype else "")
        return ApiError(("%s: %d %s" % (where, status, shown)).rstrip(), status,
                        self.clean(reason) if isinstance(reason, str) else "",
                        status_body.get("kind") == "Status", details if isinstance(details, dict) else {}, text)

    def _bad(self, where: str, exc: ShapeError) -> ApiBadAnswer:
        return ApiBadAnswer("API %s: malformed answer: %s" % (where, exc))

    # --- typed helpers ----------------------------------------------------------------------
    def _get(self, path: str, kind: str, name: str, namespace: str, timeout: Optional[float]
             ) -> Optional[Dict[str, object]]:
        """The object at ``path`` (checked: kind, name, namespace), or None when it does not exist."""
        try:
            obj = self.request("GET", path, timeout=timeout)
        except ApiError as exc:
            if exc.is_not_found(name):
                return None
            raise
        where = "GET %s" % path
        try:
            found_kind = get_str(obj, "kind", "answer")
            meta = get_object(obj, "metadata", "answer")
            found_name, found_ns = get_str(meta, "name", "metadata"), get_str(meta, "namespace", "metadata")
        except ShapeError as exc:
            raise self._bad(where, exc) from None
        if found_kind and found_kind != kind:
            raise ApiBadAnswer("API %s: answered a %s, not a %s" % (where, self.clean(found_kind)[:60], kind))
        if found_name != name or (namespace and found_ns and found_ns != namespace):
            raise ApiBadAnswer("API %s: answered another object (%s)" % (where, self.clean(
                "%s/%s" % (found_ns, found_name) if found_ns else found_name or "no name")[:120]))
        return obj

    def _items(self, path: str, kind: str, query: Optional[Mapping[str, object]], timeout: Optional[float]
               ) -> List[Dict[str, object]]:
        """The items of a list answer (each an object)."""
        answer = self.request("GET", path, query=query, timeout=timeout, limit=LIST_LIMIT)
        where = "GET %s" % path
        if "items" not in answer:
            raise ApiBadAnswer("API %s: answered no items list" % where)
        try:
            found_kind = get_str(answer, "kind", "answer")
            items = get_objects(answer, "items", "answer")
        except ShapeError as exc:
            raise self._bad(where, exc) from None
        if found_kind and found_kind != kind:
            raise ApiBadAnswer("API %s: answered a %s, not a %s" % (where, self.clean(found_kind)[:60], kind))
        return items

    def get_pod(self, namespace: str, name: str, timeout: Optional[float] = None) -> Optional[Dict[str, object]]:
        """The pod, or None when it does not exist."""
        return self._get("/api/v1/namespaces/%s/pods/%s" % (quote(namespace, safe=""), quote(name, safe="")),
                         "Pod", name, namespace, timeout)

    def list_pods(self, namespace: Optional[str] = None, field_selector: Optional[str] = None,
                  label_selector: Optional[str] = None, timeout: Optional[float] = None) -> List[Dict[str, object]]:
        path, query = _pods_list(namespace, field_selector, label_selector)
        return self._items(path, "PodList", query, timeout)

    def list_pods_request(self, namespace: Optional[str] = None, field_selector: Optional[str] = None,
                          label_selector: Optional[str] = None, timeout: Optional[float] = None) -> HttpRequest:
        """The request ``list_pods`` with these arguments sends (for ``Host.http_ahead``)."""
        path, query = _pods_list(namespace, field_selector, label_selector)
        return self.http_request("GET", path, query=query, timeout=timeout, limit=LIST_LIMIT)

    def get_node(self, name: str, timeout: Optional[float] = None) -> Optional[Dict[str, object]]:
        return self._get("/api/v1/nodes/%s" % quote(name, safe=""), "Node", name, "", timeout)

    def list_nodes(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        return self._items("/api/v1/nodes", "NodeList", None, timeout)

    def get_lease(self, namespace: str, name: str, timeout: Optional[float] = None) -> Optional[Dict[str, object]]:
        return self._get("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s"
                         % (quote(namespace, safe=""), quote(name, safe="")), "Lease", name, namespace, timeout)

    def get_configmap(self, namespace: str, name: str, timeout: Optional[float] = None) -> Optional[Dict[str, object]]:
        """The ConfigMap, or None when it does not exist."""
        return self._get("/api/v1/namespaces/%s/configmaps/%s" % (quote(namespace, safe=""), quote(name, safe="")),
                         "ConfigMap", name, namespace, timeout)

    def update_configmap(self, namespace: str, name: str, obj: Mapping[str, object], timeout: Optional[float] = None
                         ) -> Dict[str, object]:
        """PUT the ConfigMap; its ``metadata.resourceVersion`` makes a concurrent change a 409 Conflict."""
        return self.request("PUT", "/api/v1/namespaces/%s/configmaps/%s" % (quote(namespace, safe=""),
                                                                           quote(name, safe="")), obj, timeout=timeout)

    def events_for(self, namespace: str, name: str, limit: int = 5, timeout: Optional[float] = None
                   ) -> List[Dict[str, object]]:
        """The newest events about one object (for timeout hints); [] when they cannot be read."""
        try:
            items = self._items("/api/v1/namespaces/%s/events" % quote(namespace, safe=""), "EventList",
                                {"fieldSelector": "involvedObject.name=%s" % name}, timeout)
        except CpctlError:
            return []

        def when(event: Dict[str, object]) -> str:
            value = event.get("lastTimestamp") or event.get("eventTime") or ""
            return value if isinstance(value, str) else ""
        return sorted(items, key=when)[-limit:]

    def bind(self, namespace: str, pod: str, node: str, timeout: Optional[float] = None) -> Dict[str, object]:
        """POST pods/binding: the only way to set spec.nodeName of an existing pod. The Binding's
        name and namespace are the URL's: the registry answers 400 when they differ."""
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        return self.request("POST", "/api/v1/namespaces/%s/pods/%s/binding"
                            % (quote(namespace, safe=""), quote(pod, safe="")), body, timeout=timeout)

    def create_pod(self, namespace: str, pod: Mapping[str, object], timeout: Optional[float] = None
                   ) -> Dict[str, object]:
        return self.request("POST", "/api/v1/namespaces/%s/pods" % quote(namespace, safe=""), pod, timeout=timeout)

    def delete_pod(self, namespace: str, name: str, grace: int = 0, timeout: Optional[float] = None) -> None:
        try:
            self.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (quote(namespace, safe=""), quote(name, safe="")),
                         query={"gracePeriodSeconds": grace}, timeout=timeout)
        except ApiError as exc:
            if not exc.is_not_found(name):
                raise


def node_access(host: Host, path: str) -> Optional[NodeApiAccess]:
    """The kubeconfig ``path`` on the node as a node-side revert can use it without cpctl
    (``NodeApiAccess``): parsed here by the real parser, the credentials left in the file - only
    where each embedded one's base64 text lies in it is kept, with the file's sha256. None when that
    cannot be done: a list of files, no usable kubeconfig, a token or password (the agent sends no
    auth header), a credential not written as one base64 run."""
    import hashlib
    if len(kubeconfig_files(path)) != 1:
        return None
    try:
        raw = host.read_file(path, MAX_KUBECONFIG_BYTES)
        access = load_kubeconfig(host, path)
    except (CpctlError, OSError):
        return None
    if access.headers:
        return None
    tls: TlsOptions = {}
    slices: Dict[str, List[int]] = {}
    for key in ("insecure", "ca_file", "cert_file", "key_file"):
        if key in access.tls:
            tls[key] = access.tls[key]
    embedded = {"ca_data": access.tls.get("ca_data"), "cert_data": access.tls.get("cert_data"),
                "key_data": access.tls.get("key_data")}
    for key, value in embedded.items():
        if value is not None:
            text = base64.b64encode(value)
            at = raw.find(text)
            if at < 0 or raw.find(text, at + 1) >= 0:
                return None
            slices[key] = [at, at + len(text)]
    return {"server": access.server, "kubeconfig": path, "sha256": hashlib.sha256(raw).hexdigest(), "tls": tls,
            "slices": slices}


def client_for(host: Host, kubeconfig: str) -> KubeClient:
    return KubeClient(host, load_kubeconfig(host, kubeconfig))


def _pods_list(namespace: Optional[str], field_selector: Optional[str], label_selector: Optional[str]
               ) -> Tuple[str, Dict[str, object]]:
    """The path and query of a pods list."""
    path = "/api/v1/namespaces/%s/pods" % quote(namespace, safe="") if namespace else "/api/v1/pods"
    return path, {"fieldSelector": field_selector, "labelSelector": label_selector}

"""Issue #3: kubeconfig parsing in cpctl.probes.kubeapi (unit tests on real files, no cluster).

Every way a kubeconfig can be unusable must end in a ``CpctlError`` (exit 7, one clear line),
never in a raw OSError/KeyError/UnicodeError that the CLI would report as an internal error.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.local import LocalHost
from cpctl.probes.kubeapi import ApiError, ApiUnreachable, KubeClient, load_kubeconfig

CERT = b"-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE...\n-----END PRIVATE KEY-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(tmp_path, cluster: dict, user: dict = None, current: str = "ctx", name: str = "config") -> str:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "nope", "user": "u"}}],
        "users": [{"name": "u", "user": user or {}}],
    }
    if current is None:
        del config["current-context"]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def load(path: str, context: str = None):
    return load_kubeconfig(LocalHost(), path, context)


def env_error(excinfo) -> str:
    assert excinfo.value.code == ExitCode.ENVIRONMENT
    return excinfo.value.message


HTTPS = {"server": "https://10.0.0.1:6443/"}


# --- what is accepted ------------------------------------------------------------------------------
def test_token_and_server(tmp_path):
    access = load(write(tmp_path, {"server": "http://127.0.0.1:8080/"}, {"token": "abc"}))
    assert access.server == "http://127.0.0.1:8080"
    assert access.headers == {"Authorization": "Bearer abc"}
    assert access.tls == {}


def test_token_file_relative_to_the_kubeconfig(tmp_path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "token").write_text("from-file\n")
    access = load(write(tmp_path, HTTPS, {"tokenFile": "secrets/token"}))
    assert access.headers == {"Authorization": "Bearer from-file"}
    # an inline token wins over the file, like kubectl
    access = load(write(tmp_path, HTTPS, {"token": "inline", "tokenFile": "secrets/token"}))
    assert access.headers == {"Authorization": "Bearer inline"}


def test_basic_auth(tmp_path):
    access = load(write(tmp_path, HTTPS, {"username": "admin", "password": "s3cret"}))
    assert access.headers == {"Authorization": "Basic " + b64(b"admin:s3cret")}


def test_inline_client_certificate_and_ca(tmp_path):
    access = load(write(tmp_path, dict(HTTPS, **{"certificate-authority-data": b64(CERT)}),
                        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}))
    assert access.tls == {"ca_data": CERT, "cert_data": CERT, "key_data": KEY}
    assert access.headers == {}


def test_file_paths_resolved_against_the_kubeconfig_dir(tmp_path):
    sub = tmp_path / "kube"
    sub.mkdir()
    access = load(write(sub, dict(HTTPS, **{"certificate-authority": "pki/ca.crt"}),
                        {"client-certificate": "pki/admin.crt", "client-key": "/abs/admin.key"}))
    assert access.tls == {"ca_file": str(sub / "pki" / "ca.crt"), "cert_file": str(sub / "pki" / "admin.crt"),
                          "key_file": "/abs/admin.key"}


def test_insecure_skip_tls_verify(tmp_path):
    access = load(write(tmp_path, dict(HTTPS, **{"insecure-skip-tls-verify": True}), {"token": "t"}))
    assert access.tls == {"insecure": True}


def test_explicit_context_and_missing_current_context(tmp_path):
    path = write(tmp_path, HTTPS, {"token": "t"}, current=None)
    with pytest.raises(CpctlError) as excinfo:
        load(path)
    assert "has no current-context" in env_error(excinfo)
    assert load(path, context="ctx").headers == {"Authorization": "Bearer t"}
    with pytest.raises(CpctlError) as excinfo:
        load(path, context="other")
    assert "cluster 'nope' not found" in env_error(excinfo)
    with pytest.raises(CpctlError) as excinfo:
        load(path, context="ghost")
    assert "context 'ghost' not found" in env_error(excinfo)


# --- what is refused, with a clear message -----------------------------------------------------------
def test_unreadable_or_not_a_kubeconfig(tmp_path):
    with pytest.raises(CpctlError) as excinfo:
        load(str(tmp_path / "missing"))
    assert "cannot read kubeconfig" in env_error(excinfo) and "KUBECONFIG" in excinfo.value.hint
    for text, expect in (("{{{ not: yaml: [", "not valid YAML"), ("- a\n- b\n", "is not a kubeconfig"),
                         ("", "is not a kubeconfig")):
        (tmp_path / "bad").write_text(text)
        with pytest.raises(CpctlError) as excinfo:
            load(str(tmp_path / "bad"))
        assert expect in env_error(excinfo)


@pytest.mark.parametrize("cluster", [{}, {"server": "ftp://x"}, {"server": "127.0.0.1:6443"}])
def test_server_must_be_http_or_https(tmp_path, cluster):
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, cluster, {"token": "t"}))
    assert "no http(s) server" in env_error(excinfo)


@pytest.mark.parametrize("kind", ["exec", "auth-provider"])
def test_exec_plugins_refused(tmp_path, kind):
    user = {kind: {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, HTTPS, user))
    message = env_error(excinfo)
    assert "exec/auth-provider credentials are not supported" in message and "admin.conf" in message


@pytest.mark.parametrize("where,field", [
    ("cluster", "certificate-authority-data"),
    ("user", "client-certificate-data"),
    ("user", "client-key-data"),
])
def test_bad_base64(tmp_path, where, field):
    cluster, user = dict(HTTPS), {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}
    (cluster if where == "cluster" else user)[field] = "not base64!!"
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, cluster, user))
    assert "kubeconfig: %s is not valid base64" % field == env_error(excinfo)


def test_client_certificate_without_key(tmp_path):
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, HTTPS, {"client-certificate-data": b64(CERT)}))
    assert "client-key-data" in env_error(excinfo)
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, HTTPS, {"client-certificate": "admin.crt"}))
    assert "client-key" in env_error(excinfo)


def test_token_file_missing_or_not_text(tmp_path):
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, HTTPS, {"tokenFile": "nope"}))
    message = env_error(excinfo)
    assert "tokenFile" in message and str(tmp_path / "nope") in message
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CpctlError) as excinfo:
        load(write(tmp_path, HTTPS, {"tokenFile": "binary"}))
    assert "tokenFile" in env_error(excinfo)


# --- the client sends what the kubeconfig says (a local HTTP server on 127.0.0.1) --------------------
class _Handler(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        _Handler.seen.append((self.path, self.headers.get("Authorization")))
        status = {"/api/v1/namespaces/default/pods/there": 200, "/api/v1/namespaces/default/pods/gone": 404,
                  "/api/v1/nodes/n": 500}.get(self.path, 403)
        body = json.dumps({"kind": "Pod", "metadata": {"name": "there"}} if status == 200
                          else {"kind": "Status", "message": "status %d" % status, "reason": "R"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_client_uses_the_token_and_maps_errors(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = "http://127.0.0.1:%d" % server.server_address[1]
        client = KubeClient(LocalHost(), load(write(tmp_path, {"server": url}, {"token": "tok"})), timeout=5)
        assert client.get_pod("default", "there")["metadata"]["name"] == "there"
        assert client.get_pod("default", "gone") is None
        with pytest.raises(ApiError) as excinfo:
            client.get_node("n")
        assert excinfo.value.status == 500 and excinfo.value.code == ExitCode.API
        with pytest.raises(ApiError) as excinfo:
            client.get_lease("kube-system", "x")
        assert excinfo.value.status == 403 and "status 403" in excinfo.value.message
        assert {auth for _path, auth in _Handler.seen} == {"Bearer tok"}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    with pytest.raises(ApiUnreachable) as excinfo:
        client.get_pod("default", "there")
    assert excinfo.value.code == ExitCode.API and "unreachable" in excinfo.value.message

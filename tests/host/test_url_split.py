"""``agent.httpops.split_url``/``packed_address`` and the fast paths built on them (issue 38).

``status`` reads the API server's URL without importing urllib.parse and ipaddress (~1.5 ms):
a plain ``http(s)://host[:port]/path?query`` is split by cpctl, anything else is left to
urllib.parse. Each fast path must give exactly what urllib.parse/ipaddress give, or decline.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import Optional

import pytest

from cpctl.agent import httpops
from cpctl.core.apiview import _is_own
from cpctl.probes import kubeapi

URLS = [
    "http://127.0.0.1:16747", "https://10.0.0.5:6443/", "HTTPS://Control-Plane.Example.COM:6443/api/v1?watch=1",
    "http://host?x=1", "http://host/p?", "http://host:0/", "http://host:080/p", "https://a.b-c.d./x/../y%2F",
    "http://h/p?a=b&c=%20d", "http://h/a\\b", "http://h:/", "http://h:65536/", "http://h:99999999/", "http://h:+80/",
    "http://h:8x/", "http://user:pw@h/", "http://@h/", "http://[::1]:2381/readyz", "http://[fd00::1]/",
    "http://::1:2381/", "http://h/p#frag", "http://h/p q", "http://h/p\tq", " http://h/", "http://h/\u00e9",
    "http://h\u00e9/", "http:///p", "http://", "ftp://h/", "http:/h/", "http:h", "//h/p", "http://h_1/",
    "http://h\r\n/", "http://h:6443:1/", "http://h/%00", "HtTp://H", "http://h:٣/",
]


@pytest.mark.parametrize("url", URLS)
def test_split_url_reads_as_urlsplit_or_declines(url: str) -> None:
    simple = httpops.split_url(url)
    if simple is None:
        return
    parts = urllib.parse.urlsplit(url)
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    assert simple == (parts.scheme, parts.hostname, parts.port, path)
    assert parts.username is None and parts.password is None and not parts.fragment


def test_split_url_takes_the_plain_urls_a_kubeconfig_holds() -> None:
    assert httpops.split_url("https://10.0.0.5:6443") == ("https", "10.0.0.5", 6443, "/")
    assert httpops.split_url("HTTP://Lb.Example:80/healthz?verbose") == ("http", "lb.example", 80, "/healthz?verbose")
    # left to urllib.parse: user info, IPv6 literals, fragments, odd ports and characters
    for url in ("http://user:pw@h/", "http://[::1]:2381/", "http://h/p#f", "http://h:65536/", "http://h:/",
                "http://h/p q", " http://h/", "http://h/\u00e9", "http://h:\u0663/"):
        assert httpops.split_url(url) is None, url
    # urllib.parse's reading, and its refusals, stay for those
    assert httpops._http_target("http://[::1]:2381/readyz") == ("http", "::1", 2381, "/readyz")
    with pytest.raises(OSError):
        httpops._http_target("http://h:65536/")


ADDRESSES = ["127.0.0.1", "127.255.0.9", "10.0.0.5", "0.0.0.0", "::1", "::", "fd00::1", "FD00:0:0::1",
             "::ffff:127.0.0.1", "010.0.0.1", "1.2.3", "1.2.3.4.5", "256.1.1.1", "localhost", "", "fe80::1%eth0",
             "host.example", " 1.2.3.4", "1.2.3.4 "]


@pytest.mark.parametrize("text", ADDRESSES)
def test_packed_address_agrees_with_ipaddress(text: str) -> None:
    try:
        expected: Optional[bytes] = ipaddress.ip_address(text).packed
    except ValueError:
        expected = None
    if "%" in text:       # a scoped IPv6 address: ipaddress takes it, the fast path leaves it to text
        expected = None
    assert httpops.packed_address(text) == expected


@pytest.mark.parametrize("server, advertised, own", [
    ("https://127.0.0.1:6443", "", True), ("https://127.9.9.9:6443", "", True), ("https://[::1]:6443", "", True),
    ("https://localhost:6443", "", True), ("https://10.0.0.5:6443", "", False), ("https://[::ffff:127.0.0.1]:1", "",
                                                                               False),
    ("https://10.0.0.5:6443", "10.0.0.5", True), ("https://[fd00::5]:6443", "fd00:0::5", True),
    ("https://10.0.0.5:6443", "10.0.0.6", False), ("https://CP1.example:6443", "cp1.example", True),
    ("https://lb.example:6443", "10.0.0.5", False), ("https://user@10.0.0.5:6443", "10.0.0.5", True),
    ("https://[::1:6443", "", False),
])
def test_is_own_as_with_ipaddress(server: str, advertised: str, own: bool) -> None:
    pod = {"spec": {"containers": [{"command": ["kube-apiserver", "--advertise-address=%s" % advertised]}]}} \
        if advertised else None
    assert _is_own(server, pod) is own


@pytest.mark.parametrize("name", ["kube-system", "etcd-lab-master1", "a.b_c~d", "", "with space", "sl/ash", "é",
                                  "x%2F", "?q"])
def test_quote_fast_path_is_urllib_quote(name: str) -> None:
    assert kubeapi.quote(name, safe="") == urllib.parse.quote(name, safe="")


@pytest.mark.parametrize("query", [
    {"fieldSelector": "spec.nodeName=lab-master1"}, {"labelSelector": "a in (b, c),d!=e", "limit": 500},
    {"fieldSelector": "involvedObject.name=kube-apiserver-cp1", "watch": True}, {"x": "é"}, {"k y": "a+b&c=d/e?f"},
    {"b": b"raw"}, {}, {"dryRun": "All", "fieldManager": "cpctl"}, {"ctl": "\x00\x7f~"},
])
def test_urlencode_fast_path_is_urllib_urlencode(query: dict) -> None:
    assert kubeapi.urlencode(query) == urllib.parse.urlencode(query)

"""TARGET parsing and ssh_config resolution (no server needed, no paramiko needed)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.host.sshconfig import Target, parse_target, read_config_text, resolve

pytestmark = pytest.mark.timeout(20)


@pytest.mark.parametrize("raw, host, user, port", [
    ("master1", "master1", None, None),
    ("ubuntu@10.0.0.11", "10.0.0.11", "ubuntu", None),
    ("ubuntu@10.0.0.11:2222", "10.0.0.11", "ubuntu", 2222),
    ("cp-1.example.com:22", "cp-1.example.com", None, 22),
    ("[::1]:2222", "::1", None, 2222),
    ("root@[fe80::1%eth0]", "fe80::1%eth0", "root", None),
    ("::1", "::1", None, None),
    ("ssh://admin@node:2200", "node", "admin", 2200),
])
def test_parse_good_targets(raw: str, host: str, user: str, port: int) -> None:
    assert parse_target(raw) == Target(raw, host, user, port)


@pytest.mark.parametrize("raw", [
    "", " master", "a b", "user@", "@host", "host:", "host:0", "host:70000", "host:22x", "[::1",
    "[nothost]:22", "[::1]x", "-oProxyCommand=x", "us er@h", "h;rm", "u$x@h", "1:2:3", "host:22:33",
])
def test_parse_bad_targets(raw: str) -> None:
    with pytest.raises(CpctlError) as err:
        parse_target(raw)
    assert err.value.code == ExitCode.USAGE
    assert "\n" not in err.value.message


def _opts(**kw: object) -> SimpleNamespace:
    base = dict(user=None, port=None, identity_files=[], known_hosts=None, accept_new_host_key=False,
                connect_timeout=None, proxy_jump=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_resolve_config_and_precedence(tmp_path) -> None:
    conf = {"hostname": "10.0.0.11", "port": "2200", "user": "ubuntu", "identityfile": ["~/k1", "/k2"],
            "userknownhostsfile": "/kh1 ~/kh2", "stricthostkeychecking": "accept-new",
            "connecttimeout": "3", "proxyjump": "bastion,jump2:2222"}
    ep = resolve(parse_target("m1"), lambda host: conf, _opts())
    assert (ep.hostname, ep.port, ep.user) == ("10.0.0.11", 2200, "ubuntu")
    assert ep.identity_files[1] == "/k2" and not ep.identity_files[0].startswith("~")
    assert ep.known_hosts[0] == "/kh1" and not ep.known_hosts[1].startswith("~")
    assert ep.strict == "accept-new" and ep.connect_timeout == 3.0
    assert ep.proxy_jump == ["bastion", "jump2:2222"]
    assert ep.known_hosts_name == "[10.0.0.11]:2200"
    ep = resolve(parse_target("admin@m1:22"), lambda host: conf, _opts(proxy_jump="none"))
    assert (ep.user, ep.port, ep.proxy_jump, ep.known_hosts_name) == ("admin", 22, [], "10.0.0.11")


def test_strict_no_only_from_config() -> None:
    assert resolve(parse_target("h"), None, _opts()).strict == "yes"
    assert resolve(parse_target("h"), None, _opts(accept_new_host_key=True)).strict == "accept-new"
    no = {"stricthostkeychecking": "no"}
    assert resolve(parse_target("h"), lambda h: no, _opts()).strict == "no"


def test_proxycommand_refused() -> None:
    with pytest.raises(CpctlError, match="ProxyCommand"):
        resolve(parse_target("h"), lambda h: {"proxycommand": "nc %h %p"}, _opts())


def test_include_is_inlined(tmp_path) -> None:
    (tmp_path / "inc.conf").write_text("Host x\n  Port 2022\n")
    main = tmp_path / "config"
    main.write_text("Include %s/*.conf\nHost *\n  User bob\n" % tmp_path)
    text = read_config_text(str(main))
    assert "Port 2022" in text and "Include" not in text


def test_missing_config_is_one_line_error(tmp_path) -> None:
    with pytest.raises(CpctlError) as err:
        read_config_text(str(tmp_path / "nope"))
    assert err.value.code == ExitCode.ENVIRONMENT


def test_remote_package_does_not_import_paramiko() -> None:
    code = ("import sys, cpctl.fleet.targets, cpctl.host.sshconfig, cpctl.fleet.inventory, cpctl.fleet.runner;"
            "print('paramiko' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

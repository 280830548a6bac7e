"""Inventory parsing: both forms, precedence, patterns, and one-line errors for bad files."""

from __future__ import annotations

import textwrap

import pytest

from cpctl.errors import CpctlError, ExitCode
from cpctl.fleet.inventory import Inventory, load_inventory

pytestmark = pytest.mark.timeout(20)

ANSIBLE = """
all:
  vars: {user: ubuntu, become: true, state_dir: /var/lib/cpctl}
  hosts:
    master1: {host: 10.0.0.11, port: 22, node_name: cp1, manifests_dir: /etc/kubernetes/manifests,
              state_dir: /srv/cpctl, kubeconfig: /etc/kubernetes/admin.conf}
    master2: {host: 10.0.0.12}
  children:
    masters:
      vars: {crictl: /usr/local/bin/crictl}
      hosts: {master1: {}, master2: {}}
      children:
        canary:
          vars: {user: admin}
          hosts:
            master3: {ansible_host: "fd00::13", ansible_port: 2222, ansible_ssh_common_args: -x}
    edge:
      hosts:
        bastion-alias: {become: false, python: /usr/bin/python3.11}
"""

SIMPLE = """
vars: {user: ubuntu}
hosts:
  m1: {host: 10.0.0.1}
  m2: {host: 10.0.0.2, port: 2200}
  m3: {}
groups:
  masters: [m1, m2]
  canary: [m3]
"""


def _inv(tmp_path, text: str) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return load_inventory(str(path))


def test_ansible_form(tmp_path) -> None:
    inv = _inv(tmp_path, ANSIBLE)
    m1, m2, m3, edge = inv.select("all")
    assert [h.name for h in (m1, m2, m3, edge)] == ["master1", "master2", "master3", "bastion-alias"]
    assert m1.target == "ubuntu@10.0.0.11:22" and m2.target == "ubuntu@10.0.0.12"
    assert (m1.node_name, m1.manifests_dir, m1.state_dir, m1.kubeconfig) == (
        "cp1", "/etc/kubernetes/manifests", "/srv/cpctl", "/etc/kubernetes/admin.conf")
    assert m2.state_dir == "/var/lib/cpctl" and m2.crictl == "/usr/local/bin/crictl" and m2.become
    assert m3.target == "admin@[fd00::13]:2222"           # child group vars beat parent's
    assert edge.target == "ubuntu@bastion-alias" and not edge.become and edge.python == "/usr/bin/python3.11"
    assert m1.python == "python3"
    assert [h.name for h in inv.select("masters")] == ["master1", "master2", "master3"]
    assert [h.name for h in inv.select("canary,master1")] == ["master1", "master3"]
    assert [h.name for h in inv.select(["masters", "!canary"])] == ["master1", "master2"]


def test_simple_form(tmp_path) -> None:
    inv = _inv(tmp_path, SIMPLE)
    assert [h.target for h in inv.select("*")] == ["ubuntu@10.0.0.1", "ubuntu@10.0.0.2:2200", "ubuntu@m3"]
    assert [h.name for h in inv.select("canary, masters")] == ["m1", "m2", "m3"]
    assert inv.select("m2")[0].groups == ["masters"]


@pytest.mark.parametrize("text, code, fragment", [
    ("all: [1, 2", ExitCode.USAGE, "invalid YAML at line"),
    ("- a\n- b\n", ExitCode.USAGE, "expected a mapping"),
    ("", ExitCode.USAGE, "expected a mapping"),
    ("hosts: {m1: {port: '22'}}", ExitCode.USAGE, "hosts.m1.port: must be an integer"),
    ("hosts: {m1: {port: 0}}", ExitCode.USAGE, "must be an integer from 1 to 65535"),
    ("hosts: {m1: {become: 'yes'}}", ExitCode.USAGE, "must be true or false"),
    ("hosts: {m1: {manifest_dir: /x}}", ExitCode.USAGE, "unknown key 'manifest_dir'"),
    ("hosts: {m1: {state_dir: relative}}", ExitCode.USAGE, "must be an absolute path"),
    ("hosts: {m1: {host: 'bad host'}}", ExitCode.USAGE, "host m1: invalid target"),
    ("hosts: [m1]", ExitCode.USAGE, "hosts: must be a mapping"),
    ("hosts: {m1: {}}\ngroups: {g: [m2]}", ExitCode.USAGE, "unknown host 'm2'"),
    ("hosts: {m1: {}}\ngroups: {g: m1}", ExitCode.USAGE, "must be a list"),
    ("hosts: {m1: {}}\ngroups: {m1: [m1]}", ExitCode.USAGE, "both a host and a group"),
    ("all: {hosts: {a: {}}, children: {g: {hostz: {}}}}", ExitCode.USAGE, "g: unknown key 'hostz'"),
    ("all: {}\nextra: 1", ExitCode.USAGE, "unexpected top-level key"),
    ("servers: {}", ExitCode.USAGE, "unknown top-level key 'servers'"),
])
def test_bad_files_are_one_line_errors(tmp_path, text: str, code: ExitCode, fragment: str) -> None:
    with pytest.raises(CpctlError) as err:
        _inv(tmp_path, text)
    assert err.value.code == code
    assert fragment in err.value.message and "\n" not in err.value.message
    assert str(tmp_path / "inventory.yaml") in err.value.message


def test_missing_file(tmp_path) -> None:
    with pytest.raises(CpctlError) as err:
        load_inventory(str(tmp_path / "nope.yaml"))
    assert err.value.code == ExitCode.ENVIRONMENT and "no such file" in err.value.message


def test_unknown_pattern(tmp_path) -> None:
    inv = _inv(tmp_path, SIMPLE)
    for pattern in ("nothere", "m1,nothere", ""):
        with pytest.raises(CpctlError) as err:
            inv.select(pattern)
        assert err.value.code == ExitCode.USAGE


def test_group_cycle_refused(tmp_path) -> None:
    text = "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a: {}\n"
    with pytest.raises(CpctlError, match="cycle"):
        _inv(tmp_path, text)

"""``cpctl lab inventory``: the lab's masters as an inventory for cpctl's ``-i`` (YAML) or Ansible (INI),
and the ssh_config lines that make their names reach this machine's sshd.

Each master's vars are the values ``cpctl lab env --master N`` exports (:func:`control.env_vars`, the
one source: the ``fqdn``/``override`` profiles leave out the node name and manifests dir there, and
so here), under the inventory's names for them. The inventory names are the masters' node names, and
they are ssh_config aliases (no ``host:``), as in examples/inventory.yaml: every master is the same
sshd on 127.0.0.1, and the ssh_config block says so once.
"""

from __future__ import annotations

from typing import Any

from . import control

#: The variable ``lab env`` exports -> cpctl's inventory key (cpctl/fleet/inventory.py's STR_KEYS).
#: Ansible's inventory (the cpctl.controlplane collection) spells each key ``cpctl_<key>``.
INVENTORY_KEYS = {
    "CPCTL_NODE_NAME": "node_name",
    "CPCTL_MANIFESTS_DIR": "manifests_dir",
    "CPCTL_STATE_DIR": "state_dir",
    "KUBECONFIG": "kubeconfig",
    "CPCTL_CRICTL": "crictl",
    "CPCTL_KUBELET_DIR": "kubelet_dir",
    "CPCTL_NODE_ROOT": "node_root",
}
FORMATS = ("yaml", "ini", "ssh-config")


def masters(info: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """(inventory name, cpctl inventory vars) per master of the lab, in order."""
    out = []
    for index, master in enumerate(info.get("masters") or [], start=1):
        env = control.env_vars(info, index)
        out.append((str(master["name"]), {INVENTORY_KEYS[k]: v for k, v in env.items() if k in INVENTORY_KEYS}))
    return out


def ssh_config(info: dict[str, Any], address: str, port: int, user: str, identity_file: str = "",
               known_hosts: str = "") -> str:
    """The ``Host`` block that makes every master's name an alias of this machine's sshd."""
    names = " ".join(name for name, _ in masters(info))
    lines = [f"# cpctl lab {info.get('dir')}: every master is this machine's sshd (add to ~/.ssh/config, or",
             "# give the file with --ssh-config / cpctl_ssh_config); the login needs a key the sshd accepts",
             "# (IdentityFile) for root, or for a user with sudo (become).",
             f"Host {names}", f"  HostName {address}", f"  Port {port}", f"  User {user}"]
    lines += [f"  IdentityFile {identity_file}"] if identity_file else []
    lines += [f"  UserKnownHostsFile {known_hosts}"] if known_hosts else []
    return "\n".join(lines) + "\n"


def yaml_inventory(info: dict[str, Any], become: bool) -> str:
    """cpctl's ``-i`` inventory (Ansible form): group ``masters``, each master's paths as host vars."""
    import yaml
    hosts = {name: values for name, values in masters(info)}
    doc = {"all": {"vars": {"become": become}, "children": {"masters": {"hosts": hosts}}}}
    head = (f"# The masters of the lab in {info.get('dir')} (cpctl lab inventory): cpctl -i FILE -H masters ...\n"
            "# The names are ssh_config aliases: `cpctl lab inventory --format ssh-config` prints their lines.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def ini_inventory(info: dict[str, Any], become: bool, ssh_config_path: str = "") -> str:
    """Ansible's INI inventory for the cpctl.controlplane collection: group ``masters``, each master's
    paths as ``cpctl_*`` host vars (values quoted for Ansible's INI parser)."""
    lines = [f"# The masters of the lab in {info.get('dir')} (cpctl lab inventory --format ini):",
             "#   ansible-playbook -i FILE PLAYBOOK.yml",
             "# The names are ssh_config aliases: `cpctl lab inventory --format ssh-config` prints their lines.",
             "[masters]"]
    for name, values in masters(info):
        lines.append(" ".join([name] + [f"cpctl_{key}={_ini_quote(value)}" for key, value in values.items()]))
    lines += ["", "[masters:vars]", f"ansible_become={'true' if become else 'false'}"]
    if ssh_config_path:
        lines.append(f"cpctl_ssh_config={_ini_quote(ssh_config_path)}")
    return "\n".join(lines) + "\n"


def _ini_quote(value: str) -> str:
    """A value as Ansible's INI parser reads it back unchanged (a path may hold spaces or ``#``): in
    double quotes, ``\\`` and ``"`` escaped - what both its host lines (shlex) and its ``:vars`` lines
    (a Python string literal) read as the string itself."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

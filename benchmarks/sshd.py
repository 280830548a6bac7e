"""A small fleet of real OpenSSH servers on loopback for the fan-out benchmark (needs root).

``start_fleet(base, count)`` starts ``count`` sshd processes, one per address 127.0.0.1 ..
127.0.0.<count>, all on one port, each with its own ed25519 host key, key-only root login with
one client key, and writes the client side every tool shares:

* ``ssh_config`` - ``Host h1 .. hN`` aliases (HostName, Port) and a ``Host *`` block with the
  user, IdentityFile, IdentitiesOnly, UserKnownHostsFile, StrictHostKeyChecking yes, BatchMode;
* ``known_hosts`` - one ``[127.0.0.i]:PORT`` line per server: every tool verifies host keys;
* per host ``hosts/127.0.0.i/manifests`` (4 control-plane manifests) and ``.../state``.

``SetEnv SHLVL=1`` keeps bash from sourcing root's ~/.bashrc for ssh commands (a developer's
bashrc, e.g. pyenv init, would otherwise add ~0.3 s to every session of every tool).
Standalone on purpose: the benchmark does not import the test suite's fixtures.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Tuple

from benchmarks.harness import cpu_seconds, load_average

SSHD = "/usr/sbin/sshd"
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
MANIFEST = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: kube-system}
spec:
  containers: [{name: %s, image: registry.k8s.io/%s:v1.30.0}]
"""


class FleetError(RuntimeError):
    """The fleet cannot be started here (not root, no sshd): the message says what to do."""


def require() -> None:
    if os.geteuid() != 0:
        raise FleetError("the fan-out benchmark starts sshd servers and logs in as root: run it as root")
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        raise FleetError("OpenSSH is needed (%s, ssh, ssh-keygen): apt-get install -y openssh-server "
                         "openssh-client" % SSHD)


def begin(name: str, prefix: str) -> Tuple[str, str]:
    """What every benchmark over the fleet does first: stop with one line (``NAME benchmark: why``)
    when no fleet can start here, else note the load average before it runs (its report gives it
    beside the one after: other jobs skew timings) and make its work directory
    (``cpctl-bench-PREFIX-...``). Returns (load average before, work directory)."""
    try:
        require()
    except FleetError as exc:
        raise SystemExit("%s benchmark: %s" % (name, exc)) from None
    return load_average(), tempfile.mkdtemp(prefix="cpctl-bench-%s-" % prefix)


def keygen(path: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cpctl-bench", "-f", path],
                   check=True, stdin=subprocess.DEVNULL)
    with open(path + ".pub") as handle:
        return handle.read().strip()


def _port_free_everywhere(port: int, addresses: List[str]) -> bool:
    for address in addresses:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


def _pick_port(addresses: List[str]) -> int:
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind((addresses[0], 0))
            port = sock.getsockname()[1]
        if _port_free_everywhere(port, addresses):
            return port
    raise FleetError("no TCP port free on all of %s" % ", ".join(addresses))


@dataclass
class Fleet:
    base: str
    port: int
    client_key: str
    addresses: List[str]
    procs: List[subprocess.Popen] = field(default_factory=list)

    @property
    def ssh_config(self) -> str:
        return os.path.join(self.base, "ssh_config")

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.base, "known_hosts")

    def aliases(self, count: int) -> List[str]:
        return ["h%d" % (i + 1) for i in range(count)]

    def manifests_dir(self, address: str) -> str:
        return os.path.join(self.base, "hosts", address, "manifests")

    def state_dir(self, address: str) -> str:
        return os.path.join(self.base, "hosts", address, "state")

    def ls_command(self) -> str:
        """One command line for every host: list that host's manifests dir (the server address
        from $SSH_CONNECTION picks the dir, so tools without per-host commands can run it too)."""
        return 'set -- $SSH_CONNECTION; ls %s/hosts/"$3"/manifests' % self.base

    def connections(self) -> frozenset:
        """The pids of the listeners' children: one per SSH connection being served."""
        return frozenset(pid for proc in self.procs for pid in _children(proc.pid))

    def server_cpu(self, held: frozenset = frozenset(), settle: float = 5.0) -> float:
        """CPU seconds the sshd listeners have used so far, with every connection they served and
        what those ran (sshd, the shell, the agent or ``ls``): the kernel adds a child's CPU to
        its parent's ``cutime``/``cstime`` when the parent reaps it, connection by connection up
        to the listener. So it first waits (up to ``settle`` s) until every connection but the
        ``held`` ones (a keeper's, a ControlPersist master's, open before a run) has ended."""
        deadline = time.monotonic() + settle
        while not self.connections() <= held and time.monotonic() < deadline:
            time.sleep(0.02)
        return sum(cpu_seconds(proc.pid, reaped_children=True) for proc in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _sshd_config(server_dir: str, auth_dir: str, address: str, port: int) -> str:
    return "\n".join([
        "Port %d" % port, "ListenAddress %s" % address,
        "HostKey %s" % os.path.join(server_dir, "host_key"),
        "PidFile %s" % os.path.join(server_dir, "sshd.pid"),
        "AuthorizedKeysFile %s/%%u" % auth_dir,
        "StrictModes no", "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "UseDNS no",
        "MaxStartups 200:30:400", "MaxSessions 100", "LoginGraceTime 30", "LogLevel ERROR",
        "Subsystem sftp internal-sftp", "SetEnv SHLVL=1", "",
    ])


def _wait_listening(proc: subprocess.Popen, address: str, port: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def _children(pid: int) -> List[int]:
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def start_fleet(base: str, count: int) -> Fleet:
    """Start ``count`` sshd on 127.0.0.1..count (same port) and write the shared client files."""
    require()
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    auth_dir = os.path.join(base, "auth")
    os.makedirs(auth_dir, mode=0o755, exist_ok=True)
    client_key = os.path.join(base, "client_key")
    with open(os.path.join(auth_dir, "root"), "w") as handle:
        handle.write(keygen(client_key) + "\n")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    addresses = ["127.0.0.%d" % (i + 1) for i in range(count)]
    fleet = Fleet(base, _pick_port(addresses), client_key, addresses)
    known, config = [], ["Host *\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n"
                         "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
                         "  ConnectTimeout 10\n" % (client_key, fleet.known_hosts)]
    try:
        for index, address in enumerate(addresses):
            server_dir = os.path.join(base, "sshd-%s" % address)
            os.makedirs(server_dir)
            host_pub = keygen(os.path.join(server_dir, "host_key"))
            cfg = os.path.join(server_dir, "sshd_config")
            with open(cfg, "w") as handle:
                handle.write(_sshd_config(server_dir, auth_dir, address, fleet.port))
            log = open(os.path.join(server_dir, "sshd.log"), "ab")
            fleet.procs.append(subprocess.Popen([SSHD, "-D", "-e", "-f", cfg], stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=log))
            log.close()
            known.append("[%s]:%d %s\n" % (address, fleet.port, " ".join(host_pub.split()[:2])))
            config.insert(index, "Host h%d\n  HostName %s\n  Port %d\n" % (index + 1, address, fleet.port))
            mdir = fleet.manifests_dir(address)
            os.makedirs(mdir)
            for name in CONTROL_PLANE:
                with open(os.path.join(mdir, name + ".yaml"), "w") as handle:
                    handle.write(MANIFEST % (name, name, name))
        for proc, address in zip(fleet.procs, addresses):
            if not _wait_listening(proc, address, fleet.port):
                raise FleetError("sshd on %s:%d did not start (see %s)" % (
                    address, fleet.port, os.path.join(base, "sshd-%s" % address, "sshd.log")))
        with open(fleet.known_hosts, "w") as handle:
            handle.write("".join(known))
        with open(fleet.ssh_config, "w") as handle:
            handle.write("".join(config))
    except BaseException:
        fleet.stop()
        raise
    return fleet

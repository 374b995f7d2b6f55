"""Real SSH test hosts: OpenSSH servers on loopback and in network namespaces.

`SSHLab` makes a temporary directory with a host key, a client key, an
authorized_keys and a known_hosts file; `serve_loopback()` starts sshd on a free
loopback port; `serve_netns(delay_ms)` makes a network namespace joined to this
one by a veth pair (optionally with `tc netem` delay on the link) and starts sshd
inside it. `close()` kills every sshd by PID and deletes the namespaces and veths.
Every name carries this process's own prefix, so nothing else is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _has_netem() -> bool:
    try:
        with open("/proc/config.gz", "rb") as f:
            import gzip

            return b"CONFIG_NET_SCH_NETEM=" in gzip.decompress(f.read())
    except OSError:
        return os.path.exists("/sys/module/sch_netem")


HAS_NETEM = _has_netem()
DELAY_HOW = "tc netem" if HAS_NETEM else "a delaying TCP relay (no netem in this kernel)"


def missing() -> str | None:
    """None when the lab can run here, else why not."""
    if os.geteuid() != 0:
        return "the SSH lab needs root (sshd, network namespaces)"
    for tool in (SSHD, "ssh-keygen", "ip", "tc"):
        if not shutil.which(tool) and not os.path.exists(tool):
            return f"{tool} is missing (apt-get install openssh-server openssh-client iproute2)"
    return None


def netns_missing() -> str | None:
    """None when network namespaces and veth pairs can be made here, else why not."""
    why = missing()
    if why:
        return why
    ns = f"rtax-probe-{os.getpid()}"
    res = _sh("ip", "netns", "add", ns, check=False)
    if res.returncode != 0:
        return f"cannot make a network namespace: {res.stderr.strip()}"
    _sh("ip", "netns", "del", ns, check=False)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out: list[int] = []
    todo = [root]
    while todo:
        cur = todo.pop()
        kids = [p for p, pp in parent.items() if pp == cur]
        out += kids
        todo += kids
    return out


@dataclass
class TestHost:
    url: str  # ssh://user@addr:port
    name: str  # how rtax names it
    address: str
    port: int
    pid: int
    netns: str | None = None
    veth: str | None = None  # the controller's end: set it down to cut the link


class SSHLab:
    def __init__(self) -> None:
        self.tag = f"{os.getpid() % 100000:05d}{os.urandom(1).hex()}"
        self.dir = tempfile.mkdtemp(prefix=f"rtax-sshlab-{self.tag}-")
        os.chmod(self.dir, 0o755)
        self.host_key = os.path.join(self.dir, "host_ed25519")
        self.identity = os.path.join(self.dir, "client_ed25519")
        self.known_hosts = os.path.join(self.dir, "known_hosts")
        self.authorized = os.path.join(self.dir, "authorized_keys")
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.host_key)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.identity)
        shutil.copy(self.identity + ".pub", self.authorized)
        with open(self.host_key + ".pub") as f:
            self.host_pub = " ".join(f.read().split()[:2])
        open(self.known_hosts, "w").close()
        os.makedirs("/run/sshd", exist_ok=True)
        # root's own login shell (bash + start-up files) adds ~100 ms to every command:
        # log in as a uid-0 alias whose shell is /bin/sh (root: the stage driver needs it).
        self.user = f"rtaxt{self.tag}"
        home = os.path.join(self.dir, "home")
        os.mkdir(home)
        _sh(
            "useradd",
            "-o",
            "-u",
            "0",
            "-g",
            "0",
            "-M",
            "-N",
            "-d",
            home,
            "-s",
            "/bin/sh",
            self.user,
        )
        _sh("usermod", "-p", "*", self.user)
        self.hosts: list[TestHost] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.netns: list[str] = []
        self.veths: list[str] = []
        self._n = 0

    def _config(self, name: str, address: str, port: int) -> str:
        path = os.path.join(self.dir, f"sshd_{name}.conf")
        with open(path, "w") as f:
            f.write(
                f"ListenAddress {address}\nPort {port}\nHostKey {self.host_key}\n"
                f"PidFile {self.dir}/sshd_{name}.pid\nAuthorizedKeysFile {self.authorized}\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                "StrictModes no\nMaxSessions 200\nMaxStartups 100\n"
                "PermitRootLogin prohibit-password\n"
                "ClientAliveInterval 2\nClientAliveCountMax 3\n"
            )
        _sh(SSHD, "-t", "-f", path)
        return path

    def _start(self, name: str, address: str, port: int, netns: str | None) -> int:
        conf = self._config(name, address, port)
        argv = [SSHD, "-D", "-f", conf, "-E", os.path.join(self.dir, f"sshd_{name}.log")]
        if netns:  # only the network namespace: `ip netns exec` would hide the cgroups
            argv = ["nsenter", f"--net=/run/netns/{netns}", *argv]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        self._wait_listening(address, port, netns, proc)
        with open(self.known_hosts, "a") as f:
            entry = address if port == 22 else f"[{address}]:{port}"
            f.write(f"{entry} {self.host_pub}\n")
        return proc.pid

    @staticmethod
    def _wait_listening(address: str, port: int, netns: str | None, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {proc.returncode}")
            try:
                with socket.create_connection((address, port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd does not listen on {address}:{port}")

    def _add(self, address: str, port: int, pid: int, netns: str | None, veth: str | None):
        url = f"ssh://{self.user}@{address}:{port}"
        h = TestHost(url, f"{self.user}@{address}:{port}", address, port, pid, netns, veth)
        self.hosts.append(h)
        return h

    def serve_loopback(self) -> TestHost:
        port = _free_port()
        pid = self._start(f"lo{port}", "127.0.0.1", port, None)
        return self._add("127.0.0.1", port, pid, None, None)

    def serve_netns(self, delay_ms: int = 0) -> TestHost:
        self._n += 1
        n = self._n
        ns = f"rtax-t-{self.tag}-{n}"
        outer, inner = f"rtx{self.tag}{n}a"[:15], f"rtx{self.tag}{n}b"[:15]
        net = 200 + (int(self.tag[:5]) + n * 7) % 50
        sub = int(self.tag[5:], 16) % 250
        mine, theirs = f"10.{net}.{sub}.1", f"10.{net}.{sub}.2"
        _sh("ip", "netns", "add", ns)
        self.netns.append(ns)
        _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        self.veths.append(outer)
        _sh("ip", "link", "set", inner, "netns", ns)
        _sh("ip", "addr", "add", f"{mine}/30", "dev", outer)
        _sh("ip", "link", "set", outer, "up")
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{theirs}/30", "dev", inner)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        if delay_ms and HAS_NETEM:
            _sh("tc", "qdisc", "add", "dev", outer, "root", "netem", "delay", f"{delay_ms}ms")
        pid = self._start(f"ns{n}", theirs, 22, ns)
        if not delay_ms or HAS_NETEM:
            return self._add(theirs, 22, pid, ns, outer)
        # No netem in this kernel: a relay on our end of the link holds each chunk.
        port = _free_port()
        relay = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.delayrelay",
                mine,
                str(port),
                theirs,
                "22",
                str(delay_ms),
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        self.procs.append(relay)
        assert relay.stdout is not None
        relay.stdout.readline()
        with open(self.known_hosts, "a") as f:
            f.write(f"[{mine}]:{port} {self.host_pub}\n")
        return self._add(mine, port, pid, ns, outer)

    def link(self, host: TestHost, up: bool) -> None:
        assert host.veth
        _sh("ip", "link", "set", host.veth, "up" if up else "down")

    def close(self) -> None:
        for p in self.procs:  # per-connection sshd processes too (their own sessions);
            for pid in _descendants(p.pid):  # the sessions' commands then see EOF, as
                try:  # when a real server drops a connection
                    with open(f"/proc/{pid}/comm") as f:
                        if f.read().strip() != "sshd":
                            continue
                    os.kill(pid, 9)
                except (ProcessLookupError, FileNotFoundError):
                    pass
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 15)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, 9)
                    p.wait()
        for v in self.veths:
            _sh("ip", "link", "del", v, check=False)
        for ns in self.netns:
            _sh("ip", "netns", "del", ns, check=False)
        _sh("userdel", "-f", self.user, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

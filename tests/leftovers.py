"""What a run or an environment left on this machine, found by its label: for tests that
assert nothing survives (teardown, cleanup, kill -9)."""

from __future__ import annotations

import glob
import os
import tempfile

PODMAN_SOCK = "/run/rtax-podman/podman.sock"
DOCKER_SOCK = "/var/run/docker.sock"


def containers(label: str) -> list[str]:
    """Containers labelled `rtax.run=<label>` on dockerd and podman (where they answer)."""
    try:
        import docker
    except ImportError:
        return []
    names = []
    for sock in (DOCKER_SOCK, PODMAN_SOCK):
        if not os.path.exists(sock):
            continue
        c = docker.APIClient(base_url=f"unix://{sock}", timeout=30)
        try:  # the low-level list: no inspect of containers being removed meanwhile
            found = c.containers(all=True, filters={"label": f"rtax.run={label}"})
            names += [f"{sock}:{x['Names']}" for x in found]
        except Exception:
            pass  # the engine does not answer: nothing of ours runs there
        finally:
            c.close()
    return names


def processes(needle: str) -> list[str]:
    """Processes whose command line contains `needle` (not this one)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if needle.encode() in cmd:
            out.append(f"{name}: {cmd[:200]!r}")
    return out


def working_in(prefix: str) -> list[str]:
    """Processes whose working directory is under `prefix` (a workspace's): what a
    driver started there, whatever its command line says (a shell, a server)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if cwd.startswith(prefix):
            out.append(f"{name}: cwd {cwd}")
    return out


def domains(label: str) -> list[str]:
    """libvirt domains whose name carries the label (where libvirtd answers)."""
    try:
        import libvirt
    except ImportError:
        return []
    try:
        conn = libvirt.open("qemu:///system")
    except libvirt.libvirtError:
        return []
    try:
        return [d.name() for d in conn.listAllDomains() if label in d.name()]
    finally:
        conn.close()


def leftovers(
    label: str,
    *,
    vms: bool = False,
    engines: bool = False,
    monitors: bool = True,
    leaves: frozenset[str] | None = None,
) -> list[str]:
    """Everything of `label` still here: workspaces, VM dirs, cgroups, processes
    (sandboxes, QEMU), and with `engines` containers, with `vms` libvirt domains. With
    `leaves` (a driver's declaration, `Driver.leaves`) instead: what it names."""
    if leaves is not None:
        engines, monitors = "containers" in leaves, "monitors" in leaves
        return _leftovers(label, engines, "domains" in leaves, monitors)
    return _leftovers(label, engines, vms, vms or (engines and monitors))


def _leftovers(label: str, engines: bool, domains_too: bool, monitors: bool) -> list[str]:
    label = label[:40]
    tmp = tempfile.gettempdir()
    left = glob.glob(os.path.join(tmp, f"rtax-ws-{label}-*"))
    left += glob.glob(os.path.join(tmp, f"rtax-vm-*{label}*"))
    # every hierarchy, the ones rtax makes nothing in too: an engine nesting a container
    # under a budget cgroup makes the budget's path there (hosts/cgroups.py)
    left += glob.glob(f"/sys/fs/cgroup/**/env-{label}-*", recursive=True)
    left += glob.glob(f"/sys/fs/cgroup/**/batch-{label}-*", recursive=True)
    left += processes(f"rtax-ws-{label}-")
    left += working_in(os.path.join(tmp, f"rtax-ws-{label}-"))
    if monitors:  # QEMU names its guest after the label, conmon its container
        left += processes(f"rtax-{label}-")
    if domains_too:
        left += domains(label)
    if engines:
        left += containers(label)
    return left

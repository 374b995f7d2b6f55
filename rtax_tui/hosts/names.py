"""The names of what rtax makes on a host per run, in one place.

Every such name carries the run's label (in `safe_label` form, model/runlock.py), so a
cleanup finds a run's leftovers by name and spares those of a live run (one holding its
run lock). A name is `<prefix><label>-<suffix>`; the prefixes:

- `env-`: an environment's cgroup (stage, gVisor), below the cgroup root (`rtax/`) or
  a capacity budget; the suffix 8 random hex digits. A label-less one is `env-<hex>`.
- `gvisor-probe-`: gVisor's probe's cgroup, `gvisor-probe-<label>-p<6 hex>`.
  (`CGROUP_KINDS` lists the cgroup kinds: a cleanup of the cgroup root spares each.)
- `batch-`: a capacity batch's budget cgroup, `batch-<run id>-<batch id>`.
- `rtax-ws-`: a host workspace, under the host's temporary directory; the host adds
  the random suffix (hosts/local.py, hosts/ssh.py).
- `rtax-`: a sandbox (gVisor's container id and state directory), a container
  (docker, podman; a label-less one is `rtax-x-<hex>`) and a VM (libvirt's domain,
  microvm's QEMU `-name`: the label cut to 32 characters, `x` if empty).
- `rtax-vm-`: a VM's directory, `rtax-vm-<VM name>-<random>` (the random part from
  mkdtemp).
- `rtax-swerex-`: the SWE-ReX worker thread of a run (no suffix).

`belongs` is the one question a cleanup or a reaper asks of a name: does it carry one
of these live labels? A label that is a prefix of another one followed by `-` (`a` and
`a-b`) is not told apart from it by name: a live `a` spares `a-b`'s leftovers too (left
for a later cleanup), and a cleanup of run `a` takes dead `a-b`'s as well. Neither
removes what a live run made: every candidate is checked against every live label.

Shell scripts that match these names take the prefixes from here (`sh_assign`), never
spelled again.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable

from rtax_tui.model.runlock import safe_label

__all__ = [
    "BATCH_CGROUP",
    "CGROUP_KINDS",
    "ENV_CGROUP",
    "PROBE_CGROUP",
    "SANDBOX",
    "SWEREX_WORKER",
    "VM_DIR",
    "WORKSPACE",
    "batch_cgroup",
    "batch_cgroup_prefix",
    "belongs",
    "container",
    "env_cgroup",
    "env_cgroup_prefix",
    "probe_cgroup",
    "probe_cgroup_prefix",
    "random_suffix",
    "safe_label",
    "sandbox",
    "sandbox_prefix",
    "sh_assign",
    "swerex_worker",
    "vm",
    "vm_dir_prefix",
    "vm_dirs_prefix",
    "vm_label",
    "vm_prefix",
    "workspace",
    "workspace_prefix",
]

ENV_CGROUP = "env-"
BATCH_CGROUP = "batch-"
WORKSPACE = "rtax-ws-"
SANDBOX = "rtax-"
VM_DIR = "rtax-vm-"
PROBE_CGROUP = "gvisor-probe-"
SWEREX_WORKER = "rtax-swerex-"
VM_LABEL_MAX = 32  # a VM name's label part (what QEMU's -name and a domain name carry)


def random_suffix() -> str:
    """The random end of a name: 8 hex digits."""
    return os.urandom(4).hex()


def _labelled(prefix: str, label: str | None) -> str:
    """`prefix<label>-`, or `prefix` alone for every label (None or empty)."""
    return f"{prefix}{label}-" if label else prefix


# -- cgroups -------------------------------------------------------------------


def env_cgroup(label: str, suffix: str | None = None) -> str:
    """An environment's cgroup (its last path component)."""
    s = safe_label(label)
    return f"{_labelled(ENV_CGROUP, s)}{suffix or random_suffix()}"


def env_cgroup_prefix(label: str | None) -> str:
    """What the env cgroups of run `label` (None: of every run) are named starting with."""
    return _labelled(ENV_CGROUP, safe_label(label) if label else None)


def probe_cgroup(label: str, suffix: str) -> str:
    """gVisor's probe's cgroup (of this process: `label` is its own)."""
    return f"{PROBE_CGROUP}{safe_label(label)}-{suffix}"


def probe_cgroup_prefix(label: str | None) -> str:
    return _labelled(PROBE_CGROUP, safe_label(label) if label else None)


def batch_cgroup(run_id: str, batch_id: object) -> str:
    """A capacity batch's budget cgroup; the run id in safe_label form, as the run lock
    lists it (else a run id that form changes would not be spared while its run lives)."""
    return f"{BATCH_CGROUP}{safe_label(run_id)}-{batch_id}"


def batch_cgroup_prefix(run_id: str | None) -> str:
    return _labelled(BATCH_CGROUP, safe_label(run_id) if run_id else None)


# every kind of cgroup rtax makes below its root: what `rtax cleanup` spares while the
# label it carries is live (a kind left out here is removed from under its live run)
CGROUP_KINDS: tuple[Callable[[str | None], str], ...] = (
    env_cgroup_prefix,
    batch_cgroup_prefix,
    probe_cgroup_prefix,
)


# -- workspaces ----------------------------------------------------------------


def workspace(label: str) -> str:
    """A workspace's name but its random rest (a label-less one: `rtax-ws--`)."""
    return f"{WORKSPACE}{safe_label(label)}-"


def workspace_prefix(label: str | None) -> str:
    """What a workspace of run `label` (None: of every run) is named starting with; a
    host adds the random rest (Host.make_workspace)."""
    return _labelled(WORKSPACE, safe_label(label) if label else None)


# -- sandboxes, containers, VMs ------------------------------------------------


def sandbox(label: str, suffix: str | None = None) -> str:
    """A gVisor sandbox (container id, state directory)."""
    return f"{SANDBOX}{safe_label(label)}-{suffix or random_suffix()}"


def sandbox_prefix(label: str | None) -> str:
    return _labelled(SANDBOX, safe_label(label) if label else None)


def container(label: str, suffix: str | None = None) -> str:
    """A docker or podman container's name."""
    return f"{SANDBOX}{safe_label(label) or 'x'}-{suffix or random_suffix()}"


def vm_label(label: str) -> str:
    """The label's part of a VM's name."""
    return safe_label(label)[:VM_LABEL_MAX] or "x"


def vm(label: str, suffix: str | None = None) -> str:
    """A VM's name (libvirt's domain, microvm's QEMU `-name`)."""
    return f"{SANDBOX}{vm_label(label)}-{suffix or random_suffix()}"


def vm_prefix(label: str | None) -> str:
    return _labelled(SANDBOX, vm_label(label) if label else None)


def vm_dir_prefix(name: str) -> str:
    """The directory of VM `name` (mkdtemp adds the random rest)."""
    return f"{VM_DIR}{name}-"


def vm_dirs_prefix(label: str | None) -> str:
    """What the VM directories of run `label` (None: of every run) start with."""
    return VM_DIR + vm_prefix(label) if label else VM_DIR


def swerex_worker(label: str) -> str:
    return f"{SWEREX_WORKER}{safe_label(label)}"


# -- what a cleanup asks -------------------------------------------------------


def belongs(name: str, live: Iterable[str], *kinds: Callable[[str], str]) -> bool:
    """Does `name` carry one of the `live` labels (safe_label form, as run locks list
    them) as a name of one of `kinds` (the prefix functions above, e.g.
    `env_cgroup_prefix`)?"""
    return any(name.startswith(kind(s)) for s in live if s for kind in kinds)


def sh_assign() -> str:
    """Shell assignments of the prefixes a cleanup script matches: `$ENV_CG` and `$WS`."""
    return f"ENV_CG={shlex.quote(ENV_CGROUP)} WS={shlex.quote(WORKSPACE)}\n"

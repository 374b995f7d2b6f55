"""The boundary checks of `rtax probe`: the catalogue (what each one means, whether it is
an escape or a guarantee, the names drivers promise), which drivers, the probe, the
report and the console all read.

Code inside an environment is hostile (written by a model under training), so a
driver's boundary is measured, never assumed. A check is an *escape* attempt
(passes as `blocked`) or a *guarantee* (passes as `held`). Wherever the host can
see the outcome itself, the verdict rests on that, not on what the environment
says: the sentinels hold random tokens that only a real read can print, the
probe's own host process logs every connection and signal it gets, and a write
into a host path counts only if the file appears on the host. Where the
environment runs its own kernel (a VM: its boot_id differs from the host's),
writes to kernel settings reach that kernel only and are not breaches.

The rest lives where it is used: how a step's output and the host's observations become
`blocked`, `held`, `breached` or `n/a` is the probe's (`engine.probe.classify`); the
probe's document, folded from `probe` events, is `model.probedoc`, which the engine's
probe, the report and the console all build or draw.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_FORMAT = "rtax-probe/1"

BLOCKED = "blocked"
HELD = "held"
BREACHED = "breached"
NA = "n/a"
RESULTS = (BLOCKED, HELD, BREACHED, NA)

ESCAPE = "escape"  # an attempt that must fail: passes as `blocked`
GUARANTEE = "guarantee"  # a property that must hold: passes as `held`

EVIDENCE_CHARS = 400
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"  # md5 of nothing


@dataclass(frozen=True)
class Check:
    name: str
    kind: str
    group: str
    means: str  # what it measures, for --help, the README and the console

    @property
    def passed(self) -> str:
        return BLOCKED if self.kind == ESCAPE else HELD


CHECKS: tuple[Check, ...] = (
    Check("tmp_sentinel", ESCAPE, "host files",
          "a file rtax planted under the host's temporary directory, named in the step, "
          "is visible or readable"),
    Check("cache_sentinel", ESCAPE, "host files",
          "a file rtax planted in its cache on the host (outside the workload's assets), "
          "named in the step, is visible or readable"),
    Check("assets_view", ESCAPE, "host files",
          "an environment whose workload names one of rtax's assets sees more of rtax's "
          "cache than that asset: the probe's sentinel in the cache, or another asset "
          "beside the named one"),
    Check("etc_shadow", ESCAPE, "host files",
          "the host's /etc/shadow is readable (the same md5 as the host's own)"),
    Check("root_home", ESCAPE, "host files",
          "a file rtax planted in the host's /root is visible or readable"),
    Check("usr_local", ESCAPE, "host files",
          "a file rtax planted in the host's /usr/local (the host's own installs) is visible "
          "or readable"),
    Check("host_paths", ESCAPE, "host files",
          "/proc (the mount table, cgroup paths, environment, pid 1's command line) names a "
          "path only the host knows: the environment's workspace on the host, rtax's cache, "
          "rtax's files in the host's temporary directory (stage's fixed /var/cache/rtax/"
          "stage-public is rtax's source, not the host's)"),
    Check("docker_socket", ESCAPE, "host sockets",
          "the Docker engine's socket on the host accepts a connection (root on the host)"),
    Check("podman_socket", ESCAPE, "host sockets",
          "a Podman API socket on the host accepts a connection (root on the host)"),
    Check("libvirt_socket", ESCAPE, "host sockets",
          "libvirtd's socket on the host accepts a connection (it can start VMs with "
          "host disks)"),
    Check("probe_socket", ESCAPE, "host sockets",
          "a unix socket the probe opened on the host accepts a connection "
          "(seen by the host)"),
    Check("vsock", ESCAPE, "host sockets",
          "a vsock socket is made and bound on the host's kernel (its port space is the "
          "host's, not a network namespace's)"),
    Check("remount_rw", ESCAPE, "mounts",
          "a host directory is written from inside, after remounting it read-write where "
          "needed (the file appears on the host)"),
    Check("block_devices", ESCAPE, "devices",
          "a node made with mknod for a host block device reads the host's disk"),
    Check("proc_sys", ESCAPE, "kernel",
          "a /proc/sys setting of the host's kernel is writable (written back unchanged)"),
    Check("sys_write", ESCAPE, "kernel",
          "a /sys setting of the host's kernel is writable (written back unchanged)"),
    Check("module_load", ESCAPE, "kernel",
          "the host kernel's module loader accepts the call (the image is refused: "
          "nothing is loaded)"),
    Check("proc_cmdline", ESCAPE, "kernel",
          "the host kernel's boot command line is readable (/proc/cmdline with the same md5 "
          "as the host's own)"),
    Check("cgroup_escape", ESCAPE, "cgroups",
          "a process moves itself out of its environment's cgroup"),
    Check("pids_limit", GUARANTEE, "cgroups",
          "a bounded fork bomb is stopped by the pid limit, and the host still answers"),
    Check("memory_limit", GUARANTEE, "cgroups",
          "a memory hog past the limit is killed inside the environment, and the host "
          "still answers"),
    Check("default_limits", GUARANTEE, "cgroups",
          "an environment with the default limits (no probe overrides) stops a bounded fork "
          "bomb of twice its default pids, and the host still answers"),
    Check("workspace_size", GUARANTEE, "cgroups",
          "a write of 64 MiB past the workspace's size stops at it (ENOSPC), and the free "
          "space of the workspace's filesystem on the host drops by no more than the size"),
    Check("host_sinks", GUARANTEE, "cgroups",
          "a step writes past its memory and workspace limits through every stream the "
          "host may keep (its own output, pid 1's stdout and stderr: an engine's log, "
          "gVisor's files, journald): the host directories that would hold them (engine "
          "container logs, /run, /var/log, rtax's cache but for the images its builders fill) "
          "grow by less than half of it"),
    Check("loopback_tcp", ESCAPE, "network",
          "a TCP listener the probe opened on the host's loopback is reachable"),
    Check("host_processes", ESCAPE, "processes",
          "host processes are visible (the probe's host process, by its command line)"),
    Check("host_signal", ESCAPE, "processes",
          "a host process receives a signal sent from inside (SIGCONT, seen by the host)"),
    Check("process_vm", ESCAPE, "processes",
          "a process of the environment reads another one's memory (process_vm_readv) or "
          "takes its descriptors (pidfd_getfd), as it could a grader's running beside it; "
          "no host process is reached"),
    Check("init_kill", ESCAPE, "processes",
          "a step kills the environment's pid 1 and every process it can (`kill -9 1`, "
          "`kill -9 -1`), and a later action succeeds without its environment's marker (it "
          "ran somewhere else); failing as lost, or seeing the marker, is blocked"),
    Check("other_env", ESCAPE, "environments",
          "another live environment's workspace is visible"),
    Check("workspace_persists", GUARANTEE, "guarantees",
          "a file written in the workspace is there at a later action of the same trial"),
    Check("fresh_env", GUARANTEE, "guarantees",
          "a fresh environment sees nothing of an earlier one's files (workspace, /tmp)"),
    Check("pool_reuse_clean", GUARANTEE, "guarantees",
          "a pooled environment after its clean (or snapshot) reset shows the next trial "
          "nothing of the last one: files, processes, variables, cwd (engine.probe.reuse)"),
    Check("reset_links", GUARANTEE, "guarantees",
          "a pooled environment's planting trial points links in /tmp, /workspace and "
          "/dev/shm (and /dev/shm itself, where it can) at a host directory: after the "
          "reset and the teardown, that directory and its file are intact on the host"),
    Check("deep_tree", GUARANTEE, "guarantees",
          "a 1,200-deep directory chain in the workspace and /tmp: the teardown does not "
          "fail and the workspace's path on the host is gone"),
    Check("cleanup_spares_live", GUARANTEE, "guarantees",
          "`rtax cleanup` (the driver's cleanup of every run) while an environment is "
          "alive: a later action in it succeeds and sees its marker"),
    Check("result_integrity", ESCAPE, "results",
          "earlier steps make a later step's failure read as a success: functions and "
          "aliases over the framing's tools, writing the shell's or init's memory, a "
          "background process printing frames (the recorded status differs from the real)"),
)  # fmt: skip
POOL_CHECK = "pool_reuse_clean"  # promised only where the driver has an in-place reset
LINKS_CHECK = "reset_links"  # measured by the same pool: promised as POOL_CHECK
RESET_CHECKS = frozenset({POOL_CHECK, LINKS_CHECK})
# Checks whose step may fail by design (a failure is their evidence, not n/a).
FAILING_STEPS = frozenset(
    {"pids_limit", "memory_limit", "default_limits", "init_kill", "cleanup_spares_live"}
)
INTEGRITY_CHECK = "result_integrity"  # promised per channel: Driver.integrity(channel)
BY_NAME: dict[str, Check] = {c.name: c for c in CHECKS}
ALL_CHECKS: frozenset[str] = frozenset(BY_NAME)
SOCKET_CHECKS = {"docker_socket": "docker", "podman_socket": "podman", "libvirt_socket": "libvirt"}
SENTINEL_CHECKS = ("tmp_sentinel", "cache_sentinel", "root_home", "usr_local")

"""The profile's schema, declared once: every table's keys, with type, default, bounds and help.

The loader (`engine.profile`) checks a profile through it, the console's launcher takes
its defaults from it, and the profile writer (`engine.profile_toml`) its `[run]` keys.
It imports only the model, never a driver or a host, so that the console may import it.
Its types, `Key` and `Table`, are the model's (`model.schema`, which says what a key's
fields mean): a driver declares its `[drivers_options.NAME]` table with them too.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from rtax_tui.model.inputs import (
    BATCH_MAX,
    BATCHES_MAX,
    CONCURRENCY_MAX,
    INT64_MAX,
    INT64_MIN,
    MIB_MAX,
    SECONDS_MAX,
    TRIALS_MAX,
)
from rtax_tui.model.schema import Key, Table
from rtax_tui.model.spec import Limits, Timeouts


def _field_defaults(cls: type) -> dict[str, Any]:
    """A model dataclass's defaults (timeouts and limits live in the model, below here)."""
    return {f.name: f.default for f in fields(cls)}


_TIMEOUT = _field_defaults(Timeouts)
_LIMIT = _field_defaults(Limits)
_SECONDS = (0.001, SECONDS_MAX)
_NUMBER = (int, float)

TOP = Table("", "the profile itself", {
    "name": Key((str,), None, "the profile's name (the file's name when left out)"),
    "description": Key((str,), "", "what this profile measures"),
})  # fmt: skip

RUN = Table("run", "which cells to run and how often", {
    "seed": Key((int,), 1, "the seed of the plan's order of trials", (INT64_MIN, INT64_MAX)),
    "trials": Key((int,), 30, "measured trials per cell", (1, TRIALS_MAX)),
    "warmup": Key((int,), 3, "trials per cell recorded but left out of the statistics",
                  (0, TRIALS_MAX)),
    "concurrency": Key((int,), 1, "trials in flight at once", (1, CONCURRENCY_MAX)),
    "hosts": Key((list,), ("local",),
                 "where: local, ssh://[user@]host[:port] or a [hosts.NAME] table's name",
                 items=(str,)),
    "drivers": Key((list,), ("local", "stage"), "the substrates measured",
                   items=(str,)),
    "workloads": Key((list,), ("t0",), "built-in workloads or [workloads.NAME] tables",
                     items=(str,)),
    "channels": Key((list,), ("exec",), "how steps reach an environment: exec, shell",
                    items=(str,)),
    "modes": Key((list,), None,
                 "cold, pool (none given: pool with a [pool] table, else cold)",
                 items=(str,)),
    "images": Key((list,), (),
                  "image modes: cached, pull (whole, from loopback), lazy (fetched as read)",
                  items=(str,)),
    "page_cache": Key((str,), "kept", "before each image phase: kept, or dropped (the host's)",
                      choices=("kept", "dropped")),
    "precision": Key((str,), None,
                     'rounds until each cell\'s P50 interval is within +-this of its P50 ("5%")'),
    "max_trials": Key((int,), None,
                      "with precision: measured trials per cell at most (none: 1000)",
                      (1, TRIALS_MAX)),
    "max_time": Key((str,), None,
                    'with precision: the run\'s time at most, "90s", "10m", "1h" (none: 10m)'),
    "arrivals": Key((list,), ("sequential",),
                    "sequential, burst:N (N at once), rate:R (Poisson arrivals, R a second)",
                    items=(str,)),
})  # fmt: skip

_PHASES = {
    "create": "creating an environment",
    "ready": "an environment's first command (its probe) returning",
    "action": "one step of a workload",
    "teardown": "discarding an environment",
    "barrier": "a capacity batch's wait at its barrier",
}
TIMEOUTS = Table("timeouts", "seconds each phase may take", {
    k: Key(_NUMBER, _TIMEOUT[k], f"seconds for {what}", _SECONDS) for k, what in _PHASES.items()
})  # fmt: skip

# A limit is a positive number or "unlimited" (checked by the loader's `_limit`); its most:
# a MiB count whose bytes still fit in a signed 64-bit integer (what cgroups, docker and
# the kernel take), a pid count the same.
LIMITS = Table("limits", 'per environment; a number or "unlimited"', {
    "cpus": Key((int, float, str), _LIMIT["cpus"], "CPUs", (0.01, 1 << 20)),
    "memory_mib": Key((int, str), _LIMIT["memory_mib"], "memory, MiB", (1, MIB_MAX)),
    "pids": Key((int, str), _LIMIT["pids"], "processes", (1, INT64_MAX)),
    "workspace_mib": Key((int, str), _LIMIT["workspace_mib"], "the workspace's size, MiB",
                         (1, MIB_MAX)),
})  # fmt: skip

CAPACITY = Table("capacity", "batches of environments of one cell at once, in one budget", {
    "size": Key((int,), 8, "environments per batch (without sizes)", (1, BATCH_MAX)),
    "batches": Key((int,), 3, "batches per cell (and size)", (1, BATCHES_MAX)),
    "deadline_s": Key(_NUMBER, 120.0, "seconds a batch has to arrive at its barrier",
                      _SECONDS),
    "cpus": Key(_NUMBER, None, "the batch's CPUs (none: not limited)", (0.01, 1 << 20)),
    "memory_mib": Key((int,), None, "the batch's memory, MiB (none: not limited)",
                      (1, MIB_MAX)),
    "swap_mib": Key((int,), 0, "the batch's swap, MiB", (0, MIB_MAX)),
    "touch_mib": Key((int,), 32, "private memory each environment touches and holds, MiB",
                     (1, 1 << 20)),
    "sizes": Key((list,), (), "a capacity curve: the batch sizes, each run `batches` times",
                 (1, BATCH_MAX), items=(int,)),
    "release_concurrency": Key((int,), 256, "release steps in flight at once, per batch",
                               (1, BATCH_MAX)),
})  # fmt: skip

POOL = Table("pool", "warm pools: environments kept ready per cell and host", {
    "size": Key((int,), 2, "environments per cell and host", (1, CONCURRENCY_MAX)),
    "reset": Key((str,), "recreate", "what a released environment gets",
                 choices=("recreate", "clean", "snapshot")),
    "refill": Key((str,), "eager", "eager: replace at once; lazy: when a trial finds none",
                  choices=("eager", "lazy")),
})  # fmt: skip

HOST = Table("hosts.NAME", "a remote host reached over SSH, or a Ray cluster's nodes (run.hosts "
             "names it)", {
    "address": Key((str,), None, "the host's name or address (SSH; or ray)", required=True),
    "user": Key((str,), None, "the SSH user (none: SSH's default)"),
    "port": Key((int,), 22, "the SSH port", (1, 65535)),
    "identity": Key((str,), None, "the private key's file (else --identity)"),
    "known_hosts": Key((str,), None, "the known_hosts file (else --known-hosts)"),
    "jump": Key((str,), None, "a jump host, [user@]host[:port]"),
    "concurrency": Key((int,), None, "trials in flight on this host at most",
                       (1, CONCURRENCY_MAX)),
    "ray": Key((str,), None, "a Ray cluster, not SSH: auto, HOST:PORT, ray://HOST:PORT"),
    "trusted": Key((bool,), False, "a Ray cluster off loopback may be joined (no auth in Ray)"),
    "nodes": Key((int,), None, "a Ray cluster: its first N alive nodes at most", (1, 100_000)),
})  # fmt: skip

WORKLOAD = Table("workloads.NAME", "a custom workload (or a replay: trajectory = ...)", {
    "steps": Key((list,), (), "its steps, tables of argv, expect_rc, expect_out, timeout_s"),
    "description": Key((str,), "", "what it does"),
    "files": Key((str,), None, "a directory the workspace is filled from"),
})  # fmt: skip

STEP = Table("steps", "one step of a custom workload", {
    "argv": Key((list,), None, "the command, a non-empty list of strings", required=True),
    "expect_rc": Key((int, str), 0, 'its exit code, or "nonzero"', (INT64_MIN, INT64_MAX)),
    "expect_out": Key((str,), None, "a string its output holds"),
    "timeout_s": Key(_NUMBER, None, "seconds it may take", _SECONDS),
})  # fmt: skip

# The tables of a profile with keys of their own, by name (`""`: the top level).
TABLES = {t.name: t for t in (TOP, RUN, TIMEOUTS, LIMITS, CAPACITY, POOL)}
# Tables of tables: `[hosts.NAME]`, `[workloads.NAME]`, and `[drivers_options.NAME]`,
# whose keys each driver declares (`Driver.options_type`, checked by `model.schema`).
NAMED_TABLES = ("workloads", "drivers_options", "hosts")

"""hosts/names.py: the names of what a run makes on a host, and which run a name is of."""

from __future__ import annotations

import subprocess

import pytest
from rtax_tui.drivers.toolkit import stage_site, workspace

from rtax_tui.hosts import names
from rtax_tui.model.runlock import safe_label

RUN = "20261205T185300Z-0a1b2c"


def test_names_are_what_recordings_and_leftover_checks_expect():
    assert names.env_cgroup(RUN, "deadbeef") == f"env-{RUN}-deadbeef"
    assert names.env_cgroup("", "deadbeef") == "env-deadbeef"
    assert names.batch_cgroup(RUN, 3) == f"batch-{RUN}-3"
    assert names.workspace("r/1 x") == "rtax-ws-r_1_x-"
    assert names.workspace("") == "rtax-ws--"
    assert names.sandbox(RUN, "0badc0de") == f"rtax-{RUN}-0badc0de"
    assert names.container("", "01") == "rtax-x-01"
    assert names.vm("v" * 50, "01") == f"rtax-{'v' * 32}-01"
    assert names.vm_dir_prefix(names.vm("r", "01")) == "rtax-vm-rtax-r-01-"
    assert names.swerex_worker("a:b") == "rtax-swerex-a_b"
    assert names.probe_cgroup("me", "p0a0b0c") == "gvisor-probe-me-p0a0b0c"
    # a label is cut to 40 characters, as the run lock lists it
    assert names.env_cgroup("l" * 60, "01") == f"env-{'l' * 40}-01"
    made = {names.env_cgroup(RUN) for _ in range(20)}
    assert len(made) == 20 and all(len(n) == len(f"env-{RUN}-") + 8 for n in made)


# (make a name of label L, the prefix functions a cleanup matches it by)
KINDS = [
    (lambda lb: names.env_cgroup(lb), names.env_cgroup_prefix),
    (lambda lb: names.batch_cgroup(lb, 7), names.batch_cgroup_prefix),
    (lambda lb: names.workspace(lb) + "k3j9x0", names.workspace_prefix),
    (lambda lb: names.sandbox(lb), names.sandbox_prefix),
    (lambda lb: names.vm(lb), names.vm_prefix),
    (lambda lb: names.vm_dir_prefix(names.vm(lb)) + "q1w2e3r4", names.vm_dirs_prefix),
]


@pytest.mark.parametrize("make,kind", KINDS)
@pytest.mark.parametrize("label", [RUN, "probe x/1", "w" * 45])
def test_a_name_is_recognised_as_its_runs(make, kind, label):
    name = make(label)
    live = {safe_label(label)}  # as run locks list labels
    assert name.startswith(kind(label))  # a cleanup of this run lists it
    assert name.startswith(kind(None))  # and so does a cleanup of every run
    assert names.belongs(name, live, kind)
    assert names.belongs(name, {"other", RUN + "0"} | live, kind)
    assert not names.belongs(name, {"other", RUN + "0", ""}, kind)
    assert not names.belongs(name, set(), kind)


@pytest.mark.parametrize("make,kind", KINDS)
def test_a_label_that_begins_another_one(make, kind):
    """Labels `a` and `a-b`. `a`'s names are never taken for `a-b`'s. `a-b`'s start like
    `a`'s (the prefix rule): a live `a` spares them (left for a later cleanup) and a
    cleanup of `a` lists them, but a live `a-b` spares them: no live run loses anything."""
    a, ab = make("a"), make("a-b")
    assert not names.belongs(a, {"a-b"}, kind)
    assert not a.startswith(kind("a-b"))
    assert names.belongs(ab, {"a-b"}, kind)
    assert names.belongs(ab, {"a"}, kind)  # conservative: spared while `a` lives
    assert ab.startswith(kind("a"))  # listed by a cleanup of `a`...
    assert names.belongs(ab, {"a", "a-b"}, kind)  # ...which spares it while `a-b` lives


def test_cleanup_asks_of_env_and_batch_cgroups_alike():
    cgs = (names.env_cgroup_prefix, names.batch_cgroup_prefix)
    assert names.belongs(names.env_cgroup(RUN), {RUN}, *cgs)
    assert names.belongs(names.batch_cgroup(RUN, 1), {RUN}, *cgs)
    assert not names.belongs(names.batch_cgroup(RUN, 1), {RUN}, names.env_cgroup_prefix)
    assert not names.belongs(names.sandbox(RUN), {RUN}, *cgs)


def test_the_cleanup_scripts_take_the_prefixes_from_the_module():
    for script in (stage_site.CLEANUP_SH, workspace.CLEANUP_SH):
        assert script.startswith(names.sh_assign())
        body = script[len(names.sh_assign()) :]
        assert names.ENV_CGROUP not in body and names.WORKSPACE not in body
    assert workspace.WORKSPACE_PREFIX == names.WORKSPACE  # plugins' name for it


@pytest.mark.parametrize(
    "name,live",
    [
        (names.env_cgroup("a-b"), "a"),
        (names.env_cgroup("a"), "a-b"),
        (names.env_cgroup(RUN), RUN),
        (names.env_cgroup(RUN), "x"),
        (names.sandbox(RUN), RUN),
    ],
    ids=["env-of-a-b/a", "env-of-a/a-b", "env-of-run/run", "env-of-run/x", "sandbox/run"],
)  # ids, not the names: each holds a random part, and xdist's workers must agree
def test_the_shell_sees_what_belongs_says(name, live):
    """The scripts' test of an env cgroup (`case ... in "$ENV_CG$l-"*`) agrees with
    `belongs` (it is run by sh, with the prefixes the module assigns)."""
    sh = names.sh_assign() + 'case $1 in "$ENV_CG$2-"*) echo y ;; *) echo n ;; esac'
    out = subprocess.run(["sh", "-c", sh, "t", name, live], capture_output=True, check=True)
    want = names.belongs(name, {live}, names.env_cgroup_prefix)
    assert out.stdout.decode().strip() == ("y" if want else "n")

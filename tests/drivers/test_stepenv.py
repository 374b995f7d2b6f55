"""A step's environment (drivers/toolkit/stepenv.py): every substrate's helper gives the
same common variables, differs only in PATH, HOME, TMPDIR and git's safe directories, and
lets the spec's own variables win."""

from __future__ import annotations

import pytest
from rtax_tui.drivers.toolkit import rootfs, sandbox, workspace

COMMON = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
HELPERS = {
    "workspace": lambda extra: workspace.base_env("/w/ws", extra, "/opt/bin:/bin"),
    "sandbox": sandbox.sandbox_env,
    "image": lambda extra: rootfs.image_env("/workspace", extra),
}


@pytest.mark.parametrize("name", HELPERS)
def test_every_helper_holds_the_common_rule_and_the_spec_wins(name):
    env = HELPERS[name]({})
    assert {k: env[k] for k in COMMON} == COMMON
    assert not {"USER", "SSH_AUTH_SOCK", "PYTHONPATH", "VIRTUAL_ENV"} & set(env)
    over = HELPERS[name]({"LANG": "fr_FR.UTF-8", "HOME": "/elsewhere", "X": "1"})
    assert (over["LANG"], over["HOME"], over["X"]) == ("fr_FR.UTF-8", "/elsewhere", "1")


def test_what_differs_between_substrates():
    ws = HELPERS["workspace"]({})
    assert (ws["PATH"], ws["HOME"], ws["TMPDIR"]) == ("/opt/bin:/bin", "/w/ws", "/w/ws")
    sb = HELPERS["sandbox"]({})
    assert (sb["HOME"], sb["TMPDIR"]) == ("/workspace", "/tmp")
    im = HELPERS["image"]({})
    assert (im["HOME"], im["TMPDIR"], im["PATH"]) == ("/workspace", "/tmp", rootfs.PATH_ENV)
    # only a root made here holds host-owned files git would call dubious
    safe = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0")
    assert [im[k] for k in safe] == ["1", "safe.directory", "*"]
    assert not set(safe) & (set(ws) | set(sb))

"""The environment variables of a step, one rule for every driver.

Every step starts from nothing of the controller's environment: a UTF-8 C locale, no
system git configuration, no bytecode written into the workspace (a replayed agent's
`git status` would see it), and the spec's own variables on top. What differs between
substrates is only where home, temporary files and programs are, and whether git must be
told that every directory is safe (a workspace or bound assets owned by a host uid, as
inside a container or a gVisor sandbox). The drivers' helpers (`workspace.base_env`,
`sandbox.sandbox_env`, `rootfs.image_env`) say those three things and nothing else.
"""

from __future__ import annotations

# The PATH inside every sandbox rtax makes (stage's; `local` by default too, issue 38):
# the programs a step runs are found in the same places whatever the driver.
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def step_env(
    *, path: str, home: str, tmpdir: str, extra: dict[str, str], git_safe_all: bool = False
) -> dict[str, str]:
    """The variables a step runs with: the common ones, then `extra` over them."""
    env = {
        "PATH": path,
        "HOME": home,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if git_safe_all:  # no "dubious ownership" refusals from git
        env |= {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": "*",
        }
    env.update(extra)
    return env

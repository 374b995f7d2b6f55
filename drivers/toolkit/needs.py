"""What a workload needs of an environment: the full image or root disk (python3, git).

Shared by the container drivers (busybox or Debian image) and the VM drivers (an
initramfs alone, or the Debian root disk).
"""

from __future__ import annotations

import os
import shlex

from rtax_tui.model.spec import Workload

# Programs the busybox image lacks: a workload that runs one gets the Debian image.
FULL_IMAGE_PROGRAMS = frozenset({"python", "python3", "git", "pytest", "pip", "pip3"})


def needs_full_image(workload: Workload) -> bool:
    """True for workloads that need the Debian image (python3, git, pytest): those with
    assets (t1, t2, trajectories) and any whose steps run one of FULL_IMAGE_PROGRAMS."""
    if workload.needs_assets:
        return True
    for step in workload.steps:
        words = list(step.argv)
        if len(words) >= 3 and os.path.basename(words[0]) in ("sh", "bash") and "-c" in words:
            try:
                words += shlex.split(words[words.index("-c") + 1])
            except (ValueError, IndexError):
                pass
        if any(os.path.basename(w) in FULL_IMAGE_PROGRAMS for w in words):
            return True
    return False

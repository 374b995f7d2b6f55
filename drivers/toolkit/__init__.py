"""What drivers share, so that a driver itself stays one module.

The framed shell channel (`shellframe`), workspaces (`workspace`), the sandbox pieces of
stage (`sandbox`, `seccomp`, `stage_site`, `stage_enter.c`), the container engines' common
driver (`container`), the VM guest agent and image (`vmguest`, `vmimage`), images and root
filesystems (`images`, `rootfs`), the workload's pinned assets (`assets`, `archive`) and
the tools a driver needs on its host (`needs`).
"""

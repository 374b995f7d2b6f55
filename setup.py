"""The one compiled part of rtax's install: the exec channel's spawn (rtax_tui/hosts/_spawnc.c).

Optional: without a C compiler or Python's headers (apt-get install gcc python3-dev) the
install goes on without it and rtax spawns through ctypes instead (rtax_tui/hosts/spawn.py).
Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rtax_tui.hosts._spawnc",
            ["rtax_tui/hosts/_spawnc.c"],
            extra_compile_args=["-O2", "-Wall"],
            optional=True,
        )
    ]
)

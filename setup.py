"""The package is described in pyproject.toml; this only makes a missing Rust toolchain
fail the build of the native core (native/) in one clear line."""

import os
import shutil

from setuptools import setup
from setuptools.errors import PlatformError
from setuptools_rust import build_rust


class build_native(build_rust):
    def run(self):
        cargo = os.environ.get("CARGO", "cargo")
        if shutil.which(cargo) is None:
            raise PlatformError(
                f"kafkawire's native core (native/, Rust) needs cargo, and {cargo!r} is not on PATH: "
                "install the Rust toolchain with rustup (https://rustup.rs), "
                "put ~/.cargo/bin on PATH (. ~/.cargo/env) and run pip again"
            )
        super().run()


setup(cmdclass={"build_rust": build_native})

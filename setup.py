"""The package is described in pyproject.toml; this makes a missing Rust toolchain fail the build
of the native core (native/) in one clear line, and builds an editable (development) install with
the core's test and bench entry points (the `test-hooks` feature), a wheel without them.
KAFKAWIRE_TEST_HOOKS=1 or 0 says otherwise."""

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
        hooks = os.environ.get("KAFKAWIRE_TEST_HOOKS")
        if hooks == "1" or hooks is None and self.inplace:
            for ext in self.distribution.rust_extensions:
                ext.features = [*(ext.features or ()), "test-hooks"]
        super().run()


setup(cmdclass={"build_rust": build_native})

"""The ``codemode`` command line (serve, exec, wait, catalog, check-config,
approvals, login, logout) from the native module: no Rust toolchain needed."""

from __future__ import annotations

import sys

from . import _native


def main() -> None:
    """Runs the command line to its end and exits with its status."""
    sys.exit(_native.run_cli(["codemode", *sys.argv[1:]]))


if __name__ == "__main__":
    main()

"""Entry point: `python -m runtime app.yaml`, or `python -m runtime <command> ...` (`--help` lists them)."""

import sys

from runtime.cli import main

sys.exit(main(sys.argv[1:]))

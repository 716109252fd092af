"""Entry point: `python -m runtime app.yaml` or `python -m runtime dev-kafka start|stop|status`."""

import sys

from runtime.cli import main

sys.exit(main(sys.argv[1:]))

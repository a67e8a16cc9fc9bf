"""``python -m cached``: the monitor starts its children this way."""

import sys

from cached.cli import main

sys.exit(main())

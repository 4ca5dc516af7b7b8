"""``python -m mdsfair.preprocess.converters``: the same as ``mdsfair-convert``."""

import sys

from mdsfair.preprocess.converters.driver import cli_main

sys.exit(cli_main())

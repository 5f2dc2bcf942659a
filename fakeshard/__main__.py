"""``python -m fakeshard``: the same as the ``fakeshard`` command."""

import sys

from fakeshard.cli import main

sys.exit(main())

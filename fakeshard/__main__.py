"""``python -m fakeshard``: the same as the ``fakeshard`` command."""

import sys

from fakeshard._cli import main

sys.exit(main())

"""``python -m vstream``: the same as the ``vstream`` command."""

import sys

from vstream.cli import main

sys.exit(main())

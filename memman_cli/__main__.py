"""``python -m memman_cli``: the same as the ``memman`` console script."""

import sys

from memman_cli.cli import main

sys.exit(main())

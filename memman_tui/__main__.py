"""``python -m memman_tui``: the terminal app alone (``memman tui`` does the same)."""

import sys

from memman_tui.app import main

raise SystemExit(main(sys.argv[1:]))

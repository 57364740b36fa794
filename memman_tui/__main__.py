import sys

from memman_tui.app import main

raise SystemExit(main(sys.argv[1:]))

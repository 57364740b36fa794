"""``python -m memman_daemon`` runs the daemon (same as ``memman daemon``)."""

import sys

from memman_daemon.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

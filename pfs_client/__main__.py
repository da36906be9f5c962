"""python -m pfs_client: the command line (pfs_client/cli.py)."""

import sys

from pfs_client.cli import main

sys.exit(main())

#!/usr/bin/env python
"""Django's command-line utility for PFS Studio."""

import os
import sys

if __name__ == "__main__":
    # PFS Studio's version: the one number of the server, the device SDK and the Python client
    # (CHANGELOG.md). Answered before Django, which takes `version` for its own number and would
    # need the settings first (`python -m django version` still gives Django's).
    if sys.argv[1:] == ["version"]:
        from pfs_device import __version__

        print(f"pfs-studio {__version__}")
        sys.exit(0)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pfs_web.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)

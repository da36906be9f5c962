"""A Python client and command line for the PFS Studio REST API (docs/client.md). Standard library only."""

# The same number as the server's and the device SDK's (pfs_device.__version__; CHANGELOG.md).
__version__ = "0.3.0"

from pfs_client.client import Client
from pfs_client.errors import AdaptiveRunFailed, ApiError, PfsError, RoundFailed, TransportError, WaitTimeout
from pfs_client.models import AdaptiveRun, Release, Round

__all__ = [
    "AdaptiveRun",
    "AdaptiveRunFailed",
    "ApiError",
    "Client",
    "PfsError",
    "Release",
    "Round",
    "RoundFailed",
    "TransportError",
    "WaitTimeout",
    "__version__",
]

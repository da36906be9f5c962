"""A Python client and command line for the PFS Studio REST API (docs/client.md). Standard library only."""

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
]

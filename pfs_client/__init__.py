"""A Python client and command line for the PFS Studio REST API (docs/client.md), over one httpx session."""

# The same number as the server's and the device SDK's (pfs_device.__version__; CHANGELOG.md).
__version__ = "0.3.0"

from pfs_client.client import Client
from pfs_client.errors import (
    AdaptiveRunFailed,
    ApiError,
    AuthenticationError,
    PfsError,
    RoundFailed,
    TransportError,
    WaitTimeout,
)
from pfs_client.models import AdaptiveRun, Analysis, Budget, BudgetScope, DryRun, Recipe, Release, Round

__all__ = [
    "AdaptiveRun",
    "AdaptiveRunFailed",
    "Analysis",
    "ApiError",
    "AuthenticationError",
    "Budget",
    "BudgetScope",
    "Client",
    "DryRun",
    "PfsError",
    "Recipe",
    "Release",
    "Round",
    "RoundFailed",
    "TransportError",
    "WaitTimeout",
    "__version__",
]

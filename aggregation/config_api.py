"""GET /hpke_config: this process's aggregator's HPKE configuration (DAP, "HPKE Configuration
Request"; pfs_device.hpke_config).

The leader's process serves the leader's, the helper's service (pfs_web.settings_helper) the
helper's: a device takes each aggregator's key from that aggregator, so a leader that served a
helper key of its own choosing would be caught by the device (docs/devices-sdk.md). Only the
current key is served; a retired one still opens the shares sealed to it (aggregation.aggregators).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from aggregation.aggregators import HELPER, LEADER, Aggregator
from pfs_device.hpke_config import MEDIA_TYPE, config_list_encode, config_of

# A device may keep a configuration this long (DAP: aggregators SHOULD allow caching); a retired
# key keeps opening its collections' shares for as long as they are open.
CACHE_SECONDS = 3600


def _config(aggregator: Aggregator) -> HttpResponse:
    body = config_list_encode([config_of(aggregator.public_key())])
    return HttpResponse(body, content_type=MEDIA_TYPE, headers={"Cache-Control": f"max-age={CACHE_SECONDS}"})


@require_GET
def hpke_config(request: HttpRequest) -> HttpResponse:
    """The leader's (pfs_web.urls)."""
    return _config(LEADER)


@require_GET
def helper_hpke_config(request: HttpRequest) -> HttpResponse:
    """The helper's, from its own service (pfs_web.urls_helper)."""
    return _config(HELPER)

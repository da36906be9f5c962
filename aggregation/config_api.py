"""GET /hpke_config: this process's aggregator's HPKE configuration (DAP, "HPKE Configuration
Request"; pfs_device.hpke_config).

The leader's process serves the leader's, the helper's service (pfs_web.settings_helper) the
helper's: a device takes each aggregator's key from that aggregator, so a leader that served a
helper key of its own choosing would be caught by the device (docs/devices-sdk.md). Only the
current key is served; a retired one still opens the shares sealed to it (aggregation.aggregators).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from aggregation.aggregators import HELPER, LEADER
from pfs_device.hpke_config import MEDIA_TYPE, config_list_encode, config_of

# A device may keep a configuration this long (DAP: aggregators SHOULD allow caching); a retired
# key keeps opening its collections' shares for as long as they are open.
CACHE_SECONDS = 3600


@require_GET
def hpke_config(request: HttpRequest) -> HttpResponse:
    aggregator = HELPER if settings.PFS_ROLE == "helper" else LEADER
    body = config_list_encode([config_of(aggregator.public_key())])
    return HttpResponse(body, content_type=MEDIA_TYPE, headers={"Cache-Control": f"max-age={CACHE_SECONDS}"})

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from aggregation.api import IssuedCount
from aggregation.config_api import hpke_config
from aggregation.gateway_api import ohttp_gateway, ohttp_keys


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico on a first visit: the app's icon, from its static files."""
    return HttpResponseRedirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The OpenAPI 3 schema and its two readers, served from vendored files (drf-spectacular-sidecar).
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("hpke_config", hpke_config, name="hpke-config"),  # the leader's own (DAP); the helper serves its
    path("api/device/", include("devices.api_urls")),  # real devices: tasks, tokens, report uploads
    # The Oblivious Gateway (RFC 9458) in front of the upload: its key configuration, its capsules.
    path("api/ohttp/keys", ohttp_keys, name="api-ohttp-keys"),
    path("api/ohttp/", ohttp_gateway, name="api-ohttp-gateway"),
    # The token issuer's signed count of its tokens for a collection (aggregation.statements).
    path("api/issuer/collections/<path:collection_key>/issued", IssuedCount.as_view(), name="api-issuer-issued"),
    path("api/", include("analyses.api.urls")),
    path("", include("analyses.urls")),
]

# An unknown /api/ path, or a crash outside the API's views, answers in the API's error format.
handler404 = "pfs_base.api_errors.json_not_found"
handler500 = "pfs_base.api_errors.json_server_error"

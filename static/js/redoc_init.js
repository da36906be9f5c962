// The ReDoc page (templates/drf_spectacular/redoc.html): a file, not an inline script, so that the
// Content-Security-Policy can say script-src 'self' (pfs_base/security_headers.py). The schema's
// address and ReDoc's settings come from the container's data attributes.
"use strict";

(function () {
  const container = document.getElementById("redoc-container");
  const settings = JSON.parse(container.dataset.settings || "{}");
  Redoc.init(container.dataset.schemaUrl, settings, container);
})();

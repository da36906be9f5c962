// The Swagger UI page (templates/drf_spectacular/swagger_ui.html): drf-spectacular's
// swagger_ui.js as a file, not an inline script, so that the Content-Security-Policy can say
// script-src 'self' (pfs_base/security_headers.py). What the template filled in there (the schema's
// address, the settings, the schema's auth names, the CSRF header and token) comes from the
// container's data attributes.
"use strict";

(function () {
  const container = document.getElementById("swagger-ui");
  const data = container.dataset;
  const swaggerSettings = JSON.parse(data.settings || "{}");
  const schemaAuthNames = JSON.parse(data.schemaAuthNames || "[]");
  let schemaAuthFailed = false;
  let ui;
  const plugins = [];

  const reloadSchema = (ori) => (...args) => {
    schemaAuthFailed = false;
    setTimeout(() => ui.specActions.download());
    return ori(...args);
  };
  if (schemaAuthNames.length > 0) {
    plugins.push(() => ({
      statePlugins: {
        auth: { wrapActions: { authorizeOauth2: reloadSchema, authorize: reloadSchema, logout: reloadSchema } },
      },
    }));
  }

  const isSchemaUrl = (url) => ui !== undefined && url === new URL(ui.getConfigs().url, document.baseURI).href;

  const responseInterceptor = (response) => {
    if (!response.ok && isSchemaUrl(response.url)) {
      console.warn("schema request received '" + response.status + "'. disabling credentials for schema till logout.");
      if (!schemaAuthFailed) {
        // only retry once to prevent endless loop.
        schemaAuthFailed = true;
        setTimeout(() => ui.specActions.download());
      }
    }
    return response;
  };

  const injectAuthCredentials = (request) => {
    let authorized;
    if (ui !== undefined) {
      const state = ui.getState().get("auth").get("authorized");
      if (state !== undefined && Object.keys(state.toJS()).length !== 0) {
        authorized = state.toJS();
      }
    } else if (![undefined, "{}"].includes(localStorage.authorized)) {
      authorized = JSON.parse(localStorage.authorized);
    }
    if (authorized === undefined) {
      return;
    }
    for (const authName of schemaAuthNames) {
      const authDef = authorized[authName];
      if (authDef === undefined || authDef.schema === undefined) {
        continue;
      }
      if (authDef.schema.type === "http" && authDef.schema.scheme === "bearer") {
        request.headers["Authorization"] = "Bearer " + authDef.value;
        return;
      } else if (authDef.schema.type === "http" && authDef.schema.scheme === "basic") {
        request.headers["Authorization"] = "Basic " + btoa(authDef.value.username + ":" + authDef.value.password);
        return;
      } else if (authDef.schema.type === "apiKey" && authDef.schema.in === "header") {
        request.headers[authDef.schema.name] = authDef.value;
        return;
      } else if (authDef.schema.type === "oauth2" && authDef.token.token_type === "Bearer") {
        request.headers["Authorization"] = `Bearer ${authDef.token.access_token}`;
        return;
      }
    }
  };

  const requestInterceptor = (request) => {
    if (request.loadSpec && schemaAuthNames.length > 0 && !schemaAuthFailed) {
      try {
        injectAuthCredentials(request);
      } catch (e) {
        console.error("schema auth injection failed with error: ", e);
      }
    }
    // selectively omit adding headers to mitigate CORS issues.
    if (!["GET", undefined].includes(request.method) && request.credentials === "same-origin") {
      request.headers[data.csrfHeaderName] = data.csrfToken;
    }
    return request;
  };

  ui = SwaggerUIBundle({
    url: data.schemaUrl,
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    plugins,
    layout: "BaseLayout",
    requestInterceptor,
    responseInterceptor,
    ...swaggerSettings,
  });

  if (data.oauth2Config) {
    ui.initOAuth(JSON.parse(data.oauth2Config));
  }
})();

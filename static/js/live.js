// Pages that follow something running (a round, an adaptive run) update in place: they fetch the
// page again and patch <main>, never reload it. A reload started by a poll while the analyst's
// click on Pause, Cancel or Close is being sent aborts that POST (ERR_ABORTED) and the action is
// lost. So: once a form is submitted, nothing more is patched and no poll navigates; and a patch
// waits while the analyst is typing in a field of the page.
(function () {
  "use strict";
  let submitting = false;
  let lastServerHtml = null;

  // Bubbling on the document runs after the form's own listeners (a confirm() that says no
  // prevents the submit: then the page goes on following).
  document.addEventListener("submit", (event) => {
    if (!event.defaultPrevented) submitting = true;
  });

  // Each response masks the CSRF token anew: not a change of the page.
  const comparable = (html) => html.replace(/name="csrfmiddlewaretoken" value="[^"]*"/g, "");

  const typing = () => {
    const active = document.activeElement;
    return Boolean(active && active.closest("main") && active.matches("textarea, input:not([type=submit]):not([type=button]):not([type=range]), select"));
  };

  function loadMissingScripts(fresh) {
    // Scripts the patched page needs that this one did not load (plotly and the chart on a round
    // that has just been released), in order, each after the one before.
    const have = new Set(Array.from(document.scripts, (s) => s.src).filter(Boolean));
    const wanted = Array.from(fresh.querySelectorAll("script[src]"), (s) => new URL(s.getAttribute("src"), window.location.href).href);
    return wanted
      .filter((src) => !have.has(src))
      .reduce(
        (previous, src) =>
          previous.then(
            () =>
              new Promise((resolve) => {
                const script = document.createElement("script");
                script.src = src;
                script.onload = script.onerror = resolve;
                document.body.append(script);
              })
          ),
        Promise.resolve()
      );
  }

  // Fetch the page again and replace <main> if the server's HTML of it changed. Focus (by id) and
  // open <details> (by id) are kept. Resolves to true when the page was patched.
  async function patch() {
    if (submitting || typing()) return false;
    const response = await fetch(window.location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (!response.ok || submitting || typing()) return false;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const main = document.querySelector("main");
    const freshMain = fresh.querySelector("main");
    if (!main || !freshMain || comparable(freshMain.innerHTML) === lastServerHtml) return false;
    const focused = document.activeElement && document.activeElement.id;
    const open = Array.from(main.querySelectorAll("details[id]"), (d) => [d.id, d.open]);
    lastServerHtml = comparable(freshMain.innerHTML);
    // The outcome of the last action (#messages) was shown once by the server: it stays, except a
    // message about something running ("Round 12 started", .while-running) once it has finished.
    const messages = document.getElementById("messages");
    if (messages && !freshMain.querySelector("#messages")) {
      if (freshMain.querySelector('[data-finished="true"]')) messages.querySelectorAll(".while-running").forEach((m) => m.remove());
      if (messages.querySelector(".message")) freshMain.prepend(messages);
    }
    main.replaceChildren(...Array.from(freshMain.childNodes, (node) => document.importNode(node, true)));
    open.forEach(([id, isOpen]) => {
      const details = document.getElementById(id);
      if (details) details.open = isOpen;
    });
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
    await loadMissingScripts(fresh);
    document.dispatchEvent(new CustomEvent("live:patched"));
    return true;
  }

  window.PfsLive = {
    patch,
    get submitting() {
      return submitting;
    },
    // What the server sent for <main> at load, before any script drew into it.
    remember() {
      const main = document.querySelector("main");
      if (main && lastServerHtml === null) lastServerHtml = comparable(main.innerHTML);
    },
  };
  window.PfsLive.remember();
})();

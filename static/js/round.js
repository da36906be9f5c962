// Follows a running round: polls its status.json every half second, shows shards done, devices
// answered and not answering by reason, elapsed time and time left, and once the round ends
// (released, failed or cancelled) patches the page in place to show what it came to (live.js: a
// reload would abort a Cancel being sent). A round on real devices is patched every 5 s. The
// cancel button asks first.
(function () {
  "use strict";
  const cancel = document.getElementById("cancel-form");
  if (cancel) {
    cancel.addEventListener("submit", (event) => {
      const sure = window.confirm(
        "Cancel this round? Nothing will be released; devices that already answered keep their budget spent."
      );
      if (!sure) event.preventDefault();
    });
  }

  const collection = document.getElementById("collection");
  if (collection && collection.dataset.finished !== "true") {
    const again = () => {
      if (window.PfsLive.submitting) return;
      window.PfsLive.patch().finally(() => {
        const now = document.getElementById("collection");
        if (now && now.dataset.finished !== "true") setTimeout(again, 5000);
      });
    };
    setTimeout(again, 5000);
    return;
  }
  const section = document.getElementById("progress");
  if (!section || section.dataset.finished === "true") return;
  const bar = document.getElementById("round-progress");
  const grouped = (n) => Number(n).toLocaleString("en-US"); // as the server writes counts: 100,000
  const show = (id, value) => {
    const element = document.getElementById(id);
    if (element.textContent !== String(value)) element.textContent = value;
  };

  // The reasons in words, as the server writes them (analyses/templatetags/reasons.py).
  const words = JSON.parse((document.getElementById("reason-words") || { textContent: "{}" }).textContent);

  function showRefusals(reasons) {
    const body = document.querySelector("#refusals tbody");
    const entries = Object.entries(reasons);
    const rows = entries.length ? entries : [["None so far.", undefined]];
    body.replaceChildren(
      ...rows.map(([reason, count]) => {
        const row = document.createElement("tr");
        const name = document.createElement("td");
        name.textContent = words[reason] || reason;
        row.append(name);
        if (count === undefined) {
          name.colSpan = 2;
        } else {
          // null: not counted while a batch may yet be suppressed (its size would follow)
          const cell = document.createElement("td");
          cell.className = "num";
          cell.textContent = count === null ? "not counted" : grouped(count);
          row.append(cell);
        }
        return row;
      })
    );
  }

  async function poll() {
    let progress;
    try {
      const response = await fetch(section.dataset.url, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (!response.ok) throw new Error(response.statusText);
      progress = await response.json();
    } catch (error) {
      return setTimeout(poll, 2000); // a restart of the server, say: try again a little later
    }
    if (window.PfsLive.submitting) return; // the analyst's action is on its way: it shows the outcome
    if (progress.finished) {
      // Patched in place; should the fetch fail, the next poll tries again.
      return window.PfsLive.patch().then(
        (patched) => patched || window.PfsLive.submitting || setTimeout(poll, 2000),
        () => setTimeout(poll, 2000)
      );
    }
    bar.max = Math.max(progress.shards_total, 1);
    bar.value = progress.shards_done;
    bar.textContent = `${progress.shards_done} of ${progress.shards_total} shards`;
    show("round-status", progress.status_display);
    show("shards-done", grouped(progress.shards_done));
    show("shards-total", grouped(progress.shards_total));
    show("devices-answered", grouped(progress.devices_answered));
    show("elapsed", progress.elapsed_text);
    show("eta", progress.eta_text);
    showRefusals(progress.devices_not_answering);
    setTimeout(poll, 500);
  }
  poll();
})();

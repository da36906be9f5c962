// Follows a running round: polls the round's API every half second and reloads once it ends.
(function () {
  "use strict";
  const section = document.getElementById("progress");
  if (!section || section.dataset.finished === "true") return;
  const bar = document.getElementById("round-progress");
  const show = (id, value) => { document.getElementById(id).textContent = value; };

  async function poll() {
    const response = await fetch(section.dataset.url, { headers: { Accept: "application/json" } });
    if (!response.ok) return setTimeout(poll, 2000);
    const round = await response.json();
    const progress = round.progress;
    bar.max = Math.max(progress.shards_total, 1);
    bar.value = progress.shards_done;
    show("round-status", round.status);
    show("shards-done", progress.shards_done);
    show("shards-total", progress.shards_total);
    show("devices-answered", progress.devices_answered);
    if (round.status === "released" || round.status === "failed") return window.location.reload();
    setTimeout(poll, 500);
  }
  poll();
})();

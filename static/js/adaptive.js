// The run page of an adaptive analysis: draws the discovered prefix tree (a sunburst that grows
// level by level) or each refinement round's histogram, and follows a run that is not finished by
// polling its status.json and patching the page in place (live.js) when a level is recorded or the
// status changes.
// Without JavaScript the page still reads: every chart has a table with the same numbers.
(function () {
  "use strict";

  const dataElement = document.getElementById("adaptive-chart-data");
  let data = dataElement ? JSON.parse(dataElement.textContent) : null;
  const config = { responsive: true, displaylogo: false };
  const fmt = (x) => (x === null || x === undefined ? "—" : Number(x).toFixed(1));

  function drawTree(levelsShown) {
    const tree = data.tree[levelsShown - 1];
    const hover = tree.customdata.map((d, i) =>
      d[1] === null
        ? `${tree.ids[i]}<br>not kept`
        : `${tree.ids[i]}<br>level ${d[0]}<br>estimate ${fmt(d[1])}<br>95% interval [${fmt(d[2])}, ${fmt(d[3])}]`
    );
    Plotly.react(
      "tree-chart",
      [
        {
          type: "sunburst",
          ids: tree.ids,
          parents: tree.parents,
          labels: tree.labels,
          values: tree.values,
          branchvalues: "total",
          hovertext: hover,
          hoverinfo: "text",
          insidetextorientation: "radial",
        },
      ],
      { margin: { t: 10, l: 10, r: 10, b: 10 } },
      config
    );
  }

  function drawHistograms() {
    document.querySelectorAll(".level-chart").forEach((element) => {
      const level = data.levels[Number(element.dataset.level)];
      Plotly.newPlot(
        element,
        [
          {
            type: "bar",
            x: level.labels,
            y: level.estimates,
            error_y: { type: "data", array: level.errors, visible: true },
            marker: { color: level.split.map((s) => (s ? "#2457c5" : "#9aa6bd")) },
            hovertemplate: "%{x}: %{y:.0f}<extra></extra>",
          },
        ],
        {
          margin: { t: 20 },
          xaxis: { title: { text: level.title || "bucket (dark: split for the next round)" }, type: "category" },
          yaxis: { title: { text: "estimated devices (95% CI)" } },
        },
        config
      );
    });
  }

  function drawCharts() {
    if (!data || typeof Plotly === "undefined") return;
    if (data.kind === "ngram_discovery" && data.tree.length && document.getElementById("tree-chart")) {
      const slider = document.getElementById("tree-level");
      const shown = document.getElementById("tree-level-value");
      if (data.tree.length > 1) {
        document.getElementById("tree-controls").hidden = false;
        slider.addEventListener("input", () => {
          shown.textContent = slider.value;
          drawTree(Number(slider.value));
        });
      }
      drawTree(data.tree.length);
      // The chart drew: its table, open for readers without JavaScript, folds away (one click opens it).
      const details = document.getElementById("tree-details");
      if (details) details.open = false;
    } else if (data.kind === "bucket_refinement") {
      drawHistograms();
    }
  }

  function follow() {
    let polls = 0;
    const show = (id, value) => {
      const element = document.getElementById(id);
      if (element) element.textContent = value;
    };

    async function poll() {
      // The section as the server last drew it: a patch replaces it, with its data-* state.
      const section = document.getElementById("adaptive-progress");
      if (!section || section.dataset.follow !== "true" || window.PfsLive.submitting) return;
      let run;
      try {
        const response = await fetch(section.dataset.url, {
          headers: { Accept: "application/json" },
          credentials: "same-origin",
        });
        if (!response.ok) throw new Error(String(response.status));
        run = await response.json();
      } catch (error) {
        return setTimeout(poll, 3000); // the server may be restarting: try again, more slowly
      }
      if (window.PfsLive.submitting) return; // Pause or Continue is on its way: its page follows
      const current = run.current_round;
      // A level recorded, the status changed, another round sent (the static baseline's next
      // one) or the comparison arrived: the page is patched in place (never reloaded, which
      // would abort a Pause being sent), then followed from its new state.
      const changed =
        run.levels.length !== Number(section.dataset.levels) ||
        run.status !== section.dataset.status ||
        String(current ? current.id : "") !== section.dataset.current ||
        Boolean(run.comparison) !== (section.dataset.comparison === "true");
      if (changed) {
        let patched = false;
        try {
          patched = await window.PfsLive.patch();
        } catch (error) {
          patched = false;
        }
        return setTimeout(poll, patched ? 500 : 1500);
      }
      if (current) {
        show("current-label", current.label);
        show("round-status", current.progress.status);
        show("shards-done", current.progress.shards_done.toLocaleString("en-US"));
        show("shards-total", current.progress.shards_total.toLocaleString("en-US"));
        show("devices-answered", current.progress.devices_answered.toLocaleString("en-US"));
        const bar = document.getElementById("round-progress");
        bar.max = Math.max(current.progress.shards_total, 1);
        bar.value = current.progress.shards_done;
      }
      // Paused with nothing in flight: nothing changes until the analyst acts.
      if (run.status === "paused" && !current) return;
      // Finished, the comparison on ground truth to come: more slowly, and not forever.
      if (run.status === "finished" || run.status === "failed") {
        if (!run.comparison_pending || (polls += 1) > 200) return;
        return setTimeout(poll, 3000);
      }
      setTimeout(poll, 1500);
    }
    setTimeout(poll, 1500);
  }

  // A patch brings new tables, chart boxes and chart data: draw them.
  document.addEventListener("live:patched", () => {
    const fresh = document.getElementById("adaptive-chart-data");
    data = fresh ? JSON.parse(fresh.textContent) : null;
    drawCharts();
  });

  drawCharts();
  follow();
})();

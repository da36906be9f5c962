// The run page of an adaptive analysis: folds the discovered prefix tree's table into a tree (its
// 1-grams first, ▸ opens a prefix's extensions; a sunburst of 142 leaves was slivers) and draws
// the same tree as a sunburst when its <details> opens, or draws each refinement round's histogram;
// and follows a run that is not finished by polling its status.json and patching the page in
// place (live.js) when a level is recorded or the status changes.
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

  // The table lists the tree depth first; each row names its prefix (data-parent). A row shows
  // when every prefix above it is open; each prefix row gets a toggle button that says so.
  function foldTree() {
    const table = document.getElementById("tree-table");
    if (!table || table.dataset.folded === "true") return;
    table.dataset.folded = "true";
    const rows = [...table.tBodies[0].rows];
    const byId = new Map(rows.map((row) => [row.dataset.id, row]));
    const parents = new Set(rows.map((row) => row.dataset.parent).filter(Boolean));
    const refresh = () =>
      rows.forEach((row) => {
        let parent = byId.get(row.dataset.parent);
        let shown = true;
        while (parent && shown) {
          shown = parent.dataset.open === "true";
          parent = byId.get(parent.dataset.parent);
        }
        row.hidden = !shown;
      });
    rows.forEach((row) => {
      const cell = row.cells[0];
      if (!parents.has(row.dataset.id)) {
        const spacer = document.createElement("span");
        spacer.className = "tree-leaf";
        cell.prepend(spacer);
        return;
      }
      const kids = rows.filter((other) => other.dataset.parent === row.dataset.id).length;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "tree-toggle";
      button.setAttribute("aria-label", `${row.dataset.id}: ${kids} extension${kids === 1 ? "" : "s"}`);
      const show = (open) => {
        row.dataset.open = String(open);
        button.setAttribute("aria-expanded", String(open));
        button.textContent = open ? "▾" : "▸";
      };
      show(false);
      button.addEventListener("click", () => {
        show(row.dataset.open !== "true");
        refresh();
      });
      cell.prepend(button);
    });
    refresh();
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
    foldTree(); // the table needs no plotly
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
      // Drawn once its <details> is open: plotly sizes a chart by its box, which is 0 while closed.
      const details = document.getElementById("tree-sunburst");
      const draw = () => details.open && drawTree(Number(slider.value));
      details.addEventListener("toggle", draw);
      draw();
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

// Draws the release: a bar chart per bucket with 95% intervals as whiskers, one trace per released
// cohort; a joint histogram (CombinationType) as a heatmap of its two fields, one per cohort.
(function () {
  "use strict";
  const release = JSON.parse(document.getElementById("release-data").textContent);
  const released = release.batches.filter((b) => !b.suppressed);
  const config = { responsive: true, displaylogo: false };

  if (release.joint && release.joint.labels.length === 2) {
    // Buckets are row-major over the fields, the last varying fastest: row i holds the first
    // field's bucket i against every bucket of the second.
    const [rows, columns] = release.joint.labels;
    const traces = released.map((batch, k) => ({
      type: "heatmap",
      name: batch.cohort || "all devices",
      x: columns,
      y: rows,
      z: rows.map((_, i) => columns.map((_, j) => batch.buckets[i * columns.length + j].estimate)),
      colorscale: "Blues",
      xaxis: "x" + (k ? k + 1 : ""),
      yaxis: "y" + (k ? k + 1 : ""),
      showscale: k === 0,
      hovertemplate: "%{y} × %{x}: %{z:.0f}<extra>" + (batch.cohort || "all devices") + "</extra>",
    }));
    const layout = {
      grid: { rows: traces.length, columns: 1, pattern: "independent" },
      height: 320 * traces.length + 80,
      margin: { t: 30, l: 110 },
    };
    traces.forEach((trace, k) => {
      const suffix = k ? k + 1 : "";
      layout["xaxis" + suffix] = { type: "category", title: { text: release.joint.fields[1] + " · " + trace.name } };
      layout["yaxis" + suffix] = { type: "category", title: { text: release.joint.fields[0] } };
    });
    Plotly.newPlot("chart", traces, layout, config);
    return;
  }

  const traces = released.map((batch) => ({
    type: "bar",
    name: batch.cohort || "all devices",
    x: batch.buckets.map((b) => b.label),
    y: batch.buckets.map((b) => b.estimate),
    error_y: {
      type: "data",
      symmetric: false,
      array: batch.buckets.map((b) => b.ci95[1] - b.estimate),
      arrayminus: batch.buckets.map((b) => b.estimate - b.ci95[0]),
    },
    hovertemplate: "%{x}: %{y:.0f}<extra>%{fullData.name}</extra>",
  }));
  Plotly.newPlot("chart", traces, {
    barmode: "group",
    margin: { t: 30 },
    xaxis: { title: { text: release.field + " bucket" }, type: "category" },
    yaxis: { title: { text: "estimated devices (95% CI)" } },
  }, config);
})();

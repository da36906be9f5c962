// Draws the release as a plotly bar chart: one trace per released cohort, 95% intervals as whiskers.
(function () {
  "use strict";
  const release = JSON.parse(document.getElementById("release-data").textContent);
  const traces = release.batches.filter((b) => !b.suppressed).map((batch) => ({
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
  }, { responsive: true, displaylogo: false });
})();

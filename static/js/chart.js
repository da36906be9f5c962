// Draws the release: a bar chart per bucket with 95% intervals as whiskers, one panel per released
// cohort; a joint histogram (CombinationType) as a heatmap of its two fields, one per cohort.
// With #drilldown-data on the page, clicking a bar or a cell opens the analysis page with a
// refined recipe for that bucket (the table's Refine links do the same without a pointer).
(function () {
  "use strict";
  const release = JSON.parse(document.getElementById("release-data").textContent);
  const drilldownData = document.getElementById("drilldown-data");
  const drilldown = drilldownData ? JSON.parse(drilldownData.textContent) : null;
  const released = release.batches.filter((b) => !b.suppressed);
  const config = { responsive: true, displaylogo: false };
  const cohortName = (batch) => batch.cohort || "all devices";
  const refinable = (bucket) => Boolean(drilldown && drilldown.refinable[bucket]);
  const hint = (bucket) => (refinable(bucket) ? "<br>click to refine" : "");

  // With cohorts, each panel is titled by its cohort, above it (not only in its axis title).
  function panelTitles(traces) {
    if (traces.length < 2) return [];
    return traces.map((trace, k) => ({
      text: "<b>Cohort " + trace.name + "</b>",
      xref: "x" + (k ? k + 1 : "") + " domain",
      yref: "y" + (k ? k + 1 : "") + " domain",
      x: 0,
      y: 1.04,
      xanchor: "left",
      yanchor: "bottom",
      showarrow: false,
    }));
  }

  function followClicks(bucketOf) {
    if (!drilldown) return;
    const chart = document.getElementById("chart");
    chart.on("plotly_click", (event) => {
      const point = event.points[0];
      const bucket = bucketOf(point);
      if (!refinable(bucket)) return;
      const query = new URLSearchParams({ refine: drilldown.round, cohort: point.data.meta, bucket });
      window.location.assign(`${drilldown.url}?${query}`);
    });
  }

  if (release.joint && release.joint.labels.length === 2) {
    // Buckets are row-major over the fields, the last varying fastest: row i holds the first
    // field's bucket i against every bucket of the second.
    const [rows, columns] = release.joint.labels;
    const bucketAt = (i, j) => i * columns.length + j;
    const traces = released.map((batch, k) => ({
      type: "heatmap",
      name: cohortName(batch),
      meta: batch.cohort,
      x: columns,
      y: rows,
      z: rows.map((_, i) => columns.map((_, j) => batch.buckets[bucketAt(i, j)].estimate)),
      text: rows.map((_, i) => columns.map((_, j) => hint(bucketAt(i, j)))),
      colorscale: "Blues",
      xaxis: "x" + (k ? k + 1 : ""),
      yaxis: "y" + (k ? k + 1 : ""),
      showscale: k === 0,
      hovertemplate: "%{y} × %{x}: %{z:,.0f}%{text}<extra>" + cohortName(batch) + "</extra>",
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
    layout.annotations = panelTitles(traces);
    Plotly.newPlot("chart", traces, layout, config).then(() =>
      // A heatmap's point index is [row, column].
      followClicks((point) => bucketAt(point.pointIndex[0], point.pointIndex[1]))
    );
    return;
  }

  // One panel per cohort (small multiples), each with its own axes, so cohorts of very different
  // sizes stay readable.
  const traces = released.map((batch, k) => ({
    type: "bar",
    name: cohortName(batch),
    meta: batch.cohort,
    x: batch.buckets.map((b) => b.label),
    y: batch.buckets.map((b) => b.estimate),
    text: batch.buckets.map((_, i) => hint(i)),
    textposition: "none",
    xaxis: "x" + (k ? k + 1 : ""),
    yaxis: "y" + (k ? k + 1 : ""),
    error_y: {
      type: "data",
      symmetric: false,
      array: batch.buckets.map((b) => b.ci95[1] - b.estimate),
      arrayminus: batch.buckets.map((b) => b.estimate - b.ci95[0]),
    },
    hovertemplate: "%{x}: %{y:,.0f}%{text}<extra>%{fullData.name}</extra>",
  }));
  const layout = {
    grid: { rows: Math.max(traces.length, 1), columns: 1, pattern: "independent" },
    height: traces.length > 1 ? 300 * traces.length + 80 : 420,
    margin: { t: 30 },
    showlegend: false,
  };
  traces.forEach((trace, k) => {
    const suffix = k ? k + 1 : "";
    const cohort = traces.length > 1 ? " · " + trace.name : "";
    layout["xaxis" + suffix] = { title: { text: release.field + " bucket" + cohort }, type: "category" };
    layout["yaxis" + suffix] = { title: { text: "estimated devices (95% CI)" }, tickformat: ",d" };
  });
  layout.annotations = panelTitles(traces);
  Plotly.newPlot("chart", traces, layout, config).then(() => followClicks((point) => point.pointIndex));
})();

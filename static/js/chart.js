// Draws the release: a bar chart per bucket with 95% intervals as whiskers, one panel per released
// cohort, the panels on one y scale, in counts or (the toggle above the chart) in percent of each
// cohort's reports; a joint histogram (CombinationType) as a heatmap of its two fields, one per cohort.
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
    const element = document.getElementById("chart");
    const narrow = window.PfsPlot.narrow(element);
    // On a phone the colour scale lies across the top: at the side it took a fifth of the width.
    const colorbar = narrow
      ? { orientation: "h", yref: "container", y: 1, yanchor: "top", x: 0.5, xanchor: "center", thickness: 10, len: 0.9 }
      : {};
    const traces = released.map((batch, k) => ({
      type: "heatmap",
      colorbar,
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
    // Between panels: the slanted tick labels, then the next panel's title (as for the bars below).
    const layout = {
      grid: { rows: traces.length, columns: 1, pattern: "independent", ygap: narrow ? 0.55 : 0.4 },
      height: (narrow ? 460 : 340) * traces.length + 80,
      margin: { t: (narrow ? 50 : 0) + (traces.length > 1 ? 30 : 10) },
    };
    traces.forEach((trace, k) => {
      const suffix = k ? k + 1 : "";
      // Each panel is titled by its cohort; the second field's axis is named once, under the last.
      const last = k === traces.length - 1;
      layout["xaxis" + suffix] = { type: "category", title: { text: last ? release.joint.fields[1] : "" } };
      layout["yaxis" + suffix] = { type: "category", title: { text: release.joint.fields[0] } };
    });
    layout.annotations = panelTitles(traces);
    Plotly.newPlot(element, traces, window.PfsPlot.layout(element, layout), config).then(() =>
      // A heatmap's point index is [row, column].
      followClicks((point) => bucketAt(point.pointIndex[0], point.pointIndex[1]))
    );
    return;
  }

  // One panel per cohort (small multiples) on one shared y scale, so panels compare at a glance:
  // in counts, or in percent of each cohort's reports, where cohorts of very different sizes
  // compare too (a report is one device's one bucket, so a cohort's counts sum to its reports).
  const element = document.getElementById("chart");
  const scale = document.getElementById("chart-scale");
  const percentOf = (batch) => (value) => (batch.reports ? (100 * value) / batch.reports : null);

  function barTraces(percent) {
    return released.map((batch, k) => {
      const shown = percent ? percentOf(batch) : (value) => value;
      return {
        type: "bar",
        name: cohortName(batch),
        meta: batch.cohort,
        x: batch.buckets.map((b) => b.label),
        y: batch.buckets.map((b) => shown(b.estimate)),
        text: batch.buckets.map((_, i) => hint(i)),
        textposition: "none",
        xaxis: "x" + (k ? k + 1 : ""),
        yaxis: "y" + (k ? k + 1 : ""),
        error_y: {
          type: "data",
          symmetric: false,
          array: batch.buckets.map((b) => shown(b.ci95[1]) - shown(b.estimate)),
          arrayminus: batch.buckets.map((b) => shown(b.estimate) - shown(b.ci95[0])),
        },
        hovertemplate: percent
          ? "%{x}: %{y:.1f}% of the cohort's reports%{text}<extra>%{fullData.name}</extra>"
          : "%{x}: %{y:,.0f}%{text}<extra>%{fullData.name}</extra>",
      };
    });
  }

  function barLayout(traces, percent) {
    // Between panels: the tick labels (slanted on a phone), then the next panel's title.
    const narrow = window.PfsPlot.narrow(element);
    const layout = {
      grid: { rows: Math.max(traces.length, 1), columns: 1, pattern: "independent", ygap: narrow ? 0.7 : 0.4 },
      height: traces.length > 1 ? (narrow ? 380 : 320) * traces.length + 80 : 420,
      margin: { t: traces.length > 1 ? 30 : 10 },
      showlegend: false,
    };
    const title = percent ? "% of the cohort's reports (95% CI)" : "estimated devices (95% CI)";
    traces.forEach((trace, k) => {
      const suffix = k ? k + 1 : "";
      // Each panel is titled by its cohort; the bucket axis is named once, under the last panel.
      const last = k === traces.length - 1;
      layout["xaxis" + suffix] = { title: { text: last ? release.field + " bucket" : "" }, type: "category" };
      layout["yaxis" + suffix] = { title: { text: title }, tickformat: percent ? ".1f" : ",d" };
      if (k) layout["yaxis" + suffix].matches = "y";
    });
    layout.annotations = panelTitles(traces);
    return window.PfsPlot.layout(element, layout);
  }

  function drawBars(percent) {
    const traces = barTraces(percent);
    return Plotly.react(element, traces, barLayout(traces, percent), config);
  }

  drawBars(false).then(() => followClicks((point) => point.pointIndex));
  if (scale) {
    scale.hidden = false;
    scale.addEventListener("change", () => drawBars(scale.querySelector("input:checked").value === "percent"));
  }
})();

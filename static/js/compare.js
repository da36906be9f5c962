// Draws each cohort of a comparison: one grouped bar chart, a bar per release and bucket, with the
// release's own 95% interval as whiskers. A bucket one release lacks has no bar on that side.
(function () {
  "use strict";
  const comparison = JSON.parse(document.getElementById("compare-data").textContent);
  const config = { responsive: true, displaylogo: false };
  const colours = { a: "#2457c5", b: "#c55a11" };

  function trace(cohort, side) {
    const release = comparison[side];
    const buckets = cohort.buckets;
    const value = (row, pick) => (row[side] ? pick(row[side]) : null);
    return {
      type: "bar",
      name: side.toUpperCase() + ": round " + release.round + " (ε = " + release.epsilon + ")",
      marker: { color: colours[side] },
      x: buckets.map((row) => row.label),
      y: buckets.map((row) => value(row, (e) => e.estimate)),
      error_y: {
        type: "data",
        symmetric: false,
        array: buckets.map((row) => value(row, (e) => e.ci95[1] - e.estimate)),
        arrayminus: buckets.map((row) => value(row, (e) => e.estimate - e.ci95[0])),
      },
      hovertemplate: "%{x}: %{y:.0f}<extra>%{fullData.name}</extra>",
    };
  }

  // Long bucket labels ("below 20 or missing") on a phone: bars lie down, labels on the y axis,
  // where they have a line each instead of overlapping under a narrow x axis.
  const longest = (cohort) => Math.max(0, ...cohort.buckets.map((row) => row.label.length));

  document.querySelectorAll(".compare-chart").forEach((element) => {
    const cohort = comparison.cohorts[Number(element.dataset.cohort)];
    const sideways = window.PfsPlot.narrow(element) && cohort.buckets.length * longest(cohort) > 60;
    const traces = [trace(cohort, "a"), trace(cohort, "b")];
    const buckets = { title: { text: "bucket" }, type: "category" };
    const counts = { title: { text: "estimated devices (95% CI)" } };
    let layout = { barmode: "group", xaxis: buckets, yaxis: counts };
    if (sideways) {
      traces.forEach((t) => {
        [t.x, t.y] = [t.y, t.x];
        t.orientation = "h";
        t.error_x = t.error_y;
        delete t.error_y;
        t.hovertemplate = "%{y}: %{x:.0f}<extra>%{fullData.name}</extra>";
      });
      const rows = cohort.buckets.map((row) => row.label);
      layout = {
        barmode: "group",
        height: Math.max(420, 44 * rows.length + 140),
        xaxis: counts,
        yaxis: { ...buckets, categoryorder: "array", categoryarray: [...rows].reverse() },
      };
    }
    Plotly.newPlot(element, window.PfsPlot.traces(element, traces), window.PfsPlot.layout(element, layout), config);
  });
})();

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

  document.querySelectorAll(".compare-chart").forEach((element) => {
    const cohort = comparison.cohorts[Number(element.dataset.cohort)];
    Plotly.newPlot(element, [trace(cohort, "a"), trace(cohort, "b")], {
      barmode: "group",
      margin: { t: 30 },
      xaxis: { title: { text: "bucket" }, type: "category" },
      yaxis: { title: { text: "estimated devices (95% CI)" } },
      legend: { orientation: "h" },
    }, config);
  });
})();

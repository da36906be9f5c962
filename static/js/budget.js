// Draws the budget burn-down: per scope (the analysis, each field) a step line of what was used
// after each round started, and a dashed line at what the policy allows, in the same colour.
(function () {
  "use strict";
  const burndown = JSON.parse(document.getElementById("burndown-data").textContent);
  const colours = ["#2457c5", "#c55a11", "#2e8540", "#8e44ad", "#b3261e", "#00838f"];
  const config = { responsive: true, displaylogo: false };
  const times = burndown.scopes.flatMap((s) => s.points.map((p) => p.created_at));
  // The lines start at zero when the analysis was approved (or at the first round, if earlier).
  const start = [burndown.approved_at, ...times].filter(Boolean).sort()[0];
  const end = new Date().toISOString();

  function draw(elementId, key, allowedKey, title) {
    const traces = [];
    burndown.scopes.forEach((scope, i) => {
      const colour = colours[i % colours.length];
      traces.push({
        type: "scatter",
        mode: "lines+markers",
        name: scope.scope + " used",
        legendgroup: scope.scope,
        // The analysis line is drawn wide and pale: a field that every round read lies right on it.
        line: { shape: "hv", color: colour, width: i === 0 ? 6 : 2 },
        opacity: i === 0 ? 0.45 : 1,
        x: [start, ...scope.points.map((p) => p.created_at), end],
        y: [0, ...scope.points.map((p) => p[key]), scope[key + "_used"]],
        text: ["", ...scope.points.map((p) => "round " + p.round + " (" + p.recipe + ", " + p.status + ")"), "now"],
        hovertemplate: "%{y}<br>%{text}<extra>" + scope.scope + "</extra>",
      });
      if (scope[allowedKey] !== null) {
        traces.push({
          type: "scatter",
          mode: "lines",
          name: scope.scope + " allowed",
          legendgroup: scope.scope,
          line: { dash: "dash", color: colour, width: 1.5 },
          x: [start, end],
          y: [scope[allowedKey], scope[allowedKey]],
          hovertemplate: "allowed: %{y}<extra>" + scope.scope + "</extra>",
        });
      }
    });
    // Reports are whole numbers: integer ticks, at most about eight of them.
    const yaxis = { title: { text: title }, rangemode: "tozero" };
    if (key === "reports") {
      const top = Math.max(1, ...traces.flatMap((t) => t.y));
      Object.assign(yaxis, { tick0: 0, dtick: Math.max(1, Math.ceil(top / 8)), tickformat: ",d" });
    }
    Plotly.newPlot(elementId, traces, {
      margin: { t: 40 },
      title: { text: title },
      xaxis: { title: { text: "round started" }, type: "date" },
      yaxis,
    }, config);
  }

  draw("epsilon-chart", "epsilon", "epsilon_allowed", "aggregate epsilon used");
  draw("reports-chart", "reports", "reports_allowed", "reports used");
})();

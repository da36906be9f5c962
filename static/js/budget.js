// Draws the budget burn-down: per scope (the analysis, each field) a step line of what was used
// after each round started, and a dashed step line, in the same colour, at what the approved policy
// allowed at each time: it steps where a privacy officer approved a new budget.
(function () {
  "use strict";
  const burndown = JSON.parse(document.getElementById("burndown-data").textContent);
  const colours = ["#2457c5", "#c55a11", "#2e8540", "#8e44ad", "#b3261e", "#00838f"];
  const config = { responsive: true, displaylogo: false };
  const times = burndown.scopes.flatMap((s) => s.points.map((p) => p.created_at));
  // The lines start at zero at the first approval (or at the first round, if earlier).
  const start = [burndown.allowance_from, ...times].filter(Boolean).sort()[0];
  const end = new Date().toISOString();

  function draw(elementId, key, title) {
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
      // steps: [{at, epsilon, reports}] from each approval that changed this scope's budget.
      // A null step (a field without a policy then) leaves a gap in the line.
      const steps = scope.allowed_steps;
      if (steps.some((step) => step[key] !== null)) {
        const last = steps[steps.length - 1];
        traces.push({
          type: "scatter",
          mode: "lines",
          name: scope.scope + " allowed (as approved at the time)",
          legendgroup: scope.scope,
          line: { dash: "dash", color: colour, width: 1.5, shape: "hv" },
          x: [...steps.map((step) => step.at), end],
          y: [...steps.map((step) => step[key]), last[key]],
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

  draw("epsilon-chart", "epsilon", "aggregate epsilon used");
  draw("reports-chart", "reports", "reports used");
})();

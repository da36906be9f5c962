// Draws the budget burn-down: per scope (the analysis, each field) a step line of what was used
// after each round started, and a dashed step line, in the same colour, at what the approved policy
// allowed at each time: it steps where a privacy officer approved a new budget.
// The x axis is the rounds in the order they started, one step each (with the time in the hover):
// on a time axis rounds started seconds apart collapsed into one step.
(function () {
  "use strict";
  const burndown = JSON.parse(document.getElementById("burndown-data").textContent);
  const colours = ["#2457c5", "#c55a11", "#2e8540", "#8e44ad", "#b3261e", "#00838f"];
  const config = { responsive: true, displaylogo: false };
  const when = (time) => new Date(time).toISOString().replace("T", " ").slice(0, 19) + " UTC";

  // Every round any scope counts, in the order started: one category each, "#12".
  const rounds = new Map();
  burndown.scopes.forEach((scope) =>
    scope.points.forEach((point) => rounds.set(point.round, { round: point.round, at: point.created_at }))
  );
  const started = [...rounds.values()].sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.round - b.round));
  // The lines start at zero at the first approval (or at the first round, if earlier), and end now.
  const startAt = [burndown.allowance_from, ...started.map((r) => r.at)].filter(Boolean).sort()[0];
  const columns = [
    { label: "start", at: startAt },
    ...started.map((r) => ({ label: "#" + r.round, at: r.at, round: r.round })),
    { label: "now", at: new Date().toISOString() },
  ];
  const x = columns.map((column) => column.label);

  // What the approved policy allowed at each column's time; null before the scope had a budget.
  function allowedAt(steps, at, key) {
    let value = null;
    steps.forEach((step) => {
      if (step.at <= at) value = step[key];
    });
    return value;
  }

  function draw(elementId, key, title) {
    const element = document.getElementById(elementId);
    const traces = [];
    burndown.scopes.forEach((scope, i) => {
      const colour = colours[i % colours.length];
      const byRound = new Map(scope.points.map((p) => [p.round, p]));
      let used = 0;
      const y = columns.map((column) => {
        const point = byRound.get(column.round);
        if (point) used = point[key];
        return column.label === "now" ? scope[key + "_used"] : used;
      });
      const text = columns.map((column) => {
        const point = byRound.get(column.round);
        if (point) {
          return `round ${point.round} (${point.recipe}, ${point.status})<br>started ${when(point.created_at)}`;
        }
        if (column.round) return `round ${column.round} did not read this scope<br>started ${when(column.at)}`;
        return `${column.label}: ${when(column.at)}`;
      });
      traces.push({
        type: "scatter",
        mode: "lines+markers",
        name: scope.scope + " used",
        legendgroup: scope.scope,
        // The analysis line is drawn wide and pale: a field that every round read lies right on it.
        line: { shape: "hv", color: colour, width: i === 0 ? 6 : 2 },
        opacity: i === 0 ? 0.45 : 1,
        x,
        y,
        text,
        hovertemplate: "%{y}<br>%{text}<extra>" + scope.scope + "</extra>",
      });
      // steps: [{at, epsilon, reports}] from each approval that changed this scope's budget.
      // A null (a field without a policy then) leaves a gap in the line.
      const steps = scope.allowed_steps;
      if (steps.some((step) => step[key] !== null)) {
        traces.push({
          type: "scatter",
          mode: "lines",
          name: scope.scope + " allowed (as approved at the time)",
          legendgroup: scope.scope,
          line: { dash: "dash", color: colour, width: 1.5, shape: "hv" },
          x,
          y: columns.map((column) => allowedAt(steps, column.at, key)),
          text: columns.map((column) => when(column.at)),
          hovertemplate: "allowed: %{y}<br>%{text}<extra>" + scope.scope + "</extra>",
        });
      }
    });
    // Reports are whole numbers: integer ticks, at most about eight of them.
    const yaxis = { title: { text: title }, rangemode: "tozero" };
    if (key === "reports") {
      const top = Math.max(1, ...traces.flatMap((t) => t.y));
      Object.assign(yaxis, { tick0: 0, dtick: Math.max(1, Math.ceil(top / 8)), tickformat: ",d" });
    }
    const layout = window.PfsPlot.layout(element, {
      xaxis: {
        title: { text: "rounds, in the order they started" },
        type: "category",
        categoryorder: "array",
        categoryarray: x,
      },
      yaxis,
    });
    Plotly.newPlot(element, window.PfsPlot.traces(element, traces), layout, config);
  }

  draw("epsilon-chart", "epsilon", "aggregate ε used");
  draw("reports-chart", "reports", "reports used");
})();

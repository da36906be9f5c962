// What every page needs once it has drawn, on any screen:
// - a wide table scrolls inside its own box instead of widening the page (a phone is 390 px); the
//   box joins the tab order only while it does scroll, so the keyboard can scroll it too;
// - plotly's toolbar (zoom, pan, download) stays for the pointer but leaves the tab order: its ten
//   buttons were invisible tab stops on every chart, and each chart's table has its numbers.
(function () {
  "use strict";

  // A plot's layout on any screen (window.PfsPlot.layout, used by every chart's script): the legend
  // above the plot area in rows (plotly grows the top margin for it), never at the side, where it
  // left a 110 px plot on a phone, nor below, where it covered the x axis's title; every axis makes
  // room for its own tick labels and title (automargin), so nothing is cut; on a narrow box smaller
  // text, tighter margins and slanted x labels. A chart's own settings win over these.
  const NARROW = 600;
  function plotLayout(element, layout) {
    const narrow = element.clientWidth < NARROW;
    const merged = {
      font: { size: narrow ? 11 : 13 },
      margin: { t: 10, r: narrow ? 8 : 20, b: 10, l: 10, ...(layout.margin || {}) },
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom", ...(layout.legend || {}) },
    };
    const out = { ...layout, ...merged };
    Object.keys(out)
      .filter((key) => /^[xy]axis\d*$/.test(key))
      .forEach((key) => {
        // Tick marks outside hold the labels off the axes, so the two axes' first labels (a log
        // axis's "100" and the y axis's "0") do not meet in the corner.
        out[key] = { automargin: true, ticks: "outside", ticklen: 4, tickcolor: "#b8bfcc", ...out[key] };
        if (narrow && key.startsWith("x")) out[key] = { tickangle: "auto", ...out[key] };
        if (out[key].title) out[key].title = { standoff: 8, ...out[key].title };
      });
    return out;
  }
  // plotly never wraps a legend entry: on a narrow box a long trace name is broken into lines at
  // its spaces (at most about WRAP characters a line), or it ran off the chart's edge.
  const WRAP = 34;
  function wrapped(name) {
    const lines = [""];
    name.split(" ").forEach((word) => {
      const line = lines[lines.length - 1];
      if (line && line.length + word.length + 1 > WRAP) lines.push(word);
      else lines[lines.length - 1] = line ? line + " " + word : word;
    });
    return lines.join("<br>");
  }
  function plotTraces(element, traces) {
    if (element.clientWidth >= NARROW) return traces;
    return traces.map((trace) => (trace.name ? { ...trace, name: wrapped(trace.name) } : trace));
  }
  window.PfsPlot = { layout: plotLayout, traces: plotTraces, narrow: (element) => element.clientWidth < NARROW };

  function label(table) {
    const caption = table.querySelector("caption");
    if (caption && caption.textContent.trim()) return caption.textContent.trim();
    const section = table.closest("section, details");
    const heading = section && section.querySelector("h2, h3, summary");
    return heading ? heading.textContent.trim() : "Table";
  }

  function scrollable(box) {
    const scrolls = box.scrollWidth > box.clientWidth + 1;
    if (scrolls) {
      box.tabIndex = 0;
      box.setAttribute("role", "region");
      if (!box.hasAttribute("aria-label") && !box.hasAttribute("aria-labelledby")) {
        box.setAttribute("aria-label", label(box.querySelector("table")) + " (scrolls sideways)");
      }
    } else if (box.dataset.wrapped === "true") {
      box.removeAttribute("tabindex");
      box.removeAttribute("role");
      box.removeAttribute("aria-label");
    }
  }

  function wrapTables(root) {
    root.querySelectorAll("table.data").forEach((table) => {
      if (table.parentElement.classList.contains("scroll-x")) return;
      const box = document.createElement("div");
      box.className = "scroll-x";
      box.dataset.wrapped = "true";
      table.before(box);
      box.append(table);
    });
    root.querySelectorAll(".scroll-x").forEach(scrollable);
  }

  function quietToolbars(root) {
    root.querySelectorAll(".chart .modebar-btn, .chart .modebar a").forEach((button) => {
      if (button.tabIndex !== -1) button.tabIndex = -1;
    });
    root.querySelectorAll(".chart.js-plotly-plot").forEach((chart) => {
      // A chart box with plotly's toolbar in it holds controls: a figure, not a flat image.
      if (chart.getAttribute("role") === "img") chart.setAttribute("role", "figure");
      // Drawn while hidden or at another width, a chart is wider than its box: fit it.
      const svg = chart.querySelector("svg.main-svg");
      if (svg && window.Plotly && svg.getBoundingClientRect().width > chart.clientWidth + 1) {
        window.Plotly.Plots.resize(chart);
      }
    });
  }

  function tidy() {
    wrapTables(document);
    quietToolbars(document);
  }

  tidy();
  // Charts draw (and pages patch themselves, live.js) after this runs: tidy what they add.
  let queued = false;
  new MutationObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      tidy();
    });
  }).observe(document.querySelector("main") || document.body, { childList: true, subtree: true });
  window.addEventListener("resize", () => document.querySelectorAll(".scroll-x").forEach(scrollable));
})();

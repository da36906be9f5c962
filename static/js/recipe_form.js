// The recipe editor (templates/analyses/detail.html), on top of a form that works without it:
// - the form and Figure 4's JSON kept in sync (the server's mapping is RecipeForm._recipe_from_fields;
//   this mirrors it, and the page gives the field -> recipe key table in #recipe-paths);
// - the recipe checked as you type by POST .../recipes/validate/ (recipe_validate is the only judge),
//   its messages placed next to the fields they name, and the budget it would cost;
// - the live privacy figures from the calculators API (/api/privacy/*): the minimum cohort devices
//   will enforce, or the aggregators' noise, and the curve of aggregate epsilon against cohort size.
(function () {
  "use strict";
  const form = document.getElementById("recipe-form");
  const out = document.getElementById("privacy-preview");
  if (!form || !out) return;
  const jsonBox = form.elements.recipe_json;
  const jsonStatus = document.getElementById("recipe-json-status");
  const alertBox = document.getElementById("recipe-alert");
  const summaryBox = document.getElementById("recipe-summary");
  const errorLine = document.getElementById("standard-error");
  const chart = document.getElementById("curve-chart");
  const curveBody = document.querySelector("#curve-table tbody");
  const caption = document.getElementById("curve-caption");
  const enforcedHeader = document.getElementById("curve-enforced-header");
  const paths = JSON.parse(document.getElementById("recipe-paths").textContent); // form field -> recipe key
  const fieldFor = Object.fromEntries(Object.entries(paths).map(([name, path]) => [path, name]));
  const fleetSize = Number(out.dataset.fleetSize);
  const deletionModel = (out.dataset.deletionModel || "").split(",");
  const csrf = form.elements.csrfmiddlewaretoken.value;
  const PRIVACY_FIELDS = [
    "noise",
    "noise_distribution",
    "mechanism",
    "epsilon0",
    "epsilon",
    "delta",
    "sampling_rate",
    "min_cohort",
  ];
  const value = (name) => (form.elements[name] ? form.elements[name].value.trim() : "");
  const key = (name) => paths[name].split(".").pop(); // privacy.epsilon0 -> epsilon0
  const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
  const count = (n) => Number(n).toLocaleString("en-US");
  let pending = null;

  // ------------------------------------------------------------ form <-> JSON

  // Indented JSON with short arrays on one line, as the server writes it (forms._dumps). JSON
  // strings hold no raw newline, so ",\n" only ever separates items.
  function stringify(recipe) {
    return JSON.stringify(recipe, null, 2).replace(
      /\[\n\s+([^[\]{}]*?)\n\s*\]/g,
      (_, items) => `[${items.replace(/,\n\s*/g, ", ")}]`
    );
  }

  // A form value as the JSON holds it: a number when it reads as one, null when empty, else the
  // text itself (so that the server names the problem at its key).
  function asJson(text) {
    if (text === "") return null;
    const number = Number(text);
    return Number.isFinite(number) ? number : text;
  }

  function boundaries() {
    return value("boundaries")
      .replace(/;/g, ",")
      .split(",")
      .filter((part) => part.trim())
      .map((part) => asJson(part.trim()));
  }

  function checkedCohorts() {
    return Array.from(form.querySelectorAll('input[name="cohorts"]:checked')).map((box) => box.value);
  }

  function privacyFromForm(previous) {
    const privacy = { noise: value("noise") || "client" };
    if (privacy.noise === "client") {
      privacy[key("mechanism")] = value("mechanism");
      privacy[key("epsilon0")] = asJson(value("epsilon0"));
    }
    // The discrete Laplace is pure ε-DP: the recipe names it and carries no δ.
    const laplace = privacy.noise === "aggregator" && value("noise_distribution") === "laplace";
    if (laplace) privacy[key("noise_distribution")] = "laplace";
    for (const name of ["epsilon", "delta", "sampling_rate"]) {
      if (!(laplace && name === "delta")) privacy[key(name)] = asJson(value(name));
    }
    if (value("min_cohort") !== "") privacy[key("min_cohort")] = asJson(value("min_cohort"));
    // Keys the form has no field for stay as the analyst wrote them.
    const kept = isObject(previous) ? { ...previous } : {};
    for (const name of PRIVACY_FIELDS) delete kept[key(name)];
    return { ...privacy, ...kept };
  }

  // What each form field writes into the recipe. A form edit rewrites only its own keys, so keys
  // the form cannot show (a recipeIdentifier, another data type) survive edits elsewhere.
  const writers = {
    field(recipe) {
      recipe.query = `select ${value("field")} from ${form.dataset.stream}`;
      writers.boundaries(recipe);
    },
    boundaries(recipe) {
      recipe.dataTypeContent = { [value("field")]: { dataType: "BucketedType", boundaries: boundaries() } };
    },
    cohorts(recipe) {
      recipe.cohorts = checkedCohorts();
    },
    privacy(recipe) {
      recipe.privacy = privacyFromForm(recipe.privacy);
    },
  };

  function writerOf(name) {
    return writers[name] || (PRIVACY_FIELDS.includes(name) ? writers.privacy : null);
  }

  function recipeFromForm() {
    const recipe = { version: "1", AnalysisIdentifier: form.dataset.analysis };
    writers.field(recipe);
    writers.cohorts(recipe);
    // The server's key order: query, cohorts, dataTypeContent, privacy.
    const { dataTypeContent } = recipe;
    delete recipe.dataTypeContent;
    recipe.dataTypeContent = dataTypeContent;
    writers.privacy(recipe);
    return recipe;
  }

  function setControl(name, text) {
    const control = form.elements[name];
    if (!control) return;
    if (control.tagName === "SELECT" && !Array.from(control.options).some((o) => o.value === text)) return;
    control.value = text;
  }

  // The JSON's values into the fields they map to; what a field cannot show is left alone.
  function formFromRecipe(recipe) {
    const selected = /^\s*select\s+(\w+)\s+from\s+\w+\s*$/i.exec(typeof recipe.query === "string" ? recipe.query : "");
    if (selected) setControl("field", selected[1]);
    const schema = isObject(recipe.dataTypeContent) ? recipe.dataTypeContent[value("field")] : null;
    if (isObject(schema) && Array.isArray(schema.boundaries)) setControl("boundaries", schema.boundaries.join(", "));
    if (Array.isArray(recipe.cohorts)) {
      for (const box of form.querySelectorAll('input[name="cohorts"]')) box.checked = recipe.cohorts.includes(box.value);
    }
    const privacy = isObject(recipe.privacy) ? recipe.privacy : {};
    // Defaults of the recipe format (docs/formats.md) where a key is left out.
    const defaults = { noise: "client", noise_distribution: "gaussian", sampling_rate: "1", min_cohort: "" };
    for (const name of PRIVACY_FIELDS) {
      if (name === "delta" && privacy[key("noise_distribution")] === "laplace") continue; // δ = 0: the field is unused
      const raw = privacy[key(name)];
      if (raw === undefined || raw === null) setControl(name, defaults[name] ?? "");
      else if (typeof raw === "number" || typeof raw === "string") setControl(name, String(raw));
    }
  }

  // The JSON textarea: {ok, recipe} or {ok: false, message} saying where it breaks.
  function parseJson() {
    const text = jsonBox.value;
    let recipe;
    try {
      recipe = JSON.parse(text);
    } catch (error) {
      return { ok: false, message: whereItBreaks(text, error) };
    }
    if (!isObject(recipe)) return { ok: false, message: "Must be a JSON object." };
    return { ok: true, recipe };
  }

  function whereItBreaks(text, error) {
    const reason = error.message.replace(/ in JSON at position \d+.*$/, "").replace(/^JSON\.parse: /, "");
    const given = /line (\d+) column (\d+)/.exec(error.message);
    if (given) return `Not valid JSON at line ${given[1]}, column ${given[2]}: ${reason}.`;
    const at = /position (\d+)/.exec(error.message);
    const position = at ? Number(at[1]) : text.length; // "Unexpected end of JSON input" has none
    const before = text.slice(0, position);
    const line = before.split("\n").length;
    const column = position - before.lastIndexOf("\n");
    return `Not valid JSON at line ${line}, column ${column}: ${reason}.`;
  }

  // Which side runs. Without this script the analyst picks it; with it, the JSON whenever it parses
  // (it then holds everything the form says, and maybe more).
  function runFrom(side) {
    for (const radio of form.querySelectorAll('input[name="source"]')) radio.checked = radio.value === side;
  }

  function showJsonState(parsed) {
    jsonBox.setAttribute("aria-invalid", parsed.ok ? "false" : "true");
    jsonBox.closest(".field").classList.toggle("invalid", !parsed.ok);
    jsonStatus.className = parsed.ok ? "hint" : "error";
    jsonStatus.textContent = parsed.ok
      ? "In sync with the form; Run and Dry run use this JSON."
      : `${parsed.message} The form keeps its values, and Run uses the form until the JSON parses.`;
    runFrom(parsed.ok ? "json" : "form");
  }

  function formEdited(name) {
    const write = writerOf(name);
    if (!write) return;
    const parsed = parseJson();
    let recipe;
    if (parsed.ok) {
      recipe = parsed.recipe;
      write(recipe);
    } else {
      recipe = recipeFromForm(); // the form was edited last: it wins over JSON that does not parse
    }
    jsonBox.value = stringify(recipe);
    showJsonState({ ok: true });
  }

  function jsonEdited() {
    const parsed = parseJson();
    if (parsed.ok) formFromRecipe(parsed.recipe);
    showJsonState(parsed);
  }

  // ------------------------------------------------------------ validation as you type

  let validation = 0; // only the latest answer is shown

  function clearMessages() {
    for (const message of form.querySelectorAll(".field .error:not(#recipe-json-status)")) message.remove();
    for (const field of form.querySelectorAll(".field.invalid")) {
      if (field.dataset.field !== "recipe_json") field.classList.remove("invalid");
    }
    for (const control of form.querySelectorAll("[data-live-error]")) {
      control.removeAttribute("aria-invalid");
      const ids = (control.getAttribute("aria-describedby") || "").split(" ");
      control.setAttribute("aria-describedby", ids.filter((id) => !id.startsWith("live-error-")).join(" "));
      delete control.dataset.liveError;
    }
    alertBox.replaceChildren();
  }

  function formFieldOf(path) {
    if (fieldFor[path]) return fieldFor[path];
    if (path.endsWith(".boundaries")) return "boundaries";
    return null;
  }

  function placeMessages(fields) {
    const general = [];
    for (const [path, messages] of Object.entries(fields)) {
      const name = formFieldOf(path);
      const box = name && form.querySelector(`.field[data-field="${name}"]`);
      if (!box) {
        // The policy's refusals (budget.*) name no recipe key to fix: the message alone.
        const prefix = path.startsWith("budget.") ? "" : `${path}: `;
        for (const message of [].concat(messages)) general.push(`${prefix}${message}`);
        continue;
      }
      const note = document.createElement("p");
      note.className = "error";
      note.id = `live-error-${name}`;
      note.textContent = [].concat(messages).join(" ");
      box.append(note);
      box.classList.add("invalid");
      for (const control of box.querySelectorAll("input, select, textarea")) {
        control.setAttribute("aria-invalid", "true");
        const ids = (control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
        control.setAttribute("aria-describedby", [...ids, note.id].join(" "));
        control.dataset.liveError = "1";
      }
    }
    if (general.length) {
      const list = document.createElement("ul");
      list.className = "errors";
      for (const text of general) list.append(Object.assign(document.createElement("li"), { textContent: text }));
      alertBox.append(list);
    }
    return Object.keys(fields).length;
  }

  function currentRecipe() {
    const parsed = parseJson();
    return parsed.ok ? parsed.recipe : recipeFromForm();
  }

  async function validate() {
    const mine = ++validation;
    let response;
    let body;
    try {
      response = await fetch(form.dataset.validateUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify(currentRecipe()),
      });
      body = await response.json();
    } catch (error) {
      if (mine === validation) summaryBox.textContent = `The recipe could not be checked: ${error.message}`;
      return null;
    }
    if (mine !== validation) return null;
    clearMessages();
    if (response.ok) {
      const below = body.batches_below || [];
      summaryBox.textContent =
        (body.too_noisy_reason ? "Valid, but too noisy (its expected error is below; running it will ask you to confirm): " : "Valid: ") +
        `${body.field} in ${count(body.buckets)} buckets, minimum cohort ${count(body.min_cohort)}. ` +
        body.summary +
        (below.length
          ? ` Expected below the minimum cohort, so suppressed while their devices still spend: ${below.join(", ")}; ` +
            "running it will ask you to confirm."
          : "");
      showStandardError(body);
      return body;
    }
    // The API's error format: {"detail", "code", "fields": {key: [messages]}}; older answers were
    // the fields alone.
    const fields = body.fields || body;
    const problems = response.status === 400 ? placeMessages(fields) : 0;
    if (!problems) alertBox.textContent = body.detail || `The recipe could not be checked (HTTP ${response.status}).`;
    summaryBox.textContent = `Not valid yet: ${problems || 1} problem${problems > 1 ? "s" : ""}, shown by the field or above the form.`;
    errorLine.textContent = "Standard errors: shown once the recipe is valid.";
    return null;
  }

  function showStandardError(summary) {
    const se = summary.standard_error;
    const digits = (x) => x.toLocaleString("en-US", { maximumFractionDigits: 1 });
    // Accuracy first: a typical bucket's error at 95% next to the round's cost, and the flag a start asks about.
    const expected = summary.expected_error;
    const accuracy = expected
      ? `For ε = ${summary.epsilon}, each bucket's count is expected within ±${digits(expected.half_width)} devices ` +
        `at 95%, against about ${digits(expected.per_bucket)} devices a bucket if they spread evenly. ` +
        (summary.too_noisy_reason ? `Too noisy: ${summary.too_noisy_reason} ` : "")
      : "";
    errorLine.classList.toggle("warning", Boolean(summary.too_noisy_reason));
    errorLine.textContent =
      accuracy +
      (summary.noise === "aggregator"
        ? `Expected standard error per bucket: ±${digits(se.empty_bucket)} devices in every bucket ` +
          `(both aggregators' noise), for the ${count(se.devices)} devices expected.`
        : `Expected standard error per bucket for the ${count(se.devices)} devices expected ` +
          `(fleet × sampling rate, one release): ±${digits(se.empty_bucket)} devices for an empty bucket, ` +
          `±${digits(se.full_bucket)} for a bucket holding all of them.`);
  }

  // ------------------------------------------------------------ privacy figures and the curve

  async function calculator(path, params) {
    const response = await fetch(`/api/privacy/${path}/?${new URLSearchParams(params)}`, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    const body = await response.json();
    if (!response.ok) {
      const [field, messages] = Object.entries(body.fields || body)[0] || ["", [body.detail || "invalid"]];
      throw new Error(`${field}: ${[].concat(messages).join(" ")}`);
    }
    return body;
  }

  function say(text) {
    out.textContent = text;
  }

  async function refresh() {
    const epsilon = value("epsilon");
    const delta = value("delta");
    const rate = Number(value("sampling_rate") || "1");
    const expected = Math.round(fleetSize * rate).toLocaleString();
    try {
      if (value("noise") === "aggregator" && value("noise_distribution") === "laplace") {
        say(
          `Aggregator noise: each aggregator adds discrete Laplace noise of scale b = 2/ε = ${(2 / Number(epsilon)).toFixed(4)} ` +
            `(pure ε-DP, δ = 0). Devices expected at this sampling rate: ${expected}.`
        );
        noCurve("No curve: with aggregator noise the guarantee does not depend on the cohort size.");
        return;
      }
      if (value("noise") === "aggregator") {
        const g = await calculator("gaussian", { epsilon, delta, sensitivity: Math.SQRT2, discrete: true });
        say(
          `Aggregator noise: each aggregator adds discrete Gaussian noise with σ = ${g.sigma.toFixed(4)}; ` +
            `every count's standard error is σ·√2 = ${(g.sigma * Math.SQRT2).toFixed(4)}. ` +
            `Devices expected at this sampling rate: ${expected}.`
        );
        noCurve("No curve: with aggregator noise the guarantee does not depend on the cohort size.");
        return;
      }
      let epsilon0 = Number(value("epsilon0"));
      // A deletion-model randomizer is worth twice its epsilon0 in the replacement model.
      if (deletionModel.includes(value("mechanism"))) epsilon0 *= 2;
      const params = { epsilon0, epsilon, delta };
      const closed = await calculator("min-cohort", { ...params, method: "closed-form" });
      // What devices enforce: the tightest bound proven for this randomizer (check 3).
      const enforced = await calculator("min-cohort", { ...params, mechanism: value("mechanism") });
      // Symmetric RAPPOR's per-coordinate bound has no curve of its own (privacy.enforced_cohort.CURVE_METHODS):
      // the curve drawn is FMT 2022 at 2ε₀, which lies above it.
      const perCoordinate = enforced.method === "stronger-2022-per-coordinate";
      const curveMethod = perCoordinate ? "stronger-2022" : enforced.method;
      const enforcedBound =
        enforced.method === "clones-2020"
          ? "the privacy-amplification bound of 2020"
          : perCoordinate
            ? "the numerical bound per coordinate of symmetric RAPPOR"
            : "the tighter numerical bound";
      const bound = perCoordinate ? "FMT 2022 at 2ε₀ (above the per-coordinate bound devices enforce)" : enforcedBound;
      say(
        `Minimum cohort: ${enforced.min_cohort.toLocaleString()} reports (what devices enforce: ${enforcedBound}); ` +
          `the simpler closed-form bound would need ${closed.min_cohort.toLocaleString()}. ` +
          `Devices expected at this sampling rate: ${expected}.`
      );
      const minCohort = Math.max(enforced.min_cohort, Number(value("min_cohort")) || 0);
      await drawCurve(epsilon0, Number(epsilon), Number(delta), minCohort, fleetSize * rate, curveMethod, bound);
    } catch (error) {
      say(`Privacy figures unavailable: ${error.message}`);
      noCurve("No curve until ε₀, ε and δ are valid.");
    }
  }

  const cache = new Map(); // calculator answers by request: the curves only change with ε₀ and δ

  async function cached(path, params) {
    const id = `${path}?${new URLSearchParams(params)}`;
    if (!cache.has(id)) {
      if (cache.size > 200) cache.clear(); // one page's typing; no need to keep it all
      const answer = calculator(path, params);
      cache.set(id, answer);
      answer.catch(() => cache.delete(id)); // a refusal is asked again next time
    }
    return cache.get(id);
  }

  // Figure 1 of seed 000's range (10^2 to 10^8 reports), widened to hold the recipe's minimum cohort,
  // with four points a decade so that every power of ten is on the curve (the table's rows).
  function curveRange(minCohort) {
    const low = Math.max(0, Math.min(2, Math.floor(Math.log10(minCohort))));
    const high = Math.min(12, Math.max(8, Math.ceil(Math.log10(minCohort))));
    return { n_min: 10 ** low, n_max: 10 ** high, points: 4 * (high - low) + 1 };
  }

  // The numerical curve is the bound devices enforce for this randomizer (method: check 3's).
  async function drawCurve(epsilon0, epsilon, delta, minCohort, expected, method, bound) {
    const range = curveRange(minCohort);
    const [closed, numerical, closedAt, numericalAt] = await Promise.all([
      cached("curve", { epsilon0, delta, method: "closed-form", ...range }),
      cached("curve", { epsilon0, delta, method, ...range }),
      // Below its validity condition the closed form says nothing (devices enforce a tighter bound,
      // whose cohort can be there): "no bound", not an error.
      cached("amplify", { epsilon0, delta, n: minCohort, method: "closed-form" }).catch(() => ({ epsilon: null })),
      cached("amplify", { epsilon0, delta, n: minCohort, method }),
    ]);
    if (enforcedHeader) enforcedHeader.textContent = `ε by ${bound}, which devices enforce for this randomizer`;
    fillTable(epsilon0, delta, closed, numerical, minCohort, [closedAt.epsilon, numericalAt.epsilon]);
    if (!window.Plotly) return;
    chart.hidden = false;
    const n = closed.points.map((p) => p.n);
    const top = Math.max(epsilon0, epsilon) * 1.05;
    const traces = [
      { name: "simple closed-form bound", x: n, y: closed.points.map((p) => p.epsilon), mode: "lines" },
      { name: `${bound} (what devices enforce for this randomizer)`, x: n, y: numerical.points.map((p) => p.epsilon), mode: "lines" },
      {
        name: `this recipe: minimum cohort ${count(minCohort)}, ε = ${epsilon}`,
        x: [minCohort],
        y: [epsilon],
        mode: "markers",
        marker: { size: 12, symbol: "diamond" },
      },
      {
        name: `devices expected: ${count(Math.round(expected))}`,
        x: [expected, expected],
        y: [0, top],
        mode: "lines",
        line: { dash: "dot", width: 1, color: "#5b6475" },
      },
    ];
    // The shared layout (layout.js) puts the legend above the plot: below it, it was cut off.
    const layout = window.PfsPlot.layout(chart, {
      height: 460,
      xaxis: { type: "log", title: { text: "cohort size n (reports)" } },
      yaxis: { title: { text: `aggregate ε at δ = ${delta}` }, range: [0, top] },
    });
    Plotly.react(chart, window.PfsPlot.traces(chart, traces), layout, { responsive: true, displaylogo: false });
  }

  function cell(text, header) {
    const element = document.createElement(header ? "th" : "td");
    if (header) element.scope = "row";
    element.className = "num";
    element.textContent = text;
    return element;
  }

  const epsilonText = (x) => (x === null ? "no bound" : x.toFixed(4));

  // The table alternative: the curve at every power of ten, and at the recipe's minimum cohort.
  function fillTable(epsilon0, delta, closed, numerical, minCohort, at) {
    caption.textContent =
      `Aggregate ε of n reports for ε₀ = ${epsilon0} (replacement model) at δ = ${delta}; ` +
      `the marked row is this recipe's minimum cohort.`;
    const rows = closed.points
      .map((p, i) => ({ n: p.n, values: [p.epsilon, numerical.points[i].epsilon] }))
      .filter((row) => Number.isInteger(Math.log10(row.n)) && row.n !== minCohort);
    rows.push({ n: minCohort, values: at, recipe: true });
    rows.sort((a, b) => a.n - b.n);
    curveBody.replaceChildren(
      ...rows.map((row) => {
        const tr = document.createElement("tr");
        tr.append(cell(row.recipe ? `${count(row.n)} (this recipe's minimum cohort)` : count(row.n), row.recipe));
        for (const x of row.values) tr.append(cell(epsilonText(x)));
        if (row.recipe) tr.className = "recipe-row";
        return tr;
      })
    );
  }

  function noCurve(text) {
    caption.textContent = text;
    curveBody.replaceChildren();
    chart.hidden = true;
  }

  // ------------------------------------------------------------ asking before a spend

  // Run spends budget on every device that answers, and nothing gives it back: the dialog says what
  // this round spends and what would remain, from a fresh check of the recipe, and asks. A recipe
  // the check refuses goes to the server as it is (its refusal spends nothing and says why).
  const dialog = document.getElementById("confirm-spend");
  const dialogBody = document.getElementById("confirm-spend-body");
  let confirmed = false;

  const figure = (x) => Number(x).toLocaleString("en-US", { maximumFractionDigits: 6 });
  const reportsText = (n) => `${count(n)} report${Number(n) === 1 ? "" : "s"}`;

  function spendRows(checked) {
    const budget = checked.budget;
    const scopes = [{ label: `Analysis ${budget.analysis.name}`, ...budget.analysis }].concat(
      budget.fields.map((f) => ({ label: `Field ${f.name}`, ...f }))
    );
    const table = document.createElement("table");
    table.className = "data";
    table.innerHTML =
      "<caption>What this round spends, and what remains after it</caption>" +
      '<thead><tr><th scope="col">Budget</th><th scope="col">ε now left</th><th scope="col">ε after</th>' +
      '<th scope="col">Reports now left</th><th scope="col">Reports after</th></tr></thead>';
    const body = document.createElement("tbody");
    for (const scope of scopes) {
      const tr = document.createElement("tr");
      const head = Object.assign(document.createElement("th"), { scope: "row", textContent: scope.label });
      tr.append(head);
      for (const text of [figure(scope.left), figure(scope.remaining), count(scope.reports_left), count(scope.reports_remaining)]) {
        tr.append(Object.assign(document.createElement("td"), { className: "num", textContent: text }));
      }
      body.append(tr);
    }
    table.append(body);
    return table;
  }

  function askToSpend(checked) {
    const lead = document.createElement("p");
    lead.id = "confirm-spend-cost";
    lead.textContent =
      `This round spends ε = ${figure(checked.epsilon)} (δ = ${checked.delta}) and one report on each of the ` +
      `about ${count(checked.devices_expected)} devices asked.`;
    const accuracy = document.createElement("p");
    accuracy.id = "confirm-spend-accuracy";
    const expected = checked.expected_error;
    accuracy.textContent =
      `For it, each bucket's count is expected within ±${count(Math.round(expected.half_width))} devices at 95%, ` +
      `against about ${figure(Math.round(expected.per_bucket * 10) / 10)} devices a bucket if they spread evenly.` +
      (checked.too_noisy_reason ? ` Too noisy: ${checked.too_noisy_reason}` : "");
    accuracy.classList.toggle("warning", Boolean(checked.too_noisy_reason));
    dialogBody.replaceChildren(lead, accuracy, spendRows(checked));
    document.getElementById("confirm-spend-yes").onclick = () => {
      confirmed = true;
      dialog.close();
      form.requestSubmit(document.getElementById("run-confirmed")); // asked here: the server need not ask again
    };
    document.getElementById("confirm-spend-no").onclick = () => dialog.close();
    dialog.showModal();
    document.getElementById("confirm-spend-no").focus(); // the safe answer first
  }

  form.addEventListener("submit", async (event) => {
    const submitter = event.submitter;
    if (confirmed || !dialog || !submitter || submitter.value !== "run") return;
    event.preventDefault();
    clearTimeout(pending);
    const checked = await validate();
    if (checked) askToSpend(checked);
    else {
      confirmed = true; // refused: the server says why, and spends nothing
      form.requestSubmit(submitter);
    }
  });

  // ------------------------------------------------------------ wiring

  // A question the server asks before a spend (no dialog was shown): where the eye is.
  const question = document.getElementById("spend-question");
  if (question) question.focus();


  function schedule() {
    clearTimeout(pending);
    pending = setTimeout(() => {
      validate();
      refresh();
    }, 300);
  }

  form.addEventListener("input", (event) => {
    const target = event.target;
    if (target === jsonBox) jsonEdited();
    else if (target.name !== "source") formEdited(target.name);
    schedule();
  });

  // The choice of side is this script's; the analyst sees which side runs by the JSON.
  document.getElementById("recipe-source").hidden = true;
  const posted = form.querySelector('input[name="source"]:checked');
  if ((posted && posted.value === "json") || !form.elements.field.options.length) {
    jsonEdited();
  } else {
    // The posted (or initial) fields are the recipe: the JSON follows them.
    jsonBox.value = stringify(recipeFromForm());
    showJsonState({ ok: true });
  }
  validate();
  refresh();
})();

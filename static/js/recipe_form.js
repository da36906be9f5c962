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
      // A key left out with no default (misspelt, say: "epsilonn") keeps what the field holds: the
      // analyst's value is not blanked, and the check names the key by the JSON.
      if (raw === undefined && !(name in defaults)) continue;
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
    // The JSON box stays marked while its text does not parse (showJsonState); a key's message goes.
    jsonBox.closest(".field").classList.toggle("invalid", jsonBox.getAttribute("aria-invalid") === "true");
    for (const control of form.querySelectorAll("[data-live-error]")) {
      if (control !== jsonBox) control.removeAttribute("aria-invalid");
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
    const byJson = [];
    for (const [path, messages] of Object.entries(fields)) {
      const name = formFieldOf(path);
      const box = name && form.querySelector(`.field[data-field="${name}"]`);
      if (path.startsWith("budget.")) {
        // The policy's refusals name no recipe key to fix: the message alone, above the fields.
        general.push(...[].concat(messages));
      } else if (!box || !fieldShows(path, name)) {
        // A key no field shows (a misspelt one, say, or the key it was meant to be, missing from the
        // JSON while its field keeps the analyst's value): by the JSON that holds it, named.
        byJson.push(`${path}: ${[].concat(messages).join(" ")}`);
      } else {
        mark(box, name, [].concat(messages).join(" "));
      }
    }
    if (byJson.length) mark(jsonBox.closest(".field"), "recipe_json", byJson.join(" "));
    if (general.length) {
      const list = document.createElement("ul");
      list.className = "errors";
      for (const text of general) list.append(Object.assign(document.createElement("li"), { textContent: text }));
      alertBox.append(list);
    }
    return Object.keys(fields).length;
  }

  // Whether the field shows what the JSON that runs holds at ``path``: not when the key is left out
  // of it while the field holds a value (formFromRecipe keeps it).
  function fieldShows(path, name) {
    const parsed = parseJson();
    if (!parsed.ok) return true; // the form runs
    const held = path.split(".").reduce((at, part) => (isObject(at) ? at[part] : undefined), parsed.recipe);
    return held !== undefined || value(name) === "";
  }

  function mark(box, name, text) {
    const note = document.createElement("p");
    note.className = "error";
    note.id = `live-error-${name}`;
    note.textContent = text;
    // Under the JSON box itself, not under its help: the box is tall, and the eye is at its edge.
    if (name === "recipe_json") jsonBox.after(note);
    else box.append(note);
    box.classList.add("invalid");
    for (const control of box.querySelectorAll("input, select, textarea")) {
      // The JSON box's aria-invalid says whether its text parses (showJsonState): left to it.
      if (control !== jsonBox) control.setAttribute("aria-invalid", "true");
      const ids = (control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      control.setAttribute("aria-describedby", [...ids, note.id].join(" "));
      control.dataset.liveError = "1";
    }
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
      // verdict=1: a refusal is a 200 {valid: false, errors}, so typing never logs a failed request.
      response = await fetch(`${form.dataset.validateUrl}?verdict=1`, {
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
    if (response.ok && body.valid) {
      refresh({});
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
    // A refusal: {valid: false, errors: {key: [messages]}}. Anything else (403, 500) is the API's
    // error format, {"detail", "code", "fields"}.
    const fields = response.ok ? body.errors : {};
    refresh(fields);
    const problems = placeMessages(fields);
    if (!problems) alertBox.textContent = body.detail || `The recipe could not be checked (HTTP ${response.status}).`;
    const keys = Object.keys(fields);
    summaryBox.textContent =
      keys.length && keys.every((key) => key.startsWith("budget."))
        ? // The recipe is fine; the policy has nothing left for it (its reason is above the form).
          "The recipe is fine, but this analysis's budget has nothing left for another round (why: above the form). " +
          "A privacy officer can raise it; nothing runs or is spent until then."
        : `Not valid yet: ${problems || 1} problem${problems > 1 ? "s" : ""}, shown by the field, under the JSON or above the form.`;
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

  // The keys the privacy figures are computed from: while the check names one of them, the
  // calculators would only refuse it again (a 400 for every keystroke), so they are not asked.
  const FIGURE_KEYS = ["privacy.mechanism", "privacy.epsilon0", "privacy.epsilon", "privacy.delta"];

  async function refresh(errors) {
    if (Object.keys(errors).some((path) => FIGURE_KEYS.includes(path))) {
      say("Privacy figures: shown once ε₀, ε and δ are valid (see the messages by the fields).");
      noCurve("No curve until ε₀, ε and δ are valid.");
      return;
    }
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

  // The closed form's validity condition, eps0 <= log(n / (8 log(2/delta)) - 1), as
  // privacy.amplification.closed_form_epsilon tests it.
  function closedFormHolds(epsilon0, n, delta) {
    const ratio = n / (8 * Math.log(2 / delta)) - 1;
    return ratio > 0 && epsilon0 <= Math.log(ratio);
  }

  // The numerical curve is the bound devices enforce for this randomizer (method: check 3's).
  async function drawCurve(epsilon0, epsilon, delta, minCohort, expected, method, bound) {
    const range = curveRange(minCohort);
    const [closed, numerical, closedAt, numericalAt] = await Promise.all([
      cached("curve", { epsilon0, delta, method: "closed-form", ...range }),
      cached("curve", { epsilon0, delta, method, ...range }),
      // Below its validity condition the closed form says nothing (devices enforce a tighter bound,
      // whose cohort can be there): "no bound", not an error, and not asked for.
      closedFormHolds(epsilon0, minCohort, delta)
        ? cached("amplify", { epsilon0, delta, n: minCohort, method: "closed-form" })
        : { epsilon: null },
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
    const parts = [lead];
    if (checked.cohorts_suppressed) {
      // Before the spend, not after it: which batches will be suppressed though their devices spend.
      const suppressed = Object.assign(document.createElement("p"), { id: "confirm-spend-suppressed", className: "warning" });
      suppressed.append(Object.assign(document.createElement("strong"), { textContent: "Suppressed: " }), checked.cohorts_suppressed);
      parts.push(suppressed);
    }
    const goAhead = Boolean(checked.cohorts_suppressed || checked.too_noisy_reason);
    const covers = Object.assign(document.createElement("p"), {
      id: "confirm-spend-covers",
      textContent: goAhead ? "Running it confirms what is said above: you will not be asked again." : "",
    });
    dialogBody.replaceChildren(...parts, accuracy, spendRows(checked), covers);
    document.getElementById("confirm-spend-yes").onclick = () => {
      confirmed = true;
      dialog.close();
      // One question: its answer is the go-ahead for the suppressed batches and the noise it named.
      if (goAhead) form.append(Object.assign(document.createElement("input"), { type: "hidden", name: "confirm_small_cohorts", value: "on" }));
      // A question the server asked earlier was about the recipe then: this dialog asked about this one.
      form.querySelectorAll('input[name="spend_digest"]').forEach((input) => input.remove());
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

  // A refused Run or Dry run: the outcome is said at the top (outcome.js); the focus goes to the
  // first field the server put an error under, scrolled to, where it is fixed.
  const refused = form.querySelector('.field.invalid p.error[role="alert"]');
  if (refused && !question) {
    const box = refused.closest(".field");
    box.querySelector("textarea, select, input").focus({ preventScroll: true });
    box.scrollIntoView({ block: "center" });
  }


  function schedule() {
    clearTimeout(pending);
    pending = setTimeout(validate, 300); // the privacy figures follow its verdict
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
})();

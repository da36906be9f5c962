// The start form of an adaptive run (templates/analyses/adaptive_list.html), on top of a form that
// works without it:
// - the fields and the spec JSON kept in sync (the server's mapping is forms.spec_from_fields;
//   this mirrors it); the JSON is what starts whenever it parses, as in the recipe editor;
// - only the fields of the kind chosen are shown; a vocabulary file is read into the list;
// - the budget plan (every round's ε and δ, their sum against what is left) shown as you type.
//   "Check the plan" asks the server, which also gives each round's minimum cohort.
(function () {
  "use strict";
  const form = document.getElementById("adaptive-form");
  if (!form) return;
  const jsonBox = form.elements.document;
  const jsonStatus = document.getElementById("spec-json-status");
  const preview = document.getElementById("plan-preview");
  const kinds = JSON.parse(document.getElementById("spec-kinds").textContent); // kind -> its fields
  const fieldsLeft = JSON.parse(document.getElementById("fields-left").textContent); // field -> ε left
  // The analyses a start accepts as a static baseline (pages.adaptive._baselines): the fields each
  // can hold one for, and its budget left, which the baseline's rounds spend too.
  const baselines = JSON.parse(document.getElementById("spec-baselines").textContent);
  const DISCOVERY = "ngram_discovery";
  const REFINEMENT = "bucket_refinement";
  const WALK = "heavy_hitters"; // one round of Poplar1 reports; the aggregators add the noise
  // The privacy keys the fields write, of every kind: a kind's own replace the other kind's.
  const PRIVACY_OWNED = ["mechanism", "epsilon0", "epsilonPerRound", "epsilon", "delta", "samplingRate"];
  const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
  const value = (name) => (form.elements[name] ? String(form.elements[name].value).trim() : "");
  const count = (n) => Number(n).toLocaleString("en-US");
  const figure = (x) => Number(x).toLocaleString("en-US", { maximumFractionDigits: 6 });

  function kind() {
    const checked = form.querySelector('input[name="kind"]:checked');
    return checked ? checked.value : Object.keys(kinds)[0];
  }

  // A form value as the JSON holds it: a number when it reads as one, else the text (so that the
  // server names the problem at its key).
  function asJson(text) {
    if (text === "") return null;
    const number = Number(text);
    return Number.isFinite(number) ? number : text;
  }

  function words(text) {
    const trimmed = text.trim();
    if (trimmed.startsWith("[")) {
      try {
        const list = JSON.parse(trimmed);
        if (Array.isArray(list)) return list.map((w) => String(w).trim()).filter(Boolean);
      } catch (error) {
        // not a JSON array: read it as a list of lines or commas
      }
    }
    return text.split(/[\n,]/).map((w) => w.trim()).filter(Boolean);
  }

  // Indented JSON, a vocabulary a dozen words a line (as the server writes it: pages.adaptive._pretty_json).
  function stringify(spec) {
    if (!Array.isArray(spec.vocabulary)) return JSON.stringify(spec, null, 2);
    const text = JSON.stringify({ ...spec, vocabulary: "\u0000" }, null, 2);
    const lines = [];
    for (let i = 0; i < spec.vocabulary.length; i += 12) {
      lines.push(spec.vocabulary.slice(i, i + 12).map((w) => JSON.stringify(w)).join(", "));
    }
    return text.replace('"\\u0000"', `[\n    ${lines.join(",\n    ")}\n  ]`);
  }

  // The spec of the fields, over the JSON's other keys (cohorts, confirmSmallCohorts, ...).
  function specFromForm(previous) {
    const spec = { analysis: form.dataset.analysis, kind: kind(), field: value("field") };
    const keep = isObject(previous) ? previous : {};
    const keptPrivacy = Object.fromEntries(
      Object.entries(isObject(keep.privacy) ? keep.privacy : {}).filter(([key]) => !PRIVACY_OWNED.includes(key)),
    );
    if (spec.kind === WALK) {
      spec.maxLength = asJson(value("max_length"));
      if (value("alphabet") !== "") spec.alphabet = form.elements.alphabet.value.trim();
    } else if (spec.kind === DISCOVERY) {
      spec.unit = value("unit") || "word";
      spec.vocabulary = words(form.elements.vocabulary.value);
      spec.maxLength = asJson(value("rounds"));
    } else {
      spec.boundaries = value("boundaries").replace(/;/g, ",").split(",").filter((p) => p.trim()).map((p) => asJson(p.trim()));
      if (value("min_width") !== "") spec.minWidth = asJson(value("min_width"));
      spec.maxRounds = asJson(value("rounds"));
    }
    // A walk has no local randomizer: its epsilon is the whole walk's (forms.adaptive._walk_spec_from_fields).
    const own =
      spec.kind === WALK
        ? { epsilon: asJson(value("epsilon")) }
        : {
            mechanism: value("mechanism"),
            epsilon0: asJson(value("epsilon0")),
            epsilonPerRound: asJson(value("epsilon_per_round")),
          };
    spec.privacy = {
      ...keptPrivacy,
      ...own,
      delta: asJson(value("delta")),
      samplingRate: asJson(value("sampling_rate")),
    };
    const threshold = {};
    if (value("z_score") !== "") threshold.zScore = asJson(value("z_score"));
    if (value("max_per_level") !== "") threshold[spec.kind === REFINEMENT ? "maxBuckets" : "maxPerLevel"] = asJson(value("max_per_level"));
    spec.threshold = threshold;
    if (spec.kind === DISCOVERY && value("baseline") !== "") {
      const baseline = { analysis: value("baseline") };
      for (const [key, name] of [["rows", "baseline_rows"], ["columns", "baseline_columns"], ["topK", "baseline_top_k"]]) {
        if (value(name) !== "") baseline[key] = asJson(value(name));
      }
      spec.baseline = baseline;
    }
    const owned = ["analysis", "kind", "field", "unit", "vocabulary", "maxLength", "alphabet", "boundaries", "minWidth", "maxRounds", "privacy", "threshold", "baseline"];
    // A walk reads no cohorts (the server refuses the key): a switch to it drops them.
    if (spec.kind === WALK) owned.push("cohorts");
    const others = Object.fromEntries(Object.entries(keep).filter(([key]) => !owned.includes(key)));
    return { ...spec, ...others };
  }

  function set(name, raw) {
    const control = form.elements[name];
    if (!control || raw === undefined) return;
    const text = raw === null ? "" : String(raw);
    if (control instanceof RadioNodeList || control.type === "radio") {
      // One radio alone is not a RadioNodeList: tick it or not, never rewrite its value.
      for (const radio of control instanceof RadioNodeList ? control : [control]) radio.checked = radio.value === text;
    } else if (control.tagName === "SELECT") {
      if (Array.from(control.options).some((o) => o.value === text)) control.value = text;
    } else {
      control.value = text;
    }
  }

  function formFromSpec(spec) {
    set("kind", spec.kind);
    set("field", spec.field);
    set("unit", spec.unit || "word");
    if (Array.isArray(spec.vocabulary)) set("vocabulary", spec.vocabulary.join(", "));
    if (spec.kind === WALK) {
      set("max_length", spec.maxLength ?? null);
      set("alphabet", spec.alphabet ?? "");
    } else {
      set("rounds", spec.kind === DISCOVERY ? spec.maxLength : spec.maxRounds);
    }
    if (Array.isArray(spec.boundaries)) set("boundaries", spec.boundaries.join(", "));
    set("min_width", spec.minWidth ?? null);
    const privacy = isObject(spec.privacy) ? spec.privacy : {};
    set("mechanism", privacy.mechanism);
    set("epsilon0", privacy.epsilon0 ?? null);
    if (spec.kind === WALK) set("epsilon", privacy.epsilon ?? null);
    set("epsilon_per_round", Array.isArray(privacy.epsilonPerRound) ? privacy.epsilonPerRound.join(", ") : privacy.epsilonPerRound ?? null);
    set("delta", privacy.delta ?? null);
    set("sampling_rate", privacy.samplingRate ?? 1);
    const threshold = isObject(spec.threshold) ? spec.threshold : {};
    set("z_score", threshold.zScore ?? null);
    set("max_per_level", threshold.maxPerLevel ?? threshold.maxBuckets ?? null);
    const baseline = isObject(spec.baseline) ? spec.baseline : {};
    set("baseline", baseline.analysis || "");
    set("baseline_rows", baseline.rows ?? null);
    set("baseline_columns", baseline.columns ?? null);
    set("baseline_top_k", baseline.topK ?? null);
    showKind();
  }

  function parseJson() {
    try {
      const spec = JSON.parse(jsonBox.value);
      return isObject(spec) ? { ok: true, spec } : { ok: false, message: "Must be a JSON object." };
    } catch (error) {
      return { ok: false, message: `Not valid JSON: ${error.message}.` };
    }
  }

  function runFrom(side) {
    for (const radio of form.querySelectorAll('input[name="source"]')) radio.checked = radio.value === side;
  }

  function showJsonState(parsed) {
    jsonBox.setAttribute("aria-invalid", parsed.ok ? "false" : "true");
    jsonStatus.className = parsed.ok ? "hint" : "error";
    jsonStatus.textContent = parsed.ok
      ? "In sync with the fields; Check the plan and Start use this JSON."
      : `${parsed.message} The fields keep their values, and Start uses them until the JSON parses.`;
    runFrom(parsed.ok ? "json" : "form");
  }

  // Only the fields of the kind chosen (data-kinds: the kinds that have it, space-separated), and
  // only that kind's fields in the field list.
  function showKind() {
    const chosen = kind();
    for (const element of form.querySelectorAll("[data-kinds]")) {
      if (element.dataset.kinds) element.hidden = !element.dataset.kinds.split(" ").includes(chosen);
    }
    const select = form.elements.field;
    for (const option of select.options) option.hidden = !(kinds[chosen] || []).includes(option.value);
    if (!(kinds[chosen] || []).includes(select.value) && kinds[chosen]) select.value = kinds[chosen][0];
    // A baseline offered only for the fields it can hold one for.
    for (const option of form.elements.baseline.options) {
      if (option.value) option.disabled = !baselines[option.value].fields.includes(select.value);
    }
  }

  // Why the start would refuse the spec's baseline by the plan, in words; "" when it would not.
  function baselineRefusal(spec, rows, total) {
    const named = isObject(spec.baseline) ? spec.baseline.analysis : undefined;
    if (named === undefined || named === "" || spec.kind !== DISCOVERY) return "";
    const other = baselines[named];
    if (!other || !other.fields.includes(spec.field)) {
      return ` ${named} cannot hold a static baseline of field ${spec.field}: the start would be refused.`;
    }
    const fieldLeft = other.fields_left[spec.field];
    if (total > other.left + 1e-9 || rows.length > other.reports_left || total > fieldLeft + 1e-9) {
      return (
        ` The static baseline spends the same on ${named}, which has ε ${figure(Math.min(other.left, fieldLeft))} ` +
        `and ${count(other.reports_left)} reports left: over what is left, the start would be refused.`
      );
    }
    return "";
  }

  function formEdited() {
    const parsed = parseJson();
    jsonBox.value = stringify(specFromForm(parsed.ok ? parsed.spec : null));
    showJsonState({ ok: true });
  }

  function jsonEdited() {
    const parsed = parseJson();
    if (parsed.ok) formFromSpec(parsed.spec);
    showJsonState(parsed);
  }

  // ------------------------------------------------------------ the budget plan, as you type

  function planRows(spec) {
    const privacy = isObject(spec.privacy) ? spec.privacy : {};
    // A walk is one round, its epsilon the whole walk's whatever its length.
    const rounds = spec.kind === WALK ? 1 : Number(spec.kind === DISCOVERY ? spec.maxLength : spec.maxRounds);
    const perRound = spec.kind === WALK ? privacy.epsilon : privacy.epsilonPerRound;
    const epsilons = Array.isArray(perRound) ? perRound.map(Number) : Array.from({ length: rounds || 0 }, () => Number(perRound));
    if (!Number.isInteger(rounds) || rounds < 1 || rounds > 12 || epsilons.length !== rounds || epsilons.some((e) => !(e > 0))) return null;
    const delta = Number(privacy.delta);
    if (!(delta > 0 && delta < 1)) return null;
    return epsilons.map((epsilon, i) => ({ round: i + 1, epsilon, delta }));
  }

  function showPlan(spec) {
    const rows = spec && planRows(spec);
    if (!rows) {
      preview.replaceChildren(Object.assign(document.createElement("p"), {
        className: "hint",
        textContent: "No plan yet: give the rounds, an ε per round above 0 and a δ between 0 and 1.",
      }));
      return;
    }
    const total = rows.reduce((sum, row) => sum + row.epsilon, 0);
    const left = Number(preview.dataset.left);
    const reportsLeft = Number(preview.dataset.reportsLeft);
    const fieldLeft = fieldsLeft[spec.field];
    const rate = Number(isObject(spec.privacy) ? spec.privacy.samplingRate ?? 1 : 1);
    const table = document.createElement("table");
    table.className = "data";
    table.id = "plan-preview-table";
    table.innerHTML =
      "<caption>Every round's cost, fixed at the start</caption>" +
      '<thead><tr><th scope="col">Round</th><th scope="col">ε</th><th scope="col">δ</th><th scope="col">ε spent after it</th></tr></thead>';
    const body = document.createElement("tbody");
    let running = 0;
    for (const row of rows) {
      running += row.epsilon;
      const tr = document.createElement("tr");
      for (const text of [String(row.round), figure(row.epsilon), String(row.delta), figure(running)]) {
        tr.append(Object.assign(document.createElement("td"), { className: "num", textContent: text }));
      }
      body.append(tr);
    }
    table.append(body);
    const sumsFit = total <= left + 1e-9 && (fieldLeft === undefined || total <= fieldLeft + 1e-9);
    const reportsFit = rows.length <= reportsLeft;
    const ownFits = sumsFit && reportsFit;
    // Over the plain sums, within the reports: an accountant tighter than basic (the devices') may
    // still fit it, so the page does not say the start would be refused; the server's check decides.
    const accountantDecides = !sumsFit && reportsFit && preview.dataset.accountant !== "basic";
    const baselineProblem = baselineRefusal(spec, rows, total);
    const fits = ownFits && !baselineProblem;
    const verdict = document.createElement("p");
    verdict.id = "plan-sum";
    verdict.className = fits ? "" : "warning";
    verdict.textContent =
      `${rows.length} round${rows.length > 1 ? "s" : ""}: ε ${figure(total)} of the ${figure(left)} left for the analysis` +
      (fieldLeft === undefined ? "" : ` and of the ${figure(fieldLeft)} left for field ${spec.field}`) +
      `, ${rows.length} of its ${count(reportsLeft)} report${Number(reportsLeft) === 1 ? "" : "s"}, on about ${count(Math.round(Number(preview.dataset.fleet) * rate))} devices a round.` +
      (ownFits
        ? ""
        : accountantDecides
          ? ` Over the plain sums of what is left; the ${preview.dataset.accountant} accountant devices use composes tighter: Check the plan to know whether it fits.`
          : " Over what is left: the start would be refused.") +
      (baselineProblem ||
        (isObject(spec.baseline) && spec.baseline.analysis ? ` The static baseline spends the same on ${spec.baseline.analysis}.` : "")) +
      (fits ? " It fits; Check the plan for each round's minimum cohort." : "");
    preview.replaceChildren(table, verdict);
  }

  function refreshPlan() {
    const parsed = parseJson();
    showPlan(parsed.ok ? parsed.spec : specFromForm(null));
  }

  // ------------------------------------------------------------ wiring

  // A question the server asks before a spend (no dialog was shown): where the eye is.
  const question = document.getElementById("spend-question");
  if (question) question.focus();


  form.elements.vocabulary_file.addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    form.elements.vocabulary.value = words(await file.text()).join(", ");
    formEdited();
    refreshPlan();
  });

  form.addEventListener("input", (event) => {
    const target = event.target;
    if (target.name === "vocabulary_file" || target.name === "source") return;
    if (target === jsonBox) jsonEdited();
    else {
      if (target.name === "kind") showKind();
      formEdited();
    }
    refreshPlan();
  });

  document.getElementById("spec-source").hidden = true;
  const posted = form.querySelector('input[name="source"]:checked');
  if (posted && posted.value === "json" && jsonBox.value.trim()) jsonEdited();
  else {
    showKind();
    formEdited();
  }
  refreshPlan();
})();

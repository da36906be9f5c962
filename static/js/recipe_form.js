// The recipe editor's live privacy figures, from the same calculators as the API and CLI
// (/api/privacy/*): the minimum cohort devices will enforce, or the aggregators' noise.
(function () {
  "use strict";
  const form = document.getElementById("recipe-form");
  const out = document.getElementById("privacy-preview");
  if (!form || !out) return;
  const fleetSize = Number(out.dataset.fleetSize);
  const deletionModel = (out.dataset.deletionModel || "").split(",");
  const value = (name) => (form.elements[name] ? form.elements[name].value.trim() : "");
  let pending = null;

  async function calculator(path, params) {
    const response = await fetch(`/api/privacy/${path}/?${new URLSearchParams(params)}`, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    const body = await response.json();
    if (!response.ok) {
      const [field, messages] = Object.entries(body)[0] || ["", ["invalid"]];
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
      if (value("noise") === "aggregator") {
        const g = await calculator("gaussian", { epsilon, delta, sensitivity: Math.SQRT2 });
        say(
          `Aggregator noise: each aggregator adds discrete Gaussian noise with σ = ${g.sigma.toFixed(4)}; ` +
            `every count's standard error is σ·√2 = ${(g.sigma * Math.SQRT2).toFixed(4)}. ` +
            `Devices expected at this sampling rate: ${expected}.`
        );
        return;
      }
      let epsilon0 = Number(value("epsilon0"));
      // A deletion-model randomizer is worth twice its epsilon0 in the replacement model.
      if (deletionModel.includes(value("mechanism"))) epsilon0 *= 2;
      const params = { epsilon0, epsilon, delta };
      const closed = await calculator("min-cohort", { ...params, method: "closed-form" });
      const tight = await calculator("min-cohort", { ...params, method: "stronger-2022" });
      say(
        `Minimum cohort: ${closed.min_cohort.toLocaleString()} reports (Theorem 3.1, what devices enforce); ` +
          `the numerical bound of Feldman–McMillan–Talwar 2022 would need ${tight.min_cohort.toLocaleString()}. ` +
          `Devices expected at this sampling rate: ${expected}.`
      );
    } catch (error) {
      say(`Privacy figures unavailable: ${error.message}`);
    }
  }

  form.addEventListener("input", () => {
    clearTimeout(pending);
    pending = setTimeout(refresh, 250);
  });
  refresh();
})();

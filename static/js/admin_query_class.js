// The officer's query-class editor (analyses/forms/admin.py): only the chosen stream's fields are
// offered. A field already ticked stays visible even outside the stream, so that the server's
// refusal ("Not in the … stream") names it rather than the page hiding it.
(function () {
  "use strict";
  function sync(stream) {
    const fields = JSON.parse(stream.dataset.streamFields)[stream.value] || {};
    for (const name of ["query_fields", "cohort_fields"]) {
      for (const box of document.querySelectorAll(`input[name="${name}"]`)) {
        const item = box.closest("li") || box.closest("div") || box.parentElement;
        item.hidden = !(box.value in fields) && !box.checked;
      }
    }
  }
  document.addEventListener("DOMContentLoaded", () => {
    const stream = document.querySelector("select[data-stream-fields]");
    if (!stream) return;
    stream.addEventListener("change", () => sync(stream));
    sync(stream);
  });
})();

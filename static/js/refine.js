// The drill-down's "Run this refinement…" asks before it spends, in the dialog the page rendered
// (templates/analyses/includes/refine.html): the same question Run asks. Without this script the
// form posts, spends nothing, and the page comes back with the question open.
(() => {
  const form = document.getElementById("refine-form");
  const question = document.getElementById("refine-question");
  if (!form || !question) return;
  const no = document.getElementById("refine-question-no");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (question.open) question.close(); // opened by the server (?ask=1): shown again as a modal
    question.showModal();
    no.focus(); // the safe answer first
  });
  no.addEventListener("click", (event) => {
    event.preventDefault();
    question.close();
    form.querySelector("button").focus();
  });
  if (question.open) {
    // The server asked (no script ran the first time): where the eye is.
    question.close();
    question.showModal();
    no.focus();
  }
})();

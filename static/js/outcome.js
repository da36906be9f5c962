// The outcome of the last action (Run, Dry run, Pause, Cancel, a refusal) is shown at the top of
// the page in #messages: the focus moves there, so it is seen and read first, wherever the
// button was. A link to the details below (href="#...") is one Tab away.
(function () {
  "use strict";
  const messages = document.getElementById("messages");
  if (!messages) return;
  messages.focus({ preventScroll: true });
  messages.scrollIntoView({ block: "start" });
})();

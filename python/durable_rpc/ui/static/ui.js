// durable-rpc web UI: live updates. A page marks its live regions with data-live; while
// its "auto-refresh" box is ticked (and the tab is visible) the page is fetched again and
// only those regions are replaced, so forms being filled in are never wiped. A run's
// region carries data-open="false" once the run closed: updates stop then.
(function () {
  "use strict";
  var box = document.getElementById("auto-refresh");
  if (!box) { return; }
  var every = parseInt(box.getAttribute("data-refresh"), 10) || 5000;
  var busy = false;

  function stillOpen(root) {
    var closed = root.querySelector('[data-open="false"]');
    return closed === null;
  }

  function refresh() {
    if (!box.checked || document.hidden || busy) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
      .then(function (reply) { return reply.ok ? reply.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (old) {
          var replacement = fresh.getElementById(old.id);
          if (replacement) { old.replaceWith(document.importNode(replacement, true)); }
        });
        if (!stillOpen(document)) { box.checked = false; }
        document.documentElement.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { /* the next tick tries again */ })
      .finally(function () { busy = false; });
  }

  if (!stillOpen(document)) { box.checked = false; }
  window.setInterval(refresh, every);
})();

// Ticket Dispatcher console. Every page reads without this file; it only shows times in the
// viewer's local time (UTC stays on hover), and counts down to parked wakes. htmx (vendored beside it) refreshes the live parts.
(function () {
  "use strict";
  var pad = function (n) { return String(n).padStart(2, "0"); };

  function localTime(el) {
    var moment = new Date(el.getAttribute("datetime"));
    if (isNaN(moment)) { return; }
    var zone = "";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
    el.textContent = moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" + pad(moment.getDate()) +
      " " + pad(moment.getHours()) + ":" + pad(moment.getMinutes()) + ":" + pad(moment.getSeconds()) +
      (zone ? " " + zone : "");
  }

  function countdown(el) {
    var target = new Date(el.getAttribute("data-countdown"));
    if (isNaN(target)) { return; }
    var seconds = Math.round((target - Date.now()) / 1000);
    if (seconds > 0) {
      var m = Math.floor(seconds / 60), s = seconds % 60;
      el.textContent = "in " + (m ? m + " min " + pad(s) + " s" : s + " s");
    } else {
      el.textContent = "due now";
    }
  }

  function refresh(root) {
    (root || document).querySelectorAll("time[data-local]").forEach(localTime);
    (root || document).querySelectorAll("[data-countdown]").forEach(countdown);
  }

  document.addEventListener("DOMContentLoaded", function () {
    refresh(document);
    setInterval(function () { document.querySelectorAll("[data-countdown]").forEach(countdown); }, 1000);
  });
  document.addEventListener("htmx:afterSettle", function (event) { refresh(event.target); });
}());

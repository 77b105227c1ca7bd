// Ticket Dispatcher console. Every page reads without this file. It tells the server the
// browser's time zone (a cookie), so that the next pages come with every time in it; on a page
// made before that (in UTC) it writes the times, and the zone the page names, in the browser's
// zone. It also counts down to parked wakes. htmx (vendored beside it) refreshes the live parts.
(function () {
  "use strict";
  var pad = function (n) { return String(n).padStart(2, "0"); };
  var zone = "";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
  var ZONE_COOKIE = "td_zone";

  function rememberZone() {
    if (!zone || !/^[A-Za-z0-9_+\-\/]+$/.test(zone)) { return; }
    if (document.cookie.split("; ").indexOf(ZONE_COOKIE + "=" + zone) < 0) {
      document.cookie = ZONE_COOKIE + "=" + zone + "; path=/console; max-age=31536000; SameSite=Strict";
    }
  }

  // The server writes "YYYY-MM-DD HH:MM:SS" in the page's zone; this writes the same in the
  // browser's, which is the page's zone once the cookie is set.
  function localTime(el) {
    var moment = new Date(el.getAttribute("datetime"));
    if (isNaN(moment) || !zone) { return; }
    el.textContent = moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" + pad(moment.getDate()) +
      " " + pad(moment.getHours()) + ":" + pad(moment.getMinutes()) + ":" + pad(moment.getSeconds());
  }

  function nameZone(root) {
    if (!zone) { return; }
    root.querySelectorAll("[data-zone-name]").forEach(function (el) { el.textContent = zone; });
    root.querySelectorAll("input[data-zone]").forEach(function (el) { el.value = zone; });
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
    nameZone(root || document);
    (root || document).querySelectorAll("time[data-local]").forEach(localTime);
    (root || document).querySelectorAll("[data-countdown]").forEach(countdown);
  }

  document.addEventListener("DOMContentLoaded", function () {
    rememberZone();
    refresh(document);
    setInterval(function () { document.querySelectorAll("[data-countdown]").forEach(countdown); }, 1000);
  });
  document.addEventListener("htmx:afterSettle", function (event) { refresh(event.target); });
}());

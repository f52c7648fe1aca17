// vgrid dashboard: live updates by polling the page's own URL with If-None-Match (the page's
// ETag). An unchanged page answers 304 and nothing is redrawn; a changed one replaces <main>.
// Between polls the "now" line of a Gantt chart and the information ages move by themselves.
// Without JavaScript the pages are complete; they are just not refreshed. No library, no build.
(function () {
  "use strict";
  var live, offset = 0, failures = 0;

  function status(text) {
    var el = document.getElementById("live-status");
    if (el) { el.textContent = text; }
  }

  function adopt(main) {            // read the server's clock and ETag from a rendered <main>
    live = main;
    var now = parseFloat(main.getAttribute("data-now"));
    if (!isNaN(now)) { offset = now - Date.now() / 1000; }
  }

  function serverNow() { return Date.now() / 1000 + offset; }

  function tick() {                 // move "now" lines and ages without asking the server
    var t = serverNow(), stale = false;
    document.querySelectorAll("svg.gantt").forEach(function (svg) {
      var t0 = parseFloat(svg.getAttribute("data-t0")), t1 = parseFloat(svg.getAttribute("data-t1"));
      var left = parseFloat(svg.getAttribute("data-left")), k = parseFloat(svg.getAttribute("data-px-per-s"));
      var line = svg.querySelector("line.now");
      if (t > t1) { stale = true; return; }
      if (line) {
        var x = (left + (Math.max(t, t0) - t0) * k).toFixed(2);
        line.setAttribute("x1", x); line.setAttribute("x2", x); line.setAttribute("data-now", t.toFixed(3));
      }
    });
    document.querySelectorAll(".age[data-since]").forEach(function (el) {
      var since = parseFloat(el.getAttribute("data-since"));
      if (!isNaN(since)) { el.textContent = Math.max(0, t - since).toFixed(0); }
    });
    return stale;
  }

  function poll(force) {
    var headers = {"X-Requested-With": "vgrid-dashboard"};
    var etag = live.getAttribute("data-etag");
    if (etag && !force) { headers["If-None-Match"] = '"' + etag + '"'; }
    fetch(window.location.href, {headers: headers, cache: "no-store", credentials: "same-origin"})
      .then(function (resp) {
        if (resp.status === 304) { failures = 0; status("live: unchanged"); return null; }
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (!fresh) { throw new Error("no page content"); }
        live.replaceWith(document.importNode(fresh, true));
        adopt(document.getElementById("live"));
        failures = 0;
        status("live: updated " + new Date().toLocaleTimeString());
        tick();
      })
      .catch(function (err) { failures += 1; status("live: " + err.message + " (retrying)"); })
      .finally(function () {
        var every = parseFloat(live.getAttribute("data-poll-s")) || 2;
        setTimeout(function () { poll(false); }, 1000 * every * Math.min(1 + failures, 10));
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var main = document.getElementById("live");
    if (!main) { return; }
    adopt(main);
    status("live");
    setInterval(function () { if (tick()) { poll(true); } }, 1000);
    setTimeout(function () { poll(false); }, 1000 * (parseFloat(main.getAttribute("data-poll-s")) || 2));
  });
})();

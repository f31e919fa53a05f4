// Keeps the traffic map live: once a second at most it asks map/version
// (a few bytes) and, only when the version differs from the one drawn,
// fetches the fragment and swaps it in. No reload, no framework.
(function () {
  "use strict";
  var period = 1000; // never more than one request a second
  var status = document.getElementById("live-status");

  function current() { return document.getElementById("map"); }

  // The locality selector re-renders the page for the clients of one zone.
  function bind() {
    var sel = document.getElementById("from");
    if (!sel) { return; }
    sel.addEventListener("change", function () {
      var u = new URL(location.href);
      if (sel.value) { u.searchParams.set("from", sel.value); } else { u.searchParams.delete("from"); }
      u.searchParams.delete("page");
      location.assign(u.toString());
    });
  }

  function say(text) { if (status) { status.textContent = text; } }

  function get(path) {
    return fetch(path + location.search, { cache: "no-store" }).then(function (r) {
      if (!r.ok && r.status !== 400 && r.status !== 422) { throw new Error(path + ": " + r.status); }
      return r.text();
    });
  }

  function tick() {
    if (document.hidden) { setTimeout(tick, period); return; }
    get("map/version").then(function (v) {
      v = v.trim();
      if (v === current().dataset.version) { return null; }
      return get("map/fragment").then(function (html) {
        var t = document.createElement("template");
        t.innerHTML = html;
        var next = t.content.getElementById("map");
        if (!next) { throw new Error("fragment without #map"); }
        current().replaceWith(next);
        bind();
      });
    }).then(function () {
      say("revision " + current().dataset.revision);
    }, function (e) {
      say("not updating: " + e.message);
    }).then(function () { setTimeout(tick, period); });
  }

  bind();
  setTimeout(tick, period);
})();

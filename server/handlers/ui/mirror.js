/* tensord console: the mirror (the core is app.js): its upstream and that
 * upstream's health, its cache (used of its cap, files complete and
 * partial, what answers found in it), and each repo it knows with the
 * share of it the cache holds; from GET /v1/models's "mirror" object and
 * its rows of source "upstream". A repo's own page is a model's. */
"use strict";

(function (T) {
  const { el, enc, fmtInt, fmtBytes, api, main, poller, showMirrorNav } = T;

  function ago(unix) {
    if (typeof unix !== "number" || !unix) return "never since start";
    const s = Math.max(0, Math.round(Date.now() / 1000 - unix));
    const when = new Date(unix * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    return (s < 120 ? s + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h") +
           " ago (" + when + ")";
  }

  function bar(value, max, label) {
    const pct = max ? Math.floor((Math.min(value, max) / max) * 1000) / 10 : 0;
    return [el("progress", { max: max || 1, value: Math.min(value, max || 1), "aria-label": label }),
            el("span", { class: "small muted", text: " " + pct + "%" })];
  }

  function upstreamPart(m) {
    const up = m.upstream_up !== false;
    const items = [
      ["Upstream", el("span", { class: "mono", text: String(m.upstream || "") })],
      ["State", el("span", { class: "pill " + (up ? "ok" : "bad"), id: "upstream-state",
                             text: up ? "answering" : "cannot be reached" })],
      ["Last answer", ago(m.last_success)],
      ["Failures in a row", fmtInt(m.consecutive_failures)],
      ["Answers served stale", fmtInt(m.stale_answers)],
      ["When it fails", m.offline === "strict" ? "strict: nothing is served without it"
        : "serve what the cache holds (names up to " + fmtInt(Math.round((m.stale_max_age || 0) / 3600)) + " h old)"],
    ];
    if (!up && m.last_error) items.push(["Why", el("span", { class: "reason", text: String(m.last_error) })]);
    return el("dl", { class: "kv", id: "upstream" },
              items.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
  }

  function cachePart(c) {
    const asked = (c.hit_bytes || 0) + (c.miss_bytes || 0);
    const ratio = asked ? Math.round((c.hit_bytes / asked) * 1000) / 10 + "%" : "—";
    return el("div", { class: "cards", id: "cache" },
      el("div", {}, "Cache used", el("b", { text: fmtBytes(c.bytes) + " of " + fmtBytes(c.max_bytes) }),
         ...bar(c.bytes || 0, c.max_bytes || 0, "cache used")),
      el("div", {}, "Files", el("b", { text: fmtInt(c.files) }),
         el("span", { class: "small muted", text: fmtInt((c.files || 0) - (c.partial_files || 0)) + " complete, " +
                                                   fmtInt(c.partial_files) + " partial" })),
      el("div", {}, "In use", el("b", { text: fmtBytes(c.in_use_bytes) })),
      el("div", {}, "Hit ratio", el("b", { title: fmtBytes(c.hit_bytes) + " found of " + fmtBytes(asked) + " asked",
                                           text: ratio })));
  }

  function reposPart(rows) {
    const body = el("tbody", {}, rows.map((m) => {
      const c = m.cache || {};
      return el("tr", {},
        el("td", { class: "name" }, el("a", { href: "#/model/" + enc(m.name), text: m.name })),
        el("td", { class: "mono small", "data-label": "Commit", title: m.commit || null,
                   text: m.commit ? String(m.commit).slice(0, 12) : "—" }),
        el("td", { "data-label": "Cached" }, ...bar(c.bytes || 0, c.total || 0, "cached " + m.name)),
        el("td", { class: "num", "data-label": "Bytes", text: fmtBytes(c.bytes) + " of " + fmtBytes(c.total) }),
        el("td", { class: "num", "data-label": "Files complete",
                   text: fmtInt(c.files_complete) + " of " + fmtInt(m.files) }),
        el("td", { class: "num", "data-label": "Tensors", text: fmtInt(m.tensors) }));
    }));
    if (!rows.length) {
      body.append(el("tr", {}, el("td", { colspan: 6, class: "muted",
        text: "No repo yet: the mirror lists the repos its upstream told it of (without a token)." })));
    }
    return el("div", { class: "scroll-x" }, el("table", { class: "grid stack", id: "mirror-repos" },
      el("caption", { class: "muted small", text: "Repos the mirror knows, from GET /v1/models" }),
      el("thead", {}, el("tr", {}, ["Repo", "Commit", "Cached", "Bytes", "Files complete", "Tensors"].map((h, i) =>
        el("th", { scope: "col", class: i >= 3 ? "num" : null, text: h })))),
      body));
  }

  function mirrorView() {
    const box = el("div", {});
    main.append(el("h2", { text: "Mirror" }), box);
    let last = "";
    return poller(async () => {
      const { doc } = await api("/v1/models");
      const m = doc.mirror;
      showMirrorNav(!!m);
      const rows = (Array.isArray(doc.models) ? doc.models : []).filter((r) => r.source === "upstream");
      const key = JSON.stringify([m, rows]);
      if (key === last) return 3000;
      last = key;
      if (!m) {
        box.replaceChildren(el("p", { class: "muted", text: "This daemon is not a mirror (no upstream is set)." }));
        return null;
      }
      box.replaceChildren(upstreamPart(m), el("h3", { text: "Cache" }), cachePart(m.cache || {}),
                          el("h3", { text: "Repos" }), reposPart(rows));
      return 3000;
    }, 3000);
  }

  T.views.mirror = mirrorView;
})(window.tensordUI);

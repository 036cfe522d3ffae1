/* tensord console: the model list and a model's page (the core is app.js). */
"use strict";

(function (T) {
  const { el, enc, modelPath, fmtInt, fmtBytes, fmtParams, paramsTitle, stateClass, api, hubCommits, main, poller, download, showMirrorNav } = T;

  // ---- models ----------------------------------------------------------------

  let modelsFilter = "";

  // What a mirror's cache holds of a repo: a bar and the fraction.
  function cachedPart(c) {
    const total = c && typeof c.total === "number" ? c.total : 0;
    const bytes = c && typeof c.bytes === "number" ? Math.min(c.bytes, total) : 0;
    const pct = total ? Math.floor((bytes / total) * 1000) / 10 : 0;
    return [el("progress", { max: total || 1, value: bytes, "aria-label": "cached" }),
            el("span", { class: "small muted", title: fmtInt(bytes) + " of " + fmtInt(total) + " bytes",
                         text: " " + pct + "% cached" })];
  }

  function modelState(m) {
    const cell = el("td");
    if (m.source === "upstream") { // a mirrored repo: the share of it the cache holds
      cell.append(el("span", { class: "pill ok", text: "mirrored" }), " ", ...cachedPart(m.cache));
      return cell;
    }
    if (m.state === "invalid") {
      cell.append(el("span", { class: "pill bad", text: "invalid" }));
      const err = m.error || {};
      cell.append(el("span", { class: "reason", text: (err.code ? err.code + ": " : "") + (err.message || "") }));
      return cell;
    }
    const h = m.hashes;
    if (h && typeof h.known === "number" && typeof h.files === "number" && h.known < h.files) {
      cell.append(el("span", { class: "pill warn", text: "hashing" }), " ",
                  el("progress", { max: h.files, value: h.known, "aria-label": "files hashed" }),
                  el("span", { class: "small muted", text: " " + h.known + "/" + h.files + " files" }));
      return cell;
    }
    cell.append(el("span", { class: "pill " + stateClass(m.state), text: String(m.state || "?") }));
    return cell;
  }

  function modelsView() {
    const search = el("input", { type: "search", id: "model-search", placeholder: "Search models",
                                 "aria-label": "Search models", value: modelsFilter });
    const count = el("span", { class: "muted small", "aria-live": "polite" });
    const hashing = el("span", { class: "muted small" });
    const mirrorLine = el("span", { class: "small bad", role: "status" });
    const body = el("tbody");
    const table = el("table", { class: "grid stack", id: "models" },
      el("caption", { class: "muted small", text: "Models served, from GET /v1/models" }),
      el("thead", {}, el("tr", {},
        el("th", { scope: "col", text: "Name" }), el("th", { scope: "col", text: "State" }),
        el("th", { scope: "col", class: "num", text: "Size" }),
        el("th", { scope: "col", class: "num", text: "Files" }),
        el("th", { scope: "col", class: "num", text: "Tensors" }),
        el("th", { scope: "col", text: "Parameters" }),
        el("th", { scope: "col", text: "Commit" }),
        el("th", { scope: "col", text: "GPU" }))),
      body);
    main.append(el("h2", { text: "Models" }),
                el("div", { class: "toolbar" }, search, count, hashing, mirrorLine),
                el("div", { class: "scroll-x" }, table));
    let list = [], commits = new Map(), lastKey = "";

    function render() {
      const q = modelsFilter.toLowerCase();
      const shown = list.filter((m) => typeof m.name === "string" && m.name.toLowerCase().includes(q));
      count.textContent = shown.length + " of " + list.length + " models";
      const rows = shown.map((m) => {
        const commit = m.commit || commits.get(m.name);
        const gpu = m.gpu && m.gpu.state && m.gpu.state !== "none" ? m.gpu.state + (m.gpu.device ? " on " + m.gpu.device : "") : "";
        const state = modelState(m);
        state.dataset.label = "State";
        return el("tr", {},
          el("td", { class: "name" }, el("a", { href: "#/model/" + enc(m.name), text: m.name })),
          state,
          el("td", { class: "num", "data-label": "Size", text: fmtBytes(m.bytes) }),
          el("td", { class: "num", "data-label": "Files", text: fmtInt(m.files) }),
          el("td", { class: "num", "data-label": "Tensors", text: fmtInt(m.tensors) }),
          el("td", { class: "small", "data-label": "Parameters", title: paramsTitle(m.parameters), text: fmtParams(m.parameters) }),
          el("td", { class: "mono small", "data-label": "Commit", title: commit || null, text: commit ? commit.slice(0, 12) : "—" }),
          el("td", { class: "small", "data-label": "GPU", text: gpu || "—" }));
      });
      body.replaceChildren(...rows);
      if (!rows.length) {
        body.append(el("tr", {}, el("td", { colspan: 8, class: "muted",
          text: list.length ? "No model matches \u201c" + modelsFilter + "\u201d." : "No models are served." })));
      }
    }

    search.addEventListener("input", () => { modelsFilter = search.value; render(); });
    const p = poller(async () => {
      const [{ doc }, hub] = await Promise.all([api("/v1/models"), hubCommits()]);
      const models = Array.isArray(doc.models) ? doc.models : [];
      showMirrorNav(!!doc.mirror);
      mirrorLine.textContent = doc.mirror && doc.mirror.upstream_up === false
        ? "The upstream cannot be reached: the mirror serves what its cache holds." : "";
      const h = doc.hashing || {};
      hashing.textContent = h.state === "hashing" && h.bytes
        ? "hashing " + fmtBytes(h.bytes_known) + " of " + fmtBytes(h.bytes) : "";
      // Re-render only on a change, so keyboard focus in the table stays put.
      const key = JSON.stringify(models) + JSON.stringify([...hub]);
      if (key !== lastKey) {
        lastKey = key;
        list = models;
        commits = hub;
        render();
      }
      return h.state === "hashing" ? 1500 : 4000;
    }, 4000);
    return p;
  }

  function hashCell(f) {
    if (typeof f.sha256 === "string" && f.sha256) {
      return el("td", { class: "mono small", text: f.sha256 });
    }
    // A file still being hashed; progress fields, where the daemon gives them.
    const p = f.hash_progress || f.hashing || null;
    const cell = el("td", { class: "small" }, el("span", { class: "pill warn", text: "hashing" }));
    if (p && typeof p === "object") {
      const done = typeof p.bytes_done === "number" ? p.bytes_done : typeof p.bytes_hashed === "number" ? p.bytes_hashed : null;
      const total = typeof p.bytes_total === "number" ? p.bytes_total : typeof p.bytes === "number" ? p.bytes : f.size;
      const frac = typeof p.fraction === "number" ? p.fraction : done !== null && total ? done / total : null;
      if (frac !== null) cell.append(" ", el("progress", { max: 1, value: frac, "aria-label": "hashed" }), " " + Math.round(frac * 100) + "%");
    }
    return cell;
  }

  function modelView(name) {
    const title = el("h2", {}, el("span", { class: "muted", text: "Model " }), name);
    const top = el("div", {});
    main.append(el("p", { class: "small" }, el("a", { href: "#/models", text: "← All models" })), title, top);
    let table = null, tensorsPart = null, lastHashes = "", stopped = false;

    // Polled while the files' hashes are being computed (less often for a
    // big document), re-rendered only when they change; the tensor table,
    // which hashing does not change, is built once and kept.
    async function load() {
      const [{ doc, stale }, hub, list] = await Promise.all([api(modelPath(name)), hubCommits(),
                                                            api("/v1/models")]);
      if (stopped) return null;
      const row = (Array.isArray(list.doc.models) ? list.doc.models : []).find((m) => m.name === name) || {};
      showMirrorNav(!!list.doc.mirror);
      const known = JSON.stringify(doc.hashes || null) + JSON.stringify((doc.files || []).map((f) => [f.sha256, f.hash_progress || f.hashing || null])) +
                    JSON.stringify([stale, row.cache || null]);
      if (known !== lastHashes) {
        lastHashes = known;
        render(doc, hub, row, stale);
      }
      // A mirrored model's cache fills as it is read: shown as it goes.
      if (row.source === "upstream") return 4000;
      return hashesDone(doc) ? null : Math.max(2000, (doc.tensor_count || 0) / 20);
    }

    function hashesDone(doc) {
      return !doc.hashes || doc.hashes.complete !== false;
    }

    function render(doc, hub, row, stale) {
      const params = {};
      for (const t of Object.values(doc.tensors || {})) {
        const n = (Array.isArray(t.shape) ? t.shape : []).reduce((a, b) => a * b, 1);
        params[t.dtype] = (params[t.dtype] || 0) + n;
      }
      const mirrored = row.source === "upstream";
      const commit = mirrored ? row.commit : hub.get(name);
      const files = Array.isArray(doc.files) ? doc.files : [];
      const cards = el("div", { class: "cards" },
        el("div", {}, "State", el("b", { class: stateClass(doc.state), text: String(doc.state) })),
        el("div", {}, "Tensors", el("b", { text: fmtInt(doc.tensor_count) })),
        el("div", {}, "Size", el("b", { text: fmtBytes(doc.bytes) })),
        el("div", {}, "Files", el("b", { text: fmtInt(files.length) })),
        el("div", {}, "Parameters", el("b", { title: paramsTitle(params), text: fmtParams(params) })),
        el("div", {}, "Commit", el("b", { class: "mono", title: commit || null, text: commit ? commit.slice(0, 12) : "—" })));
      if (mirrored) {
        cards.append(el("div", { id: "model-cached" }, "Mirrored, cached", el("b", {}, ...cachedPart(row.cache))));
      }
      const parts = [];
      if (typeof stale === "number") { // the upstream is away: the mirror's last word about it
        parts.push(el("p", { class: "reason", role: "status", id: "stale" },
          "The upstream cannot be reached: this is what the mirror kept of it, " +
          fmtInt(stale) + " s old."));
      }
      parts.push(cards);
      if (doc.state === "invalid" && doc.error) {
        parts.push(el("p", { class: "reason", role: "alert",
                             text: (doc.error.code ? doc.error.code + ": " : "") + (doc.error.message || "") }));
      }
      const fileRows = files.map((f) => {
        const href = modelPath(name) + "/files/" + enc(f.name);
        const a = el("a", { href, download: "", text: "download" });
        a.addEventListener("click", (e) => download(e, href, f.name));
        const hash = hashCell(f);
        hash.dataset.label = "SHA-256";
        return el("tr", {}, el("td", { class: "name", text: f.name }),
                  el("td", { class: "num", "data-label": "Size", text: fmtBytes(f.size), title: fmtInt(f.size) + " bytes" }),
                  hash, el("td", {}, a));
      });
      parts.push(el("h3", { text: "Files" }), el("div", { class: "scroll-x" }, el("table", { class: "grid stack", id: "files" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Name" }), el("th", { scope: "col", class: "num", text: "Size" }),
                       el("th", { scope: "col", text: "SHA-256" }), el("th", { scope: "col", text: "" }))),
        el("tbody", {}, fileRows))));
      const meta = doc.metadata && typeof doc.metadata === "object" ? doc.metadata : {};
      const metaParts = [];
      for (const [file, kv] of Object.entries(meta)) {
        if (!kv || typeof kv !== "object") continue;
        const items = Object.entries(kv).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: typeof v === "string" ? v : JSON.stringify(v) })]);
        if (items.length) metaParts.push(el("h4", { class: "small muted", text: file }), el("dl", { class: "kv small" }, items));
      }
      parts.push(el("h3", { text: "Metadata" }), metaParts.length ? el("div", {}, metaParts) : el("p", { class: "muted small", text: "No __metadata__." }));
      const fresh = doc.state === "ready" && !table;
      if (fresh) {
        const sel = el("div", {});
        const repo = commit !== undefined || mirrored ? { id: name } : null;
        table = T.tensorTable(doc, (t) => {
          sel.replaceChildren(T.snippets(name, t, repo ? { id: repo.id, file: t.file } : null));
        });
        tensorsPart = [el("h3", { text: "Tensors" }), table.node, sel];
      }
      if (tensorsPart) parts.push(...tensorsPart);
      const scrolled = table && !fresh ? table.scroll() : 0;
      top.replaceChildren(...parts);
      if (fresh) table.start();
      else if (table) table.restore(scrolled);
    }

    const p = poller(load, 2000);
    return { stop() { stopped = true; p.stop(); if (table) table.stop(); } };
  }

  T.views.models = modelsView;
  T.views.model = modelView;
})(window.tensordUI);

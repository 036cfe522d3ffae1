/* tensord console: one page over the public JSON API (/v1/models,
 * /v1/models/{m}, /v1/models/{m}/gpu, /v1/metrics, and /api/models for
 * commit ids), with the token the visitor types (kept in sessionStorage,
 * sent as Authorization: Bearer).
 *
 * Every string that comes from the daemon (model, tensor and file names,
 * metadata, error messages) reaches the page through textContent or an
 * attribute value, never as markup: names come from files on disk. */
"use strict";

(function () {
  const TOKEN_KEY = "tensord.token";
  const SAMPLE_MS = 2000;          // metrics sampling period
  const HISTORY = 150;             // samples kept: 5 minutes
  const ROW_H = 28;                // tensor table row height, px (matches app.css)

  // ---- small helpers ------------------------------------------------------

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }

  const enc = encodeURIComponent;
  const modelPath = (m) => "/v1/models/" + enc(m);

  function fmtInt(n) {
    return typeof n === "number" && isFinite(n) ? Math.round(n).toLocaleString("en-US") : "—";
  }

  function fmtBytes(n) {
    if (typeof n !== "number" || !isFinite(n)) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)) + " " + units[i];
  }

  function fmtSI(n, unit) {
    if (typeof n !== "number" || !isFinite(n)) return "—";
    const steps = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [v, p] of steps) {
      if (Math.abs(n) >= v) return (n / v).toFixed(n / v < 10 ? 2 : 1) + " " + p + unit;
    }
    return (n < 10 && n !== Math.round(n) ? n.toFixed(2) : String(Math.round(n))) + (unit ? " " + unit : "");
  }

  function fmtSeconds(s) {
    if (typeof s !== "number" || !isFinite(s)) return "—";
    if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
    if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
    return s.toFixed(2) + " s";
  }

  function fmtParams(byDtype) {
    if (!byDtype || typeof byDtype !== "object") return "—";
    const parts = Object.entries(byDtype).filter(([, n]) => typeof n === "number");
    if (!parts.length) return "—";
    return parts.map(([d, n]) => d + "\u00a0" + fmtSI(n, "").replace(" ", "\u00a0")).join(" · ");
  }

  function paramsTitle(byDtype) {
    if (!byDtype || typeof byDtype !== "object") return null;
    return Object.entries(byDtype).map(([d, n]) => d + ": " + fmtInt(n)).join(", ");
  }

  // Single-quoted for a POSIX shell, whatever the text holds.
  const shq = (s) => "'" + String(s).replace(/'/g, "'\\''") + "'";
  // A Python string literal (JSON's escapes are Python's).
  const pyq = (s) => JSON.stringify(String(s));

  function stateClass(state) {
    return state === "ready" ? "ok" : state === "invalid" || state === "failed" ? "bad" : "warn";
  }

  const statusLine = document.getElementById("status");
  let statusTimer = 0;
  function setStatus(text, error) {
    statusLine.textContent = text || "";
    statusLine.classList.toggle("error", !!error);
    clearTimeout(statusTimer);
    if (text && !error) statusTimer = setTimeout(() => setStatus(""), 4000);
  }

  // ---- the API ---------------------------------------------------------------

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function authHeaders() {
    const t = token();
    return t ? { Authorization: "Bearer " + t } : {};
  }

  async function api(path, opts) {
    opts = opts || {};
    const headers = Object.assign({ Accept: "application/json" }, authHeaders());
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    let r;
    try {
      r = await fetch(path, { method: opts.method || "GET", headers, cache: "no-store",
                              body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    } catch (e) {
      throw new ApiError(0, "network", "the daemon cannot be reached");
    }
    const text = await r.text();
    let doc = null;
    try { doc = text ? JSON.parse(text) : null; } catch (e) { doc = null; }
    if (!r.ok) {
      const err = doc && doc.error;
      const code = err && typeof err === "object" ? err.code : null;
      const msg = err && typeof err === "object" ? err.message : typeof err === "string" ? err : r.statusText;
      throw new ApiError(r.status, code || String(r.status), String(msg || r.status));
    }
    if (doc === null) throw new ApiError(r.status, "bad_json", "the answer is not JSON");
    return { status: r.status, doc };
  }

  function explain(e, write) {
    if (!(e instanceof ApiError)) return String(e && e.message || e);
    if (e.status === 401) {
      return write ? "This needs the admin token: enter it above (" + e.message + ")."
                   : "The daemon asks for a token: enter it above (" + e.message + ").";
    }
    return e.message + (e.code && e.status ? " (" + e.status + " " + e.code + ")" : "");
  }

  // Commit ids of the Hugging Face repos, by repo id (a repo's own /v1 model has its id).
  let hubCache = { at: 0, map: new Map() };
  async function hubCommits() {
    if (Date.now() - hubCache.at < 5000) return hubCache.map;
    const map = new Map();
    try {
      const { doc } = await api("/api/models");
      if (Array.isArray(doc)) {
        for (const r of doc) if (r && typeof r.id === "string") map.set(r.id, r.sha || null);
      }
    } catch (e) { /* no Hub endpoint answer: no commit ids */ }
    hubCache = { at: Date.now(), map };
    return map;
  }

  // ---- the view router -------------------------------------------------------

  const main = document.getElementById("main");
  let current = null;   // { stop() } of the view shown

  function route() {
    const h = location.hash || "#/models";
    const m = /^#\/model\/(.+)$/.exec(h);
    if (m) {
      let name;
      try { name = decodeURIComponent(m[1]); } catch (e) { name = null; }
      if (name !== null) return ["models", () => modelView(name)];
    }
    if (h === "#/gpu") return ["gpu", gpuView];
    if (h === "#/metrics") return ["metrics", metricsView];
    return ["models", modelsView];
  }

  function show(focus) {
    if (current) current.stop();
    const [nav, view] = route();
    for (const a of document.querySelectorAll("nav a")) {
      if (a.dataset.view === nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    main.replaceChildren();
    current = view();
    if (focus) main.focus({ preventScroll: true });
  }

  // Runs fn now and every ms until stopped; fn may return the next delay,
  // or null when there is nothing more to poll.
  function poller(fn, ms) {
    let timer = 0, stopped = false;
    const tick = async () => {
      let next = ms;
      try {
        const r = await fn();
        if (r === null) return;
        if (typeof r === "number" && r > 0) next = r;
      } catch (e) {
        setStatus(explain(e), true);
      }
      if (!stopped) timer = setTimeout(tick, next);
    };
    tick();
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  // ---- models ----------------------------------------------------------------

  let modelsFilter = "";

  function modelState(m) {
    const cell = el("td");
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
                el("div", { class: "toolbar" }, search, count, hashing),
                el("div", { class: "scroll-x" }, table));
    let list = [], commits = new Map(), lastKey = "";

    function render() {
      const q = modelsFilter.toLowerCase();
      const shown = list.filter((m) => typeof m.name === "string" && m.name.toLowerCase().includes(q));
      count.textContent = shown.length + " of " + list.length + " models";
      const rows = shown.map((m) => {
        const commit = commits.get(m.name);
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

  // ---- one model -------------------------------------------------------------

  function tensorTable(doc, onSelect) {
    // Flat arrays: 100,000 tensors cost a few MB and filter in milliseconds.
    const files = new Map();
    for (const f of Array.isArray(doc.files) ? doc.files : []) {
      files.set(f.name, typeof f.header_length === "number" ? 8 + f.header_length : 0);
    }
    const all = [];
    const tensors = doc.tensors && typeof doc.tensors === "object" ? doc.tensors : {};
    for (const [name, t] of Object.entries(tensors)) {
      const shape = Array.isArray(t.shape) ? t.shape : [];
      const off = Array.isArray(t.data_offsets) ? t.data_offsets : [0, 0];
      const base = files.get(t.file) || 0;
      all.push({ name, lower: name.toLowerCase(), dtype: String(t.dtype), shape,
                 params: shape.reduce((a, b) => a * b, 1), file: String(t.file),
                 begin: base + off[0], end: base + off[1] });
    }
    let rows = all, selected = -1, filterText = "";
    const filter = el("input", { type: "search", id: "tensor-filter", placeholder: "Filter tensors by name",
                                 "aria-label": "Filter tensors by name" });
    const count = el("span", { class: "muted small", "aria-live": "polite" });
    const head = el("div", { class: "vhead", role: "row", "aria-rowindex": 1 },
      ["Name", "Dtype", "Shape", "Parameters", "File", "Bytes in file"].map((h, i) =>
        el("span", { role: "columnheader", class: i === 3 ? "n" : null, text: h })));
    const space = el("div", { class: "vspace" });
    const vbody = el("div", { class: "vbody", tabindex: 0, role: "rowgroup",
                              "aria-label": "Tensors: arrow keys move, Page Up and Page Down jump" }, space);
    const grid = el("div", { class: "vtable vwide", role: "grid", id: "tensors", "aria-label": "Tensors" }, head, vbody);
    const pool = [];

    function rowEl(i) {
      const r = pool[i] || (pool[i] = el("div", { class: "vrow", role: "row" },
        [0, 1, 2, 3, 4, 5].map((c) => el("span", { role: "gridcell", class: c === 3 ? "n" : null }))));
      return r;
    }

    function draw() {
      space.style.height = rows.length * ROW_H + "px";
      const first = Math.max(0, Math.floor(vbody.scrollTop / ROW_H) - 4);
      const last = Math.min(rows.length, Math.ceil((vbody.scrollTop + vbody.clientHeight) / ROW_H) + 4);
      let k = 0;
      for (let i = first; i < last; i++, k++) {
        const t = rows[i], r = rowEl(k), c = r.children;
        r.style.transform = "translateY(" + i * ROW_H + "px)";
        r.dataset.index = i;
        r.setAttribute("aria-rowindex", i + 2);
        r.setAttribute("aria-selected", i === selected ? "true" : "false");
        if (i === selected) r.id = "tensor-selected"; else r.removeAttribute("id");
        c[0].textContent = t.name; c[0].title = t.name;
        c[1].textContent = t.dtype;
        c[2].textContent = "[" + t.shape.join(", ") + "]";
        c[3].textContent = fmtInt(t.params);
        c[4].textContent = t.file; c[4].title = t.file;
        c[5].textContent = fmtInt(t.begin) + "–" + fmtInt(t.end);
        if (!r.parentNode) space.append(r);
      }
      for (; k < pool.length; k++) if (pool[k].parentNode) pool[k].remove();
      grid.setAttribute("aria-rowcount", rows.length + 1);
      if (selected >= first && selected < last) vbody.setAttribute("aria-activedescendant", "tensor-selected");
      else vbody.removeAttribute("aria-activedescendant");
    }

    let drawQueued = false;
    const queueDraw = () => {
      if (drawQueued) return;
      drawQueued = true;
      requestAnimationFrame(() => { drawQueued = false; draw(); });
    };

    function select(i, scroll) {
      if (!rows.length) return;
      selected = Math.max(0, Math.min(rows.length - 1, i));
      if (scroll) {
        const top = selected * ROW_H, bottom = top + ROW_H;
        if (top < vbody.scrollTop) vbody.scrollTop = top;
        else if (bottom > vbody.scrollTop + vbody.clientHeight) vbody.scrollTop = bottom - vbody.clientHeight;
      }
      draw();
      onSelect(rows[selected]);
    }

    function applyFilter() {
      const q = filter.value.toLowerCase();
      if (q === filterText) return;
      const keep = selected >= 0 ? rows[selected] : null;
      filterText = q;
      rows = q ? all.filter((t) => t.lower.includes(q)) : all;
      selected = keep ? rows.indexOf(keep) : -1;
      count.textContent = fmtInt(rows.length) + " of " + fmtInt(all.length) + " tensors";
      vbody.scrollTop = 0;
      draw();
    }

    let filterTimer = 0;
    filter.addEventListener("input", () => { clearTimeout(filterTimer); filterTimer = setTimeout(applyFilter, 120); });
    filter.addEventListener("keydown", (e) => {
      if (e.key === "ArrowDown") { e.preventDefault(); applyFilter(); vbody.focus(); select(selected < 0 ? 0 : selected, true); }
    });
    vbody.addEventListener("scroll", queueDraw, { passive: true });
    vbody.addEventListener("click", (e) => {
      const r = e.target.closest(".vrow");
      if (r) select(Number(r.dataset.index), false);
    });
    vbody.addEventListener("keydown", (e) => {
      const page = Math.max(1, Math.floor(vbody.clientHeight / ROW_H) - 1);
      const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
      if (e.key in moves) select((selected < 0 ? -1 : selected) + moves[e.key] + (selected < 0 && moves[e.key] < 0 ? 1 : 0), true);
      else if (e.key === "Home") select(0, true);
      else if (e.key === "End") select(rows.length - 1, true);
      else return;
      e.preventDefault();
    });
    window.addEventListener("resize", queueDraw);
    count.textContent = fmtInt(all.length) + " tensors";
    return {
      node: el("div", {}, el("div", { class: "toolbar" }, filter, count), el("div", { class: "scroll-x" }, grid)),
      start() { draw(); },
      stop() { window.removeEventListener("resize", queueDraw); },
      // A re-render moves the table out of the page and back, which resets
      // its scroll position: keep it.
      scroll() { return vbody.scrollTop; },
      restore(top) { vbody.scrollTop = top; draw(); },
    };
  }

  // Python indexing typed by the visitor: digits, colons, commas, minus signs.
  function sliceSpec(text) {
    const s = text.replace(/\s+/g, "");
    if (!s) return { spec: "" };
    if (!/^[-0-9:,]+$/.test(s) || /(^|,)(,|$)/.test(s)) return { error: "a slice is NumPy indexing such as 0:2,:" };
    return { spec: s };
  }

  function snippets(model, t, repo) {
    const origin = location.origin;
    const slice = el("input", { id: "slice", placeholder: "e.g. 0:2, :", spellcheck: "false", "aria-describedby": "slice-help" });
    const format = el("select", { id: "format", "aria-label": "Format of the download" },
      ["raw", "npy", "safetensors"].map((f) => el("option", { value: f, text: f })));
    const help = el("span", { id: "slice-help", class: "small muted", text: "Slice: NumPy basic indexing per dimension; empty for the whole tensor." });
    const link = el("a", { id: "tensor-download", text: "Download" });
    const boxes = el("div", { class: "snips" });

    function box(title, text) {
      const pre = el("pre", { tabindex: 0, "aria-label": title, text });
      const btn = el("button", { type: "button", text: "Copy", "aria-label": "Copy the " + title + " snippet" });
      btn.addEventListener("click", () => copyText(pre, text));
      return el("section", { class: "snip" }, el("header", {}, el("strong", { class: "small", text: title }), btn), pre);
    }

    function update() {
      const { spec, error } = sliceSpec(slice.value);
      help.textContent = error || "Slice: NumPy basic indexing per dimension; empty for the whole tensor.";
      help.classList.toggle("bad", !!error);
      const q = [];
      if (spec) q.push("slice=" + enc(spec));
      if (format.value !== "raw") q.push("format=" + format.value);
      const url = origin + modelPath(model) + "/tensors/" + enc(t.name) + (q.length ? "?" + q.join("&") : "");
      link.href = url;
      link.setAttribute("download", "");
      const ext = { raw: ".bin", npy: ".npy", safetensors: ".safetensors" }[format.value];
      const auth = token() ? ' -H "Authorization: Bearer $TENSORD_TOKEN"' : "";
      const index = spec ? "[" + spec.split(",").join(", ") + "]" : "";
      const py = [
        "import tensord",
        "",
        "url = " + pyq(origin + modelPath(model)),
        'with tensord.safe_open(url, framework="np") as f:   # token: $TENSORD_TOKEN',
        spec ? "    x = f.get_slice(" + pyq(t.name) + ")" + index : "    x = f.get_tensor(" + pyq(t.name) + ")",
        "print(x.dtype, x.shape)",
      ].join("\n");
      const hf = repo ? [
        "import os",
        "os.environ[\"HF_ENDPOINT\"] = " + pyq(origin) + "   # before huggingface_hub is imported",
        "from huggingface_hub import hf_hub_download",
        "from safetensors import safe_open",
        "",
        "path = hf_hub_download(" + pyq(repo.id) + ", " + pyq(repo.file) + ")   # token: $HF_TOKEN",
        'with safe_open(path, framework="np") as f:',
        spec ? "    x = f.get_slice(" + pyq(t.name) + ")" + index : "    x = f.get_tensor(" + pyq(t.name) + ")",
      ].join("\n") : "# This model is not a Hugging Face repo of its own (a file at the root of the\n# models directory, or a folder inside a repo): use the URL above.";
      boxes.replaceChildren(
        box("curl", "curl -fsS" + auth + " " + shq(url) + " -o " + shq(t.name.replace(/[\/\\]/g, "_") + ext)),
        box("Python (tensord.safe_open)", py),
        box("Python (HF_ENDPOINT)", hf));
    }

    slice.addEventListener("input", update);
    format.addEventListener("change", update);
    link.addEventListener("click", (e) => download(e, link.href, t.name));
    update();
    return el("section", { id: "snippets", "aria-label": "Selected tensor" },
      el("h3", {}, "Selected: ", el("code", { text: t.name })),
      el("div", { class: "toolbar" }, el("label", { for: "slice", text: "Slice" }), slice,
         el("label", { for: "format", class: "small", text: "Format" }), format, link),
      help, boxes);
  }

  function copyText(pre, text) {
    const fallback = () => {
      const range = document.createRange();
      range.selectNodeContents(pre);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      pre.focus();
      setStatus("Selected: press Ctrl+C to copy.");
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(() => setStatus("Copied."), fallback);
    } else {
      fallback();
    }
  }

  // A download link works as it is without auth; with a token the bytes are
  // fetched with it and saved from memory.
  function download(e, url, name) {
    if (!token()) return;
    e.preventDefault();
    setStatus("Downloading…");
    fetch(url, { headers: authHeaders() }).then(async (r) => {
      if (!r.ok) throw new ApiError(r.status, String(r.status), r.statusText);
      const blob = await r.blob();
      const a = el("a", { href: URL.createObjectURL(blob), download: String(name).replace(/[\/\\]/g, "_") });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      setStatus("Downloaded " + fmtBytes(blob.size) + ".");
    }).catch((err) => setStatus(explain(err), true));
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
      const [{ doc }, hub] = await Promise.all([api(modelPath(name)), hubCommits()]);
      if (stopped) return null;
      const known = JSON.stringify(doc.hashes || null) + JSON.stringify((doc.files || []).map((f) => [f.sha256, f.hash_progress || f.hashing || null]));
      if (known !== lastHashes) {
        lastHashes = known;
        render(doc, hub);
      }
      return hashesDone(doc) ? null : Math.max(2000, (doc.tensor_count || 0) / 20);
    }

    function hashesDone(doc) {
      return !doc.hashes || doc.hashes.complete !== false;
    }

    function render(doc, hub) {
      const params = {};
      for (const t of Object.values(doc.tensors || {})) {
        const n = (Array.isArray(t.shape) ? t.shape : []).reduce((a, b) => a * b, 1);
        params[t.dtype] = (params[t.dtype] || 0) + n;
      }
      const commit = hub.get(name);
      const files = Array.isArray(doc.files) ? doc.files : [];
      const cards = el("div", { class: "cards" },
        el("div", {}, "State", el("b", { class: stateClass(doc.state), text: String(doc.state) })),
        el("div", {}, "Tensors", el("b", { text: fmtInt(doc.tensor_count) })),
        el("div", {}, "Size", el("b", { text: fmtBytes(doc.bytes) })),
        el("div", {}, "Files", el("b", { text: fmtInt(files.length) })),
        el("div", {}, "Parameters", el("b", { title: paramsTitle(params), text: fmtParams(params) })),
        el("div", {}, "Commit", el("b", { class: "mono", title: commit || null, text: commit ? commit.slice(0, 12) : "—" })));
      const parts = [cards];
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
        const repo = commit !== undefined ? { id: name } : null;
        table = tensorTable(doc, (t) => {
          sel.replaceChildren(snippets(name, t, repo ? { id: repo.id, file: t.file } : null));
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

  // ---- GPU -------------------------------------------------------------------

  // Scalar fields of a document as a definition list, one level of nested
  // objects flattened ("staging.bytes"): what the daemon adds to its GPU
  // documents (staging ring, I/O counts) shows without a new page.
  function kvList(obj, skip) {
    const items = [];
    const add = (k, v) => {
      const text = typeof v === "number" && /per_second/.test(k) ? fmtSI(v, "B/s")
                 : typeof v === "number" && /bytes|memory_limit/.test(k) ? fmtBytes(v) : String(v);
      items.push(el("dt", { text: k.replace(/_/g, " ") }), el("dd", { text }));
    };
    for (const [k, v] of Object.entries(obj || {})) {
      if (skip.includes(k) || v === null || Array.isArray(v)) continue;
      if (typeof v !== "object") { add(k, v); continue; }
      for (const [k2, v2] of Object.entries(v)) {
        if (v2 !== null && typeof v2 !== "object") add(k + "." + k2, v2);
      }
    }
    return items.length ? el("dl", { class: "kv small" }, items) : null;
  }

  function gpuView() {
    const info = el("div", {});
    const devices = el("div", {});
    const form = el("form", { class: "toolbar", id: "preload-form" });
    const loaded = el("div", { id: "instances" });
    main.append(el("h2", { text: "GPU" }), info, el("h3", { text: "Devices" }), devices,
                el("h3", { text: "Preload" }), form,
                el("h3", { text: "Preloaded models, by device" }), loaded);
    const modelSel = el("select", { id: "preload-model", "aria-label": "Model to preload" });
    const deviceSel = el("select", { id: "preload-device", "aria-label": "Device" });
    const go = el("button", { type: "submit", class: "primary", id: "preload", text: "Preload" });
    form.append(el("label", { for: "preload-model", text: "Model" }), modelSel,
                el("label", { for: "preload-device", text: "Device" }), deviceSel, go,
                el("span", { class: "small muted", text: "Writes need the admin token when auth is on." }));
    let lastOptions = "", armed = null, armTimer = 0;

    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!modelSel.value || !deviceSel.value) return;
      go.disabled = true;
      try {
        const { status, doc } = await api(modelPath(modelSel.value) + "/gpu", { method: "POST", body: { device: deviceSel.value } });
        setStatus((status === 202 ? "Preload started: " : "Already there: ") + modelSel.value + " on " + deviceSel.value + " (" + doc.state + ").");
        p.stop();
        p = poller(refresh, 1000);
      } catch (err) {
        setStatus(explain(err, true), true);
      } finally {
        go.disabled = false;
      }
    });

    // An instance's query: its device, world and rank name it alone.
    const instQuery = (m) => "?device=" + enc(m.device) + "&world=" + (m.world || 1) + "&rank=" + (m.rank || 0);
    const instLabel = (m) => m.name + " on " + m.device + (m.world > 1 ? " (rank " + m.rank + " of " + m.world + ")" : "");

    async function evict(m, btn) {
      if (armed !== btn) {
        armed = btn;
        btn.textContent = "Confirm evict";
        clearTimeout(armTimer);
        armTimer = setTimeout(() => { if (armed === btn) { armed = null; btn.textContent = "Evict"; } }, 4000);
        return;
      }
      armed = null;
      btn.disabled = true;
      try {
        const { doc } = await api(modelPath(m.name) + "/gpu" + instQuery(m), { method: "DELETE" });
        setStatus("Evicted " + instLabel(m) + ": " + doc.state + (doc.leases ? " (" + doc.leases + " leases)" : "") + ".");
        await refresh();
      } catch (err) {
        setStatus(explain(err, true), true);
        btn.disabled = false;
      }
    }

    async function refresh() {
      const { doc } = await api("/v1/models");
      const g = doc.gpu || {};
      info.replaceChildren(
        el("p", {}, el("span", { class: "pill " + (g.available ? "ok" : "warn"), text: g.available ? "GPU available" : "no GPU" }),
           " ", el("span", { class: "small", text: g.available ? "" : String(g.reason || "") })),
        el("p", { class: "small" }, "Backends: ", el("code", { text: (Array.isArray(g.backends) ? g.backends : []).join(", ") || "none" }),
           g.ipc_socket ? [" · lease socket ", el("code", { text: String(g.ipc_socket) })] : []),
        kvList(g, ["available", "reason", "ipc_socket"]) || "");
      const devs = Array.isArray(g.devices) ? g.devices : [];
      const inst = Array.isArray(g.models) ? g.models : [];
      const onDev = (name) => inst.filter((m) => m.device === name);
      const devRow = (d) => el("tr", {},
        el("td", { text: "cuda:" + d.index }), el("td", { text: String(d.name || "") }),
        el("td", { class: "mono small", text: String(d.uuid || "") }), el("td", { text: fmtBytes(d.memory_bytes) }),
        el("td", { class: "num", text: fmtInt(onDev("cuda:" + d.index).length) }),
        el("td", { class: "num", text: fmtInt(onDev("cuda:" + d.index).reduce((n, m) => n + (m.leases || 0), 0)) }),
        el("td", { class: "small" }, d.error ? el("span", { class: "bad", text: String(d.error) })
                                             : kvList(d, ["index", "name", "uuid", "memory_bytes", "error"])));
      devices.replaceChildren(devs.length
        ? el("div", { class: "scroll-x" }, el("table", { class: "grid", id: "devices" },
            el("thead", {}, el("tr", {}, ["Index", "Name", "UUID", "Memory", "Instances", "Leases", "Notes"].map((h, i) =>
              el("th", { scope: "col", class: i === 4 || i === 5 ? "num" : null, text: h })))),
            el("tbody", {}, devs.map(devRow))))
        : el("p", { class: "muted small", text: "No CUDA device." +
            ((g.backends || []).includes("host") ? " The host backend (shared memory) is there." : "") }));

      const ready = (doc.models || []).filter((m) => m.state === "ready").map((m) => m.name);
      const targets = [];
      if ((g.backends || []).includes("host")) targets.push("host");
      for (const d of devs) if (!d.error) targets.push("cuda:" + d.index);
      const key = JSON.stringify([ready, targets]);
      if (key !== lastOptions) {
        lastOptions = key;
        const keepM = modelSel.value, keepD = deviceSel.value;
        modelSel.replaceChildren(...ready.map((n) => el("option", { value: n, text: n })));
        deviceSel.replaceChildren(...targets.map((n) => el("option", { value: n, text: n })));
        if (ready.includes(keepM)) modelSel.value = keepM;
        if (targets.includes(keepD)) deviceSel.value = keepD;
      }
      go.disabled = !ready.length || !targets.length;

      // Each instance in full (a draining one as its row says: a new
      // generation may hold its device, world and rank now).
      const details = await Promise.all(inst.map((m) => m.state === "draining" ? m
        : api(modelPath(m.name) + "/gpu" + instQuery(m)).then((r) => r.doc, () => m)));
      let busy = false;
      const rowOf = (d, i) => {
        const m = inst[i];
        const prog = d.progress || {};
        busy = busy || d.state === "loading";
        const btn = el("button", { type: "button", text: "Evict", "aria-label": "Evict " + instLabel(m) });
        btn.addEventListener("click", () => evict(m, btn));
        const pre = d.preload && typeof d.preload === "object" ? d.preload : null;
        return el("tr", {},
          el("td", { class: "name" }, el("a", { href: "#/model/" + enc(m.name), text: m.name })),
          el("td", { "data-label": "Part", text: m.world > 1 ? "rank " + m.rank + " of " + m.world : "whole" }),
          el("td", { "data-label": "State" }, el("span", { class: "pill " + stateClass(d.state), text: String(d.state) }),
             d.reason ? el("span", { class: "reason", text: String(d.reason) }) : null),
          el("td", { "data-label": "Progress" }, typeof prog.fraction === "number"
            ? [el("progress", { max: 1, value: prog.fraction, "aria-label": "loaded" }), " " + Math.round(prog.fraction * 100) + "%",
               el("span", { class: "small muted", text: " " + fmtBytes(prog.bytes_done) + " / " + fmtBytes(prog.bytes_total) })] : "—"),
          el("td", { class: "num", "data-label": "Leases", text: fmtInt(typeof d.leases === "number" ? d.leases : m.leases) }),
          el("td", { class: "num", "data-label": "Generation", text: fmtInt(d.generation) }),
          el("td", { class: "small", "data-label": "Preload" }, pre ? kvList(pre, []) : "—"),
          el("td", {}, btn));
      };
      // One table per device that holds instances, in the devices' order.
      const order = targets.concat(inst.map((m) => m.device).filter((n, i, a) => !targets.includes(n) && a.indexOf(n) === i));
      const sections = order.filter((n) => onDev(n).length).map((n) => el("section", { class: "device", "data-device": n },
        el("h4", { text: n }),
        el("div", { class: "scroll-x" }, el("table", { class: "grid stack instances" },
          el("thead", {}, el("tr", {}, ["Model", "Part", "State", "Progress", "Leases", "Generation", "Preload", ""].map((h, i) =>
            el("th", { scope: "col", class: i === 4 || i === 5 ? "num" : null, text: h })))),
          el("tbody", {}, inst.map((m, i) => m.device === n ? rowOf(details[i], i) : null).filter(Boolean))))));
      loaded.replaceChildren(...(sections.length ? sections
        : [el("p", { class: "muted small", id: "no-instances", text: "No model is preloaded." })]));
      return busy ? 1000 : 3000;
    }

    let p = poller(refresh, 3000);
    return { stop() { p.stop(); clearTimeout(armTimer); } };
  }

  // ---- metrics: sampled in the page ------------------------------------------

  const samples = [];        // [{t (s, the daemon's uptime), doc}]
  const listeners = new Set();
  let sampleError = null;

  function sumClasses(reqs) {
    let n = 0;
    for (const v of Object.values(reqs || {})) if (typeof v === "number") n += v;
    return n;
  }

  const BOUNDS = ["0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                  "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"];

  // The q-quantile of a histogram {bound: count}, interpolated in its bucket
  // as the daemon does (core/metrics_render.c).
  function quantile(buckets, q) {
    let total = 0;
    for (const b of BOUNDS) total += buckets[b] || 0;
    if (!total) return null;
    const rank = q * total;
    let cum = 0;
    for (let i = 0; i < BOUNDS.length; i++) {
      const n = buckets[BOUNDS[i]] || 0;
      if (n && cum + n >= rank) {
        if (i === BOUNDS.length - 1) return 10;
        const lo = i ? Number(BOUNDS[i - 1]) : 0, hi = Number(BOUNDS[i]);
        return lo + (hi - lo) * (rank - cum) / n;
      }
      cum += n;
    }
    return 10;
  }

  // What happened between two samples, per second.
  function derive(a, b) {
    const dt = Math.max(0.001, b.t - a.t);
    const ea = a.doc.endpoints || {}, eb = b.doc.endpoints || {};
    const byEndpoint = {}, byClass = {}, hist = {};
    for (const [name, e] of Object.entries(eb)) {
      const prev = ea[name] || {};
      byEndpoint[name] = Math.max(0, sumClasses(e.requests) - sumClasses(prev.requests)) / dt;
      for (const [cls, n] of Object.entries(e.requests || {})) {
        byClass[cls] = (byClass[cls] || 0) + Math.max(0, n - ((prev.requests || {})[cls] || 0)) / dt;
      }
      const hb = (e.duration_seconds || {}).buckets || {}, ha = (prev.duration_seconds || {}).buckets || {};
      for (const k of BOUNDS) hist[k] = (hist[k] || 0) + Math.max(0, (hb[k] || 0) - (ha[k] || 0));
    }
    const ca = a.doc.counters || {}, cb = b.doc.counters || {};
    return {
      t: b.t, byEndpoint, byClass,
      bytes: Math.max(0, ((b.doc.bytes || {}).total || 0) - ((a.doc.bytes || {}).total || 0)) / dt,
      p50: quantile(hist, 0.5), p90: quantile(hist, 0.9), p99: quantile(hist, 0.99),
      inFlight: (b.doc.requests || {}).in_flight || 0,
      open: (b.doc.connections || {}).open || 0,
      preload: Math.max(0, (cb.gpu_preload_bytes || 0) - (ca.gpu_preload_bytes || 0)) / dt / 1e9,
    };
  }

  async function sample() {
    try {
      const { doc } = await api("/v1/metrics");
      const t = typeof doc.uptime_seconds === "number" ? doc.uptime_seconds : performance.now() / 1000;
      if (samples.length && t < samples[samples.length - 1].t) samples.length = 0; // restarted
      samples.push({ t, doc });
      if (samples.length > HISTORY + 1) samples.shift();
      sampleError = null;
    } catch (e) {
      sampleError = e;
    }
    for (const fn of listeners) fn();
    setTimeout(sample, sampleError ? SAMPLE_MS * 2 : SAMPLE_MS);
  }

  const PALETTE = ["#0b63c5", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#1098ad", "#c92a2a", "#5f3dc4", "#868e96"];

  // Draws series [{label, color, values: [[t, v]...]}] on canvas over the
  // last `span` seconds ending at `now`.
  function drawChart(canvas, series, now, span, fmt) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(100, canvas.clientWidth), h = Math.max(80, canvas.clientHeight);
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    const fg = css.getPropertyValue("--muted").trim() || "#666", grid = css.getPropertyValue("--line").trim() || "#ddd";
    let max = 0;
    for (const s of series) for (const [, v] of s.values) if (v !== null && v > max) max = v;
    max = niceMax(max);
    const left = 58, right = 8, top = 8, bottom = 20;
    const pw = w - left - right, ph = h - top - bottom;
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    ctx.fillStyle = fg;
    ctx.strokeStyle = grid;
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    for (let i = 0; i <= 4; i++) {
      const y = top + ph - (ph * i) / 4;
      ctx.beginPath(); ctx.moveTo(left, y + 0.5); ctx.lineTo(w - right, y + 0.5); ctx.stroke();
      ctx.fillText(fmt((max * i) / 4), left - 6, y);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let m = 0; m <= span / 60; m++) {
      const x = left + pw - (pw * m * 60) / span;
      ctx.fillText(m ? "−" + m + "m" : "now", Math.min(Math.max(x, left + 12), w - right - 12), top + ph + 5);
    }
    ctx.save();
    ctx.beginPath(); ctx.rect(left, top, pw, ph); ctx.clip();
    ctx.lineWidth = 1.8;
    for (const s of series) {
      ctx.strokeStyle = s.color;
      ctx.beginPath();
      let pen = false;
      for (const [t, v] of s.values) {
        if (v === null) { pen = false; continue; }
        const x = left + pw - ((now - t) / span) * pw, y = top + ph - (max ? (v / max) * ph : 0);
        if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        pen = true;
      }
      ctx.stroke();
      // The latest point, so that a series of one sample shows too.
      const lastPt = s.values.length ? s.values[s.values.length - 1] : null;
      if (lastPt && lastPt[1] !== null) {
        ctx.fillStyle = s.color;
        ctx.beginPath();
        ctx.arc(left + pw - ((now - lastPt[0]) / span) * pw, top + ph - (max ? (lastPt[1] / max) * ph : 0), 2.5, 0, 2 * Math.PI);
        ctx.fill();
      }
    }
    ctx.restore();
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function metricsView() {
    const cards = el("div", { class: "cards", id: "metric-cards" });
    const note = el("p", { class: "small muted", text: "Sampled from GET /v1/metrics every 2 s while this page is open; the last 5 minutes." });
    const grid = el("div", { class: "charts" });
    main.append(el("h2", { text: "Metrics" }), cards, note, grid);
    const charts = [
      { id: "chart-endpoints", title: "Requests/s by endpoint", fmt: (v) => fmtSI(v, ""), pick: pickTop((d) => d.byEndpoint) },
      { id: "chart-classes", title: "Requests/s by status class", fmt: (v) => fmtSI(v, ""), pick: pickTop((d) => d.byClass) },
      { id: "chart-bytes", title: "Bytes/s sent", fmt: (v) => fmtSI(v, "B"), pick: (ds) => [{ label: "bytes/s", values: ds.map((d) => [d.t, d.bytes]) }] },
      { id: "chart-latency", title: "Latency percentiles", fmt: fmtSeconds, pick: (ds) =>
        ["p50", "p90", "p99"].map((k) => ({ label: k, values: ds.map((d) => [d.t, d[k]]) })) },
      { id: "chart-conns", title: "In flight and open connections", fmt: (v) => fmtSI(v, ""), pick: (ds) => [
        { label: "in flight", values: ds.map((d) => [d.t, d.inFlight]) },
        { label: "open connections", values: ds.map((d) => [d.t, d.open]) }] },
      { id: "chart-preload", title: "Preload GB/s", fmt: (v) => v.toFixed(v < 10 ? 2 : 1), pick: (ds) => [{ label: "GB/s", values: ds.map((d) => [d.t, d.preload]) }] },
    ];
    for (const c of charts) {
      c.canvas = el("canvas", { id: c.id, role: "img", "aria-label": c.title });
      c.legend = el("ul", { class: "legend" });
      grid.append(el("section", { class: "chart" }, el("h3", { text: c.title }), c.canvas, c.legend));
    }

    function update() {
      if (sampleError && !samples.length) {
        cards.replaceChildren(el("p", { class: "bad", text: explain(sampleError) }));
        return;
      }
      if (!samples.length) return;
      const last = samples[samples.length - 1].doc;
      const c = last.counters || {};
      cards.replaceChildren(
        card("Requests/s (10 s)", fmtSI(((last.requests || {}).per_second || {})["10s"], "")),
        card("Bytes/s (10 s)", fmtSI(((last.bytes || {}).per_second || {})["10s"], "B")),
        card("In flight", fmtInt((last.requests || {}).in_flight)),
        card("Open connections", fmtInt((last.connections || {}).open)),
        card("Sent with sendfile", fmtBytes(c.sendfile_bytes)),
        card("Sent from buffers", fmtBytes(c.copied_bytes)),
        card("Aborted answers", fmtInt(c.responses_aborted)),
        card("Uptime", fmtSeconds(last.uptime_seconds)));
      const ds = [];
      for (let i = 1; i < samples.length; i++) ds.push(derive(samples[i - 1], samples[i]));
      const now = samples[samples.length - 1].t, span = HISTORY * SAMPLE_MS / 1000;
      for (const ch of charts) {
        const series = ch.pick(ds).map((s, i) => Object.assign(s, { color: PALETTE[i % PALETTE.length] }));
        drawChart(ch.canvas, series, now, span, ch.fmt);
        const latest = series.map((s) => {
          const v = s.values.length ? s.values[s.values.length - 1][1] : null;
          return { s, v };
        });
        ch.legend.replaceChildren(...latest.map(({ s, v }) => {
          const i = el("i", {});
          i.style.background = s.color;
          return el("li", {}, i, s.label + ": " + (v === null ? "—" : ch.fmt(v)));
        }));
        ch.canvas.setAttribute("aria-label", ch.title + ", now: " +
          (latest.map(({ s, v }) => s.label + " " + (v === null ? "none" : ch.fmt(v))).join(", ") || "no data yet"));
      }
    }

    listeners.add(update);
    window.addEventListener("resize", update);
    update();
    return { stop() { listeners.delete(update); window.removeEventListener("resize", update); } };
  }

  function card(label, value) {
    return el("div", {}, label, el("b", { text: value }));
  }

  // The series of the keys that were busiest over the window (at most 6, the
  // rest summed as "others"), for charts of many labels.
  function pickTop(get) {
    return (ds) => {
      const peak = {};
      for (const d of ds) for (const [k, v] of Object.entries(get(d))) peak[k] = Math.max(peak[k] || 0, v);
      const keys = Object.keys(peak).filter((k) => peak[k] > 0).sort((a, b) => peak[b] - peak[a]);
      const top = keys.slice(0, 6), rest = keys.slice(6);
      const series = top.map((k) => ({ label: k, values: ds.map((d) => [d.t, get(d)[k] || 0]) }));
      if (rest.length) series.push({ label: "others", values: ds.map((d) => [d.t, rest.reduce((a, k) => a + (get(d)[k] || 0), 0)]) });
      return series.length ? series : [{ label: "none", values: ds.map((d) => [d.t, 0]) }];
    };
  }

  // ---- start -----------------------------------------------------------------

  const tokenInput = document.getElementById("token");
  tokenInput.value = token();
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    try { sessionStorage.setItem(TOKEN_KEY, tokenInput.value.trim()); } catch (err) { /* private mode */ }
    hubCache.at = 0;
    setStatus(tokenInput.value.trim() ? "Token set for this tab." : "No token.");
    show(false);
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (err) { /* private mode */ }
    tokenInput.value = "";
    hubCache.at = 0;
    setStatus("Token forgotten.");
    show(false);
  });
  window.addEventListener("hashchange", () => show(true));
  show(false);
  sample();
})();

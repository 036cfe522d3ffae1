/* tensord console: one page over the public JSON API (/v1/models,
 * /v1/models/{m}, /v1/models/{m}/gpu, /v1/metrics, and /api/models for
 * commit ids), with the token the visitor types (kept in sessionStorage,
 * sent as Authorization: Bearer).
 *
 * This file is its core: the helpers, the API, the router and the start;
 * the views register themselves in window.tensordUI.views from their own
 * files (models.js, tensors.js, gpu.js, metrics.js, mirror.js), loaded
 * after it (index.html, deferred: in order, before DOMContentLoaded).
 *
 * Every string that comes from the daemon (model, tensor and file names,
 * metadata, error messages) reaches the page through textContent or an
 * attribute value, never as markup: names come from files on disk. */
"use strict";

window.tensordUI = (function () {
  const TOKEN_KEY = "tensord.token";

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
    // A mirror's answer made from what it kept while its upstream is away.
    const stale = r.headers.get("X-Tensord-Stale");
    return { status: r.status, doc, stale: stale === null ? null : Number(stale) };
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

  // ---- the view router -------------------------------------------------------

  const main = document.getElementById("main");
  const views = {};     // name -> function(arg) returning { stop() }: the other files register them
  let current = null;   // { stop() } of the view shown

  function route() {
    const h = location.hash || "#/models";
    const m = /^#\/model\/(.+)$/.exec(h);
    if (m) {
      let name;
      try { name = decodeURIComponent(m[1]); } catch (e) { name = null; }
      if (name !== null) return ["models", () => views.model(name)];
    }
    const v = /^#\/(gpu|metrics|mirror)$/.exec(h);
    if (v && views[v[1]]) return [v[1], views[v[1]]];
    return ["models", views.models];
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

  // The Mirror tab, shown once the daemon says it is a mirror.
  function showMirrorNav(on) {
    const a = document.getElementById("nav-mirror");
    if (a) a.parentElement.hidden = !on;
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

  // ---- start -----------------------------------------------------------------

  function start() {
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
  }
  // The other files (deferred, in order) register their views before this.
  document.addEventListener("DOMContentLoaded", start);

  return { el, enc, modelPath, fmtInt, fmtBytes, fmtSI, fmtSeconds, fmtParams, paramsTitle, shq, pyq,
           stateClass, setStatus, token, authHeaders, ApiError, api, explain, hubCommits, main, views,
           poller, showMirrorNav, copyText, download };
})();

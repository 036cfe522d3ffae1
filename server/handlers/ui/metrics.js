/* tensord console: the metrics view, sampled in the page (the core is app.js). */
"use strict";

(function (T) {
  const { el, fmtInt, fmtBytes, fmtSI, fmtSeconds, api, explain, main } = T;

  const SAMPLE_MS = 2000;          // metrics sampling period
  const HISTORY = 150;             // samples kept: 5 minutes

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
  // as the daemon does (core/runtime/metrics_render.c).
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
      // A mirror's metrics name its upstream's state: the Mirror tab shows.
      T.showMirrorNav(!!(doc.mirror && doc.mirror.upstream_up !== null && doc.mirror.upstream_up !== undefined));
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

  T.views.metrics = metricsView;
  T.sampleMetrics = sample;
  sample();
})(window.tensordUI);

/* tensord console: the GPU view: devices, instances, preload and evict (the core is app.js). */
"use strict";

(function (T) {
  const { el, fmtInt, fmtBytes, fmtSI, token, stateClass, setStatus, api, explain, main, poller, enc, modelPath } = T;

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

  T.views.gpu = gpuView;
})(window.tensordUI);

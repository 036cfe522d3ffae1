/* tensord console: a model's tensor table and the snippets of the one selected (the core is app.js). */
"use strict";

(function (T) {
  const { el, enc, modelPath, fmtInt, shq, pyq, token, copyText, download } = T;

  const ROW_H = 28;                // tensor table row height, px (matches app.css)

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

  T.tensorTable = tensorTable;
  T.snippets = snippets;
})(window.tensordUI);

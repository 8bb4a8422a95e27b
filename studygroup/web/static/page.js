/* studygroup: the study group's views, for the web app, the HTML report and the notebook.
 *
 * One script, three hosts. `StudyGroup.mount(root, {api})` asks the app's JSON API (docs/web-api.md);
 * `StudyGroup.mount(root, {data})` shows data embedded in the page (report, notebook) and needs no
 * network at all. Every element lives inside `root` and is found from it, so two instances on one
 * page never collide. Text from the model or the user is only ever set as textContent (or drawn
 * on a canvas), never parsed as HTML. No library, no font, no request to another host.
 */
(function () {
  "use strict";

  // ---- helpers -----------------------------------------------------------------------------------
  function el(tag, opts, children) {
    const node = document.createElement(tag);
    const o = opts || {};
    if (o.cls) node.className = o.cls;
    if (o.text != null) node.textContent = String(o.text);
    for (const [k, v] of Object.entries(o.attrs || {})) if (v != null) node.setAttribute(k, String(v));
    for (const [k, v] of Object.entries(o.data || {})) node.dataset[k] = String(v);
    for (const [k, f] of Object.entries(o.on || {})) node.addEventListener(k, f);
    for (const c of children || []) if (c) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return node;
  }
  const clear = (node) => { while (node.firstChild) node.removeChild(node.firstChild); return node; };
  const MARKS = new Set(["\u2423", "\u21b5", "\u21e5", "\u240d"]); // ␣ ↵ ⇥ ␍
  const MONO = 'ui-monospace, "SFMono-Regular", Menlo, Consolas, "Liberation Mono", monospace';
  const SANS = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';

  /** A member's text as nodes, with the marks for spaces and newlines set apart. */
  function tokenNode(token, cls) {
    const span = el("span", { cls: "sg-tok" + (cls ? " " + cls : "") });
    let run = "";
    for (const ch of String(token)) {
      if (MARKS.has(ch)) {
        if (run) span.appendChild(document.createTextNode(run));
        run = "";
        span.appendChild(el("span", { cls: "sg-ws", text: ch }));
      } else run += ch;
    }
    if (run) span.appendChild(document.createTextNode(run));
    return span;
  }
  const short = (t, n) => { const s = Array.from(String(t)); return s.length > n ? s.slice(0, n - 1).join("") + "\u2026" : s.join(""); };
  /** Probabilities as percentages: one decimal under 10%, none above (UI.md). */
  const percent = (p) => (p < 0.1 ? (100 * p).toFixed(1) : (100 * p).toFixed(0)) + "%";
  const sig4 = (x) => (x == null ? "\u2014" : Number(x).toPrecision(4));
  const signed = (x, d) => (x >= 0 ? "+" : "\u2212") + Math.abs(x).toFixed(d);

  // ---- colour ------------------------------------------------------------------------------------
  const hex = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
  // viridis (sequential, colour-blind-safe) for weights in [0, 1]
  const VIRIDIS = ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c", "#22a884",
    "#44bf70", "#7ad151", "#bddf26", "#fde725"].map(hex);
  // PuOr (diverging, colour-blind-safe) for scores of any sign, centred on 0
  const PUOR = ["#2d004b", "#542788", "#8073ac", "#b2abd2", "#d8daeb", "#f7f7f7", "#fee0b6", "#fdb863",
    "#e08214", "#b35806", "#7f3b08"].map(hex);
  function ramp(stops, t) {
    const x = Math.min(1, Math.max(0, t)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(x));
    const f = x - i;
    return stops[i].map((v, k) => Math.round(v + f * (stops[i + 1][k] - v)));
  }
  const weightColor = (w) => ramp(VIRIDIS, w);
  const divergingColor = (s, M) => ramp(PUOR, M > 0 ? 0.5 + 0.5 * s / M : 0.5);
  const rgb = (c) => "rgb(" + c.join(",") + ")";
  const isLight = (c) => 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 140;
  const MASKED_FLAT = [205, 205, 205];

  function sizeCanvas(canvas, w, h) {
    const r = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(w * r));
    canvas.height = Math.max(1, Math.round(h * r));
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(r, 0, 0, r, 0, 0);
    return ctx;
  }
  function hatch(ctx) {
    const p = document.createElement("canvas");
    p.width = p.height = 6;
    const c = p.getContext("2d");
    c.fillStyle = "#efefef"; c.fillRect(0, 0, 6, 6);
    c.strokeStyle = "#a9a9a9"; c.lineWidth = 1;
    c.beginPath(); c.moveTo(0, 6); c.lineTo(6, 0); c.moveTo(-1, 1); c.lineTo(1, -1); c.moveTo(5, 7); c.lineTo(7, 5); c.stroke();
    return ctx.createPattern(p, "repeat");
  }

  // ---- drawing a grid (scores or weights) ---------------------------------------------------------
  /** Draws g.matrix with member labels, axis titles, masked cells hatched, and (weights) the sums. */
  function drawGrid(canvas, g) {
    const ctx0 = canvas.getContext("2d");
    ctx0.font = "12px " + MONO;
    const label = (m) => short(g.tokens[m], 12);
    const widest = (ms) => Math.max(24, ...ms.map((m) => ctx0.measureText(label(m)).width));
    const rowLabelW = Math.min(110, widest(g.rows)) + 10;
    const colLabelH = Math.min(110, widest(g.cols)) + 10;
    const nR = g.rows.length, nC = g.cols.length;
    const title = 20;
    const left = title + rowLabelW, top = title + colLabelH;
    const sumW = g.sum === "right" ? 48 : 0, sumH = g.sum === "bottom" ? 34 : 0;
    const room = g.maxWidth - left - sumW - 6;
    const fit = (n, space) => Math.max(4, Math.min(34, Math.floor(space / n)));
    let cw = Math.min(fit(nC, room), fit(nR, 520)), ch = cw;
    if (nR <= 2) ch = Math.max(cw, 24); // one question (a long text's last row): a readable strip
    if (nC <= 2) cw = Math.max(ch, 24);
    const rowTitleY = top + Math.max(nR * ch / 2, 44); // the axis titles must fit even beside a thin strip
    const W = Math.max(left + nC * cw + sumW + 6, left + nC * cw / 2 + 72);
    const H = Math.max(top + nR * ch + sumH + 6, rowTitleY + 46);
    const ctx = sizeCanvas(canvas, W, H);
    canvas.__geom = { left, top, cw, ch, nR, nC };
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    const pattern = hatch(ctx);
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    for (let r = 0; r < nR; r++) {
      for (let c = 0; c < nC; c++) {
        const v = g.matrix[r][c];
        const masked = (g.mask && !g.mask[r][c]) || v == null;
        const x = left + c * cw, y = top + r * ch;
        let col = null;
        if (masked) ctx.fillStyle = pattern;
        else { col = g.kind === "scores" ? divergingColor(v, g.scale) : weightColor(v); ctx.fillStyle = rgb(col); }
        ctx.fillRect(x, y, cw, ch);
        if (!masked && cw >= 30 && ch >= 16) {
          ctx.fillStyle = isLight(col) ? "#111" : "#fff";
          ctx.font = "10px " + SANS;
          ctx.fillText(g.kind === "scores" ? v.toFixed(1) : v.toFixed(2), x + cw / 2, y + ch / 2);
        }
      }
    }
    ctx.strokeStyle = "#444"; ctx.lineWidth = 1;
    ctx.strokeRect(left - 0.5, top - 0.5, nC * cw + 1, nR * ch + 1);
    // member labels on both axes
    ctx.font = "12px " + MONO; ctx.fillStyle = "#222";
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    g.rows.forEach((m, r) => {
      if (ch < 13 && r % Math.ceil(13 / ch)) return; // labels no closer than 13 px
      ctx.font = (m === g.hover || m === g.selected ? "bold " : "") + "12px " + MONO;
      ctx.fillText(label(m), left - 6, top + r * ch + ch / 2);
    });
    g.cols.forEach((m, c) => {
      if (cw < 13 && c % Math.ceil(13 / cw)) return;
      ctx.save();
      ctx.translate(left + c * cw + cw / 2, top - 6);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.font = (m === g.hover || m === g.selected ? "bold " : "") + "12px " + MONO;
      ctx.fillText(label(m), 0, 0);
      ctx.restore();
    });
    // axis titles: which axis asks, which answers
    ctx.font = "italic 12px " + SANS; ctx.fillStyle = "#555"; ctx.textAlign = "center";
    ctx.fillText(g.colTitle, left + (nC * cw) / 2, 10);
    ctx.save(); ctx.translate(10, rowTitleY); ctx.rotate(-Math.PI / 2);
    ctx.fillText(g.rowTitle, 0, 0); ctx.restore();
    // the sums that equal 1, on the grid's edge
    if (g.sum) {
      ctx.font = "10px " + SANS; ctx.fillStyle = "#333";
      const sums = g.sum === "right" ? g.matrix.map((row) => row.reduce((a, b) => a + (b || 0), 0))
        : g.cols.map((_, c) => g.matrix.reduce((a, row) => a + (row[c] || 0), 0));
      if (g.sum === "right") {
        ctx.textAlign = "left";
        ctx.fillText("\u03a3 = 1", left + nC * cw + 6, top - 8);
        if (ch >= 11) sums.forEach((s, r) => ctx.fillText(s.toFixed(3), left + nC * cw + 6, top + r * ch + ch / 2));
        ctx.fillRect(left + nC * cw + 2, top, 1, nR * ch);
      } else {
        ctx.textAlign = "right";
        ctx.fillText("\u03a3 = 1", left - 6, top + nR * ch + 12);
        ctx.textAlign = "center";
        sums.forEach((s, c) => {
          if (cw >= 26) ctx.fillText(s.toFixed(2), left + c * cw + cw / 2, top + nR * ch + 12);
        });
        ctx.fillRect(left, top + nR * ch + 2, nC * cw, 1);
        ctx.fillStyle = "#555"; ctx.font = "italic 11px " + SANS;
        ctx.fillText("each column sums to 1", left + (nC * cw) / 2, top + nR * ch + 27);
      }
    }
    // the selected question and the hovered member
    const outline = (m, dashed) => {
      ctx.save();
      ctx.strokeStyle = dashed ? "#d62728" : "#000"; ctx.lineWidth = 2;
      if (dashed) ctx.setLineDash([4, 3]);
      const r = g.rows.indexOf(m), c = g.cols.indexOf(m);
      if (g.questionAxis === "rows" && r >= 0) ctx.strokeRect(left - 1, top + r * ch - 1, nC * cw + 2, ch + 2);
      if (g.questionAxis === "cols" && c >= 0) ctx.strokeRect(left + c * cw - 1, top - 1, cw + 2, nR * ch + 2);
      ctx.restore();
    };
    if (g.selected != null) outline(g.selected, false);
    if (g.hover != null && g.hover !== g.selected) outline(g.hover, true);
  }

  function drawLegend(canvas, kind, scale) {
    const W = 230, H = 38;
    const ctx = sizeCanvas(canvas, W, H);
    const x0 = 8, w = 150, y = 4, h = 10;
    for (let i = 0; i < w; i++) {
      const t = i / (w - 1);
      ctx.fillStyle = rgb(kind === "scores" ? divergingColor(2 * t - 1, 1) : weightColor(t));
      ctx.fillRect(x0 + i, y, 1, h);
    }
    ctx.strokeStyle = "#666"; ctx.strokeRect(x0 - 0.5, y - 0.5, w + 1, h + 1);
    ctx.fillStyle = hatch(ctx); ctx.fillRect(x0 + w + 14, y, 14, h);
    ctx.strokeRect(x0 + w + 13.5, y - 0.5, 15, h + 1);
    ctx.fillStyle = "#333"; ctx.font = "10px " + SANS; ctx.textBaseline = "top";
    const ticks = kind === "scores" ? [[0, "\u2212" + scale.toPrecision(3)], [0.5, "0"], [1, "+" + scale.toPrecision(3)]]
      : [[0, "0"], [0.5, "0.5"], [1, "1"]];
    for (const [t, s] of ticks) {
      ctx.textAlign = t === 0 ? "left" : t === 1 ? "right" : "center";
      ctx.fillText(s, x0 + t * w, y + h + 3);
    }
    ctx.textAlign = "left"; ctx.fillText("masked", x0 + w + 8, y + h + 3);
  }

  /** Whether a view (model view or head) was computed with something silenced. */
  const isSilenced = (d) => Boolean(d && ((d.silenced_members || []).length || (d.silenced_heads || []).length));

  /** " Silenced in this run: …" for a view computed with something silenced, else "" (as the CLI words it). */
  function silencedNote(d) {
    if (!isSilenced(d)) return "";
    const parts = (d.silenced_members || []).map((j) => "member " + j + (d.tokens ? " (" + d.tokens[j] + ")" : "") + ": nobody hears its answer (masked, as the future is)");
    for (const [a, b] of d.silenced_heads || []) parts.push("layer " + a + " head " + b + ": writes nothing");
    return " Silenced in this run: " + parts.join("; ") + ".";
  }

  /** A thumbnail of one head's weights (paper: rows are questions; transposed for the video). */
  function drawThumb(canvas, weights, size, transpose) {
    const R = weights.length, C = weights[0].length;
    const nR = transpose ? C : R, nC = transpose ? R : C;
    const off = document.createElement("canvas");
    off.width = nC; off.height = nR;
    const o = off.getContext("2d");
    const img = o.createImageData(nC, nR);
    for (let r = 0; r < nR; r++) {
      for (let c = 0; c < nC; c++) {
        const i = transpose ? c : r, j = transpose ? r : c;
        // causal mask: with all rows, member i cannot hear j > i; with the last row only, every j is heard
        const masked = R > 1 && j > i;
        const col = masked ? MASKED_FLAT : weightColor(weights[i][j]);
        const p = 4 * (r * nC + c);
        img.data[p] = col[0]; img.data[p + 1] = col[1]; img.data[p + 2] = col[2]; img.data[p + 3] = 255;
      }
    }
    o.putImageData(img, 0, 0);
    const ctx = sizeCanvas(canvas, size, size);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, 0, 0, size, size);
  }
  function drawFlat(canvas, color, size) {
    const ctx = sizeCanvas(canvas, size, size);
    ctx.fillStyle = rgb(color); ctx.fillRect(0, 0, size, size);
  }

  function download(name, href) {
    const a = el("a", { attrs: { href, download: name } });
    document.body.appendChild(a); a.click(); a.remove();
  }
  function downloadJSON(name, data) {
    const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
    download(name, url);
    setTimeout(() => URL.revokeObjectURL(url), 5000);
  }

  // ---- one instance ------------------------------------------------------------------------------
  class Instance {
    constructor(root, opts) {
      this.root = root;
      this.api = opts.api || null; // null: static data only (report, notebook)
      this.gen = 0;
      this.heads = new Map(); // "l.h.notation.rows" -> head payload (server mode)
      this.ui = { notation: "paper", selected: null, hover: null, layer: null, head: null, rows: "auto",
        members: new Set(), headsSilenced: new Set(), headChosen: false };
      this.d = {};
      root.classList.add("sg-root");
      root.studygroup = this;
      this.build();
      if (this.api) this.start();
      else this.show(opts.data || {});
    }

    q(sel) { return this.root.querySelector(sel); }
    qa(sel) { return Array.from(this.root.querySelectorAll(sel)); }

    // -- skeleton --
    build() {
      const r = clear(this.root);
      const section = (cls, title, hint) => el("section", { cls: "sg-card " + cls }, [
        el("h2", { text: title }), hint ? el("p", { cls: "sg-hint", text: hint }) : null]);
      this.status = el("p", { cls: "sg-status", attrs: { role: "status", "aria-live": "polite" } });
      const header = el("header", { cls: "sg-header" }, [
        el("h1", {}, [el("span", { cls: "sg-brand", text: "studygroup" }), " the attention layer as a study group"]),
        el("p", { cls: "sg-model" }), this.status]);
      const input = section("sg-input", "The text and its members");
      if (this.api) {
        const form = el("form", { cls: "sg-form", on: { submit: (e) => { e.preventDefault(); this.submit(); } } }, [
          el("label", { cls: "sg-label", attrs: { for: this.id("text") }, text: "Text (the group predicts the word that comes next)" }),
          el("textarea", { cls: "sg-text", attrs: { id: this.id("text"), name: "text", rows: 2, spellcheck: "false", maxlength: 4000 } }),
          el("label", { cls: "sg-label", attrs: { for: this.id("other") }, text: "Compare with another context (optional): the same text without its first sentence, say" }),
          el("input", { cls: "sg-other", attrs: { id: this.id("other"), name: "other", type: "text", spellcheck: "false", maxlength: 4000, placeholder: "e.g. I have a lot" } }),
          el("div", { cls: "sg-actions" }, [el("button", { cls: "sg-go", attrs: { type: "submit" }, text: "Explain" }),
            el("span", { cls: "sg-hint", text: "Ctrl+Enter in the text box does the same." })])]);
        form.querySelector("textarea").addEventListener("keydown", (e) => {
          if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.submit(); }
        });
        input.appendChild(form);
      } else {
        input.appendChild(el("p", { cls: "sg-given" }));
      }
      input.appendChild(el("p", { cls: "sg-hint", text: "Tab to a member and press Enter to select its question; \u2298 silences it (nobody hears its answer). Esc clears the selection. \u2423 marks a space, \u21b5 a newline, \u21e5 a tab." }));
      input.appendChild(el("div", { cls: "sg-chips", attrs: { role: "list", "aria-label": "members" } }));
      input.appendChild(el("div", { cls: "sg-silenced" }));

      const conclusion = section("sg-conclusion", "The conclusion", "The most likely next words. Silencing shows the old value as a ghost bar.");
      conclusion.appendChild(el("div", { cls: "sg-bars" }));
      conclusion.appendChild(el("div", { cls: "sg-shift" }));
      const story = section("sg-story", "The story");
      story.appendChild(el("div", { cls: "sg-sentences" }));
      story.appendChild(el("div", { cls: "sg-decisive" }));

      const mv = section("sg-modelview", "The model view", "Every head's weights on this text: one row per layer, one column per head. Click a head (or Tab to it and press Enter) to open it.");
      mv.appendChild(el("div", { cls: "sg-mv-grid" }));
      mv.appendChild(el("div", { cls: "sg-mv-legend" }));
      mv.appendChild(el("div", { cls: "sg-save" }, [
        el("button", { attrs: { type: "button" }, text: "Save model view (PNG)", on: { click: () => this.saveModelView() } }),
        el("button", { attrs: { type: "button" }, text: "Save data (JSON)", on: { click: () => downloadJSON("studygroup.json", this.d) } })]));

      const head = section("sg-head", "The head");
      head.appendChild(el("div", { cls: "sg-head-title" }));
      const orient = el("div", { cls: "sg-orient", attrs: { role: "group", "aria-label": "orientation" } }, [
        el("button", { attrs: { type: "button", "aria-pressed": "true" }, data: { notation: "paper" }, text: "Paper: rows are questions" }),
        el("button", { attrs: { type: "button", "aria-pressed": "false" }, data: { notation: "columns" }, text: "Video: columns are questions" })]);
      orient.addEventListener("click", (e) => { const b = e.target.closest("button"); if (b) this.setNotation(b.dataset.notation); });
      head.appendChild(el("div", { cls: "sg-head-controls" }, [orient,
        el("button", { cls: "sg-silence-head", attrs: { type: "button", "aria-pressed": "false" }, text: "\u2298 Silence this head", on: { click: () => this.toggleHead(this.ui.layer, this.ui.head) } }),
        el("button", { cls: "sg-full", attrs: { type: "button", hidden: "" }, text: "Show the full grid", on: { click: () => { this.ui.rows = "all"; this.openHead(this.ui.layer, this.ui.head); } } }),
        el("button", { cls: "sg-save-head", attrs: { type: "button" }, text: "Save head (PNG)", on: { click: () => this.saveHead() } })]));
      const figure = (kind, caption) => el("figure", { cls: "sg-fig sg-fig-" + kind }, [
        el("figcaption", { text: caption }),
        el("div", { cls: "sg-canvas-wrap" }, [el("canvas", { cls: "sg-grid sg-grid-" + kind, attrs: { tabindex: "-1", role: "img" } })]),
        el("canvas", { cls: "sg-legend sg-legend-" + kind, attrs: { role: "img" } })]);
      head.appendChild(el("div", { cls: "sg-figs" }, [figure("scores", "Scores Q\u00b7K\u1d40/\u221ad\u2096"), figure("weights", "Weights: softmax of the scores")]));
      head.appendChild(el("p", { cls: "sg-check sg-hint" }));
      head.appendChild(el("div", { cls: "sg-member" }));
      head.appendChild(el("p", { cls: "sg-head-empty sg-hint" }));

      r.appendChild(header);
      r.appendChild(el("div", { cls: "sg-layout" }, [input, conclusion, story, mv, head]));
      this.tip = el("div", { cls: "sg-tip", attrs: { role: "tooltip", hidden: "" } });
      r.appendChild(this.tip);
      for (const kind of ["scores", "weights"]) this.wireGrid(this.q(".sg-grid-" + kind), kind);
      const onEsc = (e) => { if (e.key === "Escape") this.clearSelection(); };
      // the page owns the whole document; a report or notebook view answers only inside itself
      (this.api ? document : this.root).addEventListener("keydown", onEsc);
    }

    id(name) {
      if (!this.uid) this.uid = "sg" + Math.random().toString(36).slice(2, 10);
      return this.uid + "-" + name;
    }

    say(message, kind) {
      this.status.textContent = message || "";
      this.status.dataset.kind = kind || "";
      this.status.setAttribute("role", kind === "error" ? "alert" : "status");
    }

    // -- server mode --
    async post(path, body) {
      for (let attempt = 0; ; attempt++) {
        const res = await fetch(this.api + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        let data = null;
        try { data = await res.json(); } catch (e) { data = null; }
        if (res.status === 503 && attempt < 3) { await new Promise((ok) => setTimeout(ok, 2000 * (attempt + 1))); continue; }
        if (!res.ok) throw new Error((data && data.error) || "the server answered " + res.status);
        return data;
      }
    }

    async start() {
      try {
        const res = await fetch(this.api + "/info");
        const info = await res.json();
        this.d.info = info;
        this.q(".sg-model").textContent = info.model.name + ": " + info.model.n_layers + " layers \u00d7 " + info.model.n_heads +
          " heads, " + info.model.n_kv_heads + " key/value heads shared by groups of " + info.group_size + " query heads";
        this.q(".sg-text").value = info.default_text;
        this.submit();
      } catch (e) { this.say("Cannot reach the studygroup server: " + e.message, "error"); }
    }

    async submit() {
      const text = this.q(".sg-text").value;
      const other = this.q(".sg-other").value.trim();
      if (!text.trim()) { this.say("Type a text first.", "error"); return; }
      const gen = ++this.gen;
      const live = () => gen === this.gen;
      Object.assign(this.ui, { selected: null, hover: null, members: new Set(), headsSilenced: new Set(), headChosen: false, rows: "auto" });
      this.heads.clear();
      this.d = { info: this.d.info, text, other: other || null };
      this.renderAll();
      try {
        this.say("Reading the members\u2026", "busy");
        const c = await this.post("/conclusion", { text, top: 10 });
        if (!live()) return;
        this.d.conclusion = c;
        this.renderMembers(); this.renderConclusion();
        this.say("Drawing every head\u2026", "busy");
        const mv = await this.post("/model_view", { text });
        if (!live()) return;
        this.d.modelView = mv;
        this.renderModelView();
        const first = this.rankedHeads()[0] || [0, 0];
        await this.openHead(first[0], first[1], false);
        if (!live()) return;
        this.say("Finding who decided it: silencing members and heads one at a time (this takes a while on a CPU)\u2026", "busy");
        if (other) {
          const cmp = await this.post("/compare", { text_a: other, text_b: text, top: 10 });
          if (!live()) return;
          this.d.comparison = cmp; this.d.explanation = cmp.b;
        } else {
          const e = await this.post("/explain", { text, top: 10 });
          if (!live()) return;
          this.d.explanation = e;
        }
        this.renderMembers(); this.renderConclusion(); this.renderStory(); this.renderModelView();
        if (!this.ui.headChosen && this.d.explanation.heads.length) {
          const h = this.d.explanation.heads[0];
          await this.openHead(h.layer, h.head, false);
        } else this.renderHead();
        if (live()) this.say("");
      } catch (e) { if (live()) this.say(e.message, "error"); }
    }

    /** What is silenced now, as the API takes it (empty lists when nothing is). */
    silencing() {
      return { silence_members: [...this.ui.members].sort((a, b) => a - b),
        silence_heads: [...this.ui.headsSilenced].map((k) => k.split(".").map(Number)).sort((a, b) => a[0] - b[0] || a[1] - b[1]) };
    }

    async resilence() {
      if (!this.api) { this.renderConclusion(); return; }
      const gen = this.gen;
      const silencing = this.silencing();
      try {
        this.say("Recomputing the conclusion with the silenced members and heads\u2026", "busy");
        const c = await this.post("/conclusion", { text: this.d.text, top: 10, ...silencing });
        if (gen !== this.gen) return;
        this.d.conclusion = c;
        this.renderConclusion();
        this.say("Redrawing every head as it listens with them silenced\u2026", "busy");
        const mv = await this.post("/model_view", { text: this.d.text, ...silencing });
        if (gen !== this.gen || JSON.stringify(silencing) !== JSON.stringify(this.silencing())) return;
        this.d.modelView = mv;
        this.renderModelView();
        this.say("");
        if (this.ui.layer != null) await this.openHead(this.ui.layer, this.ui.head, false);
      } catch (e) { if (gen === this.gen) this.say(e.message, "error"); }
    }

    // -- static mode (report, notebook) --
    show(data) {
      const e = data.explanation || (data.comparison && data.comparison.b) || null;
      this.d = { text: data.text || (e && e.text), explanation: e, comparison: data.comparison || null,
        modelView: data.model_view || null, conclusion: data.conclusion || null, embeddedHeads: data.heads || {} };
      if (e) {
        const m = e.model;
        this.q(".sg-model").textContent = m.name + ": " + m.n_layers + " layers \u00d7 " + m.n_heads + " heads, " + m.n_kv_heads + " key/value heads";
      }
      const given = this.q(".sg-given");
      given.textContent = "";
      given.appendChild(el("span", { cls: "sg-label", text: "Text" }));
      given.appendChild(el("q", { text: this.d.text == null ? "(token ids)" : this.d.text }));
      if (this.d.comparison) {
        given.appendChild(el("span", { cls: "sg-label", text: "compared with" }));
        given.appendChild(el("q", { text: this.d.comparison.a.text }));
      }
      this.renderAll();
      const first = e && e.heads.length ? [e.heads[0].layer, e.heads[0].head] : this.rankedHeads()[0];
      if (first) this.openHead(first[0], first[1], false);
      this.say(this.d.modelView ? "A saved report: everything here is inside this file; silencing shows the precomputed effects."
        : "A saved explanation: members, conclusion, story, and every head's direct contribution.");
    }

    renderAll() {
      this.renderMembers(); this.renderConclusion(); this.renderStory(); this.renderModelView(); this.renderHead();
    }

    tokens() {
      const d = this.d;
      return (d.conclusion && d.conclusion.tokens) || (d.explanation && d.explanation.tokens) || (d.modelView && d.modelView.tokens) || [];
    }

    // -- members --
    renderMembers() {
      const box = clear(this.q(".sg-chips"));
      const e = this.d.explanation;
      this.tokens().forEach((t, j) => {
        const effect = e && e.members[j] && e.members[j].effect;
        const main = el("button", { cls: "sg-chip-main", attrs: { type: "button", "aria-label": "member " + j + ": " + t },
          on: { click: () => this.select(j) } }, [tokenNode(t)]);
        if (effect != null) main.title = "member " + j + "; silencing it in every head changes log p(" + e.predicted.token + ") by " + signed(effect, 3);
        else main.title = "member " + j;
        const mute = el("button", { cls: "sg-mute", attrs: { type: "button", "aria-pressed": this.ui.members.has(j), "aria-label": "silence member " + j, title: "silence member " + j },
          text: "\u2298", on: { click: () => this.toggleMember(j) } });
        const chip = el("span", { cls: "sg-chip", attrs: { role: "listitem" }, data: { index: j } }, [main, mute]);
        chip.addEventListener("mouseenter", () => this.setHover(j));
        chip.addEventListener("mouseleave", () => this.setHover(null));
        box.appendChild(chip);
      });
      this.renderSilencedList();
      this.paintMembers();
    }

    paintMembers() {
      for (const chip of this.qa(".sg-chip, .sg-storychip")) {
        const j = Number(chip.dataset.index);
        chip.classList.toggle("sg-selected", j === this.ui.selected);
        chip.classList.toggle("sg-hover", j === this.ui.hover);
        chip.classList.toggle("sg-muted", this.ui.members.has(j));
        const mute = chip.querySelector(".sg-mute");
        if (mute) mute.setAttribute("aria-pressed", String(this.ui.members.has(j)));
      }
    }

    renderSilencedList() {
      const box = clear(this.q(".sg-silenced"));
      if (!this.ui.members.size && !this.ui.headsSilenced.size) return;
      box.appendChild(el("span", { cls: "sg-label", text: "Silenced: " }));
      const toks = this.tokens();
      for (const j of [...this.ui.members].sort((a, b) => a - b)) {
        box.appendChild(el("button", { cls: "sg-pill", attrs: { type: "button", title: "hear member " + j + " again" }, on: { click: () => this.toggleMember(j) } },
          [tokenNode(toks[j]), " (" + j + ") \u00d7"]));
      }
      for (const k of this.ui.headsSilenced) {
        const [l, h] = k.split(".");
        box.appendChild(el("button", { cls: "sg-pill", attrs: { type: "button", title: "let this head write again" }, on: { click: () => this.toggleHead(+l, +h) } },
          ["layer " + l + " head " + h + " \u00d7"]));
      }
      box.appendChild(el("button", { cls: "sg-link", attrs: { type: "button" }, text: "clear all", on: { click: () => {
        this.ui.members.clear(); this.ui.headsSilenced.clear(); this.afterSilence(); } } }));
    }

    toggleMember(j) {
      if (this.ui.members.has(j)) this.ui.members.delete(j);
      else {
        if (!this.api) this.clearSilencing(); // a file holds one silencing at a time
        this.ui.members.add(j);
      }
      this.afterSilence();
    }

    toggleHead(l, h) {
      if (l == null) return;
      const k = l + "." + h;
      if (this.ui.headsSilenced.has(k)) this.ui.headsSilenced.delete(k);
      else {
        if (!this.api) this.clearSilencing();
        this.ui.headsSilenced.add(k);
      }
      this.afterSilence();
    }

    clearSilencing() { this.ui.members.clear(); this.ui.headsSilenced.clear(); }

    afterSilence() {
      this.renderSilencedList(); this.paintMembers(); this.paintThumbs(); this.paintHeadControls();
      this.resilence();
    }

    select(j) {
      this.ui.selected = this.ui.selected === j ? null : j;
      this.paintMembers(); this.drawHeadGrids(); this.renderMemberPanel();
    }
    setHover(j) {
      if (this.ui.hover === j) return;
      this.ui.hover = j;
      this.paintMembers(); this.drawHeadGrids();
    }
    clearSelection() {
      this.ui.selected = null; this.ui.hover = null;
      this.tip.hidden = true;
      this.paintMembers(); this.drawHeadGrids(); this.renderMemberPanel();
    }

    // -- conclusion --
    renderConclusion() {
      const bars = clear(this.q(".sg-bars"));
      const shift = clear(this.q(".sg-shift"));
      const c = this.d.conclusion, e = this.d.explanation;
      const top = (c && c.top) || (e && e.top);
      if (!top) return;
      let rows = top.map((w) => ({ token: w.token, id: w.id, now: w.prob, ghost: null }));
      let note = null;
      if (this.api && c && c.silenced) {
        rows = c.words.map((w) => ({ token: w.token, id: w.id, now: w.prob_after, ghost: w.prob_before }))
          .sort((a, b) => Math.max(b.now, b.ghost) - Math.max(a.now, a.ghost));
        note = "Bars: with the silencing. Outlines: before.";
      } else if (!this.api && e && (this.ui.members.size || this.ui.headsSilenced.size)) {
        const p = this.staticSilenced(e);
        if (p != null) {
          rows = rows.map((r) => (r.id === e.predicted.id ? { ...r, now: p, ghost: r.now } : { ...r, now: null, ghost: r.now }));
          note = "This file holds the effect of silencing one member or one tested head on the predicted word only; run `studygroup serve` for the rest.";
        } else note = "This file does not hold that silencing; run `studygroup serve` to compute it.";
      }
      bars.dataset.silenced = String(Boolean(note));
      for (const r of rows.slice(0, 12)) {
        const track = el("div", { cls: "sg-track" });
        if (r.ghost != null) track.appendChild(el("div", { cls: "sg-ghost" }));
        if (r.now != null) track.appendChild(el("div", { cls: "sg-bar" }));
        if (r.ghost != null) track.firstChild.style.width = (100 * r.ghost).toFixed(2) + "%";
        if (r.now != null) track.lastChild.style.width = Math.max(0.3, 100 * r.now).toFixed(2) + "%";
        const value = r.now == null ? "?" : percent(r.now);
        const change = r.ghost != null && r.now != null ? " (" + signed(100 * (r.now - r.ghost), 1) + " pts)" : "";
        bars.appendChild(el("div", { cls: "sg-barrow", data: { id: r.id }, attrs: { title: r.token + ": " + sig4(r.now) } }, [
          tokenNode(r.token, "sg-word"), track, el("span", { cls: "sg-value", text: value + change })]));
      }
      if (note) bars.appendChild(el("p", { cls: "sg-hint", text: note }));
      const cmp = this.d.comparison;
      if (cmp) {
        shift.appendChild(el("h3", { text: "The shift between the two contexts" }));
        shift.appendChild(el("p", { cls: "sg-hint" }, ["A: ", el("q", { text: cmp.a.text }), "   B: ", el("q", { text: cmp.b.text })]));
        for (const s of cmp.shift.slice(0, 8)) {
          const track = el("div", { cls: "sg-track sg-pair" }, [el("div", { cls: "sg-bar sg-a" }), el("div", { cls: "sg-bar sg-b" })]);
          track.children[0].style.width = Math.max(0.3, 100 * s.prob_a).toFixed(2) + "%";
          track.children[1].style.width = Math.max(0.3, 100 * s.prob_b).toFixed(2) + "%";
          shift.appendChild(el("div", { cls: "sg-barrow", data: { id: s.id } }, [tokenNode(s.token, "sg-word"), track,
            el("span", { cls: "sg-value", text: percent(s.prob_a) + " \u2192 " + percent(s.prob_b) + " (" + signed(100 * s.change, 1) + " pts)" })]));
        }
        shift.appendChild(el("p", { cls: "sg-hint" }, [el("span", { cls: "sg-key sg-a" }), " after A   ", el("span", { cls: "sg-key sg-b" }), " after B"]));
      }
    }

    staticSilenced(e) {
      if (this.ui.members.size === 1) { const m = e.members[[...this.ui.members][0]]; return m ? m.prob_silenced : null; }
      if (this.ui.headsSilenced.size === 1) {
        const [l, h] = [...this.ui.headsSilenced][0].split(".").map(Number);
        const x = e.heads.find((y) => y.layer === l && y.head === h);
        return x ? x.prob_silenced : null;
      }
      return null;
    }

    // -- story --
    renderStory() {
      const box = clear(this.q(".sg-sentences"));
      const dec = clear(this.q(".sg-decisive"));
      const e = this.d.explanation, cmp = this.d.comparison;
      if (!e) { box.appendChild(el("p", { cls: "sg-hint", text: this.api ? "The story comes when the group's decision has been traced." : "" })); return; }
      const sentences = [...(cmp ? cmp.story : []), ...e.story];
      const tokens = e.tokens;
      for (const s of sentences) box.appendChild(this.sentence(s, tokens));
      if (!e.heads.length) return;
      dec.appendChild(el("h3", { text: "Decisive heads" }));
      dec.appendChild(el("p", { cls: "sg-hint", text: "Silenced one at a time (" + e.heads_silenced + "): change in log p(" + e.predicted.token + ")." }));
      const list = el("ol", { cls: "sg-declist" });
      for (const h of e.heads.slice(0, 8)) {
        list.appendChild(el("li", {}, [el("button", { attrs: { type: "button" }, on: { click: () => this.openHead(h.layer, h.head) } },
          ["layer " + h.layer + " head " + h.head + " (kv " + h.kv_head + "): " + signed(h.silence_effect, 3)])]));
      }
      dec.appendChild(list);
    }

    /** A story sentence with the quoted members as chips that highlight. */
    sentence(s, tokens) {
      const p = el("p");
      const re = /\u201c([^\u201d]*)\u201d/g;
      let last = 0, m;
      while ((m = re.exec(s)) !== null) {
        if (m.index > last) p.appendChild(document.createTextNode(s.slice(last, m.index)));
        const after = s.slice(re.lastIndex);
        const named = /^ \(member (\d+)/.exec(after);
        let j = named ? Number(named[1]) : tokens.lastIndexOf(m[1]);
        if (j >= 0 && tokens[j] === m[1]) {
          const chip = el("button", { cls: "sg-storychip", attrs: { type: "button", title: "member " + j }, data: { index: j },
            on: { click: () => this.select(j), mouseenter: () => this.setHover(j), mouseleave: () => this.setHover(null) } }, [tokenNode(m[1])]);
          p.appendChild(chip);
        } else {
          p.appendChild(document.createTextNode("\u201c"));
          p.appendChild(tokenNode(m[1], "sg-quoted"));
          p.appendChild(document.createTextNode("\u201d"));
        }
        last = re.lastIndex;
      }
      if (last < s.length) p.appendChild(document.createTextNode(s.slice(last)));
      return p;
    }

    // -- model view --
    rankedHeads() {
      const e = this.d.explanation, mv = this.d.modelView;
      if (e && e.heads.length) return e.heads.map((h) => [h.layer, h.head]);
      if (!mv) return [];
      const ranked = [];
      mv.heads.forEach((row) => row.forEach((h) => { if (h.rank != null) ranked[h.rank - 1] = [h.layer, h.head]; }));
      return ranked.filter(Boolean);
    }

    renderModelView() {
      const grid = clear(this.q(".sg-mv-grid"));
      const legend = clear(this.q(".sg-mv-legend"));
      const mv = this.d.modelView, e = this.d.explanation;
      grid.dataset.silenced = String(isSilenced(mv));
      const shape = mv || (e && e.model);
      if (!shape) return;
      const L = shape.n_layers, H = shape.n_heads, G = shape.n_kv_heads, size = H > 12 ? 18 : 26;
      const group = H / G;
      const rank = new Map(this.rankedHeads().map(([l, h], i) => [l + "." + h, i + 1]));
      const contrib = e ? e.contributions : null;
      const M = contrib ? Math.max(1e-9, ...contrib.flat().map(Math.abs)) : 1;
      const heading = el("div", { cls: "sg-mv-row sg-mv-heading" }, [el("span", { cls: "sg-mv-layer" })]);
      for (let g = 0; g < G; g++) {
        const gh = el("span", { cls: "sg-mv-group sg-mv-glabel", text: "kv " + g, attrs: { title: "query heads " + (g * group) + "\u2013" + (g * group + group - 1) + " share key/value head " + g } });
        gh.style.width = (group * (size + 4)) + "px";
        heading.appendChild(gh);
      }
      grid.appendChild(heading);
      const headNums = el("div", { cls: "sg-mv-row sg-mv-headnums" }, [el("span", { cls: "sg-mv-layer", text: "layer" })]);
      for (let g = 0; g < G; g++) {
        const gs = el("span", { cls: "sg-mv-group" });
        for (let k = 0; k < group; k++) { const s = el("span", { cls: "sg-mv-num", text: String(g * group + k) }); s.style.width = size + "px"; gs.appendChild(s); }
        headNums.appendChild(gs);
      }
      grid.appendChild(headNums);
      const transpose = this.ui.notation === "columns";
      for (let l = 0; l < L; l++) {
        const row = el("div", { cls: "sg-mv-row" }, [el("span", { cls: "sg-mv-layer", text: String(l) })]);
        for (let g = 0; g < G; g++) {
          const gs = el("span", { cls: "sg-mv-group" });
          for (let k = 0; k < group; k++) {
            const h = g * group + k;
            const r = rank.get(l + "." + h);
            const canvas = el("canvas", { attrs: { "aria-hidden": "true" } });
            const b = el("button", { cls: "sg-thumb" + (r ? " sg-ranked" : "") + (r && r <= 3 ? " sg-top" : ""),
              attrs: { type: "button", "aria-label": "layer " + l + " head " + h + " (key/value head " + g + ")" + (r ? ", decisive rank " + r : "") },
              data: { layer: l, head: h }, on: { click: () => this.openHead(l, h), keydown: (ev) => this.thumbKeys(ev, l, h, L, H) } }, [canvas]);
            if (r) b.appendChild(el("span", { cls: "sg-rank", text: String(r) }));
            if (mv) drawThumb(canvas, mv.heads[l][h].weights, size, transpose);
            else drawFlat(canvas, divergingColor(contrib[l][h], M), size);
            b.title = "layer " + l + ", head " + h + ", kv " + g + (r ? ", rank " + r : "") + (contrib ? "; direct contribution " + sig4(contrib[l][h]) : "");
            gs.appendChild(b);
          }
          row.appendChild(gs);
        }
        grid.appendChild(row);
      }
      if (mv) {
        const c = el("canvas", { attrs: { role: "img", "aria-label": "weight scale 0 to 1" } });
        drawLegend(c, "weights");
        legend.appendChild(c);
        legend.appendChild(el("p", { cls: "sg-hint", text: "Weights on one absolute 0\u20131 scale in every head (viridis); grey: masked (the future). " +
          (transpose ? "Video orientation: columns are questions." : "Paper orientation: rows are questions.") +
          (mv.rows === "last" ? " Long text: each thumbnail shows the last member's question only." : "") +
          silencedNote(mv) +
          " Numbered: the decisive heads, ranked by " + (e ? "the exact effect of silencing them." : mv.ranked_by + ".") }));
      } else {
        legend.appendChild(el("p", { cls: "sg-hint", text: "Each head's direct contribution to the logit of " + e.predicted.token +
          " (purple: against, orange: for; scale \u00b1" + M.toPrecision(3) + "). Numbered: the decisive heads, by the exact effect of silencing them." }));
      }
      this.paintThumbs();
    }

    thumbKeys(ev, l, h, L, H) {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      const m = moves[ev.key];
      if (!m) return;
      ev.preventDefault();
      const nl = Math.min(L - 1, Math.max(0, l + m[0])), nh = Math.min(H - 1, Math.max(0, h + m[1]));
      const b = this.q('.sg-thumb[data-layer="' + nl + '"][data-head="' + nh + '"]');
      if (b) b.focus();
    }

    paintThumbs() {
      for (const b of this.qa(".sg-thumb")) {
        const l = Number(b.dataset.layer), h = Number(b.dataset.head);
        b.classList.toggle("sg-open", l === this.ui.layer && h === this.ui.head);
        b.classList.toggle("sg-muted", this.ui.headsSilenced.has(l + "." + h));
      }
    }

    // -- the head --
    async openHead(l, h, chosen) {
      if (chosen !== false) this.ui.headChosen = true;
      if (this.ui.layer !== l || this.ui.head !== h) this.ui.rows = "auto";
      this.ui.layer = l; this.ui.head = h;
      this.paintThumbs(); this.paintHeadControls();
      if (!this.api) { this.renderHead(); return; }
      const key = this.headKey(l, h);
      if (!this.heads.has(key)) {
        const gen = this.gen;
        try {
          this.say("Opening head " + h + " of layer " + l + "\u2026", "busy");
          const d = await this.post("/head", { text: this.d.text, layer: l, head: h, notation: this.ui.notation, rows: this.ui.rows, ...this.silencing() });
          if (gen !== this.gen) return;
          if (this.heads.size > 40) this.heads.delete(this.heads.keys().next().value);
          this.heads.set(key, d);
          this.say("");
        } catch (e) { if (gen === this.gen) this.say(e.message, "error"); return; }
      }
      if (this.ui.layer === l && this.ui.head === h) this.renderHead();
    }

    /** The key of a head as asked now: its place, the orientation, the rows and what is silenced. */
    headKey(l, h) {
      return [l, h, this.ui.notation, this.ui.rows].join(".") + ":" + JSON.stringify(this.silencing());
    }

    currentHead() {
      if (this.ui.layer == null) return null;
      if (this.api) return this.heads.get(this.headKey(this.ui.layer, this.ui.head)) || null;
      const both = this.d.embeddedHeads && this.d.embeddedHeads[this.ui.layer + "." + this.ui.head];
      return both ? both[this.ui.notation] : null;
    }

    /** The head's last-question listening, from the explanation (when the head itself is not here). */
    listenedHead() {
      const e = this.d.explanation;
      return e ? e.heads.find((x) => x.layer === this.ui.layer && x.head === this.ui.head) || null : null;
    }

    setNotation(n) {
      if (n === this.ui.notation) return;
      this.ui.notation = n;
      for (const b of this.qa(".sg-orient button")) b.setAttribute("aria-pressed", String(b.dataset.notation === n));
      this.renderModelView();
      if (this.ui.layer != null) this.openHead(this.ui.layer, this.ui.head, false);
    }

    paintHeadControls() {
      const b = this.q(".sg-silence-head");
      const on = this.ui.headsSilenced.has(this.ui.layer + "." + this.ui.head);
      b.setAttribute("aria-pressed", String(on));
      b.textContent = on ? "\u2298 Silenced: let it write again" : "\u2298 Silence this head";
      b.disabled = this.ui.layer == null;
    }

    renderHead() {
      const title = clear(this.q(".sg-head-title"));
      const empty = this.q(".sg-head-empty");
      const figs = this.q(".sg-figs");
      const d = this.currentHead();
      const l = this.ui.layer, h = this.ui.head;
      this.paintHeadControls();
      this.q(".sg-check").textContent = d ? d.check.statement + silencedNote(d) : "";
      this.q(".sg-full").hidden = !(d && d.rows === "last");
      if (l == null) { figs.hidden = true; empty.textContent = ""; this.renderMemberPanel(); return; }
      const mvShape = this.d.modelView || (this.d.explanation && this.d.explanation.model);
      const group = mvShape ? mvShape.n_heads / mvShape.n_kv_heads : 1;
      const kv = Math.floor(h / group);
      const mates = []; for (let k = kv * group; k < (kv + 1) * group; k++) if (k !== h) mates.push(k);
      title.appendChild(el("h3", { text: "Head " + h + " of layer " + l }));
      const r = this.rankedHeads().findIndex(([a, b]) => a === l && b === h);
      const lh = this.listenedHead();
      title.appendChild(el("p", { cls: "sg-kv", text: "Key/value head " + kv + ": its keys and values are shared with query heads " + mates.join(" and ") +
        " of this layer (grouped-query attention)." + (r >= 0 ? " Decisive head, rank " + (r + 1) + (lh ? " (silencing it: " + signed(lh.silence_effect, 3) + " in log p)." : ".") : "") }));
      figs.hidden = !d;
      for (const b of this.qa(".sg-orient, .sg-save-head")) b.hidden = !d && !this.api;
      const grids = Object.keys(this.d.embeddedHeads || {}).length;
      if (!d && !this.api) {
        empty.textContent = (grids ? "This file holds the grids of the " + grids + " most decisive heads only"
          : "An explanation alone holds no grids (write a report or run `studygroup serve` for them)") +
          (lh ? "; below, whom this head's last question listens to." : ".");
      } else empty.textContent = "";
      this.drawHeadGrids();
      this.renderMemberPanel();
    }

    /** The grid as drawn: rows and columns are member indices; the matrix is in the current orientation. */
    gridSpec(kind) {
      const d = this.currentHead();
      if (!d) return null;
      const paper = d.notation === "paper";
      const all = d.tokens.map((_, i) => i);
      const matrix = kind === "scores" ? d.scores : d.weights;
      const scale = kind === "scores" ? Math.max(1e-9, ...matrix.flat().filter((x) => x != null).map(Math.abs)) : 1;
      return {
        kind, matrix, mask: d.mask, tokens: d.tokens, scale,
        rows: paper ? d.questions : all, cols: paper ? all : d.questions,
        questionAxis: paper ? "rows" : "cols",
        rowTitle: paper ? "question from\u2026" : "answer from\u2026",
        colTitle: paper ? "answer from\u2026" : "question from\u2026",
        sum: kind === "weights" ? (paper ? "right" : "bottom") : null,
        selected: this.ui.selected, hover: this.ui.hover, maxWidth: this.gridWidth(),
      };
    }

    /** Width for one grid: side by side when the head's card is wide enough, else one above the other. */
    gridWidth() {
      const avail = this.q(".sg-figs").clientWidth || 760;
      return avail >= 640 ? Math.floor((avail - 20) / 2) : avail;
    }

    drawHeadGrids() {
      for (const kind of ["scores", "weights"]) {
        const canvas = this.q(".sg-grid-" + kind);
        const g = this.gridSpec(kind);
        if (!g) continue;
        drawGrid(canvas, g);
        canvas.dataset.silenced = String(isSilenced(this.currentHead()));
        canvas.dataset.orientation = g.questionAxis === "rows" ? "paper" : "columns";
        canvas.dataset.rows = String(g.rows.length);
        canvas.dataset.cols = String(g.cols.length);
        canvas.setAttribute("aria-label", kind + " of head " + this.ui.head + " of layer " + this.ui.layer + ", " +
          (g.questionAxis === "rows" ? "rows are questions" : "columns are questions"));
        drawLegend(this.q(".sg-legend-" + kind), kind, g.scale);
      }
    }

    /** For tests and curious readers: the matrix exactly as drawn (rows × columns). */
    displayed(kind) {
      const g = this.gridSpec(kind);
      return g ? { orientation: g.questionAxis === "rows" ? "paper" : "columns", rows: g.rows, cols: g.cols, matrix: g.matrix } : null;
    }

    wireGrid(canvas, kind) {
      const cellAt = (ev) => {
        const geo = canvas.__geom, g = this.gridSpec(kind);
        if (!geo || !g) return null;
        const rect = canvas.getBoundingClientRect();
        const c = Math.floor((ev.clientX - rect.left - geo.left) / geo.cw), r = Math.floor((ev.clientY - rect.top - geo.top) / geo.ch);
        if (r < 0 || c < 0 || r >= geo.nR || c >= geo.nC) return null;
        return { g, r, c };
      };
      canvas.addEventListener("mousemove", (ev) => {
        const hit = cellAt(ev);
        if (!hit) { this.tip.hidden = true; return; }
        const { g, r, c } = hit;
        const qm = g.questionAxis === "rows" ? g.rows[r] : g.cols[c], am = g.questionAxis === "rows" ? g.cols[c] : g.rows[r];
        const v = g.matrix[r][c], masked = (g.mask && !g.mask[r][c]) || v == null;
        this.tip.textContent = "question from \u201c" + g.tokens[qm] + "\u201d (" + qm + ") \u2192 answer from \u201c" + g.tokens[am] + "\u201d (" + am + "): " +
          (masked ? "masked (the future: this question cannot hear it)" : kind + " " + sig4(v));
        this.tip.hidden = false;
        this.tip.style.left = (ev.clientX + 14) + "px";
        this.tip.style.top = (ev.clientY + 14) + "px";
      });
      canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
      canvas.addEventListener("click", (ev) => {
        const hit = cellAt(ev);
        if (hit) this.select(hit.g.questionAxis === "rows" ? hit.g.rows[hit.r] : hit.g.cols[hit.c]);
      });
    }

    /** The selected member's question in this head: its weights, and what each answer contributed. */
    renderMemberPanel() {
      const box = clear(this.q(".sg-member"));
      const d = this.currentHead(), i = this.ui.selected;
      let entries = null, asker = null;
      if (d && i != null && d.questions.includes(i)) {
        const paper = d.notation === "paper", qi = d.questions.indexOf(i);
        asker = d.tokens[i];
        entries = d.tokens.map((t, j) => {
          const w = paper ? d.weights[qi][j] : d.weights[j][qi];
          const c = paper ? d.contributions[qi][j] : d.contributions[j][qi];
          const ok = paper ? d.mask[qi][j] : d.mask[j][qi];
          return { index: j, token: t, weight: w, contribution: c, masked: !ok };
        }).filter((x) => !x.masked);
      } else if (!d && i != null) {
        const lh = this.listenedHead(), e = this.d.explanation;
        if (lh && e && i === e.tokens.length - 1) {
          asker = e.tokens[i];
          entries = lh.listened.map((x) => ({ index: x.index, token: x.token, weight: x.weight, contribution: x.contribution }))
            .sort((a, b) => a.index - b.index);
        }
      }
      if (i == null) {
        box.appendChild(el("p", { cls: "sg-hint", text: "Select a member (click a chip, or a cell of the grid) to see its question's weights in this head and what each answer contributed." }));
        return;
      }
      if (!entries) {
        box.appendChild(el("p", { cls: "sg-hint", text: "This head's data for that member's question is not here." + (this.api ? " For a long text, show the full grid." : "") }));
        return;
      }
      if (entries.length > 40) entries = entries.sort((a, b) => b.contribution - a.contribution).slice(0, 40).sort((a, b) => a.index - b.index);
      const maxC = Math.max(1e-9, ...entries.map((x) => x.contribution));
      box.appendChild(el("h3", {}, ["The question from ", tokenNode(asker, "sg-chipish"), " (member " + i + ") in head " + this.ui.head + " of layer " + this.ui.layer]));
      box.appendChild(el("p", { cls: "sg-hint", text: "Weight: the share of attention it gives each answer (sums to 1). Contribution: weight \u00d7 \u2016v\u2c7c\u00b7W_O\u2016, the size of that answer in what the head writes. The two can disagree." }));
      const table = el("div", { cls: "sg-listen", attrs: { role: "table" } }, [el("div", { cls: "sg-listen-row sg-listen-head", attrs: { role: "row" } }, [
        el("span", { text: "answer from", attrs: { role: "columnheader" } }), el("span", { text: "weight", attrs: { role: "columnheader" } }),
        el("span", { text: "contribution", attrs: { role: "columnheader" } })])]);
      for (const x of entries) {
        const wb = el("div", { cls: "sg-track sg-small" }, [el("div", { cls: "sg-bar sg-wbar" })]);
        wb.firstChild.style.width = (100 * x.weight).toFixed(2) + "%";
        wb.firstChild.style.background = rgb(weightColor(x.weight));
        const cb = el("div", { cls: "sg-track sg-small" }, [el("div", { cls: "sg-bar sg-cbar" })]);
        cb.firstChild.style.width = (100 * x.contribution / maxC).toFixed(2) + "%";
        const row = el("div", { cls: "sg-listen-row", attrs: { role: "row" }, data: { index: x.index } }, [
          el("span", { attrs: { role: "cell" } }, [tokenNode(x.token), el("span", { cls: "sg-idx", text: " " + x.index })]),
          el("span", { cls: "sg-cellbar", attrs: { role: "cell" } }, [wb, el("span", { cls: "sg-value", text: x.weight.toFixed(3) })]),
          el("span", { cls: "sg-cellbar", attrs: { role: "cell" } }, [cb, el("span", { cls: "sg-value", text: x.contribution.toPrecision(3) })])]);
        row.addEventListener("mouseenter", () => this.setHover(x.index));
        row.addEventListener("mouseleave", () => this.setHover(null));
        table.appendChild(row);
      }
      box.appendChild(table);
    }

    // -- saving --
    saveHead() {
      const a = this.q(".sg-grid-scores"), b = this.q(".sg-grid-weights");
      if (!this.currentHead()) return;
      const out = document.createElement("canvas");
      out.width = a.width + b.width + 20; out.height = Math.max(a.height, b.height);
      const ctx = out.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, out.width, out.height);
      ctx.drawImage(a, 0, 0); ctx.drawImage(b, a.width + 20, 0);
      download("head-L" + this.ui.layer + "-H" + this.ui.head + "-" + this.ui.notation + ".png", out.toDataURL("image/png"));
    }

    saveModelView() {
      const thumbs = this.qa(".sg-thumb canvas");
      if (!thumbs.length) return;
      const first = thumbs[0], grid = this.q(".sg-mv-grid").getBoundingClientRect();
      const r = first.width / first.getBoundingClientRect().width;
      const out = document.createElement("canvas");
      out.width = Math.ceil(grid.width * r); out.height = Math.ceil(grid.height * r);
      const ctx = out.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, out.width, out.height);
      for (const c of thumbs) {
        const b = c.getBoundingClientRect();
        ctx.drawImage(c, (b.left - grid.left) * r, (b.top - grid.top) * r);
      }
      download("model-view.png", out.toDataURL("image/png"));
    }
  }

  // ---- entry points ------------------------------------------------------------------------------
  const instances = [];
  function mount(root, opts) {
    const inst = new Instance(root, opts || {});
    instances.push(inst);
    return inst;
  }
  window.StudyGroup = { mount, instances, percent };
  function auto() {
    for (const root of document.querySelectorAll(".sg-root[data-sg-api]")) {
      if (!root.studygroup) mount(root, { api: root.dataset.sgApi });
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", auto);
  else auto();
})();

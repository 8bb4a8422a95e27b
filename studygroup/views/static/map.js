/* A long text's head map: the whole T × T map as an overview (each pixel a block showing the
 * largest weight in it: POST /api/overview), zoom and pan (buttons, wheel, drag, keyboard) down
 * to tiles of cells (an overview of one block per cell: the exact weights), members labelled
 * where they fit. */
(function (sg) {
  "use strict";

  const { el, clear, sig4, rgb, weightColor, drawGrid, cellReason, VISIBLE } = sg;
  /** A window of at most TILE × TILE members is drawn as cells (one /api/head tile); a larger one as an overview. */
  const TILE = 256;
  /** The closest zoom: SMALLEST × SMALLEST members. */
  const SMALLEST = 8;
  /** Texts longer than this get the map (shorter ones show every cell in the grids above: the model view's
   * maps and the head's grid by default): study/model_view.py's FULL_MAPS_MAX_T. */
  const FULL_MAPS_MAX_T = 64;
  /** The most blocks an overview asks for on a side (the server's limit). */
  const SIDE = 512;
  const KEPT = 24; // answers kept for going back

  /** base64 text as bytes. */
  function bytes(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  /** A view without a card of its own: its box sits in the head's card, above the head's check. */
  class HeadMap extends sg.View {
    headDrawn() { this.renderMap(); }

    /** The map's box in the head card, made on first use. */
    mapBox() {
      let box = this.q(".sg-map");
      if (box) return box;
      const button = (text, label, fn) => el("button", { attrs: { type: "button", "aria-label": label }, text, on: { click: fn } });
      const canvas = el("canvas", { cls: "sg-map-canvas", attrs: { tabindex: "0", role: "img" } });
      box = el("div", { cls: "sg-map", attrs: { role: "region", "aria-label": "the head's whole map" } }, [
        el("h3", { text: "The whole map" }),
        el("p", { cls: "sg-hint sg-map-hint", text: "The head's weights for every question and answer. Zoom with the wheel, the buttons or + and \u2212 (the map focused); drag or use the arrow keys to move; 0 shows the whole map again." }),
        el("div", { cls: "sg-map-controls" }, [
          button("Whole map", "show the whole map", () => this.moveMap("whole")),
          button("+", "zoom in", () => this.moveMap("in")), button("\u2212", "zoom out", () => this.moveMap("out")),
          button("\u2190", "move to earlier answers", () => this.moveMap("left")), button("\u2192", "move to later answers", () => this.moveMap("right")),
          button("\u2191", "move to earlier questions", () => this.moveMap("up")), button("\u2193", "move to later questions", () => this.moveMap("down"))]),
        el("p", { cls: "sg-map-caption", attrs: { "aria-live": "polite" } }),
        el("div", { cls: "sg-map-wrap" }, [canvas])]);
      const check = this.q(".sg-check");
      check.parentNode.insertBefore(box, check);
      this.wireMap(canvas);
      return box;
    }

    /** Shows the map of the open head of a long text (hidden otherwise), from its whole map on a new head. */
    renderMap() {
      const box = this.mapBox(), T = this.tokens().length;
      box.hidden = !(this.ui.layer != null && T > FULL_MAPS_MAX_T);
      if (box.hidden) return;
      const key = [this.ui.layer, this.ui.head, this.ui.notation, this.store.silencingKey(), this.d.text].join(":");
      if (!this.mapView || this.mapView.key !== key) this.mapView = { key, T, r0: 0, c0: 0, n: T };
      this.showMap();
    }

    /** Zooms or moves the map: "in", "out", "whole", "left", "right", "up", "down"; at (r, c) for a zoom at the pointer. */
    moveMap(how, at) {
      const v = this.mapView;
      if (!v) return;
      let { r0, c0, n } = v;
      const T = v.T, step = Math.max(1, Math.round(n / 4));
      const centre = at || [r0 + n / 2, c0 + n / 2];
      if (how === "whole") { r0 = 0; c0 = 0; n = T; }
      if (how === "in" || how === "out") {
        n = how === "in" ? Math.max(Math.min(SMALLEST, T), Math.round(n / 2)) : Math.min(T, n * 2);
        const keep = how === "in" ? 0.5 : 2; // the member under the pointer stays under it
        r0 = Math.round(centre[0] - (centre[0] - r0) * keep); c0 = Math.round(centre[1] - (centre[1] - c0) * keep);
      }
      if (how === "left") c0 -= step; if (how === "right") c0 += step;
      if (how === "up") r0 -= step; if (how === "down") r0 += step;
      if (Array.isArray(how)) { r0 += how[0]; c0 += how[1]; } // a drag: [rows, keys]
      const clamp = (x) => Math.min(T - n, Math.max(0, Math.round(x)));
      this.mapView = { ...v, r0: clamp(r0), c0: clamp(c0), n };
      this.showMap();
    }

    /** What the map's window asks for: its overview, one block per cell (its exact weights) up to SIDE members a side. */
    mapAsk(v) {
      const body = { text: this.d.text, layer: this.ui.layer, head: this.ui.head, rows: [v.r0, v.r0 + v.n], keys: [v.c0, v.c0 + v.n],
        side: SIDE, ...this.silencing() };
      return { cells: v.n <= TILE, path: "/overview", body, key: JSON.stringify(body) };
    }

    /** An overview of one cell per block as the head view's payload holds a window (weights and reasons in the notation's orientation). */
    asHeadWindow(d) {
      const top = new Float32Array(bytes(d.max).buffer), codes = bytes(d.reasons), [R, K] = d.size, paper = this.ui.notation === "paper";
      const grid = (values) => paper ? Array.from({ length: R }, (_, r) => Array.from(values.subarray(r * K, (r + 1) * K)))
        : Array.from({ length: K }, (_, c) => Array.from({ length: R }, (_, r) => values[r * K + c]));
      const [a, b] = d.rows_shown;
      return { notation: this.ui.notation, weights: grid(top), mask_reasons: grid(codes), mask: null, tokens: this.tokens(),
        rows_shown: d.rows_shown, keys_shown: d.keys_shown, questions: Array.from({ length: b - a }, (_, x) => a + x) };
    }

    async showMap() {
      const v = this.mapView, ask = this.mapAsk(v);
      this.mapCache = this.mapCache || new Map();
      this.paintMapCaption(v, ask.cells, null);
      let d = this.mapCache.get(ask.key);
      if (!d) {
        try { d = await this.post(ask.path, ask.body); } catch (e) { if (this.mapView === v) this.paintMapCaption(v, ask.cells, e.message); return; }
        this.mapCache.set(ask.key, d);
        if (this.mapCache.size > KEPT) this.mapCache.delete(this.mapCache.keys().next().value);
        if (this.mapView !== v) return; // moved on while this arrived
      }
      if (ask.cells && d.block !== 1) throw new Error("a tile of cells needs one block per cell");
      const shownNow = ask.cells ? this.asHeadWindow(d) : d;
      this.mapShownNow = { cells: ask.cells, d: shownNow, v };
      if (ask.cells) this.drawMapCells(shownNow); else this.drawOverview(d);
      this.paintMapCaption(v, ask.cells, null, d);
    }

    paintMapCaption(v, cells, error, d) {
      const q = this.q(".sg-map-caption");
      const where = "questions " + v.r0 + "\u2013" + (v.r0 + v.n - 1) + " \u00d7 answers " + v.c0 + "\u2013" + (v.c0 + v.n - 1) + " of " + v.T + " \u00d7 " + v.T;
      if (error) { q.textContent = where + ": " + error; q.dataset.kind = "error"; return; }
      q.dataset.kind = d ? "" : "busy";
      if (!d) { q.textContent = where + " (computing\u2026)"; return; }
      q.textContent = where + (cells ? ": every cell is one weight; hover a cell for its words." +
        (sg.holdsEveryAnswer(d) ? "" : " A question's weights sum to 1 over all its answers, and some of them are outside this window.")
        : d.block > 1 ? ": each pixel is a block of " + d.block + " \u00d7 " + d.block + " members showing the LARGEST weight in it (so one sharp weight is not averaged away); a block is hatched only when every cell in it is masked. Zoom in for the cells."
          : ": one pixel per cell; zoom in for labelled cells.");
    }

    /** The overview: each block's largest weight on the weights' scale, fully masked blocks hatched by reason. */
    drawOverview(d) {
      const canvas = this.q(".sg-map-canvas"), transpose = this.ui.notation === "columns";
      const top = new Float32Array(bytes(d.max).buffer), codes = bytes(d.reasons);
      const [Pr, Pc] = d.size, nR = transpose ? Pc : Pr, nC = transpose ? Pr : Pc;
      const left = 58, head = 40, room = Math.max(160, Math.min(SIDE, (this.q(".sg-map").clientWidth || 600) - left - 10));
      const px = room / Math.max(nR, nC);
      const ctx = sg.sizeCanvas(canvas, left + nC * px + 6, head + nR * px + 6);
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, left + nC * px + 6, head + nR * px + 6);
      const off = document.createElement("canvas");
      off.width = nC; off.height = nR;
      const octx = off.getContext("2d"), img = octx.createImageData(nC, nR);
      const at = (r, c) => (transpose ? c * Pc + r : r * Pc + c); // display (r, c) -> index in the paper-oriented data
      for (let r = 0; r < nR; r++) for (let c = 0; c < nC; c++) {
        const i = at(r, c), o = 4 * (r * nC + c);
        if (codes[i] !== VISIBLE) continue; // left transparent: hatched below
        const col = weightColor(top[i]);
        img.data[o] = col[0]; img.data[o + 1] = col[1]; img.data[o + 2] = col[2]; img.data[o + 3] = 255;
      }
      octx.putImageData(img, 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(off, left, head, nC * px, nR * px);
      const patterns = {};
      for (let r = 0; r < nR; r++) { // masked blocks: one hatched rectangle per run of one reason along a row
        for (let c = 0; c < nC;) {
          const code = codes[at(r, c)];
          let e = c + 1;
          while (e < nC && codes[at(r, e)] === code) e++;
          if (code !== VISIBLE) { ctx.fillStyle = patterns[code] || (patterns[code] = sg.hatch(ctx, code)); ctx.fillRect(left + c * px, head + r * px, (e - c) * px, px); }
          c = e;
        }
      }
      ctx.strokeStyle = "#444"; ctx.strokeRect(left - 0.5, head - 0.5, nC * px + 1, nR * px + 1);
      this.mapAxes(ctx, left, head, nC * px, nR * px, transpose, d);
      canvas.__map = { left, head, px: px / d.block, nR: nR * px, nC: nC * px, d, transpose, top, codes, Pc };
      canvas.dataset.mode = "overview";
      canvas.setAttribute("aria-label", "overview of head " + this.ui.head + " of layer " + this.ui.layer + ": the largest weight of each block of " + d.block + " \u00d7 " + d.block + " members");
    }

    /** Axis titles and the members at the window's ends and middle. */
    mapAxes(ctx, left, head, w, h, transpose, d) {
      const [a, b] = transpose ? d.keys_shown : d.rows_shown, [c, e] = transpose ? d.rows_shown : d.keys_shown;
      ctx.fillStyle = "#555"; ctx.font = "italic 12px " + sg.SANS; ctx.textAlign = "center"; ctx.textBaseline = "middle";
      ctx.fillText(transpose ? "question from\u2026 (members)" : "answer from\u2026 (members)", left + w / 2, 10);
      ctx.save(); ctx.translate(10, head + h / 2); ctx.rotate(-Math.PI / 2); ctx.fillText(transpose ? "answer from\u2026" : "question from\u2026", 0, 0); ctx.restore();
      ctx.font = "10px " + sg.SANS; ctx.fillStyle = "#333";
      for (const t of [0, 0.5, 1]) {
        ctx.textAlign = t === 0 ? "left" : t === 1 ? "right" : "center";
        ctx.fillText(String(Math.round(c + t * (e - 1 - c))), left + t * w, head - 10);
        ctx.textAlign = "right";
        ctx.fillText(String(Math.round(a + t * (b - 1 - a))), left - 4, head + Math.min(h - 5, Math.max(5, t * h)));
      }
    }

    /** A tile: its weights as cells, labelled where they fit (the head's grid drawing). */
    drawMapCells(d) {
      const canvas = this.q(".sg-map-canvas");
      const spec = this.page.views.head.gridSpecOf(d, "weights", Math.max(260, (this.q(".sg-map").clientWidth || 600) - 4));
      drawGrid(canvas, spec);
      canvas.__map = { spec, geom: canvas.__geom };
      canvas.dataset.mode = "cells";
      canvas.setAttribute("aria-label", "weights of head " + this.ui.head + " of layer " + this.ui.layer + ", " + spec.rows.length + " \u00d7 " + spec.cols.length + " cells");
    }

    /** For tests and curious readers: what the map shows now (cells: the tile's weights as drawn; overview: the blocks). */
    shown() {
      const s = this.mapShownNow;
      if (!s) return null;
      const v = { rows: [s.v.r0, s.v.r0 + s.v.n], keys: [s.v.c0, s.v.c0 + s.v.n] };
      if (s.cells) return { mode: "cells", ...v, notation: s.d.notation, weights: s.d.weights };
      return { mode: "overview", ...v, block: s.d.block, size: s.d.size, max: Array.from(new Float32Array(bytes(s.d.max).buffer)) };
    }

    /** The member pair (question, answer) under a pointer, or null; words for the tooltip. */
    mapHit(canvas, ev) {
      const m = canvas.__map, rect = canvas.getBoundingClientRect();
      if (!m) return null;
      const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
      if (m.spec) {
        const g = m.geom, c = Math.floor((x - g.left) / g.cw), r = Math.floor((y - g.top) / g.ch);
        if (r < 0 || c < 0 || r >= g.nR || c >= g.nC) return null;
        const rows = m.spec.questionAxis === "rows";
        const i = rows ? m.spec.rows[r] : m.spec.cols[c], j = rows ? m.spec.cols[c] : m.spec.rows[r];
        return { at: [i, j], words: sg.cellWords(m.spec, r, c), i, j, visible: cellReason(m.spec, r, c) === VISIBLE };
      }
      if (x < m.left || y < m.head || x >= m.left + m.nC || y >= m.head + m.nR) return null;
      const [a] = m.transpose ? m.d.keys_shown : m.d.rows_shown, [c0] = m.transpose ? m.d.rows_shown : m.d.keys_shown;
      const r = Math.floor((y - m.head) / m.px), c = Math.floor((x - m.left) / m.px); // members from the window's start
      const br = Math.floor(r / m.d.block), bc = Math.floor(c / m.d.block);
      const i = m.transpose ? bc * m.Pc + br : br * m.Pc + bc;
      const qs = m.transpose ? c0 + c : a + r, as = m.transpose ? a + r : c0 + c; // question, answer under the pointer
      const b = m.d.block, q0 = m.d.rows_shown[0] + (m.transpose ? bc : br) * b, k0 = m.d.keys_shown[0] + (m.transpose ? br : bc) * b;
      const span = (s) => (b > 1 ? "members " + s + "\u2013" + (s + b - 1) : "member " + s);
      const words = "questions of " + span(q0) + " \u00d7 answers of " + span(k0) + ": " +
        (m.codes[i] === VISIBLE ? "largest weight " + sig4(m.top[i]) : "masked (" + sg.reasonLegend(m.codes[i]) + ")");
      return { at: [qs, as], words, i: qs, j: as, visible: false };
    }

    wireMap(canvas) {
      let drag = null;
      const perMember = () => { const m = canvas.__map; return m ? (m.spec ? m.geom.cw : m.px) : 1; };
      canvas.addEventListener("mousemove", (ev) => {
        if (drag) { this.tip.hidden = true; return; }
        const hit = this.mapHit(canvas, ev);
        if (!hit) { this.tip.hidden = true; return; }
        this.showTip(hit.words, ev);
      });
      canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
      canvas.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const hit = this.mapHit(canvas, ev);
        this.moveMap(ev.deltaY < 0 ? "in" : "out", hit ? hit.at : null);
      }, { passive: false });
      canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, y: ev.clientY }; });
      window.addEventListener("mouseup", (ev) => {
        if (!drag) return;
        const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y, p = perMember();
        drag = null;
        if (Math.abs(dx) + Math.abs(dy) < 4) { // a click: select the question (and, on a visible cell, why)
          const hit = this.mapHit(canvas, ev);
          if (hit) { this.select(hit.i); if (hit.visible) this.page.views.head.openWhy(hit.i, hit.j); }
          return;
        }
        const transpose = this.ui.notation === "columns"; // the video's drawing: questions across
        const rows = -dy / p, keys = -dx / p;
        this.moveMap(transpose ? [keys, rows] : [rows, keys]);
      });
      canvas.addEventListener("keydown", (ev) => {
        const moves = { "+": "in", "=": "in", "-": "out", "\u2212": "out", "0": "whole", Home: "whole",
          ArrowLeft: "left", ArrowRight: "right", ArrowUp: "up", ArrowDown: "down" };
        const how = moves[ev.key];
        if (!how) return;
        ev.preventDefault(); ev.stopPropagation();
        this.moveMap(how);
      });
    }
  }

  sg.view("map", (page) => new HeadMap(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

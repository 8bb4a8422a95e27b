/* One head: its score and weight grids in either orientation, fetched on demand (page) or embedded
 * (report); hover and click on cells. */
(function (sg) {
  "use strict";

  /** Past this many members the page asks for a window of the grid, never the whole of it. */
  const WINDOW_SIDE = 256;

  /** The members whose answers a head's grids hold (keys_shown [C, D]: C to D-1; every member without it). */
  sg.shownKeys = (d) => {
    const [c, e] = d.keys_shown || [0, d.tokens.length];
    return Array.from({ length: e - c }, (_, x) => c + x);
  };

  /** Whether a head's grid holds every answer its questions can hear (then each question's weights sum to 1 on it). */
  sg.holdsEveryAnswer = (d) => !d.keys_shown || (d.keys_shown[0] === 0 && d.keys_shown[1] >= (d.rows_shown || [0, d.tokens.length])[1]);

  const { el, clear, sig4, signed, tokenNode, isSilenced, silencedNote, drawGrid, drawLegend, cellReason, reasonsIn, reasonLegend, VISIBLE } = sg;

  /** Cell (r, c) of grid g in words: "member i's question (“…”) gives weight w to member j's answer (“…”)". */
  function cellWords(g, r, c) {
    const rows = g.questionAxis === "rows";
    const i = rows ? g.rows[r] : g.cols[c], j = rows ? g.cols[c] : g.rows[r];
    const asker = "member " + i + "'s question (\u201c" + g.tokens[i] + "\u201d)", answer = "member " + j + "'s answer (\u201c" + g.tokens[j] + "\u201d)";
    const code = cellReason(g, r, c);
    if (code !== VISIBLE) return asker + " cannot hear " + answer + ": " + reasonLegend(code) + ".";
    const v = g.matrix[r][c];
    return g.kind === "weights" ? asker + " gives weight " + sig4(v) + " to " + answer + ". Click: why."
      : asker + " scores " + sig4(v) + " against " + answer + " (before the softmax). Click: why.";
  }
  sg.cellWords = cellWords;

  class Head extends sg.View {
    constructor(page) {
      super(page);
      this.place = "layout";
      this.section = this.skeleton();
      for (const kind of ["scores", "weights"]) this.wireGrid(this.section.querySelector(".sg-grid-" + kind), kind);
      this.draws = [];
    }

    /** The card: its title, the orientation switch, silence / full grid / save, the two grids, the
     * check, "why", the selected member's question (listening.js) and the long text's map (map.js). */
    skeleton() {
      const head = this.card("sg-head", "The head");
      head.appendChild(el("div", { cls: "sg-head-title" }));
      const orient = el("div", { cls: "sg-orient", attrs: { role: "group", "aria-label": "orientation" } }, [
        el("button", { attrs: { type: "button", "aria-pressed": "true" }, data: { notation: "paper" }, text: "Paper: rows are questions" }),
        el("button", { attrs: { type: "button", "aria-pressed": "false" }, data: { notation: "columns" }, text: "Video: columns are questions" })]);
      orient.addEventListener("click", (e) => { const b = e.target.closest("button"); if (b) this.setNotation(b.dataset.notation); });
      head.appendChild(el("div", { cls: "sg-head-controls" }, [orient,
        el("button", { cls: "sg-silence-head", attrs: { type: "button", "aria-pressed": "false" }, text: "\u2298 Silence this head", on: { click: () => this.page.toggleHead(this.ui.layer, this.ui.head) } }),
        el("button", { cls: "sg-full", attrs: { type: "button", hidden: "" }, text: "Show the full grid", on: { click: () => { this.ui.rows = "all"; this.open(this.ui.layer, this.ui.head); } } }),
        el("button", { cls: "sg-save-head", attrs: { type: "button" }, text: "Save head (PNG)", on: { click: () => sg.save.head(this.page) } })]));
      const figure = (kind, caption) => el("figure", { cls: "sg-fig sg-fig-" + kind }, [
        el("figcaption", { text: caption }),
        el("div", { cls: "sg-canvas-wrap" }, [el("canvas", { cls: "sg-grid sg-grid-" + kind, attrs: { tabindex: "-1", role: "img" } })]),
        el("canvas", { cls: "sg-legend sg-legend-" + kind, attrs: { role: "img" } })]);
      head.appendChild(el("div", { cls: "sg-figs" }, [figure("scores", "Scores Q\u00b7K\u1d40/\u221ad\u2096"), figure("weights", "Weights: softmax of the scores")]));
      head.appendChild(el("p", { cls: "sg-check sg-hint" }));
      head.appendChild(el("div", { cls: "sg-why", attrs: { hidden: "", role: "region", "aria-label": "why" } }));
      head.appendChild(el("div", { cls: "sg-member" }));
      head.appendChild(el("p", { cls: "sg-head-empty sg-hint" }));
      return head;
    }

    /** The silencing redraw's request: the open head of the silenced run. */
    redraw(body, current) {
      const l = this.ui.layer, h = this.ui.head;
      if (!body || l == null) return null;
      return this.askHead(l, h).then(() => {
        if (current() && this.ui.layer === l && this.ui.head === h) { this.draw(); this.page.tell("headShown"); }
      });
    }
    /** The explanation arrived: its first head (the most decisive one not resting on a sink) opens, unless the reader chose one. */
    explained() {
      const first = this.d.explanation.first_head;
      if (!this.ui.headChosen && first) return this.open(first[0], first[1], false);
      this.draw();
      return null;
    }
    silenced() { this.paintHeadControls(); }
    selected() { this.drawHeadGrids(); }
    hovered() { this.drawHeadGrids(); }
    headOpened() { this.paintHeadControls(); }
    notation() {
      this.paintNotation();
      if (this.ui.layer != null) this.open(this.ui.layer, this.ui.head, false);
    }

    /** Shows head (l, h), asking the server for it if needed; false when it was not shown (an error,
     * its computation cancelled, or a new text meanwhile), with the status saying why. */
    async open(l, h, chosen) {
      if (chosen !== false) this.ui.headChosen = true;
      if (this.ui.layer !== l || this.ui.head !== h) this.ui.rows = "auto";
      this.ui.layer = l; this.ui.head = h;
      this.page.tell("headOpened");
      if (!this.api) { this.draw(); return true; }
      if (!this.store.heads.has(this.headKey(l, h))) {
        const live = this.store.textGuard();
        try {
          this.say("Opening head " + h + " of layer " + l + "\u2026", "busy");
          await this.askHead(l, h, true);
          if (!live()) return false;
          this.say("");
        } catch (e) {
          if (live()) this.say(this.stoppedSaid(e, "head " + h + " of layer " + l, "Click its thumbnail to open it again."), "error");
          return false;
        }
      }
      if (this.ui.layer === l && this.ui.head === h) { this.draw(); this.page.tell("headShown"); }
      return true;
    }

    /** Head (l, h) as the page asks for it now (its orientation, rows and silencing): kept in the store's heads
     * (at most 41), or asked of the server and kept there unless a new text came meanwhile.
     * followed: as a job whose progress and Cancel show if it runs long (session.js: followedPost). */
    async askHead(l, h, followed = false) {
      const key = this.headKey(l, h);
      const heads = this.store.heads, live = this.store.textGuard();
      if (heads.has(key)) return heads.get(key);
      const body = { text: this.d.text, layer: l, head: h, notation: this.ui.notation, ...this.headWindow(), ...this.silencing() };
      const d = await (followed ? this.page.jobs.followedPost("/head", body, (p, b) => sg.api.head(this.api, b)) : sg.api.head(this.api, body));
      if (live()) {
        if (heads.size > 40) heads.delete(heads.keys().next().value);
        heads.set(key, d);
      }
      return d;
    }

    /** The part of the grid to ask for: "auto" (the server: the whole grid of a short text, else the last
     * question), or, once "Show the full grid" is pressed, every question; past WINDOW_SIDE members (a view
     * holds at most WINDOW_SIDE² cells) the last WINDOW_SIDE questions × the last WINDOW_SIDE answers. */
    headWindow() {
      if (this.ui.rows !== "all") return { rows: this.ui.rows };
      const T = this.store.heads.get(this.headKeyWith(this.ui.layer, this.ui.head, "auto"))?.tokens.length || 0;
      return T > WINDOW_SIDE ? { rows: [-WINDOW_SIDE, null], keys: [-WINDOW_SIDE, null] } : { rows: "all" };
    }

    /** The key of a head as asked now: its place, the orientation, the rows and what is silenced. */
    headKey(l, h) {
      return this.headKeyWith(l, h, this.ui.rows);
    }

    headKeyWith(l, h, rows) {
      return [l, h, this.ui.notation, rows].join(".") + ":" + this.store.silencingKey();
    }

    currentHead() {
      if (this.ui.layer == null) return null;
      if (this.api) return this.store.heads.get(this.headKey(this.ui.layer, this.ui.head)) || null;
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
      this.page.tell("notation");
    }

    /** The head card's Paper/Video switch pressed as this.ui.notation says. */
    paintNotation() {
      for (const b of this.qa(".sg-head .sg-orient button")) b.setAttribute("aria-pressed", String(b.dataset.notation === this.ui.notation));
    }

    paintHeadControls() {
      const b = this.q(".sg-silence-head");
      const on = this.ui.headsSilenced.has(this.ui.layer + "." + this.ui.head);
      b.setAttribute("aria-pressed", String(on));
      b.textContent = on ? "\u2298 Silenced: let it write again" : "\u2298 Silence this head";
      b.disabled = this.ui.layer == null;
    }

    draw() {
      const figs = this.q(".sg-figs");
      const d = this.currentHead();
      const l = this.ui.layer, h = this.ui.head;
      figs.hidden = l == null || !d;
      const width = this.gridWidth(); // read before anything here is written: a layout already made, never one forced
      const title = clear(this.q(".sg-head-title"));
      const empty = this.q(".sg-head-empty");
      const why = this.ui.why;
      if (!why || why.l !== l || why.h !== h) { this.ui.why = null; clear(this.q(".sg-why")).hidden = true; }
      this.paintHeadControls();
      this.q(".sg-check").textContent = d ? d.check.statement + silencedNote(d) : "";
      this.q(".sg-full").hidden = !(d && d.rows === "last");
      if (d) this.q(".sg-full").textContent = d.tokens.length > WINDOW_SIDE ? "Show the last " + WINDOW_SIDE + " \u00d7 " + WINDOW_SIDE + " of the grid" : "Show the full grid";
      if (l == null) { empty.textContent = ""; this.page.tell("headDrawn"); return; }
      const mvShape = this.d.modelView || (this.d.explanation && this.d.explanation.model);
      const group = mvShape ? mvShape.n_heads / mvShape.n_kv_heads : 1;
      const kv = Math.floor(h / group);
      const mates = []; for (let k = kv * group; k < (kv + 1) * group; k++) if (k !== h) mates.push(k);
      title.appendChild(el("h3", { text: "Head " + h + " of layer " + l }));
      const r = this.rankedHeads().findIndex(([a, b]) => a === l && b === h);
      const lh = this.listenedHead();
      title.appendChild(el("p", { cls: "sg-kv", text: "Key/value head " + kv + ": its keys and values are shared with query heads " + mates.join(" and ") +
        " of this layer (grouped-query attention)." + (r >= 0 ? " Ranked " + (r + 1) + " of " + this.rankedHeads().length + " heads by how much they decide the next word" + (lh ? (lh.silence_effect != null ? " (silence_effect, its write zeroed at every position: " + signed(lh.silence_effect, 3)
          : " (silence_effect_last_position, its write zeroed at the last position only: " + signed(lh.silence_effect_last_position, 3)) + " in log p)." : ".") : "") }));
      this.sinkLines(title, l, h, d);
      for (const b of this.qa(".sg-orient, .sg-save-head")) b.hidden = !d && !this.api;
      const grids = Object.keys(this.d.embeddedHeads || {}).length;
      if (!d && !this.api) {
        empty.textContent = (grids ? "This file holds the grids of the " + grids + " most decisive heads only"
          : "An explanation alone holds no grids (write a report or run `studygroup serve` for them)") +
          (lh ? "; below, whom this head's last question listens to." : ".");
      } else empty.textContent = "";
      this.drawHeadGrids(width);
      this.page.tell("headDrawn");
    }

    /** Under the head's title: where it rests on a sink, what it matters through (its write across
     * texts, the server's sentence); where it opened first in place of the most decisive head, which
     * rests on a sink, that head one click away. */
    sinkLines(title, l, h, d) {
      if (d && d.sink_write) title.appendChild(el("p", { cls: "sg-sink-write", text: d.sink_write.said }));
      const e = this.d.explanation, first = e && e.first_head, top = e && e.heads[0];
      if (!first || first[0] !== l || first[1] !== h || (top.layer === l && top.head === h)) return;
      title.appendChild(el("p", { cls: "sg-sink-first" }, [
        "Opened first: the most decisive head whose last question does not rest on a sink. The most decisive head, " + top.layer + "." + top.head +
        ", rests on a sink (" + sg.percent(top.sink_weight) + " of its last question's weight): ",
        el("button", { attrs: { type: "button" }, text: "open " + top.layer + "." + top.head, on: { click: () => this.openHead(top.layer, top.head) } })]));
    }

    /** The grid as drawn (width: gridWidth()'s, where the caller has read it): rows and columns are member
     * indices; the matrix is in the current orientation. */
    gridSpec(kind, width) {
      return this.gridSpecOf(this.currentHead(), kind, width || this.gridWidth());
    }

    /** The grid spec of head payload d (the open head, or a tile of its map) drawn at most maxWidth wide. */
    gridSpecOf(d, kind, maxWidth) {
      if (!d) return null;
      const paper = d.notation === "paper";
      const keys = sg.shownKeys(d);
      const matrix = kind === "scores" ? d.scores : d.weights;
      const scale = kind === "scores" ? Math.max(1e-9, ...matrix.flat().filter((x) => x != null).map(Math.abs)) : 1;
      return {
        kind, matrix, mask: d.mask, reasons: d.mask_reasons || null, tokens: d.tokens, scale,
        rows: paper ? d.questions : keys, cols: paper ? keys : d.questions,
        questionAxis: paper ? "rows" : "cols",
        rowTitle: paper ? "question from\u2026" : "answer from\u2026",
        colTitle: paper ? "answer from\u2026" : "question from\u2026",
        sum: kind === "weights" && sg.holdsEveryAnswer(d) ? (paper ? "right" : "bottom") : null,
        selected: this.ui.selected, hover: this.ui.hover, maxWidth,
      };
    }

    /** Width for one grid: side by side when the head's card is wide enough, else one above the other. */
    gridWidth() {
      const avail = this.q(".sg-figs").clientWidth || 760;
      return avail >= 640 ? Math.floor((avail - 20) / 2) : avail;
    }

    /** Draws the open head's score and weight grids, each width wide (gridWidth() unless given). */
    drawHeadGrids(width) {
      const w = width || this.gridWidth();
      for (const kind of ["scores", "weights"]) {
        const canvas = this.q(".sg-grid-" + kind);
        const g = this.gridSpec(kind, w);
        if (!g) continue;
        drawGrid(canvas, g);
        canvas.dataset.silenced = String(isSilenced(this.currentHead()));
        canvas.dataset.orientation = g.questionAxis === "rows" ? "paper" : "columns";
        canvas.dataset.rows = String(g.rows.length);
        canvas.dataset.cols = String(g.cols.length);
        canvas.setAttribute("aria-label", kind + " of head " + this.ui.head + " of layer " + this.ui.layer + ", " +
          (g.questionAxis === "rows" ? "rows are questions" : "columns are questions"));
        drawLegend(this.q(".sg-legend-" + kind), kind, g.scale, reasonsIn(g));
      }
    }

    /** For tests and curious readers: the matrix exactly as drawn (rows × columns), and each cell's reason. */
    displayed(kind) {
      const g = this.gridSpec(kind);
      if (!g) return null;
      const reasons = g.matrix.map((row, r) => row.map((_, c) => sg.reasonName(cellReason(g, r, c))));
      return { orientation: g.questionAxis === "rows" ? "paper" : "columns", rows: g.rows, cols: g.cols, matrix: g.matrix, reasons };
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
        this.showTip(cellWords(g, r, c), ev);
      });
      canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; });
      canvas.addEventListener("click", (ev) => {
        const hit = cellAt(ev);
        if (!hit) return;
        const { g, r, c } = hit, rows = g.questionAxis === "rows";
        const i = rows ? g.rows[r] : g.cols[c], j = rows ? g.cols[c] : g.rows[r];
        this.select(i);
        if (this.api && cellReason(g, r, c) === VISIBLE) this.openWhy(i, j);
      });
    }

    /** "Why": the score of member i's question against member j's answer in the open head, split
     * into the parts of the residual stream that made it (POST /api/why), in a small panel. */
    async openWhy(i, j) {
      const l = this.ui.layer, h = this.ui.head, live = this.store.textGuard();
      this.ui.why = { l, h, i, j };
      const box = clear(this.q(".sg-why"));
      box.hidden = false;
      box.appendChild(el("p", { cls: "sg-hint", text: "Why member " + i + "'s question gives this weight to member " + j + "'s answer\u2026" }));
      try {
        const d = await this.post("/why", { text: this.d.text, layer: l, head: h, query: i, key: j });
        const now = this.ui.why;
        if (!live() || !now || now.l !== l || now.h !== h || now.i !== i || now.j !== j) return;
        this.renderWhy(d);
      } catch (e) { if (live()) { clear(box).appendChild(el("p", { cls: "sg-hint", text: e.message })); } }
    }

    renderWhy(d) {
      const box = clear(this.q(".sg-why"));
      box.appendChild(el("button", { cls: "sg-link sg-why-close", attrs: { type: "button", "aria-label": "close why" }, text: "close \u00d7",
        on: { click: () => { this.ui.why = null; clear(box).hidden = true; } } }));
      box.appendChild(el("h3", {}, ["Why member " + d.query + "'s question (", tokenNode(d.tokens[d.query], "sg-chipish"), ") gives weight " +
        sig4(d.weight) + " to member " + d.key + "'s answer (", tokenNode(d.tokens[d.key], "sg-chipish"), ")"]));
      box.appendChild(el("p", { text: "Score q\u1d62\u00b7k\u2c7c/\u221ad\u2096 = " + sig4(d.score) + (d.rope
        ? " = content " + sig4(d.content) + " (before the rotation) + position " + sig4(d.position) + " (what the distance " + (d.query - d.key) + " adds through RoPE)."
        : ", all content: this model turns no q or k (no RoPE), so position is 0.") }));
      const list = el("ol", { cls: "sg-why-parts" });
      for (const p of d.pairs.slice(0, 5)) list.appendChild(el("li", { text: p.query_part + " \u00b7 " + p.key_part + ": " + signed(p.value, 3) }));
      box.appendChild(el("p", { cls: "sg-hint", text: "The largest of the " + d.pairs.length + " pairs of parts (the question's part \u00b7 the answer's part):" }));
      box.appendChild(list);
      for (const n of d.notes) box.appendChild(el("p", { cls: "sg-hint", text: n }));
      if (this.ui.members.size || this.ui.headsSilenced.size) box.appendChild(el("p", { cls: "sg-hint", text: "Measured on the text with nothing silenced." }));
    }
  }

  sg.view("head", (page) => new Head(page));
})(window.StudyGroup = window.StudyGroup || {});

/* Activation patching (the page only: POST /api/patch_cost, then /api/patch; study/patching.py):
 * two texts of the same number of members, a clean one and a corrupted one; each cell runs the
 * corrupted text with one thing taken from the clean run there, and shows how much of the clean
 * run's logit difference that alone brings back (0 = corrupted, 1 = clean). The cost is said
 * before it runs; its progress and a Cancel button while it runs; then the layer × member grid
 * (resid_pre, attn_out or mlp_out, one click apart) and the layer × head grid, and the story. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, sig4, signed, rgb, isLight, divergingColor } = sg;
  const CLEAN = "When Mary and John went to the store, John gave a drink to";
  const CORRUPTED = "When Mary and John went to the store, Mary gave a drink to";
  const MEMBER_GRIDS = { resid_pre: "the stream entering the layer", attn_out: "the attention's write", mlp_out: "the MLP's write" };
  const NUMBERS_UP_TO = 24; // members (or heads) past which the cells hold colour only
  const COST_WAIT_MS = 400; // a pause in typing before the cost is asked

  class Patching extends sg.View {
    constructor(page) {
      super(page);
      this.runs = 0;
      this.data = null;
      this.kind = "resid_pre";
      const field = (cls, label, value, hint) => el("label", { cls: "sg-label sg-patch-field" }, [label,
        el("input", { cls: cls, attrs: { type: "text", spellcheck: "false", value, placeholder: hint || null } })]);
      this.form = el("form", { cls: "sg-patch-form", on: { submit: (e) => { e.preventDefault(); this.run(); }, input: () => this.costSoon() } }, [
        field("sg-patch-clean", "Clean text", CLEAN),
        field("sg-patch-corrupted", "Corrupted text (as many members: change a word for a word of one token)", CORRUPTED),
        el("div", { cls: "sg-patch-words" }, [
          field("sg-patch-answer", "Answer word (optional, one token)", "", "the clean run's top word"),
          field("sg-patch-wrong", "Wrong word (optional, one token)", "", "the corrupted run's top word")]),
        el("p", { cls: "sg-patch-cost sg-hint", attrs: { "aria-live": "polite" } }),
        el("div", { cls: "sg-actions" }, [el("button", { cls: "sg-patch-go", attrs: { type: "submit" }, text: "Run patching" }),
          el("span", { cls: "sg-patch-status sg-hint", attrs: { role: "status", "aria-live": "polite" } })])]);
      this.result = el("div", { cls: "sg-patch-result" });
      this.section = el("section", { cls: "sg-card sg-patching", attrs: { "aria-label": "activation patching" } }, [
        el("h2", { text: "Activation patching: where the difference between two texts is carried" }),
        el("p", { cls: "sg-hint", text: "Like compare, two texts; here of the same number of members, a clean one and a corrupted one " +
          "that differs in a word. The metric is the logit difference between two words at the last member. Each cell runs the " +
          "corrupted text with one thing taken from the clean run at that place, and shows how much of the clean run's difference " +
          "that alone brings back: 0 = corrupted, 1 = clean." }),
        this.form, this.result]);
      this.box = this.jobBox("sg-patch-job", this.form.querySelector(".sg-actions"));
      this.costSoon(0);
    }

    /** The body the API takes from the form (the optional words only when given). */
    body() {
      const v = (cls) => this.form.querySelector("." + cls).value;
      const b = { clean: v("sg-patch-clean"), corrupted: v("sg-patch-corrupted") };
      if (v("sg-patch-answer")) b.answer = v("sg-patch-answer");
      if (v("sg-patch-wrong")) b.wrong = v("sg-patch-wrong");
      return b;
    }

    /** Asks what patching these texts costs, once typing pauses; the answer (or why it cannot run) under the fields. */
    costSoon(ms = COST_WAIT_MS) {
      clearTimeout(this.costTimer);
      this.costTimer = setTimeout(async () => {
        const b = this.body(), asked = JSON.stringify(b), line = this.form.querySelector(".sg-patch-cost");
        if (!b.clean.trim() || !b.corrupted.trim()) { line.textContent = "Type both texts."; line.dataset.kind = "error"; return; }
        try {
          const c = await this.post("/patch_cost", b);
          if (asked !== JSON.stringify(this.body())) return;
          line.textContent = "Before it runs, " + c.members + " members: " + c.cost + ".";
          line.dataset.kind = "";
        } catch (e) {
          if (asked !== JSON.stringify(this.body())) return;
          line.textContent = e.message; line.dataset.kind = "error";
        }
      }, ms);
    }

    async run() {
      const my = ++this.runs, status = this.form.querySelector(".sg-patch-status"), go = this.form.querySelector(".sg-patch-go");
      go.disabled = true;
      status.textContent = "Patching\u2026";
      try {
        const d = await this.longPost("/patch", this.body(), { box: this.box, wanted: () => my === this.runs, words: progressWords });
        if (my !== this.runs) return;
        this.data = d;
        status.textContent = "";
        this.draw();
      } catch (e) {
        if (my === this.runs) status.textContent = this.stoppedSaid(e, "patching", "Press Run patching to ask again.");
      } finally {
        if (my === this.runs) { this.box.hidden = true; go.disabled = false; }
      }
    }

    /** Both grids, the legend and the story; the member grid of this.kind. */
    draw() {
      const d = this.data, out = clear(this.result);
      if (!d) return;
      this.scale = Math.max(1, ...Object.values(d.grids).flatMap((g) => g.normalised.flat().filter((v) => v != null).map(Math.abs)));
      const pick = el("div", { cls: "sg-patch-kinds", attrs: { role: "group", "aria-label": "what is taken from the clean run" } },
        Object.entries(MEMBER_GRIDS).map(([k, words]) => el("button", { attrs: { type: "button", "aria-pressed": String(k === this.kind), title: words },
          data: { kind: k }, text: k, on: { click: () => { this.kind = k; this.draw(); } } })));
      out.appendChild(el("h3", { text: "Layer \u00d7 member: " + this.kind + ", " + MEMBER_GRIDS[this.kind] + ", taken from the clean run at one member" }));
      out.appendChild(pick);
      out.appendChild(this.grid(this.kind, d.grids[this.kind], d.clean_tokens.map((t, j) => this.memberHead(j))));
      out.appendChild(el("h3", { text: "Layer \u00d7 head: one head's output at every member taken from the clean run" }));
      out.appendChild(this.grid("heads", d.grids.heads, d.grids.heads.raw[0].map((_, h) => el("span", { text: String(h) }))));
      out.appendChild(this.legend());
      const story = el("div", { cls: "sg-patch-story" });
      for (const s of d.story) story.appendChild(el("p", { text: s }));
      out.appendChild(story);
    }

    /** Member j's column heading: its clean token, and the corrupted one under it where they differ. */
    memberHead(j) {
      const d = this.data, a = d.clean_tokens[j], b = d.corrupted_tokens[j];
      if (a === b) return el("span", { attrs: { title: "member " + j } }, [tokenNode(a)]);
      return el("span", { cls: "sg-patch-changed", attrs: { title: "member " + j + ": clean / corrupted" } }, [tokenNode(a), tokenNode(b)]);
    }

    /** One grid as a table: a row per layer, a column per heading; each cell's exact values in data-value (normalised) and data-raw. */
    grid(kind, g, headings) {
      const numbers = headings.length <= NUMBERS_UP_TO;
      const table = el("table", { cls: "sg-patch-grid", data: { grid: kind } }, [
        el("thead", {}, [el("tr", {}, [el("th", { text: "layer" }), ...headings.map((h) => el("th", { attrs: { scope: "col" } }, [h]))])])]);
      const body = el("tbody");
      g.normalised.forEach((row, l) => {
        const tr = el("tr", {}, [el("th", { attrs: { scope: "row" }, text: String(l) })]);
        row.forEach((v, i) => tr.appendChild(this.cell(kind, l, i, v, g.raw[l][i], numbers)));
        body.appendChild(tr);
      });
      table.appendChild(body);
      return el("div", { cls: "sg-patch-wrap" }, [table]);
    }

    cell(kind, l, i, v, raw, numbers) {
      const d = this.data, where = kind === "heads" ? "head " + i + " of layer " + l + " (its output at every member)"
        : kind + " of layer " + l + " at member " + i + " (\u201c" + d.clean_tokens[i] + "\u201d / \u201c" + d.corrupted_tokens[i] + "\u201d)";
      const metric = "the metric " + signed(raw, 3) + " (clean " + signed(d.clean_diff, 3) + ", corrupted " + signed(d.corrupted_diff, 3) + ")";
      if (v == null) {
        return el("td", { cls: "sg-patch-none", data: { raw }, attrs: { title: where + " taken from the clean run: " + metric +
          "; the two runs give the same difference, so 0/0 is not a number" } });
      }
      const colour = divergingColor(v, this.scale);
      const td = el("td", { data: { value: v, raw }, text: numbers ? rounded(v) : "",
        attrs: { title: where + " taken from the clean run: " + sig4(v) + " of the way from corrupted (0) to clean (1); " + metric } });
      td.style.background = rgb(colour);
      td.style.color = isLight(colour) ? "#111" : "#fff";
      return td;
    }

    /** The diverging scale, centred on 0, with 0 (corrupted) and 1 (clean) marked. */
    legend() {
      const M = this.scale, at = (v) => (50 + 50 * v / M) + "%";
      const ramp = el("div", { cls: "sg-ramp", attrs: { "aria-hidden": "true" } });
      ramp.style.background = "linear-gradient(to right, " + sg.colours.scores.stops.join(", ") + ")";
      const ticks = el("div", { cls: "sg-patch-ticks", attrs: { "aria-hidden": "true" } });
      const marks = [[-M, "\u2212" + sig4(M)], [0, "0"], [1, "1"]].concat(M >= 1.25 ? [[M, "+" + sig4(M)]] : []); // past 1, once there is room
      for (const [v, s] of marks) { const t = el("span", { text: s }); t.style.left = at(v); ticks.appendChild(t); }
      return el("div", { cls: "sg-patch-legend" }, [el("span", { cls: "sg-patch-says", text: "0 = corrupted, 1 = clean" }),
        el("div", { cls: "sg-patch-scale" }, [ramp, ticks]),
        el("span", { cls: "sg-hint", text: "one scale for every grid, \u00b1" + sig4(M) }) ]);
    }
  }

  /** A cell's number in its room: two decimals, signed, and a plain 0 where that would be ±0.00. */
  const rounded = (v) => (Math.abs(v) < 0.005 ? "0" : signed(v, 2));

  /** A patching's progress in words: its two runs, then its patched passes, layer by layer. */
  function progressWords(p) {
    if (p.state === "waiting") return "waiting for the model";
    const what = /^patching/.test(p.stage) ? "patched passes, layer by layer: " + p.done + "/" + p.total : "the clean and corrupted runs";
    return what + " (" + p.elapsed_s.toFixed(1) + " s)";
  }

  sg.view("patching", (page) => new Patching(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

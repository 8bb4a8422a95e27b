/* The logit lens (the page only: POST /api/lens, study/lens.py): after every layer, each member's
 * residual stream read through the model's final norm and unembedding, drawn as a layer × member
 * grid of top words, each cell coloured by the probability of that member's final word (the
 * model's own top word there after the last layer). Hovering a cell lists its top words; a click
 * on a row (or Enter on it) opens that layer's heads in the model view and the head card. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, short, percent, rgb, isLight, weightColor } = sg;
  const SHOWN_CHARS = 8; // characters of a top word written in its cell

  class Lens extends sg.View {
    constructor(page) {
      super(page);
      this.data = null;
      this.go = el("button", { cls: "sg-lens-go", attrs: { type: "button" }, text: "Read every layer", on: { click: () => this.read() } });
      this.said = el("p", { cls: "sg-lens-status sg-hint", attrs: { role: "status", "aria-live": "polite" } });
      this.grid = el("div", { cls: "sg-lens-wrap" });
      this.legend = el("div", { cls: "sg-lens-legend", attrs: { hidden: "" } }, [
        el("span", { text: "probability of the member's final word: 0" }),
        el("span", { cls: "sg-ramp", attrs: { "aria-hidden": "true" } }), el("span", { text: "1" })]);
      this.legend.querySelector(".sg-ramp").style.background = "linear-gradient(to right, " + sg.colours.weights.stops.join(", ") + ")";
      this.story = el("div", { cls: "sg-lens-story" });
      const actions = el("div", { cls: "sg-actions" }, [this.go, this.said]);
      this.section = el("section", { cls: "sg-card sg-lens", attrs: { "aria-label": "logit lens" } }, [
        el("h2", { text: "The logit lens: what the group would conclude after each layer" }),
        el("p", { cls: "sg-hint", text: "After each layer, every member's residual stream is read through the model's final norm and " +
          "unembedding, as if the layers above were not there. A cell shows the top word there; its colour is the probability of " +
          "that member's final word (the model's own top word after the last layer, in the bottom row). Hover a cell for its top " +
          "words; click a row to open that layer's heads." }),
        actions, this.legend, this.grid, this.story]);
      this.box = this.jobBox("sg-lens-job", actions);
    }

    /** A new text: the lens of the last one is not this one's. */
    newText() {
      this.data = null;
      this.draw();
      this.said.textContent = "";
    }

    /** Asks the server for the lens of the text shown, its progress under the button. */
    async read() {
      const live = this.store.textGuard(), text = this.d.text;
      if (!text) { this.said.textContent = "Type a text and press Explain first."; return; }
      this.go.disabled = true;
      this.said.textContent = "Reading the residual stream after every layer\u2026";
      try {
        const d = await this.longPost("/lens", { text, top: 5, all_positions: true }, { box: this.box, after: 300 });
        if (!live()) return;
        this.data = d;
        this.said.textContent = "";
        this.draw();
      } catch (e) {
        if (live()) this.said.textContent = this.stoppedSaid(e, "the lens", "Press Read every layer to ask again.");
      } finally {
        this.box.hidden = true;
        this.go.disabled = false;
      }
    }

    /** The grid: a header of members, a row per layer, and the final words' row. */
    draw() {
      const d = this.data, grid = clear(this.grid), story = clear(this.story);
      this.legend.hidden = !d;
      if (!d) return;
      const table = el("table", { cls: "sg-lens-grid" });
      table.appendChild(el("thead", {}, [el("tr", {}, [el("th", { cls: "sg-lens-corner", text: "layer" }),
        ...d.positions.map((j) => el("th", { attrs: { scope: "col", title: "member " + j } }, [tokenNode(d.tokens[j])]))])]));
      const body = el("tbody");
      d.layers.forEach((row, l) => {
        const tr = el("tr", { cls: "sg-lens-row", data: { layer: l },
          attrs: { tabindex: "0", "aria-label": "layer " + l + ": open its heads" },
          on: { click: () => this.openLayer(l), keydown: (ev) => { if (ev.key === "Enter") this.openLayer(l); } } },
        [el("th", { attrs: { scope: "row" }, text: String(l) })]);
        row.forEach((cell, p) => tr.appendChild(this.cell(cell, l, p)));
        body.appendChild(tr);
      });
      table.appendChild(body);
      table.appendChild(el("tfoot", {}, [el("tr", { cls: "sg-lens-final" }, [el("th", { attrs: { scope: "row" }, text: "final word" }),
        ...d.final.map((w) => el("td", { data: { value: w.prob }, attrs: { title: "the model's own top word here: " + w.token + " (" + percent(w.prob) + ")" } },
          [tokenNode(short(w.token, SHOWN_CHARS)), el("span", { cls: "sg-lens-p", text: percent(w.prob) })]))])]));
      if (d.positions.length < d.tokens.length) grid.appendChild(el("p", { cls: "sg-hint", text: "Members " + d.positions[0] + "\u2013" +
        d.positions[d.positions.length - 1] + " of " + d.tokens.length + ": the lens shows " + d.positions.length + " at once." }));
      grid.appendChild(table);
      grid.scrollLeft = grid.scrollWidth; // the last member (the story's) in view where the grid is wider than its card
      for (const s of d.story) story.appendChild(el("p", { text: s }));
    }

    /** Cell (layer l, shown member p): its top word, coloured by the final word's probability. */
    cell(c, l, p) {
      const d = this.data, j = d.positions[p], colour = weightColor(c.final_prob);
      const td = el("td", { cls: "sg-lens-cell", data: { value: c.final_prob, rank: c.final_rank } }, [tokenNode(short(c.top[0].token, SHOWN_CHARS))]);
      td.style.background = rgb(colour);
      td.style.color = isLight(colour) ? "#111" : "#fff";
      const words = "after layer " + l + ", member " + j + " (\u201c" + d.tokens[j] + "\u201d): " +
        c.top.map((w) => w.token + " " + percent(w.prob)).join(", ") + "\nits final word " + d.final[p].token + ": " +
        percent(c.final_prob) + ", rank " + c.final_rank;
      td.addEventListener("mousemove", (ev) => this.showTip(words, ev));
      td.addEventListener("mouseleave", () => { this.tip.hidden = true; });
      return td;
    }

    /** Opens layer l's heads: its highest-ranked head (head 0 before any ranking), scrolled into view in the model view. */
    openLayer(l) {
      const ranked = this.rankedHeads().find(([a]) => a === l), h = ranked ? ranked[1] : 0;
      for (const tr of this.grid.querySelectorAll(".sg-lens-row")) tr.classList.toggle("sg-open", Number(tr.dataset.layer) === l);
      this.openHead(l, h);
      const thumb = this.q('.sg-thumb[data-layer="' + l + '"][data-head="' + h + '"]');
      if (thumb) { thumb.scrollIntoView({ block: "center" }); thumb.focus({ preventScroll: true }); }
    }
  }

  sg.view("lens", (page) => new Lens(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

/* The residual stream at the last member (the page only; explain's numbers, study/attribution.py):
 * per layer, how much its heads (a tick each, their sum as a bar) and its MLP ("thinking alone")
 * add along the predicted word's unembedding direction, and the logit built so far. Drawn when
 * the explanation arrives; hovering a row lists its heads, a click opens
 * its largest head. The bars' colours are the figure's (views/colours.py: ATTENTION, THINKING). */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, sig4 } = sg;
  const { attention: ATTENTION, thinking: THINKING } = sg.colours.writers;

  class Residual extends sg.View {
    constructor(page) {
      super(page);
      this.said = el("p", { cls: "sg-hint sg-res-said", text: "Drawn once the text is explained." });
      this.chart = el("div", { cls: "sg-res-chart", attrs: { role: "list", "aria-label": "the residual stream, layer by layer" } });
      this.story = el("div", { cls: "sg-res-story" });
      const swatch = (colour, words) => el("span", { cls: "sg-res-key" }, [el("span", { cls: "sg-res-swatch", attrs: { "aria-hidden": "true" } }), words]);
      this.legend = el("div", { cls: "sg-res-legend", attrs: { hidden: "" } }, [
        swatch(ATTENTION, "attention: the layer's heads, summed (a tick per head)"),
        swatch(THINKING, "thinking alone: the layer's MLP")]);
      this.legend.querySelectorAll(".sg-res-swatch").forEach((s, i) => { s.style.background = i ? THINKING : ATTENTION; });
      this.section = el("section", { cls: "sg-card sg-residual", attrs: { "aria-label": "the residual stream" } }, [
        el("h2", { text: "The residual stream: what each layer adds to the predicted word" }),
        this.said, this.legend, this.chart, this.story]);
    }

    newText() { this.draw(null); }
    explained() { this.draw(this.d.explanation); }

    /** The chart of explanation e (null: none yet): the embedding's row, a row per layer, the logit's row. */
    draw(e) {
      const chart = clear(this.chart), story = clear(this.story);
      this.legend.hidden = !e;
      this.said.hidden = Boolean(e);
      if (!e) return;
      const p = e.logit_parts, heads = e.contributions.map((row) => row.reduce((a, b) => a + b, 0));
      const values = [...e.contributions.flat(), ...heads, ...e.mlp_contributions];
      const lo = Math.min(0, ...values), hi = Math.max(0, ...values), span = Math.max(hi - lo, 1e-12);
      const at = (v) => 100 * (v - lo) / span;  // % of the track
      let sofar = p.embed + p.position;
      chart.appendChild(el("div", { cls: "sg-res-row sg-res-head", attrs: { "aria-hidden": "true" } }, [
        el("span", { cls: "sg-res-label", text: "layer" }),
        el("div", { cls: "sg-res-scale" }, [el("span", { text: lo.toFixed(2) }), el("span", { text: "adds to the logit of " }, [tokenNode(e.predicted.token)]),
          el("span", { text: hi.toFixed(2) })]),
        el("span", { cls: "sg-res-sofar", text: "so far" })]));
      chart.appendChild(this.row("start", "embedding" + (p.position ? " + position" : ""), null, null, sofar,
        "the token's embedding" + (p.position ? " and its position's" : "") + ": " + sig4(sofar)));
      e.contributions.forEach((row, l) => {
        sofar += heads[l] + e.mlp_contributions[l];
        const lanes = [this.lane("heads", heads[l], ATTENTION, at, row), this.lane("mlp", e.mlp_contributions[l], THINKING, at)];
        const words = "layer " + l + ": heads " + sig4(heads[l]) + " (" + row.map((c, h) => h + ": " + sig4(c)).join(", ") +
          "), MLP " + sig4(e.mlp_contributions[l]) + "; the logit so far " + sig4(sofar);
        chart.appendChild(this.row("layer", String(l), lanes, at(0), sofar, words, l));
      });
      chart.appendChild(this.row("end", "logit", null, null, p.logit, "the logit of " + e.predicted.token + ": " + sig4(p.logit) +
        (p.biases ? " (the biases no head or MLP writes add " + sig4(p.biases) + ")" : "")));
      this.tell(e, story);
    }

    /** One row: its label, its lanes on a track with the zero line at `zero` (%), and the logit so far. */
    row(kind, label, lanes, zero, sofar, words, layer) {
      const track = el("div", { cls: "sg-res-track" }, lanes || []);
      if (zero != null) track.appendChild(el("span", { cls: "sg-res-zero", attrs: { "aria-hidden": "true" } })).style.left = zero + "%";
      const r = el("div", { cls: "sg-res-row sg-res-" + kind, data: layer == null ? { sofar } : { sofar, layer },
        attrs: { role: "listitem", tabindex: layer == null ? null : "0", "aria-label": words } },
      [el("span", { cls: "sg-res-label", text: label }), track, el("span", { cls: "sg-res-sofar", text: sofar.toFixed(2) })]);
      r.addEventListener("mousemove", (ev) => this.showTip(words, ev));
      r.addEventListener("mouseleave", () => { this.tip.hidden = true; });
      if (layer != null) {
        r.addEventListener("click", () => this.openHead(layer, this.largest(layer)));
        r.addEventListener("keydown", (ev) => { if (ev.key === "Enter") this.openHead(layer, this.largest(layer)); });
      }
      return r;
    }

    /** A lane: a bar from 0 to v, and for the heads a tick at each head's value. */
    lane(kind, v, colour, at, each) {
      const lane = el("div", { cls: "sg-res-lane", data: { kind } });
      const bar = el("span", { cls: "sg-res-bar", data: { value: v } });
      bar.style.left = Math.min(at(0), at(v)) + "%";
      bar.style.width = Math.abs(at(v) - at(0)) + "%";
      bar.style.background = colour;
      lane.appendChild(bar);
      (each || []).forEach((c, h) => { lane.appendChild(el("span", { cls: "sg-res-tick", data: { value: c, head: h } })).style.left = at(c) + "%"; });
      return lane;
    }

    /** The head of layer l whose direct contribution is largest in size. */
    largest(l) {
      const row = this.d.explanation.contributions[l];
      return row.reduce((best, c, h) => (Math.abs(c) > Math.abs(row[best]) ? h : best), 0);
    }

    /** What the chart shows, and what it must not be read as. */
    tell(e, story) {
      const word = e.predicted.token, last = e.tokens[e.tokens.length - 1];
      const p1 = el("p", {}, ["Each bar is a direct contribution: what that layer's heads (summed; a tick for each head) or its MLP write at the last member (",
        tokenNode(last), ") of the text with nothing silenced, as it stands, read along the unembedding direction of ", tokenNode(word),
        " with the final norm's scale held at its value in this run. The right column adds them up, from the embedding's share to the logit."]);
      const rival = e.runner_up;
      const p2 = el("p", {}, ["These are shares of a raw logit, and softmax ignores any offset every word's logit shares: a bar that lifts ",
        tokenNode(word), " can lift ", ...(rival ? ["the runner-up ", tokenNode(rival.token)] : ["other words"]),
        " as much. What the probability follows is the gap between them, whose shares the story gives. A direct contribution also leaves out what later layers make of a write; silencing a head counts that."]);
      story.append(p1, p2);
    }
  }

  sg.view("residual", (page) => new Residual(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

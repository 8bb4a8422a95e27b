/* The conclusion: the top next words as bars, the old values as ghost bars after silencing, and a
 * comparison's shift between two contexts. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, percent, sig4, signed } = sg;
  /** A change of probability in percentage points, one decimal; "±0.0" when it rounds to nothing (never "-0.0"). */
  const points = (d) => (Math.abs(100 * d) < 0.05 ? "\u00b10.0" : signed(100 * d, 1)) + " pts";

  class Conclusion extends sg.View {
    constructor(page) {
      super(page);
      this.place = "layout";
      this.section = this.card("sg-conclusion", "The conclusion", "The most likely next words. Silencing shows the old value as a ghost bar.");
      this.section.appendChild(this.bars = el("div", { cls: "sg-bars" }));
      this.section.appendChild(this.shift = el("div", { cls: "sg-shift" }));
      this.draws = ["conclusion", "explanation"];
    }

    /** The silencing redraw's request: the conclusion of the silenced run (a report: the effects it holds). */
    redraw(body, current) {
      if (!body) { this.draw(); return null; }
      return this.post("/conclusion", { ...body, top: 10 }).then((c) => { if (current()) this.page.update({ conclusion: c }); });
    }

    draw() {
      const bars = clear(this.bars);
      const shift = clear(this.shift);
      const c = this.d.conclusion, e = this.d.explanation;
      const top = (c && c.top) || (e && e.top);
      if (!top) return;
      let rows = top.map((w) => ({ token: w.token, id: w.id, now: w.prob, ghost: null }));
      let note = null;
      if (this.api && c && c.silenced) {
        rows = c.words.map((w) => ({ token: w.token, id: w.id, now: w.prob_after, ghost: w.prob_before }))
          .sort((a, b) => b.now - a.now); // in the order of the silenced run
        note = "Bars: with the silencing, in its order. Dashed outlines: before.";
      } else if (!this.api && e && (this.ui.members.size || this.ui.headsSilenced.size)) {
        const p = this.staticSilenced(e);
        if (p != null) {
          rows = rows.map((r) => (r.id === e.predicted.id ? { ...r, now: p, ghost: r.now } : { ...r, now: null, ghost: r.now }));
          note = "This file holds the effect of silencing one member or one tested head on the predicted word only; run `studygroup serve` for the rest.";
        } else note = "This file does not hold that silencing; run `studygroup serve` to compute it.";
      }
      bars.dataset.silenced = String(Boolean(note));
      rows = rows.slice(0, 12);
      // the axis: to the larger top probability, before and after, rounded up to the next 10%
      const axis = Math.min(1, Math.ceil(10 * Math.max(1e-9, ...rows.map((r) => Math.max(r.now || 0, r.ghost || 0))) - 1e-9) / 10);
      bars.dataset.axis = String(axis);
      const width = (p) => (100 * p / axis).toFixed(2) + "%";
      for (const r of rows) {
        const track = el("div", { cls: "sg-track" });
        if (r.ghost != null) track.appendChild(el("div", { cls: "sg-ghost" }));
        if (r.now != null) track.appendChild(el("div", { cls: "sg-bar" }));
        if (r.ghost != null) track.firstChild.style.width = width(r.ghost);
        if (r.now != null) track.lastChild.style.width = "max(1px, " + width(r.now) + ")";
        const value = r.now == null ? "?" : percent(r.now);
        const change = r.ghost != null && r.now != null ? el("span", { cls: "sg-was", text: percent(r.ghost) + " before, " + points(r.now - r.ghost) }) : null;
        bars.appendChild(el("div", { cls: "sg-barrow", data: { id: r.id }, attrs: { title: r.token + ": " + sig4(r.now) + (r.ghost != null ? " (before: " + sig4(r.ghost) + ")" : "") } }, [
          tokenNode(r.token, "sg-word"), track, el("span", { cls: "sg-value" }, [value, change])]));
      }
      bars.appendChild(el("p", { cls: "sg-hint sg-axis", text: "The bars run from 0 to " + percent(axis) +
        (axis < 1 ? " (the largest probability shown, rounded up to the next 10%), not to 100%." : ".") }));
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
            el("span", { cls: "sg-value", text: percent(s.prob_a) + " \u2192 " + percent(s.prob_b) + " (" + points(s.change) + ")" })]));
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
  }

  sg.view("conclusion", (page) => new Conclusion(page));
})(window.StudyGroup = window.StudyGroup || {});

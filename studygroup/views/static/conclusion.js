/* The conclusion: the top next words as bars, the old values as ghost bars after silencing, and a
 * comparison's shift between two contexts. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, percent, sig4, signed } = sg;

  sg.mixin(class {

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
  });
})(window.StudyGroup = window.StudyGroup || {});

/* The selected member's question in the open head: the weight it gives each answer and what each
 * answer contributed (weight \u00d7 \u2016v\u2c7c\u00b7W_O\u2016), side by side. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, weightColor, rgb } = sg;

  /** What an attention sink is, in one line (studygroup.study.sinks.MEANING, through views/colours.py). */
  const SINK_MEANING = sg.colours.sink.meaning;

  /** A view without a card of its own: its panel is the head card's .sg-member. */
  class Listening extends sg.View {
    headDrawn() { this.draw(); }
    selected() { this.draw(); }

    /** The selected member's question in this head: its weights, and what each answer contributed. */
    draw() {
      const box = clear(this.q(".sg-member")), head = this.page.views.head;
      const d = head.currentHead(), i = this.ui.selected;
      let entries = null, asker = null;
      const lh = head.listenedHead(), e = this.d.explanation;
      const sameText = lh && e && (!d || d.tokens.length === e.tokens.length);
      const sinks = sameText && lh.sinks ? lh.sinks : [];  // this head's sinks on the explained text
      if (d && i != null && d.questions.includes(i)) {
        const paper = d.notation === "paper", qi = d.questions.indexOf(i);
        asker = d.tokens[i];
        entries = sg.shownKeys(d).map((j, x) => {
          const w = paper ? d.weights[qi][x] : d.weights[x][qi];
          const c = paper ? d.contributions[qi][x] : d.contributions[x][qi];
          const ok = paper ? d.mask[qi][x] : d.mask[x][qi];
          return { index: j, token: d.tokens[j], weight: w, contribution: c, masked: !ok, sink: sinks.includes(j) };
        }).filter((x) => !x.masked);
      } else if (!d && i != null) {
        if (lh && e && i === e.tokens.length - 1) {
          asker = e.tokens[i];
          entries = lh.listened.map((x) => ({ index: x.index, token: x.token, weight: x.weight, contribution: x.contribution,
            sink: Boolean(x.is_sink) }))
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
          el("span", { attrs: { role: "cell" } }, [tokenNode(x.token), el("span", { cls: "sg-idx", text: " " + x.index }),
            ...(x.sink ? [el("span", { cls: "sg-sink-tag", text: " attention sink", attrs: { title: SINK_MEANING } })] : [])]),
          el("span", { cls: "sg-cellbar", attrs: { role: "cell" } }, [wb, el("span", { cls: "sg-value", text: x.weight.toFixed(3) })]),
          el("span", { cls: "sg-cellbar", attrs: { role: "cell" } }, [cb, el("span", { cls: "sg-value", text: x.contribution.toPrecision(3) })])]);
        row.addEventListener("mouseenter", () => this.setHover(x.index));
        row.addEventListener("mouseleave", () => this.setHover(null));
        table.appendChild(row);
      }
      box.appendChild(table);
      const here = this.ui.layer + "." + this.ui.head + "." + i;
      if (entries.some((x) => x.sink) && (this.ui.sinkExplained || here) === here) {  // said the first time; the tag's hover says it again
        this.ui.sinkExplained = here;
        box.appendChild(el("p", { cls: "sg-hint sg-sink-note", text: SINK_MEANING }));
      }
    }
  }

  sg.view("listening", (page) => new Listening(page));
})(window.StudyGroup = window.StudyGroup || {});

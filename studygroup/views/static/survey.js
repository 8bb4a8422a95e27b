/* The survey (the page only: GET /api/survey, `studygroup serve --survey DIR`): each head's role
 * over a corpus (study/survey: the role with the highest mean score over the survey's sequences),
 * marked on the model view's thumbnails with the role's colour and first letter, its mean and 95%
 * interval on hover; the survey's story and a legend in a card of its own. A server started
 * without --survey says so in /api/info (`survey: false`): the page asks nothing and the card stays hidden. */
(function (sg) {
  "use strict";

  const { el, clear } = sg;
  const ROLES = sg.colours.roles; // Okabe–Ito colours and short labels, from views/colours.py
  const FALLBACK = "#999999"; // a role the page has no colour for

  class Survey extends sg.View {
    constructor(page) {
      super(page);
      this.data = null;
      this.shown = true;
      this.said = el("p", { cls: "sg-survey-status sg-hint", attrs: { role: "status", "aria-live": "polite" } });
      this.about = el("p", { cls: "sg-hint" });
      this.story = el("div", { cls: "sg-survey-story" });
      this.legend = el("div", { cls: "sg-survey-legend" });
      const toggle = el("input", { attrs: { type: "checkbox", checked: "" }, on: { change: (ev) => { this.shown = ev.target.checked; this.mark(); } } });
      this.section = el("section", { cls: "sg-card sg-survey", attrs: { "aria-label": "survey", hidden: "" } }, [
        el("h2", { text: "The survey: each head's role over a corpus" }), this.about, this.said,
        el("label", { cls: "sg-survey-toggle" }, [toggle, " mark the model view's heads by their role over the survey"]),
        this.legend, this.story]);
      // the model view builds its thumbnails once per model shape: marks go on each new set
      new MutationObserver(() => this.mark()).observe(this.q(".sg-mv-grid"), { childList: true });
    }

    /** The server's facts: its survey asked for where it serves one (/api/info's `survey`). */
    informed(info) { if (info.survey) this.load(); }

    async load() {
      let res;
      try { res = await fetch(this.api + "/survey"); } catch (e) { return; } // no server: the page says so itself
      let d = null;
      try { d = await res.json(); } catch (e) { d = null; }
      if (res.status === 404) return; // no survey served
      this.section.hidden = false;
      if (!res.ok) { this.said.textContent = (d && d.error) || "the server answered " + res.status; return; }
      this.data = d;
      this.draw();
      this.mark();
    }

    /** The card: what was surveyed, the legend, the story. */
    draw() {
      const d = this.data;
      this.about.textContent = "Surveyed " + d.model + " on " + d.description + " (" + d.folder + "). A head's mark is its role over " +
        "the survey: of the roles, the one with the highest mean score over the sequences. Solid: the head is a head of that role " +
        "(score \u2265 " + d.threshold + ") on at least half of them; hollow: on fewer. Hover a mark for its mean and 95% interval.";
      clear(this.legend).appendChild(el("p", { cls: "sg-role-legend" }, Object.keys(ROLES.colours).map((name) =>
        el("span", { cls: "sg-role-key", data: { role: name } }, [markNode(name, true), ROLES.labels[name] + ": " + name + " (" + ROLES.definitions[name] + ")"]))));
      clear(this.story);
      for (const s of d.story) this.story.appendChild(el("p", { text: s }));
    }

    /** Each thumbnail's mark (none where marks are off or the survey has no role for the head). */
    mark() {
      const d = this.data, by = new Map();
      if (d && this.shown) for (const h of d.heads) by.set(h.layer + "." + h.head, h);
      for (const b of this.qa(".sg-thumb")) {
        const old = b.querySelector(".sg-survey-mark");
        if (old) old.remove();
        const h = by.get(b.dataset.layer + "." + b.dataset.head);
        if (!h) continue;
        const m = markNode(h.role, 2 * h.above >= h.n);
        m.title = h.said;
        Object.assign(m.dataset, { role: h.role, mean: h.mean, low: h.low, high: h.high, n: h.n, above: h.above });
        b.appendChild(m);
      }
    }
  }

  /** A role's mark: its first letter on its colour (solid), or in its colour on white (hollow). */
  function markNode(role, solid) {
    const colour = ROLES.colours[role] || FALLBACK, label = ROLES.labels[role] || String(role);
    const m = el("span", { cls: "sg-survey-mark" + (solid ? "" : " sg-hollow"), text: label.charAt(0) });
    m.style.borderColor = colour;
    if (solid) m.style.background = colour;
    return m;
  }

  sg.view("survey", (page) => new Survey(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

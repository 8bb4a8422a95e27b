/* What one page shows and when: asking the server step by step for a new text (the page), or
 * showing the data embedded in a report or a notebook cell; redrawing every view for the
 * silencing shown. The steps tell the page's views what happened (instance.js: tell, update);
 * each view draws its own section. */
(function (sg) {
  "use strict";

  /** The model as the header names it: "smollm2 135M · Q4_1 · 98.4 MB: 30 layers × 9 heads, 3 key/value heads". */
  const modelLine = (m) => (m.label || m.name) + (m.note ? " (" + m.note + ")" : "") + ": " + m.n_layers +
    " layers \u00d7 " + m.n_heads + " heads, " + m.n_kv_heads + " key/value heads";

  class Session {
    constructor(page) {
      this.page = page;
      this.redrawing = null;
      this.redrawAgain = false;
    }

    // -- server mode --
    async start() {
      const p = this.page;
      try {
        const info = await sg.api.info(p.api);
        p.store.d.info = info;
        p.q(".sg-model").textContent = modelLine(info.model) + " shared by groups of " + info.group_size + " query heads";
        p.tell("informed", info);
        p.submit();
      } catch (e) { p.say("Cannot reach the studygroup server: " + e.message, "error"); }
    }

    /** A new text: the views a text has before it (the lesson takes the URL's), the text's own, then those after. */
    async submit() {
      const p = this.page;
      p.tell("beforeText");
      await this.explore();
      await Promise.all(p.tell("afterText"));
    }

    /** The text in the box, step by step: its members and conclusion, every head, its first head,
     * then who decided it (explain, or compare with the other context). */
    async explore() {
      const p = this.page, s = p.store;
      const text = p.q(".sg-text").value;
      const other = p.q(".sg-other").value.trim();
      if (!text.trim()) { p.say("Type a text first.", "error"); return; }
      s.newText({ info: s.d.info, text, other: other || null });
      const live = s.textGuard();
      p.tell("newText");
      p.drawAll();
      let doing = "the text's conclusion"; // what a cancel leaves undone
      try {
        p.say("Reading the members\u2026", "busy");
        const c = await p.jobs.followedPost("/conclusion", { text, top: 10 });
        if (!live()) return;
        p.update({ conclusion: c });
        p.say("Drawing every head\u2026", "busy");
        doing = "the model view";
        const mv = await p.jobs.followedPost("/model_view", { text }, (path, b) => sg.api.modelView(p.api, b));
        if (!live()) return;
        p.update({ modelView: mv });
        if (!await this.openFirstHead()) { this.untold(); return; } // stopped: its message stays
        doing = "who decided it (the explanation)";
        p.say("Finding who decided it: silencing members and heads one at a time (this takes a while on a CPU)\u2026", "busy");
        if (other) {
          const cmp = await p.jobs.longPost("/compare", { text_a: other, text_b: text, top: 10 });
          if (!live()) return;
          p.update({ comparison: cmp, explanation: cmp.b });
        } else {
          const e = await p.jobs.longPost("/explain", { text, top: 10 });
          if (!live()) return;
          p.update({ explanation: e });
        }
        await Promise.all(p.tell("explained"));
        if (live()) { p.say(""); p.tell("explored"); }
      } catch (e) {
        if (!live()) return;
        p.say(p.jobs.stoppedSaid(e, doing, "Press Explain to ask again."), "error");
        this.untold();
      }
    }

    /** A load that stopped before the explanation: the story says none will come for this text. */
    untold() {
      if (!this.page.store.d.explanation) this.page.update({ untold: true });
    }

    /** Opens a new text's first head: the one asked for (store.asked, a URL's: { head, member }, taken
     * once) when this model has it, else the first ranked; then selects the member asked for, if the
     * text has it. False when the head was not shown. */
    async openFirstHead() {
      const p = this.page, s = p.store, a = s.asked || {}, mv = s.d.modelView;
      s.asked = null;
      const has = !!(a.head && mv && sg.hasHead(mv, a.head));
      const first = has ? a.head : s.rankedHeads()[0] || [0, 0];
      if (!await p.openHead(first[0], first[1], has)) return false;
      if (a.member != null && a.member < s.tokens().length) p.select(a.member);
      return true;
    }

    /** Redraws every view for the silencing shown; resolves when the silencing shown last is drawn
     * and the views that follow a redraw (the lesson, the address) have heard of it. One redraw's
     * requests are out at a time: a silencing made meanwhile is drawn once they are answered, only
     * the latest of several (the server's queue never holds more than one redraw). */
    resilence() {
      if (this.redrawing) this.redrawAgain = true;
      else {
        const redraw = async () => {
          do { this.redrawAgain = false; await this.redrawOnce(); } while (this.redrawAgain);
        };
        this.redrawing = redraw().finally(() => { this.redrawing = null; });
      }
      return this.redrawing.then(() => { this.page.tell("redrawn"); });
    }

    /** One redraw: every view's request for the silencing shown asked at once (the server answers
     * them in turn from one pass), each drawn by its view as it arrives, so none waits for another's
     * drawing; an answer for a silencing no longer shown is dropped (the store's guard). */
    async redrawOnce() {
      const p = this.page, s = p.store, current = s.guard();
      const body = p.api ? { text: s.d.text, ...s.silencing() } : null;
      if (p.api) p.say("Recomputing the conclusion and redrawing every head with the silenced members and heads\u2026", "busy");
      const drawn = await Promise.allSettled(p.tell("redraw", body, current));
      if (!current() || !p.api) return;
      const failed = drawn.find((x) => x.status === "rejected");
      if (failed) p.say(failed.reason.message, "error");
      else p.say("");
    }

    // -- static mode (report, notebook) --
    show(data) {
      const p = this.page, s = p.store;
      const e = data.explanation || (data.comparison && data.comparison.b) || null;
      s.d = { text: data.text || (e && e.text), explanation: e, comparison: data.comparison || null,
        modelView: data.model_view || null, conclusion: data.conclusion || null, embeddedHeads: data.heads || {} };
      if (e) p.q(".sg-model").textContent = modelLine(e.model);
      p.tell("shown");
      p.drawAll();
      const first = e && e.first_head ? e.first_head : s.rankedHeads()[0];
      if (first) p.openHead(first[0], first[1], false);
      p.say(s.d.modelView ? "A saved report: everything here is inside this file; silencing shows the precomputed effects."
        : "A saved explanation: members, conclusion, story, and every head's direct contribution.");
    }
  }

  sg.Session = Session;
})(window.StudyGroup = window.StudyGroup || {});

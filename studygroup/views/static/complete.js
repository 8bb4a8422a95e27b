/* The complete ranking: where explain's default measured only some heads exactly (heads_measured <
 * n_layers × n_heads), the page shows that quick ranking at once, then asks for every head measured
 * exactly (POST /api/explain with measure_heads "all") as a job in the background, its progress in
 * words beside the story's decisive heads, and replaces the ranking, the model view's ranks and the
 * story with the complete one. A new text, a silencing change or its Cancel button stops it. */
(function (sg) {
  "use strict";

  const headsOf = (e) => e.model.n_layers * e.model.n_heads;

  /** A view without a card of its own: its line sits under the story's sentences. */
  class Complete extends sg.View {
    newText() { this.stop("new text"); }
    explored() { this.start(); }
    /** A silencing redraw stops it (its request is none). */
    redraw() { this.stop("silencing"); return null; }

    /** Start the complete explain of the text shown, unless its explanation is complete already. */
    async start() {
      const e = this.d.explanation;
      if (!this.api || !e || this.d.comparison || e.heads_measured >= headsOf(e)) return;
      const job = { stopped: null };
      this.completing = job;
      const box = this.completeBox();
      const words = (p) => "Measuring every head exactly in the background: " + (p.state === "waiting" ? "waiting for the model" :
        (p.stage || "starting") + " " + Math.floor(100 * p.done / Math.max(1, p.total)) + "%") + " (" + p.elapsed_s.toFixed(1) + " s)";
      this.page.jobs.paintProgress({ state: "waiting", stage: "", done: 0, total: 0, steps: 0, elapsed_s: 0 }, box, words);
      try {
        const all = await this.longPost("/explain", { text: this.d.text, top: 10, measure_heads: "all" },
          { box, words, wanted: () => this.completing === job });
        if (this.completing !== job) return;
        this.completing = null;
        this.page.update({ explanation: all });
        const where = all.heads.length && all.heads[0].silence_effect == null ? "at the last position only" : "at every position";
        this.completeSaid("done", "Complete: all " + headsOf(all) + " heads measured exactly, each silenced " + where +
          ". The decisive heads, their numbers in the model view and the story are now the complete ranking's.");
        if (!this.ui.headChosen && all.heads.length) await this.openHead(all.heads[0].layer, all.heads[0].head, false);
      } catch (err) {
        if (this.completing === job) this.completing = null;
        if (job.stopped === "new text") return;
        const why = job.stopped === "silencing" ? "Stopped (the silencing changed)" :
          /cancelled/.test(err.message) ? "Stopped on request" : "The complete ranking failed (" + err.message + ")";
        this.completeSaid("stopped", why + ": the ranking is the quick one, " + e.heads_measured + " of " + headsOf(e) + " heads measured exactly.");
      }
    }

    /** Stop the complete explain in the background, if one runs; why: "new text" or "silencing". */
    stop(why) {
      const job = this.completing;
      if (!job) return;
      job.stopped = why;
      this.completing = null;
      const box = this.completeBox();
      if (box.dataset.job) this.post("/cancel", { job: box.dataset.job }).catch(() => {});
      if (why === "new text") box.hidden = true;
    }

    /** The line beside the decisive heads that follows the complete explain. */
    completeBox() { return this.jobBox("sg-complete", this.q(".sg-sentences")); }

    /** The complete explain's end in words, without a Cancel button or a bar. */
    completeSaid(state, words) {
      const box = this.completeBox();
      box.dataset.state = state;
      box.querySelector("button").hidden = true;
      box.querySelector("progress").hidden = true;
      box.querySelector(".sg-progress-stage").textContent = words;
    }
  }

  sg.view("complete", (page) => new Complete(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

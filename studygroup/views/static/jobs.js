/* Long computations (explain, compare, and the conclusion, model view and head of a long text): each is named by a job id, its progress polled
 * (POST /api/progress) and shown with a Cancel button (POST /api/cancel); a new text cancels the
 * computation of the last one. The server stops a cancelled computation at its next layer. */
(function (sg) {
  "use strict";

  const { el } = sg;
  /** Milliseconds between two looks at a computation's progress. */
  const POLL_MS = 500;
  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
  /** A new job id: 128 bits from the browser's cryptographic generator, as 32 hex digits (not to be guessed by another page). */
  const newJobId = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");

  /** Milliseconds a view's request runs before its progress and Cancel show (a long text's pass). */
  const SLOW_MS = 700;

  /** The jobs of one page: each POST that may run long, its progress box and its Cancel button. */
  class Jobs {
    constructor(page) { this.page = page; }
    get store() { return this.page.store; }
    post(path, body) { return sg.api.post(this.page.api, path, body); }

    /** POST path with body as a job whose progress and Cancel show once it runs past SLOW_MS; send: as longPost's. */
    followedPost(path, body, send) { return this.longPost(path, body, { after: SLOW_MS, send }); }

    /** POST path with body as a job the page follows and may cancel; the answer's JSON (a cancelled one rejects).
     * opts.box: the progress box to paint (default: the one under the status, hidden again at the end);
     * opts.wanted: () => whether the answer is still wanted (default: no new text), else it is cancelled;
     * opts.words: (progress) => the words the box shows;
     * opts.send: (path, body) => the answer (default: this.post), for the API's own readers (sg.api.head);
     * opts.after: milliseconds before the box shows (default 0): a quicker answer never shows it. */
    async longPost(path, body, opts = {}) {
      const job = newJobId();
      const wanted = opts.wanted || this.store.textGuard();
      const box = opts.box || this.progressBox();
      let finished = false;
      const answer = (opts.send || ((p, b) => this.post(p, b)))(path, { ...body, job });
      const show = () => {
        if (finished) return;
        if (!opts.box) this.paintProgress({ state: "waiting", stage: "", done: 0, total: 0, steps: 0, elapsed_s: 0 }, box, opts.words);
        box.hidden = false;
        box.dataset.job = job;
        box.dataset.state = "waiting";
        box.querySelector("button").hidden = false;
        box.querySelector("progress").hidden = false;
        box.querySelector("button").onclick = () => { this.post("/cancel", { job }).catch(() => {}); };
      };
      if (opts.after) setTimeout(show, opts.after); else show();
      (async () => {
        while (!finished) {
          await sleep(POLL_MS);
          if (finished) return;
          if (!wanted()) { finished = true; this.post("/cancel", { job }).catch(() => {}); return; } // not wanted any more
          try { const p = await this.post("/progress", { job }); if (!finished && box.dataset.job === job) this.paintProgress(p, box, opts.words); } catch (e) { /* not yet known to the server */ }
        }
      })();
      try { return await answer; } finally {
        finished = true;
        if (!opts.box && wanted() && box.dataset.job === job) box.hidden = true;
      }
    }

    /** What the status says when a computation stopped: on request, what was left undone and how to
     * ask again; otherwise the error's own message. */
    stoppedSaid(err, what, again) {
      return /cancelled/.test(err.message) ? "Stopped: " + what + " was cancelled on request. " + again : err.message;
    }

    /** A box for a job's progress, made on first use and placed after `after`: a Cancel button, a bar, the words. */
    box(cls, after) {
      let box = this.page.q("." + cls);
      if (box) return box;
      box = el("div", { cls: "sg-job " + cls, attrs: { hidden: "" } }, [ // the button first: it stays where it is as the words change
        el("button", { attrs: { type: "button" }, text: "Cancel" }),
        el("progress", { attrs: { max: "1", value: "0", "aria-label": "progress of the stage" } }),
        el("span", { cls: "sg-progress-stage", attrs: { "aria-live": "polite" } })]);
      after.parentNode.insertBefore(box, after.nextSibling);
      return box;
    }

    /** The progress line under the status. */
    progressBox() { return this.box("sg-progress", this.page.status); }

    /** A progress answer drawn in box: by default "silencing 24 members, layer by layer: 120/720 (3.1 s)". */
    paintProgress(p, box, words) {
      const stage = p.state === "waiting" ? "waiting for the model" : p.stage || "starting";
      box.querySelector(".sg-progress-stage").textContent = words ? words(p) :
        stage + (p.total ? ": " + p.done + "/" + p.total : "") + " (" + p.elapsed_s.toFixed(1) + " s)";
      const bar = box.querySelector("progress");
      bar.max = Math.max(1, p.total); bar.value = p.done;
      box.dataset.state = p.state;
      box.dataset.steps = String(p.steps);
    }
  }

  sg.Jobs = Jobs;
})(window.StudyGroup = window.StudyGroup || {});

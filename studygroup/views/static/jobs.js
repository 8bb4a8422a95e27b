/* Long computations (explain, compare): each is named by a job id, its progress polled
 * (POST /api/progress) and shown with a Cancel button (POST /api/cancel); a new text cancels the
 * computation of the last one. The server stops a cancelled computation at its next layer. */
(function (sg) {
  "use strict";

  const { el } = sg;
  /** Milliseconds between two looks at a computation's progress. */
  const POLL_MS = 500;
  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

  sg.mixin(class {
    /** POST path with body as a job the page follows and may cancel; the answer's JSON (a cancelled one rejects). */
    async longPost(path, body) {
      const job = "j" + Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
      const gen = this.gen;
      let finished = false;
      const answer = this.post(path, { ...body, job });
      const box = this.progressBox();
      box.hidden = false;
      box.querySelector("button").onclick = () => { this.post("/cancel", { job }).catch(() => {}); };
      (async () => {
        while (!finished) {
          await sleep(POLL_MS);
          if (finished) return;
          if (gen !== this.gen) { finished = true; this.post("/cancel", { job }).catch(() => {}); return; } // a new text: this one is not wanted
          try { const p = await this.post("/progress", { job }); if (!finished) this.paintProgress(p); } catch (e) { /* not yet known to the server */ }
        }
      })();
      try { return await answer; } finally {
        finished = true;
        if (gen === this.gen) box.hidden = true;
      }
    }

    /** The progress line under the status, made on first use: a Cancel button, a bar, the stage. */
    progressBox() {
      let box = this.q(".sg-progress");
      if (box) return box;
      box = el("div", { cls: "sg-progress", attrs: { hidden: "" } }, [ // the button first: it stays where it is as the words change
        el("button", { attrs: { type: "button" }, text: "Cancel" }),
        el("progress", { attrs: { max: "1", value: "0", "aria-label": "progress of the stage" } }),
        el("span", { cls: "sg-progress-stage", attrs: { "aria-live": "polite" } })]);
      this.status.parentNode.insertBefore(box, this.status.nextSibling);
      return box;
    }

    /** A progress answer drawn: "silencing 24 members, layer by layer: 120/720 (3.1 s)". */
    paintProgress(p) {
      const box = this.progressBox();
      const stage = p.state === "waiting" ? "waiting for the model" : p.stage || "starting";
      box.querySelector(".sg-progress-stage").textContent = stage + (p.total ? ": " + p.done + "/" + p.total : "") + " (" + p.elapsed_s.toFixed(1) + " s)";
      const bar = box.querySelector("progress");
      bar.max = Math.max(1, p.total); bar.value = p.done;
      box.dataset.state = p.state;
      box.dataset.steps = String(p.steps);
    }
  });
})(window.StudyGroup = window.StudyGroup || {});

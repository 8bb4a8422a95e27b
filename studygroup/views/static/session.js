/* What one view shows and when: asking the server step by step (the page), or showing the data
 * embedded in a report or a notebook cell; what is silenced, as the API takes it. */
(function (sg) {
  "use strict";

  const { el } = sg;

  /** The model as the header names it: "smollm2 135M · Q4_1 · 98.4 MB: 30 layers × 9 heads, 3 key/value heads". */
  const modelLine = (m) => (m.label || m.name) + (m.note ? " (" + m.note + ")" : "") + ": " + m.n_layers +
    " layers \u00d7 " + m.n_heads + " heads, " + m.n_kv_heads + " key/value heads";

  /** Milliseconds a view's request runs before its progress and Cancel show (a long text's pass). */
  const SLOW_MS = 700;

  sg.mixin(class {
    // -- server mode --
    post(path, body) { return sg.api.post(this.api, path, body); }
    /** The model view of body's text; shown: the one the page shows (its unchanged heads kept as drawn). */
    modelView(body, shown = null) { return sg.api.modelView(this.api, body, shown); }
    /** POST path with body as a job whose progress and Cancel show once it runs past SLOW_MS; send: as longPost's. */
    followedPost(path, body, send) { return this.longPost(path, body, { after: SLOW_MS, send }); }

    async start() {
      try {
        const info = await sg.api.info(this.api);
        this.d.info = info;
        this.q(".sg-model").textContent = modelLine(info.model) + " shared by groups of " + info.group_size + " query heads";
        this.q(".sg-text").value = info.default_text;
        const most = info.limits && info.limits.max_tokens;
        if (most) this.q(".sg-limit").textContent = "Texts of up to " + most + " tokens" +
          (most === info.context_length ? " (the model's context)." : " (the server's --max-tokens; the model's context holds " + info.context_length + ").") +
          " A longer text is refused with a message, never cut.";
        this.submit();
      } catch (e) { this.say("Cannot reach the studygroup server: " + e.message, "error"); }
    }

    async submit() {
      const text = this.q(".sg-text").value;
      const other = this.q(".sg-other").value.trim();
      if (!text.trim()) { this.say("Type a text first.", "error"); return; }
      const gen = ++this.gen;
      const live = () => gen === this.gen;
      this.stopComplete("new text");
      // a new text: nothing of the last one stays (its head, its selection), even if this one fails
      Object.assign(this.ui, { selected: null, hover: null, members: new Set(), headsSilenced: new Set(), headChosen: false, rows: "auto", layer: null, head: null, why: null });
      this.heads.clear();
      this.d = { info: this.d.info, text, other: other || null };
      this.root.dispatchEvent(new CustomEvent("sg-text", { detail: { text } })); // the views of their own (sg.views)
      this.renderAll();
      let doing = "the text's conclusion"; // what a cancel leaves undone
      try {
        this.say("Reading the members\u2026", "busy");
        const c = await this.followedPost("/conclusion", { text, top: 10 });
        if (!live()) return;
        this.d.conclusion = c;
        this.renderMembers(); this.renderConclusion();
        this.say("Drawing every head\u2026", "busy");
        doing = "the model view";
        const mv = await this.followedPost("/model_view", { text }, (p, b) => this.modelView(b));
        if (!live()) return;
        this.d.modelView = mv;
        this.renderModelView();
        if (!await this.openFirstHead()) { this.untold(); return; } // stopped: its message stays
        doing = "who decided it (the explanation)";
        this.say("Finding who decided it: silencing members and heads one at a time (this takes a while on a CPU)\u2026", "busy");
        if (other) {
          const cmp = await this.longPost("/compare", { text_a: other, text_b: text, top: 10 });
          if (!live()) return;
          this.d.comparison = cmp; this.d.explanation = cmp.b;
        } else {
          const e = await this.longPost("/explain", { text, top: 10 });
          if (!live()) return;
          this.d.explanation = e;
        }
        this.renderMembers(); this.renderConclusion(); this.renderStory(); this.renderModelView();
        this.root.dispatchEvent(new CustomEvent("sg-explained")); // the views of their own that draw the explanation
        const first = this.d.explanation.first_head;  // the most decisive head not resting on a sink
        if (!this.ui.headChosen && first) {
          await this.openHead(first[0], first[1], false);
        } else this.renderHead();
        if (live()) { this.say(""); this.completeRanking(); }
      } catch (e) {
        if (!live()) return;
        this.say(this.stoppedSaid(e, doing, "Press Explain to ask again."), "error");
        this.untold();
      }
    }

    /** A load that stopped before the explanation: the story says none will come for this text. */
    untold() {
      if (this.d.explanation) return;
      this.d.untold = true;
      this.renderStory();
    }

    /** Opens a new text's first head: the one asked for (this.asked, a URL's: { head, member }, taken
     * once) when this model has it, else the first ranked; then selects the member asked for, if the
     * text has it. False when the head was not shown. */
    async openFirstHead() {
      const a = this.asked || {}, mv = this.d.modelView;
      this.asked = null;
      const has = !!(a.head && mv && a.head[0] < mv.n_layers && a.head[1] < mv.n_heads);
      const first = has ? a.head : this.rankedHeads()[0] || [0, 0];
      if (!await this.openHead(first[0], first[1], has)) return false;
      if (a.member != null && a.member < this.tokens().length) this.select(a.member);
      return true;
    }

    /** What is silenced now and how it is taken out, as the API takes it: {silence: {members, heads}}
     * (empty lists when nothing is), with the ablation where something is silenced and it is not zero. */
    silencing() {
      const silence = { members: [...this.ui.members].sort((a, b) => a - b),
        heads: [...this.ui.headsSilenced].map((k) => k.split(".").map(Number)).sort((a, b) => a[0] - b[0] || a[1] - b[1]) };
      const a = this.ui.ablation;
      if (!a || a.kind === "zero" || !(silence.members.length + silence.heads.length)) return { silence };
      return { silence, ablation: a.kind === "resample" && a.from.trim() ? { kind: "resample", from: a.from } : { kind: a.kind } };
    }

    /** Redraws the conclusion, the model view and the open head for the silencing shown; resolves
     * when the silencing shown last is drawn. One redraw's requests are out at a time: a silencing
     * made meanwhile is drawn once they are answered, only the latest of several (the server's
     * queue never holds more than one redraw). */
    resilence() {
      if (this.redrawing) { this.redrawAgain = true; return this.redrawing; }
      const redraw = async () => {
        do { this.redrawAgain = false; await this.redrawOnce(); } while (this.redrawAgain);
      };
      this.redrawing = redraw().finally(() => { this.redrawing = null; });
      return this.redrawing;
    }

    /** One redraw: the conclusion, the model view and the open head asked at once (the server
     * answers them in turn from one pass), each drawn as it arrives, so none waits for another's
     * drawing; an answer for a silencing no longer shown is dropped. */
    async redrawOnce() {
      if (!this.api) { this.renderConclusion(); return; }
      const gen = this.gen;
      const silencing = this.silencing(), asked = JSON.stringify(silencing);
      const current = () => gen === this.gen && asked === JSON.stringify(this.silencing());
      const l = this.ui.layer, h = this.ui.head;
      this.stopComplete("silencing");
      this.say("Recomputing the conclusion and redrawing every head with the silenced members and heads\u2026", "busy");
      const body = { text: this.d.text, ...silencing };
      const drawn = await Promise.allSettled([
        this.post("/conclusion", { ...body, top: 10 }).then((c) => {
          if (current()) { this.d.conclusion = c; this.renderConclusion(); this.renderStory(); }
        }),
        this.modelView(body, this.d.modelView).then((mv) => {
          if (current()) { this.d.modelView = mv; this.renderModelView(); }
        }),
        l == null ? null : this.askHead(l, h).then(() => {
          if (current() && this.ui.layer === l && this.ui.head === h) { this.renderHead(); this.listenInHead(); }
        }),
      ]);
      if (!current()) return;
      const failed = drawn.find((x) => x.status === "rejected");
      if (failed) this.say(failed.reason.message, "error");
      else this.say("");
    }

    // -- static mode (report, notebook) --
    show(data) {
      const e = data.explanation || (data.comparison && data.comparison.b) || null;
      this.d = { text: data.text || (e && e.text), explanation: e, comparison: data.comparison || null,
        modelView: data.model_view || null, conclusion: data.conclusion || null, embeddedHeads: data.heads || {} };
      if (e) {
        const m = e.model;
        this.q(".sg-model").textContent = modelLine(m);
      }
      const given = this.q(".sg-given");
      given.textContent = "";
      given.appendChild(el("span", { cls: "sg-label", text: "Text" }));
      given.appendChild(el("q", { text: this.d.text == null ? "(token ids)" : this.d.text }));
      if (this.d.comparison) {
        given.appendChild(el("span", { cls: "sg-label", text: "compared with" }));
        given.appendChild(el("q", { text: this.d.comparison.a.text }));
      }
      this.renderAll();
      const first = e && e.first_head ? e.first_head : this.rankedHeads()[0];
      if (first) this.openHead(first[0], first[1], false);
      this.say(this.d.modelView ? "A saved report: everything here is inside this file; silencing shows the precomputed effects."
        : "A saved explanation: members, conclusion, story, and every head's direct contribution.");
    }

    renderAll() {
      this.renderMembers(); this.renderConclusion(); this.renderStory(); this.renderModelView(); this.renderHead();
    }

    tokens() {
      const d = this.d;
      return (d.conclusion && d.conclusion.tokens) || (d.explanation && d.explanation.tokens) || (d.modelView && d.modelView.tokens) || [];
    }
  });
})(window.StudyGroup = window.StudyGroup || {});

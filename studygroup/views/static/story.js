/* The story: the sentences of `explain`, with the members they quote as chips; the decisive heads. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, signed } = sg;

  /** Whether a story sentence is the one that tells the conclusion (its first piece says so). */
  const aboutConclusion = (parts) => parts.length > 0 && parts[0].about === "conclusion";

  class Story extends sg.View {
    constructor(page) {
      super(page);
      this.place = "layout";
      const story = this.section = this.card("sg-story", "The story");
      story.appendChild(this.note = el("p", { cls: "sg-story-note sg-hint", attrs: { hidden: "" } }));
      story.appendChild(this.sentences = el("div", { cls: "sg-sentences" }));
      story.appendChild(this.decisive = el("div", { cls: "sg-decisive" }));
      this.draws = ["conclusion", "explanation", "untold"];
    }

    silenced() { this.draw(); }
    selected() { this.paint(); }
    hovered() { this.paint(); }
    /** The story's member chips marked as the members' are. */
    paint() { for (const chip of this.sentences.querySelectorAll(".sg-storychip")) sg.markChip(chip, this.ui); }

    draw() {
      const box = clear(this.sentences);
      const dec = clear(this.decisive);
      const own = this.silencedRun(), swap = own ? null : this.silencedConclusion();
      this.renderStoryNote(own, swap);
      const e = own || this.d.explanation, cmp = own ? null : this.d.comparison;
      box.dataset.run = own ? "silenced" : "unsilenced";
      if (!e) {
        const hint = !this.api ? "" : this.d.untold ? "No story for this text: the computation stopped before the group's decision was traced (the status above says which)."
          : "The story comes when the group's decision has been traced.";
        box.appendChild(el("p", { cls: "sg-hint", text: hint }));
        return;
      }
      const tokens = e.tokens;
      for (const s of cmp ? cmp.story : []) box.appendChild(this.sentence(s, tokens));
      if (e.story_parts) for (const parts of e.story_parts) box.appendChild(swap && aboutConclusion(parts) ? this.silencedSentence(swap, tokens) : this.partsSentence(parts, tokens));
      else for (const s of e.story) box.appendChild(this.sentence(s, tokens));
      if (swap) this.markUnsilenced(box);
      this.paint();
      if (e.heads.length) this.renderDecisive(dec, e);
    }

    renderDecisive(dec, e) {
      dec.appendChild(el("h3", { text: "Decisive heads" }));
      const every = e.heads[0].silence_effect != null;  // past 512 members: the last position only
      const name = every ? "silence_effect" : "silence_effect_last_position";
      dec.appendChild(el("p", { cls: "sg-hint", text: name + ": change in log p(" + e.predicted.token + ") with the head's write zeroed " +
        (every ? "at every position" : "at the last position only") + ". Measured one at a time: " + e.heads_silenced + "." }));
      const list = el("ol", { cls: "sg-declist" });
      for (const h of e.heads.slice(0, sg.DECISIVE_SHOWN)) {
        list.appendChild(el("li", {}, [el("button", { attrs: { type: "button" }, on: { click: () => this.openHead(h.layer, h.head) } },
          ["layer " + h.layer + " head " + h.head + " (kv " + h.kv_head + "): " + signed(every ? h.silence_effect : h.silence_effect_last_position, 3)])]));
      }
      dec.appendChild(list);
    }

    /** The conclusion's sentence told from the silenced run (/api/conclusion's silenced_story), when
     * the conclusion shown was computed for the silencing shown; else null. */
    silencedConclusion() {
      const c = this.d.conclusion;
      if (!this.api || !c || !c.silenced_story) return null;
      const s = this.silencing();
      return said(c.silenced_members, c.silenced_heads, c.ablation) === said(s.silence.members, s.silence.heads, s.ablation) ? c.silenced_story : null;
    }

    /** The explanation of the run with the silencing shown, once asked for and answered; else null. */
    silencedRun() {
      const r = this.d.silencedRun;
      return r && r.explanation && r.key === this.store.silencingKey() ? r.explanation : null;
    }

    /** The silenced run's conclusion sentence, marked as such; its fields are paths in /api/conclusion's answer. */
    silencedSentence(parts, tokens) {
      const p = this.partsSentence(parts, tokens);
      p.classList.add("sg-silenced-sentence");
      p.dataset.measured = "silenced";
      p.title = "The silenced run's conclusion (the bars above).";
      return p;
    }

    /** While a silencing is shown: each sentence not retold from the silenced run says it was measured without it. */
    markUnsilenced(box) {
      for (const p of box.children) {
        if (p.classList.contains("sg-silenced-sentence")) continue;
        p.dataset.measured = "unsilenced";
        p.title = "Measured on the text with nothing silenced.";
      }
    }

    /** Above the story: which run its sentences were measured on, and a button that explains the silenced run. */
    renderStoryNote(own, swap) {
      const note = clear(this.note);
      const filed = !this.api && this.d.explanation && (this.ui.members.size || this.ui.headsSilenced.size);
      note.hidden = !(own || swap || filed);
      if (own) note.appendChild(document.createTextNode("The story below is the silenced run's: explained with the silencing in effect, every number is that run's."));
      else if (filed) note.appendChild(document.createTextNode("The sentences below were measured on the text with nothing silenced; the conclusion's bars show the silenced run."));
      else if (swap) {
        const r = this.d.silencedRun, asked = r && !r.explanation && r.key === this.store.silencingKey();
        note.appendChild(document.createTextNode("The conclusion's sentence below is the silenced run's; the other sentences were measured on the text with nothing silenced. "));
        note.appendChild(el("button", { cls: "sg-explain-silenced", attrs: { type: "button", disabled: asked ? "" : null },
          text: asked ? "Explaining the silenced run\u2026" : "Explain the silenced run", on: { click: () => this.explainSilenced() } }));
      }
    }

    /** Asks /api/explain for the run with the silencing shown (a job with its progress), then tells its story.
     * A change of silencing or text meanwhile cancels it. */
    async explainSilenced() {
      const key = this.store.silencingKey(), current = this.store.guard(), run = { key, explanation: null };
      const wanted = () => current() && this.d.silencedRun === run;
      const box = this.jobBox("sg-story-progress", this.note);
      const live = this.store.textGuard();
      this.d.silencedRun = run;
      this.draw();
      const answer = this.longPost("/explain", { text: this.d.text, top: 10, ...this.silencing() }, { box, wanted });
      const job = box.dataset.job;
      try {
        run.explanation = await answer;
      } catch (err) {
        if (wanted()) { this.d.silencedRun = null; this.say(err.message, "error"); }
      } finally {
        if (box.dataset.job === job) box.hidden = true;
        if (live()) this.draw();
      }
    }

    /** A member's chip: selects member j (the right one when a word repeats). */
    storyChip(j, token) {
      return el("button", { cls: "sg-storychip", attrs: { type: "button", title: "member " + j }, data: { index: j },
        on: { click: () => this.select(j), mouseenter: () => this.setHover(j), mouseleave: () => this.setHover(null) } }, [tokenNode(token)]);
    }

    /** A sentence of explain's story_parts: {text}, {member} as a chip, {value, field} with its JSON path as a title. */
    partsSentence(parts, tokens) {
      const p = el("p");
      for (const piece of parts) {
        if (piece.member != null) p.appendChild(this.storyChip(piece.member, tokens[piece.member]));
        else if (piece.field != null) p.appendChild(el("span", { cls: "sg-storyvalue", attrs: { title: piece.field }, text: piece.text }));
        else p.appendChild(document.createTextNode(piece.text));
      }
      return p;
    }

    /** A story sentence with the quoted members as chips that highlight. */
    sentence(s, tokens) {
      const p = el("p");
      const re = /\u201c([^\u201d]*)\u201d/g;
      let last = 0, m;
      while ((m = re.exec(s)) !== null) {
        if (m.index > last) p.appendChild(document.createTextNode(s.slice(last, m.index)));
        const after = s.slice(re.lastIndex);
        const named = /^ \(member (\d+)/.exec(after);
        let j = named ? Number(named[1]) : tokens.lastIndexOf(m[1]);
        if (j >= 0 && tokens[j] === m[1]) {
          p.appendChild(this.storyChip(j, m[1]));
        } else {
          p.appendChild(document.createTextNode("\u201c"));
          p.appendChild(tokenNode(m[1], "sg-quoted"));
          p.appendChild(document.createTextNode("\u201d"));
        }
        last = re.lastIndex;
      }
      if (last < s.length) p.appendChild(document.createTextNode(s.slice(last)));
      return p;
    }
  }

  /** A silencing as one comparable string: the store's (silencing()) or the one an answer of /api/conclusion names. */
  const said = (members, heads, a) => JSON.stringify([members, heads, a ? a.kind : "zero", (a && a.from) || null]);

  sg.view("story", (page) => new Story(page));
})(window.StudyGroup = window.StudyGroup || {});

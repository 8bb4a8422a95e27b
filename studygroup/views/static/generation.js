/* The group keeps talking (the page only: it asks POST /api/generate): "Continue" adds words one
 * line at a time, each a member marked as generated; a slider picks a word to show its conclusion
 * (its candidates) and what its question heard in the open head. Every word shown is of the run the
 * user chose: with members or heads silenced, the silenced group's words, candidates and questions,
 * and below them the whole group's continuation for comparison, and where the two part. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, percent } = sg;
  const STEP = 4; // words one press of Continue adds
  const MAX_WORDS = 256; // words one POST /api/generate streams at most

  class Generation extends sg.View {
    constructor(page) {
      super(page);
      this.place = "layout";
      this.section = this.skeleton();
    }

    /** A change of silencing: the words so far again in the run it chooses (once the redraw's requests are out). */
    silenced() {
      if (this.gw && this.gw.lines.length) Promise.resolve().then(() => this.regenerateChosen()).catch((e) => this.say("Generating: " + e.message, "error"));
    }
    /** A head opened or drawn again: what each word's question heard in it. */
    headShown() { this.listenInHead(); }

    /** The section's skeleton. */
    skeleton() {
      const s = this.card("sg-generate", "The group keeps talking",
        "Continue adds " + STEP + " words, one at a time, each the most likely next word; every new word joins the group as a member (marked \u201cgenerated\u201d) and asks its own question.");
      const slider = el("input", { cls: "sg-gen-slider", attrs: { type: "range", min: 1, max: 1, value: 1, disabled: "", "aria-label": "generated word" } });
      slider.addEventListener("input", () => this.renderGeneratedWord());
      s.appendChild(el("div", { cls: "sg-actions" }, [
        el("button", { cls: "sg-continue", attrs: { type: "button" }, text: "Continue", on: { click: () => this.continueText() } }),
        el("label", { cls: "sg-label" }, ["Word ", slider, el("span", { cls: "sg-gen-k" })])]));
      s.appendChild(el("div", { cls: "sg-gen-chips", attrs: { role: "list", "aria-label": "generated members" } }));
      s.appendChild(el("div", { cls: "sg-gen-word" }));
      s.appendChild(el("div", { cls: "sg-gen-both" }));
      return s;
    }

    /** The words so far for the current text (a new text starts again): lines, of the silencing
     * `chosen` (JSON of silencing()); whole: the whole group's words beside them when that silences any. */
    generated() {
      if (!this.gw || this.gw.text !== this.d.text) this.gw = { text: this.d.text, lines: [], chosen: this.store.silencingKey(), whole: null, asked: 0 };
      return this.gw;
    }

    openHeadBody() { return this.ui.layer == null ? {} : { layer: this.ui.layer, head: this.ui.head }; }

    /** POST /api/generate: each streamed line to onLine as it comes. */
    async streamWords(body, onLine) {
      const res = await fetch(this.api + "/generate", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      if (!res.ok) { let d = null; try { d = await res.json(); } catch (e) { d = null; } throw new Error((d && d.error) || "the server answered " + res.status); }
      const reader = res.body.getReader(), decoder = new TextDecoder();
      let rest = "";
      for (;;) {
        const { value, done } = await reader.read();
        rest += decoder.decode(value || new Uint8Array(), { stream: !done });
        const parts = rest.split("\n");
        rest = parts.pop();
        for (const p of parts) if (p) { const line = JSON.parse(p); if (line.error) throw new Error(line.error); onLine(line); }
        if (done) return;
      }
    }

    async continueText() {
      const g = this.generated();
      if (g.lines.length && g.lines[g.lines.length - 1].stop) { this.say("The model ended the text.", ""); return; }
      const button = this.q(".sg-continue");
      button.disabled = true;
      try {
        this.say("The group keeps talking\u2026", "busy");
        if (g.chosen !== this.store.silencingKey()) await this.regenerateChosen(); // words of another silencing
        const asked = ++g.asked;
        await this.streamWords({ text: g.text, n: STEP, words: g.lines.map((x) => x.id), ...this.openHeadBody(), ...this.silencing() }, (line) => {
          if (asked !== g.asked) return;
          g.lines.push(line);
          this.renderGenerated(g.lines.length);
        });
        this.say("", "");
        await this.listenInHead(); // a head opened while the words came
        await this.compareWhole();
      } catch (e) { this.say("Generating: " + e.message, "error"); }
      button.disabled = false;
    }

    /** What each word's question heard, in the head now open: the same words asked again with that
     * head (the server streams them from the generation it keeps, no word computed again). Words
     * past the last MAX_WORDS keep no record of another head. */
    async listenInHead() {
      const g = this.gw, head = this.openHeadBody(), chosen = g && g.chosen;
      const here = (x) => x.listened && x.listened.layer === head.layer && x.listened.head === head.head;
      if (!g || g.text !== this.d.text || head.layer == null || g.lines.every(here)) return;
      const from = Math.max(0, g.lines.length - MAX_WORDS), lines = [];
      try {
        await this.streamWords({ text: g.text, n: g.lines.length - from, words: g.lines.slice(0, from).map((x) => x.id), ...head, ...JSON.parse(chosen) },
          (line) => lines.push(line));
      } catch (e) { this.say("Generating: " + e.message, "error"); return; }
      if (this.gw !== g || g.chosen !== chosen || this.ui.layer !== head.layer || this.ui.head !== head.head) return; // another head, text or silencing since
      g.lines.forEach((x, i) => { // words that came since keep their own (Continue asks again after them)
        if (i < from) x.listened = null; else if (lines[i - from]) x.listened = lines[i - from].listened;
      });
      this.renderGeneratedWord();
    }

    /** The silencing changed: the words so far again, as many, in the run it chooses (with what each
     * question heard in the open head), then the whole group's beside them. */
    async regenerateChosen() {
      const g = this.generated(), chosen = this.store.silencingKey(), asked = ++g.asked, lines = [];
      Object.assign(g, { chosen, whole: null });
      this.renderBoth();
      if (!g.lines.length) return;
      await this.streamWords({ text: g.text, n: g.lines.length, ...this.openHeadBody(), ...JSON.parse(chosen) }, (line) => lines.push(line));
      if (asked !== g.asked || this.gw !== g) return; // another silencing or text since
      g.lines = lines;
      this.renderGenerated(Number(this.q(".sg-gen-slider").value));
      await this.compareWhole();
    }

    /** The whole group's continuation, as long as the words shown, where those are a silenced group's. */
    async compareWhole() {
      const g = this.generated(), chosen = g.chosen, n = g.lines.length;
      g.whole = null;
      if (n && JSON.parse(chosen).silence.members.length + JSON.parse(chosen).silence.heads.length) {
        const lines = [];
        await this.streamWords({ text: g.text, n }, (line) => lines.push(line));
        if (this.gw !== g || g.chosen !== chosen || g.lines.length !== n) return;
        g.whole = lines;
      }
      this.renderBoth();
    }

    renderGenerated(k) {
      const g = this.generated(), box = clear(this.q(".sg-gen-chips"));
      g.lines.forEach((line, i) => box.appendChild(el("span", { cls: "sg-genchip", attrs: { role: "listitem", title: "generated word " + (i + 1) + " (member " + (this.tokens().length + i) + ")" }, data: { word: i + 1 } },
        [el("span", { cls: "sg-gen-label", text: "generated " + (i + 1) }), tokenNode(line.token)])));
      const slider = this.q(".sg-gen-slider");
      slider.max = String(Math.max(1, g.lines.length));
      slider.disabled = !g.lines.length;
      if (k) slider.value = String(k);
      this.renderGeneratedWord();
    }

    /** The slider's word: its conclusion (candidates) and what its question heard in the head. */
    renderGeneratedWord() {
      const g = this.generated(), box = clear(this.q(".sg-gen-word"));
      const k = Number(this.q(".sg-gen-slider").value), line = g.lines[k - 1];
      this.q(".sg-gen-k").textContent = line ? " " + k + " of " + g.lines.length : "";
      for (const c of this.qa(".sg-genchip")) c.classList.toggle("sg-selected", Number(c.dataset.word) === k);
      if (!line) return;
      const group = g.chosen === JSON.stringify({ silence: { members: [], heads: [] } }) ? "The group's" : "The silenced group's (the silencing shown above" + this.takenOutSaid(g.chosen) + ")";
      box.appendChild(el("p", {}, ["Word " + k + ": ", tokenNode(line.token), " (p = " + percent(line.prob) + "). " + group + " conclusion at that point:"]));
      const bars = el("div", { cls: "sg-gen-top" });
      for (const c of line.top) {
        const bar = el("span", { cls: "sg-genbar" });
        bar.style.width = (100 * c.prob).toFixed(1) + "%"; // set through the DOM: the page's CSP refuses style attributes
        bars.appendChild(el("div", { cls: "sg-gen-cand" + (c.id === line.id ? " sg-chosen" : "") }, [tokenNode(c.token),
          el("span", { cls: "sg-gen-track" }, [bar]), el("span", { text: percent(c.prob) })]));
      }
      box.appendChild(bars);
      const heard = line.listened;
      if (!heard) return;
      const members = this.tokens().concat(g.lines.map((x) => x.token));
      const list = el("ol", { cls: "sg-gen-heard" });
      heard.members.slice(0, 6).forEach((j, i) => list.appendChild(el("li", {}, [tokenNode(members[j]),
        " (member " + j + (j >= this.tokens().length ? ", generated" : "") + "): " + percent(heard.weights[i])])));
      box.appendChild(el("p", { text: "What its question heard in layer " + heard.layer + " head " + heard.head + " (the weights it gave; " + percent(heard.sink) + " on member 0):" }));
      box.appendChild(list);
    }

    /** Both continuations (the silenced group's shown above, the whole group's) and the first word where they part. */
    renderBoth() {
      const g = this.generated(), box = clear(this.q(".sg-gen-both"));
      if (!g.whole) return;
      const part = g.whole.findIndex((x, i) => !g.lines[i] || g.lines[i].id !== x.id);
      const row = (label, lines, cls) => el("p", { cls }, [el("span", { cls: "sg-label", text: label }),
        ...lines.map((x, i) => tokenNode(x.token, i === part ? "sg-parted" : ""))]);
      box.appendChild(row("Silenced group (the words above" + this.takenOutSaid(g.chosen) + "): ", g.lines, "sg-gen-silenced"));
      box.appendChild(row("Whole group, for comparison: ", g.whole, "sg-gen-whole"));
      if (part < 0) { box.appendChild(el("p", { cls: "sg-gen-part", text: "The two continuations are the same." })); return; }
      const whole = g.whole[part], silenced = g.lines[part], quote = (t) => "\u201c" + t + "\u201d";
      box.appendChild(el("p", { cls: "sg-gen-part", text: "They part at word " + (part + 1) + ": " + quote(silenced.token) + " instead of " + quote(whole.token) + "." }));
      // both groups have heard the same words up to here: each word's line holds its group's candidates there
      const both = (line, group) => group + ": " + quote(whole.token) + " " + this.probIn(line, whole.id) + ", " + quote(silenced.token) + " " + this.probIn(line, silenced.id) + ".";
      box.appendChild(el("p", { cls: "sg-gen-cross", text: both(whole, "In the whole group") + " " + both(silenced, "In the silenced group") }));
    }

    /** How the words' silencing `chosen` (JSON of silencing()) took them out, where not by zero
     * ablation: a generation's own rule for the members it adds (studygroup.model.generation_ablation). */
    takenOutSaid(chosen) {
      const a = JSON.parse(chosen).ablation;
      if (!a) return "";
      return a.kind === "mean" ? ", taken out by mean ablation: the mean over the text's members, taken before the first word, at every member"
        : ", taken out by resample ablation: from the other text, followed by the same words";
    }

    /** A word's probability among a line's candidates, or the bound its absence gives. */
    probIn(line, id) {
      const c = line.top.find((t) => t.id === id), last = line.top[line.top.length - 1];
      return c ? percent(c.prob) : "below " + percent(last.prob) + " (not among its " + line.top.length + " most likely)";
    }
  }

  sg.view("generation", (page) => new Generation(page), { pageOnly: true });
})(window.StudyGroup = window.StudyGroup || {});

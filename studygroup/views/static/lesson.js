/* Lesson mode: the article's walkthrough as sections, on the real numbers of the text in the box,
 * for one head (POST /api/lesson; study/lesson_sections.py is their one source, shared with
 * `studygroup lesson TEXT --json`). → next, ← back, Esc leaves, whenever focus is not in a text
 * field. The page's state (text, mode, section, head, question, answer, notation, silencing and its ablation, and
 * in Explore the member selected) lives in the URL's hash, so reopening the URL shows the same
 * thing. head and notation are those of the mode shown: the lesson's in Lesson, the open head's
 * card in Explore (where lesson_head keeps the lesson's head for going back to it). Every number drawn carries
 * data-path (its place in the API's answer) and data-value (its exact value). */
(function (sg) {
  "use strict";

  const { el, clear, sig4, percent } = sg;
  const NAMES = ["members", "embedding", "layer_input", "qkv", "scores", "softmax", "weighted_sum", "conclusion"];
  const SHORT = ["Members", "E, layer 0", "Layer input", "Q, K, V", "Scores", "Softmax", "Weighted sum", "Conclusion"];
  const ABLATIONS = ["mean", "resample"]; // how the silenced are taken out, where not zero (the hash's ablation=)
  const CELL = 12; // px of one drawn number
  const LABEL = 15; // px a label of 11px type needs across its line, so that two never overlap

  /** The state in a hash such as #mode=lesson&section=scores&head=3.2&text=… (null where absent);
   * member: the member selected in Explore. */
  function readHash(hash) {
    const p = new URLSearchParams(String(hash || "").replace(/^#/, ""));
    const ints = (s) => (s ? s.split(",").filter((x) => x !== "").map(Number).filter((n) => Number.isInteger(n) && n >= 0) : []);
    const pair = (s) => { const m = /^(\d+)\.(\d+)$/.exec(s || ""); return m ? [+m[1], +m[2]] : null; };
    const int = (s) => (s != null && /^\d+$/.test(s) ? +s : null);
    return { text: p.get("text"), mode: p.get("mode") === "lesson" ? "lesson" : "explore",
      section: Math.max(0, NAMES.indexOf(p.get("section"))), head: pair(p.get("head")), lessonHead: pair(p.get("lesson_head")),
      query: int(p.get("q")), key: int(p.get("k")),
      notation: p.get("notation") === "columns" ? "columns" : "paper", member: int(p.get("member")),
      members: ints(p.get("silence")), heads: (p.get("silence_heads") || "").split(",").map(pair).filter(Boolean),
      ablation: { kind: ABLATIONS.includes(p.get("ablation")) ? p.get("ablation") : "zero", from: p.get("ablation_from") || "" } };
  }

  const isField = (t) => t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
  const num = (v, path, text) => el("td", { cls: "sg-num", text: text != null ? text : sig4(v), data: v == null ? {} : { path, value: v } });

  class Lesson extends sg.View {
    /** The lesson's card, and the Explore/Lesson switch in the page's header; the URL's state taken. */
    constructor(page) {
      super(page);
      this.lesson = { gen: 0, leftOut: [] }; // leftOut: what a URL named that the model lacks, said once its text is drawn
      this.applyHash(readHash(location.hash));
      const sw = el("div", { cls: "sg-modes", attrs: { role: "group", "aria-label": "mode" } }, [
        el("button", { attrs: { type: "button" }, data: { mode: "explore" }, text: "Explore" }),
        el("button", { attrs: { type: "button" }, data: { mode: "lesson" }, text: "Lesson" })]);
      sw.addEventListener("click", (e) => { const b = e.target.closest("button"); if (b) this.setMode(b.dataset.mode); });
      this.q(".sg-header").appendChild(sw);
      this.section = el("section", { cls: "sg-card sg-lesson", attrs: { "aria-label": "lesson" } }, [
        el("div", { cls: "sg-lesson-nav" }), el("div", { cls: "sg-lesson-pick" }), el("div", { cls: "sg-lesson-body", attrs: { "aria-live": "polite" } })]);
      document.addEventListener("keydown", (e) => this.lessonKey(e));
      window.addEventListener("hashchange", () => { if (location.hash !== this.hashWritten) this.restoreHash(); });
    }

    mounted() { this.showMode(); }
    // In Explore, the head opened, its notation and the member selected are the URL's.
    selected() { if (!this.lesson.on) this.writeHash(); }
    headOpened() { if (!this.lesson.on) this.writeHash(); }
    notation() { if (!this.lesson.on) this.writeHash(); }
    /** A silencing redrawn: the URL's, and the lesson's numbers for it. */
    redrawn() {
      this.writeHash();
      if (this.lesson.on) this.loadLesson();
    }

    lessonKey(e) {
      if (!this.lesson.on || isField(e.target) || e.altKey || e.ctrlKey || e.metaKey) return;
      if (e.key === "ArrowRight") { e.preventDefault(); this.goSection(this.lesson.section + 1); }
      else if (e.key === "ArrowLeft") { e.preventDefault(); this.goSection(this.lesson.section - 1); }
      else if (e.key === "Escape") this.setMode("explore");
    }

    setMode(mode) {
      this.lesson.on = mode === "lesson";
      this.showMode();
      this.writeHash();
      if (this.lesson.on) this.loadLesson(); // none yet, or the explore view's silencing has changed since
    }

    showMode() {
      this.page.root.classList.toggle("sg-mode-lesson", this.lesson.on);
      for (const b of this.qa(".sg-modes button")) b.setAttribute("aria-pressed", String((b.dataset.mode === "lesson") === this.lesson.on));
      if (this.lesson.on) this.renderLesson();
    }

    goSection(n) {
      if (n < 0 || n >= NAMES.length || n === this.lesson.section) return;
      this.lesson.section = n;
      this.writeHash();
      this.renderLesson();
    }

    /** The URL's hash from the state shown (replaceState: one history entry per page, not per key press). */
    writeHash() {
      const L = this.lesson, p = new URLSearchParams();
      const text = this.d.text != null ? this.d.text : this.q(".sg-text").value;
      if (text) p.set("text", text);
      p.set("mode", L.on ? "lesson" : "explore");
      p.set("section", NAMES[L.section]);
      const head = L.on ? L.head : this.exploreHead(), notation = L.on ? L.notation : this.ui.notation;
      if (head) p.set("head", head.join("."));
      if (!L.on && L.head) p.set("lesson_head", L.head.join(".")); // the lesson's, for going back to it
      if (L.query != null) p.set("q", L.query);
      if (L.key != null) p.set("k", L.key);
      if (notation !== "paper") p.set("notation", notation);
      if (!L.on && this.ui.selected != null) p.set("member", this.ui.selected);
      const sil = this.lessonSilencing();
      if (sil.silence.members.length) p.set("silence", sil.silence.members.join(","));
      if (sil.silence.heads.length) p.set("silence_heads", sil.silence.heads.map((x) => x.join(".")).join(","));
      if (sil.ablation) p.set("ablation", sil.ablation.kind);
      if (sil.ablation && sil.ablation.from) p.set("ablation_from", sil.ablation.from);
      this.hashWritten = "#" + p.toString();
      history.replaceState(null, "", this.hashWritten);
    }

    /** Takes the state of hash s: its head and notation are the lesson's in Lesson mode, the explore view's in Explore. */
    applyHash(s) {
      const on = s.mode === "lesson";
      Object.assign(this.lesson, { on, section: s.section, head: on ? s.head : s.lessonHead, query: s.query, key: s.key, notation: on ? s.notation : "paper", data: null });
      if (!on && s.notation !== this.ui.notation) { this.ui.notation = s.notation; this.page.views.head.paintNotation(); }
      this.ui.ablation = { ...s.ablation }; // how the URL's silencing is taken out (members.js shows it)
      this.pendingUrl = s;
    }

    /** The head open in Explore, or, while none is yet, the one the URL asks for. */
    exploreHead() {
      if (this.ui.layer != null) return [this.ui.layer, this.ui.head];
      return this.store.asked ? this.store.asked.head : null;
    }

    /** A hash changed by hand in an open tab: the page becomes what a fresh load of the new address
     * shows (its mode at once, nothing of the old lesson left drawn). */
    restoreHash() {
      const s = readHash(location.hash);
      this.applyHash(s);
      Object.assign(this.lesson, { asked: null, gen: this.lesson.gen + 1 }); // an old lesson's answer is dropped
      clear(this.q(".sg-lesson-body"));
      this.showMode();
      if (s.text != null) { this.q(".sg-text").value = s.text; this.page.submit(); } else if (this.lesson.on) this.loadLesson();
    }

    /** Before a new text (session.js): the URL's text, head and member first, its silencing held until the text is drawn. */
    beforeText() {
      const s = this.pendingUrl;
      this.pendingUrl = null;
      if (s && s.text != null) this.q(".sg-text").value = s.text;
      if (!s) Object.assign(this.lesson, { head: null, query: null, key: null }); // a new text: its own default head
      this.store.asked = s && s.mode === "explore" ? { head: s.head, member: s.member } : null; // the session's openFirstHead
      Object.assign(this.lesson, { data: null, asked: null });
      const silence = s && (s.members.length || s.heads.length) ? s : null;
      this.lesson.pendingSilence = silence; // the URL's silencing until the explore view has it
      if (this.lesson.on) this.loadLesson(silence);
    }

    /** After a new text is drawn: the URL's silencing redrawn, or the URL written. */
    async afterText() {
      const silence = this.lesson.pendingSilence;
      this.lesson.pendingSilence = null;
      if (silence && !this.tokens().length) return; // the text was not drawn (an error said so)
      const kept = silence && this.inText(silence);
      if (kept && (kept.members.length || kept.heads.length)) {
        this.store.silence(kept.members, kept.heads);
        await this.page.afterSilence();
      } else {
        this.writeHash();
        if (silence && this.lesson.on) this.loadLesson(); // asked with the URL's silencing, none of which holds
      }
      const left = [...this.lesson.leftOut, ...(kept ? kept.left : [])];
      this.lesson.leftOut = [];
      if (left.length) this.say("The address names " + left.join(", ") + ", which this text and model do not have: left out.", "error");
    }

    /** Of a URL's silencing, the members of the text drawn and the heads of the model, and what was left out (words). */
    inText(silence) {
      const T = this.tokens().length, m = (this.d.info && this.d.info.model) || {};
      const member = (j) => j < T, head = (x) => !m.n_layers || sg.hasHead(m, x);
      return { members: silence.members.filter(member), heads: silence.heads.filter(head),
        left: [...silence.members.filter((j) => !member(j)).map((j) => "member " + j),
          ...silence.heads.filter((x) => !head(x)).map(([l, h]) => "head " + l + "." + h)] };
    }

    /** The silencing a lesson is asked with: silence, else the URL's held until the text is drawn, else the explore view's. */
    lessonSilencing(silence) {
      const pending = silence || this.lesson.pendingSilence;
      return pending ? sg.Store.silencingOf(pending.members, pending.heads, this.ui.ablation) : this.silencing();
    }

    /** POST /api/lesson's body for text, silencing sil and head ([layer, head], or null for the
     * default one), with the lesson's question and answer. */
    lessonBody(text, sil, head) {
      const L = this.lesson, body = { text, ...sil };
      if (head) Object.assign(body, { layer: head[0], head: head[1] });
      if (L.query != null) body.query = L.query;
      if (L.key != null) body.key = L.key;
      return body;
    }

    /** The lesson for the text in the box, unless it is shown or on its way. An answer for the
     * default head stands for the head it named too: asking with that head is the same question. */
    async loadLesson(silence) {
      const L = this.lesson, text = this.q(".sg-text").value, m = this.d.info && this.d.info.model;
      if (!text.trim()) return;
      if (L.head && m && !sg.hasHead(m, L.head)) { // a URL's head this model does not have
        L.leftOut.push("head " + L.head.join(".") + " (the lesson takes its own)"); // said once the text is drawn
        L.head = null;
      }
      const sil = this.lessonSilencing(silence), body = this.lessonBody(text, sil, L.head), asked = JSON.stringify(body);
      if (asked === L.asked) return; // this lesson is shown, or on its way
      L.asked = asked;
      const gen = ++L.gen; // an answer to an older question is dropped
      clear(this.q(".sg-lesson-body")).appendChild(el("p", { cls: "sg-hint", text: L.head ? "Computing the lesson\u2026"
        : "Computing the lesson: finding the most decisive head that is not resting on a sink (silencing heads one at a time)\u2026" }));
      try {
        const d = await this.post("/lesson", body);
        if (gen !== L.gen) return;
        L.data = d;
        L.head = [d.layer, d.head];
        L.asked = JSON.stringify(this.lessonBody(text, sil, L.head));
        this.writeHash();
        this.renderLesson();
      } catch (e) {
        if (gen !== L.gen) return;
        L.asked = null; // asking again is allowed after an error
        clear(this.q(".sg-lesson-body")).appendChild(el("p", { cls: "sg-error", attrs: { role: "alert" }, text: e.message }));
      }
    }

    renderLesson() {
      const L = this.lesson;
      const nav = clear(this.q(".sg-lesson-nav"));
      const tabs = el("ol", { cls: "sg-lesson-tabs" });
      NAMES.forEach((name, n) => tabs.appendChild(el("li", {}, [el("button", {
        attrs: { type: "button", "aria-current": n === L.section ? "step" : null }, data: { section: name },
        text: (n + 1) + ". " + SHORT[n], on: { click: () => this.goSection(n) } })])));
      nav.appendChild(el("div", { cls: "sg-lesson-arrows" }, [
        el("button", { cls: "sg-lesson-prev", attrs: { type: "button", disabled: L.section === 0 ? "" : null }, text: "\u2190 Back", on: { click: () => this.goSection(L.section - 1) } }),
        el("span", { cls: "sg-lesson-count", text: "Section " + (L.section + 1) + " of " + NAMES.length }),
        el("button", { cls: "sg-lesson-next", attrs: { type: "button", disabled: L.section === NAMES.length - 1 ? "" : null }, text: "Next \u2192", on: { click: () => this.goSection(L.section + 1) } }),
        el("span", { cls: "sg-hint", text: "\u2192 next, \u2190 back, Esc back to Explore." })]));
      nav.appendChild(tabs);
      this.renderLessonPick();
      const d = L.data;
      if (!d) return;
      const s = d.sections[L.section];
      const body = clear(this.q(".sg-lesson-body"));
      body.dataset.section = s.name;
      body.appendChild(el("h2", { text: (L.section + 1) + ". " + s.title }));
      if (sg.isSilenced(d)) body.appendChild(el("p", { cls: "sg-hint sg-lesson-silenced", text: "Every number of this lesson is of the run shown." + sg.silencedNote(d) }));
      body.appendChild(el("div", { cls: "sg-lesson-formulas" }, [
        el("div", { cls: "sg-formula" + (L.notation === "paper" ? " sg-on" : "") }, [el("span", { cls: "sg-label", text: "Paper (rows; softmax per row)" }), el("code", { text: s.formula_paper })]),
        el("div", { cls: "sg-formula" + (L.notation === "columns" ? " sg-on" : "") }, [el("span", { cls: "sg-label", text: "Video (columns; softmax per column)" }), el("code", { text: s.formula_columns })])]));
      for (const line of s.says) body.appendChild(el("p", { cls: "sg-says", text: line }));
      const draw = this["lesson_" + s.name];
      if (draw) draw.call(this, body, s, d, "sections." + L.section + ".");
    }

    renderLessonPick() {
      const L = this.lesson, d = L.data, box = clear(this.q(".sg-lesson-pick"));
      const info = this.d.info;
      if (!d || !info) return;
      const select = (label, cls, options, value, onChange) => {
        const sel = el("select", { cls, attrs: { "aria-label": label } }, options.map(([v, t]) => el("option", { attrs: { value: v, selected: v === value ? "" : null }, text: t })));
        sel.addEventListener("change", () => onChange(sel.value));
        return el("label", { cls: "sg-label" }, [label + " ", sel]);
      };
      const heads = [];
      for (let l = 0; l < info.model.n_layers; l++) for (let h = 0; h < info.model.n_heads; h++) heads.push([l + "." + h, "layer " + l + ", head " + h]);
      const members = d.tokens.map((t, j) => [String(j), j + ": " + sg.short(t, 16)]);
      box.appendChild(select("Head", "sg-lesson-head", heads, d.layer + "." + d.head, (v) => { L.head = v.split(".").map(Number); L.key = null; this.loadLesson(); }));
      box.appendChild(select("Question of", "sg-lesson-query", members, String(d.query), (v) => { L.query = +v; L.key = null; this.loadLesson(); }));
      box.appendChild(select("Answer of", "sg-lesson-key", members.slice(0, d.query + 1), String(d.key), (v) => { L.key = +v; this.loadLesson(); }));
      const orient = el("div", { cls: "sg-orient", attrs: { role: "group", "aria-label": "notation" } }, [
        el("button", { attrs: { type: "button", "aria-pressed": String(L.notation === "paper") }, data: { notation: "paper" }, text: "Paper: rows" }),
        el("button", { attrs: { type: "button", "aria-pressed": String(L.notation === "columns") }, data: { notation: "columns" }, text: "Video: columns" })]);
      orient.addEventListener("click", (e) => { const b = e.target.closest("button"); if (b) { L.notation = b.dataset.notation; this.writeHash(); this.renderLesson(); } });
      box.appendChild(orient);
    }

    // ---- the sections' drawings (paper: members are rows; video: members are columns) ----
    lesson_members(body, s, d) {
      const chips = el("div", { cls: "sg-lesson-members" });
      d.tokens.forEach((t, j) => chips.appendChild(el("span", { cls: "sg-lesson-member" + (j === d.query ? " sg-q" : "") + (j === d.key ? " sg-k" : "") }, [
        el("small", { text: String(j) }), sg.tokenNode(t)])));
      body.appendChild(chips);
    }

    lesson_embedding(body, s, d, path) { this.lessonRows(body, s, d, path, "E"); }
    lesson_layer_input(body, s, d, path) { this.lessonRows(body, s, d, path, "E (layer " + d.layer + ")"); }

    /** The question's and the answer's rows of E, drawn and with their first entries as numbers. */
    lessonRows(body, s, d, path, name) {
      for (const [which, j] of [["query_row", d.query], ["key_row", d.key]]) {
        body.appendChild(el("p", { cls: "sg-label", text: name + " of member " + j + " (" + d.tokens[j] + "): " + s[which].length + " numbers, norm " + sig4(s.norms[j]) }));
        body.appendChild(this.vectorCanvas(s[which]));
        body.appendChild(this.numberList(s[which], path + which, 12));
      }
    }

    /** Q, K and V drawn, rows of the members s.members (every member, or some of a long text's), and
     * the question's and the answer's vectors as numbers. */
    lesson_qkv(body, s, d, path) {
      const n = s.members.length, all = n === d.tokens.length;
      const labels = all ? d.tokens : s.members.map((m) => m + " " + d.tokens[m]);  // a long text's: numbered
      const some = all ? "" : ", the rows of " + n + " of the " + d.tokens.length + " members";
      for (const [name, what] of [["q", "Q: each member's question"], ["k", "K: the nature of each member's answer"], ["v", "V: each member's answer"]]) {
        body.appendChild(el("p", { cls: "sg-label", text: what + " (" + (this.lesson.notation === "paper" ? n + " rows \u00d7 " + s.d_head : s.d_head + " rows \u00d7 " + n + " columns") + some + ")" }));
        body.appendChild(this.matrixCanvas(s[name], labels, null, "scores", null, s.scales[name]));
        body.appendChild(this.scaleLegend(s.scales[name], path + "scales." + name));
      }
      for (const [name, j] of [["q", d.query], ["k", d.key], ["v", d.key]]) {
        const row = s.members.indexOf(j);
        body.appendChild(el("p", { cls: "sg-label", text: name + "_" + j + " (" + d.tokens[j] + "), " + s.d_head + " numbers:" }));
        body.appendChild(this.numberList(s[name][row], path + name + "." + row, s.d_head));
      }
    }

    lesson_scores(body, s, d, path) {
      const q = d.sections[NAMES.indexOf("qkv")], qp = "sections." + NAMES.indexOf("qkv") + ".";
      const qi = q.members.indexOf(d.query), kj = q.members.indexOf(d.key);  // their rows in Q and K
      const header = () => el("tr", {}, [el("th", { text: "t" }), el("th", { text: "q_" + d.query + "[t]" }), el("th", { text: "k_" + d.key + "[t]" }), el("th", { text: "product" })]);
      const t = el("div", { cls: "sg-lesson-terms" }, [el("p", { cls: "sg-label", text: "q_" + d.query + " \u00b7 k_" + d.key + ", term by term (" + s.terms.length + " terms, 16 to a column)" })]);
      const blocks = el("div", { cls: "sg-lesson-blocks" });
      for (let a = 0; a < s.terms.length; a += 16) {
        const part = el("table", {}, [header()]);
        s.terms.slice(a, a + 16).forEach((x, n) => { const i = a + n; part.appendChild(el("tr", {}, [el("td", { text: String(i) }), num(q.q[qi][i], qp + "q." + qi + "." + i),
          num(q.k[kj][i], qp + "k." + kj + "." + i), num(x, path + "terms." + i)])); });
        blocks.appendChild(part);
      }
      t.appendChild(blocks);
      t.appendChild(el("table", {}, [
        el("tr", { cls: "sg-sum" }, [el("td", { text: "sum of the products: q\u00b7k" }), num(s.dot, path + "dot")]),
        el("tr", { cls: "sg-sum" }, [el("td", { text: "\u00f7 \u221ad_k = " + sig4(s.sqrt_d_k) + ": the score" }), num(s.score, path + "score")])]));
      const wrap = el("div", { cls: "sg-lesson-split" }, [el("div", { cls: "sg-lesson-scroll" }, [t])]);
      if (s.grid) wrap.appendChild(el("figure", {}, [el("figcaption", { text: this.lesson.notation === "paper"
        ? "Scores: row i is question i, column j is answer j; outlined: the pair above; hatched: the future (masked)"
        : "Scores transposed: column i is question i, row j is answer j; outlined: the pair above; hatched: the future (masked)" }),
        this.matrixCanvas(s.grid, d.tokens, d.tokens, "scores", [d.query, d.key])]));
      body.appendChild(wrap);
    }

    lesson_softmax(body, s, d, path) {
      const t = el("table", { cls: "sg-lesson-row" }, [el("caption", { text: "Question " + d.query + " (" + d.tokens[d.query] + "): " + (this.lesson.notation === "paper" ? "its row" : "its column") +
          ", each weight exp(s_j \u2212 " + sig4(s.shift) + ") / \u03a3 exp (the largest score subtracted: the same weights, no overflow)" }),
        el("tr", {}, [el("th", { text: "member" }), el("th", { text: "score s_j" }), el("th", { text: "exp(s_j \u2212 max)" }), el("th", { text: "\u00f7 \u03a3 = weight" }), el("th", { text: "" })])]);
      d.tokens.forEach((tok, j) => {
        if (s.scores[j] == null) return;
        const bar = el("span", { cls: "sg-wbar" });
        bar.style.width = (100 * s.weights[j]).toFixed(1) + "%";
        t.appendChild(el("tr", { cls: (s.sinks.includes(j) ? "sg-sink" : "") + (j === d.key ? " sg-followed" : "") }, [el("td", {}, [sg.tokenNode(tok)]), num(s.scores[j], path + "scores." + j),
          num(s.exps[j], path + "exps." + j), num(s.weights[j], path + "weights." + j), el("td", { cls: "sg-wcell" }, [bar])]));
      });
      t.appendChild(el("tr", { cls: "sg-sum" }, [el("td", { text: "\u03a3 exp" }), el("td", { text: "max " }, [el("span", { cls: "sg-num", text: sig4(s.shift), data: { path: path + "shift", value: s.shift } })]),
        num(s.exp_sum, path + "exp_sum"), el("td", { text: "" }), el("td", { text: "" })]));
      const ex = el("div", { cls: "sg-lesson-example" }, [el("p", { cls: "sg-label", text: "The article's example (float64)" })]);
      s.example.forEach((g, n) => {
        const et = el("table", {}, [el("caption", { text: g.context }), el("tr", {}, [el("th", { text: "member" }), el("th", { text: "score" }), el("th", { text: "weight" })])]);
        g.members.forEach((m, j) => et.appendChild(el("tr", {}, [el("td", { text: m }), num(g.scores[j], path + "example." + n + ".scores." + j, String(g.scores[j])),
          num(g.weights[j], path + "example." + n + ".weights." + j, Number(g.weights[j]).toPrecision(4))])));
        ex.appendChild(et);
      });
      body.appendChild(el("div", { cls: "sg-lesson-split" }, [el("div", { cls: "sg-lesson-scroll" }, [t]), ex]));
    }

    lesson_weighted_sum(body, s, d, path) {
      body.appendChild(el("p", { cls: "sg-label", text: "output_" + d.query + " = \u03a3_j w_j v_j: " + s.output.length + " numbers" }));
      body.appendChild(this.vectorCanvas(s.output));
      body.appendChild(this.numberList(s.output, path + "output", s.output.length));
      const t = el("table", { cls: "sg-lesson-row" }, [el("caption", { text: "What each answer adds: weight \u00d7 \u2016v_j\u00b7W_O\u2016" }),
        el("tr", {}, [el("th", { text: "member" }), el("th", { text: "weight" }), el("th", { text: "contribution" })])]);
      const sm = d.sections[NAMES.indexOf("softmax")], sp = "sections." + NAMES.indexOf("softmax") + ".";
      d.tokens.forEach((tok, j) => { if (sm.scores[j] != null) t.appendChild(el("tr", {}, [el("td", {}, [sg.tokenNode(tok)]), num(sm.weights[j], sp + "weights." + j), num(s.contributions[j], path + "contributions." + j)])); });
      const c = el("table", { cls: "sg-lesson-row sg-lesson-coordinate" }, [el("caption", { text: "One coordinate worked out: output_" + d.query + "[" + s.t + "] = \u03a3_j w_j \u00b7 v_j[" + s.t + "] (t = " + s.t + ", the output's largest)" }),
        el("tr", {}, [el("th", { text: "member j" }), el("th", { text: "w_j" }), el("th", { text: "v_j[" + s.t + "]" }), el("th", { text: "w_j \u00b7 v_j[" + s.t + "]" })])]);
      d.tokens.forEach((tok, j) => { if (s.terms[j] != null) c.appendChild(el("tr", {}, [el("td", {}, [sg.tokenNode(tok)]), num(sm.weights[j], sp + "weights." + j), num(s.v_t[j], path + "v_t." + j), num(s.terms[j], path + "terms." + j)])); });
      c.appendChild(el("tr", { cls: "sg-sum" }, [el("td", { text: "\u03a3 of the terms" }), el("td", { text: "" }), el("td", { text: "" }), num(s.terms_sum, path + "terms_sum")]));
      c.appendChild(el("tr", { cls: "sg-sum" }, [el("td", { text: "the model's" }), el("td", { text: "" }), el("td", { text: "" }), num(s.output[s.t], path + "output." + s.t)]));
      body.appendChild(el("div", { cls: "sg-lesson-split" }, [el("div", { cls: "sg-lesson-scroll" }, [c]), el("div", { cls: "sg-lesson-scroll" }, [t])]));
    }

    lesson_conclusion(body, s, d, path) {
      const list = (caption, words, key) => el("table", { cls: "sg-lesson-row" }, [el("caption", { text: caption }),
        ...words.map((w, n) => el("tr", {}, [el("td", {}, [sg.tokenNode(w.token)]), num(w.prob, path + key + "." + n + ".prob", percent(w.prob))]))]);
      const plain = s.unsilenced_top ? (d.ablation ? ", nothing taken out" : ", nothing silenced") : "";
      const box = el("div", { cls: "sg-lesson-split" }, [list("\u201c" + d.text + "\u201d" + (s.unsilenced_top ? ", this run" : ""), s.top, "top")]);
      if (s.unsilenced_top) box.appendChild(list("\u201c" + d.text + "\u201d" + plain, s.unsilenced_top, "unsilenced_top"));
      if (s.shorter_top) box.appendChild(list("\u201c" + s.shorter_text + "\u201d" + plain, s.shorter_top, "shorter_top"));
      body.appendChild(box);
    }

    // ---- drawing helpers ----
    /** A vector as a strip of coloured cells (diverging scale around 0): a row (paper) or a column (video). */
    vectorCanvas(values) {
      const across = this.lesson.notation === "paper", n = values.length;
      const cell = Math.max(2, Math.min(CELL, Math.floor(720 / n)));
      const c = el("canvas", { cls: "sg-vector", attrs: { role: "img", "aria-label": n + " numbers, " + (across ? "a row" : "a column") } });
      c.width = across ? n * cell : CELL; c.height = across ? CELL : n * cell;
      const ctx = c.getContext("2d"), M = Math.max(...values.map(Math.abs));
      values.forEach((v, i) => { ctx.fillStyle = sg.rgb(sg.divergingColor(v, M)); if (across) ctx.fillRect(i * cell, 0, cell, CELL); else ctx.fillRect(0, i * cell, CELL, cell); });
      return c;
    }

    /** rows (R × C, null masked) with row labels (and column labels); transposed in the video's notation.
     * A side labelled by members gets cells at least LABEL px across, so no two labels overlap; a side
     * numbered by coordinate labels every n-th so the numbers fit. M: the colour scale's ±M (default: the largest |value|). */
    matrixCanvas(rows, rowLabels, colLabels, scale, mark, M) {
      const paper = this.lesson.notation === "paper";
      const R = paper ? rows.length : rows[0].length, C = paper ? rows[0].length : rows.length;
      const at = (r, c) => (paper ? rows[r][c] : rows[c][r]);
      const left = paper ? rowLabels : colLabels, top = paper ? colLabels : rowLabels;
      const grid = Boolean(colLabels);  // a members × members grid: cells large enough to hold their numbers
      const cell = Math.max(4, Math.min(grid ? 44 : 16, Math.floor(640 / C))), pad = left || !paper ? 90 : 30, head = top ? 70 : 4;
      const cw = top ? Math.max(cell, LABEL) : cell, ch = left ? Math.max(cell, LABEL) : cell;
      const c = el("canvas", { cls: "sg-matrix", attrs: { role: "img" } });
      c.width = pad + C * cw; c.height = head + R * ch;
      Object.assign(c.dataset, { across: String(cw), down: String(ch), labelled: (left ? "rows " : "") + (top ? "columns" : "") });  // px per cell each way
      const ctx = c.getContext("2d");
      if (M == null) { M = 0; for (const row of rows) for (const v of row) if (v != null) M = Math.max(M, Math.abs(v)); }
      const masked = sg.hatch(ctx, 1);
      for (let r = 0; r < R; r++) for (let k = 0; k < C; k++) {
        const v = at(r, k);
        ctx.fillStyle = v == null ? masked : sg.rgb(scale === "weights" ? sg.weightColor(v) : sg.divergingColor(v, M));
        ctx.fillRect(pad + k * cw, head + r * ch, cw, ch);
      }
      if (cell >= 36) this.cellNumbers(ctx, R, C, at, (v) => (scale === "weights" ? sg.weightColor(v) : sg.divergingColor(v, M)), pad, head, cell);
      if (mark) { // the pair followed, outlined: [row, column] in the paper's orientation
        const [r, k] = paper ? mark : [mark[1], mark[0]];
        ctx.strokeStyle = "#111"; ctx.lineWidth = 2; ctx.strokeRect(pad + k * cw + 1, head + r * ch + 1, cw - 2, ch - 2);
      }
      ctx.fillStyle = "#1d2026"; ctx.font = "11px " + sg.MONO; ctx.textBaseline = "middle";
      const labels = (list, vertical, size) => (list || []).forEach((t, i) => {
        if (i % Math.ceil(LABEL / size)) return;  // numbered coordinates: every n-th, so that none overlap
        if (vertical) { ctx.save(); ctx.translate(pad + i * size + size / 2, head - 4); ctx.rotate(-Math.PI / 2); ctx.fillText(sg.short(t, 9), 0, 0); ctx.restore(); }
        else ctx.fillText(sg.short(t, 11), 2, head + i * size + size / 2);
      });
      labels(left || (paper ? null : Array.from({ length: R }, (_, i) => "t=" + i)), false, ch); labels(top, true, cw);
      return el("div", { cls: "sg-lesson-scroll" }, [c]);
    }

    /** The diverging colour scale of a drawing: −M, 0 and +M under a strip of its colours (path: M's place in the API's answer). */
    scaleLegend(M, path) {
      const c = el("canvas", { cls: "sg-scale", attrs: { role: "img", "aria-label": "colour scale from \u2212" + sig4(M) + " to +" + sig4(M) } });
      c.width = 160; c.height = 10;
      const ctx = c.getContext("2d");
      for (let x = 0; x < c.width; x++) { ctx.fillStyle = sg.rgb(sg.divergingColor(M * (2 * x / (c.width - 1) - 1), M)); ctx.fillRect(x, 0, 1, c.height); }
      const m = () => el("span", { cls: "sg-num", text: sig4(M), data: { path, value: M } });
      return el("p", { cls: "sg-scale-legend sg-hint" }, ["colour: \u2212", m(), " ", c, " +", m(), " (0 in the middle; one scale for every cell of this drawing)"]);
    }

    /** Each unmasked cell's number written in it (two significant digits), dark on light colours, light on dark. */
    cellNumbers(ctx, R, C, at, colour, pad, head, cell) {
      ctx.font = "10px " + sg.MONO; ctx.textAlign = "center"; ctx.textBaseline = "middle";
      for (let r = 0; r < R; r++) for (let k = 0; k < C; k++) {
        const v = at(r, k);
        if (v == null) continue;
        ctx.fillStyle = sg.isLight(colour(v)) ? "#1d2026" : "#fff";
        ctx.fillText(v.toPrecision(2), pad + k * cell + cell / 2, head + r * cell + cell / 2);
      }
      ctx.textAlign = "start";
    }

    /** The first `count` numbers of a vector as text, each with its data-path. */
    numberList(values, path, count) {
      const box = el("div", { cls: "sg-numbers" });
      values.slice(0, count).forEach((v, i) => box.appendChild(el("span", { cls: "sg-num", text: sig4(v), data: { path: path + "." + i, value: v }, attrs: { title: "[" + i + "] " + v } })));
      if (values.length > count) box.appendChild(el("span", { cls: "sg-hint", text: "\u2026 " + (values.length - count) + " more" }));
      return box;
    }
  }

  sg.view("lesson", (page) => new Lesson(page), { pageOnly: true });

  sg.lessonSections = NAMES;
  sg.readLessonHash = readHash;
})(window.StudyGroup = window.StudyGroup || {});

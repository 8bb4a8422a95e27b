/* The page's state, in one place: the data of the text shown (d), what the reader chose (ui), the
 * heads asked of the server (heads), and the two guards every answer passes before it is drawn:
 * the text's generation (gen, one more for each new text) and the silencing as the API takes it
 * (silencing(), and silencingKey() to compare two). A view asks `store.guard()` before it sends a
 * request and drops the answer when the guard says the text or the silencing changed meanwhile. */
(function (sg) {
  "use strict";

  /** The reader's choices on a new text: nothing selected, silenced, opened or asked yet. */
  const freshChoices = () => ({ selected: null, hover: null, members: new Set(), headsSilenced: new Set(), headChosen: false,
    rows: "auto", layer: null, head: null, why: null });

  /** members (indices) and heads ([l, h] pairs) as the API takes them: each once, in order. */
  function silenceOf(members, heads) {
    const pairs = new Map(heads.map((x) => [x.join("."), x]));
    return { members: [...new Set(members)].sort((a, b) => a - b),
      heads: [...pairs.values()].sort((a, b) => a[0] - b[0] || a[1] - b[1]) };
  }

  /** The silencing of members and heads taken out by ablation a ({kind, from}; none: zero) as the API
   * takes it: {silence: {members, heads}}, with the ablation where something is silenced and it is not zero. */
  function silencingOf(members, heads, a) {
    const silence = silenceOf(members, heads);
    if (!a || a.kind === "zero" || !(silence.members.length + silence.heads.length)) return { silence };
    return { silence, ablation: a.kind === "resample" && a.from.trim() ? { kind: "resample", from: a.from } : { kind: a.kind } };
  }

  class Store {
    constructor() {
      this.gen = 0;
      this.d = {};
      this.heads = new Map(); // "l.h.notation.rows:silencing" -> head payload (server mode)
      this.ui = { notation: "paper", ...freshChoices() };
      this.asked = null; // the head and member a URL asks for, taken once by the next text's first head
    }

    /** A new text: its data starts as d; nothing of the last text stays (its head, its selection, its
     * silencing), and every answer asked for the last one fails its guard. */
    newText(d) {
      this.gen++;
      Object.assign(this.ui, freshChoices());
      this.heads.clear();
      this.d = d;
    }

    /** What is silenced now and how it is taken out, as the API takes it: {silence: {members, heads}}
     * (empty lists when nothing is), with the ablation where something is silenced and it is not zero. */
    silencing() {
      return silencingOf([...this.ui.members], [...this.ui.headsSilenced].map((k) => k.split(".").map(Number)), this.ui.ablation);
    }

    /** The silencing shown as one string: two silencings are the same when their keys are. */
    silencingKey() { return JSON.stringify(this.silencing()); }

    /** Whether anything is silenced. */
    silencesAny() { return this.ui.members.size > 0 || this.ui.headsSilenced.size > 0; }

    /** Sets the silencing to members (indices) and heads ([l, h] pairs). */
    silence(members, heads) {
      this.ui.members = new Set(members);
      this.ui.headsSilenced = new Set(heads.map((x) => x.join(".")));
    }

    /** () => whether the text and the silencing are still those of now: an answer asked now is drawn only while it holds. */
    guard() {
      const gen = this.gen, key = this.silencingKey();
      return () => gen === this.gen && key === this.silencingKey();
    }

    /** () => whether the text is still the one of now (for answers that no silencing changes). */
    textGuard() {
      const gen = this.gen;
      return () => gen === this.gen;
    }

    /** The members of the text shown. */
    tokens() {
      const d = this.d;
      return (d.conclusion && d.conclusion.tokens) || (d.explanation && d.explanation.tokens) || (d.modelView && d.modelView.tokens) || [];
    }

    /** The heads ranked by how much they decide the next word: the explanation's, else the model view's quick ranks. */
    rankedHeads() {
      const e = this.d.explanation, mv = this.d.modelView;
      if (e && e.heads.length) return e.heads.slice(0, e.heads_measured).map((h) => [h.layer, h.head]);  // ranked by one measure
      if (!mv) return [];
      const ranked = [];
      mv.heads.forEach((row) => row.forEach((h) => { if (h.rank != null) ranked[h.rank - 1] = [h.layer, h.head]; }));
      return ranked.filter(Boolean);
    }
  }

  Store.silencingOf = silencingOf;
  sg.Store = Store;
})(window.StudyGroup = window.StudyGroup || {});

/* Finding a member among hundreds: type a word and jump to its next occurrence in the text, or
 * jump to a member by its index. The chips scroll inside a bounded box (page.css); a jump
 * selects the member and brings its chip into view. */
(function (sg) {
  "use strict";

  const { el } = sg;
  /** Texts longer than this many members get the find box. */
  const FIND_PAST = 40;
  /** A member's text as it reads in the text: the marks of a space, a newline and a tab as those characters. */
  const plain = (t) => String(t).replace(/\u2423/g, " ").replace(/\u21b5/g, "\n").replace(/\u21e5/g, "\t");

  /** The finder of the members' view (members.js), above its chips. */
  class Finder {
    constructor(view, chips) { this.view = view; this.chips = chips; }

    /** The find box above the chips, made on first use; shown for texts past FIND_PAST members. What
     * it found stays while the members are drawn again for the same text (its conclusion, its
     * explanation arriving). */
    draw() {
      let box = this.view.q(".sg-find");
      if (!box) {
        const word = el("input", { cls: "sg-find-word", attrs: { type: "search", "aria-label": "find a word in the members", placeholder: "find a word", spellcheck: "false" } });
        const index = el("input", { cls: "sg-find-index", attrs: { type: "number", min: "0", "aria-label": "jump to member number", placeholder: "member #" } });
        const said = el("span", { cls: "sg-find-said sg-hint", attrs: { "aria-live": "polite" } });
        box = el("div", { cls: "sg-find", attrs: { role: "search" } }, [
          el("form", { on: { submit: (e) => { e.preventDefault(); this.findNext(word.value); } } }, [word,
            el("button", { attrs: { type: "submit" }, text: "Next" })]),
          el("form", { attrs: { novalidate: "" }, on: { submit: (e) => { e.preventDefault(); this.jumpToIndex(index.value); } } }, [index,
            el("button", { attrs: { type: "submit" }, text: "Go" })]),
          said]);
        this.chips.parentNode.insertBefore(box, this.chips);
      }
      const T = this.view.tokens().length;
      box.hidden = T <= FIND_PAST;
      this.view.q(".sg-find-index").max = String(Math.max(0, T - 1));
      if (this.text !== this.view.d.text) this.view.q(".sg-find-said").textContent = ""; // a new text: nothing found in it yet
      this.text = this.view.d.text;
    }

    /** The members where `word` begins in the text (case ignored), in order. */
    occurrences(word) {
      const toks = this.view.tokens(), starts = [];
      let text = "";
      for (const t of toks) { starts.push(text.length); text += plain(t); }
      const low = text.toLowerCase(), w = word.toLowerCase(), found = [];
      let m = 0;
      for (let at = low.indexOf(w); w && at >= 0; at = low.indexOf(w, at + 1)) {
        while (m + 1 < starts.length && starts[m + 1] <= at) m++;
        if (found[found.length - 1] !== m) found.push(m);
      }
      return found;
    }

    /** Selects the next member after the selected one where `word` begins (round to the first). */
    findNext(word) {
      const said = this.view.q(".sg-find-said");
      if (!word.trim()) { said.textContent = "Type a word to find."; return; }
      const found = this.occurrences(word);
      if (!found.length) { said.textContent = "\u201c" + word + "\u201d is not in the text."; return; }
      const after = this.view.ui.selected == null ? -1 : this.view.ui.selected;
      const k = Math.max(0, found.findIndex((j) => j > after));
      said.textContent = "\u201c" + word + "\u201d: member " + found[k] + " (" + (k + 1) + " of " + found.length + ")";
      this.jumpTo(found[k]);
    }

    jumpToIndex(value) {
      const T = this.view.tokens().length, j = Number(value);
      if (value === "" || !Number.isInteger(j) || j < 0 || j >= T) {
        this.view.q(".sg-find-said").textContent = "The members are numbered 0 to " + (T - 1) + ".";
        return;
      }
      this.view.q(".sg-find-said").textContent = "member " + j;
      this.jumpTo(j);
    }

    /** Selects member j and brings its chip into view inside the chips' box. */
    jumpTo(j) {
      const chip = this.view.q('.sg-chip[data-index="' + j + '"]');
      if (!chip) return;
      if (this.view.ui.selected !== j) this.view.select(j);
      chip.scrollIntoView({ block: "nearest" });
    }
  }

  sg.Finder = Finder;
})(window.StudyGroup = window.StudyGroup || {});

/* The text and its members: the text box (the page) or the text given (a report), the members as
 * chips (select: click, Enter; hover; silence: \u2298), the list of what is silenced and how it is
 * taken out; among hundreds of members, the finder (finder.js). */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, signed } = sg;

  /** A member's chip (a .sg-chip here, a .sg-storychip in the story) marked as ui says: selected, hovered, silenced. */
  function markChip(chip, ui) {
    const j = Number(chip.dataset.index);
    chip.classList.toggle("sg-selected", j === ui.selected);
    chip.classList.toggle("sg-hover", j === ui.hover);
    chip.classList.toggle("sg-muted", ui.members.has(j));
    chip.style.background = ui.members.has(j) ? sg.colours.masked.css : ""; // masked as the grids mask a cell
    const mute = chip.querySelector(".sg-mute");
    if (mute) mute.setAttribute("aria-pressed", String(ui.members.has(j)));
  }
  sg.markChip = markChip;

  class Members extends sg.View {
    constructor(page) {
      super(page);
      this.place = "layout";
      const input = this.section = this.card("sg-input", "The text and its members");
      if (this.api) input.appendChild(this.form());
      else input.appendChild(el("p", { cls: "sg-given" }));
      input.appendChild(el("p", { cls: "sg-hint", text: "Tab to a member and press Enter to select its question; \u2298 silences it (nobody hears its answer; \u201ctaken out by\u201d, once something is silenced, puts in its mean or another text's instead). Esc clears the selection. \u2423 marks a space, \u21b5 a newline, \u21e5 a tab." }));
      input.appendChild(this.chips = el("div", { cls: "sg-chips", attrs: { role: "list", "aria-label": "members" } }));
      input.appendChild(this.list = el("div", { cls: "sg-silenced" }));
      this.finder = this.api ? new sg.Finder(this, this.chips) : null;
      this.draws = ["conclusion", "explanation"];
    }

    /** The page's form: the text, another context to compare with, Explain (or Ctrl+Enter). */
    form() {
      const p = this.page;
      const form = el("form", { cls: "sg-form", on: { submit: (e) => { e.preventDefault(); p.submit(); } } }, [
        el("label", { cls: "sg-label", attrs: { for: p.id("text") }, text: "Text (the group predicts the word that comes next)" }),
        el("textarea", { cls: "sg-text", attrs: { id: p.id("text"), name: "text", rows: 2, spellcheck: "false" } }),
        el("label", { cls: "sg-label", attrs: { for: p.id("other") }, text: "Compare with another context (optional): the same text without its first sentence, say" }),
        el("input", { cls: "sg-other", attrs: { id: p.id("other"), name: "other", type: "text", spellcheck: "false", placeholder: "e.g. I have a lot" } }),
        el("div", { cls: "sg-actions" }, [el("button", { cls: "sg-go", attrs: { type: "submit" }, text: "Explain" }),
          el("span", { cls: "sg-hint", text: "Ctrl+Enter in the text box does the same." })]),
        el("p", { cls: "sg-hint sg-limit" })]);
      form.querySelector("textarea").addEventListener("keydown", (e) => {
        if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); p.submit(); }
      });
      return form;
    }

    /** The server's default text in the box, and the longest text it takes. */
    informed(info) {
      this.q(".sg-text").value = info.default_text;
      const most = info.limits && info.limits.max_tokens;
      if (most) this.q(".sg-limit").textContent = "Texts of up to " + most + " tokens" +
        (most === info.context_length ? " (the model's context)." : " (the server's --max-tokens; the model's context holds " + info.context_length + ").") +
        " A longer text is refused with a message, never cut.";
    }

    /** A report's text (and the one it is compared with). */
    shown() {
      const given = clear(this.q(".sg-given")), d = this.d;
      given.appendChild(el("span", { cls: "sg-label", text: "Text" }));
      given.appendChild(el("q", { text: d.text == null ? "(token ids)" : d.text }));
      if (d.comparison) {
        given.appendChild(el("span", { cls: "sg-label", text: "compared with" }));
        given.appendChild(el("q", { text: d.comparison.a.text }));
      }
    }

    /** The chips, made again where the members or their explanation changed; else marked again. */
    draw() {
      const e = this.d.explanation, toks = this.tokens(), shown = [toks.join("\u0000"), e];
      if (this.shown && this.shown[0] === shown[0] && this.shown[1] === shown[1]) { this.silenced(); return; }
      this.shown = shown;
      const box = clear(this.chips);
      toks.forEach((t, j) => {
        const m = e && e.members[j];
        const main = el("button", { cls: "sg-chip-main", attrs: { type: "button", "aria-label": "member " + j + ": " + t },
          on: { click: () => this.select(j) } }, [tokenNode(t)]);
        const said = [];
        if (m && m.effect != null) said.push("effect (silenced in every head, for every question) " + signed(m.effect, 3));
        if (m && m.effect_last_question != null) said.push("effect_last_question (silenced for the last member's question only) " + signed(m.effect_last_question, 3));
        main.title = "member " + j + (said.length ? "; change in log p(" + e.predicted.token + "): " + said.join("; ") : "");
        const mute = el("button", { cls: "sg-mute", attrs: { type: "button", "aria-pressed": this.ui.members.has(j), "aria-label": "silence member " + j, title: "silence member " + j },
          text: "\u2298", on: { click: () => this.page.toggleMember(j) } });
        const chip = el("span", { cls: "sg-chip", attrs: { role: "listitem" }, data: { index: j } }, [main, mute]);
        chip.addEventListener("mouseenter", () => this.setHover(j));
        chip.addEventListener("mouseleave", () => this.setHover(null));
        box.appendChild(chip);
      });
      this.silenced();
      if (this.finder) this.finder.draw();
    }

    /** Every member's chip marked: selected, hovered, silenced. */
    paint() { for (const chip of this.chips.children) markChip(chip, this.ui); }
    selected() { this.paint(); }
    hovered() { this.paint(); }

    /** The list of what is silenced, and the chips marked. */
    silenced() {
      this.renderList();
      this.paint();
    }

    renderList() {
      const box = clear(this.list);
      if (!this.ui.members.size && !this.ui.headsSilenced.size) return;
      box.appendChild(el("span", { cls: "sg-label", text: "Silenced: " }));
      const toks = this.tokens(), p = this.page;
      for (const j of [...this.ui.members].sort((a, b) => a - b)) {
        box.appendChild(el("button", { cls: "sg-pill", attrs: { type: "button", title: "hear member " + j + " again" }, on: { click: () => p.toggleMember(j) } },
          [tokenNode(toks[j]), " (" + j + ") \u00d7"]));
      }
      for (const k of this.ui.headsSilenced) {
        const [l, h] = k.split(".");
        box.appendChild(el("button", { cls: "sg-pill", attrs: { type: "button", title: "let this head write again" }, on: { click: () => p.toggleHead(+l, +h) } },
          ["layer " + l + " head " + h + " \u00d7"]));
      }
      box.appendChild(el("button", { cls: "sg-link", attrs: { type: "button" }, text: "clear all", on: { click: () => {
        p.clearSilencing(); p.afterSilence(); } } }));
      if (this.api) box.appendChild(this.ablationChoice());
    }

    /** How the silenced are taken out: zero (silenced), mean, or resample from another text (typed in
     * the input shown then); a change redraws every view (a resample waits for its text). */
    ablationChoice() {
      const a = this.ui.ablation || (this.ui.ablation = { kind: "zero", from: "" });
      const kinds = { zero: "zero (silenced)", mean: "mean ablation", resample: "resample ablation" };
      const redraw = () => { if (a.kind !== "resample" || a.from.trim()) this.page.afterSilence(); else this.renderList(); };
      const select = el("select", { cls: "sg-ablation", attrs: { "aria-label": "how the silenced are taken out",
        title: "zero: a member's keys removed, a head's write zeroed; mean: replaced by their mean over this text's members; "
          + "resample: taken from another text of as many tokens" }, on: { change: () => { a.kind = select.value; redraw(); } } },
        Object.entries(kinds).map(([k, text]) => el("option", { attrs: { value: k }, text })));
      select.value = a.kind;
      const parts = [el("span", { cls: "sg-label", text: "taken out by" }), select];
      if (a.kind === "resample") {
        const from = el("input", { cls: "sg-ablation-from", attrs: { type: "text", value: a.from, placeholder: "a text of as many tokens",
          "aria-label": "the text to resample from" }, on: { change: () => { a.from = from.value; redraw(); } } });
        parts.push(from);
      }
      return el("span", { cls: "sg-ablation-choice" }, parts);
    }
  }

  sg.view("members", (page) => new Members(page));
})(window.StudyGroup = window.StudyGroup || {});

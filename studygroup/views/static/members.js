/* The members as chips: select (click, Enter), hover, silence (\u2298); the list of what is silenced. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, signed } = sg;

  sg.mixin(class {
    renderMembers() {
      const box = clear(this.q(".sg-chips"));
      const e = this.d.explanation;
      this.tokens().forEach((t, j) => {
        const m = e && e.members[j];
        const main = el("button", { cls: "sg-chip-main", attrs: { type: "button", "aria-label": "member " + j + ": " + t },
          on: { click: () => this.select(j) } }, [tokenNode(t)]);
        const said = [];
        if (m && m.effect != null) said.push("effect (silenced in every head, for every question) " + signed(m.effect, 3));
        if (m && m.effect_last_question != null) said.push("effect_last_question (silenced for the last member's question only) " + signed(m.effect_last_question, 3));
        main.title = "member " + j + (said.length ? "; change in log p(" + e.predicted.token + "): " + said.join("; ") : "");
        const mute = el("button", { cls: "sg-mute", attrs: { type: "button", "aria-pressed": this.ui.members.has(j), "aria-label": "silence member " + j, title: "silence member " + j },
          text: "\u2298", on: { click: () => this.toggleMember(j) } });
        const chip = el("span", { cls: "sg-chip", attrs: { role: "listitem" }, data: { index: j } }, [main, mute]);
        chip.addEventListener("mouseenter", () => this.setHover(j));
        chip.addEventListener("mouseleave", () => this.setHover(null));
        box.appendChild(chip);
      });
      this.renderSilencedList();
      this.paintMembers();
      this.renderFinder();
    }

    paintMembers() {
      for (const chip of this.qa(".sg-chip, .sg-storychip")) {
        const j = Number(chip.dataset.index);
        chip.classList.toggle("sg-selected", j === this.ui.selected);
        chip.classList.toggle("sg-hover", j === this.ui.hover);
        chip.classList.toggle("sg-muted", this.ui.members.has(j));
        chip.style.background = this.ui.members.has(j) ? sg.colours.masked.css : ""; // masked as the grids mask a cell
        const mute = chip.querySelector(".sg-mute");
        if (mute) mute.setAttribute("aria-pressed", String(this.ui.members.has(j)));
      }
    }

    renderSilencedList() {
      const box = clear(this.q(".sg-silenced"));
      if (!this.ui.members.size && !this.ui.headsSilenced.size) return;
      box.appendChild(el("span", { cls: "sg-label", text: "Silenced: " }));
      const toks = this.tokens();
      for (const j of [...this.ui.members].sort((a, b) => a - b)) {
        box.appendChild(el("button", { cls: "sg-pill", attrs: { type: "button", title: "hear member " + j + " again" }, on: { click: () => this.toggleMember(j) } },
          [tokenNode(toks[j]), " (" + j + ") \u00d7"]));
      }
      for (const k of this.ui.headsSilenced) {
        const [l, h] = k.split(".");
        box.appendChild(el("button", { cls: "sg-pill", attrs: { type: "button", title: "let this head write again" }, on: { click: () => this.toggleHead(+l, +h) } },
          ["layer " + l + " head " + h + " \u00d7"]));
      }
      box.appendChild(el("button", { cls: "sg-link", attrs: { type: "button" }, text: "clear all", on: { click: () => {
        this.ui.members.clear(); this.ui.headsSilenced.clear(); this.afterSilence(); } } }));
      if (this.api) box.appendChild(this.ablationChoice());
    }

    /** How the silenced are taken out: zero (silenced), mean, or resample from another text (typed in
     * the input shown then); a change redraws every view (a resample waits for its text). */
    ablationChoice() {
      const a = this.ui.ablation || (this.ui.ablation = { kind: "zero", from: "" });
      const kinds = { zero: "zero (silenced)", mean: "mean ablation", resample: "resample ablation" };
      const redraw = () => { if (a.kind !== "resample" || a.from.trim()) this.afterSilence(); else this.renderSilencedList(); };
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

    toggleMember(j) {
      if (this.ui.members.has(j)) this.ui.members.delete(j);
      else {
        if (!this.api) this.clearSilencing(); // a file holds one silencing at a time
        this.ui.members.add(j);
      }
      this.afterSilence();
    }

    toggleHead(l, h) {
      if (l == null) return;
      const k = l + "." + h;
      if (this.ui.headsSilenced.has(k)) this.ui.headsSilenced.delete(k);
      else {
        if (!this.api) this.clearSilencing();
        this.ui.headsSilenced.add(k);
      }
      this.afterSilence();
    }

    clearSilencing() { this.ui.members.clear(); this.ui.headsSilenced.clear(); }

    afterSilence() {
      this.renderSilencedList(); this.paintMembers(); this.paintThumbs(); this.paintHeadControls(); this.renderStory();
      this.resilence();
      if (this.api && this.gw && this.gw.lines.length) this.regenerateChosen().catch((e) => this.say("Generating: " + e.message, "error"));
    }

    select(j) {
      this.ui.selected = this.ui.selected === j ? null : j;
      this.paintMembers(); this.drawHeadGrids(); this.renderMemberPanel();
    }
    setHover(j) {
      if (this.ui.hover === j) return;
      this.ui.hover = j;
      this.paintMembers(); this.drawHeadGrids();
    }
    clearSelection() {
      this.ui.selected = null; this.ui.hover = null;
      this.tip.hidden = true;
      this.paintMembers(); this.drawHeadGrids(); this.renderMemberPanel();
    }
  });
})(window.StudyGroup = window.StudyGroup || {});

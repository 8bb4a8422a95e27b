/* One view on one root element: its state and its skeleton. The other files add its methods with
 * StudyGroup.mixin, by concern (session, members, conclusion, story, model view, head, listening,
 * saving). Every element lives inside the root and is found from it, so two views on one page never
 * collide. */
(function (sg) {
  "use strict";

  const { el, clear } = sg;

  class Instance {
    constructor(root, opts) {
      this.root = root;
      this.api = opts.api || null; // null: static data only (report, notebook)
      this.gen = 0;
      this.heads = new Map(); // "l.h.notation.rows" -> head payload (server mode)
      this.ui = { notation: "paper", selected: null, hover: null, layer: null, head: null, rows: "auto",
        members: new Set(), headsSilenced: new Set(), headChosen: false };
      this.d = {};
      root.classList.add("sg-root");
      root.studygroup = this;
      this.build();
      if (this.api) this.start();
      else this.show(opts.data || {});
    }

    q(sel) { return this.root.querySelector(sel); }
    qa(sel) { return Array.from(this.root.querySelectorAll(sel)); }

    /** The view's skeleton: every section, empty, inside the root. */
    build() {
      const r = clear(this.root);
      const section = (cls, title, hint) => el("section", { cls: "sg-card " + cls }, [
        el("h2", { text: title }), hint ? el("p", { cls: "sg-hint", text: hint }) : null]);
      this.status = el("p", { cls: "sg-status", attrs: { role: "status", "aria-live": "polite" } });
      const header = el("header", { cls: "sg-header" }, [
        el("h1", {}, [el("span", { cls: "sg-brand", text: "studygroup" }), " the attention layer as a study group"]),
        el("p", { cls: "sg-model" }), this.status]);
      const input = section("sg-input", "The text and its members");
      if (this.api) {
        const form = el("form", { cls: "sg-form", on: { submit: (e) => { e.preventDefault(); this.submit(); } } }, [
          el("label", { cls: "sg-label", attrs: { for: this.id("text") }, text: "Text (the group predicts the word that comes next)" }),
          el("textarea", { cls: "sg-text", attrs: { id: this.id("text"), name: "text", rows: 2, spellcheck: "false" } }),
          el("label", { cls: "sg-label", attrs: { for: this.id("other") }, text: "Compare with another context (optional): the same text without its first sentence, say" }),
          el("input", { cls: "sg-other", attrs: { id: this.id("other"), name: "other", type: "text", spellcheck: "false", placeholder: "e.g. I have a lot" } }),
          el("div", { cls: "sg-actions" }, [el("button", { cls: "sg-go", attrs: { type: "submit" }, text: "Explain" }),
            el("span", { cls: "sg-hint", text: "Ctrl+Enter in the text box does the same." })]),
          el("p", { cls: "sg-hint sg-limit" })]);
        form.querySelector("textarea").addEventListener("keydown", (e) => {
          if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.submit(); }
        });
        input.appendChild(form);
      } else {
        input.appendChild(el("p", { cls: "sg-given" }));
      }
      input.appendChild(el("p", { cls: "sg-hint", text: "Tab to a member and press Enter to select its question; \u2298 silences it (nobody hears its answer; \u201ctaken out by\u201d, once something is silenced, puts in its mean or another text's instead). Esc clears the selection. \u2423 marks a space, \u21b5 a newline, \u21e5 a tab." }));
      input.appendChild(el("div", { cls: "sg-chips", attrs: { role: "list", "aria-label": "members" } }));
      input.appendChild(el("div", { cls: "sg-silenced" }));

      const conclusion = section("sg-conclusion", "The conclusion", "The most likely next words. Silencing shows the old value as a ghost bar.");
      conclusion.appendChild(el("div", { cls: "sg-bars" }));
      conclusion.appendChild(el("div", { cls: "sg-shift" }));
      const story = section("sg-story", "The story");
      story.appendChild(el("p", { cls: "sg-story-note sg-hint", attrs: { hidden: "" } }));
      story.appendChild(el("div", { cls: "sg-sentences" }));
      story.appendChild(el("div", { cls: "sg-decisive" }));

      const mv = section("sg-modelview", "The model view", "Every head's weights on this text: one row per layer, one column per head. Click a head (or Tab to it and press Enter) to open it.");
      mv.appendChild(el("div", { cls: "sg-mv-grid" }));
      mv.appendChild(el("div", { cls: "sg-mv-legend" }));
      mv.appendChild(el("div", { cls: "sg-save" }, [
        el("button", { attrs: { type: "button" }, text: "Save model view (PNG)", on: { click: () => this.saveModelView() } }),
        el("button", { attrs: { type: "button" }, text: "Save data (JSON)", on: { click: () => this.saveData() } })]));

      const head = section("sg-head", "The head");
      head.appendChild(el("div", { cls: "sg-head-title" }));
      const orient = el("div", { cls: "sg-orient", attrs: { role: "group", "aria-label": "orientation" } }, [
        el("button", { attrs: { type: "button", "aria-pressed": "true" }, data: { notation: "paper" }, text: "Paper: rows are questions" }),
        el("button", { attrs: { type: "button", "aria-pressed": "false" }, data: { notation: "columns" }, text: "Video: columns are questions" })]);
      orient.addEventListener("click", (e) => { const b = e.target.closest("button"); if (b) this.setNotation(b.dataset.notation); });
      head.appendChild(el("div", { cls: "sg-head-controls" }, [orient,
        el("button", { cls: "sg-silence-head", attrs: { type: "button", "aria-pressed": "false" }, text: "\u2298 Silence this head", on: { click: () => this.toggleHead(this.ui.layer, this.ui.head) } }),
        el("button", { cls: "sg-full", attrs: { type: "button", hidden: "" }, text: "Show the full grid", on: { click: () => { this.ui.rows = "all"; this.openHead(this.ui.layer, this.ui.head); } } }),
        el("button", { cls: "sg-save-head", attrs: { type: "button" }, text: "Save head (PNG)", on: { click: () => this.saveHead() } })]));
      const figure = (kind, caption) => el("figure", { cls: "sg-fig sg-fig-" + kind }, [
        el("figcaption", { text: caption }),
        el("div", { cls: "sg-canvas-wrap" }, [el("canvas", { cls: "sg-grid sg-grid-" + kind, attrs: { tabindex: "-1", role: "img" } })]),
        el("canvas", { cls: "sg-legend sg-legend-" + kind, attrs: { role: "img" } })]);
      head.appendChild(el("div", { cls: "sg-figs" }, [figure("scores", "Scores Q\u00b7K\u1d40/\u221ad\u2096"), figure("weights", "Weights: softmax of the scores")]));
      head.appendChild(el("p", { cls: "sg-check sg-hint" }));
      head.appendChild(el("div", { cls: "sg-why", attrs: { hidden: "", role: "region", "aria-label": "why" } }));
      head.appendChild(el("div", { cls: "sg-member" }));
      head.appendChild(el("p", { cls: "sg-head-empty sg-hint" }));

      r.appendChild(header);
      r.appendChild(el("div", { cls: "sg-layout" + (this.api ? " sg-with-generate" : "") }, [input, this.api ? this.generationSection(section) : null, conclusion, story, mv, head]));
      this.tip = el("div", { cls: "sg-tip", attrs: { role: "tooltip", hidden: "" } });
      r.appendChild(this.tip);
      for (const kind of ["scores", "weights"]) this.wireGrid(this.q(".sg-grid-" + kind), kind);
      const onEsc = (e) => { if (e.key === "Escape") this.clearSelection(); };
      // the page owns the whole document; a report or notebook view answers only inside itself
      (this.api ? document : this.root).addEventListener("keydown", onEsc);
    }

    id(name) {
      if (!this.uid) this.uid = "sg" + Math.random().toString(36).slice(2, 10);
      return this.uid + "-" + name;
    }

    say(message, kind) {
      this.status.textContent = message || "";
      this.status.dataset.kind = kind || "";
      this.status.setAttribute("role", kind === "error" ? "alert" : "status");
    }
  }

  /** Adds the methods of `cls` (a class of methods only) to every view. */
  function mixin(cls) {
    for (const name of Object.getOwnPropertyNames(cls.prototype)) {
      if (name !== "constructor") Object.defineProperty(Instance.prototype, name, Object.getOwnPropertyDescriptor(cls.prototype, name));
    }
  }

  /** The views that own a card of their own (residual.js, lens.js, patching.js): each file registers
   * `make(inst)`, which builds its card (`.section`), asks the server itself or draws the
   * explanation; the page mounts them in this order under its layout, and tells them of each new
   * text as an "sg-text" event and of its explanation as an "sg-explained" event. */
  const views = [];
  const view = (name, make) => { views.push({ name, make }); };

  Object.assign(sg, { Instance, mixin, views, view });
})(window.StudyGroup = window.StudyGroup || {});

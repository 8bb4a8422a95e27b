/* One page on one root element: its header, its views (every file that registers with
 * StudyGroup.view, in the order the files load) and the commands they share. The page holds no
 * state of its own (that is its store's, store.js) and draws nothing itself: it tells its views,
 * in their order, what happened (a new text, data that arrived, a selection, a silencing), and each
 * view that answers to that redraws its own section. Every element lives inside the root and is
 * found from it, so two pages on one document never collide. */
(function (sg) {
  "use strict";

  const { el, clear } = sg;

  /** The views, in their files' order: {name, make(page), pageOnly}. make returns the view (a
   * sg.View); pageOnly: only where the page asks a server (not in a report or a notebook). */
  const views = [];
  const view = (name, make, opts) => { views.push({ name, make, pageOnly: Boolean(opts && opts.pageOnly) }); };

  /** What every view can reach: its page, the store's state and the page's shared commands. A view
   * sets `section` (its card, or null) and `place` ("layout": the grid of the text, the conclusion,
   * the story, the model view and the head; otherwise the column under it); `draws` (fields of the
   * store's d) and `draw()`, called when one of those arrives (Instance.update) and for a new text.
   * It answers what the page tells it (Instance.tell) by methods of these names, each optional:
   *   mounted()               every view's card is in the page
   *   informed(info)          the server's /api/info (the page)       shown()      a report's data is in the store
   *   beforeText()            a new text is asked for                 newText()    its state is fresh (store.newText)
   *   explained()             its explanation arrived (a promise)     explored()   every step of the text is drawn
   *   afterText()             after the text's steps (a promise)
   *   selected(), hovered()   the member selected or hovered changed (store.ui)
   *   silenced()              the silencing changed; then, for the redraw:
   *   redraw(body, current)   its request for the silencing in body (the API's, null in a report), drawn
   *                           while current() holds: a promise, or null when it asks nothing
   *   redrawn()               every view is redrawn for the silencing shown last
   *   headOpened(), headDrawn(), headShown(), notation()   the head card opened a head, drew it, showed
   *                           it with its data; the orientation changed */
  class View {
    constructor(page) { this.page = page; this.section = null; this.place = "below"; }
    get store() { return this.page.store; }
    get d() { return this.page.store.d; }
    get ui() { return this.page.store.ui; }
    get api() { return this.page.api; }
    get tip() { return this.page.tip; }
    q(sel) { return this.page.q(sel); }
    qa(sel) { return this.page.qa(sel); }
    say(message, kind) { this.page.say(message, kind); }
    post(path, body) { return sg.api.post(this.api, path, body); }
    longPost(path, body, opts) { return this.page.jobs.longPost(path, body, opts); }
    jobBox(cls, after) { return this.page.jobs.box(cls, after); }
    stoppedSaid(err, what, again) { return this.page.jobs.stoppedSaid(err, what, again); }
    silencing() { return this.store.silencing(); }
    tokens() { return this.store.tokens(); }
    rankedHeads() { return this.store.rankedHeads(); }
    openHead(l, h, chosen) { return this.page.openHead(l, h, chosen); }
    select(j) { this.page.select(j); }
    setHover(j) { this.page.setHover(j); }
    /** A card: section.sg-card.cls with its title and an optional hint. */
    card(cls, title, hint) {
      return el("section", { cls: "sg-card " + cls }, [el("h2", { text: title }), hint ? el("p", { cls: "sg-hint", text: hint }) : null]);
    }
    /** The shared tooltip with words, beside the pointer of event ev. */
    showTip(words, ev) {
      const tip = this.tip;
      tip.textContent = words; tip.hidden = false;
      tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 14) + "px";
    }
  }

  class Instance {
    constructor(root, opts) {
      this.root = root;
      this.api = opts.api || null; // null: static data only (report, notebook)
      this.store = new sg.Store();
      this.jobs = new sg.Jobs(this);
      this.session = new sg.Session(this);
      root.classList.add("sg-root");
      root.studygroup = this;
      this.build();
      this.tell("mounted");
      if (this.api) this.session.start();
      else this.session.show(opts.data || {});
    }

    // the store's state, for tests and curious readers (and the benches) as the page's own
    get d() { return this.store.d; }
    get ui() { return this.store.ui; }
    get gen() { return this.store.gen; }
    get heads() { return this.store.heads; }
    get lesson() { return this.views.lesson ? this.views.lesson.lesson : undefined; }

    q(sel) { return this.root.querySelector(sel); }
    qa(sel) { return Array.from(this.root.querySelectorAll(sel)); }

    /** The skeleton: the header, then each view's card in the layout or in the column under it. */
    build() {
      const r = clear(this.root);
      this.status = el("p", { cls: "sg-status", attrs: { role: "status", "aria-live": "polite" } });
      r.appendChild(el("header", { cls: "sg-header" }, [
        el("h1", {}, [el("span", { cls: "sg-brand", text: "studygroup" }), " the attention layer as a study group"]),
        el("p", { cls: "sg-model" }), this.status]));
      const layout = el("div", { cls: "sg-layout" }), below = el("div", { cls: "sg-views" });
      r.append(layout, below);
      this.tip = el("div", { cls: "sg-tip", attrs: { role: "tooltip", hidden: "" } });
      r.appendChild(this.tip);
      this.views = {};
      this.order = [];
      for (const v of views) {
        if (v.pageOnly && !this.api) continue;
        const made = (this.views[v.name] = v.make(this));
        this.order.push(made);
        if (made.section) (made.place === "layout" ? layout : below).appendChild(made.section);
      }
      const onEsc = (e) => { if (e.key === "Escape") this.clearSelection(); };
      // the page owns the whole document; a report or notebook view answers only inside itself
      (this.api ? document : this.root).addEventListener("keydown", onEsc);
    }

    /** Calls method `what` of every view that has it, in their order; the answers (promises among them). */
    tell(what, ...args) {
      return this.order.filter((v) => typeof v[what] === "function").map((v) => v[what](...args));
    }

    /** Sets the store's data from patch and redraws every view that draws any of its fields (its `draws`). */
    update(patch) {
      Object.assign(this.store.d, patch);
      const keys = Object.keys(patch);
      for (const v of this.order) if (v.draws && v.draws.some((k) => keys.includes(k))) v.draw();
    }

    /** Every view with a drawing of its own, drawn from the store. */
    drawAll() { for (const v of this.order) if (v.draws) v.draw(); }

    id(name) {
      if (!this.uid) this.uid = "sg" + Math.random().toString(36).slice(2, 10);
      return this.uid + "-" + name;
    }

    say(message, kind) {
      this.status.textContent = message || "";
      this.status.dataset.kind = kind || "";
      this.status.setAttribute("role", kind === "error" ? "alert" : "status");
    }

    // -- the commands the views share --
    submit() { return this.session.submit(); }
    /** Redraws every view for the silencing shown (session.js); resolves when the latest is drawn. */
    resilence() { return this.session.resilence(); }
    tokens() { return this.store.tokens(); }
    /** Shows head (l, h) in the head's card; false when it was not shown. */
    openHead(l, h, chosen) { return this.views.head.open(l, h, chosen); }
    /** For tests and curious readers: the open head's grid of `kind` as drawn, and the long text's map as shown. */
    displayed(kind) { return this.views.head.displayed(kind); }
    mapShown() { return this.views.map ? this.views.map.shown() : null; }

    select(j) {
      this.ui.selected = this.ui.selected === j ? null : j;
      this.tell("selected");
    }
    setHover(j) {
      if (this.ui.hover === j) return;
      this.ui.hover = j;
      this.tell("hovered");
    }
    clearSelection() {
      this.ui.selected = null; this.ui.hover = null;
      this.tip.hidden = true;
      this.tell("selected");
    }

    toggleMember(j) {
      const m = this.ui.members;
      if (m.has(j)) m.delete(j);
      else {
        if (!this.api) this.clearSilencing(); // a file holds one silencing at a time
        m.add(j);
      }
      this.afterSilence();
    }
    toggleHead(l, h) {
      if (l == null) return;
      const k = l + "." + h, s = this.ui.headsSilenced;
      if (s.has(k)) s.delete(k);
      else {
        if (!this.api) this.clearSilencing();
        s.add(k);
      }
      this.afterSilence();
    }
    clearSilencing() { this.ui.members.clear(); this.ui.headsSilenced.clear(); }

    /** The silencing changed: every view marks it at once, then the redraw asks for its numbers. */
    afterSilence() {
      this.tell("silenced");
      return this.resilence();
    }
  }

  Object.assign(sg, { Instance, View, views, view });
})(window.StudyGroup = window.StudyGroup || {});

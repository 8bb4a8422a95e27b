/* The model view: every head as a thumbnail, layer \u00d7 head, grouped by key/value head, the
 * decisive heads ranked; arrow keys move between heads. */
(function (sg) {
  "use strict";

  const { el, clear, sig4, isSilenced, silencedNote, divergingColor, drawLegend, sheetContext, drawInSheet, drawThumb, drawStrip, drawFlat, reasonLegend } = sg;
  const ROLES = sg.colours.roles; // colours and short labels, from views/colours.py

  /** A head's role as the server names it and its score ({name, score}); null where none is named
   * (no role scores, or a text too short to tell: the model view's roles_untold). */
  function namedRole(h) {
    return h.role ? { name: h.role, score: h.roles[h.role] } : null;
  }
  /** The role's colour, mixed with white as its score falls from 1 to 0. */
  function roleTint(role) {
    const c = [1, 3, 5].map((i) => parseInt(ROLES.colours[role.name].slice(i, i + 2), 16));
    const t = Math.min(1, Math.max(0, role.score)) * 0.8 + 0.2;
    return c.map((v) => Math.round(255 + t * (v - 255)));
  }

  /** Sets attribute name of node to value where it differs (an unchanged page is left alone). */
  function setAttr(node, name, value) {
    if (node.getAttribute(name) !== value) node.setAttribute(name, value);
  }
  /** A thumbnail's badge span.cls holding text (none where text is null): first in b where `first`,
   * else last; role: its data-role. */
  function badge(b, cls, text, first, role) {
    let s = b.querySelector("." + cls);
    if (text == null) { if (s) s.remove(); return; }
    if (!s) {
      s = el("span", { cls });
      if (first) b.prepend(s); else b.appendChild(s);
    }
    if (s.textContent !== text) s.textContent = text;
    if (role != null && s.dataset.role !== role) s.dataset.role = role;
  }

  class ModelView extends sg.View {
    constructor(page) {
      super(page);
      this.place = "layout";
      const mv = this.section = this.card("sg-modelview", "The model view", "Every head's weights on this text: one row per layer, one column per head. Click a head (or Tab to it and press Enter) to open it.");
      const grid = mv.appendChild(el("div", { cls: "sg-mv-grid" }));
      grid.style.padding = GRID_PAD + "px"; // room for the open head's ring and the ranks' badges where the grid scrolls
      if (window.ResizeObserver) new ResizeObserver(() => this.refit(grid)).observe(grid);
      mv.appendChild(el("div", { cls: "sg-mv-legend" }));
      mv.appendChild(el("div", { cls: "sg-save" }, [
        el("button", { attrs: { type: "button" }, text: "Save model view (PNG)", on: { click: () => sg.save.modelView(page) } }),
        el("button", { attrs: { type: "button" }, text: "Save data (JSON)", on: { click: () => sg.save.data(page) } })]));
      this.draws = ["modelView", "explanation"];
    }

    /** The silencing redraw's request: every head of the silenced run (its unchanged heads kept as drawn). */
    redraw(body, current) {
      if (!body) return null;
      return sg.api.modelView(this.api, body, this.d.modelView).then((mv) => { if (current()) this.page.update({ modelView: mv }); });
    }
    silenced() { this.paintThumbs(); }
    headOpened() { this.paintThumbs(); }
    notation() { this.draw(); }

    /** Draws every head's thumbnail. The model view's elements (a button per head over one canvas,
     * the sheet, that holds every thumbnail) are built once per model shape and kept: a redraw (a
     * silencing, the explanation's ranks, the orientation) sets the sheet's pixels and the buttons'
     * classes and words in place and makes no element. A thumbnail is drawn again only where what
     * it shows changed (its weights, which are the same array where they are the same numbers:
     * api.js's modelView; its masked cells, the colouring, the orientation, the size and the
     * screen's pixels): a silenced head leaves the layers up to its own as they are drawn.
     * The grid's __painted lists the heads ("layer.head") this call drew. */
    draw() {
      const grid = this.q(".sg-mv-grid");
      const scale = this.q(".sg-mv-legend canvas") || el("canvas", { attrs: { role: "img" } });  // kept, as the sheet is
      const legend = clear(this.q(".sg-mv-legend"));
      const mv = this.d.modelView, e = this.d.explanation;
      grid.dataset.silenced = String(isSilenced(mv));
      const shape = mv || (e && e.model);
      if (!shape) { clear(grid); grid.__thumbs = null; return; }
      const L = shape.n_layers, H = shape.n_heads, G = shape.n_kv_heads, size = thumbSize(H, G, roomOf(grid));
      const { thumbs, layout } = this.thumbGrid(grid, L, H, G, size);
      const sheet = sheetContext(grid.__sheet, layout.width, layout.height), drawn = grid.__drawn;
      if (sheet.blank) for (const row of drawn) row.fill(null);
      const rank = new Map(this.rankedHeads().map(([l, h], i) => [l + "." + h, i + 1]));
      const contrib = e ? e.contributions : null;
      const M = contrib ? Math.max(1e-9, ...contrib.flat().map(Math.abs)) : 1;
      const transpose = this.ui.notation === "columns";
      const hasRoles = Boolean(mv && mv.heads[0][0].roles);  // none for a long text's model view (rows "last")
      const untold = hasRoles && this.ui.colourBy === "role" ? mv.roles_untold : null;  // asked, but too short a text to tell
      const byRole = hasRoles && this.ui.colourBy === "role" && !untold;
      const group = H / G;
      const shared = mv && mv.mask_reasons ? JSON.stringify(mv.mask_reasons) : null, painted = [];
      for (let l = 0; l < L; l++) {
        for (let h = 0; h < H; h++) {
          const b = thumbs[l][h], g = Math.floor(h / group);
          const r = rank.get(l + "." + h), shown = Boolean(r && r <= sg.DECISIVE_SHOWN);  // numbered: the decisive ones listed
          const of = r ? " of " + rank.size : "";
          const role = mv ? namedRole(mv.heads[l][h]) : null;
          b.classList.toggle("sg-ranked", shown);
          b.classList.toggle("sg-top", Boolean(r && r <= 3));
          setAttr(b, "aria-label", "layer " + l + " head " + h + " (key/value head " + g + ")" + (r ? ", ranked " + r + of : ""));
          setAttr(b, "title", "layer " + l + ", head " + h + ", kv " + g + (r ? ", ranked " + r + of : "") + (contrib ? "; direct contribution " + sig4(contrib[l][h]) : "") +
            (role ? "; strongest role: " + role.name + " " + sig4(role.score) : ""));
          badge(b, "sg-rank", shown ? String(r) : null, true);
          badge(b, "sg-role", byRole && role ? ROLES.labels[role.name] : null, false, byRole && role ? role.name : null);
          const own = mv && mv.heads[l][h].mask_reasons, reasons = own || (mv && mv.mask_reasons) || null;
          const inputs = byRole ? ["role", role ? roleTint(role).join() : "none"] : !mv ? ["contribution", divergingColor(contrib[l][h], M).join()]
            : [mv.rows === "last" ? "strip" : "thumb", mv.heads[l][h].weights, own ? JSON.stringify(own) : shared];
          inputs.push(size, transpose, window.devicePixelRatio);
          if (!changed(drawn[l], h, inputs)) continue;  // its pixels are what it would draw
          painted.push(l + "." + h);
          drawInSheet(sheet.ctx, layout.x[h], layout.y[l], size, (ctx) => {
            if (byRole) drawFlat(ctx, role ? roleTint(role) : [236, 236, 236], size);
            else if (mv && mv.rows === "last") drawStrip(ctx, mv.heads[l][h].weights[0], reasons ? reasons[0] : null, size, transpose);
            else if (mv) drawThumb(ctx, mv.heads[l][h].weights, reasons, size, transpose);
            else drawFlat(ctx, divergingColor(contrib[l][h], M), size);
          });
        }
      }
      grid.__painted = painted;
      this.writeLegend(legend, scale, mv, e, { hasRoles, untold, byRole, transpose, M });
      this.paintThumbs();
    }

    /** The model view's legend: the colour-by choice, the roles' colours or the weights' scale, and what the numbers are. */
    writeLegend(legend, scale, mv, e, { hasRoles, untold, byRole, transpose, M }) {
      if (hasRoles) legend.appendChild(this.colourByChoice());
      if (untold) legend.appendChild(el("p", { cls: "sg-role-untold", text: "No head's role is named on this text, so the heads keep their weights: " + untold + "." }));
      if (byRole) {
        legend.appendChild(el("p", { cls: "sg-role-legend" }, Object.keys(ROLES.colours).map((name) => {
          const swatch = el("span", { cls: "sg-role-swatch" });
          swatch.style.background = ROLES.colours[name];
          return el("span", { cls: "sg-role-key", data: { role: name } }, [swatch, ROLES.labels[name] + ": " + name]);
        })));
        legend.appendChild(el("p", { cls: "sg-hint", text: "Colour: " + ROLES.legend + ". " +
          Object.keys(ROLES.colours).map((name) => name + ": " + ROLES.definitions[name]).join("; ") +
          ". Each score is a mean over the questions of this text." }));
      } else if (mv) {
        const reasons = thumbReasons(mv);
        drawLegend(scale, "weights", 1, reasons);
        legend.appendChild(scale);
        legend.appendChild(el("p", { cls: "sg-hint", text: "Weights on one absolute 0\u20131 scale in every head (" + sg.colours.weights.name + ")" +
          (reasons.length ? "; hatched, " + reasons.map((k) => reasonLegend(k)).join("; ") : "") + ". " +
          (transpose ? "Video orientation: columns are questions." : "Paper orientation: rows are questions.") +
          (mv.rows === "last" ? " Long text: each thumbnail is the last member's question only, as a strip " + (transpose ? "down" : "across") +
            " it (its answers from member 0 to " + (mv.tokens.length - 1) + "), each pixel the largest weight of the members it covers." : "") +
          silencedNote(mv) +
          " Numbered: the " + sg.DECISIVE_SHOWN + " most decisive heads, ranked by " + (e ? "the exact effect of silencing them (every head's rank: hover it)." : mv.ranked_by + ".") }));
      } else {
        legend.appendChild(el("p", { cls: "sg-hint", text: "Each head's direct contribution to the logit of " + e.predicted.token +
          " (" + sg.colours.contribution.legend + "; scale \u00b1" + M.toPrecision(3) + "). Numbered: the " + sg.DECISIVE_SHOWN + " most decisive heads, by the exact effect of silencing them." }));
      }
    }

    /** The model view's elements for L layers of H heads in G key/value groups, thumbnails size pixels
     * square, built where the grid holds none of this shape (else the ones it holds): one CSS grid of
     * the groups' labels, the heads' numbers, the layers' numbers, the sheet (one canvas under every
     * thumbnail) and a button over each thumbnail, thumbs[layer][head], in reading order (Tab's
     * order). layout (modelViewLayout): where each thumbnail lies on the sheet. */
    thumbGrid(grid, L, H, G, size) {
      const shape = [L, H, G, size].join(" ");
      if (grid.__thumbs && grid.dataset.shape === shape) return { thumbs: grid.__thumbs, layout: grid.__layout };
      clear(grid);
      const group = H / G, layout = modelViewLayout(L, H, G, size), at = (node, row, col) => { node.style.gridRow = row; node.style.gridColumn = col; return node; };
      grid.style.gridTemplateColumns = layout.columns;
      grid.style.gridTemplateRows = "auto auto repeat(" + L + ", " + (size + 2) + "px)";
      grid.style.setProperty("--sg-thumb", size + "px");
      for (let g = 0; g < G; g++) {
        grid.appendChild(at(el("span", { cls: "sg-mv-glabel", text: "kv " + g, attrs: { title: "query heads " + (g * group) + "\u2013" + (g * group + group - 1) + " share key/value head " + g } }),
          1, layout.col[g * group] + " / span " + group));
      }
      grid.appendChild(at(el("span", { cls: "sg-mv-layer", text: "layer" }), 2, 1));
      for (let h = 0; h < H; h++) grid.appendChild(at(el("span", { cls: "sg-mv-num", text: String(h) }), 2, layout.col[h]));
      const sheet = at(el("canvas", { cls: "sg-mv-sheet", attrs: { "aria-hidden": "true" } }), "3 / span " + L, "2 / -1");
      grid.appendChild(sheet);
      for (let g = 0; g < G; g++) grid.appendChild(at(el("span", { cls: "sg-mv-sep" }), "2 / -1", layout.col[g * group] - 2));
      const thumbs = [];
      for (let l = 0; l < L; l++) {
        grid.appendChild(at(el("span", { cls: "sg-mv-layer", text: String(l) }), 3 + l, 1));
        thumbs.push([]);
        for (let h = 0; h < H; h++) {
          const b = el("button", { cls: "sg-thumb", attrs: { type: "button" }, data: { layer: l, head: h },
            on: { click: () => this.openHead(l, h), keydown: (ev) => this.thumbKeys(ev, l, h, L, H) } });
          thumbs[l].push(grid.appendChild(at(b, 3 + l, layout.col[h])));
        }
      }
      Object.assign(grid, { __thumbs: thumbs, __layout: layout, __sheet: sheet, __drawn: thumbs.map((row) => row.map(() => null)) });
      grid.dataset.shape = shape;
      return { thumbs, layout };
    }

    /** Draws the thumbnails again where the grid's width now calls for another size than they have
     * (a window made narrower, a phone turned). */
    refit(grid) {
      const [, H, G, size] = (grid.dataset.shape || "").split(" ").map(Number);
      if (size && thumbSize(H, G, roomOf(grid)) !== size) this.draw();
    }

    /** "colour by: weight | role", for a model view whose heads carry role scores. */
    colourByChoice() {
      const by = this.ui.colourBy || "weight";
      const button = (v) => el("button", { attrs: { type: "button", "aria-pressed": String(by === v) }, data: { colourBy: v }, text: v,
        on: { click: () => { this.ui.colourBy = v; this.draw(); } } });
      return el("div", { cls: "sg-colour-by", attrs: { role: "group", "aria-label": "colour the heads by" } }, ["colour by: ", button("weight"), " | ", button("role")]);
    }

    thumbKeys(ev, l, h, L, H) {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      const m = moves[ev.key];
      if (!m) return;
      ev.preventDefault();
      const nl = Math.min(L - 1, Math.max(0, l + m[0])), nh = Math.min(H - 1, Math.max(0, h + m[1]));
      const b = this.q('.sg-thumb[data-layer="' + nl + '"][data-head="' + nh + '"]');
      if (b) b.focus();
    }

    paintThumbs() {
      for (const b of this.qa(".sg-thumb")) {
        const l = Number(b.dataset.layer), h = Number(b.dataset.head);
        b.classList.toggle("sg-open", l === this.ui.layer && h === this.ui.head);
        b.classList.toggle("sg-muted", this.ui.headsSilenced.has(l + "." + h));
      }
    }
  }

  sg.view("modelView", (page) => new ModelView(page));

  /** Whether a thumbnail's drawing inputs (an array of strings, numbers and the weights' array, compared
   * by identity) differ from drawn[h], those it was last drawn with; kept there for the next call when they do. */
  function changed(drawn, h, inputs) {
    const last = drawn[h];
    if (last && last.length === inputs.length && last.every((x, n) => x === inputs[n])) return false;
    drawn[h] = inputs;
    return true;
  }

  /** The thumbnails' side in pixels for H heads in G groups: 26 (18 past 12 heads), less where the
   * grid's width (pixels inside its padding; 0 where it is not laid out) holds fewer, down to
   * MIN_THUMB. Where even that is too wide (32 heads on a phone's screen), the grid scrolls
   * sideways inside the card (page.css). */
  const MIN_THUMB = 12, LAYER_COLUMN = 40; // (the layers' numbers' column, pixels)
  /** Pixels around the grid inside its box: the open head's ring (4) and a rank's badge (5) stay inside what it shows. */
  const GRID_PAD = 6;
  const roomOf = (grid) => Math.max(0, grid.clientWidth - 2 * GRID_PAD);
  function thumbSize(H, G, width) {
    const natural = H > 12 ? 18 : 26, room = Math.floor((width - LAYER_COLUMN - modelViewLayout(0, H, G, 0).width) / H); // (a side of 0: the fixed widths)
    return width > 0 ? Math.max(MIN_THUMB, Math.min(natural, room)) : natural;
  }

  /** Where the model view's parts lie, for L layers of H heads in G groups, thumbnails size pixels
   * square: the grid's columns (the layers' numbers, 40 pixels; then each group: a 1-pixel separator,
   * 5 pixels, a column size + 4 pixels wide a head, 5 pixels), col[h] the grid
   * column of head h (1-based), and on the sheet (which spans every column after the first and one
   * row size + 2 pixels high a layer) x[h], y[l] of each thumbnail's corner and the sheet's
   * width and height, in pixels. */
  function modelViewLayout(L, H, G, size) {
    const group = H / G, widths = [], col = [], x = [];
    let left = 0;
    const add = (w) => { widths.push(w); left += w; };
    for (let g = 0; g < G; g++) {
      add(1);
      add(5);
      for (let k = 0; k < group; k++) { col.push(widths.length + 2); x.push(left + 2); add(size + 4); }
      add(5);
    }
    const y = Array.from({ length: L }, (_, l) => l * (size + 2) + 1);
    return { columns: LAYER_COLUMN + "px " + widths.map((w) => w + "px").join(" "), col, x, y, width: left, height: L * (size + 2) };
  }

  /** The masked reasons (codes) the model view's thumbnails hold; the future alone for data without them. */
  function thumbReasons(mv) {
    const seen = new Set();
    const add = (grid) => { for (const row of grid || []) for (const k of row) if (k) seen.add(k); };
    add(mv.mask_reasons);
    for (const row of mv.heads) for (const h of row) add(h.mask_reasons);
    if (!mv.mask_reasons && mv.rows !== "last") seen.add(1);
    return [...seen].sort();
  }
})(window.StudyGroup = window.StudyGroup || {});

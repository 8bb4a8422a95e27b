/* The model view: every head as a thumbnail, layer \u00d7 head, grouped by key/value head, the
 * decisive heads ranked; arrow keys move between heads. */
(function (sg) {
  "use strict";

  const { el, clear, sig4, isSilenced, silencedNote, divergingColor, drawLegend, drawThumb, drawStrip, drawFlat, reasonLegend } = sg;
  const ROLES = sg.colours.roles; // colours and short labels, from views/colours.py

  /** A head's strongest role and its score ({name, score}); null without role scores. */
  function strongestRole(roles) {
    if (!roles) return null;
    let best = null;
    for (const name of Object.keys(ROLES.colours)) if (best == null || roles[name] > best.score) best = { name, score: roles[name] };
    return best;
  }
  /** The role's colour, mixed with white as its score falls from 1 to 0. */
  function roleTint(role) {
    const c = [1, 3, 5].map((i) => parseInt(ROLES.colours[role.name].slice(i, i + 2), 16));
    const t = Math.min(1, Math.max(0, role.score)) * 0.8 + 0.2;
    return c.map((v) => Math.round(255 + t * (v - 255)));
  }

  sg.mixin(class {
    rankedHeads() {
      const e = this.d.explanation, mv = this.d.modelView;
      if (e && e.heads.length) return e.heads.map((h) => [h.layer, h.head]);
      if (!mv) return [];
      const ranked = [];
      mv.heads.forEach((row) => row.forEach((h) => { if (h.rank != null) ranked[h.rank - 1] = [h.layer, h.head]; }));
      return ranked.filter(Boolean);
    }

    renderModelView() {
      const grid = clear(this.q(".sg-mv-grid"));
      const legend = clear(this.q(".sg-mv-legend"));
      const mv = this.d.modelView, e = this.d.explanation;
      grid.dataset.silenced = String(isSilenced(mv));
      const shape = mv || (e && e.model);
      if (!shape) return;
      const L = shape.n_layers, H = shape.n_heads, G = shape.n_kv_heads, size = H > 12 ? 18 : 26;
      const group = H / G;
      const rank = new Map(this.rankedHeads().map(([l, h], i) => [l + "." + h, i + 1]));
      const contrib = e ? e.contributions : null;
      const M = contrib ? Math.max(1e-9, ...contrib.flat().map(Math.abs)) : 1;
      const heading = el("div", { cls: "sg-mv-row sg-mv-heading" }, [el("span", { cls: "sg-mv-layer" })]);
      for (let g = 0; g < G; g++) {
        const gh = el("span", { cls: "sg-mv-group sg-mv-glabel", text: "kv " + g, attrs: { title: "query heads " + (g * group) + "\u2013" + (g * group + group - 1) + " share key/value head " + g } });
        gh.style.width = (group * (size + 4)) + "px";
        heading.appendChild(gh);
      }
      grid.appendChild(heading);
      const headNums = el("div", { cls: "sg-mv-row sg-mv-headnums" }, [el("span", { cls: "sg-mv-layer", text: "layer" })]);
      for (let g = 0; g < G; g++) {
        const gs = el("span", { cls: "sg-mv-group" });
        for (let k = 0; k < group; k++) { const s = el("span", { cls: "sg-mv-num", text: String(g * group + k) }); s.style.width = size + "px"; gs.appendChild(s); }
        headNums.appendChild(gs);
      }
      grid.appendChild(headNums);
      const transpose = this.ui.notation === "columns";
      const hasRoles = Boolean(mv && mv.heads[0][0].roles);  // none for a long text's model view (rows "last")
      const byRole = hasRoles && this.ui.colourBy === "role";
      for (let l = 0; l < L; l++) {
        const row = el("div", { cls: "sg-mv-row" }, [el("span", { cls: "sg-mv-layer", text: String(l) })]);
        for (let g = 0; g < G; g++) {
          const gs = el("span", { cls: "sg-mv-group" });
          for (let k = 0; k < group; k++) {
            const h = g * group + k;
            const r = rank.get(l + "." + h);
            const canvas = el("canvas", { attrs: { "aria-hidden": "true" } });
            const b = el("button", { cls: "sg-thumb" + (r ? " sg-ranked" : "") + (r && r <= 3 ? " sg-top" : ""),
              attrs: { type: "button", "aria-label": "layer " + l + " head " + h + " (key/value head " + g + ")" + (r ? ", decisive rank " + r : "") },
              data: { layer: l, head: h }, on: { click: () => this.openHead(l, h), keydown: (ev) => this.thumbKeys(ev, l, h, L, H) } }, [canvas]);
            if (r) b.appendChild(el("span", { cls: "sg-rank", text: String(r) }));
            const role = mv ? strongestRole(mv.heads[l][h].roles) : null;
            if (byRole) {
              drawFlat(canvas, role ? roleTint(role) : [236, 236, 236], size);
              if (role) b.appendChild(el("span", { cls: "sg-role", text: ROLES.labels[role.name], data: { role: role.name } }));
            } else if (mv && mv.rows === "last") {
              const reasons = mv.heads[l][h].mask_reasons || mv.mask_reasons || null;
              drawStrip(canvas, mv.heads[l][h].weights[0], reasons ? reasons[0] : null, size, transpose);
            } else if (mv) drawThumb(canvas, mv.heads[l][h].weights, mv.heads[l][h].mask_reasons || mv.mask_reasons || null, size, transpose);
            else drawFlat(canvas, divergingColor(contrib[l][h], M), size);
            b.title = "layer " + l + ", head " + h + ", kv " + g + (r ? ", rank " + r : "") + (contrib ? "; direct contribution " + sig4(contrib[l][h]) : "") +
              (role ? "; strongest role: " + role.name + " " + sig4(role.score) : "");
            gs.appendChild(b);
          }
          row.appendChild(gs);
        }
        grid.appendChild(row);
      }
      if (hasRoles) legend.appendChild(this.colourByChoice());
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
        const c = el("canvas", { attrs: { role: "img", "aria-label": "weight scale 0 to 1" } });
        const reasons = thumbReasons(mv);
        drawLegend(c, "weights", 1, reasons);
        legend.appendChild(c);
        legend.appendChild(el("p", { cls: "sg-hint", text: "Weights on one absolute 0\u20131 scale in every head (" + sg.colours.weights.name + ")" +
          (reasons.length ? "; hatched, " + reasons.map((k) => reasonLegend(k)).join("; ") : "") + ". " +
          (transpose ? "Video orientation: columns are questions." : "Paper orientation: rows are questions.") +
          (mv.rows === "last" ? " Long text: each thumbnail is the last member's question only, as a strip " + (transpose ? "down" : "across") +
            " it (its answers from member 0 to " + (mv.tokens.length - 1) + "), each pixel the largest weight of the members it covers." : "") +
          silencedNote(mv) +
          " Numbered: the decisive heads, ranked by " + (e ? "the exact effect of silencing them." : mv.ranked_by + ".") }));
      } else {
        legend.appendChild(el("p", { cls: "sg-hint", text: "Each head's direct contribution to the logit of " + e.predicted.token +
          " (" + sg.colours.contribution.legend + "; scale \u00b1" + M.toPrecision(3) + "). Numbered: the decisive heads, by the exact effect of silencing them." }));
      }
      this.paintThumbs();
    }

    /** "colour by: weight | role", for a model view whose heads carry role scores. */
    colourByChoice() {
      const by = this.ui.colourBy || "weight";
      const button = (v) => el("button", { attrs: { type: "button", "aria-pressed": String(by === v) }, data: { colourBy: v }, text: v,
        on: { click: () => { this.ui.colourBy = v; this.renderModelView(); } } });
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
  });

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

/* Drawing on canvases: a head's grid (scores or weights) with member labels, axis titles, the sums
 * that equal 1 and masked cells hatched by their reason; its legend; a head's thumbnail. */
(function (sg) {
  "use strict";

  const { short, MONO, SANS, rgb, isLight, weightColor, divergingColor } = sg;
  const VISIBLE = 0, FUTURE = 1, SILENCED = 2; // codes of study/mask_reasons.py

  /** The largest canvas every browser draws, in device pixels: a side (Firefox's limit; Chromium's
   * is 65,535, passed by a long text's one-row grid at a phone's 3 device pixels per pixel) and an area. */
  const MAX_SIDE = 32767, MAX_AREA = 1 << 27;

  /** Device pixels per pixel of a canvas w × h pixels: devicePixelRatio where that fits the limits
   * above, fewer where not (a little blurred, never blank). */
  const canvasRatio = (w, h) => Math.min(window.devicePixelRatio || 1, MAX_SIDE / w, MAX_SIDE / h, Math.sqrt(MAX_AREA / (w * h)));

  /** Sizes canvas to w × h pixels, canvasRatio(w, h) device pixels per pixel; its context scaled to pixels. */
  function sizeCanvas(canvas, w, h) {
    const r = canvasRatio(w, h);
    canvas.width = Math.max(1, Math.round(w * r));
    canvas.height = Math.max(1, Math.round(h * r));
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(r, 0, 0, r, 0, 0);
    return ctx;
  }

  /** The reason code of cell (r, c) of grid g: from g.reasons (the data's mask_reasons), or, for data
   * written without them, from g.mask: a later answer is the future, an earlier one a silenced member. */
  function cellReason(g, r, c) {
    if (g.reasons) return g.reasons[r][c];
    if (!((g.mask && !g.mask[r][c]) || g.matrix[r][c] == null)) return VISIBLE;
    const q = g.questionAxis === "rows" ? g.rows[r] : g.cols[c], a = g.questionAxis === "rows" ? g.cols[c] : g.rows[r];
    return a > q ? FUTURE : SILENCED;
  }

  /** The masked reasons (codes) that grid g holds, in code order. */
  function reasonsIn(g) {
    const seen = new Set();
    g.matrix.forEach((row, r) => row.forEach((_, c) => seen.add(cellReason(g, r, c))));
    seen.delete(VISIBLE);
    return [...seen].sort();
  }

  /** Draws g.matrix with member labels, axis titles, masked cells hatched, and (weights) the sums. */
  function drawGrid(canvas, g) {
    const ctx0 = canvas.getContext("2d");
    ctx0.font = "12px " + MONO;
    const label = (m) => short(g.tokens[m], 12);
    const widest = (ms) => Math.max(24, ...ms.map((m) => ctx0.measureText(label(m)).width));
    const rowLabelW = Math.min(110, widest(g.rows)) + 10;
    const colLabelH = Math.min(110, widest(g.cols)) + 10;
    const nR = g.rows.length, nC = g.cols.length;
    const title = 20;
    const left = title + rowLabelW, top = title + colLabelH;
    const sumW = g.sum === "right" ? 48 : 0, sumH = g.sum === "bottom" ? 34 : 0;
    const room = g.maxWidth - left - sumW - 6;
    const fit = (n, space) => Math.max(4, Math.min(34, Math.floor(space / n)));
    let cw = Math.min(fit(nC, room), fit(nR, 520)), ch = cw;
    if (nR <= 2) ch = Math.max(cw, 24); // one question (a long text's last row): a readable strip
    if (nC <= 2) cw = Math.max(ch, 24);
    const rowTitleY = top + Math.max(nR * ch / 2, 44); // the axis titles must fit even beside a thin strip
    const W = Math.max(left + nC * cw + sumW + 6, left + nC * cw / 2 + 72);
    const H = Math.max(top + nR * ch + sumH + 6, rowTitleY + 46);
    const ctx = sizeCanvas(canvas, W, H);
    canvas.__geom = { left, top, cw, ch, nR, nC };
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    const patterns = {};
    const pattern = (code) => patterns[code] || (patterns[code] = sg.hatch(ctx, code));
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    for (let r = 0; r < nR; r++) {
      for (let c = 0; c < nC; c++) {
        const v = g.matrix[r][c], code = cellReason(g, r, c);
        const masked = code !== VISIBLE;
        const x = left + c * cw, y = top + r * ch;
        let col = null;
        if (masked) ctx.fillStyle = pattern(code);
        else { col = g.kind === "scores" ? divergingColor(v, g.scale) : weightColor(v); ctx.fillStyle = rgb(col); }
        ctx.fillRect(x, y, cw, ch);
        if (!masked && cw >= 30 && ch >= 16) {
          ctx.fillStyle = isLight(col) ? "#111" : "#fff";
          ctx.font = "10px " + SANS;
          ctx.fillText(g.kind === "scores" ? v.toFixed(1) : v.toFixed(2), x + cw / 2, y + ch / 2);
        }
      }
    }
    ctx.strokeStyle = "#444"; ctx.lineWidth = 1;
    ctx.strokeRect(left - 0.5, top - 0.5, nC * cw + 1, nR * ch + 1);
    // member labels on both axes
    ctx.font = "12px " + MONO; ctx.fillStyle = "#222";
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    g.rows.forEach((m, r) => {
      if (ch < 13 && r % Math.ceil(13 / ch)) return; // labels no closer than 13 px
      ctx.font = (m === g.hover || m === g.selected ? "bold " : "") + "12px " + MONO;
      ctx.fillText(label(m), left - 6, top + r * ch + ch / 2);
    });
    g.cols.forEach((m, c) => {
      if (cw < 13 && c % Math.ceil(13 / cw)) return;
      ctx.save();
      ctx.translate(left + c * cw + cw / 2, top - 6);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.font = (m === g.hover || m === g.selected ? "bold " : "") + "12px " + MONO;
      ctx.fillText(label(m), 0, 0);
      ctx.restore();
    });
    // axis titles: which axis asks, which answers
    ctx.font = "italic 12px " + SANS; ctx.fillStyle = "#555"; ctx.textAlign = "center";
    ctx.fillText(g.colTitle, left + (nC * cw) / 2, 10);
    ctx.save(); ctx.translate(10, rowTitleY); ctx.rotate(-Math.PI / 2);
    ctx.fillText(g.rowTitle, 0, 0); ctx.restore();
    // the sums that equal 1, on the grid's edge
    if (g.sum) {
      ctx.font = "10px " + SANS; ctx.fillStyle = "#333";
      const sums = g.sum === "right" ? g.matrix.map((row) => row.reduce((a, b) => a + (b || 0), 0))
        : g.cols.map((_, c) => g.matrix.reduce((a, row) => a + (row[c] || 0), 0));
      if (g.sum === "right") {
        ctx.textAlign = "left";
        ctx.fillText("\u03a3 = 1", left + nC * cw + 6, top - 8);
        if (ch >= 11) sums.forEach((s, r) => ctx.fillText(s.toFixed(3), left + nC * cw + 6, top + r * ch + ch / 2));
        ctx.fillRect(left + nC * cw + 2, top, 1, nR * ch);
      } else {
        ctx.textAlign = "right";
        ctx.fillText("\u03a3 = 1", left - 6, top + nR * ch + 12);
        ctx.textAlign = "center";
        sums.forEach((s, c) => {
          if (cw >= 26) ctx.fillText(s.toFixed(2), left + c * cw + cw / 2, top + nR * ch + 12);
        });
        ctx.fillRect(left, top + nR * ch + 2, nC * cw, 1);
        ctx.fillStyle = "#555"; ctx.font = "italic 11px " + SANS;
        ctx.fillText("each column sums to 1", left + (nC * cw) / 2, top + nR * ch + 27);
      }
    }
    // the selected question and the hovered member
    const outline = (m, dashed) => {
      ctx.save();
      ctx.strokeStyle = dashed ? "#d62728" : "#000"; ctx.lineWidth = 2;
      if (dashed) ctx.setLineDash([4, 3]);
      const r = g.rows.indexOf(m), c = g.cols.indexOf(m);
      if (g.questionAxis === "rows" && r >= 0) ctx.strokeRect(left - 1, top + r * ch - 1, nC * cw + 2, ch + 2);
      if (g.questionAxis === "cols" && c >= 0) ctx.strokeRect(left + c * cw - 1, top - 1, cw + 2, nR * ch + 2);
      ctx.restore();
    };
    if (g.selected != null) outline(g.selected, false);
    if (g.hover != null && g.hover !== g.selected) outline(g.hover, true);
  }

  const SHORT_NAMES = { future: "future", silenced: "silenced", outside_window: "outside window" };
  const shortName = (code) => SHORT_NAMES[sg.reasonName(code)] || sg.reasonName(code);

  /** The colour scale of a grid of `kind` (±scale for scores), then one swatch per masked reason (codes). */
  function drawLegend(canvas, kind, scale, reasons) {
    const x0 = 8, w = 150, y = 4, h = 10, swatch = 14;
    const codes = reasons == null ? [FUTURE] : reasons;
    const ctx0 = canvas.getContext("2d");
    ctx0.font = "10px " + SANS;
    const widths = codes.map((k) => Math.max(swatch, ctx0.measureText(shortName(k)).width));
    const ctx = sizeCanvas(canvas, x0 + w + 14 + widths.reduce((a, b) => a + b + 12, 0), 38);
    for (let i = 0; i < w; i++) {
      const t = i / (w - 1);
      ctx.fillStyle = rgb(kind === "scores" ? divergingColor(2 * t - 1, 1) : weightColor(t));
      ctx.fillRect(x0 + i, y, 1, h);
    }
    ctx.strokeStyle = "#666"; ctx.strokeRect(x0 - 0.5, y - 0.5, w + 1, h + 1);
    ctx.font = "10px " + SANS; ctx.textBaseline = "top"; ctx.textAlign = "left";
    let x = x0 + w + 14;
    codes.forEach((k, n) => {
      ctx.fillStyle = sg.hatch(ctx, k); ctx.fillRect(x, y, swatch, h);
      ctx.strokeStyle = "#666"; ctx.strokeRect(x - 0.5, y - 0.5, swatch + 1, h + 1);
      ctx.fillStyle = "#333"; ctx.fillText(shortName(k), x, y + h + 3);
      x += widths[n] + 12;
    });
    const ticks = kind === "scores" ? [[0, "\u2212" + scale.toPrecision(3)], [0.5, "0"], [1, "+" + scale.toPrecision(3)]]
      : [[0, "0"], [0.5, "0.5"], [1, "1"]];
    for (const [t, s] of ticks) {
      ctx.textAlign = t === 0 ? "left" : t === 1 ? "right" : "center";
      ctx.fillText(s, x0 + t * w, y + h + 3);
    }
    canvas.dataset.reasons = codes.map(sg.reasonName).join(" ");
    canvas.setAttribute("aria-label", [sg.colours[kind === "scores" ? "scores" : "weights"].legend, ...codes.map(sg.reasonLegend)].join("; "));
  }

  /** The model view's sheet: one canvas w × h pixels that holds every thumbnail (one canvas, one
   * layer for the compositor, instead of one a head). Sized as sizeCanvas sizes it where it is not
   * that size yet (then blank: every thumbnail must be drawn again), else kept with its pixels.
   * Its context and whether it was blanked. */
  function sheetContext(canvas, w, h) {
    const r = canvasRatio(w, h);
    const kept = canvas.width === Math.max(1, Math.round(w * r)) && canvas.height === Math.max(1, Math.round(h * r)) &&
      canvas.style.width === w + "px" && canvas.style.height === h + "px";
    return { ctx: kept ? canvas.getContext("2d") : sizeCanvas(canvas, w, h), blank: !kept };
  }

  /** Draws one thumbnail, size × size pixels, at (x, y) pixels of the sheet: its square cleared, then
   * draw(ctx) with the context's origin at the square's corner (on a whole device pixel, so a cell
   * of whole pixels stays sharp; patterns start there too), scaled to pixels and clipped to the
   * square with its corners rounded by 2 pixels. */
  function drawInSheet(ctx, x, y, size, draw) {
    const r = ctx.getTransform().a, X = Math.round(x * r), Y = Math.round(y * r), S = Math.ceil(size * r);
    ctx.save();
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(X - 1, Y - 1, S + 2, S + 2); // (±1: the rounded corners' soft edge; thumbnails lie 4 pixels apart)
    ctx.setTransform(r, 0, 0, r, X, Y);
    ctx.beginPath();
    if (ctx.roundRect) ctx.roundRect(0, 0, size, size, 2); else ctx.rect(0, 0, size, size);
    ctx.clip();
    draw(ctx);
    ctx.restore();
  }

  /** A thumbnail of one head's weights (R, T), paper orientation (transposed for the video), on ctx
   * (drawInSheet's); masked cells by their reasons (R, T): hatched where a cell has room, else the
   * hatch's flat grey. */
  function drawThumb(ctx, weights, reasons, size, transpose) {
    const R = weights.length, C = weights[0].length;
    const nR = transpose ? C : R, nC = transpose ? R : C;
    const cw = size / nC, ch = size / nR, roomy = cw >= 4 && ch >= 4;
    if (!roomy) { drawCells(ctx, weights, reasons, size, transpose); return; }
    const patterns = {};
    for (let r = 0; r < nR; r++) {
      for (let c = 0; c < nC; c++) {
        const i = transpose ? c : r, j = transpose ? r : c;
        const code = reasons ? reasons[i][j] : (R > 1 && j > i ? FUTURE : VISIBLE); // data without reasons: causal
        if (code === VISIBLE) ctx.fillStyle = rgb(weightColor(weights[i][j]));
        else ctx.fillStyle = patterns[code] || (patterns[code] = sg.hatch(ctx, code));
        ctx.fillRect(c * cw, r * ch, cw + 0.5, ch + 0.5); // (+0.5: no seams between cells)
      }
    }
  }
  /** A thumbnail whose cells have no room for a hatch: one pixel a cell (masked ones the hatch's flat
   * grey), scaled to the square by the browser (whole pixels a cell where the cells are larger than a
   * pixel, mixed where smaller): one image a thumbnail instead of a fill per cell (500,000 at 43
   * members). The cells are written as whole RGBA words into one ImageData and one scratch canvas,
   * both kept while the thumbnails keep their shape. */
  function drawCells(ctx, weights, reasons, size, transpose) {
    const R = weights.length, C = weights[0].length;
    const nR = transpose ? C : R, nC = transpose ? R : C;
    if (!cellImage || cellImage.width !== nC || cellImage.height !== nR) {
      cellImage = new ImageData(nC, nR);
      scratch.width = nC; scratch.height = nR;
    }
    const px = new Uint32Array(cellImage.data.buffer), flat = thumbPixels().flat;
    for (let i = 0; i < R; i++) {
      const w = weights[i], why = reasons ? reasons[i] : null;
      for (let j = 0; j < C; j++) {
        const code = why ? why[j] : (R > 1 && j > i ? FUTURE : VISIBLE); // data without reasons: causal
        px[transpose ? j * nC + i : i * nC + j] = code === VISIBLE ? thumbPixel(w[j]) : flat;
      }
    }
    scratch.getContext("2d").putImageData(cellImage, 0, 0);
    const device = size * ctx.getTransform().a;
    ctx.imageSmoothingEnabled = nC > device || nR > device;
    ctx.drawImage(scratch, 0, 0, size, size);
  }
  const scratch = document.createElement("canvas"); // drawCells' image, copied at once into the sheet
  let cellImage = null; // drawCells' pixels (an ImageData of the scratch canvas's size)

  /** An opaque colour [r, g, b] as the Uint32 that holds its RGBA bytes in this machine's byte order. */
  const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  const pixel = (c) => (LITTLE ? ((255 << 24) | (c[2] << 16) | (c[1] << 8) | c[0]) : ((c[0] << 24) | (c[1] << 16) | (c[2] << 8) | 255)) >>> 0;
  /** weightColor(k / 1000) as a pixel for k in 0..1000 (the model view's weights have three decimals), and
   * the hatch's flat grey; made at the first thumbnail. */
  let pixels = null;
  function thumbPixels() {
    if (!pixels) {
      const thousandths = new Uint32Array(1001);
      for (let k = 0; k <= 1000; k++) thousandths[k] = pixel(weightColor(k / 1000));
      pixels = { thousandths, flat: pixel(sg.maskedFlat()) };
    }
    return pixels;
  }
  /** weightColor(w) as a pixel: from the table where w is exactly k / 1000. */
  function thumbPixel(w) {
    const k = Math.round(w * 1000);
    return k >= 0 && k <= 1000 && k / 1000 === w ? pixels.thousandths[k] : pixel(weightColor(w));
  }

  /** A long text's thumbnail on ctx (drawInSheet's): one question's weights (T,) (the last member's) as
   * a strip across the middle half of the square (down it, for the video's orientation), each device
   * pixel showing the LARGEST weight of the members it covers, so that a sharp weight is not lost; a
   * pixel whose members are all masked (reasons (T,)) gets the hatch's flat grey. */
  function drawStrip(ctx, row, reasons, size, transpose) {
    const m = ctx.getTransform(), W = Math.round(size * m.a), C = row.length, flat = rgb(sg.maskedFlat());
    ctx.setTransform(1, 0, 0, 1, m.e, m.f); // device pixels: one pixel, one bin
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, W);
    const edge = Math.round(W / 4), depth = W - 2 * edge;
    for (let x = 0; x < W; x++) {
      const [a, b] = stripBin(x, C, W);
      let best = -1;
      for (let j = a; j < b; j++) if (!reasons || reasons[j] === VISIBLE) best = Math.max(best, row[j]);
      ctx.fillStyle = best < 0 ? flat : rgb(weightColor(best));
      if (transpose) ctx.fillRect(edge, x, depth, 1); else ctx.fillRect(x, edge, 1, depth);
    }
  }
  /** The members [a, b) that pixel x of a strip W pixels long over C members covers (at least one each). */
  const stripBin = (x, C, W) => { const a = Math.floor(x * C / W); return [a, Math.max(a + 1, Math.floor((x + 1) * C / W))]; };

  /** A thumbnail of one colour on ctx (drawInSheet's). */
  function drawFlat(ctx, color, size) {
    ctx.fillStyle = rgb(color); ctx.fillRect(0, 0, size, size);
  }

  Object.assign(sg, { sizeCanvas, drawGrid, drawLegend, sheetContext, drawInSheet, drawThumb, drawStrip, stripBin, drawFlat, cellReason, reasonsIn, VISIBLE });
})(window.StudyGroup = window.StudyGroup || {});

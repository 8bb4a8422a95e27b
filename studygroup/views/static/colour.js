/* The colour scales of StudyGroup.colours (written by views/colours.py, the one source of every
 * view's colours) as functions, and the hatch that marks a cell nobody can hear, by its reason. */
(function (sg) {
  "use strict";

  const hex = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
  const WEIGHTS = sg.colours.weights.stops.map(hex); // sequential, colour-blind-safe, 0 → 1
  const SCORES = sg.colours.scores.stops.map(hex); // diverging, colour-blind-safe, centred on 0
  const MASKED = sg.colours.masked;

  /** The colour at t in [0, 1] of evenly spaced stops, linear in RGB (as views/colours.ramp). */
  function ramp(stops, t) {
    const x = Math.min(1, Math.max(0, t)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(x));
    const f = x - i;
    return stops[i].map((v, k) => Math.round(v + f * (stops[i + 1][k] - v)));
  }
  const weightColor = (w) => ramp(WEIGHTS, w);
  /** A signed value s on a scale symmetric around 0 that reaches ±M. */
  const divergingColor = (s, M) => ramp(SCORES, M > 0 ? 0.5 + 0.5 * s / M : 0.5);
  const rgb = (c) => "rgb(" + c.join(",") + ")";
  const isLight = (c) => 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 140;

  /** The reason (a code of study/mask_reasons.py) by name, and its legend. */
  const reasonName = (code) => (MASKED.reasons[code] || MASKED.reasons[1]).name;
  const reasonLegend = (code) => (MASKED.reasons[code] || MASKED.reasons[1]).legend;

  /** Draws the hatch of a masked cell's reason on a 2d context c over (0, 0, n, n): the face, then its lines. */
  function hatchTile(c, n, hatch) {
    c.fillStyle = MASKED.face; c.fillRect(0, 0, n, n);
    c.strokeStyle = MASKED.line; c.lineWidth = 1;
    c.beginPath();
    const up = () => { c.moveTo(0, n); c.lineTo(n, 0); c.moveTo(-1, 1); c.lineTo(1, -1); c.moveTo(n - 1, n + 1); c.lineTo(n + 1, n - 1); };
    const down = () => { c.moveTo(0, 0); c.lineTo(n, n); c.moveTo(n - 1, -1); c.lineTo(n + 1, 1); c.moveTo(-1, n - 1); c.lineTo(1, n + 1); };
    if (hatch === "/" || hatch === "x") up();
    if (hatch === "\\" || hatch === "x") down();
    c.stroke();
  }

  /** A canvas pattern for a masked cell with this reason's code (the same hatch as the figures'). */
  function hatch(ctx, code) {
    const p = document.createElement("canvas");
    p.width = p.height = 6;
    hatchTile(p.getContext("2d"), 6, (MASKED.reasons[code] || MASKED.reasons[1]).hatch);
    return ctx.createPattern(p, "repeat");
  }
  /** The flat colour of a masked cell where a pattern cannot be drawn (a thumbnail's single pixel). */
  const maskedFlat = () => hex(MASKED.line).map((v, k) => Math.round((v + hex(MASKED.face)[k]) / 2));

  Object.assign(sg, { weightColor, divergingColor, rgb, isLight, hatch, hatchTile, maskedFlat, reasonName, reasonLegend });
})(window.StudyGroup = window.StudyGroup || {});

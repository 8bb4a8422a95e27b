/* studygroup's page script, part 1 of views/assets.SCRIPTS: formatting and DOM helpers.
 *
 * The script is one namespace, window.StudyGroup, that small plain files fill in a listed order
 * (the page, the report and the notebook join them the same way). Text from the model or the user
 * is only ever set as textContent (or drawn on a canvas), never parsed as HTML.
 */
(function (sg) {
  "use strict";

  /** An element: opts.cls, opts.text (as text), opts.attrs, opts.data, opts.on; children nodes or strings. */
  function el(tag, opts, children) {
    const node = document.createElement(tag);
    const o = opts || {};
    if (o.cls) node.className = o.cls;
    if (o.text != null) node.textContent = String(o.text);
    for (const [k, v] of Object.entries(o.attrs || {})) if (v != null) node.setAttribute(k, String(v));
    for (const [k, v] of Object.entries(o.data || {})) node.dataset[k] = String(v);
    for (const [k, f] of Object.entries(o.on || {})) node.addEventListener(k, f);
    for (const c of children || []) if (c) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return node;
  }
  const clear = (node) => { while (node.firstChild) node.removeChild(node.firstChild); return node; };
  const MARKS = new Set(["\u2423", "\u21b5", "\u21e5", "\u240d"]); // ␣ ↵ ⇥ ␍
  const MONO = 'ui-monospace, "SFMono-Regular", Menlo, Consolas, "Liberation Mono", monospace';
  /** The decisive heads listed under the story and numbered in the model view: the first this many. */
  const DECISIVE_SHOWN = 8;
  const SANS = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';

  /** A member's text as nodes, with the marks for spaces and newlines set apart. */
  function tokenNode(token, cls) {
    const span = el("span", { cls: "sg-tok" + (cls ? " " + cls : "") });
    let run = "";
    for (const ch of String(token)) {
      if (MARKS.has(ch)) {
        if (run) span.appendChild(document.createTextNode(run));
        run = "";
        span.appendChild(el("span", { cls: "sg-ws", text: ch }));
      } else run += ch;
    }
    if (run) span.appendChild(document.createTextNode(run));
    return span;
  }
  const short = (t, n) => { const s = Array.from(String(t)); return s.length > n ? s.slice(0, n - 1).join("") + "\u2026" : s.join(""); };
  /** x with d decimals by studygroup/formats.py's rules: rounded half away from zero (toFixed's rounding), a
   * value that rounds to zero reads "0.00" (never "-0.00"), the minus "-", "nan", "inf", "-inf"; from 1e21 on
   * toFixed writes the shortest exponent form ("1e+21"), as Python's repr does. */
  function fixed(x, d) {
    const v = Number(x);
    if (Number.isNaN(v)) return "nan";
    if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
    const text = v.toFixed(d);
    return /^-[0.]*$/.test(text) ? text.slice(1) : text;
  }
  /** x with its sign and d decimals; a value that rounds to zero reads "+0.00". */
  const signed = (x, d) => { const t = fixed(x, d); return t[0] === "-" || t === "nan" ? t : "+" + t; };
  /** Probabilities as percentages: one decimal under 10%, none above; one under 1 is never "100%"
   *  (one decimal from 99.5%, and ">99.9%" where that too would round to 100), as formats.percent. */
  const percent = (p) => {
    const tenths = fixed(100 * p, 1);
    if (p >= 0.995 && p < 1) return (tenths === "100.0" ? ">99.9" : tenths) + "%";
    return fixed(100 * p, p < 0.1 ? 1 : 0) + "%";
  };
  const sig4 = (x) => (x == null ? "\u2014" : Number(x).toPrecision(4));

  /** Whether a view (model view or head) was computed with something silenced. */
  const isSilenced = (d) => Boolean(d && ((d.silenced_members || []).length || (d.silenced_heads || []).length));

  /** How a mean or resample ablation takes a member and a head out, as the CLI words it (studygroup.study.story). */
  const TAKEN_OUT = { mean: ["its key and value replaced by their mean", "its output replaced by its mean output"],
    resample: ["its key and value taken from the other text", "its output taken from the other text"] };

  /** " Silenced in this run: …" for a view computed with something silenced, else "" (as the CLI words
   * it); " Taken out by mean ablation in this run: …" where the view's `ablation` is not zero. */
  function silencedNote(d) {
    if (!isSilenced(d)) return "";
    const [member, head] = d.ablation ? TAKEN_OUT[d.ablation.kind] : ["nobody hears its answer (masked, as the future is)", "writes nothing"];
    const parts = (d.silenced_members || []).map((j) => "member " + j + (d.tokens ? " (" + d.tokens[j] + ")" : "") + ": " + member);
    for (const [a, b] of d.silenced_heads || []) parts.push("layer " + a + " head " + b + ": " + head);
    return (d.ablation ? " Taken out by " + d.ablation.kind + " ablation in this run: " : " Silenced in this run: ") + parts.join("; ") + "." +
      (d.taken_out ? " " + d.taken_out : "");
  }

  /** Whether a model of this shape ({n_layers, n_heads}) has head [l, h]. */
  const hasHead = (shape, [l, h]) => l < shape.n_layers && h < shape.n_heads;

  Object.assign(sg, { el, clear, MONO, SANS, DECISIVE_SHOWN, tokenNode, short, fixed, percent, sig4, signed, isSilenced, silencedNote, hasHead });
})(window.StudyGroup = window.StudyGroup || {});

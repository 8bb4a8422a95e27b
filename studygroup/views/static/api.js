/* The client of the web API (docs/web-api.md): JSON in, JSON out, one clear error message. */
(function (sg) {
  "use strict";

  /** POST body as JSON to base + path; the answer's JSON. A busy server (503) is asked again, up to 3 times. */
  async function post(base, path, body) {
    for (let attempt = 0; ; attempt++) {
      const res = await fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      let data = null;
      try { data = await res.json(); } catch (e) { data = null; }
      if (res.status === 503 && attempt < 3) { await new Promise((ok) => setTimeout(ok, 2000 * (attempt + 1))); continue; }
      if (!res.ok) throw new Error((data && data.error) || "the server answered " + res.status);
      return data;
    }
  }

  /** The model's shape, the server's limits and the default text (GET base/info). */
  async function info(base) {
    const res = await fetch(base + "/info");
    return res.json();
  }

  /** The bytes that base64 text stands for (the browser's own decoder where it has one). */
  function bytes(base64) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(base64);
    const text = atob(base64), out = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
    return out;
  }

  /** The model view (POST base/model_view) with its thumbnails sent packed (`packed: true`: whole
   * thousandths as little-endian uint16 in base64, about half the lists' bytes and no number to
   * parse per weight; a causal map's lower triangle only, where `triangle`) and unpacked into each
   * head's weights [row][column], as the lists give them: k / scale is the double nearest the
   * three decimals, as JSON's "0.123" reads, and a cell past the triangle is 0.
   * shown: the model view the page shows now (of the same text), or null. A head whose thousandths
   * equal the shown one's keeps the shown one's weights (the same array: model_view.js then leaves
   * its thumbnail as drawn), and a row equal to the shown one's keeps that row. */
  async function modelView(base, body, shown = null) {
    const mv = await post(base, "/model_view", { ...body, packed: true });
    const p = mv.packed_weights, [L, H, R, T] = p.shape, triangle = Boolean(p.triangle);
    const n = triangle ? T * (T + 1) / 2 : R * T; // numbers a head
    const k = uint16(bytes(p.base64), L * H * n);
    const old = shown && shown[THOUSANDTHS];
    const same = old && old.triangle === triangle && old.k.length === k.length && shown.tokens.length === mv.tokens.length;
    for (let l = 0, at = 0; l < L; l++) for (let h = 0; h < H; h++, at += n) {
      const before = same ? shown.heads[l][h].weights : null;
      mv.heads[l][h].weights = before && equalRange(k, old.k, at, n) ? before : unpackRows(k, at, R, T, triangle, p.scale, before, same ? old.k : null);
    }
    delete mv.packed_weights;
    Object.defineProperty(mv, THOUSANDTHS, { value: { k, triangle } }); // not enumerable: the saved JSON holds the weights only
    return mv;
  }
  /** Where a model view unpacked by `modelView` keeps its thumbnails' thousandths ({k: uint16, triangle}). */
  const THOUSANDTHS = Symbol("thousandths");

  /** The n little-endian uint16 numbers in raw (bytes): a view of them on a little-endian machine. */
  const LITTLE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  function uint16(raw, n) {
    if (LITTLE && raw.byteOffset % 2 === 0 && raw.byteLength === 2 * n) return new Uint16Array(raw.buffer, raw.byteOffset, n);
    const k = new Uint16Array(n);
    for (let i = 0, at = 0; i < n; i++, at += 2) k[i] = raw[at] | (raw[at + 1] << 8);
    return k;
  }

  /** Whether a and b hold the same numbers at [at, at + n). */
  function equalRange(a, b, at, n) {
    for (let i = at; i < at + n; i++) if (a[i] !== b[i]) return false;
    return true;
  }
  /** One head's rows [i][j] = k[…] / scale from k[at], each row T numbers (row i: its first i + 1
   * where `triangle`, the rest 0); a row equal to before's (whose thousandths are old's at the same
   * place) is before's row. */
  function unpackRows(k, at, R, T, triangle, scale, before, old) {
    const rows = new Array(R);
    for (let i = 0, a = at; i < R; i++) {
      const sent = triangle ? i + 1 : T;
      if (before && equalRange(k, old, a, sent)) rows[i] = before[i];
      else {
        const row = new Array(T);
        for (let j = 0; j < sent; j++) row[j] = k[a + j] / scale;
        for (let j = sent; j < T; j++) row[j] = 0;
        rows[i] = row;
      }
      a += sent;
    }
    return rows;
  }

  /** A head (POST base/head) with its vectors sent packed (`packed: true`: float32 little-endian in
   * base64) and unpacked into lists [row][column] of the same numbers, as the lists give them. */
  async function head(base, body) {
    const d = await post(base, "/head", { ...body, packed: true });
    for (const [name, p] of Object.entries(d.packed_vectors || {})) {
      const x = new DataView(bytes(p.base64).buffer), [n, m] = p.shape, rows = new Array(n);
      for (let i = 0, at = 0; i < n; i++) {
        const row = new Array(m);
        for (let j = 0; j < m; j++, at += 4) row[j] = x.getFloat32(at, true);
        rows[i] = row;
      }
      d[name] = rows;
    }
    delete d.packed_vectors;
    return d;
  }

  sg.api = { post, info, modelView, head };
})(window.StudyGroup = window.StudyGroup || {});

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

  /** The bytes that base64 text stands for. */
  function bytes(base64) {
    const text = atob(base64), out = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
    return out;
  }

  /** The model view (POST base/model_view) with its thumbnails sent packed (`packed: true`: whole
   * thousandths as little-endian uint16 in base64, about half the lists' bytes and no number to
   * parse per weight) and unpacked into each head's weights [row][column], as the lists give them:
   * k / scale is the double nearest the three decimals, as JSON's "0.123" reads. */
  async function modelView(base, body) {
    const mv = await post(base, "/model_view", { ...body, packed: true });
    const p = mv.packed_weights, [L, H, R, T] = p.shape, k = bytes(p.base64);
    let at = 0;
    for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
      const rows = new Array(R);
      for (let i = 0; i < R; i++) {
        const row = new Array(T);
        for (let j = 0; j < T; j++, at += 2) row[j] = (k[at] | (k[at + 1] << 8)) / p.scale;
        rows[i] = row;
      }
      mv.heads[l][h].weights = rows;
    }
    delete mv.packed_weights;
    return mv;
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

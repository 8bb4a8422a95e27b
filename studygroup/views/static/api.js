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

  sg.api = { post, info };
})(window.StudyGroup = window.StudyGroup || {});

/* Saving (the views' buttons call these): the open head and the model view as PNG, the view's data as JSON. */
(function (sg) {
  "use strict";

  const { el } = sg;

  function download(name, href) {
    const a = el("a", { attrs: { href, download: name } });
    document.body.appendChild(a); a.click(); a.remove();
  }
  function downloadJSON(name, data) {
    const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
    download(name, url);
    setTimeout(() => URL.revokeObjectURL(url), 5000);
  }

  sg.save = {
    /** The page's data as JSON. */
    data(page) { downloadJSON("studygroup.json", page.store.d); },

    /** The open head's two grids side by side as PNG. */
    head(page) {
      const a = page.q(".sg-grid-scores"), b = page.q(".sg-grid-weights"), ui = page.store.ui;
      if (!page.views.head.currentHead()) return;
      const out = document.createElement("canvas");
      out.width = a.width + b.width + 20; out.height = Math.max(a.height, b.height);
      const ctx = out.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, out.width, out.height);
      ctx.drawImage(a, 0, 0); ctx.drawImage(b, a.width + 20, 0);
      download("head-L" + ui.layer + "-H" + ui.head + "-" + ui.notation + ".png", out.toDataURL("image/png"));
    },

    /** Every thumbnail of the model view, where it is drawn (its sheet), as PNG on white. */
    modelView(page) {
      const sheet = page.q(".sg-mv-sheet");
      if (!sheet) return;
      const out = document.createElement("canvas");
      out.width = sheet.width; out.height = sheet.height;
      const ctx = out.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, out.width, out.height);
      ctx.drawImage(sheet, 0, 0);
      download("model-view.png", out.toDataURL("image/png"));
    },
  };
})(window.StudyGroup = window.StudyGroup || {});

/* The entry points: StudyGroup.mount(root, {api}) asks the web API (the page);
 * StudyGroup.mount(root, {data}) shows data embedded in the page (report, notebook) and needs no
 * network at all. The page's roots (.sg-root[data-sg-api]) mount themselves. */
(function (sg) {
  "use strict";

  const instances = [];
  function mount(root, opts) {
    const inst = new sg.Instance(root, opts || {});
    instances.push(inst);
    return inst;
  }
  Object.assign(sg, { mount, instances });

  function auto() {
    for (const root of document.querySelectorAll(".sg-root[data-sg-api]")) {
      if (!root.studygroup) mount(root, { api: root.dataset.sgApi });
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", auto);
  else auto();
})(window.StudyGroup = window.StudyGroup || {});

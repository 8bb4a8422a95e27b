/* The entry points: StudyGroup.mount(root, {api}) asks the web API (the page);
 * StudyGroup.mount(root, {data}) shows data embedded in the page (report, notebook) and needs no
 * network at all. The page's roots (.sg-root[data-sg-api]) mount themselves. */
(function (sg) {
  "use strict";

  const instances = [];
  function mount(root, opts) {
    const inst = new sg.Instance(root, opts || {});
    if (inst.api) { // the views of their own and Lesson mode are the page's (they ask the API)
      mountViews(inst);
      inst.buildLesson();
    }
    instances.push(inst);
    return inst;
  }
  /** Every registered view's card, in their order, in one box under the layout (inst.views[name]: each view). */
  function mountViews(inst) {
    const box = sg.el("div", { cls: "sg-views" });
    inst.views = {};
    for (const v of sg.views) box.appendChild((inst.views[v.name] = v.make(inst)).section);
    inst.q(".sg-layout").after(box);
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

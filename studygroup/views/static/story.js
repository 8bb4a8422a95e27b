/* The story: the sentences of `explain`, with the members they quote as chips; the decisive heads. */
(function (sg) {
  "use strict";

  const { el, clear, tokenNode, signed } = sg;

  sg.mixin(class {
    renderStory() {
      const box = clear(this.q(".sg-sentences"));
      const dec = clear(this.q(".sg-decisive"));
      const e = this.d.explanation, cmp = this.d.comparison;
      if (!e) { box.appendChild(el("p", { cls: "sg-hint", text: this.api ? "The story comes when the group's decision has been traced." : "" })); return; }
      const tokens = e.tokens;
      for (const s of cmp ? cmp.story : []) box.appendChild(this.sentence(s, tokens));
      if (e.story_parts) for (const parts of e.story_parts) box.appendChild(this.partsSentence(parts, tokens));
      else for (const s of e.story) box.appendChild(this.sentence(s, tokens));
      if (!e.heads.length) return;
      dec.appendChild(el("h3", { text: "Decisive heads" }));
      const every = e.heads[0].silence_effect != null;  // past 512 members: the last position only
      const name = every ? "silence_effect" : "silence_effect_last_position";
      dec.appendChild(el("p", { cls: "sg-hint", text: name + ": change in log p(" + e.predicted.token + ") with the head's write zeroed " +
        (every ? "at every position" : "at the last position only") + ". Measured one at a time: " + e.heads_silenced + "." }));
      const list = el("ol", { cls: "sg-declist" });
      for (const h of e.heads.slice(0, 8)) {
        list.appendChild(el("li", {}, [el("button", { attrs: { type: "button" }, on: { click: () => this.openHead(h.layer, h.head) } },
          ["layer " + h.layer + " head " + h.head + " (kv " + h.kv_head + "): " + signed(every ? h.silence_effect : h.silence_effect_last_position, 3)])]));
      }
      dec.appendChild(list);
    }

    /** A member's chip: selects member j (the right one when a word repeats). */
    storyChip(j, token) {
      return el("button", { cls: "sg-storychip", attrs: { type: "button", title: "member " + j }, data: { index: j },
        on: { click: () => this.select(j), mouseenter: () => this.setHover(j), mouseleave: () => this.setHover(null) } }, [tokenNode(token)]);
    }

    /** A sentence of explain's story_parts: {text}, {member} as a chip, {value, field} with its JSON path as a title. */
    partsSentence(parts, tokens) {
      const p = el("p");
      for (const piece of parts) {
        if (piece.member != null) p.appendChild(this.storyChip(piece.member, tokens[piece.member]));
        else if (piece.field != null) p.appendChild(el("span", { cls: "sg-storyvalue", attrs: { title: piece.field }, text: piece.text }));
        else p.appendChild(document.createTextNode(piece.text));
      }
      return p;
    }

    /** A story sentence with the quoted members as chips that highlight. */
    sentence(s, tokens) {
      const p = el("p");
      const re = /\u201c([^\u201d]*)\u201d/g;
      let last = 0, m;
      while ((m = re.exec(s)) !== null) {
        if (m.index > last) p.appendChild(document.createTextNode(s.slice(last, m.index)));
        const after = s.slice(re.lastIndex);
        const named = /^ \(member (\d+)/.exec(after);
        let j = named ? Number(named[1]) : tokens.lastIndexOf(m[1]);
        if (j >= 0 && tokens[j] === m[1]) {
          p.appendChild(this.storyChip(j, m[1]));
        } else {
          p.appendChild(document.createTextNode("\u201c"));
          p.appendChild(tokenNode(m[1], "sg-quoted"));
          p.appendChild(document.createTextNode("\u201d"));
        }
        last = re.lastIndex;
      }
      if (last < s.length) p.appendChild(document.createTextNode(s.slice(last)));
      return p;
    }
  });
})(window.StudyGroup = window.StudyGroup || {});

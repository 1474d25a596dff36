// flashfsm ui: live updates over server-sent events. No build step, no inline script.
"use strict";
(function () {
  const body = document.body;
  const feed = body.dataset.feed;
  const live = document.getElementById("live");
  if (!feed || !window.EventSource) return;
  const source = new EventSource(feed);
  source.onopen = () => live && live.classList.add("on");
  source.onerror = () => live && live.classList.remove("on");

  function fragment(html, tag) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return tag ? t.content.querySelector(tag) : t.content;
  }

  if (body.dataset.page === "runs") {
    const rows = new Map();
    document.querySelectorAll("table.streams tbody tr").forEach((tr) => rows.set(tr.dataset.stream, tr));
    const news = document.getElementById("news");
    source.addEventListener("change", (msg) => {
      const change = JSON.parse(msg.data);
      const old = rows.get(change.key);
      if (!old) {
        if (news) news.hidden = false;
        return;
      }
      const tr = fragment("<table><tbody>" + change.row + "</tbody></table>", "tr");
      tr.classList.add("flash");
      old.replaceWith(tr);
      rows.set(change.key, tr);
    });
    return;
  }

  // a stream's page: append its new events, refresh what changes and the picture
  const events = document.getElementById("events");
  const part = document.getElementById("live-part");
  const picture = document.getElementById("picture");
  let pending = null;
  function refresh() {
    if (pending) return;
    pending = setTimeout(() => {
      pending = null;
      fetch(location.pathname + "?part=live", { credentials: "same-origin" })
        .then((r) => (r.ok ? r.text() : null))
        .then((html) => {
          if (html !== null && part) part.replaceChildren(fragment(html));
        });
      if (picture) {
        const url = new URL(picture.src);
        url.searchParams.set("v", String(Date.now()));
        picture.src = url.toString();
      }
    }, 500);
  }
  source.addEventListener("change", (msg) => {
    const change = JSON.parse(msg.data);
    for (const row of change.event_rows || []) {
      const tr = fragment("<table><tbody>" + row + "</tbody></table>", "tr");
      if (events && tr && !document.getElementById(tr.id)) events.appendChild(tr);
    }
    refresh();
  });
  setInterval(refresh, 5000); // armed rules' time left moves without events
})();

// flashfsm ui: live updates over server-sent events. No build step, no inline script.
// The feed first says the index's version ("hello"): when it is not the one the page was
// rendered at, the page fetches what it missed before following the changes as they come.
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
  function rowsOf(html) {
    return Array.from(fragment("<table><tbody>" + html + "</tbody></table>").querySelectorAll("tr"));
  }
  function part(params) {
    const url = new URL(location.href);
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
    return fetch(url.toString(), { credentials: "same-origin" }).then((r) => (r.ok ? r.text() : null));
  }
  function onHello(handler) {
    source.addEventListener("hello", (msg) => {
      const version = JSON.parse(msg.data).version;
      if (String(version) !== body.dataset.version) handler();
      body.dataset.version = String(version);
    });
  }

  // run `task` once, `ms` after the first call since it last ran (calls between join it)
  function debounced(task, ms) {
    let timer = null;
    return () => {
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        task();
      }, ms);
    };
  }

  if (body.dataset.page === "runs") {
    const tbody = document.querySelector("table.streams tbody");
    const rows = new Map();
    const index = () => {
      rows.clear();
      tbody.querySelectorAll("tr:not(.child)").forEach((tr) => rows.set(tr.dataset.stream, tr));
    };
    index();

    // a run row opens to its attempts' rows, nested under it (fetched, then kept current)
    const expanded = new Set();
    const childOf = new Map(); // an attempt row's key -> its run row's key
    function closeKids(key) {
      tbody.querySelectorAll("tr.child").forEach((tr) => {
        if (tr.dataset.parent === key) {
          childOf.delete(tr.dataset.stream);
          tr.remove();
        }
      });
    }
    function openKids(key) {
      const tr = rows.get(key);
      const link = tr && tr.querySelector("td.name a");
      if (!link) return;
      const name = decodeURIComponent(new URL(link.href).pathname.slice(3));
      const url = new URL("/", location.href);
      url.searchParams.set("part", "attempts");
      url.searchParams.set("run", name);
      fetch(url.toString(), { credentials: "same-origin" }).then((r) => (r.ok ? r.text() : null)).then((html) => {
        const run = rows.get(key);
        if (html === null || !run || !expanded.has(key)) return;
        closeKids(key);
        const kids = rowsOf(html);
        for (const kid of kids) {
          kid.dataset.parent = key;
          childOf.set(kid.dataset.stream, key);
        }
        run.after(...kids);
        const button = run.querySelector("button.attempts");
        if (button) {
          button.setAttribute("aria-expanded", "true");
          button.textContent = button.textContent.replace("▸", "▾");
        }
      });
    }
    tbody.addEventListener("click", (event) => {
      const button = event.target.closest("button.attempts");
      if (!button) return;
      const key = button.closest("tr").dataset.stream;
      if (expanded.has(key)) {
        expanded.delete(key);
        closeKids(key);
        button.setAttribute("aria-expanded", "false");
        button.textContent = button.textContent.replace("▾", "▸");
      } else {
        expanded.add(key);
        openKids(key);
      }
    });
    // the list as the server filters, sorts and pages it, and its count line (how many,
    // their bill): `withRows` puts the rows in place too (a new stream joins where it sorts)
    function fetchList(withRows) {
      const url = new URL(location.href);
      url.searchParams.set("part", "rows");
      fetch(url.toString(), { credentials: "same-origin" }).then((r) => {
        if (!r.ok) return;
        const counts = JSON.parse(r.headers.get("X-Flashfsm-Counts") || "{}");
        r.text().then((html) => {
          if (withRows) {
            tbody.replaceChildren(...rowsOf(html));
            childOf.clear();
            index();
            expanded.forEach(openKids);
          }
          for (const [key, id] of [["shown", "shown-count"], ["total", "total-count"], ["bill", "shown-bill"]]) {
            const el = document.getElementById(id);
            if (el && typeof counts[key] === "string") el.textContent = counts[key];
          }
        });
      });
    }
    const reload = debounced(() => fetchList(true), 500);
    const recount = debounced(() => fetchList(false), 1000);
    onHello(reload);
    source.addEventListener("change", (msg) => {
      const change = JSON.parse(msg.data);
      if (childOf.has(change.key)) openKids(childOf.get(change.key)); // its run's attempts again
      const old = rows.get(change.key);
      if (!old) {
        reload();
        return;
      }
      const [tr] = rowsOf(change.row);
      tr.classList.add("flash");
      old.replaceWith(tr);
      rows.set(change.key, tr);
      if (expanded.has(change.key)) openKids(change.key);
      recount();
    });
    return;
  }

  if (body.dataset.page === "costs" || body.dataset.page === "fleet") {
    // the whole content again, at most once a second while the store changes (the fleet's
    // leases and heartbeats also age without an event: every 5 s besides)
    const main = document.querySelector("main");
    const reload = debounced(() => {
      part({ part: "body" }).then((html) => {
        if (html !== null) main.replaceChildren(fragment(html));
      });
    }, 1000);
    onHello(reload);
    source.addEventListener("change", reload);
    if (body.dataset.page === "fleet") setInterval(reload, 5000);
    return;
  }

  // a stream's page: append its new events, refresh what changes and the picture
  const events = document.getElementById("events");
  const livePart = document.getElementById("live-part");
  const picture = document.getElementById("picture");
  function append(html) {
    for (const tr of rowsOf(html)) {
      if (events && tr.id && !document.getElementById(tr.id)) events.appendChild(tr);
    }
  }
  function lastSeq() {
    const rows = events ? events.querySelectorAll("tr[id^='ev-']") : [];
    return rows.length ? Number(rows[rows.length - 1].id.slice(3)) : -1;
  }
  let pending = null;
  function refresh(withPicture) {
    if (pending) return;
    pending = setTimeout(() => {
      pending = null;
      part({ part: "live" }).then((html) => {
        if (html !== null && livePart) livePart.replaceChildren(fragment(html));
      });
      if (picture && withPicture) {
        const url = new URL(picture.src);
        url.searchParams.set("v", String(Date.now()));
        picture.src = url.toString();
      }
    }, 300);
  }
  onHello(() => {
    part({ part: "events", after: String(lastSeq()) }).then((html) => html && append(html));
    refresh(true);
  });
  source.addEventListener("change", (msg) => {
    const change = JSON.parse(msg.data);
    append((change.event_rows || []).join(""));
    refresh(true);
  });
  setInterval(() => refresh(false), 5000); // armed rules' time left moves without events

  // a running job's worker log, read again every 3 s until the answer says it is done;
  // a reader at the end of the log stays at its end as lines come
  const followed = document.getElementById("worker-log");
  const logBody = document.getElementById("worker-log-body");
  if (followed && logBody) {
    let timer = null;
    const follow = () => {
      fetch(followed.dataset.src, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.text() : null))
        .then((html) => {
          if (html === null) return;
          const old = logBody.querySelector("pre.log");
          const atEnd = !old || old.scrollTop + old.clientHeight >= old.scrollHeight - 4;
          logBody.replaceChildren(fragment(html));
          const pre = logBody.querySelector("pre.log");
          if (pre && atEnd) pre.scrollTop = pre.scrollHeight;
          if (logBody.querySelector("[data-done]") && timer) {
            clearInterval(timer);
            timer = null;
          }
        })
        .catch(() => {});
    };
    follow();
    timer = setInterval(follow, 3000);
  }
})();

// edgefd's run page: renders the run's state (state.json, or the JSON block of a static page).
// Every string from the state is set as text (textContent), never parsed as markup: a device id
// or a refusal reason is shown as the characters it is.
"use strict";
(() => {
  const PAGE_SIZE = 50;
  const POLL_MS = 2000;
  const token = new URLSearchParams(window.location.search).get("token");
  const embedded = document.getElementById("edgefd-state");
  const headers = token ? { Authorization: "Bearer " + token } : {};
  let state = null;
  let sortKey = "id";
  let sortUp = true;
  let page = 0;
  let chartPoints = -1;

  const byId = (id) => document.getElementById(id);
  const setText = (id, text) => { byId(id).textContent = text; };
  const missing = (v) => v === null || v === undefined;

  function percent(v) { return missing(v) ? "–" : (100 * v).toFixed(2) + "%"; }
  function seconds(v) { return missing(v) ? "–" : (v < 10 ? v.toFixed(2) : v.toFixed(0)) + " s"; }
  function bytes(v) {
    if (missing(v)) return "–";
    for (const [unit, size] of [["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) {
      if (v >= size) return (v / size).toPrecision(3) + " " + unit;
    }
    return v + " B";
  }
  function refusedTotal(d) { return Object.values(d.refused || {}).reduce((a, b) => a + b, 0); }
  function refusedText(d) {
    return Object.entries(d.refused || {}).sort().map(([reason, n]) => reason + ": " + n).join(", ");
  }
  function statusOf(d) { return d.online === null ? "–" : d.online ? "online" : "offline"; }

  function showStatus(text, problem) {
    const status = byId("status");
    status.textContent = text;
    status.className = problem ? "problem" : "";
  }

  function renderRun() {
    const run = state.run;
    setText("run-name", run.name ? "· " + run.name : "");
    document.title = "edgefd " + (run.name || "run");
    setText("run-method", run.method || "–");
    setText("run-dataset", run.dataset || "–");
    setText("run-round", missing(run.round) ? "–" : run.round + " of " + run.rounds);
    setText("run-phase", run.phase || "–");
    setText("run-answered", run.expected ? run.answered + " of " + run.expected : "–");
    setText("run-left", seconds(run.seconds_left));
    const networked = state.devices.some((d) => d.online !== null);
    const online = state.devices.filter((d) => d.online).length;
    setText("run-online", networked ? online + " of " + state.devices.length : "– (no network)");
    const last = state.curve[state.curve.length - 1];
    setText("run-accuracy", last ? percent(last.accuracy) + " / " + percent(last.median) : "–");
  }

  function sortValue(d, key) {
    if (key === "refused_total") return refusedTotal(d);
    if (key === "online") return d.online === null ? null : d.online ? 1 : 0;
    return d[key];
  }
  function compare(a, b) {
    const x = sortValue(a, sortKey);
    const y = sortValue(b, sortKey);
    if (missing(x) || missing(y)) return missing(x) - missing(y); // unknowns last, either way
    const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
    return sortUp ? order : -order;
  }

  function renderDevices() {
    const rows = state.devices.slice().sort(compare);
    const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    const shown = rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);
    const fragment = document.createDocumentFragment();
    for (const d of shown) {
      const tr = document.createElement("tr");
      tr.dataset.device = d.id;
      const cells = [
        [d.id, ""], [statusOf(d), d.online === null ? "" : d.online ? "online" : "offline"],
        [missing(d.last_seen_s) ? "–" : seconds(d.last_seen_s) + " ago", ""],
        [d.selected, ""], [d.on_time, ""], [d.late, ""], [d.missed, ""], [seconds(d.latency_s), ""],
        [bytes(d.bytes_up), ""], [bytes(d.bytes_down), ""], [refusedText(d), "refused"], [percent(d.score), ""],
      ];
      for (const [text, kind] of cells) {
        const td = document.createElement("td");
        td.textContent = String(text);
        if (kind) td.className = kind;
        tr.appendChild(td);
      }
      fragment.appendChild(tr);
    }
    document.querySelector("#devices tbody").replaceChildren(fragment);
    setText("device-count", "(" + rows.length + ")");
    const first = rows.length ? page * PAGE_SIZE + 1 : 0;
    setText("page-shown", first + "–" + (page * PAGE_SIZE + shown.length) + " of " + rows.length);
    byId("page-back").disabled = page === 0;
    byId("page-next").disabled = page >= pages - 1;
    for (const th of document.querySelectorAll("#devices th")) {
      th.className = th.dataset.key === sortKey ? (sortUp ? "sorted-up" : "sorted-down") : "";
    }
  }

  function renderStrangers() {
    const list = byId("strangers");
    const items = state.strangers.map((s) => {
      const li = document.createElement("li");
      li.textContent = s.id + " (" + s.refused + " refused)";
      return li;
    });
    list.replaceChildren(...items);
    byId("strangers-section").hidden = items.length === 0;
  }

  async function renderCharts() {
    if (embedded || state.curve.length === chartPoints) return;
    const reply = await fetch("charts.json" + window.location.search, { headers, cache: "no-store" });
    if (!reply.ok) return;
    const charts = await reply.json();
    // Drawn by edgefd from numbers only (edgefd.dashboard.charts), and parsed as SVG, not as HTML.
    const parser = new DOMParser();
    const drawn = ["round", "bytes"].map((k) => document.importNode(
      parser.parseFromString(charts[k], "image/svg+xml").documentElement, true));
    byId("charts").replaceChildren(...drawn);
    chartPoints = state.curve.length;
  }

  function render() {
    renderRun();
    renderDevices();
    renderStrangers();
    byId("curves").dataset.points = String(state.curve.length);
  }

  async function poll() {
    try {
      const reply = await fetch("state.json" + window.location.search, { headers, cache: "no-store" });
      if (reply.status === 401) {
        showStatus("this dashboard needs its token: open it as http://HOST:PORT/?token=TOKEN", true);
      } else if (!reply.ok) {
        showStatus("the server could not make the run's state (" + reply.status + "): see its log", true);
      } else {
        state = await reply.json();
        render();
        await renderCharts();
        const when = new Date().toLocaleTimeString();
        showStatus((state.run.finished ? "the run has finished" : "live") + ", updated " + when, false);
      }
    } catch (error) {
      showStatus("the server does not answer: the run has ended, or its server stopped", true);
    }
    window.setTimeout(poll, POLL_MS);
  }

  for (const th of document.querySelectorAll("#devices th")) {
    th.addEventListener("click", () => {
      sortUp = th.dataset.key === sortKey ? !sortUp : true;
      sortKey = th.dataset.key;
      if (state) renderDevices();
    });
  }
  byId("page-back").addEventListener("click", () => { page -= 1; if (state) renderDevices(); });
  byId("page-next").addEventListener("click", () => { page += 1; if (state) renderDevices(); });

  if (embedded) {
    state = JSON.parse(embedded.textContent);
    render();
    showStatus("a finished run (edgefd report --html): not live", false);
  } else {
    poll();
  }
})();

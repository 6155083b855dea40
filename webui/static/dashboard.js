// ratelimit dashboard: live statistics over Server-Sent Events, uPlot charts,
// a virtualized link table and the apply/clear form.  No framework.
"use strict";

(function () {
  const ROW_H = 24;               // px; must match .viewport .row in dashboard.css
  const COLS = ["bytes", "packets", "drops", "overlimits", "backlog_bytes", "backlog_pkts",
                "throughput_bps", "drops_per_s", "active"];
  const body = document.body;
  const charts = body.dataset.charts === "true" && typeof window.uPlot === "function";
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------ state
  const state = {
    target: null,            // {interface, netns}
    layout: 0,
    n: 0,
    dir: [], host: [], dev: [], port: new Int32Array(0), limit: new Float64Array(0),
    col: {},                 // name -> Float64Array(n)
    view: new Int32Array(0), // rows shown, in display order
    sort: {key: "host", desc: false},
    selected: null,          // {direction, host, port}
    history: 300,
    agg: {time: [], down: [], up: [], total: [], drops: []},
    link: {time: [], tp: [], drops: []},
    lastTick: 0,
    formTouched: false,
  };
  for (const c of COLS) state.col[c] = new Float64Array(0);

  // ------------------------------------------------------------ formatting
  function si(value, unit, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    const abs = Math.abs(value);
    const steps = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [f, p] of steps) {
      if (abs >= f) return (value / f).toFixed(digits === undefined ? 2 : digits).replace(/\.?0+$/, "") + " " + p + unit;
    }
    return (Number.isInteger(value) ? value : value.toFixed(digits === undefined ? 1 : digits)) + " " + unit;
  }
  const bits = (v) => si(v, "bit/s");
  const bytes = (v) => si(v, "B");
  const count = (v) => (v === null || v === undefined) ? "–" : Math.round(v).toLocaleString("en");
  const rate = (v) => (v === null || v === undefined) ? "–" : si(v, "/s");

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }

  // ------------------------------------------------------------ token
  const TOKEN_KEY = "ratelimit-token";
  (function takeTokenFromUrl() {
    const m = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
  })();
  const tokenInput = $("f-token");
  if (tokenInput) {
    tokenInput.value = sessionStorage.getItem(TOKEN_KEY) || "";
    tokenInput.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, tokenInput.value.trim()));
  }

  // ------------------------------------------------------------ API helpers
  // A per-host link carries all its host's ports: port 0 in the layout keys.
  function portText(port) { return port === 0 ? "all" : String(port); }
  function targetQuery(extra) {
    const p = new URLSearchParams();
    p.set("interface", state.target.interface);
    if (state.target.netns) p.set("netns", state.target.netns);
    if (extra) for (const [k, v] of Object.entries(extra)) p.set(k, v);
    return p.toString();
  }
  async function getJSON(url) {
    const r = await fetch(url, {headers: {"Accept": "application/json"}});
    const data = await r.json().catch(() => ({error: "bad reply from the server (" + r.status + ")"}));
    if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
    return data;
  }
  async function postJSON(url, payload) {
    const token = (tokenInput && tokenInput.value.trim()) || sessionStorage.getItem(TOKEN_KEY) || "";
    const headers = {"Content-Type": "application/json", "Accept": "application/json"};
    if (token) headers["X-Ratelimit-Token"] = token;
    const r = await fetch(url, {method: "POST", headers, body: JSON.stringify(payload)});
    const data = await r.json().catch(() => ({error: "bad reply from the server (" + r.status + ")"}));
    if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
    return data;
  }

  // ------------------------------------------------------------ charts
  const plots = {};
  function chartWidth(id) { return Math.max(240, $(id).clientWidth || 400); }
  function zeroBased(u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }
  function zeroBasedBits(u, min, max) { return [0, max > 0 ? max * 1.1 : 1000]; }
  function makePlot(id, series, axes) {
    for (const s of series) s.points = {show: false};
    if (!charts) return null;
    const opts = {
      width: chartWidth(id), height: 190,
      legend: {live: true},
      cursor: {drag: {x: false, y: false}},
      scales: {x: {time: true}, y: {range: zeroBased}, bits: {range: zeroBasedBits}, bps: {range: zeroBasedBits}, drops: {range: zeroBased}},
      series: [{}].concat(series),
      axes: axes,
    };
    return new uPlot(opts, [[]].concat(series.map(() => [])), $(id));
  }
  const bitAxis = {values: (u, vals) => vals.map((v) => si(v, "b", 1)), size: 64};
  const dropAxis = {values: (u, vals) => vals.map((v) => si(v, "", 1)), size: 50};
  function initCharts() {
    plots.tp = makePlot("chart-throughput", [
      {label: "down", stroke: "#1f6fd1", width: 1.5, value: (u, v) => bits(v), scale: "bits"},
      {label: "up", stroke: "#d17a1f", width: 1.5, value: (u, v) => bits(v), scale: "bits"},
      {label: "total", stroke: "#444", width: 1, dash: [4, 3], value: (u, v) => bits(v), scale: "bits"},
    ], [{}, Object.assign({scale: "bits"}, bitAxis)]);
    plots.drops = makePlot("chart-drops", [
      {label: "drops/s", stroke: "#c0392b", width: 1.5, fill: "rgba(192,57,43,0.12)", value: (u, v) => rate(v)},
    ], [{}, dropAxis]);
    plots.link = makePlot("chart-link", [
      {label: "rate now", stroke: "#1f6fd1", width: 1.5, value: (u, v) => bits(v), scale: "bps"},
      {label: "drops/s", stroke: "#c0392b", width: 1, value: (u, v) => rate(v), scale: "drops"},
    ], [{}, Object.assign({scale: "bps"}, bitAxis), Object.assign({scale: "drops", side: 1, grid: {show: false}}, dropAxis)]);
    window.addEventListener("resize", () => {
      for (const [key, id] of [["tp", "chart-throughput"], ["drops", "chart-drops"], ["link", "chart-link"]]) {
        if (plots[key]) plots[key].setSize({width: chartWidth(id), height: 190});
      }
    });
  }
  function trim(series, keys) {
    const cutoff = series.time.length ? series.time[series.time.length - 1] - state.history : 0;
    let k = 0;
    while (k < series.time.length && series.time[k] < cutoff) k++;
    if (k) for (const name of keys) series[name].splice(0, k);
  }
  function drawAggregate() {
    const a = state.agg;
    if (plots.tp) plots.tp.setData([a.time, a.down, a.up, a.total]);
    if (plots.drops) plots.drops.setData([a.time, a.drops]);
  }
  function drawLink() {
    if (plots.link) plots.link.setData([state.link.time, state.link.tp, state.link.drops]);
  }
  async function loadHistory() {
    const h = await getJSON("/api/history?" + targetQuery());
    const s = h.series;
    state.agg = {time: s.time, down: s.throughput_bps_down, up: s.throughput_bps_up,
                 total: s.throughput_bps, drops: s.drops_per_s};
    drawAggregate();
  }
  async function selectLink(i) {
    const key = {direction: state.dir[i], host: state.host[i], port: state.port[i]};
    state.selected = key;
    $("link-chart-title").textContent = "Link " + key.host + ":" + portText(key.port) + " " +
      (key.direction === "dest" ? "down (dest)" : "up (source)");
    state.link = {time: [], tp: [], drops: []};
    render();
    try {
      const h = await getJSON("/api/links/history?" + targetQuery({...key, port: portText(key.port)}));
      if (state.selected !== key) return;
      state.link = {time: h.series.time, tp: h.series.throughput_bps, drops: h.series.drops_per_s};
    } catch (e) {
      $("link-chart-title").textContent = e.message;
    }
    drawLink();
  }
  function selectedRow() {
    const s = state.selected;
    if (!s) return -1;
    for (let i = 0; i < state.n; i++) {
      if (state.port[i] === s.port && state.host[i] === s.host && state.dir[i] === s.direction) return i;
    }
    return -1;
  }

  // ------------------------------------------------------------ overview
  function card(t) {
    const a = t.applied, g = t.aggregate || {};
    const selected = state.target && t.interface === state.target.interface &&
      (t.netns || "") === (state.target.netns || "");
    const c = el("article", {class: "card" + (selected ? " selected" : ""), "data-name": t.name});
    c.append(el("h3", {text: t.name}));
    if (t.error) c.append(el("p", {class: "error", text: t.error}));
    if (a) {
      // Only the sides the direction limits: dest = down (to the client), source = up.
      const rateText = [a.direction !== "source" && a.down && a.down.rate_bps ? "down " + bits(a.down.rate_bps) : null,
                        a.direction !== "dest" && a.up && a.up.rate_bps ? "up " + bits(a.up.rate_bps) : null]
        .filter(Boolean).join(", ");
      // Burst and queue of the down side (else the up side): what one link holds.
      const side = a.direction !== "source" ? a.down : a.up;
      const sideText = side ? ["burst " + bytes(side.burst_bytes || 0),
                               a.mode === "shape" && side.queue_bytes ? "queue " + bytes(side.queue_bytes) : null]
        .filter(Boolean).join(", ") : "";
      c.append(el("dl", null,
        el("dt", {text: "profile"}), el("dd", {text: a.profile || "(custom)"}),
        el("dt", {text: "mode"}), el("dd", {text: a.mode + ", " + a.direction + ", per " + (a.per || "port")}),
        el("dt", {text: "link"}), el("dd", {text: ((a.link && a.link.layer) || "ethernet") + (sideText ? "; " + sideText : "")}),
        el("dt", {text: "limit"}), el("dd", {text: rateText || "no rate limit"}),
        el("dt", {text: "hosts"}), el("dd", {text: a.hosts.join(", "), title: a.hosts.join(", ")}),
        el("dt", {text: "ports"}), el("dd", {text: a.ports}),
        el("dt", {text: "flows"}), el("dd", {text: count(a.flows)})));
    } else if (!t.error) {
      c.append(el("p", {class: "muted", text: "nothing applied"}));
    }
    const num = (k, value, text) => el("dd", {class: "num", "data-k": k, "data-value": String(value), text: text});
    c.append(el("dl", {class: "numbers"},
      el("dt", {text: "down"}), num("down", g.throughput_bps_down, bits(g.throughput_bps_down)),
      el("dt", {text: "up"}), num("up", g.throughput_bps_up, bits(g.throughput_bps_up)),
      el("dt", {text: "drops"}), num("drops", g.drops, count(g.drops) + " (" + rate(g.drops_per_s) + ")"),
      el("dt", {text: "backlog"}), num("backlog", g.backlog_bytes, bytes(g.backlog_bytes) + ", " + count(g.backlog_pkts) + " pkts"),
      el("dt", {text: "bytes"}), num("bytes", g.bytes, bytes(g.bytes)),
      el("dt", {text: "links"}), num("links", g.active_links, count(g.active_links) + " active of " + count(g.links))));
    c.addEventListener("click", () => {
      const sel = $("target");
      for (const o of sel.options) {
        if (o.dataset.interface === t.interface && (o.dataset.netns || "") === (t.netns || "")) {
          if (sel.value !== o.value) { sel.value = o.value; switchTarget(); }
        }
      }
    });
    return c;
  }
  function renderOverview(targets) {
    $("overview").replaceChildren(...targets.map(card));
  }

  // ------------------------------------------------------------ link table
  function onLayout(msg) {
    const n = msg.keys.length;
    state.layout = msg.layout;
    state.n = n;
    state.dir = new Array(n); state.host = new Array(n); state.dev = new Array(n);
    state.port = new Int32Array(n); state.limit = new Float64Array(n);
    msg.keys.forEach((k, i) => {
      state.dir[i] = k[0]; state.host[i] = k[1]; state.port[i] = k[2]; state.dev[i] = k[3];
      state.limit[i] = k[4] === null ? NaN : k[4];
    });
    for (const c of COLS) state.col[c] = new Float64Array(n);
    prefillForm(msg.applied);
  }
  function onRows(links) {
    if (links.layout !== state.layout) return;
    const rows = links.rows;
    for (const c of COLS) {
      const dst = state.col[c], src = links[c];
      for (let j = 0; j < rows.length; j++) dst[rows[j]] = src[j];
    }
  }
  function parsePortFilter(text) {
    const m = /^\s*(\d+)\s*(?:-\s*(\d+))?\s*$/.exec(text);
    if (!m) return null;
    return [Number(m[1]), Number(m[2] || m[1])];
  }
  function rebuildView() {
    const host = $("q-host").value.trim();
    const portQuery = $("q-port").value.trim();
    const ports = portQuery ? parsePortFilter(portQuery) : null;
    $("q-port").classList.toggle("bad", Boolean(portQuery) && !ports);
    const dir = $("q-direction").value;
    const activeOnly = $("q-active").checked;
    const act = state.col.active;
    const out = new Int32Array(state.n);
    let m = 0;
    for (let i = 0; i < state.n; i++) {
      if (activeOnly && !act[i]) continue;
      if (dir && state.dir[i] !== dir) continue;
      if (ports && (state.port[i] < ports[0] || state.port[i] > ports[1])) continue;
      if (host && state.host[i].indexOf(host) < 0) continue;
      out[m++] = i;
    }
    const view = out.subarray(0, m);
    const {key, desc} = state.sort;
    const sign = desc ? -1 : 1;
    let cmp;
    if (key === "host" || key === "direction") {
      const arr = key === "host" ? state.host : state.dir;
      cmp = (a, b) => (arr[a] < arr[b] ? -sign : arr[a] > arr[b] ? sign : (state.port[a] - state.port[b]) || (a - b));
    } else if (key === "port") {
      cmp = (a, b) => sign * (state.port[a] - state.port[b]) || (a - b);
    } else {
      const arr = key === "rate_bps" ? state.limit : state.col[key];
      cmp = (a, b) => sign * ((arr[a] || 0) - (arr[b] || 0)) || (a - b);
    }
    view.sort(cmp);
    state.view = view;
    $("count").textContent = "showing " + m.toLocaleString("en") + " of " + state.n.toLocaleString("en") + " links" +
      (activeOnly ? " (active only)" : "");
    $("spacer").style.height = (m * ROW_H) + "px";
  }

  const rowPool = [];
  function makeRow() {
    const r = el("div", {class: "grid row", role: "row"});
    for (let k = 0; k < 10; k++) r.append(el("span", {role: "cell", class: k >= 3 ? "num" : ""}));
    r.addEventListener("click", () => { if (r.dataset.i) selectLink(Number(r.dataset.i)); });
    return r;
  }
  let renderQueued = false;
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => { renderQueued = false; renderRows(); });
  }
  function renderRows() {
    const vp = $("viewport");
    const first = Math.max(0, Math.floor(vp.scrollTop / ROW_H) - 5);
    const visible = Math.ceil((vp.clientHeight || 480) / ROW_H) + 10;
    const last = Math.min(state.view.length, first + visible);
    const container = $("rows");
    container.style.transform = "translateY(" + (first * ROW_H) + "px)";
    while (rowPool.length < last - first) { const r = makeRow(); rowPool.push(r); container.append(r); }
    const sel = selectedRow();
    const c = state.col;
    for (let j = 0; j < rowPool.length; j++) {
      const r = rowPool[j];
      const idx = first + j;
      if (idx >= last) { r.hidden = true; r.dataset.i = ""; continue; }
      r.hidden = false;
      const i = state.view[idx];
      r.dataset.i = String(i);
      r.classList.toggle("selected", i === sel);
      r.classList.toggle("idle", !c.active[i]);
      const cells = r.children;
      const text = [
        state.dir[i] === "dest" ? "down" : "up",
        state.host[i],
        portText(state.port[i]),
        Number.isNaN(state.limit[i]) ? "none" : bits(state.limit[i]),
        bits(c.throughput_bps[i]),
        bytes(c.bytes[i]),
        count(c.packets[i]),
        count(c.drops[i]),
        count(c.overlimits[i]),
        bytes(c.backlog_bytes[i]) + " / " + count(c.backlog_pkts[i]),
      ];
      for (let k = 0; k < 10; k++) if (cells[k].textContent !== text[k]) cells[k].textContent = text[k];
    }
  }
  $("viewport").addEventListener("scroll", render, {passive: true});
  for (const id of ["q-host", "q-port", "q-direction", "q-active"]) {
    $(id).addEventListener("input", () => { rebuildView(); render(); });
  }
  for (const b of document.querySelectorAll("#thead button")) {
    b.addEventListener("click", () => {
      const key = b.dataset.sort;
      if (state.sort.key === key) state.sort.desc = !state.sort.desc;
      else state.sort = {key, desc: !["host", "direction", "port"].includes(key)};
      for (const o of document.querySelectorAll("#thead button")) o.removeAttribute("aria-sort");
      b.setAttribute("aria-sort", state.sort.desc ? "descending" : "ascending");
      rebuildView(); render();
    });
  }

  // ------------------------------------------------------------ live stream
  let source = null;
  function setConn(text, cls) {
    const c = $("conn");
    c.textContent = text;
    c.className = "badge " + cls;
  }
  function connect() {
    if (source) source.close();
    source = new EventSource("/api/stream?" + targetQuery());
    source.addEventListener("layout", (ev) => {
      onLayout(JSON.parse(ev.data));
      rebuildView(); render();
    });
    source.addEventListener("tick", (ev) => {
      const t = JSON.parse(ev.data);
      state.lastTick = Date.now();
      setConn("live", "ok");
      renderOverview(t.targets);
      onRows(t.links);
      const mine = t.targets.find((x) => x.interface === state.target.interface &&
        (x.netns || "") === (state.target.netns || ""));
      const g = mine && mine.aggregate;
      if (g && g.throughput_bps !== null && mine.time &&
          (!state.agg.time.length || mine.time > state.agg.time[state.agg.time.length - 1])) {
        state.agg.time.push(mine.time); state.agg.down.push(g.throughput_bps_down);
        state.agg.up.push(g.throughput_bps_up); state.agg.total.push(g.throughput_bps);
        state.agg.drops.push(g.drops_per_s);
        trim(state.agg, ["time", "down", "up", "total", "drops"]);
        drawAggregate();
        const i = selectedRow();
        if (i >= 0) {
          state.link.time.push(mine.time); state.link.tp.push(state.col.throughput_bps[i]);
          state.link.drops.push(state.col.drops_per_s[i]);
          trim(state.link, ["time", "tp", "drops"]);
          drawLink();
        }
      }
      rebuildView(); render();
    });
    source.onerror = () => setConn("reconnecting", "bad");
  }
  setInterval(() => {
    if (state.lastTick && Date.now() - state.lastTick > 5000) setConn("stale", "bad");
  }, 1000);

  function currentTarget() {
    const o = $("target").selectedOptions[0];
    return {interface: o.dataset.interface, netns: o.dataset.netns || null};
  }
  function switchTarget() {
    state.target = currentTarget();
    state.selected = null;
    state.formTouched = false;
    state.layout = 0; state.n = 0; state.view = new Int32Array(0);
    state.agg = {time: [], down: [], up: [], total: [], drops: []};
    state.link = {time: [], tp: [], drops: []};
    $("link-chart-title").textContent = "One link: click a row of the table";
    drawAggregate(); drawLink();
    rebuildView(); render();
    loadHistory().catch((e) => setConn(e.message, "bad"));
    connect();
  }
  $("target").addEventListener("change", switchTarget);

  // ------------------------------------------------------------ control
  const form = $("control-form");
  const msg = $("control-msg");
  function say(text, ok) {
    msg.textContent = text;
    msg.className = ok ? "ok" : "error";
  }
  function prefillForm(applied) {
    if (!form || state.formTouched || !applied) return;
    $("f-hosts").value = applied.hosts.join(",");
    $("f-ports").value = applied.ports;
    $("f-mode").value = applied.mode;
    $("f-direction").value = applied.direction;
    $("f-per").value = applied.per || "port";
    $("f-profile").value = applied.profile || "";
  }
  async function loadProfiles() {
    const data = await getJSON("/api/profiles");
    const sel = $("f-profile");
    for (const p of data.profiles) {
      if (p.error) continue;
      sel.append(el("option", {value: p.name, title: p.description || "", text: p.name}));
    }
  }
  if (form) {
    form.addEventListener("input", () => { state.formTouched = true; });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const payload = {interface: state.target.interface, netns: state.target.netns};
      for (const name of ["profile", "hosts", "ports", "mode", "direction", "per", "rate", "delay", "loss", "burst",
                          "queue"]) {
        const v = form.elements[name].value.trim();
        if (v) payload[name] = v;
      }
      if ($("f-force").checked) payload.force = true;
      say("applying…", true);
      try {
        const r = await postJSON("/api/apply", payload);
        const a = r.applied;
        say("applied on " + (r.netns ? r.netns + "/" : "") + r.interface + ": " + (a.profile || "custom") + ", " +
            a.mode + ", " + a.flows.toLocaleString("en") + " flows", true);
        state.formTouched = false;
      } catch (e) {
        say(e.message, false);
      }
    });
    $("clear").addEventListener("click", async () => {
      say("clearing…", true);
      try {
        const payload = {interface: state.target.interface, netns: state.target.netns};
        if ($("f-force").checked) payload.force = true;
        const r = await postJSON("/api/clean", payload);
        say(r.cleaned ? "cleared " + r.interface : "nothing to clear on " + r.interface, true);
      } catch (e) {
        say(e.message, false);
      }
    });
    loadProfiles().catch((e) => say(e.message, false));
  }

  // ------------------------------------------------------------ start
  // For tests and for poking at from the browser console; changes nothing by itself.
  window.ratelimitDashboard = {state, rebuildView, renderRows};
  getJSON("/api/targets").then((t) => { if (t.history_seconds) state.history = t.history_seconds; }).catch(() => {});
  initCharts();
  switchTarget();
})();

// ratelimit dashboard: live statistics over Server-Sent Events, uPlot charts, the
// distribution of the links' rate share and queueing delay, a virtualized link table
// paged from the server, and the apply/clear form.  No framework.
//
// The stream carries only what every view needs (aggregates, link states and
// distributions, a few hundred bytes per interface); the table asks /api/links for
// the rows it shows, after every tick and whenever it scrolls, sorts or filters.
"use strict";

(function () {
  const ROW_H = 24;               // px; must match .viewport .row in dashboard.css
  const COLS_N = 12;              // cells per row; must match #thead
  const MARGIN = 30;              // rows fetched above and below the visible ones
  const body = document.body;
  const charts = body.dataset.charts === "true" && typeof window.uPlot === "function";
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------ state
  const state = {
    target: null,            // {interface, netns}
    layout: 0,
    sort: {key: "host", desc: false},
    filter: {state: "", share: ""},  // set by the state counts and the histogram
    glance: "dest",          // the direction the distributions show (dest = down, source = up)
    lastTarget: null,        // the selected target's info of the last tick
    page: {offset: 0, rows: [], matched: 0, total: 0, seq: 0, key: ""},
    selected: null,          // {direction, host, port}
    history: 300,
    agg: {time: [], down: [], up: [], total: [], drops: []},
    dist: emptyDist(),
    link: {time: [], tp: [], drops: [], cap: []},
    lastTick: 0,
    ticks: [],               // performance.now() of the last ticks drawn (for tests)
    formTouched: false,
  };
  function emptyDist() {
    return {time: [], s5: [], s50: [], s95: [], d5: [], d50: [], d95: [],
            idle: [], busy: [], at_rate: [], starved: [], dropping: []};
  }

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
  const pct = (v) => (v === null || v === undefined) ? "–" : (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%";
  const ms = (v) => (v === null || v === undefined) ? "–" :
    v >= 10000 ? (v / 1000).toFixed(1) + " s" : (v >= 100 ? v.toFixed(0) : v.toFixed(1)) + " ms";

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
  function portText(port) { return port === null ? "all" : String(port); }  // null: a per-host link
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
  const CHART_IDS = {tp: "chart-throughput", drops: "chart-drops", link: "chart-link", share: "chart-share",
                     delay: "chart-delay", states: "chart-states"};
  function chartWidth(id) { return Math.max(240, $(id).clientWidth || 400); }
  function zeroBased(u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }
  function zeroBasedBits(u, min, max) { return [0, max > 0 ? max * 1.1 : 1000]; }
  function shareRange(u, min, max) { return [0, Math.max(1.05, max > 0 ? max * 1.05 : 1)]; }
  function makePlot(key, series, axes, extra) {
    for (const s of series) s.points = {show: false};
    if (!charts) return null;
    const id = CHART_IDS[key];
    const opts = Object.assign({
      width: chartWidth(id), height: 190,
      legend: {live: true},
      cursor: {drag: {x: false, y: false}},
      scales: {x: {time: true}, y: {range: zeroBased}, bits: {range: zeroBasedBits}, bps: {range: zeroBasedBits},
               drops: {range: zeroBased}, share: {range: shareRange}},
      series: [{}].concat(series),
      axes: axes,
    }, extra || {});
    return new uPlot(opts, [[]].concat(series.map(() => [])), $(id));
  }
  const bitAxis = {values: (u, vals) => vals.map((v) => si(v, "b", 1)), size: 64};
  const dropAxis = {values: (u, vals) => vals.map((v) => si(v, "", 1)), size: 50};
  const shareAxis = {scale: "share", values: (u, vals) => vals.map((v) => Math.round(v * 100) + "%"), size: 50};
  const msAxis = {values: (u, vals) => vals.map((v) => v >= 1000 ? +(v / 1000).toFixed(2) + " s" : +v.toFixed(1) + " ms"),
                  size: 60};
  function band(label, stroke, scale, fmt) {
    return [
      {label: label + " p95", stroke: stroke, width: 1, dash: [3, 3], value: (u, v) => fmt(v), scale},
      {label: label + " p50", stroke: stroke, width: 2, value: (u, v) => fmt(v), scale},
      {label: label + " p5", stroke: stroke, width: 1, dash: [3, 3], value: (u, v) => fmt(v), scale},
    ];
  }
  function initCharts() {
    plots.tp = makePlot("tp", [
      {label: "down", stroke: "#1f6fd1", width: 1.5, value: (u, v) => bits(v), scale: "bits"},
      {label: "up", stroke: "#d17a1f", width: 1.5, value: (u, v) => bits(v), scale: "bits"},
      {label: "total", stroke: "#444", width: 1, dash: [4, 3], value: (u, v) => bits(v), scale: "bits"},
    ], [{}, Object.assign({scale: "bits"}, bitAxis)]);
    plots.drops = makePlot("drops", [
      {label: "drops/s", stroke: "#c0392b", width: 1.5, fill: "rgba(192,57,43,0.12)", value: (u, v) => rate(v)},
    ], [{}, dropAxis]);
    plots.share = makePlot("share", band("share", "#23824a", "share", pct), [{}, shareAxis],
                           {bands: [{series: [1, 3], fill: "rgba(35,130,74,0.15)"}]});
    plots.delay = makePlot("delay", band("delay", "#7a4fd1", "y", ms), [{}, msAxis],
                           {bands: [{series: [1, 3], fill: "rgba(122,79,209,0.15)"}]});
    plots.states = makePlot("states", [
      {label: "at rate", stroke: "#23824a", width: 1.5, value: (u, v) => count(v)},
      {label: "busy", stroke: "#1f6fd1", width: 1, value: (u, v) => count(v)},
      {label: "starved", stroke: "#c0392b", width: 1.5, value: (u, v) => count(v)},
      {label: "dropping", stroke: "#d17a1f", width: 1, dash: [4, 3], value: (u, v) => count(v)},
      {label: "idle", stroke: "#98a2ad", width: 1, value: (u, v) => count(v)},
    ], [{}, dropAxis]);
    plots.link = makePlot("link", [
      {label: "rate now", stroke: "#1f6fd1", width: 1.5, value: (u, v) => bits(v), scale: "bps"},
      {label: "drops/s", stroke: "#c0392b", width: 1, value: (u, v) => rate(v), scale: "drops"},
      // a traced link's trace: what a backlogged sender would get (null for a static rate)
      {label: "trace capacity", stroke: "#1a9850", width: 1.5, dash: [6, 3], value: (u, v) => bits(v), scale: "bps"},
    ], [{}, Object.assign({scale: "bps"}, bitAxis), Object.assign({scale: "drops", side: 1, grid: {show: false}}, dropAxis)]);
    window.addEventListener("resize", () => {
      for (const [key, id] of Object.entries(CHART_IDS)) {
        if (plots[key]) plots[key].setSize({width: chartWidth(id), height: 190});
      }
    });
  }
  function trim(series) {
    const cutoff = series.time.length ? series.time[series.time.length - 1] - state.history : 0;
    let k = 0;
    while (k < series.time.length && series.time[k] < cutoff) k++;
    if (k) for (const name of Object.keys(series)) series[name].splice(0, k);
  }
  function drawAggregate() {
    const a = state.agg, d = state.dist;
    if (plots.tp) plots.tp.setData([a.time, a.down, a.up, a.total]);
    if (plots.drops) plots.drops.setData([a.time, a.drops]);
    if (plots.share) plots.share.setData([d.time, d.s95, d.s50, d.s5]);
    if (plots.delay) plots.delay.setData([d.time, d.d95, d.d50, d.d5]);
    if (plots.states) plots.states.setData([d.time, d.at_rate, d.busy, d.starved, d.dropping, d.idle]);
  }
  function drawLink() {
    if (plots.link) plots.link.setData([state.link.time, state.link.tp, state.link.drops, state.link.cap]);
    const traced = state.link.cap.some((v) => v !== null);
    $("link-note").hidden = !traced;
  }
  async function loadHistory() {
    const h = await getJSON("/api/history?" + targetQuery());
    const s = h.series;
    state.agg = {time: s.time, down: s.throughput_bps_down, up: s.throughput_bps_up,
                 total: s.throughput_bps, drops: s.drops_per_s};
    state.series = Object.fromEntries(Object.entries(s).map(([k, v]) => [k, v.slice()]));  // not agg's arrays
    pickDist();
    drawAggregate();
  }
  // The distribution series of the glance direction, from the history (then grown by the ticks).
  function pickDist() {
    const s = state.series, g = state.glance;
    if (!s) return;
    const col = (name) => (s[name + "_" + g] || []).slice();
    state.dist = {time: s.time.slice(), s5: col("rate_share_p5"), s50: col("rate_share_p50"),
                  s95: col("rate_share_p95"), d5: col("queue_delay_ms_p5"), d50: col("queue_delay_ms_p50"),
                  d95: col("queue_delay_ms_p95"), idle: col("idle_links"), busy: col("busy_links"),
                  at_rate: col("at_rate_links"), starved: col("starved_links"), dropping: col("dropping_links")};
  }
  const NO_DIST = {states: {}, links: 0, rate_share: {}, queue_delay_ms: {}, histogram: {edges: [], counts: []}};
  function pushSample(t) {
    const g = t.aggregate;
    if (!g || g.throughput_bps === null || !t.time) return;
    if (state.agg.time.length && t.time <= state.agg.time[state.agg.time.length - 1]) return;
    const a = state.agg;
    a.time.push(t.time); a.down.push(g.throughput_bps_down); a.up.push(g.throughput_bps_up);
    a.total.push(g.throughput_bps); a.drops.push(g.drops_per_s);
    trim(a);
    // the history as the server keeps it, so that switching the glance direction has both
    const s = state.series || (state.series = {time: []});
    s.time.push(t.time);
    for (const dir of ["dest", "source"]) {
      const d = t.distribution[dir] || NO_DIST;
      const put = (name, v) => (s[name + "_" + dir] || (s[name + "_" + dir] = new Array(s.time.length - 1).fill(null)))
        .push(v === undefined ? null : v);
      for (const q of ["p5", "p50", "p95"]) { put("rate_share_" + q, d.rate_share[q]); put("queue_delay_ms_" + q, d.queue_delay_ms[q]); }
      for (const k of ["idle", "busy", "at_rate", "starved", "dropping"]) put(k + "_links", d.states[k]);
    }
    trim(s);
    pickDist();
    drawAggregate();
  }
  async function selectLink(row) {
    const key = {direction: row.direction, host: row.host, port: row.port};
    state.selected = key;
    $("link-chart-title").textContent = "Link " + key.host + ":" + portText(key.port) + " " +
      (key.direction === "dest" ? "down (dest)" : "up (source)");
    state.link = {time: [], tp: [], drops: [], cap: []};
    renderRows();
    await loadLink();
  }
  async function loadLink() {
    const key = state.selected;
    if (!key) return;
    try {
      const h = await getJSON("/api/links/history?" + targetQuery({...key, port: portText(key.port)}));
      if (state.selected !== key) return;
      state.link = {time: h.series.time, tp: h.series.throughput_bps, drops: h.series.drops_per_s,
                    cap: h.series.capacity_bps};
    } catch (e) {
      $("link-chart-title").textContent = e.message;
    }
    drawLink();
  }
  function isSelected(r) {
    const s = state.selected;
    return s !== null && r.port === s.port && r.host === s.host && r.direction === s.direction;
  }

  // ------------------------------------------------------------ overview
  // Links applied with --container: which container and use; and a notice for each
  // container named as a host that has another address now, or is not running.
  function containerLines(a) {
    const out = [];
    const ct = a.container;
    if (ct) out.push(el("p", {class: "container", text: ct.engine + " container " + ct.name + " (" + ct.id.slice(0, 12) +
      "), " + (ct.use === "user" ? "one user, on its host-side veth" :
        a.server_side ? "the server, on its host-side veth" : "the server, on its own interface") +
      ", network " + ct.network}));
    for (const n of a.notices || []) out.push(el("p", {class: "error notice", text: n}));
    return out;
  }
  // A plan that ends by itself (--for): the time left at the snapshot; a blackholed cohort.
  function faultLines(a, now) {
    const out = [];
    if (a.expires_ms != null) {
      const left = Math.round(a.expires_ms / 1000 - now);
      const then = a.restores ? " (then the plan before it comes back)" : " (then removed)";
      out.push(el("p", {class: "expires", text: left > 0 ? "ends in " + duration(left) + then :
        "its end passed " + duration(-left) + " ago; not removed yet"}));
    }
    for (const co of a.cohorts || []) {
      if (co.blackhole) out.push(el("p", {class: "error blackhole", text: co.name + ": blackholed (every packet dropped)"}));
    }
    return out;
  }
  function duration(s) {
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
    const two = (n) => String(n).padStart(2, "0");
    return h ? h + "h " + two(m) + "m " + two(r) + "s" : m ? m + "m " + two(r) + "s" : r + "s";
  }
  function card(t) {
    const a = t.applied, g = t.aggregate || {};
    const selected = state.target && t.interface === state.target.interface &&
      (t.netns || "") === (state.target.netns || "");
    const c = el("article", {class: "card" + (selected ? " selected" : ""), "data-name": t.name});
    c.append(el("h3", {text: t.name}));
    if (t.error) c.append(el("p", {class: "error", text: t.error}));
    if (a) c.append(...containerLines(a), ...faultLines(a, t.time));
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

  // ------------------------------------------------------------ links at a glance
  const STATE_LABELS = [["at_rate", "at rate (≥ 90%)"], ["busy", "busy"], ["starved", "starved (backlog, < 50%)"],
                        ["dropping", "dropping"], ["idle", "idle"]];
  // one row per cohort of a plan of several (``cohorts`` of the reading): its own glance
  function renderCohorts(t) {
    const cohorts = Object.entries(t.cohorts || {});
    $("cohorts").hidden = !cohorts.length;
    $("cohorts").tBodies[0].replaceChildren(...cohorts.map(([name, c]) => {
      const d = c.distribution[state.glance] || NO_DIST;
      const cells = [name, c.profile || "custom", count(c.links), count(c.active_links), bits(c.throughput_bps_down),
                     bits(c.throughput_bps_up), rate(c.drops_per_s), count((d.states || {}).at_rate),
                     count((d.states || {}).starved), pct(d.rate_share.p50), ms(d.queue_delay_ms.p95)];
      return el("tr", {"data-cohort": name}, ...cells.map((text) => el("td", {text: String(text)})));
    }));
  }
  // one row per cell and direction it shares (``cells`` of the reading, docs/cells.md): its
  // capacity, users, what it delivers and its busy users' rates (least, median, most, Jain's index)
  function renderCells(t) {
    const rows = Object.entries(t.cells || {}).flatMap(([name, sides]) =>
      Object.entries(sides).map(([direction, c]) => [name, direction, c]));
    $("cells").hidden = !rows.length;
    $("cells").tBodies[0].replaceChildren(...rows.map(([name, direction, c]) => {
      const b = c.busy_bps || {};
      const cells = [name, direction === "dest" ? "down" : "up", bits(c.capacity_bps), count(c.users),
                     count(c.busy_users), bits(c.delivered_bps), pct(c.utilisation), c.busy_bps ? bits(b.min) : "–",
                     c.busy_bps ? bits(b.median) : "–", c.busy_bps ? bits(b.max) : "–",
                     c.jain === null ? "–" : c.jain.toFixed(3)];
      return el("tr", {"data-cell": name, "data-direction": direction}, ...cells.map((text) => el("td", {text: String(text)})));
    }));
  }
  // A traced plan's driver: a quiet line while it follows, the CLI's own notice (follow.report) when
  // it does not, marked the worst case when it left links shut (an outage in place).
  function renderDriver(t) {
    const d = t.driver, box = $("driver");
    box.hidden = !d;
    if (!d) return;
    box.className = "driver " + (d.running ? "ok" : d.shut ? "outage" : "dead");
    box.dataset.running = String(d.running);
    box.dataset.step = d.step === null ? "" : String(d.step);
    box.dataset.shut = String(d.shut || 0);
    box.textContent = d.running ?
      "trace driver: following (pid " + d.pid + ", a step every " + d.step_ms + " ms, at step " + d.step + "; " +
        count(d.shut) + " of " + count(d.links) + " traced links shut)" :
      "trace driver NOT RUNNING" + (d.shut ? " (WORST CASE: links left shut)" : "") + ": " + d.notice;
  }
  // How closely the glance direction's traced links track their traces (digest.tracking).
  function renderTracking(t) {
    const k = (t.tracking || {})[state.glance], p = $("tracking");
    p.hidden = !k;
    if (!k) return;
    p.dataset.links = String(k.links);
    p.dataset.backlogged = String(k.backlogged);
    p.dataset.ratio = k.ratio_mean === null ? "" : String(k.ratio_mean);
    p.dataset.within = k.within === null ? "" : String(k.within);
    p.textContent = count(k.links) + " traced links, " + count(k.backlogged) + " backlogged" + (k.ratio_mean === null ?
      " (the capacity bounds only a backlogged link: nothing to compare yet)" :
      ": delivered / trace capacity over the last seconds, mean " + k.ratio_mean.toFixed(3) + " (p5 " +
      pct(k.ratio.p5) + ", p95 " + pct(k.ratio.p95) + "); " + pct(k.within) + " within ±" +
      Math.round(k.tolerance * 100) + "% of their trace");
  }
  function renderGlance(t) {
    renderCohorts(t);
    renderCells(t);
    renderTracking(t);
    const dirs = Object.keys(t.distribution);
    const sel = $("glance-direction");
    for (const o of sel.options) o.disabled = !dirs.includes(o.value);
    if (dirs.length && !dirs.includes(state.glance)) { state.glance = dirs[0]; sel.value = state.glance; pickDist(); }
    const d = t.distribution[state.glance] || NO_DIST;
    if (!d.histogram.counts.length) {
      $("states").replaceChildren(); $("histogram").replaceChildren();
      $("quantiles").textContent = "nothing applied";
      return;
    }
    const chips = STATE_LABELS.map(([k, label]) => {
      const b = el("button", {type: "button", class: "chip " + k + (state.filter.state === k ? " on" : ""),
                              "data-state": k, "data-count": String(d.states[k])},
                   el("strong", {text: count(d.states[k])}), " " + label);
      b.addEventListener("click", () => setFilter({state: state.filter.state === k ? "" : k, share: ""}));
      return b;
    });
    $("states").replaceChildren(...chips);
    $("quantiles").textContent = d.links ?
      "of " + count(d.links) + " busy links with a rate: rate share p5 " + pct(d.rate_share.p5) + ", p50 " +
      pct(d.rate_share.p50) + ", p95 " + pct(d.rate_share.p95) + "; queueing delay p50 " +
      ms(d.queue_delay_ms.p50) + ", p95 " + ms(d.queue_delay_ms.p95) : "no busy links";
    const h = d.histogram, most = Math.max(1, ...h.counts);
    const bars = h.counts.map((n, k) => {
      const lo = h.edges[k], hi = k + 1 < h.edges.length ? h.edges[k + 1] : null;
      const range = hi === null ? lo + "-" : lo + "-" + hi;
      const label = hi === null ? "≥ " + Math.round(lo * 100) + "%" : Math.round(lo * 100) + "–" + Math.round(hi * 100) + "%";
      const fill = el("span", {class: "fill"});
      fill.style.height = Math.round(100 * n / most) + "%";  // CSSOM: the CSP allows no style attributes
      const b = el("button", {type: "button", class: "bar" + (state.filter.share === range ? " on" : ""),
                              "data-share": range, "data-count": String(n), title: count(n) + " links at " + label},
                   el("span", {class: "n", text: n ? count(n) : ""}), fill,
                   el("span", {class: "label", text: label}));
      b.addEventListener("click", () => setFilter({share: state.filter.share === range ? "" : range, state: ""}));
      return b;
    });
    $("histogram").replaceChildren(...bars);
  }
  // A state count or a histogram bar lists those links of the glance direction.
  function setFilter(f) {
    Object.assign(state.filter, f);
    const filtered = Boolean(state.filter.state || state.filter.share);
    if (filtered) $("q-direction").value = state.glance;
    $("filter-note").textContent = state.filter.state ? "state: " + state.filter.state :
      state.filter.share ? "rate share " + state.filter.share : "";
    $("clear-filter").hidden = !(state.filter.state || state.filter.share);
    for (const b of document.querySelectorAll("#states .chip")) b.classList.toggle("on", b.dataset.state === state.filter.state);
    for (const b of document.querySelectorAll("#histogram .bar")) b.classList.toggle("on", b.dataset.share === state.filter.share);
    $("viewport").scrollTop = 0;
    refreshRows();
  }
  function setSort(key, desc) {
    state.sort = {key, desc};
    for (const o of document.querySelectorAll("#thead button")) {
      if (o.dataset.sort === key) o.setAttribute("aria-sort", desc ? "descending" : "ascending");
      else o.removeAttribute("aria-sort");
    }
    $("viewport").scrollTop = 0;
    return refreshRows();
  }

  // ------------------------------------------------------------ link table (paged from the server)
  function parsePortFilter(text) {
    const m = /^\s*(\d+)\s*(?:-\s*(\d+))?\s*$/.exec(text);
    if (!m) return null;
    return [Number(m[1]), Number(m[2] || m[1])];
  }
  function visibleRange() {
    const vp = $("viewport");
    const first = Math.max(0, Math.floor(vp.scrollTop / ROW_H));
    const visible = Math.ceil((vp.clientHeight || 480) / ROW_H) + 1;
    return [first, visible];
  }
  function query() {
    const q = {sort: state.sort.key, order: state.sort.desc ? "desc" : "asc"};
    const host = $("q-host").value.trim();
    if (host) q.host = host;
    const portQuery = $("q-port").value.trim();
    const ports = portQuery ? parsePortFilter(portQuery) : null;
    $("q-port").classList.toggle("bad", Boolean(portQuery) && !ports);
    if (ports) q.port = ports[0] + "-" + ports[1];
    const dir = $("q-direction").value;
    if (dir) q.direction = dir;
    q.active = $("q-active").checked ? "true" : "false";
    if (state.filter.state) q.state = state.filter.state;
    if (state.filter.share) q.share = state.filter.share;
    return q;
  }
  let fetchSeq = 0, inflight = null;
  // Fetch the rows around the visible ones; resolves when they are drawn.
  function refreshRows() {
    if (!state.target) return Promise.resolve();
    const [first, visible] = visibleRange();
    const offset = Math.max(0, first - MARGIN);
    const q = query();
    const mine = ++fetchSeq;
    const key = JSON.stringify(q);
    inflight = getJSON("/api/links?" + targetQuery(Object.assign({offset, limit: visible + 2 * MARGIN}, q)))
      .then((page) => {
        if (mine !== fetchSeq) return;  // a newer request went out: its answer will draw
        state.page = {offset: page.offset, rows: page.links, matched: page.matched, total: page.total,
                      seq: page.seq, key};
        $("count").textContent = "showing " + page.matched.toLocaleString("en") + " of " +
          page.total.toLocaleString("en") + " links" + (q.active === "true" ? " (active only)" : "");
        $("spacer").style.height = (page.matched * ROW_H) + "px";
        renderRows();
      })
      .catch((e) => { if (mine === fetchSeq) $("count").textContent = e.message; });
    return inflight;
  }

  const rowPool = [];
  function makeRow() {
    const r = el("div", {class: "grid row", role: "row"});
    for (let k = 0; k < COLS_N; k++) r.append(el("span", {role: "cell", class: k >= 3 ? "num" : ""}));
    r.addEventListener("click", () => { if (r._row) selectLink(r._row); });
    return r;
  }
  function renderRows() {
    const [first, visible] = visibleRange();
    const p = state.page;
    const last = Math.min(p.matched, first + visible);
    const container = $("rows");
    container.style.transform = "translateY(" + (first * ROW_H) + "px)";
    while (rowPool.length < visible) { const r = makeRow(); rowPool.push(r); container.append(r); }
    let missing = false;
    for (let j = 0; j < rowPool.length; j++) {
      const r = rowPool[j];
      const idx = first + j;
      const row = idx < last ? p.rows[idx - p.offset] : undefined;
      if (idx < last && row === undefined) missing = true;
      if (row === undefined) { r.hidden = true; r._row = null; continue; }
      r.hidden = false;
      r._row = row;
      r.classList.toggle("selected", isSelected(row));
      r.classList.toggle("idle", !row.active);
      r.dataset.state = row.state;
      const cells = r.children;
      const text = [
        row.direction === "dest" ? "down" : "up",
        row.host,
        portText(row.port),
        row.capacity_bps !== null ? "trace " + bits(row.capacity_bps) : row.rate_bps === null ? "none" : bits(row.rate_bps),
        bits(row.throughput_bps),
        pct(row.capacity_bps !== null ? row.track_ratio : row.rate_share),
        ms(row.queue_delay_ms),
        bytes(row.bytes),
        count(row.packets),
        count(row.drops),
        count(row.overlimits),
        bytes(row.backlog_bytes) + " / " + count(row.backlog_pkts),
      ];
      for (let k = 0; k < COLS_N; k++) if (cells[k].textContent !== text[k]) cells[k].textContent = text[k];
    }
    return missing;
  }
  let scrollQueued = false;
  $("viewport").addEventListener("scroll", () => {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      if (renderRows()) refreshRows();  // scrolled past the rows we have
    });
  }, {passive: true});
  for (const id of ["q-host", "q-port", "q-direction", "q-active"]) {
    $(id).addEventListener("input", () => { $("viewport").scrollTop = 0; refreshRows(); });
  }
  for (const b of document.querySelectorAll("#thead button")) {
    b.addEventListener("click", () => {
      const key = b.dataset.sort;
      setSort(key, state.sort.key === key ? !state.sort.desc : !["host", "direction", "port"].includes(key));
    });
  }
  // The links that need a look: a backlog or drops first, lowest share of their rate first.
  function showWorst() {
    state.filter = {state: "", share: ""};
    setFilter({});
    $("q-active").checked = true;
    return setSort("worst", false);
  }
  $("worst").addEventListener("click", showWorst);
  $("glance-direction").addEventListener("change", () => {
    state.glance = $("glance-direction").value;
    pickDist(); drawAggregate();
    if (state.lastTarget) renderGlance(state.lastTarget);
    if (state.filter.state || state.filter.share) setFilter({});
  });
  $("clear-filter").addEventListener("click", () => setFilter({state: "", share: ""}));

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
    source.addEventListener("tick", (ev) => {
      const t = JSON.parse(ev.data);
      state.lastTick = Date.now();
      setConn("live", "ok");
      renderOverview(t.targets);
      const mine = t.targets.find((x) => x.interface === state.target.interface &&
        (x.netns || "") === (state.target.netns || ""));
      if (!mine) return;
      if (mine.layout !== state.layout) {  // a new configuration
        state.layout = mine.layout;
        prefillForm(mine.applied);
      }
      $("sample-time").textContent = mine.time ? new Date(mine.time * 1000).toLocaleTimeString("en-GB") : "–";
      $("sample-time").dataset.seq = String(mine.seq);
      state.lastTarget = mine;
      renderGlance(mine);
      renderDriver(mine);
      pushSample(mine);
      state.ticks.push(performance.now());
      if (state.ticks.length > 100) state.ticks.shift();
      refreshRows();
      if (state.selected) loadLink();
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
    state.layout = 0;
    state.page = {offset: 0, rows: [], matched: 0, total: 0, seq: 0, key: ""};
    state.agg = {time: [], down: [], up: [], total: [], drops: []};
    state.dist = emptyDist();
    state.series = null;
    state.lastTarget = null;
    state.link = {time: [], tp: [], drops: [], cap: []};
    $("link-chart-title").textContent = "One link: click a row of the table";
    drawAggregate(); drawLink();
    renderRows();
    loadHistory().catch((e) => setConn(e.message, "bad"));
    refreshRows();
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
      const scenario = form.elements.scenario.value;
      // a scenario names each cohort's profile, hosts, ports, granularity and servers itself
      const fields = scenario.trim() ? ["mode", "direction", "rate", "delay", "loss", "burst", "queue"] :
        ["profile", "hosts", "ports", "mode", "direction", "per", "servers", "mix", "rate", "delay", "loss", "burst",
         "queue"];
      for (const name of fields) {
        const v = form.elements[name].value.trim();
        if (v) payload[name] = v;
      }
      if (scenario.trim()) payload.scenario = scenario;
      if (payload.mix) delete payload.profile;
      if (payload.mix && !payload.ports) delete payload.per;  // a mix of whole hosts (the API's default)
      if ($("f-force").checked) payload.force = true;
      say("applying…", true);
      try {
        const r = await postJSON("/api/apply", payload);
        const a = r.applied;
        const what = a.cohorts && a.cohorts.length > 1 ?
          a.cohorts.length + " cohorts (" + a.cohorts.map((c) => c.name + ": " + (c.profile || "custom")).join(", ") + ")" :
          (a.profile || "custom");
        say("applied on " + (r.netns ? r.netns + "/" : "") + r.interface + ": " + what + ", " +
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
  window.ratelimitDashboard = {state, refreshRows, renderRows, showWorst, setSort, setFilter};
  getJSON("/api/targets").then((t) => { if (t.history_seconds) state.history = t.history_seconds; }).catch(() => {});
  initCharts();
  switchTarget();
})();

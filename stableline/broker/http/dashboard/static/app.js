// The stableline dashboard: four views (topics, one topic, transactions, brokers)
// rendered in the browser from the broker's JSON admin API, read again every
// REFRESH_MS. No build step and no third-party code: the rate chart is a small inline
// SVG. In a cluster each broker shows the figures of the topics it owns, and links
// every other topic to its owner's dashboard.

const REFRESH_MS = 2000;
const CHART_SAMPLES = 90; // three minutes of samples at REFRESH_MS
const PEEK_COUNT = 20;
const TOKEN_KEY = "stableline.adminToken";
const BACKLOG_TITLE =
  "Entries after the mark-delete position not acknowledged yet; a batch of messages is one entry";

const view = document.getElementById("view");
const statusLine = document.getElementById("status");

// ------------------------------------------------------------------ HTML

// Values interpolated into h`...` are escaped unless they are h`...` themselves.
class Raw {
  constructor(text) {
    this.text = text;
  }
}

function render(value) {
  if (value instanceof Raw) return value.text;
  if (Array.isArray(value)) return value.map(render).join("");
  if (value === null || value === undefined || value === false) return "";
  return String(value).replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );
}

function h(strings, ...values) {
  let out = strings[0];
  values.forEach((value, i) => {
    out += render(value) + strings[i + 1];
  });
  return new Raw(out);
}

function setHtml(id, content) {
  const element = document.getElementById(id);
  if (element) element.innerHTML = render(content);
}

// ------------------------------------------------------------------ formatting

const number = (n) => (n ?? 0).toLocaleString("en");
const rate = (r) => `${(r ?? 0).toFixed(1)}/s`;

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n ?? 0;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

function timestamp(ms) {
  if (!ms) return "never";
  return `${new Date(ms).toISOString().replace("T", " ").slice(0, 19)} UTC`;
}

const ago = (ms) => (ms ? `${duration(Date.now() - ms)} ago` : "never");

// "persistent://tenant/ns/topic" -> ["tenant", "ns", "topic"]
const topicParts = (name) => name.replace(/^persistent:\/\//, "").split("/");
const topicHref = (name) => `#/topic/${topicParts(name).map(encodeURIComponent).join("/")}`;
const topicApi = (name) =>
  `/admin/v2/persistent/${topicParts(name).map(encodeURIComponent).join("/")}`;
const stablePositionApi = (name) =>
  `/admin/v3/transactions/stablePosition/${topicParts(name).map(encodeURIComponent).join("/")}`;

// ------------------------------------------------------------------ cluster

// A broker's HTTP URL as a link target: only http(s) URLs (a registration read from
// the cluster's metadata could say `javascript:...`); null for anything else, which
// is then shown as text, never linked.
function httpLink(url) {
  if (typeof url !== "string") return null;
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return null;
  return parsed.origin;
}

let clusterName = null; // from /admin/v2/brokers/runtime

// The cluster's brokers and every topic's owner, as this broker sees them.
async function clusterState() {
  const cluster = encodeURIComponent(clusterName ?? "standalone");
  const [brokers, owners] = await Promise.all([
    api(`/admin/v2/clusters/${cluster}/brokers`),
    api(`/admin/v2/clusters/${cluster}/topicOwners`),
  ]);
  const byId = new Map(brokers.map((b) => [b.brokerId, b]));
  const me = brokers.find((b) => b.thisBroker);
  return { brokers, owners, byId, me: me?.brokerId, several: brokers.length > 1 };
}

// Where `topic`'s own page is: here, or on its owner's dashboard (null when the
// owner is down: nothing serves it).
function ownerTopicHref(state, topic) {
  const owner = state.byId.get(state.owners[topic]);
  if (!owner || owner.thisBroker) return topicHref(topic);
  const base = httpLink(owner.httpUrl);
  return owner.live && base ? `${base}/${topicHref(topic)}` : null;
}

function ownerCell(state, topic) {
  const id = state.owners[topic];
  const owner = state.byId.get(id);
  if (!owner) return h`<span class="muted">—</span>`;
  if (owner.thisBroker) return h`<code>${id}</code> <span class="badge here">this broker</span>`;
  if (!owner.live) {
    return h`<code>${id}</code> <span class="badge down" title="down since ${timestamp(owner.goneSinceMs)}">down</span>`;
  }
  const base = httpLink(owner.httpUrl);
  if (!base) return h`<code>${id}</code>`;
  return h`<a href="${base}/#/brokers"><code>${id}</code></a>`;
}

function levelBadge(level) {
  const short = level === "READ_COMMITTED" ? "rc" : "ru";
  return h`<span class="badge ${short}" title="subscriptionIsolationLevel">${level}</span>`;
}

// "OPEN, open 2m 05s" (the coordinator may not know a transaction left by a crash).
function pinnedSummary(pinnedBy) {
  const age = pinnedBy.ageMs !== undefined ? `, open ${duration(pinnedBy.ageMs)}` : "";
  return `${pinnedBy.status}${age}`;
}

// ------------------------------------------------------------------ admin API

class AuthRequired extends Error {}

async function api(path) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { headers, cache: "no-store" });
  if (response.status === 401 || response.status === 403) {
    throw new AuthRequired(`${response.status} from ${path}`);
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new Error(`${path}: ${body?.reason ?? `${response.status} ${response.statusText}`}`);
  }
  return body;
}

// ------------------------------------------------------------------ rate chart

const rateHistory = new Map(); // topic -> [{at, in, out}], newest last

function recordRates(topic, stats) {
  const samples = rateHistory.get(topic) ?? [];
  samples.push({ at: Date.now(), in: stats.msgRateIn ?? 0, out: stats.msgRateOut ?? 0 });
  while (samples.length > CHART_SAMPLES) samples.shift();
  rateHistory.set(topic, samples);
  return samples;
}

function niceCeiling(value) {
  if (value <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 5, 10].find((s) => s * magnitude >= value);
  return step * magnitude;
}

function rateChart(samples) {
  const width = 640;
  const height = 170;
  const left = 48;
  const bottom = 20;
  const top = 10;
  const plotWidth = width - left - 8;
  const plotHeight = height - top - bottom;
  const ceiling = niceCeiling(Math.max(...samples.map((s) => Math.max(s.in, s.out)), 0));
  const x = (i) => left + (plotWidth * (CHART_SAMPLES - samples.length + i)) / (CHART_SAMPLES - 1);
  const y = (v) => top + plotHeight - (plotHeight * v) / ceiling;
  const line = (key) => samples.map((s, i) => `${x(i).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ");
  const last = samples[samples.length - 1] ?? { in: 0, out: 0 };
  const span = duration((CHART_SAMPLES - 1) * REFRESH_MS);
  return h`<svg viewBox="0 0 ${width} ${height}" class="chart" role="img"
      aria-label="messages per second in and out">
    <line x1="${left}" y1="${top}" x2="${width - 8}" y2="${top}" class="grid"/>
    <line x1="${left}" y1="${top + plotHeight / 2}" x2="${width - 8}" y2="${top + plotHeight / 2}" class="grid"/>
    <line x1="${left}" y1="${top + plotHeight}" x2="${width - 8}" y2="${top + plotHeight}" class="axis"/>
    <text x="${left - 6}" y="${top + 4}" class="label" text-anchor="end">${number(ceiling)}</text>
    <text x="${left - 6}" y="${top + plotHeight / 2 + 4}" class="label" text-anchor="end">${number(ceiling / 2)}</text>
    <text x="${left - 6}" y="${top + plotHeight + 4}" class="label" text-anchor="end">0</text>
    <text x="${left}" y="${height - 4}" class="label">${span} ago</text>
    <text x="${width - 8}" y="${height - 4}" class="label" text-anchor="end">now</text>
    <polyline points="${line("in")}" class="rate-in"/>
    <polyline points="${line("out")}" class="rate-out"/>
  </svg>
  <div class="legend"><span class="key in"></span>in ${rate(last.in)}
    <span class="key out"></span>out ${rate(last.out)} <span class="muted">(messages per second)</span></div>`;
}

// ------------------------------------------------------------------ topics view

function topicsView() {
  return {
    nav: "topics",
    mount() {
      view.innerHTML = render(h`<h1>Topics</h1>
        <div id="topics-alert"></div>
        <p id="topics-served" class="muted"></p>
        <table id="topics" class="grid-table">
          <thead id="topics-head"></thead>
          <tbody id="topics-body"></tbody>
        </table>`);
    },
    async refresh() {
      const [nested, state] = await Promise.all([api("/admin/v2/broker-stats/topics"), clusterState()]);
      const topics = [];
      for (const bundles of Object.values(nested)) {
        for (const bundle of Object.values(bundles)) {
          topics.push(...Object.values(bundle.persistent ?? {}));
        }
      }
      const here = new Set(topics.map((t) => t.topic));
      // In a cluster: the topics other brokers own, with a link to their figures.
      const elsewhere = state.several
        ? Object.keys(state.owners).filter((t) => !here.has(t) && state.owners[t] !== state.me)
        : [];
      const rows = [
        ...topics.map((t) => ({ name: t.topic, stats: t })),
        ...elsewhere.map((name) => ({ name, stats: null })),
      ].sort((a, b) => a.name.localeCompare(b.name));
      const held = topics.filter((t) => t.transactionBuffer.stableLagEntries > 0);
      setHtml(
        "topics-alert",
        held.length
          ? h`<div class="alert bad">READ_COMMITTED readers are waiting on
              ${held.length} topic${held.length > 1 ? "s" : ""}:
              ${held.map((t, i) => h`${i ? ", " : ""}<a href="${topicHref(t.topic)}">${t.topic}</a>`)}.
              <a href="#/transactions">See the transactions that pin them.</a></div>`
          : "",
      );
      setHtml(
        "topics-served",
        state.several
          ? h`This broker (<code>${state.me}</code>) serves ${number(topics.length)} of the
              cluster's ${number(topics.length + elsewhere.length)} topics; the figures of the
              others are on their owners' dashboards (<a href="#/brokers">brokers</a>).`
          : "",
      );
      const columns = TOPIC_COLUMNS + (state.several ? 1 : 0);
      setHtml("topics-head", topicsHead(state.several));
      setHtml(
        "topics-body",
        rows.length
          ? rows.map((r) =>
              r.stats ? topicRow(r.stats, state) : remoteTopicRow(r.name, state, columns),
            )
          : h`<tr><td colspan="${columns}" class="muted">No topics yet: produce to one and it appears here.</td></tr>`,
      );
    },
  };
}

const TOPIC_COLUMNS = 9;

function topicsHead(withOwner) {
  return h`<tr><th>Topic</th>${withOwner ? h`<th>Owner</th>` : ""}
    <th class="num">In</th><th class="num">Out</th>
    <th class="num" title="since the broker started">Messages in</th>
    <th class="num">Storage</th><th>Publishers</th><th>Subscriptions</th>
    <th class="num" title="${BACKLOG_TITLE}">Backlog (entries)</th>
    <th>READ_COMMITTED can read</th></tr>`;
}

// A topic another broker owns: its name, its owner, and where its figures are.
function remoteTopicRow(name, state, columns) {
  const href = ownerTopicHref(state, name);
  const owner = state.byId.get(state.owners[name]);
  return h`<tr data-topic="${name}" class="elsewhere">
    <td>${href ? h`<a href="${href}">${name}</a>` : name}</td>
    <td class="owner">${ownerCell(state, name)}</td>
    <td colspan="${columns - 2}" class="muted">${
      owner?.live === false
        ? "unavailable: its owner is down, and its data waits on that broker's disk"
        : "served by its owner: its figures are on the owner's dashboard"
    }</td></tr>`;
}

function topicRow(t, state) {
  const subs = Object.values(t.subscriptions);
  const committed = subs.filter((s) => s.subscriptionIsolationLevel === "READ_COMMITTED").length;
  const backlog = subs.reduce((sum, s) => sum + s.msgBacklog, 0);
  const tb = t.transactionBuffer;
  const pinned = tb.stableLagEntries > 0;
  const oldest = tb.oldestOngoingTxn;
  const readable = pinned
    ? h`<span class="bad-text">${number(tb.stableLagEntries)} entries held back for
        ${duration(tb.stableLagMs)}</span>${oldest ? h` by txn <code>${oldest.txnId}</code>` : ""}`
    : tb.state === "Ready"
      ? h`<span class="ok-text">everything</span>`
      : h`<span class="bad-text">nothing new: ${tb.state}</span>`;
  return h`<tr data-topic="${t.topic}" class="${pinned ? "pinned" : ""}">
    <td><a href="${topicHref(t.topic)}">${t.topic}</a></td>
    ${state.several ? h`<td class="owner">${ownerCell(state, t.topic)}</td>` : ""}
    <td class="num">${rate(t.msgRateIn)}</td><td class="num">${rate(t.msgRateOut)}</td>
    <td class="num">${number(t.msgInCounter)}</td><td class="num">${bytes(t.storageSize)}</td>
    <td class="publishers">${number((t.publishers ?? []).length)}</td>
    <td>${subs.length} <span class="muted">(${committed} RC, ${subs.length - committed} RU)</span></td>
    <td class="num">${number(backlog)}</td><td>${readable}</td></tr>`;
}

// ------------------------------------------------------------------ topic view

function topicView(name) {
  const peekState = { subscription: null, level: null };
  const page = {
    nav: "topics",
    mount() {
      view.innerHTML = render(h`<p class="crumbs"><a href="#/">Topics</a> /</p>
        <h1 class="topic-name">${name}</h1>
        <div id="topic-owner"></div>
        <div id="topic-details">
        <div id="topic-alert"></div>
        <div id="topic-cards" class="cards"></div>
        <div class="columns">
          <section><h2>Rates</h2><div id="topic-chart"></div></section>
          <section><h2>Transaction buffer</h2><table id="buffer" class="kv"></table></section>
        </div>
        <section><h2>Subscriptions</h2>
          <table class="grid-table"><thead><tr><th>Subscription</th><th>Type</th>
            <th>Isolation level</th><th class="num" title="${BACKLOG_TITLE}">Backlog (entries)</th>
            <th class="num">Consumers</th>
            <th class="num">Unacked</th><th class="num">Delivered</th><th>Mark-delete</th>
            <th>Status</th><th>Peek</th></tr></thead>
          <tbody id="subscriptions"></tbody></table></section>
        <section><h2>Publishers</h2>
          <table class="grid-table"><thead><tr><th>Producer</th>
            <th class="num">Pending publishes</th><th class="num">Most pending allowed</th></tr></thead>
          <tbody id="publishers"></tbody></table></section>
        <section id="peek-section"><h2>Peek</h2>
          <p class="muted">The next messages of a subscription, read at either isolation level;
            nothing is delivered or acknowledged.</p>
          <div id="peek"><p class="muted">Choose a subscription and a level above.</p></div>
        </section>
        </div>`);
      view.onclick = (event) => {
        const button = event.target.closest("button[data-peek]");
        if (!button) return;
        peekState.subscription = button.dataset.peek;
        peekState.level = button.dataset.level;
        page.peek();
      };
    },
    async refresh() {
      // In a cluster another broker may own it: its figures are there, not here.
      const state = await clusterState();
      const ownerId = state.owners[name];
      const elsewhere = ownerId !== undefined && ownerId !== state.me;
      document.getElementById("topic-details").hidden = elsewhere;
      setHtml("topic-owner", elsewhere ? ownerNotice(name, state) : "");
      if (elsewhere) return;
      const [stats, stable, internal] = await Promise.all([
        api(`${topicApi(name)}/stats`),
        api(stablePositionApi(name)),
        api(`${topicApi(name)}/internalStats`),
      ]);
      renderTopicAlert(stable);
      renderCards(stats);
      setHtml("topic-chart", rateChart(recordRates(name, stats)));
      renderBuffer(stats.transactionBuffer, stable);
      const subs = Object.entries(stats.subscriptions);
      const firstLedger = internal.ledgers?.[0]?.ledgerId;
      setHtml(
        "subscriptions",
        subs.length
          ? subs.map(([sub, s]) => subscriptionRow(sub, s, stable, firstLedger))
          : h`<tr><td colspan="10" class="muted">No subscriptions.</td></tr>`,
      );
      const publishers = stats.publishers ?? [];
      setHtml(
        "publishers",
        publishers.length
          ? publishers.map(
              (p) => h`<tr data-publisher="${p.producerName}"><td><b>${p.producerName}</b></td>
                <td class="num">${number(p.pendingPublishes)}</td>
                <td class="num">${number(p.maxPendingPublishes)}</td></tr>`,
            )
          : h`<tr><td colspan="3" class="muted">No producers connected.</td></tr>`,
      );
    },
    async peek() {
      const { subscription, level } = peekState;
      setHtml("peek", h`<p class="muted">Reading ${subscription} at ${level}…</p>`);
      try {
        const query = new URLSearchParams({ isolationLevel: level, count: PEEK_COUNT });
        const path = `${topicApi(name)}/subscription/${encodeURIComponent(subscription)}/peek?${query}`;
        setHtml("peek", peekResult(await api(path)));
      } catch (error) {
        setHtml("peek", h`<div class="alert bad">${error.message}</div>`);
      }
      document.getElementById("peek-section").scrollIntoView({ block: "nearest" });
    },
  };
  return page;
}

function ownerNotice(name, state) {
  const id = state.owners[name];
  const owner = state.byId.get(id);
  if (owner?.live) {
    return h`<div class="alert good" id="served-elsewhere">Broker <code>${id}</code> owns this
      topic and serves it: <a href="${ownerTopicHref(state, name)}">open it on its dashboard</a>.</div>`;
  }
  const since = owner?.goneSinceMs ? ` since ${timestamp(owner.goneSinceMs)}` : "";
  return h`<div class="alert bad" id="served-elsewhere">Broker <code>${id}</code> owns this topic
    and is down${since}: the topic is unavailable until it is back (its data waits on that
    broker's disk).</div>`;
}

function renderTopicAlert(stable) {
  const waiting = stable.readCommittedSubscriptions;
  const names = waiting.map((s, i) => h`${i ? ", " : ""}<b>${s}</b>`);
  if (!stable.reason) {
    const who = waiting.length ? h`READ_COMMITTED subscriptions (${names})` : "READ_COMMITTED readers";
    setHtml(
      "topic-alert",
      h`<div class="alert good">${who} can read everything up to the last entry
        (${stable.lastConfirmedEntry}).</div>`,
    );
    return;
  }
  const who = waiting.length
    ? h`${names} (READ_COMMITTED) ${waiting.length > 1 ? "are" : "is"}`
    : "READ_COMMITTED readers are";
  const pin = stable.pinnedBy;
  const cause = pin
    ? h`<b>${who} held back by open transaction <code>${pin.txnId}</code></b>${
        pin.ageMs !== undefined
          ? h`, open for ${duration(pin.ageMs)}, timing out in ${duration(pin.timeoutAt - Date.now())}`
          : h` (${pin.status}: not known to the coordinator)`
      }. Its first entry is ${pin.firstPosition}, so READ_COMMITTED reads stop at ${stable.maxReadPosition}
      until it commits or aborts.`
    : h`<b>${who} held back</b>: ${stable.reason}.`;
  setHtml(
    "topic-alert",
    h`<div class="alert bad" id="stall-reason">${cause}<br>
      ${number(stable.stableLagEntries)} entries wait behind it (the first published
      ${duration(stable.stableLagMs)} ago), up to the last entry ${stable.lastConfirmedEntry}.
      READ_UNCOMMITTED subscriptions are not affected.
      ${pin ? h`<a href="#/transactions">All open transactions →</a>` : ""}</div>`,
  );
}

function renderCards(stats) {
  const cards = [
    ["In", rate(stats.msgRateIn)],
    ["Out", rate(stats.msgRateOut)],
    ["Messages in (since broker start)", number(stats.msgInCounter)],
    ["Messages out (since broker start)", number(stats.msgOutCounter)],
    ["Storage", bytes(stats.storageSize)],
    ["Subscriptions", number(Object.keys(stats.subscriptions).length)],
    ["Publishers", number((stats.publishers ?? []).length)],
  ];
  setHtml(
    "topic-cards",
    cards.map(([label, value]) => h`<div class="card"><div class="muted">${label}</div><b>${value}</b></div>`),
  );
}

function renderBuffer(tb, stable) {
  const pin = stable.pinnedBy;
  const rows = [
    ["State", tb.state],
    ["maxReadPosition", tb.maxReadPosition],
    ["Last entry (LAC)", tb.lastConfirmedEntry],
    [
      "Lag behind LAC",
      tb.stableLagEntries
        ? h`<span class="bad-text">${number(tb.stableLagEntries)} entries, ${duration(tb.stableLagMs)}</span>`
        : h`<span class="ok-text">none</span>`,
    ],
    ["Ongoing transactions", number(tb.ongoingTxnSize)],
    ["Pinned by", pin ? h`<code>${pin.txnId}</code> from ${pin.firstPosition} (${pin.status})` : "—"],
    ["Aborted transactions kept", number(tb.abortedTxnSize)],
    [
      "Last snapshot",
      tb.lastSnapshotTimestamps
        ? `${timestamp(tb.lastSnapshotTimestamps)} (${ago(tb.lastSnapshotTimestamps)}), ${bytes(tb.lastSnapshotBytes)}`
        : "none yet",
    ],
    [
      "Recovery",
      `${duration(tb.recoveryTimeMs)}, ${number(tb.replayedEntries)} entries replayed` +
        (tb.recoveredFromSnapshot ? " after a snapshot" : ""),
    ],
  ];
  setHtml("buffer", rows.map(([key, value]) => h`<tr><th>${key}</th><td>${value}</td></tr>`));
}

// A cursor whose mark-delete lies before the first entry kept ("3:-1" with ledger 3
// the oldest) has acknowledged nothing that is still there.
function markDelete(position, firstLedger) {
  const [ledger, entry] = position.split(":").map(Number);
  if (entry === -1 && (firstLedger === undefined || ledger <= firstLedger)) {
    return h`<span class="muted" title="mark-delete position ${position}">nothing acked</span>`;
  }
  return position;
}

function subscriptionRow(name, s, stable, firstLedger) {
  const committed = s.subscriptionIsolationLevel === "READ_COMMITTED";
  const held = committed && stable.stableLagEntries > 0;
  const status = held
    ? h`<span class="bad-text">waiting: reads stop at ${stable.maxReadPosition}${
        stable.pinnedBy ? h` (txn <code>${stable.pinnedBy.txnId}</code>)` : ""
      }</span>`
    : committed
      ? h`<span class="ok-text">reads to the stable position</span>`
      : h`<span class="ok-text">reads to the last entry</span>`;
  return h`<tr data-subscription="${name}" class="${held ? "pinned" : ""}">
    <td><b>${name}</b></td><td>${s.type}</td>
    <td class="isolation">${levelBadge(s.subscriptionIsolationLevel)}</td>
    <td class="num">${number(s.msgBacklog)}</td><td class="num">${number(s.consumers.length)}</td>
    <td class="num">${number(s.unackedMessages)}</td><td class="num">${number(s.msgOutCounter)}</td>
    <td class="mark-delete">${markDelete(s.markDeletePosition, firstLedger)}</td><td>${status}</td>
    <td class="peek-buttons">
      <button data-peek="${name}" data-level="READ_COMMITTED">RC</button>
      <button data-peek="${name}" data-level="READ_UNCOMMITTED">RU</button></td></tr>`;
}

function peekResult(result) {
  const hidden = result.entriesAfterBound
    ? h` ${number(result.entriesAfterBound)} entries after it are not visible at this level.`
    : "";
  const rows = result.messages.map(
    (m) => h`<tr class="${m.visibleToReadCommitted ? "" : "invisible"}">
      <td><code>${m.messageId}</code></td><td>${timestamp(m.publishTime)}</td>
      <td>${m.txnId ? h`<code>${m.txnId}</code> ${m.txnState}` : h`<span class="muted">none</span>`}</td>
      <td>${m.visibleToReadCommitted ? "yes" : h`<b>no</b>`}</td><td>${m.key ?? ""}</td>
      <td class="payload">${m.payloadEncoding === "base64" ? h`<span class="muted">base64</span> ` : ""}${m.payload}${
        m.payloadTruncated ? "…" : ""
      }</td></tr>`,
  );
  return h`<p id="peek-summary">${levelBadge(result.isolationLevel)} <b>${result.subscription}</b>:
      ${number(result.messages.length)} message(s) after mark-delete ${result.markDeletePosition},
      read up to ${result.bound}.${hidden}</p>
    <table class="grid-table" id="peek-messages"><thead><tr><th>Message id</th><th>Published</th>
      <th>Transaction</th><th>Visible to READ_COMMITTED</th><th>Key</th><th>Payload</th></tr></thead>
    <tbody>${rows.length ? rows : h`<tr><td colspan="6" class="muted">Nothing to read at this level.</td></tr>`}</tbody></table>`;
}

// ------------------------------------------------------------------ transactions view

function transactionsView() {
  return {
    nav: "transactions",
    mount() {
      view.innerHTML = render(h`<h1>Transactions</h1>
        <div id="coordinator" class="cards"></div>
        <section><h2>Topics whose READ_COMMITTED readers wait</h2>
          <p class="muted">A topic's stable position stops before the first entry of its oldest open
            transaction: READ_COMMITTED subscriptions read nothing after it until that transaction ends.</p>
          <table class="grid-table"><thead><tr><th>Topic</th><th>Pinned by</th>
            <th class="num">Entries held back</th><th class="num">For</th><th>Stable position / last entry</th>
            <th>READ_COMMITTED subscriptions</th></tr></thead>
          <tbody id="pinned-topics"></tbody></table></section>
        <section><h2>Open transactions</h2>
          <table class="grid-table"><thead><tr><th>Transaction</th><th>Status</th><th class="num">Age</th>
            <th>Times out</th><th>Topics written</th><th>Pins</th></tr></thead>
          <tbody id="open-transactions"></tbody></table></section>`);
    },
    async refresh() {
      const [coordinator, positions] = await Promise.all([
        api("/admin/v3/transactions/coordinatorStats"),
        api("/admin/v3/transactions/stablePositions"),
      ]);
      const cards = [
        ["Open", coordinator.openTxns],
        ["Committed", coordinator.committedCount],
        ["Aborted", coordinator.abortedCount],
        ["Timed out", coordinator.timedOutCount],
        ["Low watermark", coordinator.lowWaterMark],
      ];
      setHtml(
        "coordinator",
        cards.map(([label, value]) => h`<div class="card"><div class="muted">${label}</div><b>${number(value)}</b></div>`),
      );
      const waiting = positions.filter((p) => p.stableLagEntries > 0 || p.reason);
      const pins = new Map(); // txnId -> topics it pins
      for (const p of waiting) {
        if (p.pinnedBy) pins.set(p.pinnedBy.txnId, [...(pins.get(p.pinnedBy.txnId) ?? []), p.topic]);
      }
      setHtml(
        "pinned-topics",
        waiting.length
          ? waiting.map(
              (p) => h`<tr class="pinned" data-topic="${p.topic}">
              <td><a href="${topicHref(p.topic)}">${p.topic}</a></td>
              <td>${p.pinnedBy ? h`<code>${p.pinnedBy.txnId}</code> ${pinnedSummary(p.pinnedBy)}` : p.reason}</td>
              <td class="num">${number(p.stableLagEntries)}</td><td class="num">${duration(p.stableLagMs)}</td>
              <td>${p.maxReadPosition} / ${p.lastConfirmedEntry}</td>
              <td>${p.readCommittedSubscriptions.join(", ") || h`<span class="muted">none</span>`}</td></tr>`,
            )
          : h`<tr><td colspan="6" class="ok-text">None: READ_COMMITTED readers can read every topic to its last entry.</td></tr>`,
      );
      const open = [...coordinator.openTransactions].sort((a, b) => b.ageMs - a.ageMs);
      setHtml(
        "open-transactions",
        open.length
          ? open.map((t) => openTransactionRow(t, pins.get(t.txnId) ?? []))
          : h`<tr><td colspan="6" class="muted">No open transactions.</td></tr>`,
      );
    },
  };
}

function openTransactionRow(t, pinned) {
  return h`<tr data-txn="${t.txnId}" class="${pinned.length ? "pinning" : ""}">
    <td><code>${t.txnId}</code>${t.name ? h` <span class="muted">${t.name}</span>` : ""}</td>
    <td>${t.status}</td><td class="num">${duration(t.ageMs)}</td>
    <td>in ${duration(t.timeoutAt - Date.now())}</td>
    <td>${t.producedPartitions.map((p, i) => h`${i ? ", " : ""}<a href="${topicHref(p)}">${p}</a>`)}</td>
    <td>${
      pinned.length
        ? h`<span class="badge pin">pins ${pinned.length} topic${pinned.length > 1 ? "s" : ""}</span>`
        : h`<span class="muted">—</span>`
    }</td></tr>`;
}

// ------------------------------------------------------------------ brokers view

const LOAD_TITLE = "As the broker last reported it (every load_report_interval_s, 5 s by default)";

function brokersView() {
  return {
    nav: "brokers",
    mount() {
      view.innerHTML = render(h`<h1>Brokers</h1>
        <div id="cluster-cards" class="cards"></div>
        <p class="muted">Each topic has one owner, the broker whose disk holds it. Every broker
          serves its dashboard on its HTTP port and shows the topics it owns.</p>
        <table class="grid-table"><thead><tr><th>Broker (gRPC)</th><th>State</th>
          <th>Dashboard and admin API</th><th class="num">Topics owned</th>
          <th class="num" title="${LOAD_TITLE}">Topics loaded</th>
          <th class="num" title="${LOAD_TITLE}">Connections</th>
          <th class="num" title="${LOAD_TITLE}">Msgs in</th>
          <th class="num" title="${LOAD_TITLE}">Msgs out</th>
          <th class="num" title="${LOAD_TITLE}: CPU seconds per second (1 = one core)">CPU</th>
          <th class="num" title="${LOAD_TITLE}">Memory</th><th>Started</th>
          <th>Version</th><th>Host (pid)</th></tr></thead>
        <tbody id="brokers"></tbody></table>`);
    },
    async refresh() {
      const state = await clusterState();
      const live = state.brokers.filter((b) => b.live).length;
      const cards = [
        ["Cluster", clusterName ?? "standalone"],
        ["Brokers live", `${live} of ${state.brokers.length}`],
        ["Topics", number(Object.keys(state.owners).length)],
      ];
      setHtml(
        "cluster-cards",
        cards.map(([label, value]) => h`<div class="card"><div class="muted">${label}</div><b>${value}</b></div>`),
      );
      setHtml("brokers", state.brokers.map((b) => brokerRow(b)));
    },
  };
}

function brokerLinkCell(url) {
  if (!url) return h`<span class="muted">—</span>`;
  const base = httpLink(url);
  return base ? h`<a href="${base}/">${url}</a>` : h`<code>${url}</code>`;
}

function brokerRow(b) {
  const state = b.live
    ? h`<span class="ok-text">live</span>`
    : h`<span class="bad-text">down${b.goneSinceMs ? ` since ${timestamp(b.goneSinceMs)}` : ""}</span>`;
  return h`<tr data-broker="${b.brokerId}" class="${b.live ? "" : "pinned"}">
    <td><code>${b.brokerId}</code>${b.thisBroker ? h` <span class="badge here">this broker</span>` : ""}</td>
    <td class="state">${state}${b.draining ? h` <span class="badge" title="admin brokers decommission: its copies are moving to the other brokers">draining</span>` : ""}</td>
    <td>${brokerLinkCell(b.httpUrl)}</td>
    <td class="num owned">${number(b.ownedTopics)}</td>
    <td class="num">${b.live ? number(b.load.loadedTopics) : "—"}</td>
    <td class="num">${b.live ? number(b.load.connections) : "—"}</td>
    <td class="num">${b.live ? rate(b.load.msgRateIn) : "—"}</td>
    <td class="num">${b.live ? rate(b.load.msgRateOut) : "—"}</td>
    <td class="num">${b.live ? (b.load.cpu ?? 0).toFixed(2) : "—"}</td>
    <td class="num">${b.live ? bytes(b.load.rssBytes) : "—"}</td>
    <td>${b.startedAtMs ? `${timestamp(b.startedAtMs)} (${ago(b.startedAtMs)})` : "—"}</td>
    <td>${b.version ?? "—"}</td>
    <td>${b.hostname ? `${b.hostname} (${b.pid})` : "—"}</td></tr>`;
}

// ------------------------------------------------------------------ router

function notFoundView(address) {
  return {
    nav: null,
    mount() {
      view.innerHTML = render(h`<h1>Not found</h1>
        <p id="not-found">Nothing lives at <code>${address}</code> on this dashboard.
        Its pages are <a href="#/">Topics</a>, a topic's own
        (<code>#/topic/TENANT/NAMESPACE/TOPIC</code>),
        <a href="#/transactions">Transactions</a> and <a href="#/brokers">Brokers</a>.</p>`);
    },
    async refresh() {},
  };
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  let decoded;
  try {
    decoded = parts.map(decodeURIComponent);
  } catch {
    return notFoundView(location.hash);
  }
  if (decoded.length === 0) return topicsView();
  if (decoded[0] === "transactions" && decoded.length === 1) return transactionsView();
  if (decoded[0] === "brokers" && decoded.length === 1) return brokersView();
  if (decoded[0] === "topic" && decoded.length === 4) {
    return topicView(`persistent://${decoded.slice(1).join("/")}`);
  }
  return notFoundView(location.hash);
}

// ------------------------------------------------------------------ broker start

let brokerStartedAtMs = null;

async function refreshRuntime() {
  const runtime = await api("/admin/v2/brokers/runtime");
  if (brokerStartedAtMs !== null && runtime.startedAtMs !== brokerStartedAtMs) {
    rateHistory.clear(); // the counters started again from zero
  }
  brokerStartedAtMs = runtime.startedAtMs;
  clusterName = runtime.cluster ?? "standalone";
  const since = document.getElementById("since");
  since.textContent = `counters since broker start ${timestamp(runtime.startedAtMs)} (${duration(runtime.uptimeMs)} ago)`;
  since.title = `stableline ${runtime.version}`;
}

function askForToken() {
  view.innerHTML = render(h`<h1>Token needed</h1>
    <p>This broker's admin API asks for a token. It is kept in this tab only.</p>
    <form id="token-form"><input id="token" type="password" size="60" placeholder="token"
      autocomplete="off"> <button>Use token</button></form>`);
  document.getElementById("token-form").onsubmit = (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
    show();
  };
}

let generation = 0;

async function show() {
  const mine = ++generation;
  const page = route();
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === page.nav);
  }
  view.onclick = null;
  page.mount();
  while (mine === generation) {
    if (!document.hidden) {
      try {
        // The cluster's name, which the cluster's documents are read by, comes first.
        if (clusterName === null) await refreshRuntime();
        await Promise.all([refreshRuntime(), page.refresh()]);
        if (mine !== generation) return;
        statusLine.textContent = `updated ${new Date().toLocaleTimeString()} · every ${REFRESH_MS / 1000} s`;
        statusLine.className = "";
        setHtml("error", "");
      } catch (error) {
        if (mine !== generation) return;
        if (error instanceof AuthRequired) {
          askForToken();
          return;
        }
        statusLine.textContent = "not updated: see the error below";
        statusLine.className = "bad-text";
        setHtml("error", h`<div class="alert bad">${error.message}</div>`);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, REFRESH_MS));
  }
}

window.addEventListener("hashchange", show);
show();

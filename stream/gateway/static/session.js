// One session's meter, live over Server-Sent Events.
// First GET /context: 200 draws the session, 404 says it is unknown (or outside the
// token's grant) and waits for it, 401 asks for a token. Then the stream: EventSource
// resends the last `id:` (the update's version, `gen-seq-n-v`) as Last-Event-ID when it
// reconnects; if the browser gives up (a non-200 answer), we ask /context why and
// reconnect ourselves with ?lastEventId= so the gateway still skips what we already have.
// `event: expired` (the session expired) and `event: reauthenticate` (the token expired)
// end the stream for good.
import { authHeaders, onToken, SIGN_IN, token, withToken } from "./auth.js";
import { ago, describe, el, eventDate, meter, percentText, ring, setRing, tokens } from "./meter.js";

const PREFIX = "/sessions/";
const sessionId = decodeURIComponent(location.pathname.slice(PREFIX.length));
const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const card = $("card");
const ringSvg = ring();
$("ring").append(ringSvg);
$("session-id").textContent = sessionId;
document.title = `${sessionId} · context meter`;

let lastId = null; // the last event id seen
// When Redis took the shown update (epoch ms), as the list page's "updated … ago": the
// Last-Modified of /context, or for a live update the moment it arrived (the gateway relays
// it as Redis publishes it). The stream's first message repeats what /context gave: its
// arrival is not the update's time, so the same text keeps the time it had.
let updatedAt = null;
let shownText = null; // the JSON text of the shown update
let source = null;
let over = false; // expired, or not authorised: no more reconnecting
let heard = null; // what the live region last said about the figures: {bucket, level, faults}

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.querySelector(".status-text").textContent = text;
}

function announce(text) {
  $("announce").textContent = text;
}

function notice(text) {
  const box = $("notice");
  box.hidden = !text;
  box.textContent = text || "";
}

// Say what matters, not every update: the first figure, a level change (ok, filling up,
// nearly full), every 10 points crossed, faults appearing.
function announceChanges(m) {
  const now = { bucket: m.percent === null ? null : Math.floor(m.percent / 10), level: m.level, faults: m.faults.length };
  const was = heard;
  heard = now;
  if (was !== null && was.bucket === now.bucket && was.level === now.level && now.faults <= was.faults) return;
  const parts = [];
  if (was === null || was.bucket !== now.bucket || was.level !== now.level) parts.push(describe(m));
  if (was !== null && now.faults > was.faults) parts.push(`${now.faults} faulted projection${now.faults > 1 ? "s" : ""}`);
  if (parts.length) announce(`${parts.join(". ")}.`);
}

function render(update) {
  const known = update !== null;
  const m = meter(update ?? { sessionId, seq: null });
  card.dataset.level = m.level;
  card.dataset.faulted = String(m.faults.length > 0);
  $("seq").textContent = `seq ${m.seq ?? "—"}`;

  setRing(ringSvg, m.percent, m.level);
  $("ring-percent").textContent = percentText(m.percent);
  const gauge = $("meter");
  gauge.setAttribute("aria-valuenow", m.percent === null ? "0" : String(Math.min(100, Math.round(m.percent * 10) / 10)));
  gauge.setAttribute("aria-valuetext", describe(m));

  const headline = $("headline");
  headline.querySelector(".used").textContent = m.used === null ? "—" : `~${tokens(m.used)}`;
  headline.querySelector(".capacity").textContent = tokens(m.capacity);
  let subline = "no provider sample yet";
  if (m.pressure !== null && m.used !== null) {
    const moved = m.used - m.pressure;
    subline = `provider's last prompt ${tokens(m.pressure)}, ${moved < 0 ? "−" : "+"}${tokens(Math.abs(moved))} since`;
  }
  if (m.capacity === null) subline += " · window not reported yet";
  $("subline").textContent = subline;

  // The bar is the composition of the heuristic estimate; say so, with both totals, so
  // its full width is not read as a full window.
  const estimate = m.rows.reduce((sum, r) => sum + r.tokens, 0);
  $("composition").textContent = !known
    ? "What fills it (estimated)"
    : m.used === null
      ? `What fills it: shares of an estimated ~${tokens(estimate)} tokens`
      : `What fills it: shares of an estimated ~${tokens(estimate)} tokens (headline ~${tokens(m.used)})`;

  // Segments: relative proportions of the heuristic total; zero-width ones are not drawn.
  $("bar").replaceChildren(
    ...m.segments.map((s) =>
      el("span", {
        class: `segment seg-${s.key}`,
        style: { flexGrow: String(s.tokens) },
        "data-key": s.key,
        title: `~${tokens(s.tokens)} ${s.label}`,
      }),
    ),
  );
  $("rows").replaceChildren(
    ...m.rows.map((r) =>
      el(
        "li",
        { class: "row", "data-key": r.key },
        el("span", { class: `swatch seg-${r.key}`, "aria-hidden": "true" }),
        el("span", { class: "row-label", text: r.label }),
        el("span", { class: "row-value", text: known ? `~${tokens(r.tokens)}` : "—" }),
        el("span", { class: "row-share", text: known && estimate ? `${Math.round(100 * r.share)}%` : "" }),
      ),
    ),
  );
  $("usage").replaceChildren(
    ...m.usage.map((u) =>
      el(
        "div",
        { class: "tile", "data-key": u.key },
        el("span", { class: "tile-label", text: u.label }),
        el("span", { class: "tile-value", text: known ? tokens(u.tokens) : "—" }),
      ),
    ),
  );

  const faults = $("faults");
  faults.hidden = m.faults.length === 0;
  faults.querySelector(".faults-list").replaceChildren(
    ...m.faults.map((f) =>
      el(
        "li",
        {},
        el("strong", { text: f.projection }),
        el("span", { class: "fault-seq", text: ` at seq ${f.seq ?? "?"}: ` }),
        el("code", { text: f.error }),
      ),
    ),
  );
  if (known) announceChanges(m);
}

function show(text, takenAt = Date.now()) {
  const update = JSON.parse(text);
  if (text !== shownText || updatedAt === null) updatedAt = takenAt;
  shownText = text;
  const event = $("event-time");
  event.hidden = !Number.isInteger(update.time);
  event.textContent = event.hidden ? "" : `event time ${eventDate(update.time)}`;
  render(update);
  tick();
  if (!over) setStatus("live", "live");
}

function tick() {
  $("updated").textContent = updatedAt === null ? "waiting" : `updated ${ago(updatedAt)}`;
}
setInterval(tick, 1000);

function unknown() {
  render(null);
  setStatus("waiting", "not found");
  $("subline").textContent = "No such session (yet): waiting for its first update…";
  announce("This session is not known to the gateway yet; waiting for its first update.");
}

function unauthorised() {
  over = true;
  if (source) source.close();
  setStatus("auth", "not authorised");
  notice(SIGN_IN);
}

function expired() {
  over = true;
  source.close();
  setStatus("expired", "expired");
  notice("This session expired: the gateway no longer holds it. The figures shown are its last ones.");
}

// Why a request or the stream failed, and what to do next.
async function check() {
  const sent = token();
  let response;
  try {
    response = await fetch(`${PREFIX}${encodeURIComponent(sessionId)}/context`, {
      headers: authHeaders({ Accept: "application/json" }),
    });
  } catch {
    setStatus("down", "gateway unreachable");
    return null;
  }
  // A token arrived meanwhile: this answer is about the old one, and start() runs anew.
  if (token() !== sent) return null;
  if (response.status === 401 || response.status === 400) {
    unauthorised();
    return null;
  }
  if (response.status === 404) {
    if (lastId === null) unknown();
    return null;
  }
  if (!response.ok) {
    setStatus("down", `gateway error ${response.status}`);
    return null;
  }
  const taken = Date.parse(response.headers.get("Last-Modified") ?? "");
  return { text: await response.text(), takenAt: Number.isNaN(taken) ? Date.now() : taken };
}

function connect() {
  if (over) return;
  const url = withToken(new URL(`${PREFIX}${encodeURIComponent(sessionId)}/context/stream`, location.href));
  if (lastId !== null) url.searchParams.set("lastEventId", lastId);
  source = new EventSource(url);
  source.onmessage = (event) => {
    lastId = event.lastEventId || lastId;
    show(event.data);
  };
  source.addEventListener("expired", expired);
  source.addEventListener("reauthenticate", () => {
    unauthorised();
    notice("Your access token expired. " + SIGN_IN);
  });
  source.onerror = async () => {
    if (over) return;
    if (source.readyState !== EventSource.CLOSED) {
      setStatus("down", "reconnecting"); // the browser retries by itself
      return;
    }
    setStatus("down", "reconnecting");
    await check();
    setTimeout(connect, 2000);
  };
}

async function start() {
  over = false;
  if (source) source.close();
  render(null);
  $("subline").textContent = "waiting for the first update…";
  const answer = await check();
  if (answer !== null) show(answer.text, answer.takenAt);
  connect();
}
onToken(start); // the app handed over a (new) token: start over with it
start();

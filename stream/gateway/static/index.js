// The live list of recently updated sessions: GET /sessions every 2 s (one small request
// instead of a stream per row), filtered by the search box as a prefix.
// Rows are keyed by session id and updated in place (texts, ring, order), so a row that
// has keyboard focus keeps it while the list refreshes around it. The list is sorted by
// when Redis took each update, so "updated … ago" is that time; the session's own event
// time (which may be years old for replayed logs) is shown beside it, labelled.
import { authHeaders, onToken, SIGN_IN, token } from "./auth.js";
import { ago, el, eventDate, levelOf, percentText, ring, setRing, tokens } from "./meter.js";

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);
const form = $("search");
const input = form.elements.namedItem("q");
const list = $("sessions");
const rows = new Map(); // session id -> the row's elements

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.querySelector(".status-text").textContent = text;
}

let announced = "";
function announce(text) {
  if (text === announced) return;
  announced = text;
  $("announce").textContent = text;
}

function notice(text) {
  const box = $("notice");
  box.hidden = !text;
  box.textContent = text || "";
}

const used = (n) => (n === null || n === undefined ? "—" : `~${tokens(n)}`);

function makeRow(sessionId) {
  const parts = {
    mini: ring("ring mini"),
    name: el("span", { class: "session-name", text: sessionId }),
    sub: el("span", { class: "session-sub" }),
    faults: el("span", { class: "badge fault" }),
    percent: el("span", { class: "session-percent" }),
    ago: el("span", { class: "session-ago" }),
    event: el("span", { class: "session-event" }),
  };
  parts.li = el(
    "li",
    { class: "session-row", "data-session": sessionId },
    el(
      "a",
      { href: `/sessions/${encodeURIComponent(sessionId)}` },
      parts.mini,
      el("span", { class: "session-main" }, parts.name, parts.sub),
      el("span", { class: "session-faults" }, parts.faults), // a cell even when no badge shows
      el("span", { class: "session-fill" }, parts.percent, el("span", { class: "cell-caption", text: "of window" })),
      el("span", { class: "session-when" }, parts.ago, parts.event),
    ),
  );
  return parts;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function updateRow(parts, session) {
  setRing(parts.mini, session.percent, levelOf(session.percent));
  setText(parts.sub, `${used(session.projectedTokens)} of ${tokens(session.contextWindow)} tokens · seq ${session.seq ?? "—"}`);
  parts.faults.hidden = !session.faults;
  setText(parts.faults, session.faults ? `${session.faults} fault${session.faults > 1 ? "s" : ""}` : "");
  setText(parts.percent, percentText(session.percent));
  parts.ago.dataset.updated = String(session.updatedAt ?? "");
  setText(parts.ago, session.updatedAt ? `updated ${ago(session.updatedAt)}` : "—");
  setText(parts.event, Number.isInteger(session.time) ? `event time ${eventDate(session.time)}` : "");
}

function show(sessions) {
  const focused = document.activeElement;
  const wanted = new Set(sessions.map((s) => s.sessionId));
  for (const [sessionId, parts] of rows) {
    if (!wanted.has(sessionId)) {
      parts.li.remove();
      rows.delete(sessionId);
    }
  }
  sessions.forEach((session, index) => {
    let parts = rows.get(session.sessionId);
    if (parts === undefined) {
      parts = makeRow(session.sessionId);
      rows.set(session.sessionId, parts);
    }
    updateRow(parts, session);
    // Move only what is out of place.
    if (list.children[index] !== parts.li) list.insertBefore(parts.li, list.children[index] ?? null);
  });
  // A focused row that had to move is focused again (moving a node blurs it).
  if (focused && focused !== document.activeElement && focused.isConnected) focused.focus({ preventScroll: true });
  $("empty").hidden = sessions.length > 0;
}

async function refresh() {
  const params = new URLSearchParams({ limit: "50" });
  if (input.value.trim()) params.set("prefix", input.value.trim());
  const sent = token();
  let response;
  try {
    response = await fetch(`/sessions?${params}`, { headers: authHeaders({ Accept: "application/json" }) });
  } catch {
    setStatus("down", "gateway unreachable");
    announce("The gateway is unreachable.");
    return;
  }
  if (token() !== sent) return; // answered for an older token: a newer refresh is on its way
  if (response.status === 401 || response.status === 400) {
    setStatus("auth", "not authorised");
    notice(SIGN_IN);
    announce("");
    stop();
    return;
  }
  if (!response.ok) {
    setStatus("down", `gateway error ${response.status}`);
    return;
  }
  const { sessions } = await response.json();
  show(sessions);
  notice("");
  setStatus("live", "live");
  announce(`${sessions.length} session${sessions.length === 1 ? "" : "s"} listed.`);
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const id = input.value.trim();
  if (id) location.href = `/sessions/${encodeURIComponent(id)}`;
});
input.addEventListener("input", refresh);
let timer = null;
function start() {
  stop();
  refresh();
  timer = setInterval(refresh, 2000);
}
function stop() {
  if (timer !== null) clearInterval(timer);
  timer = null;
}
onToken(start); // the app handed over a (new) token: list with it
start();

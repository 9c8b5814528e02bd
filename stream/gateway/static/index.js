// The live list of recently updated sessions: GET /sessions every 2 s (one small request
// instead of a stream per row), filtered by the search box as a prefix.
// Rows are keyed by session id and updated in place (texts, ring, order), so a row that
// has keyboard focus keeps it while the list refreshes around it.
import { authHeaders, SIGN_IN } from "./auth.js";
import { ago, el, eventTime, levelOf, percentText, ring, setRing, tokens } from "./meter.js";

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
  };
  parts.li = el(
    "li",
    { class: "session-row", "data-session": sessionId },
    el(
      "a",
      { href: `/sessions/${encodeURIComponent(sessionId)}` },
      parts.mini,
      el("span", { class: "session-main" }, parts.name, parts.sub),
      parts.faults,
      parts.percent,
      parts.ago,
    ),
  );
  return parts;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function updateRow(parts, session) {
  setRing(parts.mini, session.percent, levelOf(session.percent));
  setText(parts.sub, `${used(session.projectedTokens)} / ${tokens(session.contextWindow)} · seq ${session.seq ?? "—"}`);
  parts.faults.hidden = !session.faults;
  setText(parts.faults, session.faults ? `${session.faults} fault${session.faults > 1 ? "s" : ""}` : "");
  setText(parts.percent, percentText(session.percent));
  const at = eventTime(session, session.updatedAt);
  parts.ago.dataset.updated = String(at ?? "");
  setText(parts.ago, ago(at));
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
  let response;
  try {
    response = await fetch(`/sessions?${params}`, { headers: authHeaders({ Accept: "application/json" }) });
  } catch {
    setStatus("down", "gateway unreachable");
    announce("The gateway is unreachable.");
    return;
  }
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
refresh();
const timer = setInterval(refresh, 2000);
function stop() {
  clearInterval(timer);
}

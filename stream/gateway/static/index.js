// The live list of recently updated sessions: GET /sessions every 2 s (one small request
// instead of a stream per row), filtered by the search box as a prefix.
import { ago, el, percentText, ring, setRing, tokens, WARN_PERCENT, HIGH_PERCENT } from "./meter.js";

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);
const form = $("search");
const input = form.elements.namedItem("q");

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.querySelector(".status-text").textContent = text;
}

const used = (n) => (n === null || n === undefined ? "—" : `~${tokens(n)}`);
const levelOf = (percent) =>
  percent === null || percent < WARN_PERCENT ? "ok" : percent < HIGH_PERCENT ? "warn" : "high";

function row(session) {
  const mini = ring("ring mini");
  setRing(mini, session.percent, levelOf(session.percent));
  const href = `/sessions/${encodeURIComponent(session.sessionId)}`;
  const faults = session.faults
    ? el("span", { class: "badge fault", text: `${session.faults} fault${session.faults > 1 ? "s" : ""}` })
    : el("span");
  return el(
    "li",
    { class: "session-row", "data-session": session.sessionId },
    el(
      "a",
      { href },
      mini,
      el(
        "span",
        { class: "session-main" },
        el("span", { class: "session-name", text: session.sessionId }),
        el("span", {
          class: "session-sub",
          text: `${used(session.projectedTokens)} / ${tokens(session.contextWindow)} · seq ${session.seq ?? "—"}`,
        }),
      ),
      faults,
      el("span", { class: "session-percent", text: percentText(session.percent) }),
      el("span", { class: "session-ago", "data-updated": String(session.updatedAt ?? ""), text: ago(session.updatedAt) }),
    ),
  );
}

async function refresh() {
  const params = new URLSearchParams({ limit: "50" });
  if (input.value.trim()) params.set("prefix", input.value.trim());
  try {
    const response = await fetch(`/sessions?${params}`, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(String(response.status));
    const { sessions } = await response.json();
    $("sessions").replaceChildren(...sessions.map(row));
    $("empty").hidden = sessions.length > 0;
    setStatus("live", "live");
  } catch {
    setStatus("down", "gateway unreachable");
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const id = input.value.trim();
  if (id) location.href = `/sessions/${encodeURIComponent(id)}`;
});
input.addEventListener("input", refresh);
refresh();
setInterval(refresh, 2000);

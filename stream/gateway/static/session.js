// One session's meter, live over Server-Sent Events.
// EventSource resends the last `id:` (the update's seq) as Last-Event-ID when it
// reconnects; if the browser gives up (e.g. a 503), we reconnect ourselves with
// ?lastEventId= so the gateway still skips what we already have.
import { ago, el, meter, percentText, ring, setRing, tokens } from "./meter.js";

const PREFIX = "/sessions/";
const sessionId = decodeURIComponent(location.pathname.slice(PREFIX.length));
const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const card = $("card");
const ringSvg = ring();
$("ring").append(ringSvg);
$("session-id").textContent = sessionId;
document.title = `${sessionId} · context meter`;

let lastSeq = null;
let lastAt = null;

function setStatus(state, text) {
  const status = $("status");
  status.dataset.state = state;
  status.querySelector(".status-text").textContent = text;
}

function render(update) {
  const m = meter(update);
  card.dataset.level = m.level;
  card.dataset.faulted = String(m.faults.length > 0);
  $("seq").textContent = `seq ${m.seq ?? "—"}`;

  setRing(ringSvg, m.percent, m.level);
  $("ring-percent").textContent = percentText(m.percent);

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

  // Segments: relative proportions of the heuristic total; zero-width ones are not drawn.
  const bar = $("bar");
  bar.replaceChildren(
    ...m.segments.map((s) =>
      el("span", {
        class: `segment seg-${s.key}`,
        style: `flex-grow: ${s.tokens}`,
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
        el("span", { class: `swatch seg-${r.key}` }),
        el("span", { class: "row-label", text: r.label }),
        el("span", { class: "row-value", text: `~${tokens(r.tokens)}` }),
      ),
    ),
  );
  $("usage").replaceChildren(
    ...m.usage.map((u) =>
      el(
        "div",
        { class: "tile", "data-key": u.key },
        el("span", { class: "tile-label", text: u.label }),
        el("span", { class: "tile-value", text: tokens(u.tokens) }),
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
}

function tick() {
  $("updated").textContent = lastAt === null ? "waiting" : `updated ${ago(lastAt)}`;
}
setInterval(tick, 1000);

function connect() {
  const url = new URL(`${PREFIX}${encodeURIComponent(sessionId)}/context/stream`, location.href);
  if (lastSeq !== null) url.searchParams.set("lastEventId", String(lastSeq));
  const source = new EventSource(url);
  source.onopen = () => setStatus("live", "live");
  source.onmessage = (event) => {
    const update = JSON.parse(event.data);
    lastSeq = update.seq;
    lastAt = Date.now();
    render(update);
    tick();
  };
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      setStatus("down", "reconnecting");
      setTimeout(connect, 2000);
    } else {
      setStatus("down", "reconnecting");
    }
  };
}

render({ sessionId, seq: null });
$("subline").textContent = "waiting for the first update…";
connect();

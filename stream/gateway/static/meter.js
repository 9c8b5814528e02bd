// The context meter model and formatting, shared by the page's scripts.
// Mirrors stream/gateway/meter.py (keep the two in step): the ring is the provider figure
// (projectedTokens / contextWindow); the bar's segments take their RELATIVE proportions
// from the heuristic breakdown; the `~` rows show the heuristic figures unscaled.

export const BREAKDOWN = [
  ["systemTokens", "system"],
  ["toolsTokens", "tools"],
  ["messageTokens", "messages"],
];
export const USAGE = [
  ["uncachedInputTokens", "Input"],
  ["outputTokens", "Output"],
  ["cacheReadTokens", "Cache read"],
  ["cacheWriteTokens", "Cache write"],
];
export const WARN_PERCENT = 70;
export const HIGH_PERCENT = 90;

const section = (update, key) => {
  const value = update && update[key];
  return value && typeof value === "object" && !Array.isArray(value) ? value : {};
};
const count = (value) => (Number.isInteger(value) ? value : null);

export function meter(update) {
  const pressure = section(update, "contextPressure");
  const breakdown = section(update, "contextBreakdown");
  const usage = section(update, "tokenUsage");
  const rows = BREAKDOWN.map(([key, label]) => ({
    key,
    label,
    tokens: Math.max(0, count(breakdown[key]) ?? 0),
  }));
  const total = rows.reduce((sum, row) => sum + row.tokens, 0);
  for (const row of rows) row.share = total ? row.tokens / total : 0;
  const capacity = count(pressure.contextWindow);
  const used = count(pressure.projectedTokens);
  const percent = used !== null && capacity ? (100 * used) / capacity : null;
  const level = levelOf(percent);
  const faults = Object.entries(section(update, "faults")).map(([projection, fault]) => ({
    projection,
    seq: fault && count(fault.seq),
    error: fault && typeof fault === "object" ? String(fault.error ?? "") : String(fault),
  }));
  return {
    sessionId: String(update.sessionId ?? ""),
    seq: count(update.seq),
    capacity,
    used,
    pressure: count(pressure.pressureTokens),
    percent,
    level,
    rows,
    segments: rows.filter((row) => row.tokens > 0), // zero-width segments are not drawn
    usage: USAGE.map(([key, label]) => ({ key, label, tokens: count(usage[key]) ?? 0 })),
    faults,
  };
}

export const tokens = (n) => (n === null || n === undefined ? "—" : n.toLocaleString("en-US"));

export const levelOf = (percent) =>
  percent === null || percent < WARN_PERCENT ? "ok" : percent < HIGH_PERCENT ? "warn" : "high";

// What a screen reader hears for the ring (role="meter"'s aria-valuetext).
export function describe(m) {
  if (m.percent === null) return "no figure yet";
  const of = m.capacity === null ? "" : ` (~${tokens(m.used)} of ${tokens(m.capacity)} tokens)`;
  const level = m.level === "high" ? ", nearly full" : m.level === "warn" ? ", filling up" : "";
  return `${percentText(m.percent)} of the context window used${of}${level}`;
}

// The time an update stands for: its own `time` (epoch ms of the session's latest event,
// set by the worker), else the moment it arrived (records written before `time` existed).
export const eventTime = (update, arrived) => (Number.isInteger(update && update.time) ? update.time : arrived);

export function percentText(percent) {
  return percent === null ? "—" : `${percent.toFixed(1)}%`;
}

// How long ago, always relative ("3s ago", "5m ago", "2h ago", "4d ago").
export function ago(ms, now = Date.now()) {
  if (!ms) return "—";
  const seconds = Math.max(0, Math.round((now - ms) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

// An event time as a date, unambiguous in every locale: 2023-11-14 22:13 (local time).
export function eventDate(ms) {
  const d = new Date(ms);
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

const SVG = "http://www.w3.org/2000/svg";
const RADIUS = 42;
const CIRCUMFERENCE = 2 * Math.PI * RADIUS;

// An SVG occupancy ring (track + arc); setRing() moves it.
export function ring(className = "ring") {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 100 100");
  svg.setAttribute("class", className);
  svg.setAttribute("aria-hidden", "true");
  for (const part of ["ring-track", "ring-arc"]) {
    const circle = document.createElementNS(SVG, "circle");
    circle.setAttribute("cx", "50");
    circle.setAttribute("cy", "50");
    circle.setAttribute("r", String(RADIUS));
    circle.setAttribute("class", part);
    svg.append(circle);
  }
  setRing(svg, null, "ok");
  return svg;
}

export function setRing(svg, percent, level) {
  const arc = svg.querySelector(".ring-arc");
  const filled = percent === null ? 0 : (Math.min(100, percent) / 100) * CIRCUMFERENCE;
  arc.setAttribute("stroke-dasharray", `${filled} ${CIRCUMFERENCE}`);
  svg.dataset.level = level;
  svg.dataset.percent = percent === null ? "" : percent.toFixed(3);
}

// `style` takes an object and goes through the CSSOM: the page's Content-Security-Policy
// refuses inline style attributes.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name === "style") Object.assign(node.style, value);
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

// The page's bearer token (docs/gateway.md, "The page and its token").
// The page never takes a token from its URL: a link is shared, bookmarked and kept in
// history, and whoever opens it would read as its owner. The app the page belongs to hands
// the token over instead, in one of two ways:
//   - a script of the page's own origin calls `window.contextStream.setToken(token)`;
//   - the window that opened the page (window.open) or frames it posts
//     `{type: "context-stream:token", token}` to it. The page accepts that message only
//     from its opener or parent, and only from an allowed origin: its own, plus those in
//     its <meta name="context-stream-app-origins"> (space-separated; the gateway fills it
//     from STREAM_GATEWAY_EMBED_ORIGINS). When it loads it posts
//     `{type: "context-stream:ready"}` to those origins, so the app knows when to send.
// The token is kept in sessionStorage (this tab only, gone when the tab closes). Requests
// send it as `Authorization: Bearer`; EventSource cannot send headers, so the stream's URL
// carries it as `access_token=` (RFC 6750 §2.3), which the gateway never logs. With
// authentication off there is no token and nothing is sent.
const KEY = "context-stream.access_token";
const READY = "context-stream:ready";
const TOKEN = "context-stream:token";

const listeners = [];

export const token = () => sessionStorage.getItem(KEY);

// Origins allowed to hand the page a token: its own, and the configured app origins.
export function allowedOrigins() {
  const meta = document.querySelector('meta[name="context-stream-app-origins"]');
  const listed = (meta?.content ?? "").split(/\s+/).filter(Boolean);
  return new Set([location.origin, ...listed]);
}

export function setToken(value) {
  if (typeof value !== "string" || !value || value.length > 16384) return false;
  sessionStorage.setItem(KEY, value);
  for (const listener of listeners) listener();
  return true;
}

// Called whenever a new token arrives (the page starts over with it).
export function onToken(listener) {
  listeners.push(listener);
}

window.addEventListener("message", (event) => {
  const data = event.data;
  if (!data || typeof data !== "object" || data.type !== TOKEN) return;
  const fromApp = event.source !== null && (event.source === window.opener || (window.parent !== window && event.source === window.parent));
  if (!fromApp || !allowedOrigins().has(event.origin)) return;
  setToken(data.token);
});

// Tell the app the page listens. The message holds no secret; it is addressed to each
// allowed origin, so a window of another origin does not even learn the page loaded.
for (const target of new Set([window.opener, window.parent !== window ? window.parent : null])) {
  if (!target) continue;
  for (const origin of allowedOrigins()) {
    try {
      target.postMessage({ type: READY }, origin);
    } catch {
      // an origin the browser cannot address: nothing to tell it
    }
  }
}

window.contextStream = Object.freeze({ setToken });

export function authHeaders(headers = {}) {
  const bearer = token();
  return bearer ? { ...headers, Authorization: `Bearer ${bearer}` } : headers;
}

export function withToken(url) {
  const bearer = token();
  if (bearer) url.searchParams.set("access_token", bearer);
  return url;
}

export const SIGN_IN =
  "Not authorised: the access token is missing, expired or not valid for this gateway. " +
  "Open this page from its app again: the app hands the page a fresh token.";

// The page's bearer token (docs/gateway.md, "The page and its token").
// Opened as /#access_token=TOKEN (or /sessions/ID#access_token=TOKEN), the page takes the
// token from the fragment once (fragments never reach a server or a Referer), keeps it in
// sessionStorage (this tab only, gone when the tab closes) and removes it from the address
// bar and history. Requests send it as `Authorization: Bearer`; EventSource cannot send
// headers, so the stream's URL carries it as `access_token=` (RFC 6750 §2.3), which the
// gateway never logs. With authentication off there is no token and nothing is sent.
const KEY = "context-stream.access_token";

function takeFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("access_token");
  if (!token) return;
  sessionStorage.setItem(KEY, token);
  params.delete("access_token");
  const rest = params.toString();
  history.replaceState(history.state, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
}
takeFromFragment();

export const token = () => sessionStorage.getItem(KEY);

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
  "Open this page again with a fresh token: …#access_token=TOKEN.";

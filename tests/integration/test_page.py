"""The gateway's page in headless Chromium (Debian's, driven by Playwright): live from a
worker over SSE, the ring and the rows move as events are produced; with authentication
on, the page takes its token from its app (``contextStream.setToken``, or a message from
the window of an allowed origin that opened or frames it; never from its URL; an app on
another loopback port, allowed by ``STREAM_GATEWAY_EMBED_ORIGINS`` or not), keeps keyboard focus
while its list refreshes, tells a screen reader what matters, and axe-core (tests/oracle's
npm dependencies) finds no serious or critical violation on either page, light or dark.

Every page runs under the gateway's Content-Security-Policy: an inline script or style
would be a console error, which fails the test.

Screenshots are written to tests/artifacts/ (ignored by git) and their paths printed.
"""

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.integration.gateway_harness import Feeder, Gateway, Log, wait_seq
from tests.integration.harness import REPO, Deployment
from tests.integration.test_gateway_auth import Sessions
from tests.unit.gateway.tokens import Signer, jwks

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "tests" / "artifacts"
AXE = REPO / "tests" / "oracle" / "node_modules" / "axe-core" / "axe.min.js"
# Chromium reports every answer >= 400 on the console; these ones the page expects (an
# unknown session, a missing or expired token) and handles.
EXPECTED = ("Failed to load resource: the server responded with a status of 40",)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "no /usr/bin/chromium: `make setup` installs Debian's chromium"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@contextmanager
def checked_page(browser: Browser, expected: tuple[str, ...] = EXPECTED) -> Iterator[Page]:
    """A page in a fresh context whose scripts must run without an error: console errors
    other than ``expected`` fail the test."""
    context = browser.new_context(viewport={"width": 860, "height": 760}, device_scale_factor=1)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith(expected):
            errors.append(message.text)

    opened.on("console", console)
    yield opened
    context.close()
    assert errors == [], errors  # the page's scripts ran without an error


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with checked_page(browser) as opened:
        yield opened


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")  # artifacts never get committed
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"\nscreenshot: {path}")
    return path


def drawn(page: Page) -> dict[str, Any]:
    """What the page shows: ring, headline, bar segments, rows, usage tiles."""
    result: dict[str, Any] = page.evaluate(
        """() => {
          const q = (id) => document.querySelector(`[data-testid="${id}"]`);
          return {
            seq: q("seq").textContent,
            percent: q("ring-percent").textContent,
            ringPercent: q("ring").querySelector("svg").dataset.percent,
            headline: q("headline").textContent.replace(/\\s+/g, " ").trim(),
            segments: [...q("bar").children].map((s) => [s.dataset.key, s.style.flexGrow]),
            rows: [...q("rows").children].map((r) => r.textContent),
            composition: q("composition").textContent,
            usage: [...q("usage").children].map((t) => t.textContent),
          };
        }"""
    )
    return result


def expected(update: dict[str, Any]) -> dict[str, Any]:
    pressure, breakdown = update["contextPressure"], update["contextBreakdown"]
    usage = update["tokenUsage"]
    percent = 100 * pressure["projectedTokens"] / pressure["contextWindow"]
    labels = {"systemTokens": "system", "toolsTokens": "tools", "messageTokens": "messages"}
    estimate = sum(breakdown.get(k, 0) for k in labels)

    def share(key: str) -> str:  # JavaScript's Math.round
        return f"{math.floor(100 * breakdown.get(key, 0) / estimate + 0.5)}%"

    return {
        "seq": f"seq {update['seq']}",
        "percent": f"{percent:.1f}%",
        "headline": f"~{pressure['projectedTokens']:,} / {pressure['contextWindow']:,} tokens",
        "segments": [[k, str(breakdown[k])] for k in labels if breakdown.get(k)],
        "rows": [f"{label}~{breakdown.get(k, 0):,}{share(k)}" for k, label in labels.items()],
        # The bar is the estimate's composition, and says so with both totals.
        "composition": f"What fills it: shares of an estimated ~{estimate:,} tokens"
        f" (headline ~{pressure['projectedTokens']:,})",
        "usage": [
            f"{label}{usage.get(k, 0):,}"
            for k, label in (
                ("uncachedInputTokens", "Input"),
                ("outputTokens", "Output"),
                ("cacheReadTokens", "Cache read"),
                ("cacheWriteTokens", "Cache write"),
            )
        ],
    }


def test_the_ring_and_rows_follow_produced_events(
    live_deployment: Deployment, gateway: Gateway, feeder: Feeder, page: Page
) -> None:
    key, log = "page-demo", Log.read("example-agent-0.jsonl")
    cuts = log.cuts(3)
    feeder.send(key, log.lines[: cuts[0]])
    wait_seq(live_deployment, key, log.seq_after(cuts[0]))

    page.goto(f"{gateway.url}/sessions/{key}")
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "live")
    first_update = live_deployment.redis_update(key)
    assert first_update is not None
    expect(page.get_by_test_id("seq")).to_have_text(f"seq {first_update['seq']}")
    before = drawn(page)
    assert {k: before[k] for k in expected(first_update)} == expected(first_update)

    final = feeder.paced(key, log, cuts[0], len(log.lines), 6, 0.15)
    wait_seq(live_deployment, key, final)
    expect(page.get_by_test_id("seq")).to_have_text(f"seq {final}", timeout=15_000)
    last_update = live_deployment.redis_update(key)
    assert last_update is not None
    after = drawn(page)
    assert {k: after[k] for k in expected(last_update)} == expected(last_update)
    assert after["ringPercent"] != before["ringPercent"]  # the ring moved
    assert after["rows"] != before["rows"]  # and the rows
    expect(page.get_by_test_id("faults")).to_be_hidden()
    page.wait_for_timeout(700)  # let the ring's transition settle for the picture
    screenshot(page, "context-meter.png")
    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(300)
    screenshot(page, "context-meter-dark.png")

    page.emulate_media(color_scheme="light")
    page.goto(gateway.url + "/")
    row = page.locator(f'[data-session="{key}"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text(expected(last_update)["percent"] + "of window")
    # Updated: when Redis took it, relative; the event time beside it, labelled.
    expect(row.locator(".session-ago")).to_have_text(re.compile(r"^updated \d+s ago$"))
    expect(row.locator(".session-event")).to_have_text(
        re.compile(r"^event time \d{4}-\d\d-\d\d \d\d:\d\d$")
    )
    expect(page.get_by_test_id("columns")).to_contain_text("Window used")
    screenshot(page, "sessions.png")
    row.click()
    expect(page.get_by_test_id("session-id")).to_have_text(key)


def test_faults_are_shown_loudly(
    live_deployment: Deployment, gateway: Gateway, feeder: Feeder, page: Page
) -> None:
    key, log = "page-gap", Log.read("example-system-prompts.jsonl")
    page.goto(f"{gateway.url}/sessions/{key}")  # before the session exists
    # Not a green "live" over zeros: the session is not known (yet), and the page says so.
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "waiting")
    expect(page.get_by_test_id("status")).to_have_text("not found")
    expect(page.get_by_test_id("subline")).to_have_text(
        "No such session (yet): waiting for its first update…"
    )
    expect(page.get_by_test_id("usage")).to_contain_text("Input—")
    feeder.send(key, log.lines[:6])
    feeder.send(key, log.lines[9:])  # three events missing: every projection faults
    wait_seq(live_deployment, key, log.seq_after(len(log.lines)))
    update = live_deployment.redis_update(key)
    assert update is not None and update.get("faults"), update
    faults = page.get_by_test_id("faults")
    expect(faults).to_be_visible(timeout=15_000)
    for projection, fault in update["faults"].items():
        expect(faults).to_contain_text(f"{projection} at seq {fault['seq']}: {fault['error']}")
    expect(page.get_by_test_id("card")).to_have_attribute("data-faulted", "true")
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "live")
    screenshot(page, "context-meter-faults.png")


def test_updated_ago_is_when_redis_took_the_update_on_both_pages(
    live_deployment: Deployment, gateway: Gateway, page: Page
) -> None:
    """One meaning of "updated … ago": the session page showed when the browser received
    the update (0 s) where the list showed when Redis took it (22 s) for the same session."""
    sessions, key = Sessions(live_deployment), "page-idle"
    sessions.write(key, 5, taken_ms=int(time.time() * 1000) - 150_000)
    page.goto(gateway.url + "/")
    page.locator('input[name="q"]').fill(key)
    expect(page.locator(f'[data-session="{key}"] .session-ago')).to_have_text("updated 2m ago")
    page.goto(f"{gateway.url}/sessions/{key}")
    expect(page.get_by_test_id("seq")).to_have_text("seq 5")
    expect(page.get_by_test_id("updated")).to_have_text("updated 2m ago")
    page.wait_for_timeout(1000)  # the stream's first message (the same update) has come
    expect(page.get_by_test_id("updated")).to_have_text("updated 2m ago")
    sessions.write(key, 6)  # a live update: taken now, shown as it arrives
    expect(page.get_by_test_id("seq")).to_have_text("seq 6")
    expect(page.get_by_test_id("updated")).to_have_text(re.compile(r"^updated [0-2]s ago$"))


# -- with authentication on ------------------------------------------------------------
@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer("ES256")


@pytest.fixture(scope="module")
def secured(live_deployment: Deployment, signer: Signer) -> Iterator[Gateway]:
    keys = live_deployment.workdir / "page-jwks.json"
    keys.write_bytes(jwks(signer))
    started = Gateway.start(
        live_deployment, STREAM_GATEWAY_JWT_KEYS=str(keys), STREAM_GATEWAY_JWT_LEEWAY="0"
    )
    yield started
    started.stop()


# axe cannot measure text contrast over a gradient or through a backdrop filter (it
# reports "incomplete"), so the check sees the page on its plain background colour, a
# stylesheet of the page's own origin (the CSP takes no inline style). The page's colours
# keep 4.5:1 over the decorative glow's strongest tints too (docs/gateway.md).
PLAIN = "body { background: var(--bg) !important; } .card { backdrop-filter: none !important; }"


def serious_violations(page: Page, origin: str) -> list[dict[str, Any]]:
    """axe-core's serious and critical findings on the page as it is. axe is served as a
    file of the page's own origin (the CSP allows no other script)."""
    assert AXE.exists(), "no axe-core: `make setup` installs tests/oracle's npm dependencies"
    page.route(
        f"{origin}/__axe.min.js",
        lambda route: route.fulfill(path=str(AXE), content_type="text/javascript"),
    )
    page.route(
        f"{origin}/__plain.css", lambda route: route.fulfill(body=PLAIN, content_type="text/css")
    )
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_style_tag(url=f"{origin}/__plain.css")
        page.add_script_tag(url=f"{origin}/__axe.min.js")
    result: dict[str, Any] = page.evaluate(
        """async () => {
             const result = await axe.run(document);
             const brief = (v) => ({ id: v.id, impact: v.impact, help: v.help,
               nodes: v.nodes.map((n) => [n.target.join(" "), n.any.map((a) => a.message)]) });
             return { violations: result.violations.map(brief),
                      incomplete: result.incomplete.map(brief) };
           }"""
    )
    # Contrast was measured, not given up on (the ring's labels sit on its SVG).
    unmeasured = [
        node
        for finding in result["incomplete"]
        if finding["id"] == "color-contrast"
        for node in finding["nodes"]
        if ".ring-" not in node[0]
    ]
    assert unmeasured == [], unmeasured
    return [v for v in result["violations"] if v["impact"] in ("serious", "critical")]


def axe_both_schemes(page: Page, origin: str) -> None:
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.wait_for_timeout(400)  # transitions settle: axe reads computed colours
        assert serious_violations(page, origin) == [], scheme
    page.emulate_media(color_scheme="light")


def focused_session(page: Page) -> str | None:
    found: str | None = page.evaluate(
        "() => document.activeElement.closest('[data-session]')?.dataset.session ?? null"
    )
    return found


def test_the_page_with_authentication_on(
    live_deployment: Deployment, secured: Gateway, feeder: Feeder, signer: Signer, page: Page
) -> None:
    one, two, log = "page-auth/one", "page-auth/two", Log.read("example-agent-0.jsonl")
    cuts = log.cuts(3)
    feeder.send(one, log.lines[: cuts[0]])
    feeder.send(two, log.lines[: cuts[0]])
    feeder.send("page-outside", log.lines[: cuts[0]])
    for key in (one, two, "page-outside"):
        wait_seq(live_deployment, key, log.seq_after(cuts[0]))
    token = signer.token(["page-auth/*"], sub="page-user")

    # The index: without a token it asks for one; the app hands it over (the JS API) and
    # the page starts over with it, keeping it for this tab.
    page.goto(f"{secured.url}/")
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "auth")
    assert page.evaluate("(t) => window.contextStream.setToken(t)", token) is True
    row = page.locator(f'[data-session="{two}"] a')
    expect(row).to_be_visible()
    expect(page.get_by_test_id("notice")).to_be_hidden()
    assert page.evaluate("() => sessionStorage.getItem('context-stream.access_token')") == token
    listed = page.locator("[data-session]").evaluate_all(
        "(rows) => rows.map((r) => r.dataset.session)"
    )
    assert sorted(listed) == [one, two]  # nothing outside the grant

    # Keyboard focus stays on its row while the list refreshes and reorders around it.
    page.locator(f'[data-session="{one}"] a').focus()
    order = listed
    feeder.send(one, log.lines[cuts[0] : cuts[1]])  # `one` becomes the most recent
    wait_seq(live_deployment, one, log.seq_after(cuts[1]))
    page.wait_for_function(
        f"() => document.querySelector('[data-session]').dataset.session === {one!r}",
        timeout=10_000,
    )
    page.wait_for_timeout(2300)  # and one more refresh
    assert focused_session(page) == one, order
    axe_both_schemes(page, secured.url)
    screenshot(page, "sessions-auth.png")

    # The session page: the meter for assistive technology, the update's own time.
    page.locator(f'[data-session="{one}"] a').click()
    expect(page.get_by_test_id("session-id")).to_have_text(one)
    update = live_deployment.redis_update(one)
    assert update is not None
    expect(page.get_by_test_id("seq")).to_have_text(f"seq {update['seq']}")
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "live")
    pressure = update["contextPressure"]
    percent = 100 * pressure["projectedTokens"] / pressure["contextWindow"]
    gauge = page.get_by_test_id("meter")
    expect(gauge).to_have_attribute("role", "meter")
    expect(gauge).to_have_attribute("aria-valuenow", _number(min(100, round(percent, 1))))
    expect(gauge).to_have_attribute("aria-valuemin", "0")
    expect(gauge).to_have_attribute("aria-valuemax", "100")
    expect(gauge).to_have_attribute(
        "aria-valuetext", re.compile(rf"^{percent:.1f}% of the context window used")
    )
    expect(page.get_by_test_id("announce")).to_contain_text(f"{percent:.1f}% of the context")
    assert isinstance(update.get("time"), int), "the worker's update carries its event time"
    # "updated" is when Redis took it, relative; the session's own event time beside it.
    expect(page.get_by_test_id("updated")).to_have_text(re.compile(r"^updated \d+s ago$"))
    shown = page.evaluate(
        """(ms) => { const d = new Date(ms), two = (n) => String(n).padStart(2, "0");
             return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}`
               + ` ${two(d.getHours())}:${two(d.getMinutes())}`; }""",
        update["time"],
    )
    expect(page.get_by_test_id("event-time")).to_have_text(f"event time {shown}")
    axe_both_schemes(page, secured.url)
    screenshot(page, "context-meter-auth.png")

    # Outside the grant and unknown look the same: not found.
    for other in ("page-outside", "page-auth%2Fnever"):
        page.goto(f"{secured.url}/sessions/{other}")
        expect(page.get_by_test_id("status")).to_have_attribute("data-state", "waiting")


def test_the_page_says_when_its_token_is_missing_or_expires(
    live_deployment: Deployment, secured: Gateway, feeder: Feeder, signer: Signer, page: Page
) -> None:
    key, log = "page-auth/expiring", Log.read("example-system-prompts.jsonl")
    feeder.send(key, log.lines)
    wait_seq(live_deployment, key, log.seq_after(len(log.lines)))
    page.goto(f"{secured.url}/")
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "auth")
    expect(page.get_by_test_id("notice")).to_contain_text("Not authorised")

    brief = signer.token(["page-auth/*"], expires_in=3)
    page.goto(f"{secured.url}/sessions/{key.replace('/', '%2F')}")
    page.evaluate("(t) => window.contextStream.setToken(t)", brief)
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "live")
    # At the token's expiry the gateway ends the stream with `event: reauthenticate`.
    expect(page.get_by_test_id("notice")).to_contain_text(
        "Your access token expired", timeout=10_000
    )
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "auth")
    assert serious_violations(page, secured.url) == []


# An app page that opens the gateway's page and posts it the token when the page says it
# is ready; BLIND posts it without waiting, to any origin (what a hostile opener would do).
APP = """<!doctype html><html><body><script>
  const target = %(target)s, token = %(token)s;
  window.addEventListener("message", (event) => {
    if (event.data && event.data.type === "context-stream:ready")
      event.source.postMessage({ type: "context-stream:token", token }, event.origin);
  });
  const opened = window.open(target);
  const post = () => opened.postMessage({ type: "context-stream:token", token }, "*");
  if (%(blind)s) setInterval(post, 200);
</script></body></html>"""


def _opened_by_app(page: Page, app_origin: str, target: str, token: str, blind: bool) -> Page:
    app = f"{app_origin}/__app.html"
    body = APP % {"target": repr(target), "token": repr(token), "blind": str(blind).lower()}
    # The gateway's pages are Cross-Origin-Opener-Policy: same-origin; an opener keeps its
    # handle on them only with the same policy and origin (another origin never does).
    headers = {} if blind else {"Cross-Origin-Opener-Policy": "same-origin"}
    page.context.route(
        app, lambda route: route.fulfill(body=body, content_type="text/html", headers=headers)
    )
    with page.context.expect_page() as opened:
        page.goto(app)
    popup = opened.value
    popup.wait_for_load_state()
    return popup


def test_the_page_takes_its_token_from_its_app_never_from_a_link(
    live_deployment: Deployment, secured: Gateway, feeder: Feeder, signer: Signer, page: Page
) -> None:
    key, log = "page-auth/handed", Log.read("example-system-prompts.jsonl")
    feeder.send(key, log.lines)
    wait_seq(live_deployment, key, log.seq_after(len(log.lines)))
    token = signer.token(["page-auth/*"], sub="page-user")
    stored = "() => sessionStorage.getItem('context-stream.access_token')"

    # A shared link carrying a token is not a way in.
    page.goto(f"{secured.url}/#access_token={token}")
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "auth")
    assert page.evaluate(stored) is None

    # The app of the page's own origin opens it and posts the token on its ready message.
    target = f"{secured.url}/sessions/{key.replace('/', '%2F')}"
    popup = _opened_by_app(page, secured.url, target, token, blind=False)
    expect(popup.get_by_test_id("status")).to_have_attribute("data-state", "live")
    expect(popup.get_by_test_id("seq")).to_have_text(f"seq {log.seq_after(len(log.lines))}")
    assert popup.evaluate(stored) == token
    popup.close()

    # A window of another origin gets no ready message, and what it posts is ignored.
    popup = _opened_by_app(page, "http://app.invalid", target, token, blind=True)
    expect(popup.get_by_test_id("status")).to_have_attribute("data-state", "auth")
    popup.wait_for_timeout(1000)  # five blind posts later
    expect(popup.get_by_test_id("status")).to_have_attribute("data-state", "auth")
    assert popup.evaluate(stored) is None
    popup.close()


# -- an app on another origin frames or opens the page ---------------------------------
# The app's page: it frames the gateway's page (or opens it) and answers the page's ready
# message with the token, as docs/gateway.md describes; with `blind` it also posts the
# token every 200 ms to any origin, unasked (what a page that may not hand one over would
# try). `readies` records the origins whose ready message reached it.
EMBED = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>app</title>
</head><body><iframe id="meter" title="context meter" width="860" height="700"></iframe>
<script>
  const target = %(target)s, token = %(token)s, mode = %(mode)s, blind = %(blind)s;
  window.readies = [];
  window.addEventListener("message", (event) => {
    if (!event.data || event.data.type !== "context-stream:ready") return;
    window.readies.push(event.origin);
    event.source.postMessage({ type: "context-stream:token", token }, event.origin);
  });
  const frame = document.getElementById("meter");
  if (mode === "frame") frame.src = target;
  const meter = mode === "frame" ? frame.contentWindow : window.open(target);
  const post = () => meter.postMessage({ type: "context-stream:token", token }, "*");
  if (blind) setInterval(post, 200);
</script></body></html>"""


class AppServer:
    """A loopback HTTP server of its own port (so its own origin) serving the app's page."""

    def __init__(self) -> None:
        self.page = b""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(server.page)))
                self.end_headers()
                self.wfile.write(server.page)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def serve(self, target: str, token: str, mode: str, blind: bool = False) -> str:
        """The app's page for this case; returns its URL."""
        values = {"target": target, "token": token, "mode": mode, "blind": blind}
        self.page = (EMBED % {k: json.dumps(v) for k, v in values.items()}).encode()
        return f"{self.origin}/app.html"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def apps() -> Iterator[tuple[AppServer, AppServer]]:
    """Two app origins: the gateway allows the first, not the second."""
    allowed, other = AppServer(), AppServer()
    yield allowed, other
    allowed.close()
    other.close()


@pytest.fixture(scope="module")
def embeddable(
    live_deployment: Deployment, signer: Signer, apps: tuple[AppServer, AppServer]
) -> Iterator[Gateway]:
    keys = live_deployment.workdir / "embed-jwks.json"
    keys.write_bytes(jwks(signer))
    started = Gateway.start(
        live_deployment,
        STREAM_GATEWAY_JWT_KEYS=str(keys),
        STREAM_GATEWAY_EMBED_ORIGINS=apps[0].origin,
    )
    yield started
    started.stop()


STORED = "() => sessionStorage.getItem('context-stream.access_token')"
REFUSED_FRAME = "Framing '"  # Chromium's console line for a frame its CSP refuses


def test_an_embedding_app_of_an_allowed_origin_hands_the_token_and_no_other_can(
    live_deployment: Deployment,
    embeddable: Gateway,
    apps: tuple[AppServer, AppServer],
    feeder: Feeder,
    signer: Signer,
    browser: Browser,
) -> None:
    key, log = "page-auth/embedded", Log.read("example-system-prompts.jsonl")
    feeder.send(key, log.lines)
    seq = log.seq_after(len(log.lines))
    wait_seq(live_deployment, key, seq)
    token = signer.token(["page-auth/*"], sub="page-user")
    target = f"{embeddable.url}/sessions/{key.replace('/', '%2F')}"
    allowed, other = apps

    # Each case in a fresh context: a window a tab opens gets a copy of the tab's
    # sessionStorage, so a token taken in one case would show up in the next.
    # Allowed: the app frames the page, the page asks, the app answers, the meter runs.
    with checked_page(browser) as page:
        page.goto(allowed.serve(target, token, "frame"))
        framed = page.frame_locator("#meter")
        expect(framed.get_by_test_id("status")).to_have_attribute("data-state", "live")
        expect(framed.get_by_test_id("seq")).to_have_text(f"seq {seq}")
        assert page.evaluate("() => window.readies") == [embeddable.url]
        meter = next(f for f in page.frames if f.url.startswith(embeddable.url))
        assert meter.evaluate(STORED) == token

    # Allowed: the app opens the page instead (no COOP on the page: it keeps its opener).
    with checked_page(browser) as page:
        with page.context.expect_page() as opened:
            page.goto(allowed.serve(target, token, "open"))
        popup = opened.value
        expect(popup.get_by_test_id("status")).to_have_attribute("data-state", "live")
        expect(popup.get_by_test_id("seq")).to_have_text(f"seq {seq}")
        assert popup.evaluate(STORED) == token
        assert page.evaluate("() => window.readies") == [embeddable.url]

    # Another origin: the browser refuses to frame the page at all (frame-ancestors).
    with checked_page(browser, (*EXPECTED, REFUSED_FRAME)) as page:
        refusals: list[str] = []
        page.on("console", lambda m: refusals.append(m.text) if REFUSED_FRAME in m.text else None)
        page.goto(other.serve(target, token, "frame", blind=True))
        page.wait_for_timeout(1000)  # five blind posts later
        assert [f for f in page.frames if f.url.startswith(embeddable.url)] == []
        assert page.evaluate("() => window.readies") == []
        assert refusals and f'"frame-ancestors {allowed.origin}"' in refusals[-1], refusals

    # Another origin that opens the page: its posts reach the page, which takes none of
    # them, and it is told nothing.
    with checked_page(browser) as page:
        with page.context.expect_page() as opened:
            page.goto(other.serve(target, token, "open", blind=True))
        popup = opened.value
        expect(popup.get_by_test_id("status")).to_have_attribute("data-state", "auth")
        assert popup.evaluate("() => window.opener !== null")  # the posts do reach it
        popup.wait_for_timeout(1000)  # five blind posts later
        expect(popup.get_by_test_id("status")).to_have_attribute("data-state", "auth")
        assert popup.evaluate(STORED) is None
        assert page.evaluate("() => window.readies") == []


def _number(value: float) -> str:
    """A number as JavaScript's String() writes it."""
    return str(int(value)) if float(value).is_integer() else repr(value)

"""The gateway's page in headless Chromium (Debian's, driven by Playwright): live from a
worker over SSE, the ring and the rows move as events are produced.

Screenshots are written to tests/artifacts/ (ignored by git) and their paths printed.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.integration.gateway_harness import Feeder, Gateway, Log, wait_seq
from tests.integration.harness import REPO, Deployment

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "no /usr/bin/chromium: `make setup` installs Debian's chromium"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 860, "height": 760}, device_scale_factor=1)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    opened.on("console", console)
    yield opened
    context.close()
    assert errors == [], errors  # the page's scripts ran without an error


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
    return {
        "seq": f"seq {update['seq']}",
        "percent": f"{percent:.1f}%",
        "headline": f"~{pressure['projectedTokens']:,} / {pressure['contextWindow']:,} tokens",
        "segments": [[k, str(breakdown[k])] for k in labels if breakdown.get(k)],
        "rows": [f"{label}~{breakdown.get(k, 0):,}" for k, label in labels.items()],
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
    expect(row).to_contain_text(expected(last_update)["percent"])
    screenshot(page, "sessions.png")
    row.click()
    expect(page.get_by_test_id("session-id")).to_have_text(key)


def test_faults_are_shown_loudly(
    live_deployment: Deployment, gateway: Gateway, feeder: Feeder, page: Page
) -> None:
    key, log = "page-gap", Log.read("example-system-prompts.jsonl")
    page.goto(f"{gateway.url}/sessions/{key}")  # before the session exists
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "live")
    expect(page.get_by_test_id("subline")).to_have_text("waiting for the first update…")
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
    screenshot(page, "context-meter-faults.png")

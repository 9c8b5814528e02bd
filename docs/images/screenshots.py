"""Makes the README's pictures of the page (docs/images/*-demo.png, 1100x800 PNG, light
scheme) from a running gateway that serves the example sessions, in Debian's Chromium
driven by Playwright (what tests/integration/test_page.py uses):

    DEMO_SECONDS=120 make demo                               # one terminal
    .venv/bin/python docs/images/screenshots.py http://127.0.0.1:28080   # another

The demo's gateway runs without authentication, so the page needs no token. Run it once
the demo says every example event is produced: the pictures show the final figures.
"""

import sys
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, expect, sync_playwright

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
SIZE: ViewportSize = {"width": 1100, "height": 800}
SESSION = "example-agent-0"


def settle(page: Page) -> None:
    expect(page.get_by_test_id("status")).to_have_attribute("data-state", "live")
    page.wait_for_timeout(1500)  # the ring's transition and the first "updated" tick


def main(gateway: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport=SIZE, device_scale_factor=1, color_scheme="light")
        page.goto(f"{gateway}/sessions/{SESSION}")
        expect(page.get_by_test_id("seq")).not_to_have_text("seq —")
        settle(page)
        page.screenshot(path=str(HERE / "context-meter-demo.png"))
        page.goto(f"{gateway}/")
        expect(page.locator(f'[data-session="{SESSION}"]')).to_be_visible()
        settle(page)
        page.screenshot(path=str(HERE / "sessions-demo.png"))
        browser.close()
    print(f"written: {HERE / 'context-meter-demo.png'}, {HERE / 'sessions-demo.png'}")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/") if len(sys.argv) > 1 else "http://127.0.0.1:28080")

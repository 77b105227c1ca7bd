"""Screenshots of every console page, on a phone (390x844) and a wide screen (1440x900), for the
documentation: ``docs/console/<page>-<phone|wide>.png``.

Run it from the root of the clone, with the development virtualenv (``pip install -e
'.[test]'``) and Debian's chromium (``apt-get install chromium``)::

    .venv/bin/python docs/screenshots.py [--out docs/console] [--page NAME ...]

It starts its own ``ticket-dispatcher serve --sandbox`` on a free port over a throw-away SQLite
file, with an operator's API key so the pages look as they do in production (signed in, no
"authentication is off" banner), and runs the README's demos through the API first: TCID-2
assigned round-robin, a trigger that failed (NOPE-1), the balanced TCID draft in shadow, and
GTOC-1's assignee notification parked in its ACK wait (tests/browser/demo.py,
``build_world``). Then it signs in through the form and saves a full-page PNG of each page.
Times show in the machine's time zone; the countdowns and "ago" texts are as of the run.

The browser tests (tests/browser/test_screenshots.py) run ``shoot`` into a temporary directory,
so this script cannot silently break.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `python docs/screenshots.py` puts only docs/ on the path

from playwright.sync_api import sync_playwright  # noqa: E402  (needs the root above)

from tests.browser.demo import (  # noqa: E402
    PAGES,
    STATUS,
    VIEWPORTS,
    SandboxServer,
    World,
    build_world,
    launch,
    sign_in,
)

OUT = ROOT / "docs" / "console"


def shoot(browser, server: SandboxServer, world: World, out: Path,
          pages: tuple[str, ...] = PAGES) -> list[Path]:
    """A full-page PNG of each of ``pages`` at each viewport into ``out``; signed in as the
    operator first when the server has authentication on. Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    signed_out = [name for name in pages if name == "sign-in" and server.auth_enabled]
    for viewport, size in VIEWPORTS.items():
        context = browser.new_context(viewport=size)
        try:
            page = context.new_page()
            for name in signed_out:  # the form, before it is used
                written.append(_save(page, server, world, name, out / f"{name}-{viewport}.png"))
            if server.auth_enabled:
                sign_in(page, server, "operator")
            for name in pages:
                if name not in signed_out:
                    written.append(_save(page, server, world, name,
                                         out / f"{name}-{viewport}.png"))
        finally:
            context.close()
    return written


def _save(page, server: SandboxServer, world: World, name: str, path: Path) -> Path:
    response = page.goto(server.url + world.path(name))
    expected = STATUS.get(name, 200)
    if response is None or response.status != expected:
        raise SystemExit(f"{name}: {world.path(name)} answered "
                         f"{response.status if response else 'nothing'}, not {expected}")
    page.screenshot(path=path, full_page=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    parser.add_argument("--page", action="append", choices=PAGES, dest="pages",
                        help="only this page (repeat for more); default every page")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="td-screenshots-") as directory:
        server = SandboxServer(Path(directory), {"operator": secrets.token_urlsafe(32)})
        try:
            server.wait_serving()
            world = build_world(server)
            with sync_playwright() as playwright:
                browser = launch(playwright)
                try:
                    written = shoot(browser, server, world, args.out,
                                    tuple(args.pages or PAGES))
                finally:
                    browser.close()
        finally:
            server.kill()
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

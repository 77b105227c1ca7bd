"""docs/screenshots.py, the documentation's screenshots, works: a PNG of each page asked for at
both viewports, each as wide as its viewport. (Every page answering is test_pages.py's job; a
few pages here keep the suite fast.)"""

from __future__ import annotations

import importlib.util
import struct

import pytest

from tests.browser.demo import ROOT, VIEWPORTS

pytestmark = pytest.mark.browser


def load_script():
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_the_screenshot_script_saves_the_pages_at_both_sizes(browser, guarded_world, tmp_path):
    server, world = guarded_world

    pages = ("sign-in", "overview", "parked")  # signed out, then in; a live page
    written = load_script().shoot(browser, server, world, tmp_path, pages)

    expected = {f"{name}-{viewport}.png" for name in pages for viewport in VIEWPORTS}
    assert {path.name for path in written} == expected
    for path in written:
        width, height = png_size(path.read_bytes())
        viewport = VIEWPORTS[path.stem.rsplit("-", 1)[1]]
        assert width == viewport["width"] and height >= viewport["height"], path.name

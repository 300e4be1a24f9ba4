"""A real headless Chromium that renders a page into a screenshot, for the HTML report's
tests: the page must load without console errors or fetches and draw something."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium binary: `apt-get install chromium` (scripts/system-deps.sh "
                "installs it as root) to check the page in a real browser")


def screenshot(page: Path, shot: Path, size: tuple[int, int] = (1400, 2400)):
    """Render ``page`` into ``shot``; returns the screenshot as a PIL image (RGB), after
    checking that the browser logged no errors and the picture is not blank."""
    browser = chromium()
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={shot.parent / 'chromium-profile'}",
            "--enable-logging=stderr", "--v=0", f"--window-size={size[0]},{size[1]}",
            f"--screenshot={shot}", page.as_uri()]
    t0 = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [ln for ln in proc.stderr.splitlines()
               if "CONSOLE" in ln or "Uncaught" in ln or "ERR_FILE_NOT_FOUND" in ln
               or "net::ERR" in ln]
    assert not console, "\n".join(console)
    assert shot.exists() and shot.stat().st_size > 10_000, f"no screenshot after " \
        f"{time.monotonic() - t0:.0f} s: {proc.stderr[-1000:]}"
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == size
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "the screenshot looks blank"
    return img

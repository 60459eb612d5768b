"""Screenshots of the dashboard's tabs and of the notebooks' figures, at desktop width,
taken with headless Chromium (Debian's ``chromium``, driven by :class:`Browser`), offline.

:func:`shoot_tabs` shoots every tab of a running dashboard, :func:`notebook_figures` and
:func:`shoot_figures` the plotly figures a notebook shows; ``python -m
rlcd_lab.dashboard.screenshots --out DIR`` (:func:`main`) does both on the shipped
checkpoints and runs and writes the README picture ``docs/img/dashboard.png``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.basedatatypes import BaseFigure

from rlcd_lab.dashboard.ui import TAB_IDS

DESKTOP_WIDTH = 1440
"""The width of every screenshot, in CSS pixels (device scale factor 1)."""
DESKTOP_HEIGHT = 900
"""The window's height; a full-page shot grows it to the page's height."""
REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
README_PICTURE = REPO / "docs" / "img" / "dashboard.png"

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--mute-audio",
)


def chromium() -> str | None:
    """The Chromium executable on ``PATH`` (``chromium``, ``chromium-browser`` or
    ``google-chrome``), or ``None``."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """A headless Chromium (fresh profile, removed on :meth:`close`) driven over the
    DevTools protocol on a pipe (``--remote-debugging-pipe``: commands in on fd 3, answers
    out on fd 4, each a JSON message ended by a NUL byte), so no WebSocket client is
    needed. One browser takes many shots (:meth:`shoot`), each in a new tab.

    Use as a context manager: ``with Browser() as b: b.shoot(url, "a.png")``.

    Chromium runs with a fresh profile and no background networking, driven over the DevTools
    protocol on a pipe: a shot is taken once the page is ready in real time (gradio's events
    have answered, plotly has drawn), not after a fixed virtual-time budget, which runs ahead
    of a server still answering (the Ask tab's model call on page load). Shots are full-page.
    """

    def __init__(self, binary: str | None = None, timeout: float = 120.0) -> None:
        binary = binary or chromium()
        if binary is None:
            raise RuntimeError("chromium not found on PATH (apt-get install chromium)")
        self.timeout, self._id, self._buffer = timeout, 0, b""
        self._profile = tempfile.TemporaryDirectory(prefix="rlcd-chromium-")
        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()
        flags = [*CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}"]
        flags += [f"--window-size={DESKTOP_WIDTH},{DESKTOP_HEIGHT}", "--remote-debugging-pipe"]
        # fd 3 and fd 4 of the browser are the two pipe ends, set up by bash (dash's
        # redirections take single-digit fds only)
        shell = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}'
        self._proc = subprocess.Popen(
            ["bash", "-c", shell, binary, *flags, "about:blank"],
            pass_fds=(to_browser, from_browser),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command (to the page of ``session``, or to the browser) and return its
        result; events that arrive in between are dropped."""
        self._id += 1
        msg: dict = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._write, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._read], [], [], left)[0]:
                    raise TimeoutError(f"chromium did not answer {method}")
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium exited during {method}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def _evaluate(self, session: str, expression: str):
        out = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        return out.get("result", {}).get("value")

    def shoot(
        self,
        url: str,
        out: str | Path,
        width: int = DESKTOP_WIDTH,
        height: int = DESKTOP_HEIGHT,
        ready: str = "true",
        settle: float = 1.0,
        full_page: bool = True,
        max_height: int = 8000,
    ) -> Path:
        """A PNG of ``url`` in a new ``width`` x ``height`` tab, written to ``out``.

        The shot is taken once the JavaScript expression ``ready`` has been true for
        ``settle`` seconds of real time (e.g. :data:`GRADIO_READY`: the page's events
        have answered); with ``full_page`` the tab first grows to the page's height (at
        most ``max_height``). Raises ``TimeoutError`` when the page is not ready within
        the browser's ``timeout``."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with self._page(url, width, height, ready, settle) as session:
            if full_page:
                tall = self._evaluate(
                    session,
                    "Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)",
                )
                tall = min(max(int(tall or height), height), max_height)
                if tall != height:
                    metrics = {"width": width, "deviceScaleFactor": 1, "mobile": False}
                    self.call("Emulation.setDeviceMetricsOverride", session, height=tall, **metrics)
                    time.sleep(0.3)  # let the page lay out at its new height
            shot = self.call("Page.captureScreenshot", session, format="png")
            out.write_bytes(base64.b64decode(shot["data"]))
        return out

    def evaluate(
        self,
        url: str,
        expression: str,
        width: int = DESKTOP_WIDTH,
        height: int = DESKTOP_HEIGHT,
        ready: str = "true",
        settle: float = 1.0,
    ):
        """The value of the JavaScript ``expression`` on ``url`` in a ``width`` x ``height``
        tab, once ``ready`` has held for ``settle`` seconds (as :meth:`shoot`), e.g. where
        an element lies on the page."""
        with self._page(url, width, height, ready, settle) as session:
            return self._evaluate(session, expression)

    @contextlib.contextmanager
    def _page(self, url: str, width: int, height: int, ready: str, settle: float):
        """A new tab on ``url`` (its DevTools session), once ``ready`` has been true for
        ``settle`` seconds of real time; closed afterwards. ``TimeoutError`` when the page
        is not ready within the browser's ``timeout``."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        try:
            session = self.call("Target.attachToTarget", targetId=target, flatten=True)
            session = session["sessionId"]
            metrics = {"width": width, "deviceScaleFactor": 1, "mobile": False}
            self.call("Emulation.setDeviceMetricsOverride", session, height=height, **metrics)
            self.call("Page.navigate", session, url=url)
            deadline, since = time.monotonic() + self.timeout, None
            while True:
                now = time.monotonic()
                if self._evaluate(session, ready):
                    since = now if since is None else since
                    if now - since >= settle:
                        break
                else:
                    since = None
                if now > deadline:
                    raise TimeoutError(f"{url} was not ready within {self.timeout:.0f} s")
                time.sleep(0.2)
            yield session
        finally:
            self.call("Target.closeTarget", targetId=target)

    def close(self) -> None:
        """Close the browser and remove its profile."""
        if self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("Browser.close")
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for fd in (self._write, self._read):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()


GRADIO_READY = """(() => {
  const app = document.querySelector("gradio-app");
  if (!app || !document.querySelector("[role=tablist], .tab-wrapper")) return false;
  return !document.querySelector(".progress-text, .eta-bar, .wrap.pending, .wrap.generating");
})()"""
"""True once gradio's page is built and no event is pending (no progress text or bar)."""
PLOTLY_READY = "document.querySelectorAll('.js-plotly-plot .main-svg').length > 0"
"""True once plotly has drawn the page's figure."""
FOLD = (1400, 1000)
"""The window, in CSS pixels, whose first screen must show the Ask button."""
BUTTON_BOTTOM = """(() => {
  const b = [...document.querySelectorAll("button")].find(
    (e) => e.innerText.trim() === %s && e.offsetParent !== null);
  return b ? b.getBoundingClientRect().bottom : null;
})()"""
"""The bottom edge (CSS pixels from the top of the window) of the visible button whose text
is the JSON string substituted for ``%s``, or null."""


def button_bottom(base: str, tab: str, text: str, browser: Browser, size=FOLD) -> float | None:
    """Where the bottom of the button reading ``text`` lies on the first screen of ``tab``
    (the dashboard served at ``base``, a window of ``size``), once the page is ready."""
    width, height = size
    expression = BUTTON_BOTTOM % json.dumps(text)
    return browser.evaluate(tab_url(base, tab), expression, width, height, GRADIO_READY)


def screenshot(url: str, out: str | Path, **kwargs) -> Path:
    """One PNG of ``url`` in a browser of its own (:meth:`Browser.shoot`'s arguments)."""
    with Browser() as browser:
        return browser.shoot(url, out, **kwargs)


def tab_url(base: str, tab: str) -> str:
    """The deep link that opens ``tab`` of the dashboard served at ``base``."""
    return f"{base.rstrip('/')}/?tab={tab}"


def shoot_tabs(
    base: str,
    out_dir: str | Path,
    tabs: Sequence[str] = TAB_IDS,
    width: int = DESKTOP_WIDTH,
    browser: Browser | None = None,
) -> list[Path]:
    """One full-page PNG per tab of the dashboard served at ``base``, each opened by its
    deep link and taken once its events have answered (:data:`GRADIO_READY`):
    ``out_dir/tab-<id>.png``."""
    out_dir = Path(out_dir)
    with contextlib.ExitStack() as stack:
        browser = browser or stack.enter_context(Browser())
        return [
            browser.shoot(tab_url(base, t), out_dir / f"tab-{t}.png", width, ready=GRADIO_READY)
            for t in tabs
        ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_dashboard(**build_kwargs) -> Iterator[str]:
    """Launch :func:`rlcd_lab.dashboard.ui.build_demo` (``build_kwargs`` passed on) on a free
    local port in this process; yield its URL; close it afterwards."""
    from rlcd_lab.dashboard.ui import build_demo

    demo = build_demo(**build_kwargs)
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


# ------------------------------------------------------------------ notebook figures
def notebook_cells(path: str | Path) -> list[str]:
    """The code cells of a jupytext percent-format notebook, in order."""
    import jupytext

    nb = jupytext.read(Path(path))
    return [c.source for c in nb.cells if c.cell_type == "code"]


@contextlib.contextmanager
def _captured_show(figures: list[go.Figure]) -> Iterator[None]:
    original = BaseFigure.show

    def show(self, *args, **kwargs):
        figures.append(go.Figure(self))

    BaseFigure.show = show
    try:
        yield
    finally:
        BaseFigure.show = original


def notebook_figures(
    path: str | Path, scale: str = "ci", timeout: float = 900.0
) -> list[go.Figure]:
    """The plotly figures the notebook at ``path`` shows, in order: its code cells run in
    a fresh Python process (:func:`run_notebook`; notebooks run one after another in one
    process see each other's state, as a kernel would not)."""
    with tempfile.TemporaryDirectory(prefix="rlcd-figs-") as tmp:
        out = Path(tmp) / "figures.json"
        code = (
            "import sys, json; from rlcd_lab.dashboard.screenshots import run_notebook; "
            "figs = run_notebook(sys.argv[1], sys.argv[2]); "
            "open(sys.argv[3], 'w').write(json.dumps([f.to_json() for f in figs]))"
        )
        cmd = [sys.executable, "-c", code, str(Path(path).resolve()), scale, str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{path} failed: {proc.stderr[-3000:]}")
        return [pio.from_json(f) for f in json.loads(out.read_text())]


def run_notebook(path: str | Path, scale: str = "ci") -> list[go.Figure]:
    """The plotly figures the notebook at ``path`` shows, in order: its code cells run
    in this process at ``RLCD_SCALE=scale``, in a temporary working directory (also
    ``TMPDIR``), with ``Figure.show`` captured and printed output discarded. The
    environment, working directory and ``tempfile.tempdir`` are restored afterwards."""
    figures: list[go.Figure] = []
    path = Path(path).resolve()
    cells = notebook_cells(path)
    env, cwd, tmp_default = dict(os.environ), Path.cwd(), tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="rlcd-nb-") as work:
        os.environ.update(RLCD_SCALE=scale, TMPDIR=work, TQDM_DISABLE="1")
        tempfile.tempdir = work
        os.chdir(work)
        namespace: dict = {"__name__": "__main__"}
        try:
            quiet = contextlib.redirect_stdout(io.StringIO())
            with _captured_show(figures), quiet, contextlib.redirect_stderr(io.StringIO()):
                for i, source in enumerate(cells):
                    code = compile(source, f"{path.name}[cell {i}]", "exec")
                    exec(code, namespace)  # noqa: S102 (our own notebooks)
        finally:
            os.chdir(cwd)
            tempfile.tempdir = tmp_default
            os.environ.clear()
            os.environ.update(env)
    return figures


def figure_html(fig: go.Figure, path: str | Path, width: int = DESKTOP_WIDTH) -> Path:
    """Write ``fig`` as a standalone page at ``path`` with plotly.js copied beside it
    (``plotly.min.js``, no network), ``width`` px wide and as tall as its layout says
    (plotly's default 450 px when it says nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    height = fig.layout.height or 450
    fig.write_html(
        path,
        include_plotlyjs="directory",
        full_html=True,
        default_width=f"{width - 16}px",
        default_height=f"{height}px",
        config={"displayModeBar": False},
    )
    return path


def shoot_figures(
    figures: Sequence[go.Figure],
    out_dir: str | Path,
    prefix: str,
    width: int = DESKTOP_WIDTH,
    browser: Browser | None = None,
) -> list[Path]:
    """One PNG per figure, ``out_dir/<prefix>-figN.png`` (N from 1), each from its
    standalone page (:func:`figure_html`, kept beside it as ``.html``)."""
    out_dir = Path(out_dir)
    shots = []
    with contextlib.ExitStack() as stack:
        browser = browser or stack.enter_context(Browser())
        for i, fig in enumerate(figures, 1):
            page = figure_html(fig, out_dir / f"{prefix}-fig{i}.html", width)
            height = (fig.layout.height or 450) + 16
            png = out_dir / f"{prefix}-fig{i}.png"
            url = page.resolve().as_uri()
            shots.append(browser.shoot(url, png, width, height, PLOTLY_READY, settle=0.3))
    return shots


def shoot_notebooks(
    out_dir: str | Path,
    notebooks: Sequence[str | Path] | None = None,
    scale: str = "ci",
    browser: Browser | None = None,
) -> list[Path]:
    """Every figure of every notebook (default: ``notebooks/[0-9][0-9]_*.py``):
    ``out_dir/nb<stem>-figN.png``."""
    paths = notebooks if notebooks is not None else sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
    shots: list[Path] = []
    with contextlib.ExitStack() as stack:
        browser = browser or stack.enter_context(Browser())
        for path in map(Path, paths):
            figures = notebook_figures(path, scale)
            shots += shoot_figures(figures, out_dir, f"nb{path.stem}", browser=browser)
    return shots


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """``python -m rlcd_lab.dashboard.screenshots --out DIR``: every tab and every notebook
    figure into ``DIR``, and the README picture; prints the files written."""
    ap = argparse.ArgumentParser(prog="python -m rlcd_lab.dashboard.screenshots")
    ap.add_argument("--out", type=Path, required=True, help="folder for the PNGs")
    ap.add_argument("--no-notebooks", action="store_true", help="shoot the tabs only")
    ap.add_argument("--scale", default="ci", help="RLCD_SCALE for the notebooks (ci)")
    ap.add_argument(
        "--readme",
        type=Path,
        default=README_PICTURE,
        help="where the README picture goes (the Ask tab); '' for none",
    )
    args = ap.parse_args(argv)
    with Browser() as browser:
        with serve_dashboard() as url:
            shots = shoot_tabs(url, args.out, browser=browser)
        if str(args.readme) not in ("", "."):
            args.readme.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.out / "tab-ask.png", args.readme)
            shots.append(args.readme)
        failed = []
        for nb in [] if args.no_notebooks else sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py")):
            try:
                shots += shoot_notebooks(args.out, [nb], args.scale, browser=browser)
            except RuntimeError as err:  # report it, shoot the other notebooks
                failed.append(f"{nb.name}: {str(err).strip().splitlines()[-1]}")
    for path in shots:
        print(path)
    for line in failed:
        print("FAILED", line)
    if failed:
        raise SystemExit(1)
    return shots


if __name__ == "__main__":
    main()

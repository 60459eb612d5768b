"""Bounds on what a visitor can upload to the dashboard, so a public Space cannot be filled:
size, count per client address and time on disk (:class:`UploadGuard` says how).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

MAX_UPLOAD_FILE_BYTES = 1_000_000
"""Largest uploaded file gradio accepts (the Batch tab's limit: ``batch_tab.MAX_FILE_BYTES``)."""
MAX_UPLOAD_REQUEST_BYTES = 2_000_000
"""Largest upload request body (all its files and the multipart framing)."""
MAX_CLIENT_UPLOADS = 20
"""Upload requests one client address may make per :data:`UPLOAD_WINDOW_S`."""
UPLOAD_WINDOW_S = 3600.0
"""The window over which :data:`MAX_CLIENT_UPLOADS` counts, in seconds."""
DELETE_CACHE = (600, 3600)
"""``gr.Blocks(delete_cache=(every, age))``: every 10 minutes, delete uploads older than an hour."""
MAX_TRACKED_CLIENTS = 10_000
"""Client addresses whose recent uploads are remembered (the oldest forgotten first)."""
UPLOAD_PATH_SUFFIX = "/upload"


def _reply(status: int, message: str) -> tuple[dict, dict]:
    body = message.encode()
    head = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    return head, {"type": "http.response.body", "body": body}


class UploadGuard:
    """ASGI middleware around the dashboard's app: an upload request (``POST`` to a path
    ending in ``/upload``) is answered at once with one line, before its body is read,
    when it does not state its length (411), states more than ``max_bytes`` (413), or its
    client address made ``max_uploads`` upload requests in the last ``window_s`` seconds
    (429). Every other request passes untouched. ``clock`` gives seconds (tests pass
    their own).

    Gradio stores every upload (``POST /gradio_api/upload``, any number of files per request,
    with or without a session) in its cache folder. The dashboard bounds that three ways:

    * size: gradio refuses a file over :data:`MAX_UPLOAD_FILE_BYTES` (``launch(max_file_size=)``,
      HTTP 413), and :class:`UploadGuard` refuses an upload request whose body is over
      :data:`MAX_UPLOAD_REQUEST_BYTES` or does not say its length (before it is read);
    * count: :class:`UploadGuard` lets one client address make at most
      :data:`MAX_CLIENT_UPLOADS` upload requests in :data:`UPLOAD_WINDOW_S` seconds (HTTP 429
      after; the address is the connection's peer, a forwarded one only from a trusted proxy:
      ``common.trusted_proxies``). Gradio's uploads carry no session, so the client address is
      the unit, as for the queue's share (``ui.FairQueue``);
    * time: files are deleted :data:`DELETE_CACHE` ``[1]`` seconds after upload, checked every
      ``[0]`` seconds (``gr.Blocks(delete_cache=)``), and all of them when the server restarts.

    Together: one address keeps at most ``MAX_CLIENT_UPLOADS * MAX_UPLOAD_REQUEST_BYTES``
    on disk at a time. The Batch tab reads one file of at most ``batch_tab.MAX_FILE_BYTES``,
    which fits.
    """

    def __init__(
        self,
        app: Callable[..., Any],
        max_bytes: int = MAX_UPLOAD_REQUEST_BYTES,
        max_uploads: int = MAX_CLIENT_UPLOADS,
        window_s: float = UPLOAD_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app, self.max_bytes, self.max_uploads = app, max_bytes, max_uploads
        self.window_s, self.clock = window_s, clock
        self.recent: OrderedDict[str, deque[float]] = OrderedDict()

    def refusal(self, scope: dict) -> tuple[int, str] | None:
        """``(status, message)`` refusing an upload request, or None to let it through
        (then it is counted against its client address)."""
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is None:
            return 411, "uploads must state their Content-Length"
        try:
            size = int(length)
        except ValueError:
            return 400, "the Content-Length header is not a number"
        if size > self.max_bytes:
            return 413, f"the upload is {size:,} bytes; at most {self.max_bytes:,} per request"
        host = (scope.get("client") or ("?", 0))[0]
        now = self.clock()
        times = self.recent.pop(host, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        self.recent[host] = times  # most recent last
        while len(self.recent) > MAX_TRACKED_CLIENTS:
            self.recent.popitem(last=False)
        if len(times) >= self.max_uploads:
            wait = int(times[0] + self.window_s - now) + 1
            return 429, (
                f"this address made {len(times)} uploads in the last {self.window_s / 60:g} "
                f"minutes; at most {self.max_uploads}: try again in {wait} s"
            )
        times.append(now)
        return None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """The ASGI entry point."""
        is_upload = (
            scope.get("type") == "http"
            and scope.get("method") == "POST"
            and str(scope.get("path", "")).rstrip("/").endswith(UPLOAD_PATH_SUFFIX)
        )
        refused = self.refusal(scope) if is_upload else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        for message in _reply(*refused):
            await send(message)

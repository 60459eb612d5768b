"""The decision server's options: one frozen dataclass from the command line to the app.

``rlcd-lab serve`` parses :class:`ServeOptions` (each field a flag, its docstring the
flag's help), :func:`rlcd_lab.server.serving.serve` binds and runs with it, and
:func:`rlcd_lab.server.app.create_app` builds the app from it, so a new option is one field
here and the line that reads it. Standard library only: the command line's ``--help``
loads neither torch nor the web stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DEFAULT_DEADLINE_S = 8.0
"""Seconds a request may take (from its arrival) before its answer is the best so far:
below the official client's default timeout (a 10-second one)."""


@dataclass(frozen=True)
class ServeOptions:
    """Serve a checkpoint through the Jev-compatible decision API (POST /v1/systemone)."""

    checkpoint: Path | None = None
    """Checkpoint directory; default: the shipped two-stage RLCD checkpoint (reinforce)."""
    host: str = "127.0.0.1"
    """Address to listen on (0.0.0.0: every interface; see --allowed-host)."""
    port: int = 8000
    """Port to listen on."""
    name: str | None = None
    """Model name for requests and /v1/models; default: rlcd-<task>-<method>."""
    alias: tuple[str, ...] = ("jev-latest",)
    """Other names accepted for the model (the official client sends jev-latest)."""
    api_key: str | None = None
    """Require 'Authorization: Bearer KEY' on /v1 calls. Visible to other users in ps: set
    RLCD_API_KEY instead (the default when this flag is left out; unset: no key)."""
    allowed_host: tuple[str, ...] = ()
    """Host header values accepted besides localhost, 127.0.0.1, [::1] and --host (DNS
    rebinding guard): names clients use, *.domain, or * for any."""
    limit_concurrency: int = 256
    """At most this many requests in flight (idle connections hold no slot); beyond: 503 +
    Retry-After."""
    max_connections: int = 512
    """Open connections in all; beyond, the longest-idle one is closed (none idle: 503)."""
    max_client_connections: int = 64
    """Open connections per client address; beyond, its longest-idle one is closed (none
    idle: 503)."""
    timeout_keep_alive: float = 5.0
    """Seconds an idle keep-alive connection stays open."""
    timeout_request: float = 15.0
    """Seconds for a whole request (headers and body) to arrive, else the connection closes."""
    mode: Literal["direct", "reason", "auto"] = "auto"
    """auto: answer directly, reason only when the direct confidence is below --threshold
    (a checkpoint whose T was not fitted answers directly; a request may still ask)."""
    deadline: float | None = DEFAULT_DEADLINE_S
    """Seconds a request may take from its arrival: past it no more rationales are drawn
    and the answer is the best so far (the direct readout); below the official client's
    10-second timeout (None: no deadline)."""
    m: int = 4
    """Rationales per question in reason mode (mixture readout)."""
    threshold: float = 0.8
    """auto mode: a question is answered again with rationales when its direct confidence
    (chance-corrected, ``rlcd_lab.math.routing``) is below this."""
    batching: bool = True
    """Dynamic batching of concurrent requests into shared forward passes."""
    max_wait_ms: float = 5.0
    """Batching window: how long a request waits for others to join its batch (0..1000)."""
    device: str = "cpu"
    """Where the model runs (cpu, cuda, cuda:1, ...)."""
    threads: int | None = 1
    """torch CPU threads for the forward passes (None: torch's default, one per core). One
    holds up when other processes load the cores; a larger model on many idle cores wants
    more."""
    verify: bool = True
    """Refuse a checkpoint without checksums.json (``--no-verify`` serves it anyway)."""

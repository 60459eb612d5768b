"""``rlcd-lab serve``: check the options, load the checkpoint, bind and serve
(:func:`serve`); the line logged once bound (:func:`startup_line`)."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlcd_lab.decide import DecisionModel  # the class create_app loads checkpoints with
from rlcd_lab.decide.jev import DecisionError
from rlcd_lab.server.app import create_app
from rlcd_lab.server.connections import (
    MAX_HEADER_BYTES,
    build_server,
    check_server_args,
    host_pattern,
    is_loopback,
)
from rlcd_lab.server.hardening import check_number
from rlcd_lab.server.options import ServeOptions

log = logging.getLogger("rlcd_lab.server")
API_KEY_ENV = "RLCD_API_KEY"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def _check_api_key(api_key: str | None) -> str | None:
    """The key to require: ``api_key``, else ``$RLCD_API_KEY`` (unset or empty: none);
    ``ValueError`` unless it is printable ASCII without spaces."""
    if api_key is None:
        api_key = os.environ.get(API_KEY_ENV, "").strip() or None
    if api_key is not None and (
        not (api_key.isascii() and api_key.isprintable()) or " " in api_key
    ):
        raise ValueError("the API key must be printable ASCII without spaces")
    return api_key


def serve(
    opts: ServeOptions | None = None,
    *,
    log_level: str = "info",
    timeout_graceful_shutdown: float = 10.0,
    max_header_bytes: int = MAX_HEADER_BYTES,
    **app_kwargs: Any,
) -> None:
    """Load ``opts.checkpoint`` (None: ``default_checkpoint()``) and serve it with uvicorn
    (:func:`build_server`, which binds ``opts.host:opts.port``: ``OSError`` in one line when
    the port is in use) until ``SIGINT``/``SIGTERM``; ``opts`` None: the defaults.

    ``opts.api_key`` None reads ``$RLCD_API_KEY`` (unset or empty: no key; the environment
    variable is the way to pass it, a command-line key is visible in ``ps``). Host headers
    accepted: the loopback names, ``opts.host`` and ``opts.allowed_host``. Binding a
    non-loopback address without a key logs a warning. Every option is checked
    (``ValueError``, one line) before the checkpoint is loaded. ``opts.threads``: torch's
    CPU threads for the forward passes (None: torch's default, one per core), set before
    the model loads. ``app_kwargs`` (``limits``, ``max_batch``, ``unfitted_auto``) go to
    :func:`create_app` with ``opts``.
    """
    opts = opts or ServeOptions()
    host = opts.host
    if not isinstance(host, str) or not host.strip() or " " in host:
        raise ValueError(f"host must be an address or host name, got {host!r}")
    transport = {
        "timeout_keep_alive": opts.timeout_keep_alive,
        "timeout_request": opts.timeout_request,
        "timeout_graceful_shutdown": timeout_graceful_shutdown,
        "max_header_bytes": max_header_bytes,
        "max_connections": opts.max_connections,
        "max_client_connections": opts.max_client_connections,
    }
    check_server_args(opts.port, **transport)
    if opts.threads is not None:
        check_number("threads", opts.threads, 1, 1024, integer=True)
    opts = replace(opts, api_key=_check_api_key(opts.api_key))
    hosts = [*LOOPBACK_HOSTS, host_pattern(host), *opts.allowed_host]
    _configure_logging(log_level)
    if not is_loopback(host) and not opts.api_key:
        log.warning(
            "serving on %s without an API key: anyone who can reach it can use the model (set %s)",
            host,
            API_KEY_ENV,
        )
    if opts.threads is not None:
        import torch

        torch.set_num_threads(opts.threads)
    app = create_app(opts.checkpoint, opts, allowed_hosts=hosts, **app_kwargs)
    measure_passes(getattr(getattr(app, "state", None), "decider", None))
    server = build_server(app, host=host, port=opts.port, log_level=log_level, **transport)
    bound = server.sock.getsockname()[1]
    log.info("%s", startup_line(app, opts.checkpoint, host, bound, opts.api_key))
    server.run()


def startup_line(
    app: Any, checkpoint: str | Path | None, host: str, port: int, api_key: str | None
) -> str:
    """The line ``serve`` logs once it is bound: its URL (the port it bound, also for
    ``port=0``), the model names it answers to, the checkpoint they were loaded from and
    whether an API key is required."""
    from rlcd_lab.server.app import default_checkpoint

    bare = host.strip("[]")
    url = f"http://{f'[{bare}]' if ':' in bare else bare}:{port}"
    names = list(getattr(getattr(app, "state", None), "names", None) or ["?"])
    source = checkpoint if checkpoint is not None else default_checkpoint()
    key = "an API key is required (Authorization: Bearer)" if api_key else "no API key is required"
    return (
        f"serving {url}/v1/systemone: model {names[0]!r} (aliases {names[1:]}) from {source}; {key}"
    )


def measure_passes(decider: DecisionModel | None) -> None:
    """Answer one small reasoning request (a direct readout, 2 rationales of at most 8
    tokens, their scoring pass) before serving, so that the deadlines' budget
    (:class:`rlcd_lab.decide.deadlines.PassCosts`) starts from measured passes of every kind:
    an unmeasured kind's estimate is only a guess from the others."""
    if not isinstance(decider, DecisionModel):
        return
    question = {"warm_up": {"type": "noul"}}
    try:
        decider.decide("1+1=2?", question, mode="auto", threshold=1.0, m=2, max_new_tokens=8)
    except DecisionError as err:  # a checkpoint that cannot answer it: measured later
        log.debug("could not measure the model's passes before serving: %s", err.msg)


def _configure_logging(level: str) -> None:
    """The server's own log lines (abandoned requests, model failures, warnings) next to
    uvicorn's, in its format, when nothing else configured the ``rlcd_lab`` logger."""
    from uvicorn.logging import DefaultFormatter

    pkg = logging.getLogger("rlcd_lab")
    if not pkg.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
        pkg.addHandler(handler)
        pkg.setLevel(level.upper())
        pkg.propagate = False

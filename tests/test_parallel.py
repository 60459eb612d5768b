"""Data parallelism, gradient accumulation, schedules and the sampler interface.

The invariance tests launch real gloo process groups (``torchrun`` and ``accelerate
launch``) on the CPU, in float64: W processes with ``batch_size / W`` questions each must
end with the weights of one process with the whole batch (TRL's invariance tests are the
model: same data, same seeds, a different split of the work).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlcd_lab.estimators import surrogate_terms
from rlcd_lab.files.rundir import read_log
from rlcd_lab.methods.configs import GRPOConfig, preset
from rlcd_lab.reader.rationales import hf_sampler, sample_rationales
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.reader.sampling import Generated, GumbelSampler
from rlcd_lab.train import launch_command, train

# torchrun and accelerate launch meet on one port (29500): under pytest -n N these tests
# run one after another in one worker
pytestmark = pytest.mark.xdist_group("gloo")

SMALL = [
    "--task", "verify", "--steps", "3", "--batch-size", "4", "--num-rationales", "2",
    "--max-new-tokens", "12", "--eval-every", "0", "--eval-items", "4", "--test-items", "0",
    "--save-every", "3", "--dtype", "float64", "--device", "cpu",
]  # fmt: skip
METHODS = {
    "calibrate": ["calibrate"],
    "reinforce": ["reinforce", "--sf-weight", "0.3", "--beta", "0.04"],
    "grpo": ["grpo"],
}


def launch(launcher: list[str], args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path.cwd())}
    cmd = [*launcher, "-m", "rlcd_lab.cli", "train", *args]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]


def untimed(run: Path) -> list[dict]:
    """The log rows without their wall-clock timings."""
    return [{k: v for k, v in r.items() if not k.startswith("time")} for r in read_log(run)]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "model.safetensors"))


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_the_modules_tests_run_in_one_worker(request):
    """Under ``--dist loadgroup`` (make test) this module's tests carry their xdist group,
    so one worker runs them one after another: pytest-xdist appends it to the node id."""
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@gloo"), request.node.nodeid


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
ONE = [sys.executable]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tokenizer):
    """``run(method)``: the tiny base (as conftest's ``tiny_base``, saved once) and the
    one-process run of ``method`` (SMALL) from it that its 2-process launches must match,
    trained on first use and then shared (torchrun's and accelerate's calibrate runs are
    compared with the same one)."""
    from rlcd_lab.lm.checkpoint import save_checkpoint
    from rlcd_lab.lm.model import tiny_model

    folder = tmp_path_factory.mktemp("one-process")
    base = save_checkpoint(folder / "base", tiny_model(tokenizer, seed=0), tokenizer)
    runs = {}

    def run(method: str) -> tuple[Path, Path]:
        if method not in runs:
            args = [*METHODS[method], *SMALL, "--init", str(base), "--out", method]
            launch(ONE, args, folder)
            runs[method] = folder / method
        return base, runs[method]

    return run


@pytest.mark.parametrize("method", list(METHODS))
def test_two_processes_give_the_weights_of_one(method, tmp_path, one_process):
    """3 steps, batch 4: 2 gloo processes x 2 questions == 1 process x 4 questions; the
    logged losses agree too (averaged over processes; the readout is float32). Without
    CUDA the 2-process launch leaves ``--device`` at auto: it must join one gloo group,
    not train twice into one folder."""
    tiny_base, one_run = one_process(method)
    args = [*METHODS[method], *SMALL, "--init", str(tiny_base)]
    assert SMALL[-2:] == ["--device", "cpu"]
    auto = [*METHODS[method], *SMALL[:-2], "--init", str(tiny_base)]
    launch(TORCHRUN, [*(args if torch.cuda.is_available() else auto), "--out", "two"], tmp_path)
    one, two = weights(one_run), weights(tmp_path / "two")
    base = load_file(str(tiny_base / "model.safetensors"))
    assert max_diff(one, {k: v.double() for k, v in base.items()}) > 1e-6  # it trained
    assert max_diff(one, two) < 1e-12
    log1, log2 = read_log(one_run), read_log(tmp_path / "two")
    for a, b in zip(log1, log2, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-7)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-6)
    # only the main process wrote: one log line per step, one final checkpoint
    assert [r["step"] for r in log2] == [0, 1, 2]


def test_accelerate_launch_runs_the_same_code_path(tmp_path, one_process):
    """The GPU launcher (``accelerate launch --multi_gpu``) on CPU processes: gloo, the
    same result as one process."""
    tiny_base, one_run = one_process("calibrate")
    args = [*METHODS["calibrate"], *SMALL, "--init", str(tiny_base)]
    accelerate = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
        "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
    ]  # fmt: skip
    launch(accelerate, [*args, "--out", "acc"], tmp_path)
    assert max_diff(weights(one_run), weights(tmp_path / "acc")) < 1e-12


def test_kill_one_process_then_resume_is_bit_identical(tmp_path, tiny_base):
    """SIGKILL process 1 of a 2-process run once its step-2 checkpoint exists (torchrun
    then stops process 0), resume with 2 processes: the weights and the log end
    bit-identical to an uninterrupted 2-process run."""
    import signal
    import time

    import psutil

    steps = ["--steps", "12", "--save-every", "2"]
    args = [*METHODS["grpo"], *SMALL, "--init", str(tiny_base), *steps]
    launch(TORCHRUN, [*args, "--out", "whole"], tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path.cwd())}
    cmd = [*TORCHRUN, "-m", "rlcd_lab.cli", "train", *args, "--out", "parts"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (tmp_path / "parts/checkpoints/step-2/trainer_state.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    ranks = [c for c in psutil.Process(proc.pid).children(recursive=True) if "train" in c.cmdline()]
    victim = next(c for c in ranks if c.environ().get("RANK") == "1")
    victim.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    assert not (tmp_path / "parts" / "final").exists()  # it died mid-run
    launch(TORCHRUN, [*args, "--out", "parts", "--resume"], tmp_path)
    whole, parts = weights(tmp_path / "whole"), weights(tmp_path / "parts")
    assert all(torch.equal(whole[k], parts[k]) for k in whole)
    assert untimed(tmp_path / "whole") == untimed(tmp_path / "parts")


def test_a_batch_that_does_not_split_is_refused(tmp_path, tiny_base):
    args = [*METHODS["calibrate"], *SMALL, "--init", str(tiny_base), "--batch-size", "3"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path.cwd())}
    cmd = [*TORCHRUN, "-m", "rlcd_lab.cli", "train", *args, "--out", "bad"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "--batch-size 3 must be a multiple of the 2 process(es)" in done.stderr
    assert not (tmp_path / "bad").exists()


# ----------------------------------------------------------- in one process (fast)
def cfg_for(method: str, tiny_base: Path, out: Path, **kw):
    common = dict(
        init=tiny_base, out=out, task="verify", steps=3, batch_size=4, m=2, max_new_tokens=12,
        eval_every=0, eval_items=4, test_items=0, save_every=3, dtype="float64", device="cpu",
    )  # fmt: skip
    if method == "reinforce":
        common |= dict(sf_weight=0.3, beta=0.04)
    common |= kw
    return GRPOConfig(**common) if method == "grpo" else preset(method, **common)


@pytest.mark.parametrize("method", ["calibrate", "reinforce", "grpo"])
def test_gradient_accumulation_gives_the_large_batch(method, tmp_path, tiny_base):
    big = train(cfg_for(method, tiny_base, tmp_path / "big"))
    acc = train(cfg_for(method, tiny_base, tmp_path / "acc", grad_accum=2))
    assert max_diff(weights(big), weights(acc)) < 1e-12


def test_grad_accum_must_divide_the_batch(tmp_path, tiny_base):
    with pytest.raises(ValueError, match="multiple of the 1 process.*--grad-accum 3"):
        train(cfg_for("calibrate", tiny_base, tmp_path / "x", grad_accum=3))
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
def test_lr_schedule_with_warmup(schedule, tmp_path, tiny_base):
    """The logged learning rate of each step against the formula, computed here."""
    steps, warm, lr = 6, 2, 1e-3
    cfg = cfg_for(
        "calibrate", tiny_base, tmp_path / schedule, steps=steps, lr=lr,
        lr_schedule=schedule, warmup_steps=warm, save_every=6,
    )  # fmt: skip
    train(cfg)
    got = [r["lr"] for r in read_log(tmp_path / schedule)]

    def expected(s: int) -> float:
        if s < warm:
            return lr * s / warm
        progress = (s - warm) / (steps - warm)
        return (
            lr
            * {
                "linear": 1 - progress,
                "cosine": 0.5 * (1 + math.cos(math.pi * progress)),
                "constant": 1.0,
            }[schedule]
        )

    assert got == pytest.approx([expected(s) for s in range(steps)], abs=1e-15)


def test_schedule_resumes_where_it_stopped(tmp_path, tiny_base):
    kw = dict(lr=1e-3, lr_schedule="cosine", warmup_steps=1, save_every=2)
    train(cfg_for("calibrate", tiny_base, tmp_path / "whole", steps=4, **kw))
    train(cfg_for("calibrate", tiny_base, tmp_path / "parts", steps=2, **kw))
    shutil.rmtree(tmp_path / "parts" / "final")
    train(cfg_for("calibrate", tiny_base, tmp_path / "parts", steps=4, resume=True, **kw))
    assert untimed(tmp_path / "whole") == untimed(tmp_path / "parts")


def test_missing_tracker_package_is_named(tmp_path, tiny_base):
    with pytest.raises(ValueError, match="--tracker tensorboard needs the tensorboard package"):
        train(cfg_for("calibrate", tiny_base, tmp_path / "t", tracker="tensorboard"))


def test_vllm_sampler_needs_cuda(tmp_path, tiny_base):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="--sampler vllm needs a CUDA device"):
        train(cfg_for("calibrate", tiny_base, tmp_path / "v", sampler="vllm"))


# ------------------------------------------------------------------ the sampler
PROMPTS = ["12+30+5=47?\n", "40+41+7=88?\n", "1+2+3=6?\n"]


def test_a_rationale_does_not_depend_on_its_batch(tokenizer, tiny_lm):
    """Same prompt, same seed: the same rationale alone, in a batch of three, or in
    another order (per-row noise)."""
    seeds = [11, 22, 33]
    together = sample_rationales(tiny_lm, tokenizer, PROMPTS, 2, 12, seed=seeds)
    alone = sample_rationales(tiny_lm, tokenizer, PROMPTS[1:2], 2, 12, seed=seeds[1:2])
    flipped = sample_rationales(tiny_lm, tokenizer, PROMPTS[::-1], 2, 12, seed=seeds[::-1])
    assert alone.texts == together.texts[2:4]
    assert flipped.texts[2:4] == together.texts[2:4]
    assert flipped.texts[:2] == together.texts[4:]
    other = sample_rationales(tiny_lm, tokenizer, PROMPTS, 2, 12, seed=[11, 23, 33])
    assert other.texts[:2] == together.texts[:2] and other.texts[2:4] != together.texts[2:4]


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_gumbel_max_draws_from_the_softmax(temperature):
    """Frequencies of the argmax over 20000 seeded rows against softmax(z / T): each
    within 5 binomial standard deviations."""
    n, z = 20000, torch.tensor([[1.0, 0.0, -1.0, 2.0, -3.0]])
    noisy = GumbelSampler(range(n), temperature, 1.0, "cpu")(None, z.expand(n, -1))
    freq = torch.bincount(noisy.argmax(-1), minlength=5).double() / n
    p = (z[0].double() / temperature).softmax(-1)
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12).all()


def test_the_loss_does_not_use_the_samplers_log_probs(tokenizer, tiny_lm):
    """A sampler reporting garbage log-probs: the same tokens, and the same loss and
    gradient, as the default sampler (the model recomputes ``log pi(r)``)."""

    def liar(*args, **kw) -> Generated:
        out = hf_sampler(*args, **kw)
        return replace(out, token_lp=torch.full_like(out.token_lp, -123.0))

    def loss_and_grad(sampler):
        rats = sample_rationales(tiny_lm, tokenizer, PROMPTS, 2, 12, seed=5, sampler=sampler)
        tiny_lm.zero_grad()
        u, _, logp = score_rationales(tiny_lm, rats, [5, 6])
        y = torch.tensor([0, 1, 0])
        loss = surrogate_terms(u.view(3, 2, -1), logp.view(3, 2), y, 0.0).loss(0.3)
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in tiny_lm.parameters() if p.grad is not None])
        return rats, loss.detach(), grad

    honest, lying = loss_and_grad(hf_sampler), loss_and_grad(liar)
    assert torch.equal(honest[0].input_ids, lying[0].input_ids)
    assert not torch.allclose(honest[0].logp_r, lying[0].logp_r)
    assert torch.equal(honest[1], lying[1]) and torch.equal(honest[2], lying[2])


def test_config_records_the_new_settings(tmp_path, tiny_base):
    run = train(cfg_for("calibrate", tiny_base, tmp_path / "r", steps=1, save_every=1))
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["grad_accum"] == 1 and cfg["lr_schedule"] == "constant" and cfg["sampler"] == "hf"


# --------------------------------------------- the vLLM sampler's glue (a stand-in engine)
class FakeEngine:
    """Stands in for ``vllm.LLM``: writes ``script`` after any prompt, stopping as vLLM does
    (on the stop string, decoded; or after ``max_tokens``), and records what it was given."""

    def __init__(self, tokenizer, script: str):
        self.tok, self.script = tokenizer, tokenizer(script, add_special_tokens=False)
        self.loaded, self.requests = [], []

    def apply_model(self, fn):
        class Model:
            def load_weights(inner, weights):
                self.loaded.append(dict(weights))

        return [fn(Model())]

    def generate(self, prompts, sampling_params, use_tqdm):
        outs = []
        for prompt, params in zip(prompts, sampling_params, strict=True):
            self.requests.append((prompt["prompt_token_ids"], params))
            ids, reason, stop = [], "length", None
            for t in self.script["input_ids"][: params["max_tokens"]]:
                ids.append(t)
                if params["stop"][0] in self.tok.decode(ids):
                    reason, stop = "stop", params["stop"][0]
                    break
            done = type("C", (), dict(token_ids=ids, finish_reason=reason, stop_reason=stop))
            outs.append(type("R", (), {"outputs": [done]}))
        return outs


def test_vllm_sampler_glue(tokenizer, tiny_lm, tiny_base, monkeypatch):
    """Unpadded prompts, one seed per row, the marker stop mapped to ``Generated`` and cut
    as with the HF sampler, and the weights copied before the first draw and after each
    ``sync`` only."""
    import types

    from rlcd_lab.train import vllm as vllm_sampler

    engine = FakeEngine(tokenizer, "so yes Answer: Y")
    fake = types.SimpleNamespace(LLM=lambda **kw: engine, SamplingParams=lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    sampler = vllm_sampler.VLLMSampler(cfg_for("calibrate", tiny_base, Path("unused")))
    rats = sample_rationales(tiny_lm, tokenizer, PROMPTS, 2, 30, seed=[1, 2, 3], sampler=sampler)
    assert rats.texts == ["so yes"] * 6 and not rats.forced.any()
    assert [r[0] for r in engine.requests] == [
        tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS for _ in range(2)
    ]
    seeds = [r[1]["seed"] for r in engine.requests]
    assert len(set(seeds)) == 6 and engine.requests[0][1]["stop"] == ["Answer:"]
    assert len(engine.loaded) == 1
    assert engine.loaded[0].keys() == tiny_lm.state_dict().keys()
    sample_rationales(tiny_lm, tokenizer, PROMPTS[:1], 1, 30, seed=[1], sampler=sampler)
    assert len(engine.loaded) == 1  # no optimizer step in between: no copy
    sampler.sync()
    sample_rationales(tiny_lm, tokenizer, PROMPTS[:1], 1, 4, seed=[1], sampler=sampler)
    assert len(engine.loaded) == 2
    short = sample_rationales(tiny_lm, tokenizer, PROMPTS[:1], 1, 4, seed=[1], sampler=sampler)
    assert short.forced.all() and short.lengths.tolist() == [4]  # ran out of tokens


def test_lora_weights_reach_the_engine_merged(tiny_lm):
    """``hf_weights`` of a PEFT model: the base model's names, with W + B A (checked
    against peft's own merge_and_unload on a copy)."""
    import copy

    from peft import LoraConfig, get_peft_model

    from rlcd_lab.train.vllm import hf_weights

    names = tiny_lm.state_dict().keys()
    peft = get_peft_model(copy.deepcopy(tiny_lm), LoraConfig(r=2, target_modules="all-linear"))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_()
    got = dict(hf_weights(peft))
    want = copy.deepcopy(peft).merge_and_unload().state_dict()
    assert got.keys() == set(names)
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in got)
    assert any(not torch.allclose(got[k], tiny_lm.state_dict()[k]) for k in got)


def test_the_readme_multiprocess_example_runs_as_written(tmp_path):
    """The 2-process CPU command of docs/training.md, copied out of it, run from a copy of
    the repository's assets (``.venv/bin/`` mapped to this interpreter's folder)."""
    text = (Path(__file__).parents[1] / "docs" / "training.md").read_text()
    block = text.split("<!-- multiprocess-example -->\n```bash\n", 1)[1].split("```", 1)[0]
    block = " ".join(block.replace("\\\n", " ").split())
    args = block.split(" -m rlcd_lab.cli ", 1)[1].removesuffix(" --device cpu")
    assert block == ".venv/bin/" + launch_command(args, 2, on="cpu")  # what notebooks print
    cmd = block.replace(".venv/bin/", str(Path(sys.executable).parent) + "/")
    (tmp_path / "assets").symlink_to(Path(__file__).parents[1] / "assets")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run(
        cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)  # one JSON object, printed by rank 0 only
    assert done.stdout.endswith("}\n") and printed["run"].endswith("calibrate-2proc")
    run = tmp_path / "runs" / "calibrate-2proc"
    assert [r["step"] for r in read_log(run)] == [0, 1, 2, 3]
    assert len((run / "eval" / "test.jsonl").read_text().splitlines()) == 20


def test_launch_command_forms():
    args = "train grpo --init DIR --num-rationales 4"
    assert launch_command(args, 8) == (
        "accelerate launch --multi_gpu --num_processes 8 -m rlcd_lab.cli " + args
    )
    assert launch_command(args, 1) == "accelerate launch --num_processes 1 -m rlcd_lab.cli " + args
    with pytest.raises(ValueError, match="processes must be >= 1"):
        launch_command(args, 0)

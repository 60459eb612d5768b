"""RLCDTrainer (``rlcd_lab.integrations.trl``): one TRL step takes our loop's gradient on the
same rationales, and a short run lowers the loss as a first-order expansion predicts."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import TrainerCallback

from rlcd_lab.estimators import surrogate_terms
from rlcd_lab.lm.checkpoint import save_checkpoint
from rlcd_lab.lm.loading import load_checkpoint
from rlcd_lab.methods.configs import preset
from rlcd_lab.reader.rationales import Rationales, sample_questions, sample_rationales
from rlcd_lab.reader.reading import score_rationales
from rlcd_lab.tasks import load_task_items
from rlcd_lab.train import rlcd as rlcd_loop
from rlcd_lab.train.common import Session

pytest.importorskip("trl")

from rlcd_lab.integrations.trl import (  # noqa: E402  (needs trl)
    RLCDSettings,
    RLCDTrainer,
    replay_sampler,
    rlcd_args,
    rlcd_dataset,
)

BASE = Path(__file__).resolve().parents[1] / "assets" / "checkpoints" / "base-verify"
B, M = 2, 3  # questions per step, rationales per question
MAX_NEW = 48  # the base writes the marker after about 42 tokens: some rows are forced
F64 = torch.float64


@pytest.fixture(scope="module")
def moved(tmp_path_factory) -> Path:
    """The shipped verify base with every weight moved by seeded noise (std 0.01): trained
    from here and anchored at the base, stage 2's KL reward is not 0 at the first step."""
    model, tok, meta = load_checkpoint(BASE)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen))
    return save_checkpoint(tmp_path_factory.mktemp("moved") / "init", model, tok, meta)


def completions(rats: Rationales) -> list[list[int]]:
    """What our sampler generated for each row, up to where it stopped: the kept rationale
    tokens (a written marker included), then the sampled EOS if the row ended with one."""
    rows = []
    for i in range(len(rats.texts)):
        kept = rats.input_ids[i][rats.rationale_mask[i]].tolist()
        rows.append(kept + ([rats.eos_id] if rats.eos_col[i] >= 0 else []))
    return rows


def prompt_ids(rats: Rationales) -> list[list[int]]:
    """Each row's prompt tokens (the real tokens before its rationale)."""
    return [
        rats.input_ids[i][rats.attention_mask[i].bool()][: int(rats.prompt_len[i])].tolist()
        for i in range(len(rats.texts))
    ]


def inject(trainer: RLCDTrainer, *rats: Rationales) -> None:
    """Make TRL's generation step return our rationales' tokens: each prompt gets the
    completions our sampler drew for it, in order (matched by the prompt's token ids)."""
    by_prompt: dict[tuple[int, ...], list[list[int]]] = {}
    for r in rats:
        for p, c in zip(prompt_ids(r), completions(r), strict=True):
            by_prompt.setdefault(tuple(p), []).append(c)
    served: dict[tuple[int, ...], int] = {}

    def generate(prompts, images, multimodal_fields, num_generations, *args, **kwargs):
        out = []
        for p in prompts:
            rows = by_prompt[tuple(p)]  # KeyError: TRL encoded a prompt differently
            k = served.get(tuple(p), 0)
            served[tuple(p)] = k + 1
            out.append(rows[k % len(rows)])
        return out, None

    trainer._generate_single_turn = generate


class Grads(TrainerCallback):
    """Records the trainable parameters and their gradients just before each optimizer step
    (after TRL's clipping, off here), and the parameters just after it."""

    def __init__(self):
        self.before: list[dict[str, torch.Tensor]] = []
        self.grads: list[dict[str, torch.Tensor]] = []
        self.after: list[dict[str, torch.Tensor]] = []

    @staticmethod
    def _params(model):
        return {n: p for n, p in model.named_parameters() if p.requires_grad}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        params = self._params(model)
        self.before.append({n: p.detach().clone() for n, p in params.items()})
        self.grads.append({n: p.grad.detach().clone() for n, p in params.items()})

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.after.append({n: p.detach().clone() for n, p in self._params(model).items()})


def trl_args(method: str, out: Path, **kw):
    base = dict(
        output_dir=str(out),
        per_device_train_batch_size=B * M,
        num_generations=M,
        max_completion_length=MAX_NEW,
        max_steps=1,
        max_grad_norm=0.0,  # no clipping: the raw gradient is compared
        use_cpu=True,
        shuffle_dataset=False,
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    return rlcd_args(method, **(base | kw))


# ------------------------------------------------------------------------ (a) differential
def our_step(method: str, init: Path, out: Path, grad_accum: int, monkeypatch) -> dict:
    """One step of ``rlcd.train`` in float64 on the verify task (anchored at the base), in
    ``grad_accum`` micro-batches of B questions: its batches, their rationales and the
    gradient it hands the optimizer. Sampling at temperature 2 makes a question's
    rationales differ (nonzero advantages)."""
    rec: dict = {"batches": [], "rats": []}
    sample = rlcd_loop.sample_batch

    def recording_sample(s, batch):
        rats, option_ids = sample(s, batch)
        rec["batches"].append(batch)
        rec["rats"].append(rats)
        return rats, option_ids

    step = Session.step

    def recording_step(s):
        params = {n: p for n, p in s.model.named_parameters() if p.requires_grad}
        rec["grads"] = {n: p.grad.detach().clone() for n, p in params.items()}
        return step(s)

    monkeypatch.setattr(rlcd_loop, "sample_batch", recording_sample)
    monkeypatch.setattr(Session, "step", recording_step)
    cfg = preset(
        method, init=init, ref=BASE, out=out, task="verify", steps=1,
        batch_size=B * grad_accum, grad_accum=grad_accum, m=M, max_new_tokens=MAX_NEW,
        dtype="float64", device="cpu", eval_every=0, eval_items=1, test_items=0,
        grad_terms_every=0, grad_clip=1e9, seed=1, sampling_temperature=2.0,
    )  # fmt: skip
    rlcd_loop.train(cfg)
    monkeypatch.undo()
    return rec


def unpadded(ids, mask, rationale_mask) -> list[tuple]:
    """Each row's real tokens and which of them are sampled rationale tokens."""
    rows = zip(ids, rationale_mask, mask.bool(), strict=True)
    return [(tuple(i[k].tolist()), tuple(r[k].tolist())) for i, r, k in rows]


@pytest.mark.parametrize(
    ("method", "grad_accum"), [("calibrate", 1), ("reinforce", 1), ("reinforce", 2)]
)
def test_one_trl_step_takes_our_loops_gradient(method, grad_accum, moved, tmp_path, monkeypatch):
    """The same step through TRL (its loader, buffer, shuffle and split, gradient
    accumulation, backward) and through ``rlcd.train``, on the same sampled tokens: the
    same rationales, the same gradient (float64; observed differences ~1e-15)."""
    ours = our_step(method, moved, tmp_path / "ours", grad_accum, monkeypatch)
    rats = ours["rats"]
    items = [it for b in ours["batches"] for it in b.items]
    y = torch.cat([b.y for b in ours["batches"]])
    forced = torch.cat([r.forced for r in rats])
    # the step has rationales that wrote the marker and rationales that had it forced
    assert 0 < int(forced.sum()) < len(forced)

    model, tok, meta = load_checkpoint(moved, dtype=F64, trainable=True)
    ref = load_checkpoint(BASE, dtype=F64)[0]
    grads, built = Grads(), {}
    settings = RLCDSettings.from_method(method, marker=meta["marker"], sep=meta["sep"])
    trainer = RLCDTrainer(
        model,
        trl_args(method, tmp_path / "trl", gradient_accumulation_steps=grad_accum),
        train_dataset=rlcd_dataset(tok, items, outcomes=y.tolist()),
        processing_class=tok,
        callbacks=[grads],
        rlcd=settings,
        ref_model=ref,
    )
    assert (trainer.beta > 0) == (settings.sf_weight > 0) == (method == "reinforce")
    inject(trainer, *rats)
    generate = trainer._generate_and_score_completions

    def recording(inputs):
        built["out"] = generate(inputs)
        return built["out"]

    trainer._generate_and_score_completions = recording
    trainer.train()

    # TRL's step built our rationales from the injected completions, row for row
    out = built["out"]
    theirs_rows = unpadded(
        *(out[k].flatten(0, 1) for k in ("input_ids", "attention_mask", "rationale_mask"))
    )
    ours_rows = [
        row for r in rats for row in unpadded(r.input_ids, r.attention_mask, r.rationale_mask)
    ]
    assert theirs_rows == ours_rows
    for key in ("forced", "lengths"):
        assert torch.equal(out[key].flatten(), torch.cat([getattr(r, key) for r in rats])), key
    assert torch.equal(out["eos_col"].flatten() >= 0, torch.cat([r.eos_col >= 0 for r in rats]))
    assert torch.equal(out["y"], y)

    theirs = grads.grads[0]
    assert theirs.keys() == ours["grads"].keys()
    diff = max(float((theirs[n] - g).abs().max()) for n, g in ours["grads"].items())
    size = max(float(g.abs().max()) for g in ours["grads"].values())
    assert size > 1e-3  # a real gradient, not two zeros
    assert diff <= 1e-6, f"max |TRL - ours| = {diff:.3g} (largest entry {size:.3g})"
    logged = trainer.state.log_history[0]
    if method == "reinforce":
        # the anchor is in play: the moved model's log pi(r) is not the base's
        assert abs(logged["kl"]) > 1e-3
    else:  # stage 1 needs no anchor: its loss has no score-function term
        assert "kl" not in logged


def test_replay_stops_where_our_sampler_stops(tokenizer, tiny_lm):
    """TRL keeps generating past the marker and ends a row with EOS: the replay cuts the
    first at the marker and forces the marker after the second, EOS in log pi(r) only."""
    eos = tiny_lm.generation_config.eos_token_id
    enc = tokenizer(["xy Answer: Y more", "abc"], add_special_tokens=False)["input_ids"]
    rats = sample_rationales(
        tiny_lm, tokenizer, ["Q?\n"], 2, 8, bridge=[], sampler=replay_sampler(
            [enc[0], enc[1] + [eos]]
        )
    )  # fmt: skip
    assert rats.texts == ["xy", "abc"] and rats.forced.tolist() == [False, True]
    assert rats.lengths.tolist() == [len("xy Answer:"), 3]
    assert rats.eos_col.tolist()[0] == -1 and rats.eos_col.tolist()[1] >= 0
    with pytest.raises(ValueError, match="without the marker"):
        sample_rationales(tiny_lm, tokenizer, ["Q?\n"], 1, 8, sampler=replay_sampler([enc[1]]))


# -------------------------------------------------------------------------- (b) it trains
def pathwise_loss(model, rats, option_ids, y) -> torch.Tensor:
    u, _, logp = score_rationales(model, rats, option_ids)
    n = len(y)
    return surrogate_terms(u.view(n, M, -1), logp.view(n, M), y).pathwise.mean()


def test_short_run_descends_as_its_first_order_expansion_predicts(tmp_path):
    """Stage 1 on a fixed batch with fixed rationales (drawn at temperature 2, so they
    differ), so the loss is a function of the weights alone: ``L = -(1/(B M)) sum_i J(u_i,
    Y)`` (pathwise, Brier; the logged reward is ``-L``). Adam's first update is ``d = -lr g
    / (|g| + eps)`` (bias-corrected moments ``g`` and ``g^2``), so to first order ``L``
    first moves by ``g . d = -lr sum g^2 / (|g| + eps) < 0``; at ``lr = 2e-5`` the second
    order is a few percent of it. Small steps keep descending."""
    model, tok, meta = load_checkpoint(BASE, dtype=F64, trainable=True)
    items = load_task_items("verify", "train")[:4]
    y = torch.tensor([it.label for it in items])
    rats, option_ids = sample_questions(
        model, tok, [it.prompt for it in items], [it.options for it in items], M, MAX_NEW,
        seed=5, sampling_temperature=2.0,
    )  # fmt: skip
    with torch.no_grad():
        start = float(pathwise_loss(model, rats, option_ids, y))
    steps, lr, grads = 4, 2e-5, Grads()
    args = trl_args(
        "calibrate", tmp_path / "trl", per_device_train_batch_size=4 * M, max_steps=steps,
        learning_rate=lr,
    )  # fmt: skip
    trainer = RLCDTrainer(
        model, args, train_dataset=rlcd_dataset(tok, items), processing_class=tok,
        callbacks=[grads],
    )  # fmt: skip
    inject(trainer, rats)
    trainer.train()
    rows = [r for r in trainer.state.log_history if "loss/pathwise" in r]
    with torch.no_grad():
        end = float(pathwise_loss(model, rats, option_ids, y))
    # TRL's loss at the first step is ours on the same rationales, and it is -reward
    assert rows[0]["loss/pathwise"] == pytest.approx(start, rel=1e-12)
    assert all(r["reward"] == pytest.approx(-r["loss/pathwise"], rel=1e-12) for r in rows)
    g = grads.grads[0]
    predicted = -lr * sum(float((x * x / (x.abs() + args.adam_epsilon)).sum()) for x in g.values())
    first = rows[1]["loss/pathwise"] - rows[0]["loss/pathwise"]
    assert predicted < 0 and first == pytest.approx(predicted, rel=0.1)
    trajectory = [r["loss/pathwise"] for r in rows] + [end]
    assert len(trajectory) == steps + 1
    assert all(b < a for a, b in zip(trajectory, trajectory[1:], strict=False))


def test_lora_stage_two_with_trls_own_generation(tmp_path):
    """TRL's generation, PEFT's adapter and its reference (the adapter disabled): at the
    first step the policy is the base, so the KL reward is exactly 0; two steps move the
    adapter only."""
    model, tok, meta = load_checkpoint(BASE, trainable=True)
    items = load_task_items("verify", "train")[:2]
    grads = Grads()
    trainer = RLCDTrainer(
        model,
        trl_args("reinforce", tmp_path / "trl", max_steps=2, learning_rate=1e-2),
        train_dataset=rlcd_dataset(tok, items),
        processing_class=tok,
        peft_config=LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"),
        callbacks=[grads],
        rlcd=RLCDSettings.from_method("reinforce", marker=meta["marker"], sep=meta["sep"]),
    )
    trainer.train()
    rows = [r for r in trainer.state.log_history if "reward" in r]
    assert len(rows) == 2
    assert rows[0]["kl"] == 0.0 and rows[1]["kl"] != 0.0
    for r in rows:
        assert -1.0 <= r["reward"] <= 1.0 and 0.0 <= r["forced_rate"] <= 1.0
        assert 0 < r["rationale_length"] <= MAX_NEW
    names = set(grads.grads[0])
    assert names and all("lora_" in n for n in names)
    assert any(not torch.equal(grads.before[1][n], grads.after[1][n]) for n in names)


def test_a_deep_copy_of_a_model_trl_has_held_is_refused_as_anchor(tmp_path):
    """TRL patches the policy's forward in place; ``copy.deepcopy`` keeps the patch, which
    calls the original model, so such a copy would anchor the policy at itself (KL 0)."""
    model, tok, meta = load_checkpoint(BASE, trainable=True)
    data = rlcd_dataset(tok, load_task_items("verify", "train")[:2])
    RLCDTrainer(model, trl_args("calibrate", tmp_path / "a"), train_dataset=data)
    with pytest.raises(ValueError, match="calls another model"):
        RLCDTrainer(
            load_checkpoint(BASE, trainable=True)[0], trl_args("reinforce", tmp_path / "b"),
            train_dataset=data, processing_class=tok, ref_model=copy.deepcopy(model),
        )  # fmt: skip

"""Option tokens, prompts and the readout u on tiny in-process models."""

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlcd_lab.reader.prompts import build_prompt
from rlcd_lab.reader.readout import option_logits, option_token_ids, readout


def word_tokenizer():
    """GPT-2-like pre-tokenization: the space merges into the following word (" yes")."""
    words = ["<pad>", "<unk>", "Answer", ":", " yes", " no", " maybe", "Q", " ", "?", " A"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()  # "Yes" and "yes" become the same token
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r" ?\w+|[^\w\s]| "), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>")


def test_option_tokens_char_tokenizer_has_a_space_bridge(tokenizer):
    opts = option_token_ids(tokenizer, ["Y", "N", "3"])
    assert opts.ids == tuple(tokenizer.convert_tokens_to_ids(["Y", "N", "3"]))
    assert opts.bridge == (tokenizer.convert_tokens_to_ids(" "),)
    assert len(opts) == 3


def test_option_tokens_merged_space_has_no_bridge():
    tok = word_tokenizer()
    opts = option_token_ids(tok, ["yes", "no", "maybe"])
    assert opts.bridge == ()
    assert opts.ids == tuple(tok.convert_tokens_to_ids([" yes", " no", " maybe"]))


def test_option_token_errors_name_the_labels(tokenizer):
    with pytest.raises(ValueError, match=r"\['yes'\] are not a single token"):
        option_token_ids(tokenizer, ["Y", "yes"])
    with pytest.raises(ValueError, match=r"duplicate option labels: \['A'\]"):
        option_token_ids(tokenizer, ["A", "B", "A"])
    with pytest.raises(ValueError, match=r"\['é', 'ü'\] map to the tokenizer's unknown"):
        option_token_ids(tokenizer, ["é", "ü", "A"])
    with pytest.raises(ValueError, match="non-empty"):
        option_token_ids(tokenizer, ["A", ""])
    with pytest.raises(ValueError, match="at least 2"):
        option_token_ids(tokenizer, ["A"])
    with pytest.raises(ValueError, match=r"\['nope'\] map to the tokenizer's unknown"):
        option_token_ids(word_tokenizer(), ["yes", "nope", "no"])
    with pytest.raises(ValueError, match=r"\['Yes', 'yes'\] share a token"):
        option_token_ids(word_tokenizer(), ["yes", "no", "Yes"])


def test_build_prompt_plain_and_chat(tokenizer):
    assert build_prompt(tokenizer, "Q: 1?") == "Q: 1?\n"
    assert build_prompt(tokenizer, "Q: 1?", direct=True) == "Q: 1?\nAnswer:"
    with pytest.raises(ValueError, match="empty"):
        build_prompt(tokenizer, "  ")
    chat = word_tokenizer()
    chat.chat_template = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% if not enable_thinking %}[no-think]"
        "{% endif %}{% endif %}"
    )
    text = build_prompt(chat, "Is it?", direct=True, options=["yes", "no"])
    # system turn, the worked example answering at once, the question with its options
    assert text.startswith("<system>Reply with 'Answer: X', X one of the options.")
    assert "eagle\nC) fish\nOptions: A, B, C<assistant>Answer: B<user>" in text
    assert text.endswith("<user>Is it?\nOptions: yes, no<assistant>[no-think]Answer:")
    text = build_prompt(chat, "Is it?")
    assert "then end with 'Answer: X'" in text
    assert "<assistant>Dogs and fish cannot fly; eagles can.\nAnswer: B<user>" in text
    assert text.endswith("<user>Is it?<assistant>[no-think]")


def test_readout_matches_unpadded_forward_with_left_and_right_padding(tokenizer, tiny_lm):
    texts = ["Q: 1?\nAnswer: ", "Q: a longer one?\nAnswer: "]
    opts = torch.tensor(option_token_ids(tokenizer, ["Y", "N", "M"]).ids)
    ref = torch.stack(
        [
            tiny_lm(**tokenizer(t, return_tensors="pt")).logits[0, -1, opts].softmax(-1)
            for t in texts
        ]
    )
    for side in ["left", "right"]:
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side=side)
        assert not enc.attention_mask.all()  # padding really happened
        u, logits = readout(tiny_lm, enc.input_ids, enc.attention_mask, opts)
        torch.testing.assert_close(u, ref, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(u, logits.softmax(-1))
        assert u.dtype == torch.float32


def test_readout_mixed_k_masks_absent_options(tokenizer, tiny_lm):
    enc = tokenizer(["Q: 1?\nAnswer: ", "Q: 2?\nAnswer: "], return_tensors="pt", padding=True)
    ids = tokenizer.convert_tokens_to_ids(["A", "B", "C", "D"])
    per_row = torch.tensor([ids, ids[:2] + [-1, -1]])
    u, _ = readout(tiny_lm, enc.input_ids, enc.attention_mask, per_row)
    full, _ = readout(tiny_lm, enc.input_ids, enc.attention_mask, torch.tensor(ids))
    assert u[1, 2:].abs().max() == 0
    # the K = 2 row is the renormalised restriction of the K = 4 readout
    torch.testing.assert_close(u[1, :2], full[1, :2] / full[1, :2].sum())
    torch.testing.assert_close(u[0], full[0])
    torch.testing.assert_close(u.sum(-1), torch.ones(2))


def test_readout_is_float32_for_a_bf16_model(tokenizer, tiny_lm):
    enc = tokenizer(["Q: 1?\nAnswer: "], return_tensors="pt")
    opts = torch.tensor(tokenizer.convert_tokens_to_ids(["Y", "N"]))
    u32, _ = readout(tiny_lm, enc.input_ids, enc.attention_mask, opts)
    u16, logits16 = readout(tiny_lm.to(torch.bfloat16), enc.input_ids, enc.attention_mask, opts)
    assert u16.dtype == logits16.dtype == torch.float32
    torch.testing.assert_close(u16, u32, atol=2e-2, rtol=0)


def test_option_logits_gather():
    logits = torch.arange(12.0).reshape(2, 6)
    out = option_logits(logits, torch.tensor([[5, 0], [1, -1]]))
    assert out.tolist() == [[5.0, 0.0], [7.0, float("-inf")]]

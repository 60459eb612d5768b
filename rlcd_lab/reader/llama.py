"""The compact decoding step of a plain ``LlamaForCausalLM``: transformers' own operations
in their order (RMS norm, rotary embedding, grouped-query SDPA attention, SwiGLU) on the
model's weights, one new token per row on a KV cache, optionally with the linear layers'
weights packed for oneDNN (:class:`PackedLinears`). :mod:`rlcd_lab.reader.decoding`'s
samplers switch to it after a first step that matched the model's own forward bit for bit.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import DynamicCache, LlamaForCausalLM, PreTrainedModel


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """transformers' ``LlamaRMSNorm``, operation for operation."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``softmax(q k^T scale, masked) v`` with the scores in float32: ``q (B, Hkv, G, d)``
    (one query's ``G`` heads per key/value head), ``k, v (B, Hkv, T, d)``, ``mask``
    ``(B, 1, 1, T)`` bool (True: attend) or None; returns ``(B, Hkv, G, d)`` in ``v``'s
    dtype. Two batched products, the form a single query is fastest in."""
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(s.softmax(-1).to(v.dtype), v)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaSteps:
    """Decoding steps of a plain ``LlamaForCausalLM`` with SDPA attention: transformers'
    operations in their order (``LlamaModel.forward`` with ``sdpa_attention_forward``,
    grouped-query heads packed as it packs them for one query) on the model's weights,
    without the module machinery, keys and values in preallocated buffers. Exact only as
    long as transformers computes the same way: ``_Steps`` checks the first step against
    the model's own forward pass and keeps to the latter unless the logits are equal.
    With ``packed`` matrices (:class:`PackedLinears`) the products are oneDNN's and one
    query's attention is :func:`_attention`: faster, rounded otherwise (the check then
    allows the packed rounding, :meth:`PackedLinears.agrees`)."""

    @staticmethod
    def supports(model: PreTrainedModel) -> bool:
        cfg = model.config
        rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
        return (
            type(model) is LlamaForCausalLM
            and getattr(cfg, "_attn_implementation", None) == "sdpa"
            and cfg.hidden_act == "silu"
            and not cfg.attention_bias
            and not cfg.mlp_bias
            and rope == "default"
            and getattr(cfg, "pretraining_tp", 1) == 1
            and not model.training
            and not any(  # hooks (accelerate's offloading, ...) would be bypassed
                m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook")
                for m in model.modules()
            )
            # a forward set on the instance (``--bf16``'s autocast wrapper, ...) is not the
            # class's, which these steps copy
            and "forward" not in vars(model)
        )

    def __init__(
        self,
        model: LlamaForCausalLM,
        cache: DynamicCache,
        length: int,
        packed: PackedLinears | None = None,
    ):
        inner = model.model
        w = (lambda p: p) if packed is None else packed.get
        self.linear = F.linear if packed is None else _packed_linear
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.norm = (inner.norm.weight, inner.norm.variance_epsilon)
        self.head = w(model.lm_head.weight)
        self.layers, self.keys, self.values = [], [], []
        for layer, cached in zip(inner.layers, cache.layers, strict=True):
            a, mlp = layer.self_attn, layer.mlp
            n1, n2 = layer.input_layernorm, layer.post_attention_layernorm
            self.layers.append(
                (
                    (n1.weight, n1.variance_epsilon),
                    w(a.q_proj.weight), w(a.k_proj.weight), w(a.v_proj.weight),
                    w(a.o_proj.weight), a.head_dim, a.scaling, a.num_key_value_groups,
                    (n2.weight, n2.variance_epsilon),
                    w(mlp.gate_proj.weight), w(mlp.up_proj.weight), w(mlp.down_proj.weight),
                )
            )  # fmt: skip
            b, h, t, d = cached.keys.shape
            keys = cached.keys.new_empty((b, h, length, d))
            values = cached.values.new_empty((b, h, length, d))
            keys[:, :, :t], values[:, :, :t] = cached.keys, cached.values
            self.keys.append(keys)
            self.values.append(values)
        self.t = t  # columns filled

    def select(self, rows: Tensor) -> None:
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]

    def __call__(self, tokens: Tensor, pos: Tensor, mask: Tensor | None) -> Tensor:
        """Logits ``(B, V)`` after ``tokens (B, 1)`` at positions ``pos (B, 1)``; ``mask``
        ``(B, >= t + 1)``: the 2D attention mask (None: no padding)."""
        x, lin = F.embedding(tokens, self.embed), self.linear
        b, t = x.shape[0], self.t
        am = None if mask is None else mask[:, None, None, : t + 1].bool()
        cos, sin = self.rotary(x, pos)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for i, (n1, wq, wk, wv, wo, hd, scale, groups, n2, wg, wu, wd) in enumerate(self.layers):
            h = _rms(x, *n1)
            q = lin(h, wq).view(b, 1, -1, hd).transpose(1, 2)
            k = lin(h, wk).view(b, 1, -1, hd).transpose(1, 2)
            v = lin(h, wv).view(b, 1, -1, hd).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            self.keys[i][:, :, t : t + 1] = k
            self.values[i][:, :, t : t + 1] = v
            o = self._attend(i, q, am, scale, groups)
            o = o.reshape(b, -1, 1, hd).transpose(1, 2).contiguous().reshape(b, 1, -1)
            x = x + lin(o.contiguous(), wo)
            h = _rms(x, *n2)
            x = x + lin(F.silu(lin(h, wg)) * lin(h, wu), wd)
        self.t = t + 1
        return lin(_rms(x, *self.norm), self.head)[:, -1]

    def _attend(self, i: int, q: Tensor, am: Tensor | None, scale: float, groups: int) -> Tensor:
        """One query's attention ``q (B, H, 1, d)`` over layer ``i``'s cached keys and
        values: ``F.scaled_dot_product_attention`` as transformers calls it (one query's
        ``groups`` heads side by side on their key/value head where it masks), or with
        packed weights :func:`_attention` (bfloat16 SDPA is slow on the CPU)."""
        keys, values = self.keys[i][:, :, : self.t + 1], self.values[i][:, :, : self.t + 1]
        if self.linear is _packed_linear or (groups > 1 and am is not None):
            q = q.reshape(q.shape[0], -1, groups, q.shape[-1])
        if self.linear is _packed_linear:
            return _attention(q, keys, values, am, scale)
        extra = {"enable_gqa": True} if groups > 1 and am is None else {}
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=am, scale=scale, **extra)


def _packed_linear(x: Tensor, packed: Tensor) -> Tensor:
    """``F.linear(x, W)`` with ``W`` packed by :class:`PackedLinears` (oneDNN's product)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


class PackedLinears:
    """Every ``nn.Linear`` matrix of ``model`` packed once for oneDNN's matrix product
    (``torch.ops.mkldnn._reorder_linear_weight``), for :class:`LlamaSteps`.

    Why: a decoding step multiplies a few rows (``B x d``) by every matrix (``d_out x d``):
    skinny products, which the CPU's default BLAS runs far below both the memory and the
    arithmetic floor (``benchmarks/floor.py``); oneDNN's products on weights laid out
    for them ahead of time come closer. The rounding differs from ``F.linear``'s (float32:
    about 1e-6 relative), so the logits are not ``generate``'s bits: used only by the
    copy that :class:`CopySampler` already draws from (off-policy by its rounding), never
    by the default sampler.

    ``rows``: the batch size the layout is tuned for (any batch size works)."""

    def __init__(self, model: torch.nn.Module, rows: int = 8):
        self.dtype = next(model.parameters()).dtype
        self.packed = {
            m.weight.data_ptr(): torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), rows)
            for m in model.modules()
            if isinstance(m, torch.nn.Linear) and m.bias is None
        }

    @staticmethod
    def available(model: torch.nn.Module) -> bool:
        """Whether the packed products apply: a CPU model in float32, or in bfloat16 on a
        CPU with native bfloat16 products (``avx512_bf16`` or AMX), oneDNN built in."""
        p = next(model.parameters())
        if p.device.type != "cpu" or not torch.backends.mkldnn.is_available():
            return False
        return p.dtype == torch.float32 or (
            p.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        )

    def get(self, weight: Tensor) -> Tensor:
        """The packed form of ``weight`` (a matrix of the packed model)."""
        return self.packed[weight.data_ptr()]

    def bind(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` (the one packed) with each packed ``nn.Linear`` multiplying through its
        packed matrix in every forward pass (its ``forward`` set on the instance): for a
        frozen model read without gradient many times (training's KL anchor, evaluation's
        merged copy), whose weights never change after. The products round as :meth:`agrees`
        allows. :func:`bound_packing` of ``model`` is then this packing (the decoding steps
        multiply with it too). Returns ``model``."""
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.weight.data_ptr() in self.packed:
                m.forward = functools.partial(_packed_linear, packed=self.get(m.weight))
        model.packed_linears = self
        return model

    def agrees(self, packed_logits: Tensor, logits: Tensor) -> bool:
        """Whether the packed steps' logits equal the model's own within this dtype's
        rounding: ``||a - b|| <= tol ||b||`` over the whole ``(B, V)`` block, ``tol`` 1e-5
        in float32, 2^-5 in bfloat16 (SmolLM2 measured: 7e-7 and 0.007; a structural
        difference, e.g. a transformers that computes otherwise, is of order 1)."""
        tol = 2.0**-5 if self.dtype == torch.bfloat16 else 1e-5
        a, b = packed_logits.float(), logits.float()
        return bool((a - b).norm() <= tol * b.norm())


def bound_packing(model: torch.nn.Module) -> PackedLinears | None:
    """The :class:`PackedLinears` that :meth:`PackedLinears.bind` set ``model``'s products to
    multiply through, or None."""
    return getattr(model, "packed_linears", None)

"""kerntune in Hugging Face transformers: an attention implementation and a fused, quantized Q/K/V projection.

    import kerntune.hf
    model = transformers.AutoModelForCausalLM.from_pretrained(..., dtype=torch.bfloat16).cuda()
    kerntune.hf.patch(model, weight_format="int4")      # kerntune attention + fused int4 Q/K/V (bias, RoPE)
    model.generate(input_ids, max_new_tokens=32)

register() adds "kerntune" to transformers' AttentionInterface (the attention function) and AttentionMaskInterface
(transformers' sdpa mask, which is None for a causal batch without padding). The attention function runs
kerntune's prefill kernel (kt.Runtime.attention, causal bottom-right aligned: a chunk of new tokens sees the whole
cache before it) and, for 1..16 new tokens over a cache, the decode kernel (kt.Runtime.attention_decode, split-KV,
GQA packing) on transformers' contiguous [B, H_kv, L, D] cache through a strided view (no copy).

patch(model, weight_format=...) also replaces, in every attention module with q_proj / k_proj / v_proj / o_proj
(Llama, Qwen2, Mistral and their relatives), the three projections and the RoPE by one kt.Runtime.qkv_proj call:
the weights [q; k; v] packed once in `weight_format` (kt.quantize: "int4", "nf4", "int8", "mxfp4", "nvfp4", their
K-blocked variants, "bf16" / "fp16" unquantized), the bias and RoPE (rotate-half, the config's rope_theta; the
"default" rope type only) in the GEMM's epilogue. The original nn.Linear weights of q_proj / k_proj / v_proj are
freed.

Supported: transformers >= 5 (AttentionInterface with the (module, query, key, value, attention_mask, ...) call);
fp16 / bf16 models on one CUDA GPU; head_dim 64 or 128; a batch without padding (the mask is None); full
attention (no sliding window, no dropout). Anything else raises ValueError naming it, rather than computing
something else.
"""

import types

import torch

from ._quant import quantize
from ._runtime import Runtime
from . import ops as _ops

NAME = "kerntune"


def register():
    """Registers "kerntune" with transformers' AttentionInterface and AttentionMaskInterface (idempotent). Returns
    the name, for model.set_attn_implementation(name) or from_pretrained(attn_implementation=name)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def _runtime(module, device):
    rt = getattr(module, "_kerntune_runtime", None)
    return rt if rt is not None and not rt.closed else _ops.runtime_for(device)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      is_causal=None, **kwargs):
    """transformers' attention-interface function.

    Args:
        query: [B, H_q, S_q, D]; key, value: [B, H_kv, L, D] (the cache after this step's update), fp16 / bf16 CUDA,
            each last dimension contiguous.
        attention_mask: must be None (transformers gives None for a causal batch without padding).
        scaling: softmax scale (None: 1 / sqrt(D)).
    Returns:
        (o [B, S_q, H_q, D] contiguous, None).
    Raises:
        ValueError: a mask (padding), a sliding window, dropout > 0, or output_attentions.
    """
    if attention_mask is not None:
        raise ValueError("kerntune attention: got an attention mask (padding or a custom pattern); kerntune supports "
                         "causal batches without padding (transformers then passes no mask)")
    if sliding_window is not None:
        raise ValueError(f"kerntune attention: sliding_window={sliding_window} is not supported (full attention only)")
    if dropout:
        raise ValueError(f"kerntune attention: dropout={dropout} is not supported (inference only)")
    if kwargs.get("output_attentions"):
        raise ValueError("kerntune attention: output_attentions=True is not supported (no attention weights)")
    causal = getattr(module, "is_causal", True) if is_causal is None else bool(is_causal)
    rt = _runtime(module, query.device)
    q = query.transpose(1, 2)  # [B, S_q, H_q, D] views: the strides the kernels take
    k = key.transpose(1, 2)
    v = value.transpose(1, 2)
    B, Sq = q.shape[0], q.shape[1]
    L = k.shape[1]
    if Sq <= 16 and L > Sq:  # new tokens over a cache: the decode kernel, every sequence L long
        lens = torch.full((B,), L, dtype=torch.int32, device=q.device)
        o = rt.attention_decode(q, k, v, lens, None, causal=causal, softmax_scale=scaling, max_seqlen_k=L)
    else:
        o = rt.attention(q, k, v, causal=causal, scale=scaling)
    return o, None


def _rope_theta(config):
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"kerntune.hf: rope type {rope_type!r} is not supported by the fused projection (only the "
                         f"default rotate-half RoPE)")
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise ValueError("kerntune.hf: the config has no rope_theta")
    return float(theta)


def _fused_qkv_forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None,
                       **kwargs):
    """The attention module's forward with Q/K/V, bias and RoPE in one kerntune kernel."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    B, S = hidden_states.shape[0], hidden_states.shape[1]
    positions = kwargs.get("position_ids")
    if positions is None:
        raise ValueError("kerntune.hf: the fused projection needs position_ids (RoPE positions)")
    positions = positions.to(torch.int32).expand(B, S).contiguous()
    rt = _runtime(self, hidden_states.device)
    q, k, v = rt.qkv_proj(hidden_states, self._kerntune_weight, self._kerntune_bias, positions,
                          num_heads=self._kerntune_heads[0], num_kv_heads=self._kerntune_heads[1],
                          head_dim=self.head_dim, rope_theta=self._kerntune_theta)
    query_states, key_states, value_states = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if past_key_values is not None:
        key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, attention_forward)
    out, weights = interface(self, query_states, key_states, value_states, attention_mask,
                             dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
                             sliding_window=getattr(self, "sliding_window", None), **kwargs)
    out = out.reshape(B, S, -1).contiguous()
    return self.o_proj(out), weights


def fuse_qkv(attn, weight_format, runtime=None):
    """Replaces attn's q_proj / k_proj / v_proj and RoPE by one kerntune qkv_proj kernel with the weights
    [q; k; v] packed in `weight_format` (kt.quantize). Returns the PackedWeight [N, K], N = (H_q + 2 H_kv) * D."""
    cfg = attn.config
    hq = cfg.num_attention_heads
    hkv = getattr(cfg, "num_key_value_heads", None) or hq
    projs = (attn.q_proj, attn.k_proj, attn.v_proj)
    w = torch.cat([p.weight.detach() for p in projs], dim=0)
    dt = w.dtype
    if dt not in (torch.float16, torch.bfloat16):
        raise ValueError(f"kerntune.hf: the projections are {dt}; load the model in torch.float16 or torch.bfloat16")
    want = "bf16" if dt is torch.bfloat16 else "fp16"
    if weight_format in ("fp16", "bf16", "fp16_kb64", "bf16_kb64") and not weight_format.startswith(want):
        raise ValueError(f"kerntune.hf: weight_format {weight_format!r} does not match the model's {dt}")
    biases = [p.bias for p in projs]
    if any(b is None for b in biases) and not all(b is None for b in biases):
        raise ValueError("kerntune.hf: q_proj, k_proj and v_proj must all have a bias or none")
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases]).to(dt).contiguous()
    pw = quantize(w, weight_format)  # on w's device
    attn._kerntune_weight = pw  # not a parameter: kerntune's packed bytes
    attn._kerntune_bias = bias
    attn._kerntune_heads = (hq, hkv)
    attn._kerntune_theta = _rope_theta(cfg)
    attn._kerntune_runtime = runtime
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(attn, name, None)  # frees the unpacked weights
    attn.forward = types.MethodType(_fused_qkv_forward, attn)
    return pw


def patch(model, weight_format=None, attention=True, runtime=None):
    """Puts kerntune into a transformers model in place.

    Args:
        model: a transformers PreTrainedModel on one CUDA GPU, fp16 / bf16.
        weight_format: None (keep the model's projections) or a kt.quantize format: every attention module with
            q_proj / k_proj / v_proj / o_proj gets the fused projection (fuse_qkv).
        attention: True: the model's attention implementation becomes "kerntune" (register()).
        runtime: a kt.Runtime (e.g. with a tuning database) for these kernels; None: kerntune.ops' runtime of the
            model's device ($KERNTUNE_DB, else the built-in defaults).
    Returns:
        The number of attention modules given the fused projection.
    Raises:
        ValueError: a model or module kerntune cannot serve (dtype, rope type, mixed biases, format).
    """
    if runtime is not None and not isinstance(runtime, Runtime):
        raise TypeError(f"runtime must be a kt.Runtime, got {type(runtime).__name__}")
    fused = 0
    if weight_format is not None:
        for module in model.modules():
            if all(isinstance(getattr(module, n, None), torch.nn.Linear) for n in ("q_proj", "k_proj", "v_proj",
                                                                                      "o_proj")) \
                    and hasattr(module, "layer_idx") and hasattr(module, "config"):
                fuse_qkv(module, weight_format, runtime)
                fused += 1
        if fused == 0:
            raise ValueError("kerntune.hf.patch: no attention module with q_proj / k_proj / v_proj / o_proj found")
    if attention:
        register()
        if runtime is not None:
            for module in model.modules():
                if hasattr(module, "layer_idx") and hasattr(module, "config"):
                    module._kerntune_runtime = runtime
        model.set_attn_implementation(NAME)
    return fused


__all__ = ["register", "attention_forward", "fuse_qkv", "patch", "NAME"]

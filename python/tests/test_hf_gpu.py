"""GPU test of kerntune.hf (pytest; needs a CUDA GPU, torch, transformers >= 5 and a built libkerntune.so):

    KERNTUNE_LIB=build-gpu/libkerntune.so python -m pytest -q python/tests/test_hf_gpu.py

A 2-layer Qwen2 model with Qwen2.5-7B's attention geometry (random weights, examples/hf_qwen2) runs a 64-token prompt
and 32 greedy decode steps through generate() with kerntune attention (the prefill and the decode kernels) and the
fused int4 / nf4 Q/K/V projection, against the same model on transformers' sdpa path with the dequantized Q/K/V
weights. Both are measured against that model in float32, teacher-forced along each path's own tokens: kerntune's
largest relative L2 logit error within 2.5x the bf16 sdpa path's own (what bf16 arithmetic explains) and below the
quantization's own effect on the logits (the float32 model before quantization against the dequantized one), and its greedy
token the float32 argmax wherever the float32 top-2 margin exceeds twice the sdpa path's largest logit error. Prints
the time per decode step of both.
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "hf_qwen2"))


@pytest.mark.parametrize("fmt", ["int4", "nf4"])
def test_generate_matches_sdpa_with_dequantized_weights(fmt):
    import hf_qwen2
    ref, ktm, ref32, orig32 = hf_qwen2.build_models(fmt)
    # kerntune's modules: attention implementation and the fused projection are in place.
    assert ktm.config._attn_implementation == "kerntune"
    assert all(layer.self_attn.q_proj is None for layer in ktm.model.layers)
    g = torch.Generator(device="cuda").manual_seed(3)
    input_ids = torch.randint(0, ref.config.vocab_size, (1, 64), device="cuda", generator=g)
    c = hf_qwen2.compare(ref, ktm, ref32, orig32, input_ids, 32)
    print(f"{fmt}: {c}")
    del ref32, orig32
    # bf16 arithmetic: kerntune's kernels (fused Q/K/V + RoPE epilogue, prefill, split-KV decode) measured 1.8-2.0x
    # the sdpa path's error here; and far below what the format's quantization itself does to the logits.
    assert c["max_rel_err"] <= 2.5 * c["sdpa_max_rel_err"], c
    assert c["max_rel_err"] <= c["quant_rel_err"], c
    assert not c["confident_mismatches"], c
    t_ref = hf_qwen2.decode_step_ms(ref, input_ids, 32, reps=1)
    t_kt = hf_qwen2.decode_step_ms(ktm, input_ids, 32, reps=1)
    print(f"{fmt}: decode step {t_ref:.3f} ms (sdpa, dequantized bf16 weights) vs {t_kt:.3f} ms (kerntune)")


def test_padding_mask_is_refused():
    import hf_qwen2
    import kerntune.hf
    _, ktm, _, _ = hf_qwen2.build_models("int4")
    ids = torch.randint(0, ktm.config.vocab_size, (2, 16), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding in the second sequence
    with pytest.raises(ValueError, match="attention mask"):
        with torch.no_grad():
            ktm(input_ids=ids, attention_mask=mask)
    assert kerntune.hf.NAME == ktm.config._attn_implementation

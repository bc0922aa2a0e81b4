"""A Qwen2 model with Qwen2.5-7B's attention geometry in Hugging Face transformers, through kerntune.

Builds a 2-layer Qwen2ForCausalLM from a config (hidden 3584, 28 query heads, 4 KV heads, head_dim 128, QKV bias;
random weights, nothing downloaded), patches a copy with kerntune.hf.patch(model, weight_format=FMT) (kerntune
attention for prefill and decode, and the fused quantized Q/K/V projection with bias and RoPE), and runs
generate() (a prompt, then greedy decode steps) on both. The reference is the same model on transformers' sdpa
path with its Q/K/V weights replaced by the dequantized packed weight (pw.dequantize()), so the comparison
measures the kernels, not the quantization. Each path's logits are measured against the same model in float32,
teacher-forced along that path's own tokens: kerntune's error must stay within 2.5x the bf16 sdpa path's own and below
the quantization's own effect on the logits, and
its greedy token must be the float32 argmax wherever the float32 top-2 margin exceeds twice the sdpa path's largest
logit error. Prints per format those errors, the tokens that agree with float32, and the time per decode step of
each path.

    python3 examples/hf_qwen2/hf_qwen2.py --formats int4 nf4 --prompt 64 --new-tokens 32

Requirements: a CUDA GPU, torch, transformers >= 5 and the kerntune Python package.
"""

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import kerntune as kt  # noqa: E402
import kerntune.hf  # noqa: E402

def qwen2_config(layers=2, vocab=8192):
    """Qwen2.5-7B's attention geometry and MLP width, fewer layers and a smaller vocabulary."""
    from transformers import Qwen2Config
    return Qwen2Config(hidden_size=3584, intermediate_size=18944, num_hidden_layers=layers, num_attention_heads=28,
                       num_key_value_heads=4, head_dim=128, vocab_size=vocab, max_position_embeddings=4096,
                       tie_word_embeddings=False)


def build_models(fmt, dtype=torch.bfloat16, seed=0, runtime=None):
    """(reference, kerntune, float32 reference, float32 original): the reference on sdpa with the dequantized Q/K/V
    weights, the copy patched by kerntune.hf.patch(weight_format=fmt), the reference in float32 (exact dequantized
    weights), and the model before quantization in float32 (for the quantization's own effect on the logits)."""
    from transformers import Qwen2ForCausalLM
    torch.manual_seed(seed)
    with torch.device("cuda"):
        ref = Qwen2ForCausalLM(qwen2_config()).to(dtype).eval()
    ref.set_attn_implementation("sdpa")
    ref.generation_config.eos_token_id = None
    ref.generation_config.pad_token_id = 0
    orig32 = copy.deepcopy(ref).float()
    ktm = copy.deepcopy(ref)
    n_fused = kerntune.hf.patch(ktm, weight_format=fmt, runtime=runtime)
    assert n_fused == len(ref.model.layers)
    ref32 = copy.deepcopy(ref).float()
    with torch.no_grad():
        # Q/K/V weights: the dequantized values (float64), rounded to the model's dtype for the bf16 reference (as
        # the kernel rounds them for its MMA) and to float32 for the float32 one.
        for lr, l32, lk in zip(ref.model.layers, ref32.model.layers, ktm.model.layers):
            w = lk.self_attn._kerntune_weight.dequantize()  # float64 [N, K]
            rows = [lr.self_attn.q_proj.out_features, lr.self_attn.k_proj.out_features,
                    lr.self_attn.v_proj.out_features]
            for a, dt in ((lr.self_attn, dtype), (l32.self_attn, torch.float32)):
                for proj, part in zip((a.q_proj, a.k_proj, a.v_proj), torch.split(w, rows, dim=0)):
                    proj.weight.copy_(part.to(dt))
    return ref, ktm, ref32, orig32


def generate(model, input_ids, new_tokens):
    out = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, input_ids.shape[1]:], torch.stack([lg[0].float() for lg in out.logits])


def forced_logits(ref32, input_ids, tokens):
    """The float32 reference's logits for each generated step, teacher-forced along `tokens` (one forward pass)."""
    seq = torch.cat([input_ids[0], tokens[:-1]]).unsqueeze(0)
    return ref32(seq).logits[0, input_ids.shape[1] - 1:].float()


def compare(ref, ktm, ref32, orig32, input_ids, new_tokens):
    """Runs generate() on the bf16 sdpa reference and on kerntune, and measures each step's logits against the
    float32 reference forced along that path's own tokens (so a divergence of the greedy paths costs nothing).

    Returns a dict: the largest relative L2 error of a step's logits for kerntune and for the sdpa path (the error
    bf16 arithmetic alone explains), and the steps where kerntune's token differs from the float32 argmax although
    the float32 top-2 margin exceeds twice the sdpa path's largest absolute logit error; and the quantization's own
    effect (the float32 model before quantization against the float32 dequantized one, along kerntune's tokens)."""
    with torch.no_grad():
        kt_tokens, kt_logits = generate(ktm, input_ids, new_tokens)
        sd_tokens, sd_logits = generate(ref, input_ids, new_tokens)
        f_kt, f_sd = forced_logits(ref32, input_ids, kt_tokens), forced_logits(ref32, input_ids, sd_tokens)
        f_orig = forced_logits(orig32, input_ids, kt_tokens)
    assert not torch.isnan(kt_logits).any(), "NaN in kerntune's logits"

    def rel(a, b):
        return ((a - b).norm(dim=-1) / b.norm(dim=-1)).max().item()

    bound = 2 * (sd_logits - f_sd).abs().max().item()
    top2 = torch.topk(f_kt, 2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    wrong = (kt_tokens != f_kt.argmax(dim=-1)) & (margin > bound)
    return {"steps": new_tokens, "max_rel_err": rel(kt_logits, f_kt), "sdpa_max_rel_err": rel(sd_logits, f_sd),
            "quant_rel_err": rel(f_orig, f_kt), "bound": bound, "confident_mismatches": wrong.nonzero().flatten().tolist(),
            "tokens_as_fp32": int((kt_tokens == f_kt.argmax(dim=-1)).sum())}


def decode_step_ms(model, input_ids, new_tokens, reps=3):
    """Time of one decode step: (generate(new_tokens + 1) - generate(1)) / new_tokens, the best of `reps`."""
    def run(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    run(new_tokens + 1)  # warm-up: every problem resolved, cubins loaded
    best = min(run(new_tokens + 1) - run(1) for _ in range(reps))
    return best / new_tokens * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--formats", nargs="+", default=["int4", "nf4"])
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    ap.add_argument("--new-tokens", type=int, default=32, help="greedy decode steps")
    ap.add_argument("--db", default=os.environ.get("KERNTUNE_DB"), help="tuning database (default $KERNTUNE_DB)")
    a = ap.parse_args()
    import transformers
    rt = kt.Runtime(a.db or None)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"kerntune {kt.__version__}, db {a.db or '(none: built-in defaults)'}")
    g = torch.Generator(device="cuda").manual_seed(1)
    input_ids = torch.randint(0, qwen2_config().vocab_size, (1, a.prompt), device="cuda", generator=g)
    print("logits: relative L2 error against the float32 model (dequantized weights) forced along each path's tokens")
    print("(quant_err: the float32 model before quantization against the dequantized one, the format's own effect)")
    print(f"{'format':8} {'steps':>5} {'tok=fp32':>8} {'kerntune_err':>12} {'sdpa_err':>9} {'quant_err':>9} "
          f"{'sdpa_ms/step':>12} {'kerntune_ms/step':>16} {'speedup':>7}")
    for fmt in a.formats:
        ref, ktm, ref32, orig32 = build_models(fmt, runtime=rt)
        c = compare(ref, ktm, ref32, orig32, input_ids, a.new_tokens)
        del ref32, orig32
        t_ref, t_kt = decode_step_ms(ref, input_ids, a.new_tokens), decode_step_ms(ktm, input_ids, a.new_tokens)
        print(f"{fmt:8} {c['steps']:5d} {c['tokens_as_fp32']:8d} {c['max_rel_err']:12.2e} {c['sdpa_max_rel_err']:9.2e} {c['quant_rel_err']:9.2e} "
              f"{t_ref:12.3f} {t_kt:16.3f} {t_ref / t_kt:6.2f}x")
        del ref, ktm
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

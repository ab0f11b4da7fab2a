"""PyTorch eager baseline for experiments/bench_model.lua (run on the GPU machine only).

Not part of dpprof: the issue asks for dpprof's step time to be compared with PyTorch eager on
the same shapes, side by side in one session. This script times Hugging Face's GPT-2 (SDPA
attention) or Llama with AdamW, f32 or bf16 autocast (f32 master weights, as dpprof's bf16), and
prints one JSON line per config with the same keys bench_model.lua writes.

    python3 tests/baselines/torch_eager.py --config small|gpt2|large [--arch gpt|llama]
        [--dtype f32|bf16] [--iters 5] [--warmup 2]
"""
import argparse
import json
import time

import torch

CONFIGS = {
    "gpt2": dict(vocab=50257, hidden=768, layers=12, heads=12, seq_len=1024, batch=8),
    "large": dict(vocab=32000, hidden=2048, layers=20, heads=16, seq_len=16384, batch=1),
    "small": dict(vocab=8192, hidden=256, layers=4, heads=4, seq_len=256, batch=4),
}


def build(arch, c):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    if arch == "gpt":
        cfg = GPT2Config(vocab_size=c["vocab"], n_embd=c["hidden"], n_layer=c["layers"], n_head=c["heads"],
                         n_positions=c["seq_len"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         tie_word_embeddings=True)
        cfg._attn_implementation = "sdpa"
        return GPT2LMHeadModel(cfg)
    ffn = ((int(c["hidden"] * 8 / 3) + 63) // 64) * 64
    cfg = LlamaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=ffn,
                      num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                      num_key_value_heads=c["heads"], max_position_embeddings=c["seq_len"],
                      tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="gpt2", choices=sorted(CONFIGS))
    ap.add_argument("--arch", default="gpt", choices=["gpt", "llama"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    c = CONFIGS[a.config]
    torch.backends.cuda.matmul.allow_tf32 = False  # dpprof's f32 GEMMs are strict f32 too
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    model = build(a.arch, c).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq_len"] + 1), generator=g).to(dev)
    x, y = ids[:, :-1], ids[:, 1:]
    ev = lambda: torch.cuda.Event(enable_timing=True)
    times = {"forward": [], "backward": [], "optimizer": [], "step": []}
    torch.cuda.reset_peak_memory_stats()
    for it in range(a.warmup + a.iters):
        e0, e1, e2, e3 = ev(), ev(), ev(), ev()
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = model(input_ids=x).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        e1.record()
        loss.backward()
        e2.record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        e3.record()
        torch.cuda.synchronize()
        if it >= a.warmup:
            times["forward"].append(e0.elapsed_time(e1))
            times["backward"].append(e1.elapsed_time(e2))
            times["optimizer"].append(e2.elapsed_time(e3))
            times["step"].append(e0.elapsed_time(e3))
        del logits, loss
    med = lambda v: sorted(v)[len(v) // 2]
    tokens = c["batch"] * c["seq_len"]
    out = {"framework": "pytorch-eager", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "config": a.config, "arch": a.arch, "dtype": a.dtype, **c,
           "forward_ms": med(times["forward"]), "backward_ms": med(times["backward"]),
           "optimizer_ms": med(times["optimizer"]), "step_ms": med(times["step"]),
           "tokens_per_s": tokens / (med(times["step"]) / 1e3),
           "peak_memory_mb": torch.cuda.max_memory_allocated() / 2**20, "time": time.time()}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

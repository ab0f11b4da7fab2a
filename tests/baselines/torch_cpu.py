"""PyTorch eager and Opacus on the CPU: the baseline of experiments/bench_cpu.lua.

Not part of dpprof (nothing in the product, its tests or CI runs Python). It times one training
step of Hugging Face's GPT-2 (untied head) or Llama on the shape bench_cpu.lua runs, f32, AdamW
(lr 1e-4, weight decay 0.01), `--warmup` steps then `--iters` timed ones, in three modes:

  eager         plain PyTorch: forward, cross-entropy, backward, AdamW step
  opacus_hooks  Opacus GradSampleModule (per-sample gradients by hooks) + DPOptimizer
  opacus_ghost  Opacus ghost clipping (GradSampleModuleFastGradientClipping, two backward passes)

DP settings match dpprof's bench: max_grad_norm 1, noise_multiplier 1, expected batch = batch,
loss_reduction "mean" (per-sample loss = mean over the sample's tokens). GPT-2's Conv1D layers are
replaced by the equivalent nn.Linear (weights transposed), so Opacus uses its Linear samplers (ghost
norms included) rather than its functorch fallback, and position ids are passed per sample (B x T),
as Opacus needs for the position embedding. Attention is SDPA (PyTorch's CPU flash kernel).

Prints one JSON line per (arch, mode, threads):
  {"framework", "torch", "opacus", "arch", "mode", "threads", "step_ms" (median), "min_ms",
   "steps_ms": [...], shape keys}

    pip install torch transformers opacus   (the CPU wheel: --index-url https://download.pytorch.org/whl/cpu)
    python3 tests/baselines/torch_cpu.py [--arch gpt,llama] [--mode eager,opacus_hooks,opacus_ghost]
        [--threads 1,2] [--iters 8] [--warmup 2]
"""
import argparse
import json
import statistics
import time
import warnings

import torch

# Opacus's backward hooks on modules whose inputs need no gradient: harmless, and once per step
warnings.filterwarnings("ignore", message="Full backward hook is firing")

SHAPE = dict(vocab=8192, hidden=256, layers=4, heads=4, seq_len=256, batch=4, ffn=704)


def linear_from_conv1d(conv):
    """transformers' Conv1D (weight in x out) as the nn.Linear that computes the same."""
    lin = torch.nn.Linear(conv.weight.shape[0], conv.weight.shape[1], bias=conv.bias is not None)
    with torch.no_grad():
        lin.weight.copy_(conv.weight.t())
        if conv.bias is not None:
            lin.bias.copy_(conv.bias)
    return lin


def build(arch):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    c = SHAPE
    if arch == "gpt":
        from transformers.pytorch_utils import Conv1D
        cfg = GPT2Config(vocab_size=c["vocab"], n_embd=c["hidden"], n_layer=c["layers"], n_head=c["heads"],
                         n_positions=c["seq_len"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
        cfg._attn_implementation = "sdpa"
        model = GPT2LMHeadModel(cfg)
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, Conv1D):
                    setattr(parent, name, linear_from_conv1d(child))
        return model
    cfg = LlamaConfig(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["ffn"],
                      num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                      num_key_value_heads=c["heads"], max_position_embeddings=c["seq_len"],
                      tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def make_step(arch, mode):
    c = SHAPE
    torch.manual_seed(0)
    model = build(arch).train()
    B, T, V = c["batch"], c["seq_len"], c["vocab"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, T + 1), generator=g)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    pos = torch.arange(T).unsqueeze(0).expand(B, T).contiguous()
    adamw = dict(lr=1e-4, weight_decay=0.01)

    def logits_of(m):
        return m(input_ids=x, position_ids=pos).logits

    if mode == "eager":
        opt = torch.optim.AdamW(model.parameters(), **adamw)

        def step():
            loss = torch.nn.functional.cross_entropy(logits_of(model).reshape(-1, V), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    if mode == "opacus_hooks":
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
        gsm = GradSampleModule(model, loss_reduction="mean")
        opt = DPOptimizer(torch.optim.AdamW(gsm.parameters(), **adamw), noise_multiplier=1.0, max_grad_norm=1.0,
                          expected_batch_size=B, loss_reduction="mean")

        def step():
            # mean over tokens within a sample, then over samples: the per-sample loss is the mean
            # over its T tokens, as Opacus's "mean" reduction over B samples expects
            loss = torch.nn.functional.cross_entropy(logits_of(gsm).reshape(-1, V), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    if mode == "opacus_ghost":
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping
        gsm = GradSampleModuleFastGradientClipping(model, max_grad_norm=1.0, use_ghost_clipping=True,
                                                   loss_reduction="mean")
        opt = DPOptimizerFastGradientClipping(torch.optim.AdamW(gsm.parameters(), **adamw), noise_multiplier=1.0,
                                              max_grad_norm=1.0, expected_batch_size=B, loss_reduction="mean")
        crit = DPLossFastGradientClipping(gsm, opt, torch.nn.CrossEntropyLoss(reduction="mean"), loss_reduction="mean")

        def step():
            logits = logits_of(gsm)
            loss = crit(logits.reshape(-1, V), y.reshape(-1), shape=(B, T))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    raise SystemExit(f"unknown mode '{mode}' (valid: eager, opacus_hooks, opacus_ghost)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="gpt,llama")
    ap.add_argument("--mode", default="eager,opacus_hooks,opacus_ghost")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    try:
        import opacus
        opacus_version = opacus.__version__
    except ImportError:
        opacus_version = None
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        for arch in a.arch.split(","):
            for mode in a.mode.split(","):
                step = make_step(arch, mode)
                times = []
                for it in range(a.warmup + a.iters):
                    t0 = time.perf_counter()
                    step()
                    t1 = time.perf_counter()
                    if it >= a.warmup:
                        times.append((t1 - t0) * 1e3)
                out = {"framework": "pytorch-eager" if mode == "eager" else "opacus", "torch": torch.__version__,
                       "opacus": opacus_version, "arch": arch, "mode": mode, "threads": threads,
                       "step_ms": statistics.median(times), "min_ms": min(times), "steps_ms": times, **SHAPE,
                       "time": time.time()}
                print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch DDP reference GPT for tools/bench_gpt_vs_pytorch.py (issue 16).

A GPT-2 style language model written the ordinary way (nanoGPT-like) and trained with
PyTorch DistributedDataParallel (gloo, CPU, eager) on ringtrain's token files (HDF5, dataset
`tokens`, attribute `vocab_size`; e.g. tools/prepare-shakespeare's train.h5 and val.h5).

Run it with a Python interpreter that has torch, h5py and numpy (tools/setup-torch-venv):

    python tools/torch_gpt_train.py --np 2 --train data/shakespeare/train.h5 \\
        --val data/shakespeare/val.h5 --max-steps 50 --json

Without the internal worker environment it acts as a launcher, as tools/torch_ddp_train.py
does: it starts --np copies of itself as plain subprocesses (env RANK, WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT), each pinned to its own core(s) with --threads torch
threads (default 1), waits for them and forwards rank 0's output. Exit status is non-zero if
any rank fails.

Model (defaults = examples/shakespeare/gpt.toml): token + learned position embedding,
--n-layer pre-LayerNorm blocks of causal self-attention (one fused qkv Linear,
F.scaled_dot_product_attention(is_causal=True)) and a 4x MLP with GELU(approximate='tanh'),
a final LayerNorm, lm_head tied to the token embedding; Linear layers with biases; no dropout.
GPT-2 initialisation: Linear and Embedding weights N(0, 0.02), the two residual output
projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1/0.

Training: AdamW (betas 0.9/0.95, eps 1e-8, decay 0.1) with weight decay only on 2-D weights
(Linear weights and the tied token embedding; not biases, LayerNorm or the position
embedding); learning rate 1e-3 as ringtrain's LrSchedule (optim.schedule = "cosine"): linear
warm-up lr*(s+1)/warmup for step s < warmup (100), then cosine from lr to min_lr (lr/10) over
the remaining max_steps - warmup steps; gradient norm clipped to 1.0; fp32, eager.

Data: mirrors ringtrain's TokenLoader. Window w is tokens [w*T, w*T + T + 1) (T = block size),
(n - 1) // T windows. Training: the global batch at step i of an epoch is slice i of a
permutation of all windows seeded by (seed, epoch) -- the same xoshiro256** / splitmix64
stream and Fisher-Yates shuffle as ringtrain's DistributedSampler (Rng(stream_key(seed,
"sampler", epoch))) -- and rank r takes the r-th contiguous 1/W of it; the epoch's tail that
does not fill a global batch is dropped. So with the same seed both frameworks see the same
windows at every step. Evaluation: each rank takes its even contiguous shard of the val
windows in index order (the last batch partial); --eval-batches limits the batches per rank.

Reported (--json: one JSON line at the end, rank 0):
  tokens_per_second  global tokens per step / median step time over the steps after the
                     first --timing-skip ones (evaluation excluded); a step's time is the
                     maximum over ranks
  val_loss           mean cross-entropy (nats/token) over the evaluated val tokens, after
                     the last step
  peak_rss_mb        max over ranks of getrusage(RUSAGE_SELF).ru_maxrss (per_rank_peak_rss_mb
                     lists them)
  parameters         every parameter once (the tied embedding counted once)
  flops_per_token    training FLOPs per token, the nanoGPT / PaLM convention:
                     6 * N + 12 * n_layer * block_size * n_embd, N = parameters without the
                     position embedding (a lookup, no matmul); the attention term counts the
                     full T x T score and value matmuls (no halving for the causal mask).
                     MFU = tokens_per_second * flops_per_token / peak FLOP/s.
"""

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time

from torch_launch import WORKER_ENV, launch, start_worker

SAMPLER_STREAM = 0x73616D706C6572  # "sampler": ringtrain's kSamplerStream (include/ringtrain/data/sampler.hpp)
MASK64 = (1 << 64) - 1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="HDF5 token file (dataset tokens, attribute vocab_size)")
    p.add_argument("--val", default=None, help="HDF5 token file for the validation loss (none: no val_loss)")
    p.add_argument("--np", dest="world_size", type=int, default=2, help="number of ranks (processes)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--max-steps", type=int, default=2000, help="optimizer steps (also the cosine horizon)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate the val loss every this many steps (0: only after the last step)")
    p.add_argument("--eval-batches", type=int, default=0,
                   help="val batches per rank per evaluation (0: the whole val set, as ringtrain)")
    p.add_argument("--eval-batch-size", type=int, default=64, help="per-rank windows per val batch")
    p.add_argument("--batch", type=int, default=16, help="per-rank batch (windows)")
    p.add_argument("--block", type=int, default=128, help="block size (tokens per window)")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=None, help="cosine floor, reached at the last step (default lr/10)")
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decoupled decay of 2-D weights")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: none)")
    p.add_argument("--seed", type=int, default=1, help="initialisation and ringtrain-compatible sampler seed")
    p.add_argument("--timing-skip", type=int, default=None,
                   help="first steps left out of the step-time median (default min(5, max_steps // 5))")
    p.add_argument("--log-every", type=int, default=10, help="rank 0 prints a progress line to stderr")
    p.add_argument("--json", action="store_true", help="print one JSON result line at the end (rank 0)")
    p.add_argument("--bind", choices=("core", "none"), default="core",
                   help="pin rank r to cores [r*T, (r+1)*T) like mpirun --bind-to core (default core; "
                        "skipped if there are not enough cores)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="launcher: kill all ranks after this many seconds")
    args = p.parse_args(argv)
    for name in ("world_size", "threads", "max_steps", "batch", "block", "n_layer", "n_head", "n_embd",
                 "eval_batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("eval_every", "eval_batches", "warmup"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    if args.min_lr is None:
        args.min_lr = args.lr / 10
    if not 0.0 <= args.min_lr <= args.lr:
        p.error("--min-lr must be in [0, lr]")
    if args.timing_skip is None:
        args.timing_skip = min(5, args.max_steps // 5)
    return args


# --------------------------------------------------------------------------------------------
# launcher (as tools/torch_ddp_train.py)
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# ringtrain's sampler (include/ringtrain/core/random.hpp, src/data/sampler.cpp), bit for bit
# --------------------------------------------------------------------------------------------

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def stream_key(seed, a=0, b=0, c=0):
    return splitmix64(splitmix64(splitmix64(splitmix64(seed & MASK64) ^ a) ^ b) ^ c)


class Rng:
    """xoshiro256** seeded through splitmix64, as ringtrain::Rng."""

    def __init__(self, key):
        self.s = []
        for _ in range(4):
            key = (key + 0x9E3779B97F4A7C15) & MASK64
            self.s.append(splitmix64(key))

    def next(self):
        s0, s1, s2, s3 = self.s
        x = (s1 * 5) & MASK64
        result = ((((x << 7) | (x >> 57)) & MASK64) * 9) & MASK64
        t = (s1 << 17) & MASK64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 45) | (s3 >> 19)) & MASK64
        self.s = [s0, s1, s2, s3]
        return result

    def below(self, n):
        """Uniform in [0, n), Lemire's method with rejection."""
        m = self.next() * n
        low = m & MASK64
        if low < n:
            t = ((1 << 64) - n) % n
            while low < t:
                m = self.next() * n
                low = m & MASK64
        return m >> 64


def sampler_permutation(num_windows, seed, epoch):
    """ringtrain DistributedSampler::set_epoch: Fisher-Yates over iota(num_windows)."""
    perm = list(range(num_windows))
    rng = Rng(stream_key(seed, SAMPLER_STREAM, epoch))
    for i in range(num_windows - 1, 0, -1):
        j = rng.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def even_shard(n, world, rank):
    base, extra = divmod(n, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def lr_at(args, step):
    """ringtrain LrSchedule::at for optim.schedule = "cosine"."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = step - args.warmup
    horizon = max(1, args.max_steps - args.warmup - 1)
    progress = min(1.0, t / horizon)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * progress))


# --------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------

def build_model(torch, args, vocab_size):
    nn = torch.nn
    F = torch.nn.functional

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_head = args.n_head
            self.c_attn = nn.Linear(args.n_embd, 3 * args.n_embd)
            self.c_proj = nn.Linear(args.n_embd, args.n_embd)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
            k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
            v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(args.n_embd, 4 * args.n_embd)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * args.n_embd, args.n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(args.n_embd)
            self.attn = SelfAttention()
            self.ln_2 = nn.LayerNorm(args.n_embd)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, args.n_embd)
            self.wpe = nn.Embedding(args.block, args.n_embd)
            self.h = nn.ModuleList(Block() for _ in range(args.n_layer))
            self.ln_f = nn.LayerNorm(args.n_embd)
            self.lm_head = nn.Linear(args.n_embd, vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            self.apply(self._init)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * args.n_layer))

        @staticmethod
        def _init(m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets):
            t = idx.shape[1]
            pos = torch.arange(t, dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    return GPT()


def optimizer_groups(model):
    """Decay 2-D weights (Linear weights, the tied token embedding); not biases, LayerNorm or
    the position embedding."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # the tied weight appears once (as wte.weight)
        if p.dim() == 2 and name != "wpe.weight":
            decay.append(p)
        else:
            no_decay.append(p)
    return decay, no_decay


# --------------------------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------------------------

def load_tokens(path):
    import h5py
    import numpy as np
    try:
        with h5py.File(path, "r") as f:
            if "tokens" not in f:
                raise SystemExit(f"{path}: no 'tokens' dataset (write it with ringtrain data convert --text/--tokens)")
            d = f["tokens"]
            if d.ndim != 1 or d.dtype.kind != "u":
                raise SystemExit(f"{path}: tokens must be a 1-D unsigned integer dataset, got {d.dtype} {d.shape}")
            if "vocab_size" not in d.attrs:
                raise SystemExit(f"{path}: tokens has no vocab_size attribute")
            vocab = int(d.attrs["vocab_size"])
            tokens = np.asarray(d[...])
    except OSError as e:
        raise SystemExit(f"{path}: cannot read: {e}")
    if tokens.size and int(tokens.max()) >= vocab:
        raise SystemExit(f"{path}: token {int(tokens.max())} >= vocab_size {vocab}")
    return tokens, vocab


def windows_to_batch(torch, np, tokens, windows, block):
    """[n, block] int64 inputs and next-token targets of windows (tokens [w*T, w*T+T+1))."""
    idx = np.asarray(windows, dtype=np.int64)[:, None] * block + np.arange(block + 1, dtype=np.int64)[None, :]
    win = torch.from_numpy(tokens[idx].astype(np.int64))
    return win[:, :-1], win[:, 1:]


def worker(args):
    torch, dist, rank, world, cpus = start_worker(args)
    import resource

    import numpy as np

    def log(msg):
        if rank == 0:
            print(f"torch_gpt_train: {msg}", file=sys.stderr, flush=True)

    train_tokens, vocab = load_tokens(args.train)
    val_tokens = None
    if args.val:
        val_tokens, val_vocab = load_tokens(args.val)
        if val_vocab != vocab:
            raise SystemExit(f"{args.val}: vocab_size {val_vocab} differs from {args.train}'s {vocab}")
    t = args.block
    b = args.batch
    gb = b * world
    windows = (len(train_tokens) - 1) // t if len(train_tokens) > 0 else 0
    steps_per_epoch = windows // gb
    if steps_per_epoch == 0:
        raise SystemExit(f"{args.train}: {windows} windows of block + 1 = {t + 1} tokens are fewer than one "
                         f"global batch of {gb} (= world {world} x batch {b})")
    val_windows = (len(val_tokens) - 1) // t if val_tokens is not None and len(val_tokens) > 0 else 0
    if val_tokens is not None and val_windows == 0:
        raise SystemExit(f"{args.val}: fewer than block + 1 = {t + 1} tokens")

    torch.manual_seed(args.seed)
    model = build_model(torch, args, vocab)
    parameters = sum(p.numel() for p in model.parameters())
    flops_params = parameters - model.wpe.weight.numel()
    flops_per_token = 6 * flops_params + 12 * args.n_layer * t * args.n_embd
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    decay, no_decay = optimizer_groups(model)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr_at(args, 0), betas=(args.beta1, args.beta2), eps=args.eps)
    log(f"torch {torch.__version__}, {world} ranks x {args.threads} threads, {parameters} parameters, "
        f"vocab {vocab}, {windows} train windows ({steps_per_epoch} steps per epoch), {val_windows} val windows")

    def evaluate():
        model.eval()
        begin, end = even_shard(val_windows, world, rank)
        total = torch.zeros(2, dtype=torch.float64)  # summed loss, tokens
        with torch.no_grad():
            for i, first in enumerate(range(begin, end, args.eval_batch_size)):
                if args.eval_batches and i >= args.eval_batches:
                    break
                x, y = windows_to_batch(torch, np, val_tokens, range(first, min(first + args.eval_batch_size, end)), t)
                total[0] += model(x, y).item() * y.numel()
                total[1] += y.numel()
        dist.all_reduce(total)
        model.train()
        return total[0].item() / max(1.0, total[1].item()), int(total[1].item())

    ddp.train()
    perm, perm_epoch = None, -1
    step_seconds, losses, evals = [], [], []
    dist.barrier()
    t_start = time.perf_counter()
    for step in range(args.max_steps):
        t0 = time.perf_counter()
        epoch, i = divmod(step, steps_per_epoch)
        if epoch != perm_epoch:
            perm, perm_epoch = sampler_permutation(windows, args.seed, epoch), epoch
        mine = perm[i * gb + rank * b: i * gb + (rank + 1) * b]
        x, y = windows_to_batch(torch, np, train_tokens, mine, t)
        lr = lr_at(args, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = ddp(x, y)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), args.clip)
        opt.step()
        step_seconds.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if rank == 0 and args.log_every and (step + 1) % args.log_every == 0:
            log(f"step {step + 1}/{args.max_steps} loss {losses[-1]:.4f} lr {lr:.2e} "
                f"{gb * t / step_seconds[-1]:.0f} tokens/s")
        if val_tokens is not None and args.eval_every and (step + 1) % args.eval_every == 0 \
                and step + 1 < args.max_steps:
            vl, vt = evaluate()
            evals.append({"step": step + 1, "val_loss": vl, "val_tokens": vt})
            log(f"step {step + 1}: val_loss {evals[-1]['val_loss']:.4f}")
    dist.barrier()
    train_seconds = time.perf_counter() - t_start  # includes intermediate evaluations

    # step time of a step = the slowest rank's; final train loss = last step's, averaged over ranks
    st = torch.tensor(step_seconds, dtype=torch.float64)
    dist.all_reduce(st, op=dist.ReduceOp.MAX)
    last = torch.tensor([losses[-1]], dtype=torch.float64)
    dist.all_reduce(last)
    final_train_loss = last.item() / world
    val_loss, val_tokens_evaluated = None, 0
    if val_tokens is not None:
        val_loss, val_tokens_evaluated = evaluate()
        evals.append({"step": args.max_steps, "val_loss": val_loss, "val_tokens": val_tokens_evaluated})
    rss = torch.zeros(world, dtype=torch.float64)
    rss[rank] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    dist.all_reduce(rss)

    timed = st.tolist()[args.timing_skip:] or st.tolist()
    median_step = statistics.median(timed)
    result = {
        "framework": "pytorch",
        "model": "gpt",
        "torch_version": torch.__version__,
        "python": sys.executable,
        "world_size": world,
        "threads_per_rank": args.threads,
        "cpu_binding": "core" if cpus is not None else "none",
        "steps": args.max_steps,
        "per_rank_batch": b,
        "global_batch": gb,
        "block_size": t,
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "n_embd": args.n_embd,
        "vocab_size": vocab,
        "seed": args.seed,
        "optim": {"lr": args.lr, "min_lr": args.min_lr, "warmup_steps": args.warmup, "betas": [args.beta1, args.beta2],
                  "eps": args.eps, "weight_decay": args.weight_decay, "clip_grad_norm": args.clip},
        "tokens_per_step": gb * t,
        "timed_steps": len(timed),
        "median_step_ms": 1000.0 * median_step,
        "tokens_per_second": gb * t / median_step,
        "mean_tokens_per_second": gb * t * len(timed) / sum(timed),
        "train_seconds": train_seconds,
        "final_train_loss": final_train_loss,
        "val_loss": val_loss,
        "val_tokens_evaluated": val_tokens_evaluated,
        "evals": evals,
        "peak_rss_mb": max(rss.tolist()),
        "per_rank_peak_rss_mb": rss.tolist(),
        "parameters": parameters,
        "flops_parameters": flops_params,
        "flops_per_token": flops_per_token,
        "flops_convention": "6*N + 12*n_layer*block_size*n_embd, N = parameters without the position "
                            "embedding (nanoGPT/PaLM; causal attention not halved)",
        "achieved_gflops": gb * t / median_step * flops_per_token / 1e9,
    }
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{args.max_steps} steps: {result['tokens_per_second']:.0f} tokens/s (median step "
                  f"{result['median_step_ms']:.1f} ms), final train loss {final_train_loss:.4f}, val loss "
                  + (f"{val_loss:.4f}" if val_loss is not None else "-")
                  + f", peak RSS {result['peak_rss_mb']:.0f} MB/rank, {parameters} parameters, "
                  f"{flops_per_token / 1e6:.2f} MFLOP/token ({result['achieved_gflops']:.1f} GFLOP/s)", flush=True)
    sys.stderr.flush()
    # All work is done. Skip interpreter teardown, as tools/torch_ddp_train.py does: with torch
    # 2.15 (gloo + DDP) a native thread destructor intermittently aborts at exit.
    os._exit(0)


def main():
    args = parse_args()
    if os.environ.get(WORKER_ENV) == "1":
        return worker(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return launch(args, __file__, "torch_gpt_train")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GPT-2 in plain PyTorch for tests/integration/test_torch_interop.cpp (skipped without torch).

  gpt2_torch.py reference DIR   writes DIR/gpt2.safetensors (random GPT-2 weights under
                                HuggingFace's names, with the attn.bias mask buffers older
                                versions save) and DIR/expected.safetensors (tokens as F32 and
                                this file's float64 logits, the architecture in __metadata__)
  gpt2_torch.py check WEIGHTS LOGITS
                                loads a file ringtrain exported, runs it on LOGITS' tokens and
                                compares with LOGITS' logits: exit 0 when max |a - b| / max |b|
                                is below 1e-4, else 1

Files go through the safetensors package when it is installed, else through the few lines
below (the format is an 8-byte header length, a JSON header and raw little-endian data).
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

try:
    from safetensors import safe_open
    from safetensors.torch import save_file
except ImportError:
    safe_open = save_file = None

TOLERANCE = 1e-4


def save(path, tensors, metadata):
    tensors = {k: v.to(torch.float32).contiguous() for k, v in tensors.items()}
    if save_file is not None:
        save_file(tensors, path, metadata=metadata)
        return
    header, data = {"__metadata__": metadata}, b""
    for name, t in tensors.items():
        raw = struct.pack(f"<{t.numel()}f", *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def load(path):
    """(tensors, metadata) of an F32 file."""
    if safe_open is not None:
        with safe_open(path, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", (name, e["dtype"])
        begin, end = e["data_offsets"]
        values = struct.unpack_from(f"<{(end - begin) // 4}f", blob, 8 + n + begin)
        tensors[name] = torch.tensor(values, dtype=torch.float32).view(e["shape"])
    return tensors, metadata


def forward(sd, tokens, n_layer, n_head):
    """GPT-2's logits [B, T, V] in float64 (HuggingFace's GPT2LMHeadModel, dropout off)."""
    g = lambda name: sd[name].double()
    B, T = tokens.shape
    x = g("transformer.wte.weight")[tokens] + g("transformer.wpe.weight")[:T]
    C = x.shape[-1]
    hs = C // n_head
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def conv1d(h, name):  # HF's Conv1D: y = h @ W + b, W [in, out]
        y = h @ g(name + ".weight")
        return y + g(name + ".bias") if name + ".bias" in sd else y

    def ln(h, name):
        return F.layer_norm(h, (C,), g(name + ".weight"), g(name + ".bias"), 1e-5)

    for i in range(n_layer):
        p = f"transformer.h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(B, T, n_head, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        x = x + conv1d((att @ v).transpose(1, 2).reshape(B, T, C), p + "attn.c_proj")
        h = F.gelu(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        x = x + conv1d(h, p + "mlp.c_proj")
    head = g("lm_head.weight") if "lm_head.weight" in sd else g("transformer.wte.weight")
    return ln(x, "transformer.ln_f") @ head.T


def reference(out_dir):
    n_layer, n_head, n_embd, block_size, vocab_size = 2, 4, 32, 16, 53
    gen = torch.Generator().manual_seed(1234)
    randn = lambda *shape, std: torch.randn(*shape, generator=gen) * std
    C = n_embd
    sd = {
        "transformer.wte.weight": randn(vocab_size, C, std=0.3),
        "transformer.wpe.weight": randn(block_size, C, std=0.3),
    }
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            sd[p + ln + ".weight"] = 1 + randn(C, std=0.2)
            sd[p + ln + ".bias"] = randn(C, std=0.2)
        for name, n_in, n_out in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C), ("mlp.c_fc", C, 4 * C),
                                  ("mlp.c_proj", 4 * C, C)):
            sd[p + name + ".weight"] = randn(n_in, n_out, std=1 / math.sqrt(n_in))
            sd[p + name + ".bias"] = randn(n_out, std=0.2)
        sd[p + "attn.bias"] = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        sd[p + "attn.masked_bias"] = torch.tensor(-1e4)
    sd["transformer.ln_f.weight"] = 1 + randn(C, std=0.2)
    sd["transformer.ln_f.bias"] = randn(C, std=0.2)
    tokens = torch.randint(0, vocab_size, (3, 12), generator=gen)  # 12 < block_size: wpe's first rows
    sd = {k: v.to(torch.float32) for k, v in sd.items()}  # the reference runs on what the file holds
    logits = forward(sd, tokens, n_layer, n_head)
    arch = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "block_size": block_size, "vocab_size": vocab_size}
    save(f"{out_dir}/gpt2.safetensors", sd, {"format": "pt"})
    save(f"{out_dir}/expected.safetensors", {"tokens": tokens, "logits": logits}, {k: str(v) for k, v in arch.items()})
    print(f"wrote {out_dir}/gpt2.safetensors and expected.safetensors (safetensors package: {save_file is not None})")


def check(weights, expected):
    sd, meta = load(weights)
    ref, _ = load(expected)
    tokens = ref["tokens"].long()
    ours = ref["logits"].double()
    theirs = forward(sd, tokens, int(meta["n_layer"]), int(meta["n_head"]))
    err = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    print(f"max relative error {err:.3g} over {ours.numel()} logits (tolerance {TOLERANCE}; "
          f"safetensors package: {safe_open is not None}; metadata {json.dumps(meta, sort_keys=True)})")
    return 0 if err < TOLERANCE else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "reference":
        reference(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)

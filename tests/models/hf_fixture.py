#!/usr/bin/env python3
"""Writes a tiny Hugging Face model folder and the same model as an llm.c checkpoint, with Python's
struct and json only, independently of starzero's C++ (tests/models/hf_test.sh).

  hf_fixture.py gpt2  DIR FILE [--vocab V] [--sharded] [--prefix]
  hf_fixture.py llama DIR FILE [--vocab V] [--sharded] [--tied]

The values are drawn in llm.c's layout (k/1024 for |k| <= 128, layernorm weights 1 + k/128 for
|k| <= 8: exact in fp32, bf16 and fp16), written to FILE as an llm.c fp32 checkpoint (version 3),
and to DIR under Hugging Face's names and layouts, the tensors stored as F32, BF16 and F16 in
turn:
  - GPT-2: Conv1D weights are [in, out], the transpose of llm.c's [out, in]; wte has V rows where
    llm.c's has Vp (padded with zeros); `--prefix` names the tensors transformer.*; the attention
    mask buffers attn.bias that some files hold are added (a reader ignores them).
  - Llama 3: q_proj and k_proj rows permuted as transformers' convert_llama_weights_to_hf does:
    w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2);
    gate_proj is llm.c's c_fc2, up_proj c_fc. `--tied` leaves lm_head out (tie_word_embeddings)
    and makes llm.c's lm_head the embedding. `--vocab V` (default 256) sizes the embedding and
    lm_head: 128256 is Llama 3's, which a tokenizer.json of its layout needs
    (tests/cli/check_tokenize.py tokenizers; tests/models/finetune_recipe_test.sh).
`--sharded` splits the tensors over two files and writes model.safetensors.index.json.
"""
import json
import os
import struct
import sys

DTYPES = ["F32", "BF16", "F16"]


class Values:
    """A linear congruential generator: the same numbers on every machine."""

    def __init__(self, seed):
        self.state = seed

    def next_int(self, lo, hi):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return lo + (self.state >> 33) % (hi - lo + 1)

    def weights(self, n):
        return [self.next_int(-128, 128) / 1024.0 for _ in range(n)]

    def norms(self, n):
        return [1.0 + self.next_int(-8, 8) / 128.0 for _ in range(n)]


def transpose(values, rows, cols):
    """[rows, cols] -> [cols, rows]."""
    return [values[r * cols + c] for c in range(cols) for r in range(rows)]


def hf_permute(values, n_heads, dim1, dim2):
    """transformers' permute: view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2)."""
    half = dim1 // n_heads // 2
    out = []
    for h in range(n_heads):
        for j in range(2):
            for i in range(half):
                row = h * (2 * half) + i * 2 + j  # the source row at [h][i][j]
                out.extend(values[row * dim2:(row + 1) * dim2])
    return out


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    # BF16: the upper half of fp32 (the values are exact in bf16).
    words = struct.unpack("<%dI" % len(values), struct.pack("<%df" % len(values), *values))
    return struct.pack("<%dH" % len(values), *[w >> 16 for w in words])


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, values)]."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, shape, values in tensors:
        blob = encode(values, dtype)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_folder(folder, tensors, config, sharded):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors = [(name, DTYPES[i % 3], shape, values) for i, (name, shape, values) in enumerate(tensors)]
    if not sharded:
        write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
        return
    half = len(tensors) // 2
    shards = [("model-00001-of-00002.safetensors", tensors[:half]), ("model-00002-of-00002.safetensors", tensors[half:])]
    weight_map, total = {}, 0
    for file_name, part in shards:
        write_safetensors(os.path.join(folder, file_name), part)
        for name, dtype, shape, values in part:
            weight_map[name] = file_name
            total += len(values) * (4 if dtype == "F32" else 2)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def write_llmc(path, header, tensors):
    ints = header + [0] * (256 - len(header))
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *ints))
        for values in tensors:
            f.write(struct.pack("<%df" % len(values), *values))


def gpt2(folder, llmc_file, vocab, sharded, prefix):
    L, C, NH, T = 2, 32, 4, 32
    Vp = (vocab + 127) // 128 * 128
    g = Values(20240326)
    wte = g.weights(vocab * C)
    wpe = g.weights(T * C)
    blocks = []
    for _ in range(L):
        blocks.append({
            "ln1w": g.norms(C), "ln1b": g.weights(C), "qkvw": g.weights(3 * C * C), "qkvb": g.weights(3 * C),
            "attprojw": g.weights(C * C), "attprojb": g.weights(C), "ln2w": g.norms(C), "ln2b": g.weights(C),
            "fcw": g.weights(4 * C * C), "fcb": g.weights(4 * C), "fcprojw": g.weights(C * 4 * C),
            "fcprojb": g.weights(C)})
    lnfw, lnfb = g.norms(C), g.weights(C)
    order = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw",
             "fcprojb"]
    llmc = [wte + [0.0] * ((Vp - vocab) * C), wpe]
    llmc += [[x for b in blocks for x in b[name]] for name in order]
    llmc += [lnfw, lnfb]
    write_llmc(llmc_file, [20240326, 3, T, vocab, L, NH, C, Vp], llmc)
    p = "transformer." if prefix else ""
    hf = [(p + "wte.weight", [vocab, C], wte), (p + "wpe.weight", [T, C], wpe)]
    for l, b in enumerate(blocks):
        h = "%sh.%d." % (p, l)
        hf += [
            (h + "ln_1.weight", [C], b["ln1w"]), (h + "ln_1.bias", [C], b["ln1b"]),
            (h + "attn.c_attn.weight", [C, 3 * C], transpose(b["qkvw"], 3 * C, C)),
            (h + "attn.c_attn.bias", [3 * C], b["qkvb"]),
            (h + "attn.c_proj.weight", [C, C], transpose(b["attprojw"], C, C)),
            (h + "attn.c_proj.bias", [C], b["attprojb"]),
            (h + "ln_2.weight", [C], b["ln2w"]), (h + "ln_2.bias", [C], b["ln2b"]),
            (h + "mlp.c_fc.weight", [C, 4 * C], transpose(b["fcw"], 4 * C, C)),
            (h + "mlp.c_fc.bias", [4 * C], b["fcb"]),
            (h + "mlp.c_proj.weight", [4 * C, C], transpose(b["fcprojw"], C, 4 * C)),
            (h + "mlp.c_proj.bias", [C], b["fcprojb"]),
            (h + "attn.bias", [1, 1, T, T], [1.0 if c <= r else 0.0 for r in range(T) for c in range(T)]),
        ]
    hf += [(p + "ln_f.weight", [C], lnfw), (p + "ln_f.bias", [C], lnfb)]
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab, "n_positions": T,
              "n_ctx": T, "n_embd": C, "n_layer": L, "n_head": NH, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5}
    write_folder(folder, hf, config, sharded)


def llama(folder, llmc_file, vocab, sharded, tied):
    # llama3-tiny's width (C, NH, NKV, H), two layers.
    L, C, NH, NKV, H, V, T = 2, 64, 4, 2, 192, vocab, 64
    hs = C // NH
    g = Values(20240803)
    wte = g.weights(V * C)
    blocks = []
    for _ in range(L):
        blocks.append({
            "ln1w": g.norms(C), "q": g.weights(NH * hs * C), "k": g.weights(NKV * hs * C), "v": g.weights(NKV * hs * C),
            "o": g.weights(C * C), "ln2w": g.norms(C), "up": g.weights(H * C), "gate": g.weights(H * C),
            "down": g.weights(C * H)})
    lnfw = g.norms(C)
    lm_head = wte if tied else g.weights(V * C)
    llmc = [wte, [x for b in blocks for x in b["ln1w"]], [x for b in blocks for x in b["q"] + b["k"] + b["v"]],
            [x for b in blocks for x in b["o"]], [x for b in blocks for x in b["ln2w"]],
            [x for b in blocks for x in b["up"]], [x for b in blocks for x in b["gate"]],
            [x for b in blocks for x in b["down"]], lnfw, lm_head]
    # train_llama3.py's header: ffn_dim_multiplier none (0), multiple_of 32, norm_eps 1e-5 as int (0),
    # rope_theta 10000, no scaled RoPE, max_gen_batch_size 4, version 3.1.
    write_llmc(llmc_file, [20240803, 3, T, V, L, NH, NKV, C, 0, 32, 0, 10000, 0, 4, 3, 1], llmc)
    hf = [("model.embed_tokens.weight", [V, C], wte)]
    for l, b in enumerate(blocks):
        p = "model.layers.%d." % l
        hf += [
            (p + "input_layernorm.weight", [C], b["ln1w"]),
            (p + "self_attn.q_proj.weight", [NH * hs, C], hf_permute(b["q"], NH, NH * hs, C)),
            (p + "self_attn.k_proj.weight", [NKV * hs, C], hf_permute(b["k"], NKV, NKV * hs, C)),
            (p + "self_attn.v_proj.weight", [NKV * hs, C], b["v"]),
            (p + "self_attn.o_proj.weight", [C, C], b["o"]),
            (p + "post_attention_layernorm.weight", [C], b["ln2w"]),
            (p + "mlp.gate_proj.weight", [H, C], b["gate"]),
            (p + "mlp.up_proj.weight", [H, C], b["up"]),
            (p + "mlp.down_proj.weight", [C, H], b["down"]),
        ]
    hf.append(("model.norm.weight", [C], lnfw))
    if not tied:
        hf.append(("lm_head.weight", [V, C], lm_head))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
              "intermediate_size": H, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
              "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
              "hidden_act": "silu", "tie_word_embeddings": tied}
    write_folder(folder, hf, config, sharded)


def main(argv):
    if len(argv) < 4 or argv[1] not in ("gpt2", "llama"):
        sys.exit(__doc__)
    flags = argv[4:]
    vocab = int(flags[flags.index("--vocab") + 1]) if "--vocab" in flags else 256
    if argv[1] == "gpt2":
        gpt2(argv[2], argv[3], vocab, "--sharded" in flags, "--prefix" in flags)
    else:
        llama(argv[2], argv[3], vocab, "--sharded" in flags, "--tied" in flags)


if __name__ == "__main__":
    main(sys.argv)

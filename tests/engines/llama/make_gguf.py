#!/usr/bin/env python3
"""Writes the tests' llama model: a tiny GGUF v3 file with random weights.

One layer, embedding 64, 4 heads, feed-forward 128, context 512, F32
weights drawn from a fixed seed, and a SentencePiece-style vocabulary of
<unk>, <s>, </s>, the 256 byte tokens and a few words with all their
prefixes. The file is byte-identical on every run and on every machine
(its own PRNG, no dict-order or float-formatting dependence), so its
sha256 names the weights' revision. Standard library only: nothing is
downloaded, the model is made where the tests run.

    make_gguf.py [PATH]      (default build/engines/tiny-llama.gguf)

The output rows of the byte and control tokens are zero, so that a
sampled token is always a word piece: every token of an answer is whole
UTF-8 on its own, and one token is one SSE event.
"""

import hashlib
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_PATH = ROOT / "build" / "engines" / "tiny-llama.gguf"

SEED = 20240530
N_LAYER = 1
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
N_CTX = 512
RMS_EPS = 1e-5
ALIGNMENT = 32

# Each word comes with all its prefixes ("▁", "▁l", "▁le", ...), so the
# tokenizer's bigram merges can reach it from single characters.
WORDS = ("the", "ledger", "request", "stream", "token", "engine", "gateway", "replica",
         "retry", "exactly", "once", "claim", "result", "tool", "call", "answer", "client",
         "model", "email", "sent", "hello", "world", "lease", "fence", "attempt",
         "failover", "delta", "ticket", "payment", "twice", "first", "byte", "because", "done",
         "is", "a", "of", "and", "to", "in", "it", "on", "not", "we")

# GGUF value types and token types (llama.cpp's gguf.h and llama-vocab.h).
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6
GGML_F32 = 0
SPACE = "\u2581"


def vocabulary():
    """[(text, score, type)]: the special tokens, the bytes, then the word pieces."""
    vocab = [("<unk>", 0.0, TOKEN_UNKNOWN), ("<s>", 0.0, TOKEN_CONTROL),
             ("</s>", 0.0, TOKEN_CONTROL)]
    vocab += [("<0x%02X>" % b, 0.0, TOKEN_BYTE) for b in range(256)]
    pieces = []
    for word in WORDS:
        full = SPACE + word
        for end in range(1, len(full) + 1):
            if full[:end] not in pieces:
                pieces.append(full[:end])
    # Longer pieces merge first: a piece's score grows with its length.
    vocab += [(p, float(len(p)) - i / 1000.0, TOKEN_NORMAL) for i, p in enumerate(pieces)]
    return vocab


class Rng:
    """splitmix64: the same numbers on every platform and Python version."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def uniform(self, scale):
        """A float in [-scale, scale), from 24 random bits (exact in float32)."""
        return ((self.next64() >> 40) / float(1 << 24) * 2.0 - 1.0) * scale


def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def gguf_value(kind, value):
    if kind == T_STRING:
        return gguf_string(value)
    if kind == T_UINT32:
        return struct.pack("<I", value)
    if kind == T_INT32:
        return struct.pack("<i", value)
    if kind == T_FLOAT32:
        return struct.pack("<f", value)
    if kind == T_BOOL:
        return struct.pack("<B", 1 if value else 0)
    raise ValueError(kind)


def gguf_kv(key, kind, value, elem=None):
    out = gguf_string(key) + struct.pack("<I", kind)
    if kind == T_ARRAY:
        out += struct.pack("<IQ", elem, len(value))
        return out + b"".join(gguf_value(elem, v) for v in value)
    return out + gguf_value(kind, value)


def metadata(vocab):
    """The key-value pairs llama.cpp reads for a llama model, in a fixed order."""
    head_dim = N_EMBD // N_HEAD
    return [
        gguf_kv("general.architecture", T_STRING, "llama"),
        gguf_kv("general.name", T_STRING, "ledgerd tiny llama"),
        gguf_kv("general.alignment", T_UINT32, ALIGNMENT),
        gguf_kv("llama.vocab_size", T_UINT32, len(vocab)),
        gguf_kv("llama.context_length", T_UINT32, N_CTX),
        gguf_kv("llama.embedding_length", T_UINT32, N_EMBD),
        gguf_kv("llama.block_count", T_UINT32, N_LAYER),
        gguf_kv("llama.feed_forward_length", T_UINT32, N_FF),
        gguf_kv("llama.attention.head_count", T_UINT32, N_HEAD),
        gguf_kv("llama.attention.head_count_kv", T_UINT32, N_HEAD_KV),
        gguf_kv("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, RMS_EPS),
        gguf_kv("llama.rope.dimension_count", T_UINT32, head_dim),
        gguf_kv("llama.rope.freq_base", T_FLOAT32, 10000.0),
        gguf_kv("tokenizer.ggml.model", T_STRING, "llama"),
        gguf_kv("tokenizer.ggml.tokens", T_ARRAY, [t for t, _, _ in vocab], T_STRING),
        gguf_kv("tokenizer.ggml.scores", T_ARRAY, [s for _, s, _ in vocab], T_FLOAT32),
        gguf_kv("tokenizer.ggml.token_type", T_ARRAY, [k for _, _, k in vocab], T_INT32),
        gguf_kv("tokenizer.ggml.unknown_token_id", T_UINT32, 0),
        gguf_kv("tokenizer.ggml.bos_token_id", T_UINT32, 1),
        gguf_kv("tokenizer.ggml.eos_token_id", T_UINT32, 2),
        gguf_kv("tokenizer.ggml.add_bos_token", T_BOOL, True),
        gguf_kv("tokenizer.ggml.add_eos_token", T_BOOL, False),
    ]


def tensors(vocab, rng):
    """[(name, ne, float32 bytes)]: ne is GGUF's order, the fastest dimension first."""
    n_vocab = len(vocab)

    def random(ne, scale):
        count = 1
        for n in ne:
            count *= n
        return struct.pack("<%df" % count, *(rng.uniform(scale) for _ in range(count)))

    def ones(n):
        return struct.pack("<%df" % n, *([1.0] * n))

    def output_rows():
        rows = []
        for text, _, kind in vocab:
            row = [rng.uniform(1.0) for _ in range(N_EMBD)]
            rows.append(row if kind == TOKEN_NORMAL else [0.0] * N_EMBD)
        return b"".join(struct.pack("<%df" % N_EMBD, *r) for r in rows)

    proj = 1.0 / N_EMBD ** 0.5
    out = [("token_embd.weight", (N_EMBD, n_vocab), random((N_EMBD, n_vocab), 1.0))]
    for layer in range(N_LAYER):
        p = "blk.%d." % layer
        out += [
            (p + "attn_norm.weight", (N_EMBD,), ones(N_EMBD)),
            (p + "attn_q.weight", (N_EMBD, N_EMBD), random((N_EMBD, N_EMBD), proj)),
            (p + "attn_k.weight", (N_EMBD, N_EMBD), random((N_EMBD, N_EMBD), proj)),
            (p + "attn_v.weight", (N_EMBD, N_EMBD), random((N_EMBD, N_EMBD), proj)),
            (p + "attn_output.weight", (N_EMBD, N_EMBD), random((N_EMBD, N_EMBD), proj)),
            (p + "ffn_norm.weight", (N_EMBD,), ones(N_EMBD)),
            (p + "ffn_gate.weight", (N_EMBD, N_FF), random((N_EMBD, N_FF), proj)),
            (p + "ffn_up.weight", (N_EMBD, N_FF), random((N_EMBD, N_FF), proj)),
            (p + "ffn_down.weight", (N_FF, N_EMBD), random((N_FF, N_EMBD), 1.0 / N_FF ** 0.5)),
        ]
    out += [("output_norm.weight", (N_EMBD,), ones(N_EMBD)),
            ("output.weight", (N_EMBD, n_vocab), output_rows())]
    return out


def pad(data, alignment=ALIGNMENT):
    return data + b"\0" * (-len(data) % alignment)


def model_bytes():
    """The whole file."""
    vocab = vocabulary()
    kvs = metadata(vocab)
    ts = tensors(vocab, Rng(SEED))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)) + b"".join(kvs)
    infos, data = b"", b""
    for name, ne, blob in ts:
        data = pad(data)
        infos += gguf_string(name) + struct.pack("<I", len(ne))
        infos += b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", GGML_F32, len(data))
        data += blob
    return pad(head + infos) + data


def write(path=DEFAULT_PATH):
    """Writes the model to @path (atomically: a reader never sees half a file); returns its sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = model_bytes()
    tmp = path.with_name(path.name + ".%d.tmp" % os.getpid())
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return hashlib.sha256(blob).hexdigest()


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH
    digest = write(path)
    print("%s %s (%d tokens)" % (digest, path, len(vocabulary())))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fixtures for the chat-template families (tests/test_chat_families.c): the REAL chat templates
(tests/fixtures/chat_templates/*.jinja, as published with each model, copied from llama.cpp's
models/templates/) rendered by transformers' apply_chat_template, and tokenized by the REAL
vocabularies that llama.cpp ships as vocabulary-only GGUFs (scripts/fetch_vocab.sh: the
llama-cpp-python sdist on PyPI).

Reference tokenizers (the `tokenizers` library): a GGUF holds the vocabulary and merges, not the
pre-tokenizer pipeline of tokenizer.json; this script rebuilds that pipeline as the models'
published tokenizer.json files write it, and first proves it equal to the real tokenizer on
llama.cpp's ggml-vocab-*.gguf.inp/.out pairs (ids written by each model's own Hugging Face
tokenizer); it stops if any of those differs.
    Llama 3  BPE(ignore_merges) + Split(llama3 regex, isolated) + ByteLevel(use_regex=False)
    Qwen2    NFC + BPE + Split(qwen2 regex, isolated) + ByteLevel(use_regex=False)
    Phi-3, Llama 2 (SentencePiece)  the `sentencepiece` library on a model rebuilt from the GGUF
             (SpmReference below), text split at control tokens as llama.cpp does.
Gemma 2 is checked on the rendered text only (T/H lines, no I/G lines): its tokenizer reference
(transformers' GGUF conversion, tests/ref/make_chat_fixture.py) needs torch.

It also writes the 1,160-string tokenizer parity fixtures of the Llama 3 and Qwen2 pre-tokenizers
(tests/fixtures/tokenizer_{llama3,qwen2}.txt; corpus and format of make_tokenizer_fixture.py).

Fixture format (tests/fixtures/chat/<name>.txt):
    F <family afinar must recognise>   J <template file>   V <vocabulary file>   D <date or ->
    per conversation: C <n>, optionally W <hex JSON of the tools list> (apply_chat_template(tools=)),
    M <role> <hex content> [<hex JSON {"tool_calls": [{"id", "name", "arguments": JSON text}],
    "tool_call_id"}>] lines (role system, user, assistant or tool; the arguments as JSON text in
    assorted spellings: compact, indented, ASCII-escaped), then either X (the template refuses)
    or T <hex text>, H <hex text with the generation prompt>, and with a reference tokenizer
    I <ids of T>, G <ids of H> (apply_chat_template(tokenize=True): no BOS/EOS added); "H =" / "G ="
    when equal to T / I (templates without a generation prompt).
Tool conversations (tool_convs: 5 hand-written, 1 without a tools list, 34 random with random JSON
arguments: floats in both notations, escapes, control characters, emoji, nesting) are added for
the families whose templates have tool turns (TOOL_FAMILIES). Dates: strftime_now answers 26 Jul
2024 (fix_today), the date the C test sets with SOURCE_DATE_EPOCH.
Regenerate: scripts/fetch_vocab.sh && .venv-ref/bin/python tests/ref/make_chat_families.py
(.venv-ref: python3 -m venv .venv-ref && .venv-ref/bin/pip install -r tests/ref/requirements-chat.txt)
"""
import json
import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_chat_fixture as mcf  # noqa: E402  (conversations)
import make_tokenizer_fixture as mtf  # noqa: E402  (GGUF reading, 1,160-string corpus)

ROOT = mtf.ROOT
TPL = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat")
VOCAB = os.environ.get("AF_VOCAB_DIR", os.path.join(ROOT, "vocab"))

# Published pre-tokenizer regexes (tokenizer.json of Meta-Llama-3 and Qwen2).
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def bpe_tokenizer(gguf_name, regex, nfc, ignore_merges):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    strs, ints, _, _ = mtf.read_gguf(os.path.join(VOCAB, gguf_name))
    tokens = strs("tokenizer.ggml.tokens")
    types = ints("tokenizer.ggml.token_type")
    merges = []
    for m in strs("tokenizer.ggml.merges"):
        sp = m.index(" ", 1)
        merges.append((m[:sp], m[sp + 1:]))
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                              ignore_merges=ignore_merges))
    if nfc:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_tokens([AddedToken(t, special=(ty == 3), normalized=False)
                   for t, ty in zip(tokens, types) if ty in (3, 4)])
    return tk, tokens


def encode_ids(tk, text):
    if isinstance(tk, SpmReference):
        return tk.encode(text)
    return tk.encode(text, add_special_tokens=False).ids


def check_inp_out(gguf_name, tk):
    base = os.path.join(VOCAB, gguf_name)
    inp = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
    out = open(base + ".out", encoding="utf-8").read().split("\n")
    n = 0
    for s, o in zip(inp, out):
        want = [int(x) for x in o.split()]
        got = encode_ids(tk, s)
        if got != want:
            sys.exit("%s: the rebuilt tokenizer differs from the real one on %r" % (gguf_name, s))
        n += 1
    print("%s: rebuilt tokenizer = real tokenizer on %d llama.cpp test strings" % (gguf_name, n))


class SpmReference:
    """SentencePiece (the `sentencepiece` library) on a model rebuilt from the GGUF's pieces, scores
    and types (BPE, byte fallback, dummy prefix), proven equal to the real tokenizer on llama.cpp's
    .inp/.out. Text with special tokens is split at the control tokens first (leftmost, longest)
    and each plain segment encoded on its own, so each gets the dummy-prefix space: llama.cpp's
    rule for SentencePiece vocabularies and that of the legacy Hugging Face Llama/Phi-3
    tokenizer.json (Prepend normalizer, run on every split between added tokens)."""

    def __init__(self, gguf_name):
        import sentencepiece as spm
        from sentencepiece import sentencepiece_model_pb2 as pb
        strs, ints, f, _ = mtf.read_gguf(os.path.join(VOCAB, gguf_name))
        self.tokens = strs("tokenizer.ggml.tokens")
        types = ints("tokenizer.ggml.token_type")
        sc = f["tokenizer.ggml.scores"]
        scores = [float(sc.parts[i][0]) for i in sc.data]
        m = pb.ModelProto()
        m.trainer_spec.model_type = pb.TrainerSpec.BPE
        m.trainer_spec.byte_fallback = True
        m.normalizer_spec.name = "identity"
        m.normalizer_spec.add_dummy_prefix = True
        m.normalizer_spec.remove_extra_whitespaces = False
        m.normalizer_spec.escape_whitespaces = True
        for i, (t, ty, s) in enumerate(zip(self.tokens, types, scores)):
            p = m.pieces.add()
            p.piece, p.score = t, s
            p.type = ty if ty in (1, 3, 4, 5, 6) or (ty == 2 and i == 0) else 1  # one UNK (id 0)
        self.sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
        self.special = sorted(((t, i) for i, (t, ty) in enumerate(zip(self.tokens, types)) if ty == 3),
                              key=lambda x: -len(x[0]))

    def encode(self, text):
        ids, seg, i = [], 0, 0
        while i < len(text):
            hit = next(((t, k) for t, k in self.special if text.startswith(t, i)), None)
            if not hit:
                i += 1
                continue
            if i > seg:
                ids += self.sp.encode(text[seg:i])
            ids.append(hit[1])
            i += len(hit[0])
            seg = i
        if seg < len(text):
            ids += self.sp.encode(text[seg:])
        return ids


def tiny_host():
    """A tokenizer object only to host templates whose ids are not checked here."""
    from tokenizers import Tokenizer, models
    return Tokenizer(models.WordLevel(vocab={"<unk>": 0}, unk_token="<unk>"))


def hexs(s):
    return s.encode("utf-8").hex()


THINK = [
    [mcf.U("2+2?"), mcf.A("<think>\nsimple sum\n</think>\n\n4")],
    [mcf.U("q1"), mcf.A("<think>r1</think>a1"), mcf.U("q2"), mcf.A("<think>\n\nr2\n\n</think>\n\n\na2")],
    [mcf.S("sys"), mcf.U("q"), mcf.A("no think here"), mcf.U("q2"), mcf.A("</think>only close")],
    [mcf.U("q"), mcf.A("<think>a</think>b</think>c")],
    [mcf.U("q"), mcf.A("x<think>y</think>\nz"), mcf.U("again")],
    [mcf.U("多语言 <think>?"), mcf.A("<think>\n思考 😀\n</think>\n\n答案")],
    [mcf.S("/no_think be short"), mcf.U("hi"), mcf.A("hello")],
    [mcf.S("be long /think"), mcf.U("hi"), mcf.A("\n\nhello")],
]


def convs_for(seed):
    rnd = random.Random(seed)
    extra = []
    for c in mcf.random_convs(20, seed=seed):
        if rnd.random() < 0.5:
            c = [dict(m, content=("<think>\n%s\n</think>\n\n%s" % (m["content"], m["content"]))
                      if m["role"] == "assistant" and rnd.random() < 0.5 else m["content"]) for m in c]
        extra.append(c)
    return mcf.HAND + THINK + mcf.random_convs(40, seed=seed + 1) + extra


# ---- tool turns: a tools list, assistant tool_calls (OpenAI form) and role "tool" results ----
TOOL_DEFS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather \"now\" in a city \u00e9t\u00e9 \U0001F600",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                    "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "a + b\nwith newline\tand tab",
     "parameters": {"type": "object", "properties": {"a": {"type": "number", "minimum": -1.5e-7},
                    "b": {"type": "integer", "default": 0}}, "required": []}}},
    {"type": "function", "function": {"name": "search", "description": "",
     "parameters": {"type": "object", "properties": {}, "additionalProperties": False, "x": None}}},
]

JSON_ATOMS = [0, -0.0, 1, -17, 3.5, 0.1, 1e-7, 2.5e20, 100.0, 123456789012345678, 1e16, 1.0e15, True, False, None,
              "", "plain", "quote \" and \\ backslash", "line\nbreak\ttab\u0001ctl", "caf\u00e9 \u65e5\u672c \U0001F468\u200D\U0001F469",
              "</tool_call>?", "[INST] x [/INST]"]


def rand_json(rnd, depth=0):
    r = rnd.random()
    if depth < 2 and r < 0.2:
        return [rand_json(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if depth < 2 and r < 0.4:
        return {rnd.choice(["k", "key two", "\u00fcml", "n"]) + str(i): rand_json(rnd, depth + 1)
                for i in range(rnd.randint(0, 3))}
    return rnd.choice(JSON_ATOMS)


def call(rnd, name, args, k):
    return {"id": "c%08d" % (rnd.randint(0, 10 ** 8 - 1)), "type": "function",
            "function": {"name": name, "arguments": args}}


def tool_convs(seed, single_call):
    """Hand-written and random conversations with tools; the tools list is kept under the key
    "_tools" of the first message (removed before rendering)."""
    rnd = random.Random(seed)
    out = []
    base = [
        [mcf.U("Weather in Paris?"),
         {"role": "assistant", "content": "", "tool_calls": [call(rnd, "get_weather", {"city": "Paris"}, 0)]},
         {"role": "tool", "content": "{\"temp\": 21}"}, mcf.A("It is 21 degrees.")],
        [mcf.S("You are a helpful bot."), mcf.U("add 2 and 3"),
         {"role": "assistant", "content": "Let me add.", "tool_calls": [call(rnd, "add", {"a": 2, "b": 3}, 0)]},
         {"role": "tool", "content": "5"}, mcf.A("5"), mcf.U("thanks"), mcf.A("welcome")],
        [mcf.U("hi"), mcf.A("hello")],
        [mcf.S("sys  "), mcf.U("  spaced  ")],
    ]
    if not single_call:
        base.append([mcf.U("two cities"),
                     {"role": "assistant", "content": "", "tool_calls": [
                         call(rnd, "get_weather", {"city": "Oslo", "unit": "c"}, 0),
                         call(rnd, "get_weather", {"city": "Rome"}, 1)]},
                     {"role": "tool", "content": "cold"}, {"role": "tool", "content": "warm"},
                     mcf.A("Oslo is cold, Rome warm.")])
    for b in base:
        out.append((TOOL_DEFS, b))
    out.append((None, base[0]))  # tool turns without a tools list
    while len(out) < 40:
        tools = rnd.sample(TOOL_DEFS, rnd.randint(1, 3))
        msgs = []
        if rnd.random() < 0.4:
            msgs.append(mcf.S(rnd.choice(["Be terse.", "Ты помощник.", " padded system \n"])))
        for turn in range(rnd.randint(1, 2)):
            msgs.append(mcf.U(rnd.choice(["do it", "what is 1.5 + 2?", "日本の天気は?", "quote \" here"])))
            ncalls = 1 if single_call else rnd.randint(1, 2)
            calls = [call(rnd, rnd.choice(tools)["function"]["name"],
                          {"arg%d" % j: rand_json(rnd) for j in range(rnd.randint(0, 3))}, k) for k in range(ncalls)]
            msgs.append({"role": "assistant", "content": rnd.choice(["", "", "Calling.", "<think>\nhmm\n</think>\n\n"]),
                         "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "content": rnd.choice(["ok", "{\"v\": [1, 2]}", "multi\nline", ""])})
            msgs.append(mcf.A(rnd.choice(["Done.", "<think>\nr\n</think>\n\nanswer", "结果"])))
        out.append((tools, msgs))
    return out


def tool_extra(m):
    """The per-message extra of the fixture (JSON, hex): the calls with their arguments as JSON text in
    assorted spellings (compact, indented, ASCII-escaped) and the tool_call_id."""
    x = {}
    if m.get("tool_calls"):
        rnd = random.Random(str(m))
        x["tool_calls"] = [{"id": c["id"], "name": c["function"]["name"],
                            "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=rnd.random() < 0.5,
                                                    indent=rnd.choice([None, 2]),
                                                    separators=rnd.choice([None, (",", ":")]))}
                           for c in m["tool_calls"]]
    if m["role"] == "tool" and m.get("tool_call_id"):
        x["tool_call_id"] = m["tool_call_id"]
    return hexs(json.dumps(x)) if x else None


def link_tool_ids(msgs):
    """tool_call_id of each tool message: the id of the matching call (in order)."""
    pending = []
    out = []
    for m in msgs:
        m = dict(m)
        if m.get("tool_calls"):
            pending = [c["id"] for c in m["tool_calls"]]
        if m["role"] == "tool":
            m["tool_call_id"] = pending.pop(0) if pending else "c00000000"
        out.append(m)
    return out


TOOL_FAMILIES = {"qwen2.5": False, "qwen3": False, "qwq": False, "llama3.1": True, "llama3.2": True,
                 "mistral-small-3.2": False, "mistral-nemo": False}


def fix_today():
    """transformers' strftime_now (a closure over its module's `datetime`) answers 26 Jul 2024, the date
    tests/test_chat_families.c sets with SOURCE_DATE_EPOCH."""
    import datetime
    import transformers.utils.chat_template_utils as ctu

    class Fixed(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2024, 7, 26)
    ctu.datetime = Fixed


FAMILIES = [
    # name, family, template, vocabulary, reference tokenizer (None: text only), bos, eos, kwargs
    ("qwen2.5", "chatml", "Qwen-Qwen2.5-7B-Instruct.jinja", "ggml-vocab-qwen2.gguf", "qwen2", None, "<|im_end|>", {}),
    ("qwen3", "qwen3", "Qwen-Qwen3-0.6B.jinja", "ggml-vocab-qwen2.gguf", "qwen2", None, "<|im_end|>", {}),
    ("llama3.1", "llama3", "meta-llama-Llama-3.1-8B-Instruct.jinja", "ggml-vocab-llama-bpe.gguf", "llama3",
     "<|begin_of_text|>", "<|eot_id|>", {}),
    ("llama3.2", "llama3", "meta-llama-Llama-3.2-3B-Instruct.jinja", "ggml-vocab-llama-bpe.gguf", "llama3",
     "<|begin_of_text|>", "<|eot_id|>", {"date_string": "26 Jul 2024"}),
    ("deepseek-r1-llama", "deepseek-r1", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
     "ggml-vocab-llama-bpe.gguf", "llama3", "<|begin_of_text|>", "<|end_of_text|>", {}),
    ("deepseek-r1-qwen", "deepseek-r1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
     "ggml-vocab-qwen2.gguf", "qwen2", "<|endoftext|>", "<|endoftext|>", {"enable_thinking": True}),
    ("phi3.5", "phi3", "microsoft-Phi-3.5-mini-instruct.jinja", "ggml-vocab-phi-3.gguf", "spm:phi-3", "<s>",
     "<|endoftext|>", {}),
    ("mistral-nemo", "mistral", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "ggml-vocab-llama-spm.gguf", "spm:llama-spm",
     "<s>", "</s>", {}),
    ("phi3-mini", "phi3", "llama.cpp-ggml-vocab-phi-3.jinja", "ggml-vocab-phi-3.gguf", "spm:phi-3", "<s>",
     "<|endoftext|>", {}),
    ("qwen1.5", "chatml", "llama.cpp-ggml-vocab-qwen2.jinja", "ggml-vocab-qwen2.gguf", "qwen2", None, "<|im_end|>", {}),
    ("gemma4", "gemma4", "google-gemma-4-31B-it.jinja", "gemma-3-270m-Q4_K_M.gguf", None, "<bos>", "<eos>", {}),
    ("smollm3", "smollm3", "HuggingFaceTB-SmolLM3-3B.jinja", "ggml-vocab-llama-bpe.gguf", "llama3",
     "<|begin_of_text|>", "<|im_end|>", {}),
    ("gemma2", "gemma", "google-gemma-2-2b-it.jinja", "gemma-3-270m-Q4_K_M.gguf", None, "<bos>", "<eos>", {}),
    ("qwq", "qwq", "Qwen-QwQ-32B.jinja", "ggml-vocab-qwen2.gguf", "qwen2", None, "<|im_end|>",
     {"enable_thinking": True}),
    ("mistral-small-3.2", "mistral-v7", "Mistral-Small-3.2-24B-Instruct-2506.jinja", "ggml-vocab-llama-spm.gguf",
     "spm:llama-spm", "<s>", "</s>", {}),
]


def main():
    from transformers import PreTrainedTokenizerFast
    only = set(sys.argv[1:])  # family names to regenerate (default: all)
    fix_today()
    os.makedirs(OUT, exist_ok=True)
    refs = {}
    tk, _ = bpe_tokenizer("ggml-vocab-llama-bpe.gguf", LLAMA3_RE, False, True)
    check_inp_out("ggml-vocab-llama-bpe.gguf", tk)
    refs["llama3"] = tk
    tk, _ = bpe_tokenizer("ggml-vocab-qwen2.gguf", QWEN2_RE, True, False)
    check_inp_out("ggml-vocab-qwen2.gguf", tk)
    refs["qwen2"] = tk
    for key, voc in (("spm:phi-3", "ggml-vocab-phi-3.gguf"), ("spm:llama-spm", "ggml-vocab-llama-spm.gguf")):
        r = SpmReference(voc)
        check_inp_out(voc, r)
        refs[key] = r

    # 1,160-string pre-tokenizer fixtures
    corpus = mtf.gen_corpus()
    for name, key in (("llama3", "llama3"), ("qwen2", "qwen2")):
        lines = ["# %s tokenizer parity fixture (tests/ref/make_chat_families.py; vocabulary: scripts/fetch_vocab.sh)"
                 % name, "N %d" % len(corpus)]
        for s in corpus:
            p, r = mtf.encode_both(refs[key], s)
            lines.append("T " + hexs(s))
            lines.append("P " + " ".join(map(str, p)))
            lines.append("R =" if r == p else "R " + " ".join(map(str, r)))
        with open(os.path.join(ROOT, "tests", "fixtures", "tokenizer_%s.txt" % name), "w") as fp:
            fp.write("\n".join(lines) + "\n")
        print("tokenizer_%s.txt: %d strings" % (name, len(corpus)))

    for k, (name, fam, tpl, voc, ref, bos, eos, kw) in enumerate(FAMILIES):
        if only and name not in only:
            continue
        template = open(os.path.join(TPL, tpl), encoding="utf-8").read()
        hosted = refs[ref] if ref and not ref.startswith("spm:") else tiny_host()
        host = PreTrainedTokenizerFast(tokenizer_object=hosted,
                                       bos_token=bos, eos_token=eos)
        lines = ["# %s: %s rendered by transformers' apply_chat_template%s (tests/ref/make_chat_families.py)"
                 % (name, tpl, ", ids by the rebuilt real tokenizer of " + voc if ref else " (text only)"),
                 "F " + fam, "J " + tpl, "V " + voc,
                 "D " + kw.get("date_string", "2024-07-26" if "strftime_now" in template else "-")]
        n_ok = n_x = 0
        convs = [(None, c) for c in convs_for(100 + k)]
        if name in TOOL_FAMILIES:
            convs += tool_convs(500 + k, TOOL_FAMILIES[name])
        for tools, msgs in convs:
            msgs = link_tool_ids(msgs)
            lines.append("C %d" % len(msgs))
            if tools:
                lines.append("W " + hexs(json.dumps(tools, indent=1)))
            for m in msgs:
                x = tool_extra(m)
                lines.append("M %s %s%s" % (m["role"], hexs(m["content"]), " " + x if x else ""))
            tkw = dict(kw, tools=tools) if tools else kw
            try:
                t = host.apply_chat_template(msgs, chat_template=template, tokenize=False, **tkw)
                h = host.apply_chat_template(msgs, chat_template=template, tokenize=False,
                                             add_generation_prompt=True, **tkw)
            except Exception:  # raise_exception in the template
                lines.append("X")
                n_x += 1
                continue
            lines.append("T " + hexs(t))
            lines.append("H =" if h == t else "H " + hexs(h))
            if ref:
                i_ids = encode_ids(refs[ref], t)
                g_ids = encode_ids(refs[ref], h)
                lines.append("I " + " ".join(map(str, i_ids)))
                lines.append("G =" if g_ids == i_ids else "G " + " ".join(map(str, g_ids)))
            n_ok += 1
        with open(os.path.join(OUT, name + ".txt"), "w") as fp:
            fp.write("\n".join(lines) + "\n")
        print("%s: %d conversations rendered, %d refused by the template" % (name, n_ok, n_x))


if __name__ == "__main__":
    main()

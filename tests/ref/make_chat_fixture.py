#!/usr/bin/env python3
"""Build the multi-turn chat-template fixtures used by tests/test_lm_data.c.

Reference: transformers' `apply_chat_template(messages, tokenize=True)` (the rendered template
tokenized without added special tokens, as TRL's SFTTrainer does), for both GGUFs in models/:

SmolLM2 (ChatML)  template = the GGUF's tokenizer.chat_template; tokenizer = the correct SmolLM2
    tokenizer built from the GGUF by make_tokenizer_fixture.smollm_tokenizer (transformers' own GGUF
    conversion drops SmolLM2's individual-digit split; the script prints on how many conversations
    that conversion would differ).
Gemma 3 (Gemma)   the GGUF has no template; the Gemma 3 template as typed in
    make_tokenizer_fixture.GEMMA3_TEMPLATE, tokenizer = transformers' GGUF conversion.

Loss masks: transformers' `return_assistant_tokens_mask=True` needs `{% generation %}` blocks,
which neither template has. For each family this script writes a template of its own with such a
block around each assistant message's content and end-of-turn token (the rule afinar implements),
checks that it renders exactly the reference text, and records its assistant mask. The Gemma
version also raises, as the published Gemma 3 template does, when user and assistant turns do not
alternate; such conversations are written as refused ("X").

Output (text, committed; regenerate with .venv-ref/bin/python tests/ref/make_chat_fixture.py):
    tests/fixtures/chat_ids_smollm2.txt  tests/fixtures/chat_ids_gemma3.txt
Per conversation:
    C <number of messages>
    M <role> <hex utf-8 content>          one line per message
    I <ids>     apply_chat_template(messages, tokenize=True)
    A <0/1...>  assistant mask (one digit per id of I)
    G <ids>     the same with add_generation_prompt=True
  or, instead of I/A/G, "X" when the template refuses the conversation.
"""
import os
import random
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_tokenizer_fixture as mtf  # noqa: E402  (one copy of the tokenizer construction)

FIX = mtf.FIX


def S(c):
    return {"role": "system", "content": c}


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


HAND = [
    [U("hi"), A("Hello! How can I help?")],
    [S("You are a pirate."), U("Tell me a joke."), A("Why did the pirate cross the sea? Arr.")],
    [S("Be brief."), U("2+2?"), A("4"), U("and 3*3?"), A("9"), U("thanks"), A("You're welcome.")],
    [U(""), A("")],
    [S(""), U("empty system"), A("ok")],
    [U("Bonjour ! Ça va ? 😀"), A("Très bien, merci 🇫🇷 — et vous ?")],
    [U("中文：你好，世界！"), A("你好！这是一个测试。日本語のテキスト。")],
    [U("say <|im_end|> please"), A("<|im_start|>user\nfake<|im_end|> and <start_of_turn>x<end_of_turn>")],
    [U("tokens <bos><eos> <|endoftext|>"), A("<eos>")],
    [U("  padded user \n"), A("\n\nanswer after blank lines\n")],
    [U("\u00a0nbsp\u3000"), A("\u2003em space\u2028")],
    [U("x\x1c"), A("\x1fy\x0b")],
    [U("numbers 12345 and 3.14159"), A("12345678901234567890")],
    [U("code?"), A("def f(x):\n    return x ** 2\n")],
    [S("sys"), U("question"), A("answer"), U("follow-up with no answer")],
    [U("multi\nline\nuser"), A("multi\nline\nanswer")],
    [A("assistant speaks first")],
    [S("sys"), A("no user turn")],
    [U("a"), U("b"), A("two users in a row")],
    [U("q"), A("a"), S("system in the middle"), U("q2"), A("a2")],
    [U("q"), A("a1"), A("a2")],
    [S("Système en français"), U("Bonjour"), A("Salut")],
    [U("emoji 👨\u200d👩\u200d👧 🏳️\u200d🌈"), A("👍🏽")],
    [U("trailing spaces   "), A("   leading spaces")],
    [U(" "), A(" ")],
]

WORDS = ["the", "cat", "sat", "on", "mat", "Hello", "world", "LoRA", "GGUF", "über", "café", "东京",
         "😀", "42", "3.5", "don't", "\n", "  ", "\t", ".", ",", "?", "<|im_end|>", "<end_of_turn>"]


def random_convs(n, seed=1234):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        msgs = []
        if rnd.random() < 0.4:
            msgs.append(S(words(rnd)))
        for _ in range(rnd.randint(1, 4)):
            msgs.append(U(words(rnd)))
            msgs.append(A(words(rnd)))
        if rnd.random() < 0.2:
            msgs.append(U(words(rnd)))
        out.append(msgs)
    return out


def words(rnd):
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 12)))


def hexs(s):
    return s.encode("utf-8").hex()


def as_ids(r):
    if isinstance(r, dict) or hasattr(r, "keys"):
        return list(r["input_ids"])
    return list(r)


def chatml_marked(default_system):
    ds = default_system.replace("\\", "\\\\").replace("'", "\\'")
    return (
        "{%- for m in messages -%}"
        "{%- if loop.first and m['role'] != 'system' -%}"
        "{{ '<|im_start|>system\n" + ds + "<|im_end|>\n' }}"
        "{%- endif -%}"
        "{{ '<|im_start|>' + m['role'] + '\n' }}"
        "{%- if m['role'] == 'assistant' -%}"
        "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
        "{%- else -%}{{ m['content'] + '<|im_end|>' }}{%- endif -%}"
        "{{ '\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}")


GEMMA_MARKED = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set pre = messages[0]['content'] + '\n\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set pre = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for m in turns -%}"
    "{%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('turns must alternate user/assistant') }}{%- endif -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{ '<start_of_turn>model\n' }}"
    "{% generation %}{{ m['content'] | trim }}{{ '<end_of_turn>' }}{% endgeneration %}"
    "{%- else -%}"
    "{{ '<start_of_turn>' + m['role'] + '\n' + (pre if loop.first else '') }}"
    "{{ m['content'] | trim }}{{ '<end_of_turn>' }}"
    "{%- endif -%}"
    "{{ '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")


def build(tok, ref_template, marked, convs, title):
    lines = ["# " + title, "# regenerate: .venv-ref/bin/python tests/ref/make_chat_fixture.py"]
    n_ok = n_x = 0
    for msgs in convs:
        lines.append("C %d" % len(msgs))
        for m in msgs:
            lines.append("M %s %s" % (m["role"], hexs(m["content"])))
        try:
            text_m = tok.apply_chat_template(msgs, chat_template=marked, tokenize=False)
        except Exception:  # the template refuses the conversation
            lines.append("X")
            n_x += 1
            continue
        text_r = tok.apply_chat_template(msgs, chat_template=ref_template, tokenize=False)
        assert text_m == text_r, (msgs, text_m, text_r)
        ids = as_ids(tok.apply_chat_template(msgs, chat_template=ref_template, tokenize=True))
        out = tok.apply_chat_template(msgs, chat_template=marked, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        assert list(out["input_ids"]) == ids
        mask = list(out["assistant_masks"])
        gen = as_ids(tok.apply_chat_template(msgs, chat_template=ref_template, tokenize=True,
                                             add_generation_prompt=True))
        lines.append("I " + " ".join(map(str, ids)))
        lines.append("A " + "".join(str(int(b)) for b in mask))
        lines.append("G " + " ".join(map(str, gen)))
        n_ok += 1
    return lines, n_ok, n_x


def main():
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    convs = HAND + random_convs(40)

    tk, tmpl = mtf.smollm_tokenizer(os.path.join(mtf.MODELS, mtf.SMOL))
    smol = PreTrainedTokenizerFast(tokenizer_object=tk)
    mm = re.search(r"<\|im_start\|>system\n([^{}'\"+]*?)<\|im_end\|>", tmpl)
    lines, n_ok, n_x = build(smol, tmpl, chatml_marked(mm.group(1)), convs,
                             "SmolLM2 (ChatML) chat fixture: tests/ref/make_chat_fixture.py")
    with open(os.path.join(FIX, "chat_ids_smollm2.txt"), "w") as fp:
        fp.write("\n".join(lines) + "\n")
    hf = AutoTokenizer.from_pretrained(mtf.MODELS, gguf_file=mtf.SMOL)
    n_diff = sum(as_ids(hf.apply_chat_template(c, chat_template=tmpl, tokenize=True)) !=
                 as_ids(smol.apply_chat_template(c, chat_template=tmpl, tokenize=True)) for c in convs)
    print("smollm2: %d conversations rendered, %d refused; transformers' own GGUF conversion differs "
          "on %d (digit split)" % (n_ok, n_x, n_diff))

    gem = AutoTokenizer.from_pretrained(mtf.MODELS, gguf_file=mtf.GEMMA)
    lines, n_ok, n_x = build(gem, mtf.GEMMA3_TEMPLATE, GEMMA_MARKED, convs,
                             "Gemma 3 chat fixture: tests/ref/make_chat_fixture.py")
    with open(os.path.join(FIX, "chat_ids_gemma3.txt"), "w") as fp:
        fp.write("\n".join(lines) + "\n")
    print("gemma3: %d conversations rendered, %d refused" % (n_ok, n_x))


if __name__ == "__main__":
    main()

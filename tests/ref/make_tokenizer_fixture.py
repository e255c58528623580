#!/usr/bin/env python3
"""Build the tokenizer parity fixtures used by tests/test_tokenizer.c.

Reference: the Hugging Face `tokenizers` library (the fast tokenizers transformers uses).

SmolLM2 (tokenizer.ggml.model = "gpt2", pre = "smollm")
    transformers' GGUF converter (transformers 5.x) builds the SmolLM2 tokenizer with a plain
    ByteLevel pre-tokenizer and DROPS the Digits(individual_digits=True) step that the original
    SmolLM2 tokenizer.json has (and that llama.cpp's "smollm" pre-tokenizer implements).  So this
    script constructs the correct `tokenizers.Tokenizer` itself from the GGUF's vocab + merges:
        model        BPE(vocab, merges)   (no unk, no byte fallback)
        pre          Sequence([Digits(individual_digits=True),
                               ByteLevel(add_prefix_space=False, use_regex=True)])
        decoder      ByteLevel
        added tokens every token_type 3 (control) as special, 4 (user-defined) as non-special
    It also encodes the corpus with transformers' own conversion and prints how many strings
    differ (expected: only strings where a digit follows a space/punctuation merge candidate).
    parse_special = 0 is reproduced with `Tokenizer.encode_special_tokens = True`.

Gemma 3 (tokenizer.ggml.model = "llama"): transformers' GGUF converter builds a BPE model with
    byte fallback and merges derived from the SentencePiece scores; its output is recorded for a
    the same corpus.

Chat templates: SmolLM2's template is the GGUF's tokenizer.chat_template, rendered with
    transformers' apply_chat_template(add_generation_prompt=True, tokenize=False).  The Gemma 3
    GGUF carries no chat template, so the expected Gemma prompts are rendered from the published
    Gemma 3 template text (typed in below, the part relevant to system + one user turn), with the
    leading "<bos>" removed (afinar adds BOS at tokenization).

Output (all text, committed; regenerate with
    .venv-ref/bin/python tests/ref/make_tokenizer_fixture.py):
    tests/fixtures/tokenizer_smollm2.txt  tests/fixtures/tokenizer_gemma3.txt
    tests/fixtures/tokenizer_chat.txt
Line format: "T <hex utf-8 text>", then "P <ids>" (parse_special=1) and "R <ids>" or "R =" (same
as P) for parse_special=0.  Chat lines: "C <kind> <hex system or -> <hex user> <hex expected>".
The corpus is generated deterministically here (fixed seed, no network).
"""
import json
import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("AF_MODEL_DIR", os.path.join(ROOT, "models"))
FIX = os.path.join(ROOT, "tests", "fixtures")
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-Q4_K_M.gguf"

# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------
HAND = [
    "", " ", "  ", "\n", "\t", "a", "Hello world", "Hello, world!", "hello world ", " hello",
    "The quick brown fox jumps over the lazy dog.",
    "It's a dog's life, isn't it? We're sure they've said I'm fine and you'll see he'd go.",
    "IT'S LOUD. DON'T SHOUT. WE'RE HERE. THEY'VE GONE. I'M OK. YOU'LL SEE. HE'D LEAVE.",
    "rock 'n' roll, 'quoted' words, ''double'' and '' empty", "O'Neil's o'clock l'homme",
    "Ceci est une phrase en français, avec des accents : é è ê à ù ç œ.",
    "Das Straßenverkehrsamt prüft Übergrößen. Schön, größer, Äpfel, Öl.",
    "El niño comió piñatas en la mañana; ¿qué pasó? ¡Olé!",
    "Mỹ phẩm Việt Nam rất đẹp và chất lượng.", "Ελληνικά: Καλημέρα κόσμε!",
    "Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Українська мова: Ґанок, їжак, єдність.", "עברית: שלום עולם", "العربية: مرحبا بالعالم",
    "हिन्दी: नमस्ते दुनिया", "ไทย: สวัสดีชาวโลก", "中文：你好，世界！这是一个测试。",
    "日本語のテキスト、カタカナとひらがな。", "한국어 문장입니다. 안녕하세요!", "Türkçe: ığüşöç İĞÜŞÖÇ",
    "Polski: zażółć gęślą jaźń", "Čeština: příliš žluťoučký kůň úpěl ďábelské ódy",
    "Íslenska: Þjóðin ætti að læra", "Kiswahili: Habari ya asubuhi?",
    "e\u0301 (e + combining acute) vs \u00e9 (precomposed)", "n\u0303o\u0308",
    "NBSP\u00a0here and narrow\u202fnbsp and ideographic\u3000space",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom", "line\u2028separator\u2029para\u0085nel",
    "soft\u00adhyphen", "fullwidth １２３ ＡＢＣ", "superscripts x² y³ ¹⁄₂ ½ ¾", "Roman Ⅻ ⅻ ↁ",
    "Arabic-Indic ٠١٢٣٤٥٦٧٨٩ Devanagari ०१२ Thai ๑๒๓", "math 𝐀𝐁𝐂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚",
    "emoji 😀😃😄 👍🏽 ❤️ 🇫🇷🇯🇵", "family 👨\u200d👩\u200d👧\u200d👦 and 🏳️\u200d🌈 and 🧑🏿\u200d💻",
    "🤖\u200d👩x", "keycap 1️⃣ #️⃣", "mixed 😀abc😀123😀 😀 ", "☃ ★ ♥ ♦ ♣ ♠ → ← ↑ ↓ ∀ ∃ ∅ ∞ ≠ ≤ ≥",
    "~!@#$%^&*()_+`-=[]{}|;':\",./<>?\\", "...", "!!!???", "---===+++", "a...b", "(a), [b], {c}",
    "C'est l'été.", "“smart quotes” and ‘single’ — em dash – en dash … ellipsis",
    "int main(void) {\n    printf(\"hello %d\\n\", 42);\n    return 0;\n}\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "for (size_t i = 0; i < n; ++i) { sum += x[i] * w[i]; }",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "def f(x):\n    return x ** 2 + 3 * x - 1\n\n\nprint(f(10))\n",
    "class Foo:\n\tdef __init__(self):\n\t\tself.a = [1, 2, 3]\n",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)  # comment\n",
    "lambda x: x if x > 0 else -x", "    indented four\n        eight\n\ttab\n",
    '{"name": "afinar", "version": "0.1.0", "tags": ["c", "llm"], "n": 3.14, "ok": true}',
    '[{"id": 1, "text": "hi"}, {"id": 22, "text": "bye", "score": -0.5e-3}]',
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;",
    "https://example.com/path?query=1&b=two#frag", "user@example.org", "C:\\Users\\me\\file.txt",
    "$ ls -la /usr/bin | grep gcc && echo done", "x = 3.14159; y = 2.71828e-10; z = 0x1F; w = 0b1011",
    "1", "12", "123", "1234", "12345678901234567890", "3.14", "1,000,000", "1 000 000", "-42", "+7",
    "2024-06-01T12:34:56Z", "(555) 123-4567", "v1.2.3", "a1b2c3", "abc123def", "1st 2nd 3rd 4th",
    "100%", "$9.99", "€5,50", "¥1000", "10^6", "1e10", "0.000001", "99 bottles of beer",
    "Call me at 0800 123 456 or +44 20 7946 0958.",
    "a  b   c    d", "a\tb\t\tc", "a\nb\n\nc\n\n\n", "a\r\nb\r\n", "   leading", "trailing   ",
    "\n\n\nleading newlines", "trailing newlines\n\n\n", " \t \n \r\n ", "mixed \t\n spaces",
    "end with space ", "end with tab\t", "word\n  indented", "  \n  ", "\u00a0\u00a0", " \u3000 ",
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "<|im_start|>assistant\nSure!<|im_end|>\n<|endoftext|>", "<|endoftext|>", "<|im_end|>",
    "<|im_start|><|im_end|>", "<|im_start|> <|im_end|>", "text<|im_end|>text", " <|im_end|> ",
    "<|im_start|", "|im_end|>", "<|im_start|x", "<|IM_START|>", "<|im_start|>user<|im_start|>",
    "<repo_name>afinar<file_sep>src/main.c", "<filename>a.py\n<gh_stars>10", "<jupyter_code>1+1",
    "<issue_start>title<issue_comment>body<issue_closed>", "<empty_output>", "<reponame>x",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><pad>", "<unk>",
    "<jupyter_start><jupyter_text>t<jupyter_output>o<jupyter_script>", "<<|im_end|>>",
    "<0x41> <0xFF>", "▁▁ leading lower-one-eighth blocks ▁", "Ġ Ċ ĉ (byte-level glyphs)",
]

WORDS = [
    "the", "The", "of", "and", "to", "in", "is", "was", "that", "for", "it", "with", "as", "his",
    "on", "be", "at", "by", "I", "this", "had", "not", "are", "but", "from", "or", "have", "an",
    "they", "which", "one", "you", "were", "her", "all", "she", "there", "would", "their", "we",
    "tokenizer", "tokenization", "merges", "transformer", "fine-tuning", "LoRA", "GGUF", "SmolLM2",
    "Gemma", "quantization", "Q4_1", "AVX-512", "matmul", "backprop", "gradient", "learning_rate",
    "über", "naïve", "café", "résumé", "coöperate", "façade", "jalapeño", "Zürich", "São", "Paulo",
    "Kraków", "Ærøskøbing", "İstanbul", "straße", "ΑΒΓ", "αβγ", "Москва", "東京", "北京", "서울",
    "नमस्ते", "مرحبا", "שלום", "😀", "🚀", "👍🏻", "🇩🇪", "👩\u200d🔬", "∑", "∫", "√2", "π", "µs",
    "don't", "can't", "won't", "it's", "we're", "they've", "I'm", "you'll", "he'd", "DON'T", "It'S",
    "x", "y", "z", "foo", "bar", "baz", "qux", "0", "7", "42", "1999", "3.5", "1e-3", "x86_64",
    "snake_case", "camelCase", "PascalCase", "kebab-case", "SCREAMING_CASE", "__init__", "->", "=>",
    "::", "&&", "||", "!=", "==", "<=", ">=", "<<", ">>", "++", "--", "//", "/*", "*/", "#", "@",
    "...", "?!", "(", ")", "[", "]", "{", "}", "\"", "'", "`", ",", ";", ":", "%", "&", "|", "~",
]
SEPS = [" ", " ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "", "", ", ", ". ", " - ",
        "\u00a0", "\u3000", " \n", "\n ", " \t "]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<start_of_turn>",
            "<end_of_turn>", "<bos>", "<eos>"]

PROSE = (
    "Tokenization is the process of converting a sequence of characters into a sequence of "
    "tokens. Byte-level BPE starts from the 256 possible byte values, so any input can be "
    "represented without an unknown token. Merges learned on a corpus are applied greedily, "
    "lowest rank first, inside each pre-tokenized word. In 2019, GPT-2 popularised this scheme; "
    "by 2024, models such as SmolLM2 (135M, 360M and 1.7B parameters) still used it, with digits "
    "split one by one so that 12345 becomes 1 2 3 4 5. "
)


def gen_corpus():
    rnd = random.Random(20240601)
    out = list(HAND)
    # random word salads with varied separators
    for _ in range(560):
        n = rnd.randint(1, 12)
        s = ""
        for i in range(n):
            if i:
                s += rnd.choice(SEPS)
            s += rnd.choice(WORDS)
        if rnd.random() < 0.15:
            s = rnd.choice(["", " ", "\n", "  "]) + s
        if rnd.random() < 0.2:
            s += rnd.choice([" ", "  ", "\n", "\t", ".", "!", " \n"])
        out.append(s)
    # numbers in context
    for _ in range(150):
        k = rnd.randint(0, 5)
        if k == 0:
            num = str(rnd.randint(0, 10 ** rnd.randint(1, 15)))
        elif k == 1:
            num = "%.*f" % (rnd.randint(1, 6), rnd.uniform(-1000, 1000))
        elif k == 2:
            num = "%d-%02d-%02d" % (rnd.randint(1900, 2100), rnd.randint(1, 12), rnd.randint(1, 28))
        elif k == 3:
            num = "{:,}".format(rnd.randint(1000, 10 ** 9))
        elif k == 4:
            num = "%de%d" % (rnd.randint(1, 9), rnd.randint(-20, 20))
        else:
            num = "".join(rnd.choice("0123456789") for _ in range(rnd.randint(2, 30)))
        pre = rnd.choice(["", " ", "x", "$", "(", "v", "Total: ", "#", "-", "a", "\n", "='", "é"])
        post = rnd.choice(["", " ", "%", ")", "px", " items", "\n", ".", "th", "km", "'"])
        out.append(pre + num + post)
    # whitespace stress
    ws = [" ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2003", "\x0b", "\x0c"]
    for _ in range(110):
        parts = []
        for _ in range(rnd.randint(1, 6)):
            parts.append(rnd.choice(["a", "word", "1", ".", "é", "中", "😀", "<|im_end|>"]))
            parts.append("".join(rnd.choice(ws) for _ in range(rnd.randint(1, 7))))
        if rnd.random() < 0.5:
            parts = parts[:-1]
        out.append("".join(parts))
    # special tokens embedded in text
    for _ in range(70):
        n = rnd.randint(1, 5)
        s = ""
        for _ in range(n):
            s += rnd.choice(SPECIALS) if rnd.random() < 0.5 else rnd.choice(WORDS)
            s += rnd.choice(["", " ", "\n", "user\n", "assistant\n"])
        out.append(s)
    # contractions
    conts = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "'x"]
    for _ in range(60):
        w = rnd.choice(["it", "don", "we", "they", "I", "you", "he", "IT", "x", "", " ", "1", "é"])
        out.append(w + rnd.choice(conts) + rnd.choice(["", " ", " ok", "'", "s", "\n"]))
    # random unicode code points (valid, excluding surrogates), incl. rare categories
    for _ in range(60):
        s = ""
        for _ in range(rnd.randint(1, 10)):
            r = rnd.random()
            if r < 0.3:
                cp = rnd.randint(0x20, 0x7E)
            elif r < 0.6:
                cp = rnd.randint(0xA0, 0x2FFF)
            elif r < 0.8:
                cp = rnd.randint(0x3000, 0xD7FF)
            else:
                cp = rnd.randint(0xE000, 0x1FAFF)
            s += chr(cp)
        out.append(s)
    # long texts (performance + long fragments)
    out.append(PROSE * 8)
    out.append(" " * 300 + "x" + "\n" * 200 + "!" * 150)
    out.append(("def f(x):\n    return x + 1\n\n" * 40) + "# end")
    out.append("".join(rnd.choice(WORDS) + rnd.choice(SEPS) for _ in range(700)))
    return out


def hexs(s):
    return s.encode("utf-8").hex()


def ids_line(tag, ids):
    return tag + (" " + " ".join(map(str, ids)) if ids else "")


def read_gguf(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    f = r.fields

    def strs(key):
        fld = f[key]
        return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]

    def ints(key):
        fld = f[key]
        return [int(fld.parts[i][0]) for i in fld.data]

    tmpl = None
    if "tokenizer.chat_template" in f:
        tmpl = f["tokenizer.chat_template"].contents()
    return strs, ints, f, tmpl


def smollm_tokenizer(path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    strs, ints, _, tmpl = read_gguf(path)
    tokens = strs("tokenizer.ggml.tokens")
    types = ints("tokenizer.ggml.token_type")
    merges = []
    for m in strs("tokenizer.ggml.merges"):
        sp = m.index(" ", 1)
        merges.append((m[:sp], m[sp + 1:]))
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):
            added.append(AddedToken(t, special=(ty == 3), normalized=False))
    tk.add_tokens(added)
    return tk, tmpl


def encode_both(tk, s):
    tk.encode_special_tokens = False
    p = tk.encode(s, add_special_tokens=False).ids
    tk.encode_special_tokens = True
    r = tk.encode(s, add_special_tokens=False).ids
    tk.encode_special_tokens = False
    return p, r


GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = \"\" -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

CHAT_CASES = [
    (None, "hi"), (None, "What is 2+2?"), ("You are a pirate.", "Tell me a joke."),
    ("", "empty system"), (None, "multi\nline\nuser"), ("Système en français", "Bonjour ! 😀"),
]


def main():
    from transformers import AutoTokenizer
    corpus = gen_corpus()
    os.makedirs(FIX, exist_ok=True)
    smol_path = os.path.join(MODELS, SMOL)
    tk, tmpl = smollm_tokenizer(smol_path)
    hf = AutoTokenizer.from_pretrained(MODELS, gguf_file=SMOL)
    pre = json.loads(hf.backend_tokenizer.to_str())["pre_tokenizer"]
    lines = ["# SmolLM2 tokenizer parity fixture (tests/ref/make_tokenizer_fixture.py)",
             "N %d" % len(corpus)]
    n_same_rp = n_diff_tf = 0
    for s in corpus:
        p, r = encode_both(tk, s)
        assert tk.decode(p, skip_special_tokens=False) == s, repr(s)
        if hf.encode(s, add_special_tokens=False) != p:
            n_diff_tf += 1
        lines.append("T " + hexs(s))
        lines.append(ids_line("P", p))
        if r == p:
            lines.append("R =")
            n_same_rp += 1
        else:
            lines.append(ids_line("R", r))
    with open(os.path.join(FIX, "tokenizer_smollm2.txt"), "w") as fp:
        fp.write("\n".join(lines) + "\n")
    print("smollm2: %d strings (%d with parse_special on == off); transformers' own GGUF "
          "conversion (pre_tokenizer %s) differs on %d strings" %
          (len(corpus), n_same_rp, pre.get("type"), n_diff_tf))

    chat = ["# chat template fixture: C <kind> <hex system or -> <hex user> <hex expected>"]
    for sys_msg, user in CHAT_CASES:
        msgs = ([] if sys_msg is None else [{"role": "system", "content": sys_msg}]) + \
               [{"role": "user", "content": user}]
        exp = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        chat.append("C chatml %s %s %s" % ("-" if sys_msg is None else hexs(sys_msg), hexs(user),
                                           hexs(exp)))
    gem = None
    gemma_path = os.path.join(MODELS, GEMMA)
    if os.path.exists(gemma_path) and "--no-gemma" not in sys.argv:
        gem = AutoTokenizer.from_pretrained(MODELS, gguf_file=GEMMA)
        for sys_msg, user in CHAT_CASES:
            msgs = ([] if sys_msg is None else [{"role": "system", "content": sys_msg}]) + \
                   [{"role": "user", "content": user}]
            exp = gem.apply_chat_template(msgs, chat_template=GEMMA3_TEMPLATE,
                                          add_generation_prompt=True, tokenize=False)
            assert exp.startswith("<bos>")
            chat.append("C gemma %s %s %s" % ("-" if sys_msg is None else hexs(sys_msg),
                                              hexs(user), hexs(exp[len("<bos>"):])))
    with open(os.path.join(FIX, "tokenizer_chat.txt"), "w") as fp:
        fp.write("\n".join(chat) + "\n")

    if gem is not None:
        bt = gem.backend_tokenizer
        sub = corpus
        lines = ["# Gemma 3 tokenizer parity fixture (transformers GGUF conversion; ids without BOS)",
                 "N %d" % len(sub)]
        for s in sub:
            p, r = encode_both(bt, s)
            lines.append("T " + hexs(s))
            lines.append(ids_line("P", p))
            lines.append("R =" if r == p else ids_line("R", r))
        with open(os.path.join(FIX, "tokenizer_gemma3.txt"), "w") as fp:
            fp.write("\n".join(lines) + "\n")
        print("gemma3: %d strings" % len(sub))


if __name__ == "__main__":
    main()

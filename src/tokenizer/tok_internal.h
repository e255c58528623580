/*
 * tok_internal.h — private to src/tokenizer/: the tokenizer struct and the per-model encoders.
 * Not part of any contract; only tokenizer.c, bpe.c, spm.c, chat.c, chat_layouts.c, chat_tools.c and chat_json.c
 * include it.
 */
#ifndef AF_TOK_INTERNAL_H
#define AF_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF tokenizer.ggml.token_type values (llama.cpp LLAMA_TOKEN_TYPE_*). */
enum { AF_TT_NORMAL = 1, AF_TT_UNKNOWN = 2, AF_TT_CONTROL = 3, AF_TT_USER = 4, AF_TT_UNUSED = 5,
       AF_TT_BYTE = 6 };

typedef enum af_tok_kind { AF_TOK_GPT2 = 1, AF_TOK_SPM = 2 } af_tok_kind;

/* A growable id vector used while encoding. */
typedef struct af_ids {
    int32_t *v;
    size_t n, cap;
} af_ids;
af_status af_ids_push(af_ids *o, int32_t id);

/* Open-addressing hash from a byte string to a token id. `slots[i]` = id + 1, 0 = empty. */
typedef struct af_strmap {
    uint32_t *slots;
    uint32_t mask;
} af_strmap;

/* (left id, right id) -> (merge rank, merged id); open addressing, key UINT64_MAX = empty. */
typedef struct af_pairmap {
    uint64_t *keys;
    int32_t *rank;
    int32_t *res;
    uint64_t mask;
} af_pairmap;

typedef struct af_bpe_pre af_bpe_pre; /* compiled pre-tokenizer regexes (bpe.c) */

struct af_tokenizer {
    af_tok_kind kind;
    int32_t n_vocab;
    char *text;       /* token texts as stored in the GGUF, back to back */
    uint32_t *off;    /* [n_vocab + 1] offsets into text */
    char *dec;        /* decoded bytes of every token (byte map undone, '▁' -> ' ', <0xNN> -> byte) */
    uint32_t *doff;   /* [n_vocab + 1] offsets into dec */
    int32_t *type;    /* [n_vocab] AF_TT_* */
    float *score;     /* [n_vocab] SPM scores (NULL for gpt2) */
    uint8_t *eog;     /* [n_vocab] 1 = ends generation */
    af_strmap vocab;  /* token text -> id */

    /* literal special / added tokens (types unknown, control, user-defined) */
    af_strmap special;         /* text -> id, only those tokens */
    uint32_t *special_lens;    /* per first byte: distinct lengths, longest first, 0-terminated */
    uint32_t special_lens_off[257];
    uint32_t special_max_len;

    int32_t bos, eos, unk, eot;
    bool add_bos, add_eos;

    /* gpt2 */
    int32_t byte_tok[256];     /* id of the one-char token for each byte (-1 if absent) */
    af_pairmap merges;
    int32_t n_merges;
    af_bpe_pre *pre;
    char pre_name[32];
    bool ignore_merges;        /* HF BPE ignore_merges: a pre-token that is a vocabulary token is emitted whole */
    bool nfc;                  /* NFC-normalise the text between special tokens before encoding (libutf8proc) */

    /* spm */
    bool add_space_prefix;
    bool prefix_unless_space;  /* HF Metaspace: no prefix when the text already starts with ' ' */
    bool prefix_each_segment;  /* the prefix also after every special token (llama.cpp SPM; HF Prepend
                                  normalizer / Metaspace "always", applied per split), not only at the start */
    bool spm_rank_by_id;       /* Gemma: merge priority = lower merged-token id (see spm.c) */

    char *chat_template; /* owned copy or NULL */
    char desc[160];
};

/* What a front end (GGUF metadata: tokenizer.c; tokenizer.json: tok_hf.c) hands the one builder,
 * af_tok_build(), which fills the tables the encoders below use. All pointers are borrowed for
 * the call (the builder copies what it keeps). */
typedef struct af_tok_str {
    const char *ptr;
    size_t len;
} af_tok_str;

typedef struct af_tok_spec {
    const char *label;        /* file, for messages */
    af_tok_kind kind;
    int32_t n;                /* vocabulary size, 1..16M */
    const af_tok_str *tok;    /* [n] token texts as stored (byte-level / U+2581 spelling) */
    const int32_t *type;      /* [n] AF_TT_* */
    const float *score;       /* [n] SPM scores, or NULL */
    bool respell_spaces;      /* GGUF SPM: tokens of only ' ' are respelled with U+2581 */
    int64_t n_merges;         /* explicit merges (gpt2: required; spm: optional, else by score/id) */
    const af_tok_str *merge;  /* [2 * n_merges]: left, right of merge i (rank i) */
    const char *pre;          /* gpt2 pre-tokenizer name (bpe.c kPre) */
    bool ignore_merges;       /* gpt2: HF BPE ignore_merges (Llama 3 tokenizer.json) */
    bool nfc;                 /* normalizer NFC (tokenizer.json; GGUF pre "qwen2") */
    size_t pre_len;
    int32_t bos, eos, unk, eot, eom; /* ids in [0, n) or -1 */
    bool add_bos, add_eos, add_space_prefix;
    bool prefix_unless_space; /* HF Metaspace prepend: not when the text starts with ' ' */
    bool prefix_each_segment; /* see af_tokenizer */
    bool spm_rank_by_id;      /* without explicit merges: Gemma's rank (spm.c) */
    const char *chat_template; /* or NULL */
    size_t chat_template_len;
    const char *source;       /* "" or e.g. " from tokenizer.json", appended to the description */
} af_tok_spec;

/* Build `t` (zero-initialised) from `s`. Errors: AF_ERR_FORMAT, AF_ERR_UNSUPPORTED (pre), AF_ERR_NOMEM. */
af_status af_tok_build(af_tokenizer *t, const af_tok_spec *s);

/* (left id, right id) -> rank and merged id; false when the pair has no merge (bpe.c). */
bool af_pair_get(const af_pairmap *m, int32_t l, int32_t r, int32_t *rank, int32_t *res);

/* Hash tables (tokenizer.c). */
int32_t af_strmap_get(const af_strmap *m, const char *texts, const uint32_t *off, const char *s,
                      size_t len);

/* gpt2 (bpe.c). */
/* Byte map and the pre-tokenizer named `pre`. Errors: AF_ERR_UNSUPPORTED (pre), AF_ERR_NOMEM. */
af_status af_bpe_load(af_tokenizer *tok, const char *label, const char *pre, size_t pre_len);
/* Merge table from s->merge (both kinds). Errors: AF_ERR_NOMEM. */
af_status af_bpe_merges(af_tokenizer *tok, const af_tok_spec *s);
/* The bpe.c pre-tokenizer name whose regex sequence is exactly `re[0..n)` (HF Split patterns /
 * ByteLevel's built-in regex), or NULL. */
const char *af_bpe_pre_from_regex(const char *const *re, int n);
/* HF ByteLevel(use_regex=true)'s built-in split pattern (GPT-2) and Digits(individual_digits). */
extern const char af_bpe_gpt2_regex[];
extern const char af_bpe_digit_regex[];
void af_bpe_free(af_tokenizer *tok);
/* Decode one byte-level token text s[0..len) (GPT-2 byte-to-unicode map undone; code points outside
 * the map are copied as UTF-8). Writes at most `len` bytes to `out`, returns the count. */
size_t af_bpe_decode_token(const char *s, size_t len, char *out);
/* Encode a valid UTF-8 run (no special tokens inside). Errors: AF_ERR_NOMEM. */
af_status af_bpe_encode(const af_tokenizer *tok, const char *s, size_t len, af_ids *out);

/* spm (spm.c). */
size_t af_spm_decode_token(const af_tokenizer *tok, int32_t id, char *out);
af_status af_spm_encode(const af_tokenizer *tok, const char *s, size_t len, bool first, af_ids *out);

/* Length of the valid UTF-8 sequence starting at s[0] (1..4), or 0 if s[0..] is not valid UTF-8
 * (overlong, surrogate, > U+10FFFF, truncated). `n` = bytes available. */
int af_utf8_valid_len(const unsigned char *s, size_t n);

/* chat documents (chat.c), shared by the layouts of chat.c and chat_layouts.c. */
/* Append s[0..n) to d->text (no piece made); 0 and d->oom set when out of memory. */
int af_chat_put(af_chat_doc *d, const char *s, size_t n);
/* Make text[off..d->len) (already appended) a piece: a target (loss) piece whose first `head`
 * bytes are a role header, or a non-target piece merged into an adjacent non-target one. */
void af_chat_end_piece(af_chat_doc *d, size_t off, int target, size_t head);
/* af_chat_doc_add_text of a NUL-terminated string. */
void af_chat_add_str(af_chat_doc *d, const char *s, int target, size_t head);
/* Jinja `trim` (Python str.strip()): s[*b..*e) without leading/trailing Unicode white space. */
void af_chat_trim(const char *s, size_t len, size_t *b, size_t *e);
/* The layouts of chat_layouts.c (docs/FORMATS.md §6.4): render m[0..n) into d, assistant messages
 * from target_from on as targets. Errors: AF_ERR_FORMAT (a conversation the model's template
 * refuses; the message names messages[i]). */
af_status af_chat_render_llama3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                                int32_t target_from, int gen, af_chat_doc *d);
af_status af_chat_render_qwen3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                               int32_t target_from, int gen, af_chat_doc *d);
af_status af_chat_render_deepseek_r1(const af_tokenizer *tok, const af_chat_msg *m, int32_t n,
                                     int32_t target_from, int gen, af_chat_doc *d);
af_status af_chat_render_phi3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                              int gen, af_chat_doc *d);
af_status af_chat_render_mistral(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                                 int32_t target_from, int gen, af_chat_doc *d);
af_status af_chat_render_smollm3(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, int32_t target_from,
                                 int gen, af_chat_doc *d);

/* Tool turns (chat_tools.c). x may be NULL everywhere (no tools). */
/* Checks the tools JSON, the calls' names and argument objects, and that family fam (with tok's
 * template) has tool turns when any are present. Errors: as af_chat_render_ex. */
af_status af_chat_tools_check(const af_tokenizer *tok, af_chat_family fam, const af_chat_msg *m, int32_t n,
                              const af_chat_extra *x);
/* JSON (chat_json.c). Checks that s[0..n) is one JSON value (a '{' object / '[' array when want is
 * one of them, 0: any); NULL when it is, else what is wrong (*at: its byte offset). */
const char *af_chat_json_check(const char *s, size_t n, char want, size_t *at);
/* The decoded text of the JSON string literal s[0..n) (with its quotes; validated), as Jinja writes a
 * string value: no quotes, no escapes. */
void af_chat_put_json_raw(af_chat_doc *d, const char *s, size_t n);
/* Members of the JSON object s[0..n) (validated), in order: key literal s[kb..ke) (with quotes), value
 * s[vb..ve). Writes up to max into m and returns the count. */
typedef struct af_chat_json_member {
    size_t kb, ke, vb, ve;
} af_chat_json_member;
int32_t af_chat_json_members(const char *s, size_t n, af_chat_json_member *m, int32_t max);
/* Whether member m's decoded key is `key`. */
int af_chat_json_key_is(const char *s, const af_chat_json_member *m, const char *key);
/* Spans [b[k], e[k]) in x->tools of its first max tool definitions. */
void af_chat_tools_spans(const af_chat_extra *x, size_t *b, size_t *e, int32_t max);
/* Number of tool definitions in x->tools (0: none). */
int32_t af_chat_tools_count(const af_chat_extra *x);
/* Append the JSON value s[0..n) (validated) as Python's json.dumps writes it (indent 0: one line). */
void af_chat_put_json(af_chat_doc *d, const char *s, size_t n, int indent);
/* Append s[0..n) (UTF-8 text) as a JSON string literal, as json.dumps(str, ensure_ascii=False). */
void af_chat_put_json_string(af_chat_doc *d, const char *s, size_t n);
/* Append each tool of x as before + json.dumps(tool, indent) + after. */
void af_chat_put_tools(af_chat_doc *d, const af_chat_extra *x, const char *before, const char *after, int indent);
/* Hermes-style (Qwen) pieces: the system turn "<|im_start|>system\n{pre}\n\n# Tools...<|im_end|>\n"
 * ("\n\n" after pre only when pre_len > 0 or sep); one call "<tool_call>\n{...}\n</tool_call>"
 * (without a preceding "\n"); the tool results m[i..] (role tool, consecutive) as one user turn,
 * returning the index after them. */
void af_chat_hermes_system(af_chat_doc *d, const af_chat_extra *x, const char *pre, size_t pre_len, int sep);
void af_chat_hermes_call(af_chat_doc *d, const af_chat_call *c);
int32_t af_chat_hermes_results(af_chat_doc *d, const af_chat_msg *m, int32_t n, int32_t i);
/* Mistral Nemo's tools list: "[AVAILABLE_TOOLS][" + per tool {"type": "function", "function": {...}}
 * with the members of the tool's "function" object except "return" (string values written raw, as
 * the template does, others as tojson) + "][/AVAILABLE_TOOLS]". Errors: AF_ERR_FORMAT (a tool
 * without a "function" object). */
af_status af_chat_mistral3_tools(af_chat_doc *d, const af_chat_extra *x);
/* Mistral's 9-character tool-call ids of message i (its calls' ids, a tool result's call_id):
 * AF_ERR_FORMAT naming the field. */
af_status af_chat_mistral_tool_ids(const af_chat_msg *mi, const af_chat_msg_x *mx, int32_t i);
af_status af_chat_render_qwq(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                             int32_t target_from, int gen, af_chat_doc *d);
af_status af_chat_render_mistral7(const af_tokenizer *tok, const af_chat_msg *m, int32_t n, const af_chat_extra *x,
                                  int32_t target_from, int gen, af_chat_doc *d);

#endif /* AF_TOK_INTERNAL_H */

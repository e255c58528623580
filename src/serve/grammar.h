/* grammar.h — constrained decoding for `afinar serve`'s "response_format" (grammar.c): a subset of
 * JSON Schema compiled into a byte-level matcher, and the mask it puts on the sampler's logits so
 * that the generated text is always a prefix of a JSON text that parses and validates.
 *
 * Supported schema keywords (docs/SERVING.md, "Structured output"): type (a name or a list of
 * names: object, array, string, number, integer, boolean, null), properties, required, enum,
 * const, items, minItems, maxItems, additionalProperties (only to give the value schema of an object
 * without properties); annotations (title, description, default, examples, $schema, $id, $comment)
 * are ignored; any other keyword is refused (so the output never breaks a rule it does not
 * enforce). Between two tokens of the JSON text: nothing, one space, or a newline and up to 20 spaces or tabs
 * (none after its end); an object with
 * "properties" holds only those keys, each at most once, the required ones always. */
#ifndef AF_SERVE_GRAMMAR_H
#define AF_SERVE_GRAMMAR_H

#include "serve/serve.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_GRAMMAR_MAX_DEPTH 32 /* nesting of the matcher's frames (a schema level takes 2) */

typedef struct srv_gstate srv_gstate;

typedef struct srv_vocab_index srv_vocab_index;

/* The byte strings of a tokenizer's tokens: token i is bytes[off[i] .. off[i+1]), eog[i] = 1 for an
 * end-of-generation token; idx: the index of the fast mask (srv_vocab_build_index; NULL: the mask
 * feeds every token alone). Owned by the caller of srv_vocab_new (srv_vocab_free). */
typedef struct srv_vocab {
    int32_t n;
    uint32_t *off; /* [n + 1] */
    char *bytes;
    uint8_t *eog;  /* [n] */
    srv_vocab_index *idx;
} srv_vocab;

/* The vocabulary of `tok` (af_token_to_bytes of every id, af_token_is_eog), with its index. A
 * control token has no bytes (never allowed), except where keep(its rendered text, length) returns
 * 1 (keep may be NULL). NULL when out of memory. */
srv_vocab *srv_vocab_new(const af_tokenizer *tok, int (*keep)(const char *s, size_t n));
/* Build v->idx from v's tokens (replacing an older one): the tokens with bytes sorted by their
 * bytes, each one's common prefix length with the one before, and which of them are "plain" string
 * text (complete UTF-8 characters, no '"', '\\' or control byte). Memory: 9 bytes per token. 0 when
 * out of memory (v->idx is then NULL). */
int srv_vocab_build_index(srv_vocab *v);
void srv_vocab_free(srv_vocab *v); /* the index too */

/* Parse a request's "response_format" value rf: {"type": "text"} (*out = NULL), {"type":
 * "json_object"} (any JSON object) or {"type": "json_schema", "json_schema": {"name", "schema",
 * "strict"}} (the schema compiled; keywords above). Returns 1 and *out (owned by the caller:
 * srv_grammar_free), or 0 and *err: a 400 whose param names the field
 * ("response_format.json_schema.schema.properties.age.minimum") and why. */
int srv_grammar_from_format(const cJSON *rf, srv_grammar **out, srv_err *err);
/* Compile a JSON schema alone (the json_schema's "schema"); param/message of *err as above with
 * `path` as the prefix of the field names. */
int srv_grammar_compile(const cJSON *schema, const char *path, srv_grammar **out, srv_err *err);
void srv_grammar_free(srv_grammar *g);
/* Literal text the output must start with (before the document) and end with (after it); NULL or
 * "": none. 0 when out of memory. */
int srv_grammar_set_affixes(srv_grammar *g, const char *prefix, const char *suffix);
/* The same with several alternatives of the prefix (prefixes[n]: the output starts with one of
 * them; none may be a prefix of another). 0 when out of memory or not prefix-free. */
int srv_grammar_set_prefixes(srv_grammar *g, const char *const *prefixes, int32_t n, const char *suffix);

/* A matcher at the start of the text (NULL: out of memory); the grammar must outlive it. */
srv_gstate *srv_gstate_new(const srv_grammar *g);
void srv_gstate_free(srv_gstate *st);
/* Feed n bytes: 1 when the text so far is still a prefix of a valid document (the state advanced),
 * 0 when not (the state is then unspecified: feed a copy, srv_gstate_copy, to try). */
int srv_gstate_feed(srv_gstate *st, const char *bytes, size_t n);
/* 1 when the text so far is a whole valid document (an end-of-generation token may come now). */
int srv_gstate_can_end(const srv_gstate *st);
/* 1 when the document is complete and no byte can follow (the generation can stop at once). */
int srv_gstate_done(const srv_gstate *st);
void srv_gstate_copy(srv_gstate *dst, const srv_gstate *src);
/* A new copy of st (srv_gstate_free); NULL when out of memory. */
srv_gstate *srv_gstate_clone(const srv_gstate *st);
/* 1 when the next byte is read as the text of a string at a character boundary (not after a
 * backslash, in a \u escape or inside a UTF-8 character): every "plain" token is then accepted. */
int srv_gstate_in_string(const srv_gstate *st);
/* Mask logits [n_logits] in place: -INFINITY for every token whose bytes would make the text
 * invalid, for an end-of-generation token unless srv_gstate_can_end, for tokens without bytes and
 * for ids >= v->n (padding rows of the LM head). Returns the number of tokens left allowed (0:
 * none; the caller ends the generation). With v->idx (grammar_mask.c): the tokens are walked in byte order, a shared prefix is fed once,
 * a refused prefix refuses every token that starts with it without feeding them, and inside a
 * string the plain tokens are accepted without feeding (out of memory for its scratch states: the
 * simple mask); the result is exactly srv_gstate_mask_simple's (tests/test_grammar.c, tests/test_grammar_vocab.c). */
int32_t srv_gstate_mask(const srv_gstate *st, const srv_vocab *v, float *logits, int32_t n_logits);
/* The same mask by the definition (the reference of the fast one): one copy of the state and a
 * feed of its bytes per token whose first byte can come next. Never fails. */
int32_t srv_gstate_mask_simple(const srv_gstate *st, const srv_vocab *v, float *logits, int32_t n_logits);

#endif

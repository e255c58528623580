"""afinar.Model: a loaded language model (GGUF file or Hugging Face directory) with its tokenizer,
chat template, text generation, logits and classification with a trained adapter."""
from __future__ import annotations

import codecs
import ctypes
import json
import os
import warnings
from ctypes import POINTER, byref, c_char_p, c_float, c_int32, c_size_t, c_uint64, c_void_p
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._lib import check, lib, take_string
from ._util import Flag, check_float, check_int, path_bytes, run_interruptible, to_bytes
from .errors import InvalidInput, NotFound

Messages = Sequence[Dict[str, str]]

_MAX_TOKENS = 1 << 24  # ids accepted in one call (logits, detokenize): 16M


def make_ctx(device: Optional[str], threads: Optional[int], quantize: Optional[str] = None):
    """A new af_ctx (caller frees with af_ctx_free) for `device` ("cpu", "vulkan", "vulkan:N",
    "auto"; None: "cpu"), `threads` (None or 0: one per CPU) and `quantize` (None: as stored)."""
    p = _lib.CtxParams()
    lib.af_ctx_params_default(byref(p))
    keep = []
    if threads is not None:
        p.n_threads = check_int(threads, "threads", 0, 1024)
    if device is not None:
        b = to_bytes(device, "device")
        keep.append(b)
        p.device = b
    if quantize is not None:
        b = to_bytes(quantize, "quantize")
        keep.append(b)
        p.quantize = b
    ctx = c_void_p()
    check(lib.af_ctx_new(byref(p), byref(ctx)))
    return ctx


def _messages_args(messages, what="messages"):
    """(roles, contents, lens) ctypes arrays of a list of {"role", "content"} dicts."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)):
        raise InvalidInput("%s: expected a list of {'role': ..., 'content': ...} dicts, got %s"
                           % (what, type(messages).__name__), 5, "AF_ERR_INVALID_ARG")
    if not messages:
        raise InvalidInput("%s: empty list" % what, 5, "AF_ERR_INVALID_ARG")
    roles, contents = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise InvalidInput("%s[%d]: expected a dict with 'role' and 'content'" % (what, i), 5,
                               "AF_ERR_INVALID_ARG")
        roles.append(to_bytes(m["role"], "%s[%d].role" % (what, i)))
        contents.append(to_bytes(m["content"], "%s[%d].content" % (what, i)))
    n = len(roles)
    return ((c_char_p * n)(*roles), (c_char_p * n)(*contents), (c_size_t * n)(*[len(c) for c in contents]), n,
            (roles, contents))


class _StopMatcher:
    """Cuts streamed text at the first of the stop strings; holds back a tail that may begin one."""

    def __init__(self, stop):
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        elif not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
            raise InvalidInput("stop: expected a str or a list of str", 5, "AF_ERR_INVALID_ARG")
        self.stop = [s for s in stop if s]
        self.buf = ""
        self.done = False

    def feed(self, text: str) -> str:
        """The text that can be emitted now."""
        self.buf += text
        if not self.stop:
            out, self.buf = self.buf, ""
            return out
        cut = min((i for i in (self.buf.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            out, self.buf, self.done = self.buf[:cut], "", True
            return out
        hold = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self.buf)), 0, -1):
                if self.buf.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.buf[:len(self.buf) - hold]
        self.buf = self.buf[len(self.buf) - hold:]
        return out

    def flush(self) -> str:
        out, self.buf = self.buf, ""
        return out


class Model:
    """A language model loaded from a GGUF file or a Hugging Face checkpoint directory.

    Model(path, device="cpu", threads=None, quantize=None)

    path      str or path-like: a .gguf file or a directory with config.json, *.safetensors and
              tokenizer.json (llama, Qwen2/3, Gemma 3/4).
    device    "cpu" (default), "vulkan", "vulkan:N" or "auto".
    threads   compute threads; None: one per CPU this process may run on.
    quantize  None (weights as stored), "nf4", "q8_0", "f16" or "bf16" (projections converted at load).

    The file is memory-mapped; ``close()`` (or a ``with`` block) releases it. A model is used by one
    thread at a time.
    Raises NotFound (missing file), InvalidInput (malformed file), Unsupported (architecture or
    tensor type), OutOfMemory, DeviceError.
    """

    def __init__(self, path, device: Optional[str] = "cpu", threads: Optional[int] = None,
                 quantize: Optional[str] = None):
        self._ctx = None
        self._model = None
        self._classifiers = {}
        self.path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
        pb = path_bytes(path, "path")
        self.device = device
        self.threads = threads
        self.quantize = quantize
        self._ctx = make_ctx(device, threads, quantize)
        m = c_void_p()
        check(lib.af_model_load(self._ctx, pb, byref(m)))
        self._model = m
        self._tok = lib.af_model_tokenizer(m)
        cfg = lib.af_model_get_config(m).contents
        self.info = {
            "architecture": cfg.architecture.decode("utf-8", "replace"),
            "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": cfg.head_dim,
            "max_position_embeddings": cfg.max_position_embeddings,
            "context_length": cfg.max_position_embeddings,
            "rms_norm_eps": float(cfg.rms_norm_eps),
            "rope_theta": float(cfg.rope_theta),
            "tie_word_embeddings": bool(cfg.tie_word_embeddings),
            "bos_token_id": lib.af_token_bos(self._tok) if self._tok else None,
            "eos_token_id": lib.af_token_eos(self._tok) if self._tok else None,
            "device": lib.af_ctx_device(self._ctx).decode(),
            "threads": lib.af_ctx_n_threads(self._ctx),
            "path": self.path,
        }
        """dict: the hyper-parameters (Hugging Face config.json names), context_length (trained
        positions), bos/eos token ids (None without a tokenizer), the device and thread count."""

    # ---- lifetime ----
    def close(self) -> None:
        """Free the model, its classifiers and its context (the object is unusable afterwards)."""
        for c in self._classifiers.values():
            lib.af_classifier_free(c)
        self._classifiers = {}
        if self._model:
            lib.af_model_free(self._model)
            self._model = None
        if self._ctx:
            lib.af_ctx_free(self._ctx)
            self._ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self):
        return "afinar.Model(%r, architecture=%r, device=%r)" % (self.path, self.info.get("architecture"),
                                                              self.info.get("device"))

    def _live(self):
        if not self._model:
            raise InvalidInput("the model was closed", 5, "AF_ERR_INVALID_ARG")
        return self._model

    def _tokenizer(self):
        self._live()
        if not self._tok:
            why = lib.af_model_tokenizer_error(self._model)
            raise NotFound("%s: the model has no usable tokenizer (%s)"
                           % (self.path, why.decode("utf-8", "replace") if why else "none"), 6, "AF_ERR_NOT_FOUND")
        return self._tok

    # ---- tokenizer ----
    def tokenize(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> List[int]:
        """Token ids (list of int) of the str `text`.

        add_special_tokens: add BOS/EOS as the model's metadata asks (SmolLM2: none; Gemma: BOS).
        parse_special: special-token texts such as "<|im_start|>" become their single token (as
        transformers' tokenizers do); False tokenizes them as plain text.
        Raises InvalidInput (not a str, a NUL character; bytes that are not UTF-8 and have no byte
        token in the vocabulary), NotFound (no tokenizer)."""
        tok = self._tokenizer()
        b = to_bytes(text, "text")
        ids = POINTER(c_int32)()
        n = c_size_t()
        check(lib.af_tokenize(tok, b, len(b), int(bool(add_special_tokens)), int(bool(parse_special)),
                              byref(ids), byref(n)))
        try:
            return ids[:n.value] if n.value else []
        finally:
            _lib.c_free(ids)

    def _ids_array(self, ids, what="ids", limit=_MAX_TOKENS):
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                raise InvalidInput("%s: expected a 1-D integer array, got shape %s dtype %s"
                                   % (what, ids.shape, ids.dtype), 5, "AF_ERR_INVALID_ARG")
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)):
            raise InvalidInput("%s: expected a list of int, got %s" % (what, type(ids).__name__), 5,
                               "AF_ERR_INVALID_ARG")
        if len(ids) > limit:
            raise InvalidInput("%s: %d tokens, more than %d" % (what, len(ids), limit), 7, "AF_ERR_RANGE")
        V = self.info["vocab_size"]
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                raise InvalidInput("%s[%d]: expected an int, got %s" % (what, i, type(t).__name__), 5,
                                   "AF_ERR_INVALID_ARG")
            if t < 0 or t >= V:
                raise InvalidInput("%s[%d]: token id %d outside [0, %d)" % (what, i, t, V), 7, "AF_ERR_RANGE")
        return (c_int32 * len(ids))(*[int(t) for t in ids])

    def detokenize(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of token ids (a list of int or a 1-D integer array). Bytes that are not valid
        UTF-8 (a cut multi-byte character) become U+FFFD. skip_special_tokens=False renders control
        tokens ("<|im_end|>") as their text. Raises InvalidInput (a non-int, an id out of range)."""
        tok = self._tokenizer()
        arr = self._ids_array(ids)
        out = c_void_p()
        check(lib.af_detokenize(tok, arr, len(arr), int(not skip_special_tokens), byref(out)))
        return take_string(out)

    decode = detokenize

    def apply_chat_template(self, messages: Messages, add_generation_prompt: bool = True,
                            chat_template: Optional[str] = None, tokenize: bool = False):
        """The conversation `messages` ([{"role": "system"|"user"|"assistant", "content": str}, ...])
        rendered with the model's chat template (ChatML for SmolLM2 and Qwen, Gemma's turns), as
        afinar renders {"messages"} training data; add_generation_prompt appends the assistant
        header. chat_template: "chatml" | "gemma" | "gemma4" instead of the model's own.
        Returns the text (BOS not included: tokenize() adds it), or with tokenize=True its ids.
        Raises InvalidInput (bad message, unknown role, a NUL character, turns the template refuses),
        Unsupported (no template afinar renders)."""
        self._tokenizer()
        roles, contents, lens, n, keep = _messages_args(messages)
        tb = None if chat_template is None else to_bytes(chat_template, "chat_template")
        out = c_void_p()
        check(lib.af_chat_apply_template(self._model, tb, roles, contents, lens, n,
                                         int(bool(add_generation_prompt)), byref(out)))
        text = take_string(out)
        return self.tokenize(text) if tokenize else text

    # ---- evaluation ----
    def _session(self, n_ctx: int, adapter, lora_scale: float):
        s = c_void_p()
        check(lib.af_session_new(self._live(), int(n_ctx), byref(s)))
        if adapter is not None:
            try:
                check(lib.af_session_load_adapter(s, path_bytes(adapter, "adapter"), c_float(lora_scale)))
            except BaseException:
                lib.af_session_free(s)
                raise
        return s

    def _eval_cancellable(self, sess, arr, n, logits, all_logits):
        """af_session_eval on a worker thread; Ctrl-C sets the session's cancel flag."""
        flag = Flag()
        lib.af_session_set_control(sess, flag.ptr, None, None)

        def call():
            st = lib.af_session_eval(sess, arr, n, logits, all_logits)
            check(st)  # on the worker thread, where the library keeps the message

        try:
            run_interruptible(call, lambda k: flag.set())
        finally:
            lib.af_session_set_control(sess, None, None, None)

    def logits(self, ids: Sequence[int], adapter=None, lora_scale: float = 1.0) -> np.ndarray:
        """Next-token logits of every position of `ids` (a list of int or 1-D integer array):
        np.ndarray float32 of shape [len(ids), vocab_size]; row t scores the token after ids[t].
        The whole sequence is evaluated at once from position 0 (causal attention), with the LoRA
        adapter directory `adapter` applied unmerged when given (its scale times lora_scale).
        Memory: 4 * len(ids) * vocab_size bytes for the result.
        Raises InvalidInput (empty, ids out of range, longer than the model's context_length),
        NotFound / InvalidInput (adapter), Cancelled (Ctrl-C: KeyboardInterrupt is raised)."""
        arr = self._ids_array(ids, limit=self.info["context_length"])
        n = len(arr)
        if n == 0:
            raise InvalidInput("ids: empty", 5, "AF_ERR_INVALID_ARG")
        lora_scale = check_float(lora_scale, "lora_scale", -100, 100)
        out = np.empty((n, self.info["vocab_size"]), dtype=np.float32)
        sess = self._session(n, adapter, lora_scale)
        try:
            self._eval_cancellable(sess, arr, n, None, out.ctypes.data_as(POINTER(c_float)))
        finally:
            lib.af_session_free(sess)
        return out

    # ---- generation ----
    def generate(self, prompt: Union[str, Messages], max_new_tokens: int = 128, temperature: float = 0.8,
                 top_p: float = 0.95, top_k: int = 40, seed: int = 42, stop=None, adapter=None,
                 stream: bool = False, lora_scale: float = 1.0, ignore_eos: bool = False,
                 chat_template: Optional[str] = None):
        """Generate a continuation of `prompt`.

        prompt          a str (tokenized as is, special-token texts recognised, as
                        ``afinar generate -p``), or a list of messages rendered with
                        apply_chat_template(add_generation_prompt=True) (as ``--chat``).
        max_new_tokens  tokens generated at most (stops earlier at an end-of-generation token).
        temperature     0: greedy (argmax); top_k 0 and top_p 1 turn those filters off; order:
                        top-k, temperature, top-p (llama.cpp's). seed: the sampler's seed.
                        Defaults equal ``afinar generate``'s: same seed, same text.
        stop            a str or list of str: the text ends before the first occurrence.
        adapter         a LoRA adapter directory (afinar train / PEFT) or LoRA GGUF, applied unmerged
                        with its scale times lora_scale.
        stream          False: returns the generated str; True: returns an iterator of str pieces.
        Raises InvalidInput (bad argument; prompt + max_new_tokens longer than context_length),
        NotFound (adapter), Cancelled / KeyboardInterrupt (Ctrl-C during the prompt)."""
        max_new_tokens = check_int(max_new_tokens, "max_new_tokens", 1, 1 << 20)
        sp = _lib.Sampling(check_float(temperature, "temperature", 0, 100), check_int(top_k, "top_k", 0, 1 << 30),
                           check_float(top_p, "top_p", 0, 1), check_int(seed, "seed", 0, (1 << 64) - 1))
        lora_scale = check_float(lora_scale, "lora_scale", -100, 100)
        stopper = _StopMatcher(stop)
        if isinstance(prompt, str):
            text = prompt
        else:
            text = self.apply_chat_template(prompt, add_generation_prompt=True, chat_template=chat_template)
        ids = self.tokenize(text)
        if not ids:
            raise InvalidInput("the prompt is empty after tokenization", 5, "AF_ERR_INVALID_ARG")
        n_ctx = len(ids) + max_new_tokens
        if n_ctx > self.info["context_length"]:
            raise InvalidInput("context %d (prompt %d + max_new_tokens %d) exceeds the model's %d positions"
                               % (n_ctx, len(ids), max_new_tokens, self.info["context_length"]), 7, "AF_ERR_RANGE")
        gen = self._generate_pieces(ids, n_ctx, max_new_tokens, sp, adapter, lora_scale, ignore_eos, stopper)
        if stream:
            return gen
        return "".join(gen)

    def _generate_pieces(self, ids, n_ctx, max_new, sp, adapter, lora_scale, ignore_eos, stopper) -> Iterator[str]:
        tok = self._tokenizer()
        V = self.info["vocab_size"]
        sess = self._session(n_ctx, adapter, lora_scale)
        try:
            logits = (c_float * V)()
            arr = (c_int32 * len(ids))(*ids)
            self._eval_cancellable(sess, arr, len(ids), logits, None)
            rng = c_uint64(lib.af_rng_seed(sp.seed))
            dec = codecs.getincrementaldecoder("utf-8")("replace")
            piece = ctypes.create_string_buffer(256)
            one = (c_int32 * 1)()
            for i in range(max_new):
                t = lib.af_sample(logits, V, byref(sp), byref(rng))
                if not ignore_eos and lib.af_token_is_eog(tok, t):
                    break
                k = lib.af_token_to_bytes(tok, t, 0, piece, 256)
                if k > 0:
                    out = stopper.feed(dec.decode(piece.raw[:min(k, 256)]))
                    if out:
                        yield out
                    if stopper.done:
                        return
                if i + 1 == max_new:
                    break
                one[0] = t
                check(lib.af_session_eval(sess, one, 1, logits, None))
            out = stopper.feed(dec.decode(b"", final=True))
            if out:
                yield out
            if not stopper.done:
                rest = stopper.flush()
                if rest:
                    yield rest
        finally:
            lib.af_session_free(sess)

    # ---- classification ----
    def _classifier(self, adapter):
        key = os.path.abspath(os.fspath(adapter)) if isinstance(adapter, (str, os.PathLike)) else adapter
        if key not in self._classifiers:
            c = c_void_p()
            check(lib.af_classifier_load(self._ctx, None, self._live(), path_bytes(adapter, "adapter"), byref(c)))
            self._classifiers[key] = c
            note = lib.af_classifier_note(c)
            if note:  # what the loader assumed for a PEFT adapter without afinar.json
                warnings.warn(note.decode("utf-8", "replace"), stacklevel=3)
        return self._classifiers[key]

    def classify(self, texts: Union[str, Sequence[str]], adapter, batch_size: int = 8,
                 threshold: float = 0.5) -> List[dict]:
        """Predictions of the classifier adapter `adapter` (a directory written by afinar.train with
        task="classification", or a PEFT SEQ_CLS LoRA adapter) for each text of `texts` (a str or a
        list of str), in order, each a dict as ``afinar predict`` prints it:
          single-label  {"label": name, "label_id": int, "probabilities": {name: float}}
          multi-label   {"labels": [names], "label_ids": [ints], "probabilities": {name: float}}
        (softmax / sigmoid probabilities; multi-label keeps classes with p >= threshold). Texts are
        truncated to the adapter's max_seq_len tokens; batch_size texts per forward.
        Raises InvalidInput (not str, NUL characters, a bad adapter), NotFound, KeyboardInterrupt."""
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, (list, tuple)):
            try:
                texts = list(texts)
            except TypeError:
                raise InvalidInput("texts: expected a str or a list of str", 5, "AF_ERR_INVALID_ARG") from None
        batch_size = check_int(batch_size, "batch_size", 1, 1 << 20)
        threshold = check_float(threshold, "threshold", 0, 1)
        tb = [to_bytes(t, "texts[%d]" % i) for i, t in enumerate(texts)]
        if not tb:
            return []
        tok = self._tokenizer()
        c = self._classifier(adapter)
        C = lib.af_classifier_num_classes(c)
        names_p = lib.af_classifier_label_names(c)
        names = [names_p[i].decode("utf-8", "replace") for i in range(C)] if names_p else [str(i) for i in range(C)]
        n = len(tb)
        corp, ds = c_void_p(), c_void_p()
        try:
            check(lib.af_corpus_from_texts(b"<texts>", (c_char_p * n)(*tb), (c_size_t * n)(*[len(b) for b in tb]),
                                           n, 0, C, byref(corp)))
            check(lib.af_dataset_build(self._ctx, corp, tok, lib.af_classifier_max_seq_len(c), byref(ds)))
            probs = np.empty((n, C), dtype=np.float32)
            flag = Flag()
            lib.af_ctx_set_interrupt(self._ctx, flag.ptr)
            try:
                run_interruptible(lambda: check(lib.af_classifier_probs(c, ds, batch_size,
                                                                        probs.ctypes.data_as(POINTER(c_float)))),
                                  lambda k: flag.set())
            finally:
                lib.af_ctx_set_interrupt(self._ctx, None)
            out = []
            for i in range(n):
                js = c_void_p()
                check(lib.af_classifier_prediction_json(c, probs[i].ctypes.data_as(POINTER(c_float)), threshold,
                                                        byref(js)))
                d = json.loads(take_string(js))
                d["probabilities"] = {names[k]: float(probs[i, k]) for k in range(C)}
                d.pop("probs", None)
                out.append(d)
            return out
        finally:
            lib.af_dataset_free(ds)
            lib.af_corpus_free(corp)



"""Loading libafinar.so with ctypes and declaring the C functions the package calls.

ctypes (in the standard library) rather than cffi: importing the package needs no C compiler and
no extra dependency, and the C API is plain functions, opaque handles and a few small structs.
The library is the one the package's build step compiled with the project's Makefile
(``afinar/libafinar.so``); ``AFINAR_LIBRARY=/path/to/libafinar.so`` loads another one (a
development build).

Structs filled by the library (``*_default`` / ``*_init`` functions, results) carry a reserved
tail, so a library whose struct grew at the end never writes past the Python-side buffer.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint64, c_void_p)

from .errors import raise_for_status

_HERE = os.path.dirname(os.path.abspath(__file__))


def _find_library() -> str:
    env = os.environ.get("AFINAR_LIBRARY")
    if env:
        return env
    p = os.path.join(_HERE, "libafinar.so")
    if os.path.exists(p):
        return p
    raise ImportError(
        "afinar: libafinar.so is not in the package (%s); install the package with "
        "'pip install ./python' from the afinar repository (it builds the library with make), "
        "or set AFINAR_LIBRARY to a built libafinar.so" % _HERE)


LIBRARY_PATH = _find_library()
lib = ctypes.CDLL(LIBRARY_PATH)

# ---- opaque handles ----
af_ctx_p = c_void_p
af_model_p = c_void_p
af_tok_p = c_void_p
af_session_p = c_void_p
af_classifier_p = c_void_p
af_corpus_p = c_void_p
af_dataset_p = c_void_p
af_metrics_p = c_void_p
af_settings_p = c_void_p
c_int_p = POINTER(c_int)

PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_char_p, c_int64, c_int64)

_RESERVED = 256  # bytes past the known members of a struct the library fills


class CtxParams(Structure):
    _fields_ = [("n_threads", c_int), ("kernel_path", c_char_p), ("matmul_precision", c_char_p),
                ("int8_activations", c_int), ("poll_us", c_int), ("quantize", c_char_p),
                ("device", c_char_p), ("_reserved", c_char * _RESERVED)]


class ModelConfig(Structure):
    _fields_ = [("architecture", c_char * 32), ("vocab_size", c_int32), ("hidden_size", c_int32),
                ("intermediate_size", c_int32), ("num_hidden_layers", c_int32),
                ("num_attention_heads", c_int32), ("num_key_value_heads", c_int32),
                ("head_dim", c_int32), ("max_position_embeddings", c_int32),
                ("rms_norm_eps", c_float), ("rope_theta", c_float), ("tie_word_embeddings", c_int32)]


class Sampling(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float), ("seed", c_uint64)]


class CorpusOpts(Structure):
    _fields_ = [("text_field", c_char_p), ("label_field", c_char_p), ("label_names", POINTER(c_char_p)),
                ("n_label_names", c_int32), ("num_classes", c_int32), ("labels_optional", c_int),
                ("max_line_bytes", c_size_t), ("_reserved", c_char * _RESERVED)]


class LmDataOpts(Structure):
    _fields_ = [("max_seq_len", c_int32), ("loss_on", c_char_p), ("chat_template", c_char_p),
                ("report", c_void_p), ("max_line_bytes", c_size_t), ("_reserved", c_char * _RESERVED)]


class LmEvalResult(Structure):
    _fields_ = [("loss", c_double), ("perplexity", c_double), ("mean_token_accuracy", c_double),
                ("n_targets", c_int64), ("n_examples", c_int32), ("_reserved", c_char * _RESERVED)]


class MergeOpts(Structure):
    _fields_ = [("type", c_char_p), ("overwrite", c_int), ("_reserved", c_char * _RESERVED)]


class MergeStats(Structure):
    _fields_ = [("merged", c_int32), ("copied", c_int32), ("delta_rms", c_double),
                ("requant_rms", c_double), ("base_requant_rms", c_double), ("_reserved", c_char * _RESERVED)]


class ConvertOpts(Structure):
    _fields_ = [("type", c_char_p), ("overwrite", c_int), ("log", c_void_p), ("_reserved", c_char * _RESERVED)]


class ConvertStats(Structure):
    _fields_ = [("tensors", c_int32), ("converted", c_int32), ("fallback", c_int32), ("folded_q_scale", c_int32),
                ("bytes", c_uint64), ("_reserved", c_char * _RESERVED)]


class AdapterMergeOpts(Structure):
    _fields_ = [("method", c_int), ("weights", POINTER(c_double)), ("n_weights", c_int32), ("density", c_double),
                ("rank", c_int32), ("seed", c_uint64), ("majority_sign_frequency", c_int), ("overwrite", c_int),
                ("n_threads", c_int), ("t", c_double), ("_reserved", c_char * _RESERVED)]


class AdapterMergeReport(Structure):
    _fields_ = [("rank", c_int32), ("n_projections", c_int32), ("has_head", c_int), ("max_rel_error", c_double),
                ("worst_layer", c_int32), ("worst_proj", c_char * 16), ("_reserved", c_char * _RESERVED)]


class SettingInfo(Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int), ("short_opt", c_int), ("lo", c_double),
                ("hi", c_double), ("arg", c_char_p), ("help", c_char_p), ("group", c_char_p), ("train_only", c_int)]


class TrainHooks(Structure):
    _fields_ = [("log_fd", c_int), ("interrupt", c_int_p), ("cancel", c_int_p),
                ("progress", PROGRESS_FN), ("progress_user", c_void_p)]


def _decl(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


st = c_int  # af_status
_decl("af_status_name", c_char_p, c_int)
_decl("af_last_error", c_char_p)
_decl("af_last_error_kind", c_int)
_decl("af_version", c_char_p)
# context
_decl("af_ctx_params_default", None, POINTER(CtxParams))
_decl("af_ctx_new", st, POINTER(CtxParams), POINTER(af_ctx_p))
_decl("af_ctx_free", None, af_ctx_p)
_decl("af_ctx_device", c_char_p, af_ctx_p)
_decl("af_ctx_n_threads", c_int, af_ctx_p)
# model and tokenizer
_decl("af_model_load", st, af_ctx_p, c_char_p, POINTER(af_model_p))
_decl("af_model_free", None, af_model_p)
_decl("af_model_get_config", POINTER(ModelConfig), af_model_p)
_decl("af_model_tokenizer", af_tok_p, af_model_p)
_decl("af_model_tokenizer_error", c_char_p, af_model_p)
_decl("af_tokenize", st, af_tok_p, c_char_p, c_size_t, c_int, c_int, POINTER(POINTER(c_int32)), POINTER(c_size_t))
_decl("af_token_to_bytes", c_int, af_tok_p, c_int32, c_int, c_void_p, c_size_t)
_decl("af_detokenize", st, af_tok_p, POINTER(c_int32), c_size_t, c_int, POINTER(c_void_p))
_decl("af_token_bos", c_int32, af_tok_p)
_decl("af_token_eos", c_int32, af_tok_p)
_decl("af_token_is_eog", c_int, af_tok_p, c_int32)
_decl("af_chat_apply_template", st, af_model_p, c_char_p, POINTER(c_char_p), POINTER(c_char_p),
      POINTER(c_size_t), c_int32, c_int, POINTER(c_void_p))
# sessions and sampling
_decl("af_session_new", st, af_model_p, c_int, POINTER(af_session_p))
_decl("af_session_free", None, af_session_p)
_decl("af_session_eval", st, af_session_p, POINTER(c_int32), c_int, POINTER(c_float), POINTER(c_float))
_decl("af_session_set_control", None, af_session_p, c_int_p, c_void_p, c_void_p)
_decl("af_session_load_adapter", st, af_session_p, c_char_p, c_float)
_decl("af_sample", c_int32, POINTER(c_float), c_int32, POINTER(Sampling), POINTER(c_uint64))
_decl("af_rng_seed", c_uint64, c_uint64)
# classifiers, data, metrics
_decl("af_classifier_load", st, af_ctx_p, c_char_p, af_model_p, c_char_p, POINTER(af_classifier_p))
_decl("af_classifier_free", None, af_classifier_p)
_decl("af_classifier_num_classes", c_int32, af_classifier_p)
_decl("af_classifier_multi_label", c_int, af_classifier_p)
_decl("af_classifier_max_seq_len", c_int32, af_classifier_p)
_decl("af_classifier_label_names", POINTER(c_char_p), af_classifier_p)
_decl("af_classifier_note", c_char_p, af_classifier_p)
_decl("af_classifier_probs", st, af_classifier_p, af_dataset_p, c_int32, POINTER(c_float))
_decl("af_classifier_prediction_json", st, af_classifier_p, POINTER(c_float), c_double, POINTER(c_void_p))
_decl("af_corpus_opts_init", None, POINTER(CorpusOpts))
_decl("af_corpus_read", st, c_char_p, POINTER(CorpusOpts), POINTER(af_corpus_p))
_decl("af_corpus_from_texts", st, c_char_p, POINTER(c_char_p), POINTER(c_size_t), c_int32, c_int32, c_int32,
      POINTER(af_corpus_p))
_decl("af_corpus_multi_label", c_int, af_corpus_p)
_decl("af_corpus_free", None, af_corpus_p)
_decl("af_dataset_build", st, af_ctx_p, af_corpus_p, af_tok_p, c_int32, POINTER(af_dataset_p))
_decl("af_dataset_size", c_int32, af_dataset_p)
_decl("af_dataset_free", None, af_dataset_p)
_decl("af_eval_metrics", st, af_dataset_p, POINTER(c_float), POINTER(af_metrics_p))
_decl("af_metrics_free", None, af_metrics_p)
_decl("af_metrics_json", st, af_metrics_p, POINTER(c_char_p), POINTER(c_char_p), POINTER(c_void_p))
_decl("af_lm_data_opts_init", None, POINTER(LmDataOpts))
_decl("af_lm_dataset_read", st, af_ctx_p, c_char_p, af_model_p, POINTER(LmDataOpts), POINTER(af_dataset_p))
_decl("af_lm_evaluate", st, af_ctx_p, af_model_p, c_char_p, c_float, af_dataset_p, c_int32,
      POINTER(LmEvalResult))
_decl("af_ctx_set_interrupt", None, af_ctx_p, c_int_p)
# training
_decl("af_train_setting_keys", POINTER(SettingInfo), POINTER(c_int32))
_decl("af_train_settings_new", st, POINTER(af_settings_p))
_decl("af_train_settings_free", None, af_settings_p)
_decl("af_train_settings_set", st, af_settings_p, c_char_p, c_char_p)
_decl("af_train_settings_set_bool", st, af_settings_p, c_char_p, c_int)
_decl("af_train_settings_run", st, af_settings_p, POINTER(TrainHooks), c_int, POINTER(c_void_p))
# adapters elsewhere
_decl("af_adapter_export_gguf", st, c_char_p, c_char_p, c_char_p, c_int)
_decl("af_merge_adapter", st, c_char_p, c_char_p, c_char_p, POINTER(MergeOpts), POINTER(MergeStats))
_decl("af_model_convert", st, c_char_p, c_char_p, POINTER(ConvertOpts), POINTER(ConvertStats))
_decl("af_adapter_merge_opts_default", None, POINTER(AdapterMergeOpts))
_decl("af_merge_method_parse", st, c_char_p, POINTER(c_int))
_decl("af_adapter_merge", st, POINTER(c_char_p), c_int32, c_char_p, POINTER(AdapterMergeOpts),
      POINTER(AdapterMergeReport))

# memory the library malloc'ed and hands to the caller (af_tokenize ids, texts): freed with the C
# library's free, which is the one libafinar.so uses (the process's libc)
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None
c_free = _libc.free


def check(status: int) -> None:
    """Raise the afinar.Error subclass of a non-zero af_status with the library's message (read
    on the calling thread, where the library keeps it)."""
    if status != 0:
        raise_for_status(status, lib.af_last_error().decode("utf-8", "replace"),
                         lib.af_status_name(status).decode(), lib.af_last_error_kind())


def take_string(p: c_void_p) -> str:
    """A malloc'ed NUL-terminated UTF-8 string from the library, copied, then freed."""
    if not p.value:
        return ""
    try:
        return ctypes.string_at(p.value).decode("utf-8", "replace")
    finally:
        c_free(p)

"""Fine-tuning (afinar.train, afinar.check), evaluation (afinar.evaluate) and taking an adapter
elsewhere (afinar.export, afinar.merge): the runs of ``afinar train / check / eval / export / merge``
through the C library, with settings named as afinar's flags or as TRL / transformers / PEFT name them."""
from __future__ import annotations

import difflib
import json
import math
import os
from ctypes import POINTER, byref, c_char_p, c_double, c_float, c_int, c_int32, c_void_p
from typing import Callable, Dict, Optional, Union

import numpy as np

from . import _lib
from ._lib import check, lib, take_string
from ._util import Flag, check_int, path_bytes, run_interruptible, to_bytes
from .errors import InvalidInput
from .model import Model

# TRL / transformers / PEFT argument names -> afinar setting keys (afinar's own keys are accepted
# with '-' or '_').
TRL_NAMES = {
    "learning_rate": "lr",
    "num_train_epochs": "epochs",
    "per_device_train_batch_size": "batch",
    "per_device_eval_batch_size": "eval-batch",
    "gradient_accumulation_steps": "grad-accum",
    "max_length": "max-seq-len",
    "max_seq_length": "max-seq-len",
    "r": "lora-r",
    "use_rslora": "rslora",
    "use_dora": "dora",
    "target_modules": "targets",
    "warmup_ratio": "warmup",
    "warmup_steps": "warmup",
    "lr_scheduler_type": "schedule",
    "eval_steps": "eval-every",
    "save_steps": "save-every",
    "logging_steps": "log-every",
    "gradient_checkpointing": "checkpointing",
    "early_stopping_patience": "patience",
    "early_stopping_threshold": "early-stopping-threshold",
    "resume_from_checkpoint": "resume",
    "overwrite_output_dir": "overwrite",
    "dataset_text_field": "text-field",
    "output_dir": "output",
    "model_name_or_path": "model",
}
_SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant", "constant_with_warmup": "constant"}
_MODULES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
            "down_proj": "down"}


def setting_keys() -> Dict[str, dict]:
    """The settings ``afinar.train`` accepts (those of ``afinar train``): {key: {"kind": "text" |
    "int" | "number" | "bool", "range": (lo, hi) or None, "help": str}}."""
    n = c_int32()
    p = lib.af_train_setting_keys(byref(n))
    kinds = {0: "text", 1: "int", 2: "number", 3: "bool"}
    out = {}
    for i in range(n.value):
        d = p[i]
        out[d.name.decode()] = {"kind": kinds.get(d.kind, "text"),
                                "range": (d.lo, d.hi) if d.kind in (1, 2) else None,
                                "help": (d.help or b"").decode("utf-8", "replace")}
    return out


def _bad(msg):
    return InvalidInput(msg, 5, "AF_ERR_INVALID_ARG")


def _value_text(key: str, v) -> Union[str, bool]:
    """The text (or bool) of a setting's value as the C settings object takes it."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if key == "targets" and isinstance(v, (list, tuple)):
        parts = []
        for m in v:
            if not isinstance(m, str):
                raise _bad("target_modules: expected names, got %s" % type(m).__name__)
            parts.append(_MODULES.get(m, m))
        return ",".join(parts)
    if key == "layers-to-transform" and isinstance(v, (list, tuple)):  # PEFT's list: any set of layers
        if not v or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
            raise _bad("layers_to_transform: expected a non-empty list of layer indices")
        return ",".join(str(int(x)) for x in v)
    if key == "lora-layers" and isinstance(v, (list, tuple)):
        if not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise _bad("layers_to_transform: expected a non-empty list of layer indices")
        lo, hi = min(v), max(v)
        if sorted(v) != list(range(lo, hi + 1)):
            raise _bad("layers_to_transform: afinar adapts a contiguous range of layers, got %r" % (v,))
        return "%d-%d" % (lo, hi)
    if key == "schedule" and isinstance(v, str):
        return _SCHEDULES.get(v, v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(float(v)):
            raise _bad("%s: not a finite number: %r" % (key, v))
        return repr(float(v))
    if isinstance(v, (str, os.PathLike)):
        return to_bytes(v, key).decode("utf-8")
    raise _bad("%s: expected a str, number or bool, got %s" % (key, type(v).__name__))


def _key_of(name: str, keys) -> str:
    if not isinstance(name, str):
        raise _bad("setting names must be str")
    k = TRL_NAMES.get(name, name.replace("_", "-"))
    if k not in keys:
        near = difflib.get_close_matches(name, list(keys) + list(TRL_NAMES), n=3)
        raise _bad("unknown setting '%s'%s" % (name, " (did you mean %s?)" % ", ".join(near) if near else ""))
    return k


def _write_jsonl(path: str, records) -> None:
    lines = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise _bad("data[%d]: expected a dict, got %s" % (i, type(r).__name__))
        try:
            lines.append(json.dumps(r, ensure_ascii=False, default=_json_default, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise _bad("data[%d]: cannot be written as JSON: %s" % (i, e)) from None
    if not lines:
        raise _bad("data: no example")
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError("%s is not JSON serializable" % type(o).__name__)


def _records(data, what: str):
    """A list of dicts from a list of dicts or a pandas DataFrame; None for a path."""
    if isinstance(data, (str, os.PathLike)):
        return None
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"):
        return data.to_dict("records")
    if type(data).__name__ == "Dataset" and hasattr(data, "to_list"):  # Hugging Face datasets
        return data.to_list()
    if isinstance(data, (list, tuple)):
        return list(data)
    raise _bad("%s: expected a path, a list of dicts or a pandas DataFrame, got %s" % (what, type(data).__name__))


def _data_path(data, what: str, out_dir: Optional[str], name: str) -> str:
    recs = _records(data, what)
    if recs is None:
        return os.fspath(data)
    if not out_dir:
        raise _bad("%s given as records needs output_dir (they are written to OUTPUT_DIR/data/)" % what)
    d = os.path.join(out_dir, "data")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, name)
    _write_jsonl(p, recs)
    return p


def _progress_hook(progress):
    """(callback(phase, current, total), close()) of the `progress` argument."""
    if callable(progress):
        return progress, lambda: None
    if not progress:
        return None, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None, lambda: None
    bars = {}

    def cb(phase, cur, tot):
        if phase != "train":
            return
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = tqdm(total=int(tot), desc="afinar train", unit="step")
        if tot != bar.total:
            bar.total = int(tot)
        bar.update(int(cur) - bar.n)

    def close():
        for b in bars.values():
            b.close()

    return cb, close


def _settings(model_or_path, train_data, eval_data, output_dir, task, settings, check_only):
    keys = setting_keys()
    given = {}
    for name, v in settings.items():
        if v is None:
            continue
        k = _key_of(name, keys)
        if k in given:
            raise _bad("setting '%s' given twice (as %s)" % (k, name))
        given[k] = v
    if isinstance(model_or_path, Model):
        given.setdefault("model", model_or_path.path)
        if model_or_path.device not in (None, "cpu"):
            given.setdefault("device", model_or_path.device)
        if model_or_path.quantize is not None:
            given.setdefault("quantize", model_or_path.quantize)
    elif model_or_path is not None:
        given.setdefault("model", model_or_path)
    if task is not None:
        given["task"] = task
    if output_dir is not None:
        given["output"] = output_dir
    out = given.get("output")
    out = os.fspath(out) if out is not None else None
    if out and not check_only:
        os.makedirs(out, exist_ok=True)
    if train_data is not None:
        recs = _records(train_data, "train")
        if recs is not None and "text-field" not in given and given.get("task", "classification") == "classification":
            if recs and isinstance(recs[0], dict) and "text" in recs[0] and "input" not in recs[0]:
                given["text-field"] = "text"
        given["train"] = _data_path(train_data, "train", out, "train.jsonl")
    if eval_data is not None:
        given["val"] = _data_path(eval_data, "eval", out, "eval.jsonl")
    s = c_void_p()
    check(lib.af_train_settings_new(byref(s)))
    try:
        for k, v in given.items():
            tv = _value_text(k, v)
            if isinstance(tv, bool):
                check(lib.af_train_settings_set_bool(s, k.encode(), int(tv)))
            else:
                check(lib.af_train_settings_set(s, k.encode(), to_bytes(tv, k)))
    except BaseException:
        lib.af_train_settings_free(s)
        raise
    return s, given


def train(model_or_path=None, train=None, eval=None, output_dir=None, task: Optional[str] = None,
          progress: Union[bool, Callable] = True, verbose: bool = False, cancel=None, **settings) -> dict:
    """Fine-tune LoRA adapters (and a classification head) — what ``afinar train`` runs.

    model_or_path  an afinar.Model (its path, device and quantize are used) or a GGUF / HF path.
    train, eval    the training / validation data: a JSONL path, a list of dicts or a pandas
                   DataFrame (records are written to OUTPUT_DIR/data/*.jsonl so that a resumed run
                   finds them). classification: {"input" or "text": str, "label": int | str} or
                   "labels": [...]; causal-lm: TRL's {"text"}, {"prompt", "completion"} or
                   {"messages": [{"role", "content"}, ...]}.
    output_dir     the run directory: checkpoint-N/, best/ and final/ (PEFT adapters), metrics.jsonl.
    task           "classification" (default), "causal-lm", or "dpo" / "orpo" (preference pairs: TRL's
                   {"prompt", "chosen", "rejected"}; docs/PREFERENCE.md).
    progress       True: a tqdm bar when tqdm is installed; False: none; or a callable
                   f(phase: str, current: int, total: int), phase "train" (optimizer steps) or
                   "eval" (validation samples), called on the training thread.
    verbose        True: the library's report and progress lines on stderr.
    cancel         a threading.Event: once set (e.g. from a notebook button's thread) the run stops
                   at the next layer and afinar.Cancelled is raised; checkpoints already written stay.
    **settings     afinar's keys (lr, epochs, max_steps, batch, grad_accum, max_seq_len, lora_r,
                   lora_alpha, lora_dropout, targets, lora_layers, seed, eval_every, save_every,
                   recipe, ...: ``afinar train --help``, with '_' or '-') or TRL / transformers / PEFT
                   names (learning_rate, num_train_epochs, max_steps, per_device_train_batch_size,
                   gradient_accumulation_steps, max_length, r, lora_alpha, lora_dropout,
                   target_modules, warmup_ratio, warmup_steps, lr_scheduler_type, eval_steps,
                   save_steps, weight_decay, max_grad_norm, seed, resume_from_checkpoint, ...).
                   Values are checked by the library (the message names the flag).
    Returns a dict of the run's metrics: stop ("done", "early_stopping", "interrupted",
    "time_budget"), steps_done, total_steps, train_loss, eval_loss / best_eval_loss (causal-lm,
    nats per target token), eval_accuracy / eval_macro_f1 / best_macro_f1 / best_step
    (classification), train_runtime (s), last_checkpoint, output_dir, and log_history (the lines of
    metrics.jsonl as dicts).
    Ctrl-C (KeyboardInterrupt): the library finishes the step and saves a checkpoint, then
    KeyboardInterrupt is raised (its .result holds this dict); a second Ctrl-C cancels at once
    without saving. Resume with train(..., resume=OUTPUT_DIR).
    Raises InvalidInput (unknown setting, bad value, bad data naming file:line:field, error
    diagnostics), NotFound, Unsupported, OutOfMemory, DeviceError, Cancelled.
    """
    s, given = _settings(model_or_path, train, eval, output_dir, task, settings, False)
    interrupt, cancel_flag = Flag(), Flag()
    cb, close = _progress_hook(progress)
    errors = []

    def progress_c(user, phase, cur, tot):
        try:
            cb(phase.decode(), int(cur), int(tot))
        except BaseException as e:  # noqa: BLE001 - stop the run, raise it afterwards
            errors.append(e)
            cancel_flag.set()

    cfn = _lib.PROGRESS_FN(progress_c) if cb else _lib.PROGRESS_FN()
    hooks = _lib.TrainHooks(2 if verbose else -1, interrupt.ptr, cancel_flag.ptr, cfn, None)
    box = {}

    def call():
        out = c_void_p()
        st = lib.af_train_settings_run(s, byref(hooks), 0, byref(out))
        box["json"] = take_string(out) if out.value else ""
        check(st)
        return box["json"]

    def on_interrupt(k):
        (interrupt if k == 1 else cancel_flag).set()

    try:
        try:
            text = run_interruptible(call, on_interrupt, cancel, cancel_flag.set)
        except KeyboardInterrupt:
            res = _result(box.get("json"))
            ki = KeyboardInterrupt("training interrupted after step %s; %s" % (
                res.get("steps_done", "?"),
                ("checkpoint: %s (resume with afinar.train(resume=%r))"
                 % (res["last_checkpoint"], res.get("output_dir"))) if res.get("last_checkpoint")
                else "no checkpoint was written"))
            ki.result = res
            raise ki from None
        except BaseException:
            if errors:
                raise errors[0] from None
            raise
    finally:
        close()
        lib.af_train_settings_free(s)
    if errors:
        raise errors[0]
    return _result(text)


def _result(text) -> dict:
    if not text:
        return {}
    res = json.loads(text)
    out = res.get("output_dir")
    hist = []
    if out:
        try:
            with open(os.path.join(out, "metrics.jsonl"), "rb") as f:
                for ln in f:
                    try:
                        hist.append(json.loads(ln))
                    except ValueError:
                        pass
        except OSError:
            pass
    res["log_history"] = hist
    return res


def check_settings(model_or_path=None, train=None, eval=None, task: Optional[str] = None, verbose: bool = False,
                   **settings) -> dict:
    """What ``afinar check`` does: read the model's tokenizer and the data with train()'s arguments
    and return {"ready": bool, "n_errors": int, "diagnostics": [{"severity", "code", "message",
    "recommendation"}]} without training. Data given as records need output_dir (written there).
    Raises as train() does for bad settings and data."""
    out_dir = settings.pop("output_dir", None)
    s, _ = _settings(model_or_path, train, eval, out_dir, task, settings, True)
    try:
        hooks = _lib.TrainHooks(2 if verbose else -1, None, None, _lib.PROGRESS_FN(), None)
        out = c_void_p()
        st = lib.af_train_settings_run(s, byref(hooks), 1, byref(out))
        text = take_string(out) if out.value else ""
        check(st)
        return json.loads(text)
    finally:
        lib.af_train_settings_free(s)


def _model_for(model_or_path, device, threads):
    if isinstance(model_or_path, Model):
        return model_or_path, False
    return Model(model_or_path, device=device, threads=threads), True


def evaluate(model_or_path, data, adapter=None, task: str = "classification", batch_size: int = 8,
             max_length: int = 1024, text_field: Optional[str] = None, label_field: Optional[str] = None,
             lora_scale: float = 1.0, chat_template: Optional[str] = None, loss_on: Optional[str] = None,
             device: Optional[str] = "cpu", threads: Optional[int] = None) -> dict:
    """Evaluate an adapter on labelled data — ``afinar eval``.

    classification  `adapter` (required) is a classifier adapter directory; `data` a JSONL path, a
                    list of dicts or a DataFrame with the training data's fields. Returns the
                    metrics of ``afinar eval --json``: n, accuracy, macro_f1, weighted_f1, ece, nll,
                    per_class [{label, precision, recall, f1, support}], confusion [[...]] (rows gold).
    causal-lm       `adapter` a LoRA directory or None (the base model); `data` TRL-format records;
                    max_length truncates. Returns {"eval_loss" (mean nats per target token),
                    "perplexity", "mean_token_accuracy", "n_targets", "n_examples"}.
    Raises InvalidInput (bad data naming file:line:field), NotFound, KeyboardInterrupt."""
    import tempfile
    model, own = _model_for(model_or_path, device, threads)
    batch_size = check_int(batch_size, "batch_size", 1, 1 << 20)
    tmpdir = None
    try:
        recs = _records(data, "data")
        if recs is not None:
            tmpdir = tempfile.mkdtemp(prefix="afinar-eval-")
            path = os.path.join(tmpdir, "data.jsonl")
            if task == "classification" and text_field is None and recs and isinstance(recs[0], dict) \
                    and "text" in recs[0] and "input" not in recs[0]:
                text_field = "text"
            _write_jsonl(path, recs)
        else:
            path = os.fspath(data)
        if task == "causal-lm":
            return _evaluate_lm(model, path, adapter, batch_size, max_length, lora_scale, chat_template, loss_on)
        if task != "classification":
            raise _bad("task: unknown task '%s' (classification, causal-lm)" % (task,))
        if adapter is None:
            raise _bad("adapter: a classification evaluation needs the classifier adapter directory")
        return _evaluate_cls(model, path, adapter, batch_size, text_field, label_field)
    finally:
        if own:
            model.close()
        if tmpdir:
            import shutil
            shutil.rmtree(tmpdir, ignore_errors=True)


def _interruptible(model, fn):
    flag = Flag()
    lib.af_ctx_set_interrupt(model._ctx, flag.ptr)
    try:
        return run_interruptible(fn, lambda k: flag.set())
    finally:
        lib.af_ctx_set_interrupt(model._ctx, None)


def _evaluate_cls(model, path, adapter, batch_size, text_field, label_field):
    c = model._classifier(adapter)
    tok = model._tokenizer()
    C = lib.af_classifier_num_classes(c)
    names = lib.af_classifier_label_names(c)
    co = _lib.CorpusOpts()
    lib.af_corpus_opts_init(byref(co))
    keep = []
    if text_field is not None:
        keep.append(to_bytes(text_field, "text_field"))
        co.text_field = keep[-1]
    if label_field is not None:
        keep.append(to_bytes(label_field, "label_field"))
        co.label_field = keep[-1]
    co.label_names = names
    co.n_label_names = C if names else 0
    co.num_classes = C
    corp, ds, met = c_void_p(), c_void_p(), c_void_p()
    try:
        check(lib.af_corpus_read(path_bytes(path, "data"), byref(co), byref(corp)))
        if lib.af_corpus_multi_label(corp) != lib.af_classifier_multi_label(c):
            raise _bad("%s: the data are %s but the adapter is %s" % (
                path, *(("multi-label" if x else "single-label")
                        for x in (lib.af_corpus_multi_label(corp), lib.af_classifier_multi_label(c)))))
        check(lib.af_dataset_build(model._ctx, corp, tok, lib.af_classifier_max_seq_len(c), byref(ds)))
        n = lib.af_dataset_size(ds)
        probs = np.empty((n, C), dtype=np.float32)
        _interruptible(model, lambda: check(lib.af_classifier_probs(c, ds, batch_size,
                                                                    probs.ctypes.data_as(POINTER(c_float)))))
        check(lib.af_eval_metrics(ds, probs.ctypes.data_as(POINTER(c_float)), byref(met)))
        js = c_void_p()
        check(lib.af_metrics_json(met, names, None, byref(js)))
        return json.loads(take_string(js))
    finally:
        lib.af_metrics_free(met)
        lib.af_dataset_free(ds)
        lib.af_corpus_free(corp)


def _evaluate_lm(model, path, adapter, batch_size, max_length, lora_scale, chat_template, loss_on):
    o = _lib.LmDataOpts()
    lib.af_lm_data_opts_init(byref(o))
    o.max_seq_len = check_int(max_length, "max_length", 1, 1 << 20)
    keep = []
    if chat_template is not None:
        keep.append(to_bytes(chat_template, "chat_template"))
        o.chat_template = keep[-1]
    if loss_on is not None:
        keep.append(to_bytes(loss_on, "loss_on"))
        o.loss_on = keep[-1]
    ds = c_void_p()
    try:
        check(lib.af_lm_dataset_read(model._ctx, path_bytes(path, "data"), model._live(), byref(o), byref(ds)))
        r = _lib.LmEvalResult()
        ab = None if adapter is None else path_bytes(adapter, "adapter")
        _interruptible(model, lambda: check(lib.af_lm_evaluate(model._ctx, model._live(), ab, c_float(lora_scale), ds,
                                                               batch_size, byref(r))))
        return {"eval_loss": r.loss, "perplexity": r.perplexity, "mean_token_accuracy": r.mean_token_accuracy,
                "n_targets": r.n_targets, "n_examples": r.n_examples}
    finally:
        lib.af_dataset_free(ds)


def export(model_path, adapter, out_path, overwrite: bool = False) -> str:
    """Write the adapter directory `adapter` as a llama.cpp LoRA GGUF `out_path` for the base model
    at `model_path` — ``afinar export``. Written atomically; returns out_path.
    Raises InvalidInput (out_path exists without overwrite, adapter for another model), NotFound."""
    mp = model_path.path if isinstance(model_path, Model) else model_path
    check(lib.af_adapter_export_gguf(path_bytes(mp, "model_path"), path_bytes(adapter, "adapter"),
                                     path_bytes(out_path, "out_path"), int(bool(overwrite))))
    return os.fspath(out_path)


def merge(model_path, adapter, out_path, dtype: Optional[str] = None, overwrite: bool = False) -> dict:
    """Fold the adapter into the GGUF model at `model_path` and write the merged GGUF `out_path` —
    ``afinar merge``. dtype: type of the merged tensors (None / "keep": each tensor's own; "f32",
    "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q6_k"). Written atomically.
    Returns {"merged", "copied" (tensor counts), "delta_rms", "requant_rms", "base_requant_rms"}.
    Raises InvalidInput (unknown dtype, out_path exists, adapter for another model), NotFound,
    Unsupported."""
    mp = model_path.path if isinstance(model_path, Model) else model_path
    o = _lib.MergeOpts()
    tb = None if dtype is None else to_bytes(dtype, "dtype")
    o.type = tb
    o.overwrite = int(bool(overwrite))
    stt = _lib.MergeStats()
    check(lib.af_merge_adapter(path_bytes(mp, "model_path"), path_bytes(adapter, "adapter"),
                               path_bytes(out_path, "out_path"), byref(o), byref(stt)))
    return {"merged": stt.merged, "copied": stt.copied, "delta_rms": stt.delta_rms,
            "requant_rms": stt.requant_rms, "base_requant_rms": stt.base_requant_rms}


def convert(hf_dir, out_path, dtype: Optional[str] = None, overwrite: bool = False) -> dict:
    """Convert the Hugging Face checkpoint directory `hf_dir` to the GGUF `out_path` (llama.cpp's
    names and metadata, the tokenizer included) — ``afinar convert``. dtype: None / "keep" (each
    tensor's stored type: exact for F32/F16/BF16) or "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1",
    "q5_0", "q5_1", "q4_k", "q6_k". Written atomically. Returns {"tensors", "converted",
    "fallback", "bytes"}. Raises InvalidInput (unknown dtype, not a directory, out_path exists
    without overwrite), NotFound, Unsupported (architecture)."""
    o = _lib.ConvertOpts()
    tb = None if dtype is None else to_bytes(dtype, "dtype")
    o.type = tb
    o.overwrite = int(bool(overwrite))
    stt = _lib.ConvertStats()
    check(lib.af_model_convert(path_bytes(hf_dir, "hf_dir"), path_bytes(out_path, "out_path"), byref(o), byref(stt)))
    return {"tensors": stt.tensors, "converted": stt.converted, "fallback": stt.fallback, "bytes": stt.bytes}


def merge_adapters(adapters, out_dir, method: str = "linear", weights=None, density: Optional[float] = None,
                   rank: int = 0, seed: int = 0, majority_sign: str = "total", overwrite: bool = False,
                   t: Optional[float] = None) -> dict:
    """Merge several LoRA adapter directories of one base model into one — ``afinar merge-adapters``
    (PEFT's add_weighted_adapter methods on each projection's ΔW = s·B·A): method "linear" / "svd"
    (Σ w_i ΔW_i), "cat" (exact, rank Σ r_i), "ties", "dare-ties", "dare-linear", "magnitude-prune"
    (those four need density in (0, 1]), "slerp" (two adapters, spherical interpolation at t in [0, 1]). weights: one float per adapter (default 1 each); rank: of
    the result (0: the largest input rank); seed: DARE masks; majority_sign: "total" or "frequency".
    Classification heads are combined linearly. Written as a whole (temporary directory + rename).
    Returns {"rank", "n_projections", "has_head", "max_rel_error" (truncation error |ΔW - B·A|_F /
    |ΔW|_F), "worst_layer", "worst_proj"}. Raises InvalidInput (naming the adapter and field), NotFound."""
    if isinstance(adapters, (str, os.PathLike)) or not isinstance(adapters, (list, tuple)) or not adapters:
        raise _bad("adapters: expected a non-empty list of adapter directories")
    dirs = [path_bytes(a, "adapters[%d]" % i) for i, a in enumerate(adapters)]
    o = _lib.AdapterMergeOpts()
    lib.af_adapter_merge_opts_default(byref(o))
    m = c_int()
    check(lib.af_merge_method_parse(to_bytes(method, "method"), byref(m)))
    o.method = m.value
    w = None
    if weights is not None:
        if not isinstance(weights, (list, tuple)) or len(weights) != len(dirs):
            raise _bad("weights: expected %d numbers, one per adapter" % len(dirs))
        w = (c_double * len(weights))(*[float(x) for x in weights])
        o.weights = w
        o.n_weights = len(weights)
    o.density = 0.0 if density is None else float(density)
    o.rank = check_int(rank, "rank", 0, 1 << 20)
    o.seed = check_int(seed, "seed", 0, (1 << 64) - 1)
    if majority_sign not in ("total", "frequency"):
        raise _bad("majority_sign: 'total' or 'frequency', got %r" % (majority_sign,))
    o.majority_sign_frequency = int(majority_sign == "frequency")
    o.overwrite = int(bool(overwrite))
    o.t = 0.0 if t is None else float(t)
    rep = _lib.AdapterMergeReport()
    check(lib.af_adapter_merge((c_char_p * len(dirs))(*dirs), len(dirs), path_bytes(out_dir, "out_dir"), byref(o),
                               byref(rep)))
    return {"rank": rep.rank, "n_projections": rep.n_projections, "has_head": bool(rep.has_head),
            "max_rel_error": rep.max_rel_error, "worst_layer": rep.worst_layer,
            "worst_proj": rep.worst_proj.decode("utf-8", "replace")}


__all__ = ["train", "check_settings", "evaluate", "export", "merge", "convert", "merge_adapters", "setting_keys",
           "TRL_NAMES"]

"""afinar: run and LoRA-fine-tune pretrained transformer language models (GGUF / Hugging Face
directories; llama, Qwen2/3, Gemma 3/4) on CPUs and Vulkan GPUs, from Python.

    import afinar
    m = afinar.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    m.generate([{"role": "user", "content": "Hi"}], max_new_tokens=32, temperature=0)
    res = afinar.train(m, train=df, output_dir="runs/a", max_steps=50)
    m.classify(["some text"], adapter="runs/a/best")

A binding over the C library libafinar.so (ctypes); see docs/PYTHON.md.
"""
from ._lib import LIBRARY_PATH, lib as _clib
from .errors import (Cancelled, DeviceError, Error, InvalidInput, NotFound, OutOfMemory,
                     Unsupported)
from .model import Model
from .train import (TRL_NAMES, check_settings, convert, evaluate, export, merge, merge_adapters, setting_keys,
                    train)

__version__ = _clib.af_version().decode()
"""The C library's version (include/afinar.h AF_VERSION_*)."""

__all__ = ["Model", "train", "check_settings", "evaluate", "export", "merge", "convert", "merge_adapters",
           "setting_keys", "TRL_NAMES",
           "Error", "InvalidInput", "NotFound", "Unsupported", "OutOfMemory", "DeviceError", "Cancelled",
           "LIBRARY_PATH", "__version__"]

#!/usr/bin/env python3
"""Write an F32 (or F16) copy of a GGUF model: every tensor dequantized with the `gguf` package
(gguf.quants.dequantize, numpy), metadata copied unchanged except general.file_type. Used to get
f32 base weights for `--quantize nf4` measurements (README "NF4 QLoRA"); the output is a model
file: keep it under models/ (ignored by git), never commit it.

    .venv-ref/bin/python scripts/gguf_dequant_f32.py models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        models/SmolLM2-135M-Instruct.F32.gguf [--f16]
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType
from gguf.constants import GGMLQuantizationType as T
from gguf import quants


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    f16 = "--f16" in sys.argv
    if len(args) != 2:
        sys.exit(__doc__)
    src, dst = args
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_uint32(name, 1 if f16 else 0)  # LLAMA_FTYPE_ALL_F32 / MOSTLY_F16
            continue
        vt = field.types[0]
        val = field.contents()
        if vt == GGUFValueType.ARRAY:
            w.add_key_value(name, val, vt, sub_type=field.types[-1] if len(field.types) > 1 else None)
        else:
            w.add_key_value(name, val, vt)
    for t in r.tensors:
        data = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        # the reader gives numpy shape (rows, cols) = reversed GGUF ne; keep it
        if f16 and data.ndim == 2:
            data = data.astype(np.float16)
        w.add_tensor(t.name, data, raw_dtype=T.F16 if data.dtype == np.float16 else T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{dst}: {len(r.tensors)} tensors, {'F16 matrices' if f16 else 'F32'}")


if __name__ == "__main__":
    main()

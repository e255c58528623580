"""Every afinar.Error class from a real failure, and hostile inputs (bad types, NUL bytes, huge
sizes, non-UTF-8, damaged files) raising instead of crashing the interpreter."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import afinar
from conftest import FIX, SMOL, TINY_RUN, sentiment


def test_classes():
    assert issubclass(afinar.InvalidInput, ValueError) and issubclass(afinar.NotFound, OSError)
    assert issubclass(afinar.Unsupported, NotImplementedError) and issubclass(afinar.OutOfMemory, MemoryError)
    for c in (afinar.InvalidInput, afinar.NotFound, afinar.Unsupported, afinar.OutOfMemory, afinar.DeviceError,
              afinar.Cancelled):
        assert issubclass(c, afinar.Error)


def test_not_found(tmp_path):
    with pytest.raises(afinar.NotFound) as e:
        afinar.Model(str(tmp_path / "missing.gguf"))
    assert "missing.gguf" in str(e.value) and e.value.status_name == "AF_ERR_IO"


def test_invalid_input_file(tmp_path):
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"GGUF" + os.urandom(200))
    with pytest.raises(afinar.InvalidInput) as e:
        afinar.Model(str(p))
    assert "junk.gguf" in str(e.value)
    p.write_bytes(b"")
    with pytest.raises(afinar.Error):
        afinar.Model(str(p))


def test_unsupported(smol_path):
    # NF4 conversion of weights that are already quantized (Q4_1) is refused at load
    with pytest.raises(afinar.Unsupported) as e:
        afinar.Model(smol_path, quantize="nf4", threads=1)
    assert e.value.status_name == "AF_ERR_UNSUPPORTED"


def test_invalid_settings(smol_path, tmp_path):
    recs = sentiment(8)
    with pytest.raises(afinar.InvalidInput, match="lr"):
        afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "a"), learning_rate=-1.0, progress=False)
    with pytest.raises(afinar.InvalidInput, match="did you mean"):
        afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "a"), learnin_rate=1e-4, progress=False)
    with pytest.raises(afinar.InvalidInput, match="batch"):
        afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "a"), batch="many", progress=False)
    with pytest.raises(afinar.InvalidInput, match="given twice"):
        afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "a"), lr=1e-4, learning_rate=1e-4)
    with pytest.raises(afinar.InvalidInput):
        afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "a"), max_steps=float("nan"))
    with pytest.raises(afinar.InvalidInput, match="NUL"):
        afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "a"), targets="q\0v")
    with pytest.raises(afinar.InvalidInput, match="expected a path"):
        afinar.train(smol_path, train=42, output_dir=str(tmp_path / "a"))
    with pytest.raises(afinar.InvalidInput, match="data\\[1\\]"):
        afinar.train(smol_path, train=[{"text": "a", "label": 1}, "oops"], output_dir=str(tmp_path / "a"))
    # bad data: the library names the file, line and field
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"input": "a", "label": 0}\n{"input": 5, "label": 1}\n')
    with pytest.raises(afinar.InvalidInput, match="bad.jsonl:2"):
        afinar.train(smol_path, train=str(bad), output_dir=str(tmp_path / "b"), progress=False, **TINY_RUN)
    # invalid UTF-8 inside the data file is the library's to judge; it must not crash
    bad.write_bytes(b'{"input": "\xff\xfe ok", "label": 0}\n' * 4 + b'{"input": "fine", "label": 1}\n' * 4)
    try:
        afinar.train(smol_path, train=str(bad), output_dir=str(tmp_path / "c"), progress=False, **TINY_RUN)
    except afinar.Error:
        pass


def test_hostile_model_calls(smol):
    with pytest.raises(afinar.InvalidInput, match="expected a str"):
        smol.tokenize(123)
    with pytest.raises(afinar.InvalidInput, match="NUL"):
        smol.tokenize("a\0b")
    with pytest.raises(afinar.InvalidInput, match="Unicode"):
        smol.tokenize("\ud800")
    # raw non-UTF-8 bytes reach the library: a byte token each, or (SmolLM2 has none for 0xFF) an error
    with pytest.raises(afinar.InvalidInput, match="byte 0xFF at offset 0 of the text is not valid UTF-8"):
        smol.tokenize(b"\xff\xfe")
    # a cut multi-byte character decodes to U+FFFD
    ids = smol.tokenize("日", add_special_tokens=False)
    cut = [t for t in ids][:1]
    assert isinstance(smol.detokenize(cut), str)
    with pytest.raises(afinar.InvalidInput, match="outside"):
        smol.detokenize([0, 10 ** 9])
    with pytest.raises(afinar.InvalidInput, match="outside"):
        smol.logits([-1])
    with pytest.raises(afinar.InvalidInput, match="expected an int"):
        smol.logits([1.5])
    with pytest.raises(afinar.InvalidInput, match="more than"):
        smol.logits(list(range(9000)))
    with pytest.raises(afinar.InvalidInput):
        smol.logits(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(afinar.InvalidInput, match="empty"):
        smol.logits([])
    with pytest.raises(afinar.InvalidInput, match="exceeds"):
        smol.generate("hi", max_new_tokens=10 ** 6)
    with pytest.raises(afinar.InvalidInput):
        smol.generate("hi", max_new_tokens=2 ** 40)
    with pytest.raises(afinar.InvalidInput, match="top_p"):
        smol.generate("hi", top_p=2)
    with pytest.raises(afinar.InvalidInput, match="temperature"):
        smol.generate("hi", temperature=float("nan"))
    with pytest.raises(afinar.InvalidInput, match="stop"):
        smol.generate("hi", stop=5)
    with pytest.raises(afinar.InvalidInput, match="empty"):
        smol.generate("")
    with pytest.raises(afinar.InvalidInput, match="role"):
        smol.apply_chat_template([{"role": "robot", "content": "x"}])
    with pytest.raises(afinar.InvalidInput, match="NUL"):
        smol.apply_chat_template([{"role": "user", "content": "x\0y"}])
    with pytest.raises(afinar.InvalidInput):
        smol.apply_chat_template("just a string")
    with pytest.raises(afinar.InvalidInput):
        smol.apply_chat_template([{"role": "user"}])
    with pytest.raises(afinar.InvalidInput):
        smol.apply_chat_template([])
    with pytest.raises(afinar.NotFound):
        smol.generate("hi", max_new_tokens=2, adapter="/nonexistent/adapter")
    with pytest.raises(afinar.NotFound):
        smol.classify(["x"], adapter="/nonexistent/adapter")
    with pytest.raises(afinar.InvalidInput):
        smol.classify([b"\0"], adapter="/nonexistent/adapter")
    with pytest.raises(afinar.InvalidInput):
        afinar.Model(SMOL, threads=-3)
    with pytest.raises(afinar.InvalidInput):
        afinar.Model(SMOL + "\0x")
    with pytest.raises(afinar.Error):
        afinar.Model(SMOL, device="no-such-device")


def _subprocess(code, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, env=e, timeout=180)


def test_device_error(smol_path):
    # fault injection of the debug "guard" device: the device is lost during the decode
    code = """
        import afinar
        m = afinar.Model(%r, device="guard", threads=1)
        try:
            m.generate("Hello", max_new_tokens=40, temperature=0, ignore_eos=True)
        except afinar.DeviceError as e:
            print("DeviceError", e.status_name, e)
    """ % os.path.join(FIX, "tiny_qwen2.gguf")
    r = _subprocess(code, {"AFINAR_FAULT": "lost=400"})
    out = r.stdout.decode()
    if "no tokenizer" in r.stderr.decode():
        pytest.skip("tiny fixture without tokenizer")
    assert r.returncode == 0 and "DeviceError AF_ERR_DEVICE" in out, out + r.stderr.decode()


def test_out_of_memory(smol_path):
    # the address space is limited after the imports: a long session's KV cache cannot be allocated
    code = """
        import resource, afinar
        m = afinar.Model(%r, threads=1)
        lim = 48 << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        import os
        vm = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vm + lim, hard))
        try:
            m.generate("Hello", max_new_tokens=8000)
        except afinar.OutOfMemory as e:
            print("OutOfMemory", e.status_name, e)
        except MemoryError as e:
            print("other MemoryError", type(e), e)
    """ % smol_path
    r = _subprocess(code)
    out = r.stdout.decode()
    assert r.returncode == 0 and "OutOfMemory AF_ERR_NOMEM" in out, out + r.stderr.decode()

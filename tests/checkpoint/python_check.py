"""Python interop of checkpoints: torch.load of model.pt gives a dict of the tensors that
were saved; safetensors.torch.load_file reads `dlrun export --format safetensors`; the
`--format torch` export loads with torch.load. Usage: python_check.py HELPER DLRUN"""
import json
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file

DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
          "Long": torch.int64, "Int": torch.int32, "Byte": torch.uint8, "Bool": torch.bool}


def check(tensors, expected, what, ordered):
    assert isinstance(tensors, dict), f"{what}: {type(tensors)} is not a dict"
    if ordered:
        assert list(tensors) == list(expected), f"{what}: names {list(tensors)} != {list(expected)}"
    else:
        assert sorted(tensors) == sorted(expected), f"{what}: names {sorted(tensors)}"
    for name, e in expected.items():
        t = tensors[name]
        assert isinstance(t, torch.Tensor), f"{what}: {name} is {type(t)}"
        assert t.dtype == DTYPES[e["dtype"]], f"{what}: {name} dtype {t.dtype} != {e['dtype']}"
        assert list(t.shape) == e["shape"], f"{what}: {name} shape {list(t.shape)} != {e['shape']}"
        assert t.double().flatten().tolist() == e["values"], f"{what}: {name} values differ"
    print(f"{what}: {len(expected)} tensors equal")


def main():
    helper, dlrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as d:
        ck = f"{d}/run/checkpoints"
        subprocess.run([helper, "write", ck, "5"], check=True)
        expected = json.loads(subprocess.run([helper, "dump", "5"], check=True, capture_output=True,
                                             text=True).stdout)
        step = f"{ck}/step-00000005"
        check(torch.load(f"{step}/model.pt"), expected, "model.pt", ordered=True)
        check(torch.load(f"{step}/model.pt", weights_only=True), expected, "model.pt (weights_only)", ordered=True)
        optim = torch.load(f"{step}/optim.pt")
        assert list(optim) == ["state.0.momentum_buffer", "state.0.step"], list(optim)
        assert torch.equal(optim["state.0.momentum_buffer"], torch.full((3, 4), 2.5))

        subprocess.run([dlrun, "export", "--checkpoint", f"{d}/run", "--format", "safetensors",
                        "--output", f"{d}/m.safetensors"], check=True)
        check(load_file(f"{d}/m.safetensors"), expected, "export safetensors", ordered=False)
        with safe_open(f"{d}/m.safetensors", framework="pt") as f:
            meta = f.metadata()
        assert meta["step"] == "5" and meta["format"] == "pt", meta

        subprocess.run([dlrun, "export", "--checkpoint", step, "--format", "torch", "--output", f"{d}/m.pt"],
                       check=True)
        check(torch.load(f"{d}/m.pt", weights_only=True), expected, "export torch", ordered=True)
    print("PASS")


if __name__ == "__main__":
    main()

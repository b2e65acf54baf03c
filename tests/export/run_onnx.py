#!/usr/bin/env python3
"""The CPU suite's other side of kiln's ONNX export (tests/export/): runs exported models in
onnxruntime and reports what each file holds, for the C++ tests to compare with kiln's own inference.

Usage: run_onnx.py JOB.json

JOB: {"runs": [{"model": "m.onnx", "input": "x.f32", "shape": [N, C, H, W], "output": "y.f32",
                "tamper": null | {"transpose_conv": true} | {"hwc_columns": [H, W, C]}}, ...]}
Inputs and outputs are raw little-endian float32 files. "tamper" runs a deliberately wrong copy of the
model, as an exporter with a layout bug would have written it, so that the tests can show their bound
catches one: transpose_conv swaps the kernel's height and width axes in the first convolution whose
kernel is larger than 1x1; hwc_columns puts the columns of the first Gemm weight back in kiln's H,W,C
flatten order (undoing the exporter's C,H,W permutation of a linear layer that reads a feature map
of that H, W, C).

Prints one JSON object: {"runs": [{"opset", "ir_version", "input": [dims], "output": [dims],
"metadata": {...}, "ops": {"Conv": n, ...}, "initializers": {name: [dims]}}]} (a symbolic dimension is
its name). Both the ONNX checker of this onnx release (full_check, with shape inference) and
onnxruntime must accept the file, or the script fails naming it.
"""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def dims(value_info):
    return [d.dim_param if d.dim_param else d.dim_value for d in value_info.type.tensor_type.shape.dim]


def replace_initializer(model, name, array):
    for i, t in enumerate(model.graph.initializer):
        if t.name == name:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))
            return
    raise SystemExit(f"no initializer {name}")


def initializer(model, name):
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    raise SystemExit(f"no initializer {name}")


def tamper(model, how):
    if "transpose_conv" in how:
        for node in model.graph.node:
            if node.op_type == "Conv":
                w = initializer(model, node.input[1])
                if w.shape[2] > 1:
                    replace_initializer(model, node.input[1], np.ascontiguousarray(w.transpose(0, 1, 3, 2)))
                    return
        raise SystemExit("no convolution larger than 1x1 to transpose")
    if "hwc_columns" in how:
        h, w, c = how["hwc_columns"]
        for node in model.graph.node:
            if node.op_type == "Gemm":
                m = initializer(model, node.input[1])
                out = m.shape[0]
                hwc = m.reshape(out, c, h, w).transpose(0, 2, 3, 1).reshape(out, h * w * c)
                replace_initializer(model, node.input[1], np.ascontiguousarray(hwc))
                return
        raise SystemExit("no Gemm to reorder")
    raise SystemExit(f"unknown tamper {how}")


def run(spec):
    model = onnx.load(spec["model"])
    onnx.checker.check_model(model, full_check=True)
    report = {
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "ir_version": model.ir_version,
        "input": dims(model.graph.input[0]),
        "output": dims(model.graph.output[0]),
        "input_name": model.graph.input[0].name,
        "output_name": model.graph.output[0].name,
        "metadata": {p.key: p.value for p in model.metadata_props},
        "ops": {},
        "initializers": {t.name: list(t.dims) for t in model.graph.initializer},
    }
    for node in model.graph.node:
        report["ops"][node.op_type] = report["ops"].get(node.op_type, 0) + 1
    if spec.get("tamper"):
        tamper(model, spec["tamper"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the suite gives each test one core
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.fromfile(spec["input"], dtype="<f4").reshape(spec["shape"])
    (logits,) = session.run(None, {session.get_inputs()[0].name: x})
    np.ascontiguousarray(logits, dtype="<f4").tofile(spec["output"])
    return report


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        job = json.load(f)
    print(json.dumps({"runs": [run(spec) for spec in job["runs"]]}))


if __name__ == "__main__":
    main()

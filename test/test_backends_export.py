"""flashdrive-export on the embedded model: manifest, TensorRT 10.13 operator check of every
graph, and the engine running its encoder and backbone steps through the exported graphs."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest
from helpers.windows import sliding_windows
from onnx import TensorProto, helper

from flashdrive_ros.backends.base import Backend
from flashdrive_ros.backends.graph_backend import GraphBackbone, GraphEncoder
from flashdrive_ros.backends.op_check import op_types, tensorrt_problems
from flashdrive_ros.backends.trt_onnx_ops import SUPPORTED_OPS
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.export_cli import main
from flashdrive_ros.paths import default_model_dir

ort = pytest.importorskip("onnxruntime")
from flashdrive_ros.backends.ort_runner import OrtGraph  # noqa: E402

GRAPHS = ("vision", "backbone_step", "drafter", "expert_step")
MAX_COC = 6


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    assert main(["--model-dir", str(default_model_dir()), "--out", str(out),
                 "--max-coc-tokens", str(MAX_COC)]) == 0
    return out, json.loads((out / "manifest.json").read_text())


def test_manifest_describes_every_graph(exported):
    out, manifest = exported
    assert manifest["opset"] == 20
    assert [g["name"] for g in manifest["graphs"]] == list(GRAPHS)
    assert manifest["engines"] == [] and manifest["tensorrt"].startswith("no plans built")
    shapes = manifest["shapes"]
    for graph in manifest["graphs"]:
        path = out / graph["file"]
        assert graph["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        model = onnx.load(str(path))
        assert [i.name for i in model.graph.input] == [i["name"] for i in graph["inputs"]]
        assert [o.name for o in model.graph.output] == [o["name"] for o in graph["outputs"]]
        assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) <= 20
    backbone = manifest["graphs"][1]
    cache = next(i for i in backbone["inputs"] if i["name"] == "k_cache")
    assert cache["shape"][3] == shapes["capacity"]
    prefill = backbone["profiles"]["prefill"]["inputs_embeds"]
    assert [s[1] for s in prefill] == [shapes["streaming_length"], shapes["streaming_length"],
                                       shapes["prompt_length"]]
    assert backbone["profiles"]["verify"]["slots"][2] == [shapes["block_size"]]


@pytest.mark.parametrize("name", GRAPHS)
def test_every_op_is_in_the_tensorrt_10_13_list(exported, name):
    out, manifest = exported
    graph = next(g for g in manifest["graphs"] if g["name"] == name)
    ops = op_types(onnx.load(str(out / graph["file"])))
    assert ops, "no ops found"
    assert sorted(ops - SUPPORTED_OPS) == []
    assert tensorrt_problems(out / graph["file"]) == []
    assert graph["tensorrt_10_13_problems"] == []


def test_op_check_flags_unsupported_ops_opsets_and_domains(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    then = helper.make_graph([helper.make_node("Unique", ["x"], ["u"])], "then", [],
                             [helper.make_tensor_value_info("u", TensorProto.FLOAT, [None])])
    nodes = [helper.make_node("Greater", ["x", "x"], ["c"]),
             helper.make_node("ReduceMin", ["c"], ["b"], keepdims=0),
             helper.make_node("If", ["b"], ["y"], then_branch=then, else_branch=then),
             helper.make_node("Custom", ["x"], ["z"], domain="com.example")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 21),
                                             helper.make_opsetid("com.example", 1)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    problems = tensorrt_problems(path)
    assert any("Unique" in p for p in problems)
    assert any("Custom" in p for p in problems)
    assert "opset 21 > 20" in problems
    assert any("com.example" in p for p in problems)
    assert not any("Greater" in p or "If" in p for p in problems)


def test_engine_runs_encoder_and_backbone_through_the_exported_graphs(exported):
    out, manifest = exported
    cfg = EngineConfig(max_coc_tokens=MAX_COC)
    reference = Engine.load(default_model_dir(), cfg)
    assert reference.backend.name == "torch"
    levels = len(reference.model.cfg.vision.deepstack_visual_indexes)
    shapes = reference.shapes()
    files = {g["name"]: out / g["file"] for g in manifest["graphs"]}
    calls = {"vision": 0, "backbone_step": 0}

    def counted(name):
        graph = OrtGraph(files[name])

        def run(feeds):
            calls[name] += 1
            return graph(feeds)
        return run

    backend = Backend("onnxruntime",
                      GraphEncoder(counted("vision"), shapes.grid_hw, levels),
                      GraphBackbone(counted("backbone_step"),
                                    reference.model.vlm.language_model,
                                    shapes.feature_layers, levels))
    graphed = Engine(reference.model, reference.tokenizer, reference.drafter, cfg, backend)
    prefills = []
    for window in sliding_windows(reference, 2):
        want, got = reference.step(window), graphed.step(window)
        prefills.append(got.full_prefill)
        assert got.full_prefill == want.full_prefill
        assert got.coc_token_ids == want.coc_token_ids
        assert got.accepted_lengths == want.accepted_lengths
        np.testing.assert_allclose(got.trajectories, want.trajectories, atol=1e-3, rtol=0)
    assert prefills == [True, False]
    views = len(reference.model.cfg.prompt.camera_names)
    assert calls["vision"] == views * reference.model.cfg.prompt.num_frames + views
    assert calls["backbone_step"] > 2

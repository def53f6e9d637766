"""Runs a TensorRT plan on torch CUDA tensors: addresses bound with `set_tensor_address`
(no copies), one execution context per optimization profile, on the runtime's own stream."""

from __future__ import annotations

import torch

from flashdrive_ros.backends.specs import GraphSpec, select_profile, symbol_sizes
from flashdrive_ros.backends.tensorrt_import import require_tensorrt

TORCH_DTYPES = {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16,
                "INT64": torch.int64, "INT32": torch.int32, "INT8": torch.int8,
                "UINT8": torch.uint8, "BOOL": torch.bool}


class TrtGraph:
    """Callable: named CUDA input tensors -> named output tensors (new allocations)."""

    def __init__(self, plan: bytes, spec: GraphSpec, device: torch.device | str) -> None:
        trt = require_tensorrt()
        self.spec = spec
        self.device = torch.device(device)
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RuntimeError(f"TensorRT could not deserialize the {spec.name} plan")
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_input = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self.input_names = [n for n in names if is_input[n]]
        self.output_names = [n for n in names if not is_input[n]]
        self.dtypes = {n: TORCH_DTYPES[self.engine.get_tensor_dtype(n).name] for n in names}
        self.stream = torch.cuda.Stream(self.device)
        self.contexts = {}
        for index, profile in enumerate(spec.profiles or [None]):
            context = self.engine.create_execution_context()
            if profile is not None:
                context.set_optimization_profile_async(index, self.stream.cuda_stream)
            self.contexts[profile] = context
        self.stream.synchronize()

    def __call__(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        missing = sorted(set(self.input_names) - set(feeds))
        if missing:
            raise ValueError(f"{self.spec.name}: inputs not given: {missing}")
        profile = (select_profile(self.spec, symbol_sizes(self.spec, feeds))
                   if self.spec.profiles else None)
        context = self.contexts[profile]
        for name in self.input_names:
            tensor = feeds[name]
            self._check_input(name, tensor)
            context.set_input_shape(name, tuple(tensor.shape))
            context.set_tensor_address(name, tensor.data_ptr())
        outputs = {}
        for name in self.output_names:
            shape = tuple(context.get_tensor_shape(name))
            outputs[name] = torch.empty(shape, dtype=self.dtypes[name], device=self.device)
            context.set_tensor_address(name, outputs[name].data_ptr())
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        if not context.execute_async_v3(self.stream.cuda_stream):
            raise RuntimeError(f"TensorRT execution of {self.spec.name} failed")
        current.wait_stream(self.stream)
        for tensor in (*(feeds[n] for n in self.input_names), *outputs.values()):
            tensor.record_stream(self.stream)
        return outputs

    def _check_input(self, name: str, tensor: torch.Tensor) -> None:
        """Inputs are bound in place: they must already be contiguous, on this device, in the
        engine's dtype."""
        want = self.dtypes[name]
        if tensor.device != self.device or tensor.dtype != want or not tensor.is_contiguous():
            raise ValueError(f"{self.spec.name} input {name} must be a contiguous {want} "
                             f"tensor on {self.device}, got {tensor.dtype} on {tensor.device}"
                             f"{'' if tensor.is_contiguous() else ' (not contiguous)'}")

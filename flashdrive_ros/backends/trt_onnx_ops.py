"""ONNX operators the TensorRT 10.13 ONNX parser imports (JetPack 7.0 / 7.1 on Jetson Thor).

Built from onnx/onnx-tensorrt `docs/operators.md`: every operator marked supported ("Y") in the
TensorRT 10.1 GA table (opset 9 to 20); each is still marked supported in the 10.15 table
(opset 9 to 24). The 10.13 table itself was not available; releases between 10.1 and 10.15
only add operators, so this list is a lower bound for 10.13. Per-operator restrictions (types,
initializer-only attributes) are not encoded here.
"""

TENSORRT_VERSION = "10.13"
MAX_OPSET = 20

SUPPORTED_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
    "AveragePool", "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Concat",
    "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum", "DeformConv",
    "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp",
    "Expand", "EyeLike", "Flatten", "Floor", "GRU", "Gather", "GatherElements", "GatherND", "Gelu",
    "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater", "GreaterOrEqual",
    "GridSample", "GroupNormalization", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If",
    "ImageScaler", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM", "LayerNormalization",
    "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "Loop", "LpNormalization", "LpPool",
    "MatMul", "Max", "MaxPool", "Mean", "MeanVarianceNormalization", "Min", "Mish", "Mod", "Mul",
    "Neg", "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "PRelu", "Pad",
    "ParametricSoftplus", "Pow", "QuantizeLinear", "RNN", "RandomNormal", "RandomNormalLike",
    "RandomUniform", "RandomUniformLike", "Range", "Reciprocal", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu",
    "Reshape", "Resize", "ReverseSequence", "RoiAlign", "Round", "ScaledTanh", "Scan", "Scatter",
    "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
    "Size", "Slice", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze",
    "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu",
    "Unsqueeze", "Upsample", "Where", "Xor",
})

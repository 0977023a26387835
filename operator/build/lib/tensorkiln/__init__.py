"""TensorKiln: compile ONNX models per hardware class and serve them with Triton."""

#include "models/gpt_files.hpp"

#include <algorithm>

namespace starzero {

// ---- llm.c tensor order ----------------------------------------------------------------------

std::vector<TensorSpec> llmc_tensor_specs(const GptShape& shape) {
  const GptLayout layout(shape);
  std::vector<TensorSpec> specs;
  for (const GptTensor& tensor : layout.tensors())
    specs.push_back({std::string(tensor.name), tensor.count, tensor.per_layer, tensor.llmc_offset});
  return specs;
}

// ---- llm.c checkpoint -------------------------------------------------------------------------

LlmcHeaderWords GptLlmcCodec::checkpoint_header(const GptShape& shape, int version, const std::filesystem::path&) {
  LlmcHeaderWords header{};
  header[0] = kLlmcCheckpointMagic;
  header[1] = version;
  const StateShapeFields fields = shape.fields();
  std::copy(fields.begin(), fields.end(), header.begin() + 2);
  return header;
}

GptShape GptLlmcCodec::shape_from_header(const LlmcHeaderWords& header, const std::filesystem::path& path) {
  StateShapeFields fields{};
  std::copy_n(header.begin() + 2, fields.size(), fields.begin());
  const GptShape shape = GptShape::from_fields(fields);
  check_llmc_shape(path, shape);
  return shape;
}

}  // namespace starzero

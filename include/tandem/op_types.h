#pragma once
// The small parameter types that ops and kernels share (kernels sit below ops and take these,
// not the ops header).
#include <cstdint>
#include <string_view>

namespace tandem {

enum class Activation : uint8_t { Linear, ReLU, ELU, SELU, Tanh, Sigmoid, GELU, Softmax };
// Parses a Keras activation name ("relu", "softmax", "" or "linear" for none); `owner` names
// the layer in the error message.
Activation parse_activation(std::string_view name, std::string_view owner);
std::string_view activation_name(Activation act);

enum class Padding : uint8_t { Valid, Same };
Padding parse_padding(std::string_view name, std::string_view owner);

}  // namespace tandem

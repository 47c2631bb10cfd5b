// The CPU convolution in a build without oneDNN: Conv2d's own im2col + OpenBLAS path.
#include "nn/layer_maker.hpp"

namespace ringtrain {

std::unique_ptr<Layer> make_cpu_conv2d(const Conv2dOptions& options) { return std::make_unique<Conv2d>(options); }

std::string cpu_conv2d_library() { return "im2col + OpenBLAS"; }

}  // namespace ringtrain

// Private: CUDA device discovery for binding. cuda_device.cu-less build: the stub in
// cuda_device_stub.cpp throws NotCompiled; the CUDA build uses cuda_device_cuda.cpp.
#pragma once

namespace ringtrain::cuda {

int device_count();  // visible GPUs (0 when the driver reports none)
void set_device(int device);

}  // namespace ringtrain::cuda

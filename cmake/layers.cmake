# Tandem's layers, lowest first (ARCHITECTURE.md says what each owns). For each: the files it
# owns (folders or single files, relative to the project root) and the layers it may include
# from, besides itself. Not transitive: a layer that may use ops may not skip to the kernels
# unless it says so. The build makes one target per layer from this table, and
# cmake/check_layers.cmake refuses any #include that leaves it.
set(TANDEM_LAYERS core kernels cuda autograd collectives ops nn io data train distribute fit cli python)

set(TANDEM_LAYER_core_FILES src/core include/tandem/tensor.h include/tandem/allocator.h include/tandem/random.h
    include/tandem/error.h include/tandem/runtime.h include/tandem/op_types.h include/tandem/timeline.h
    include/tandem/devices.h)
set(TANDEM_LAYER_core_USES)

set(TANDEM_LAYER_kernels_FILES src/kernels)
set(TANDEM_LAYER_kernels_USES core)

# The CUDA device: its memory and kernels, registered with core and kernels (C++20 here; the .cu
# files nvcc compiles are C++17 and reach the rest only through src/cuda/device_api.h).
set(TANDEM_LAYER_cuda_FILES src/cuda include/tandem/cuda.h)
set(TANDEM_LAYER_cuda_USES core kernels)

set(TANDEM_LAYER_autograd_FILES src/autograd include/tandem/autograd.h)
set(TANDEM_LAYER_autograd_USES core kernels)

set(TANDEM_LAYER_collectives_FILES src/collectives include/tandem/collectives)
set(TANDEM_LAYER_collectives_USES core)

set(TANDEM_LAYER_ops_FILES src/ops include/tandem/ops.h)
set(TANDEM_LAYER_ops_USES core kernels autograd collectives)

set(TANDEM_LAYER_nn_FILES src/nn include/tandem/layers.h include/tandem/initializers.h include/tandem/graph.h)
set(TANDEM_LAYER_nn_USES core autograd collectives ops)

set(TANDEM_LAYER_io_FILES src/io include/tandem/io.h include/tandem/keras_io.h)
set(TANDEM_LAYER_io_USES core)

set(TANDEM_LAYER_data_FILES src/data include/tandem/data)
set(TANDEM_LAYER_data_USES core io)

# Optimizers run their fused update kernels directly: an update records no gradient.
set(TANDEM_LAYER_train_FILES src/train include/tandem/losses.h include/tandem/metrics.h include/tandem/optimizers.h)
set(TANDEM_LAYER_train_USES core kernels autograd collectives ops nn)

set(TANDEM_LAYER_distribute_FILES src/distribute include/tandem/distribute)
set(TANDEM_LAYER_distribute_USES core autograd collectives ops nn io data train)

set(TANDEM_LAYER_fit_FILES src/fit include/tandem/model.h include/tandem/callbacks.h include/tandem/tandem.h
    include/tandem/hvd.h include/tandem/model_json.h)
set(TANDEM_LAYER_fit_USES core cuda autograd collectives ops nn io data train distribute)

set(TANDEM_LAYER_cli_FILES src/cli)
set(TANDEM_LAYER_cli_USES core cuda autograd collectives ops nn io data train distribute fit)

# The Python module (tandem._tandem, pybind11): built on its own, as the command line is.
set(TANDEM_LAYER_python_FILES src/python)
set(TANDEM_LAYER_python_USES core cuda autograd collectives ops nn io data train distribute fit)

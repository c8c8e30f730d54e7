/* dev/gpu_probe.cu — can CUDA use a GPU here? find_gpus (tests/lib.sh)
 * asks it after nvidia-smi: nvidia-smi lists GPUs whenever the driver is
 * loaded, even when the driver is too old for the CUDA this project is
 * built with, and then every GPU check would fail on its first CUDA call
 * instead of saying why once.
 *
 * Prints the number of GPUs CUDA sees and exits 0, or prints why none can
 * be used (for a driver too old, both CUDA versions) and exits 1. */
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    int count = 0, driver = 0, runtime = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (driver == 0) {
        printf("no NVIDIA driver is loaded (cudaDriverGetVersion: 0)\n");
        return 1;
    }
    if (err == cudaErrorInsufficientDriver) {
        printf("the NVIDIA driver runs CUDA %d.%d at most, older than the CUDA %d.%d this "
               "project builds with: update the driver\n",
               driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        return 1;
    }
    if (err != cudaSuccess || count == 0) {
        printf("cudaGetDeviceCount: %s\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 GPUs");
        return 1;
    }
    printf("%d\n", count);
    return 0;
}

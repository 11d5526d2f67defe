// callcost: the cost of the CUDA runtime calls on a batch-1 request's path,
// from C, to compare with the same calls from Go through purego
// (BenchmarkCallCost in internal/cuda). Build and run on a GPU host:
//   nvcc -O2 -o /tmp/callcost tools/latency/callcost.cu && /tmp/callcost
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

__global__ void noop(void *) {}

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

#define CK(x)                                                              \
  do {                                                                     \
    cudaError_t e = (x);                                                   \
    if (e != cudaSuccess) {                                                \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));              \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main() {
  const int iters = 20000;
  const size_t bytes = 3 * 224 * 224 * 4;
  cudaStream_t s;
  void *pinned, *dev;
  cudaEvent_t ev;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreate(&s));
  CK(cudaHostAlloc(&pinned, bytes, 0));
  CK(cudaMalloc(&dev, bytes));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaGraphExec_t g1, g30;
  for (int n : {1, 30}) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; i++) noop<<<1, 32, 0, s>>>(dev);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(n == 1 ? &g1 : &g30, g, 0));
  }
  noop<<<1, 32, 0, s>>>(dev);
  CK(cudaStreamSynchronize(s));
  struct Case {
    const char *name;
    bool sync;
    int what;
  } cases[] = {
      {"SetDevice", false, 0},       {"Launch", false, 1},
      {"LaunchSync", true, 1},       {"H2D602KB", false, 2},
      {"H2D602KBSync", true, 2},     {"D2H4KBSync", true, 3},
      {"StreamSyncIdle", true, 4},   {"EventRecord", false, 5},
      {"EventRecordSync", true, 5},  {"GraphLaunch1", false, 6},
      {"GraphLaunch1Sync", true, 6}, {"GraphLaunch30", false, 7},
      {"GraphLaunch30Sync", true, 7},
  };
  for (auto &c : cases) {
    double t0 = now_us();
    for (int i = 0; i < iters; i++) {
      switch (c.what) {
      case 0: cudaSetDevice(0); break;
      case 1: noop<<<1, 32, 0, s>>>(dev); break;
      case 2: cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, s); break;
      case 3: cudaMemcpyAsync(pinned, dev, 4000, cudaMemcpyDeviceToHost, s); break;
      case 4: break;
      case 5: cudaEventRecord(ev, s); break;
      case 6: cudaGraphLaunch(g1, s); break;
      case 7: cudaGraphLaunch(g30, s); break;
      }
      if (c.sync) {
        if (c.what == 5) cudaEventSynchronize(ev);
        else cudaStreamSynchronize(s);
      } else if (i % 64 == 63) {
        cudaStreamSynchronize(s);
      }
    }
    CK(cudaStreamSynchronize(s));
    printf("%-20s %8.2f us/call\n", c.name, (now_us() - t0) / iters);
  }
  return 0;
}

// Image preprocessing kernels of goinfer's GPU image path: decoded planar
// RGB (nvJPEG's output, one image per descriptor, any size) to a model's
// input slot in one pass. Each output pixel of the center crop is computed
// straight from the decoded image with the separable antialiased bilinear
// filter torchvision's Resize applies (a triangle filter whose support
// widens with the downscale factor, as PIL and torch's antialias=True), so
// the resized image is never materialised; then to float, normalised with
// the model's mean and std, and stored as NCHW float32 or float16.
//
// Like goinfer.cu it needs no CUDA headers, so that clang's NVPTX back end
// compiles it where no CUDA toolkit is installed; build.sh writes the PTX
// (and, with nvcc, a fatbin).

#ifdef __clang__
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __forceinline__ __attribute__((always_inline)) inline
#define TID_X __nvvm_read_ptx_sreg_tid_x()
#define NTID_X __nvvm_read_ptx_sreg_ntid_x()
#define CTAID_X __nvvm_read_ptx_sreg_ctaid_x()
#define CTAID_Y __nvvm_read_ptx_sreg_ctaid_y()
#else
#define TID_X threadIdx.x
#define NTID_X blockDim.x
#define CTAID_X blockIdx.x
#define CTAID_Y blockIdx.y
#endif

typedef unsigned short u16;
typedef unsigned char u8;

__device__ __forceinline__ u16 f2h(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// ImageDesc describes one decoded image and where its crop lies in the
// resized image. Plane c starts at base + c * plane_stride.
struct ImageDesc {
  const u8* base;
  long long plane_stride;
  int pitch;
  int width, height;        // decoded size
  int resized_w, resized_h; // size after Resize
  int left, top;            // crop offset in the resized image
};

// Taps is the most filter taps per axis (a downscale of up to 31x).
#define MAX_TAPS 64

__device__ __forceinline__ float triangle(float x) {
  x = x < 0.f ? -x : x;
  return x < 1.f ? 1.f - x : 0.f;
}

// axis computes the taps of one output coordinate o of an axis scaled from
// in to out: the first input index and the normalised weights.
__device__ __forceinline__ int axis(int o, int in, int out, float* w, int* first) {
  float scale = (float)in / (float)out;
  float support = scale > 1.f ? scale : 1.f;
  float inv = 1.f / support;
  float center = ((float)o + 0.5f) * scale;
  int lo = (int)(center - support + 0.5f);
  if (lo < 0) lo = 0;
  int hi = (int)(center + support + 0.5f);
  if (hi > in) hi = in;
  int n = hi - lo;
  if (n > MAX_TAPS) n = MAX_TAPS;
  float sum = 0.f;
  for (int k = 0; k < n; k++) {
    float v = triangle(((float)(lo + k) - center + 0.5f) * inv);
    w[k] = v;
    sum += v;
  }
  float r = sum > 0.f ? 1.f / sum : 0.f;
  for (int k = 0; k < n; k++) w[k] *= r;
  *first = lo;
  return n;
}

template <typename OT>
__device__ __forceinline__ void store(OT* p, float v);
template <>
__device__ __forceinline__ void store<float>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store<u16>(u16* p, float v) { *p = f2h(v); }

// preprocess: grid (ceil(crop_w*crop_h / blockDim.x), n images); out is
// [n, 3, crop_h, crop_w]; scale[c] = 1/(255*std[c]), shift[c] = -mean[c]/std[c].
template <typename OT>
__device__ void preprocess(const ImageDesc* descs, OT* out, int crop_w, int crop_h, const float* scale,
                           const float* shift) {
  int img = CTAID_Y;
  int p = CTAID_X * NTID_X + TID_X;
  int plane = crop_w * crop_h;
  if (p >= plane) return;
  ImageDesc d = descs[img];
  int ox = p % crop_w, oy = p / crop_w;
  float wx[MAX_TAPS], wy[MAX_TAPS];
  int x0, y0;
  int nx = axis(ox + d.left, d.width, d.resized_w, wx, &x0);
  int ny = axis(oy + d.top, d.height, d.resized_h, wy, &y0);
  OT* o = out + (long long)img * 3 * plane + p;
  for (int c = 0; c < 3; c++) {
    const u8* src = d.base + c * d.plane_stride;
    float acc = 0.f;
    for (int j = 0; j < ny; j++) {
      const u8* row = src + (long long)(y0 + j) * d.pitch + x0;
      float r = 0.f;
      for (int i = 0; i < nx; i++) r += wx[i] * (float)row[i];
      acc += wy[j] * r;
    }
    store<OT>(o + c * plane, acc * scale[c] + shift[c]);
  }
}

extern "C" __global__ void preprocess_f32(const ImageDesc* descs, float* out, int crop_w, int crop_h,
                                          const float* scale, const float* shift) {
  preprocess<float>(descs, out, crop_w, crop_h, scale, shift);
}
extern "C" __global__ void preprocess_f16(const ImageDesc* descs, u16* out, int crop_w, int crop_h,
                                          const float* scale, const float* shift) {
  preprocess<u16>(descs, out, crop_w, crop_h, scale, shift);
}

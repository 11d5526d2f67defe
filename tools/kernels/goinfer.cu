// Custom CUDA kernels of goinfer's cuda engine: input conversion (dtype,
// layout, normalization, channel padding) and the few elementwise ops the
// eager path runs outside cuDNN (PyTorch's eager mode runs these as its own
// kernels too). build.sh compiles this file to PTX, which the engine embeds
// and JIT-loads through the driver API.
//
// The file avoids the CUDA headers so that both nvcc and clang (-nocudainc)
// compile it: half and bfloat16 values are stored as unsigned short and
// converted with inline PTX.

#ifdef __clang__
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __forceinline__ __attribute__((always_inline)) inline
#define TID_X __nvvm_read_ptx_sreg_tid_x()
#define NTID_X __nvvm_read_ptx_sreg_ntid_x()
#define CTAID_X __nvvm_read_ptx_sreg_ctaid_x()
#define NCTAID_X __nvvm_read_ptx_sreg_nctaid_x()
#else
#define TID_X threadIdx.x
#define NTID_X blockDim.x
#define CTAID_X blockIdx.x
#define NCTAID_X gridDim.x
#endif

typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long sz;

struct f16 { u16 v; };
struct bf16 { u16 v; };
// 16 bytes: one vector load or store.
struct alignas(16) U4 { unsigned a, b, c, d; };

__device__ __forceinline__ float bits_f32(unsigned b) {
  float f;
  asm("mov.b32 %0, %1;" : "=f"(f) : "r"(b));
  return f;
}
__device__ __forceinline__ unsigned f32_bits(float f) {
  unsigned b;
  asm("mov.b32 %0, %1;" : "=r"(b) : "f"(f));
  return b;
}
__device__ __forceinline__ float h2f(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f2h(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float b2f(u16 h) { return bits_f32(((unsigned)h) << 16); }
__device__ __forceinline__ u16 f2b(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const u8* p) { return (float)*p; }
__device__ __forceinline__ float load(const f16* p) { return h2f(p->v); }
__device__ __forceinline__ float load(const bf16* p) { return b2f(p->v); }
__device__ __forceinline__ void store(float* p, float f) { *p = f; }
__device__ __forceinline__ void store(f16* p, float f) { p->v = f2h(f); }
__device__ __forceinline__ void store(bf16* p, float f) { p->v = f2b(f); }

// Vectors of 16 bytes: 4 floats or 8 halves, unpacked to floats.
template <typename T> struct Vec;
template <> struct Vec<float> {
  enum { N = 4 };
  static __device__ __forceinline__ void unpack(U4 u, float* f) {
    f[0] = bits_f32(u.a); f[1] = bits_f32(u.b); f[2] = bits_f32(u.c); f[3] = bits_f32(u.d);
  }
  static __device__ __forceinline__ U4 pack(const float* f) {
    U4 u; u.a = f32_bits(f[0]); u.b = f32_bits(f[1]); u.c = f32_bits(f[2]); u.d = f32_bits(f[3]);
    return u;
  }
};
template <typename H, float (*TO)(u16), u16 (*FROM)(float)> struct Vec16 {
  enum { N = 8 };
  static __device__ __forceinline__ void unpack(U4 u, float* f) {
    unsigned w[4] = {u.a, u.b, u.c, u.d};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      f[2 * i] = TO((u16)(w[i] & 0xffff));
      f[2 * i + 1] = TO((u16)(w[i] >> 16));
    }
  }
  static __device__ __forceinline__ U4 pack(const float* f) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = (unsigned)FROM(f[2 * i]) | ((unsigned)FROM(f[2 * i + 1]) << 16);
    U4 u; u.a = w[0]; u.b = w[1]; u.c = w[2]; u.d = w[3];
    return u;
  }
};
template <> struct Vec<f16> : Vec16<f16, h2f, f2h> {};
template <> struct Vec<bf16> : Vec16<bf16, b2f, f2b> {};

template <typename T> __device__ __forceinline__ void vload(const T* p, float* f) {
  Vec<T>::unpack(*(const U4*)p, f);
}
template <typename T> __device__ __forceinline__ void vstore(T* p, const float* f) {
  *(U4*)p = Vec<T>::pack(f);
}

// Indices are 32-bit: the engine checks that no tensor has 2^31 elements.
#define GRID_LOOP(i, n) \
  for (int i = CTAID_X * NTID_X + TID_X; i < (n); i += NCTAID_X * NTID_X)

#define MAXC 16

// convert reads n images of c channels in NCHW order (h x w) and writes
// them in the compute dtype with cpad <= 16 channels (the extra ones zero)
// as NCHW (nhwc = 0) or NHWC (nhwc = 1). affine, when not null, holds c
// scales then c shifts applied as x*scale+shift (uint8 pixels to normalized
// values).
//
// With s2d (space to depth, NHWC only) it writes the input of a stride-2
// convolution rewritten as a stride-1 one: output pixel (y, x) holds, for
// py, px in {0, 1}, the c channels of input pixel (2y+py-pad, 2x+px-pad)
// (zero outside the image) as channels (py*2+px)*c + ch; the output is
// oh x ow pixels.
template <typename I, typename O, int C>
__device__ __forceinline__ void convert_px(const I* in, O* out, int q, int cc, int h, int w, int oh, int ow,
                                           int cpad, int s2d, int pad, int nhwc, const float* affine) {
  const int c = C > 0 ? C : cc;
  float v[MAXC];
#pragma unroll
  for (int k = 0; k < MAXC; k++) v[k] = 0.f;
  int plane = oh * ow;
  int b = q / plane;
  int p = q - b * plane;
  const I* src = in + (sz)b * c * h * w;
  if (s2d) {
    int y = p / ow, x = p - (p / ow) * ow;
#pragma unroll
    for (int py = 0; py < 2; py++) {
#pragma unroll
      for (int px = 0; px < 2; px++) {
        int iy = 2 * y + py - pad, ix = 2 * x + px - pad;
        bool ok = iy >= 0 && iy < h && ix >= 0 && ix < w;
#pragma unroll
        for (int ch = 0; ch < (C > 0 ? C : 1); ch++) {
          if (C > 0 && ok) {
            float f = load(src + ((sz)ch * h + iy) * w + ix);
            if (affine) f = f * affine[ch] + affine[c + ch];
            v[(py * 2 + px) * C + ch] = f;
          }
        }
      }
    }
  } else {
#pragma unroll
    for (int ch = 0; ch < MAXC; ch++) {
      if (ch < c) {
        float f = load(src + (sz)ch * plane + p);
        if (affine) f = f * affine[ch] + affine[c + ch];
        v[ch] = f;
      }
    }
  }
  if (nhwc) {
    O* dst = out + (sz)q * cpad;
    const int V = Vec<O>::N;
    if (cpad % V == 0) {
#pragma unroll
      for (int k = 0; k < MAXC; k += V)
        if (k < cpad) vstore(dst + k, v + k);
    } else {
#pragma unroll
      for (int k = 0; k < MAXC; k++)
        if (k < cpad) store(dst + k, v[k]);
    }
  } else {
    O* dst = out + (sz)b * cpad * plane + p;
#pragma unroll
    for (int k = 0; k < MAXC; k++)
      if (k < cpad) store(dst + (sz)k * plane, v[k]);
  }
}

template <typename I, typename O>
__device__ void convert(const I* in, O* out, int n, int c, int h, int w, int oh, int ow, int cpad, int s2d,
                        int pad, int nhwc, const float* affine) {
  int npix = n * oh * ow;
  if (c == 3) {
    GRID_LOOP(q, npix) convert_px<I, O, 3>(in, out, q, c, h, w, oh, ow, cpad, s2d, pad, nhwc, affine);
  } else {
    GRID_LOOP(q, npix) convert_px<I, O, 0>(in, out, q, c, h, w, oh, ow, cpad, 0, pad, nhwc, affine);
  }
}

// The elementwise kernels take vec = 1 when every 16-byte vector of
// elements lies in one channel-run (the engine checks): then each thread
// handles a whole vector. ch(i) = (i / div) % c (div = 1 for NHWC, h*w for
// NCHW).

// scale_shift is inference batch norm: y = x*scale[ch] + shift[ch].
template <typename T>
__device__ void scale_shift(T* y, const T* x, const float* scale, const float* shift, int n, int c, int div, int vec) {
  const int V = Vec<T>::N;
  if (vec) {
    GRID_LOOP(j, n / V) {
      float f[V];
      vload(x + j * V, f);
      int i0 = j * V;
#pragma unroll
      for (int k = 0; k < V; k++) {
        int ch = ((i0 + k) / div) % c;
        f[k] = f[k] * scale[ch] + shift[ch];
      }
      vstore(y + j * V, f);
    }
    return;
  }
  GRID_LOOP(i, n) {
    int ch = (i / div) % c;
    store(y + i, load(x + i) * scale[ch] + shift[ch]);
  }
}

template <typename T>
__device__ void relu(T* y, const T* x, int n, int vec) {
  const int V = Vec<T>::N;
  if (vec) {
    GRID_LOOP(j, n / V) {
      float f[V];
      vload(x + j * V, f);
#pragma unroll
      for (int k = 0; k < V; k++) f[k] = f[k] > 0.f ? f[k] : 0.f;
      vstore(y + j * V, f);
    }
    return;
  }
  GRID_LOOP(i, n) {
    float v = load(x + i);
    store(y + i, v > 0.f ? v : 0.f);
  }
}

template <typename T>
__device__ void add(T* y, const T* a, const T* b, int n, int vec) {
  const int V = Vec<T>::N;
  if (vec) {
    GRID_LOOP(j, n / V) {
      float f[V], g[V];
      vload(a + j * V, f);
      vload(b + j * V, g);
#pragma unroll
      for (int k = 0; k < V; k++) f[k] += g[k];
      vstore(y + j * V, f);
    }
    return;
  }
  GRID_LOOP(i, n) { store(y + i, load(a + i) + load(b + i)); }
}

// epilogue is what cudnnConvolutionBiasActivationForward adds after the
// convolution, for the configurations cuDNN does not fuse:
// y = act(x + bias[ch] + z), bias and z optional.
template <typename T>
__device__ void epilogue(T* y, const T* x, const float* bias, const T* z, int n, int c, int div, int relu, int vec) {
  const int V = Vec<T>::N;
  if (vec) {
    GRID_LOOP(j, n / V) {
      float f[V], g[V];
      vload(x + j * V, f);
      if (z) vload(z + j * V, g);
      int i0 = j * V;
#pragma unroll
      for (int k = 0; k < V; k++) {
        if (bias) f[k] += bias[((i0 + k) / div) % c];
        if (z) f[k] += g[k];
        if (relu && f[k] < 0.f) f[k] = 0.f;
      }
      vstore(y + j * V, f);
    }
    return;
  }
  GRID_LOOP(i, n) {
    float v = load(x + i);
    if (bias) v += bias[(i / div) % c];
    if (z) v += load(z + i);
    if (relu && v < 0.f) v = 0.f;
    store(y + i, v);
  }
}

// maxpool is PyTorch's max_pool2d (padding never wins, floor rounding) over
// NCHW (nhwc = 0) or NHWC (nhwc = 1) values; NHWC with c a multiple of the
// vector width moves whole vectors of channels.
template <typename T>
__device__ void maxpool(T* y, const T* x, int nb, int c, int h, int w, int oh, int ow, int k, int s, int pad, int nhwc) {
  const int V = Vec<T>::N;
  if (nhwc && c % V == 0) {
    int cv = c / V;
    int n = nb * oh * ow * cv;
    GRID_LOOP(i, n) {
      int r = i;
      int vc = r % cv; r /= cv;
      int ox = r % ow; r /= ow;
      int oy = r % oh;
      int b = r / oh;
      float m[V];
#pragma unroll
      for (int t = 0; t < V; t++) m[t] = -3.402823466e38f;
      for (int dy = 0; dy < k; dy++) {
        int iy = oy * s - pad + dy;
        if (iy < 0 || iy >= h) continue;
        for (int dx = 0; dx < k; dx++) {
          int ix = ox * s - pad + dx;
          if (ix < 0 || ix >= w) continue;
          float f[V];
          vload(x + ((sz)(b * h + iy) * w + ix) * c + vc * V, f);
#pragma unroll
          for (int t = 0; t < V; t++) m[t] = f[t] > m[t] ? f[t] : m[t];
        }
      }
      vstore(y + (sz)i * V, m);
    }
    return;
  }
  int n = nb * c * oh * ow;
  GRID_LOOP(i, n) {
    int ch, ox, oy, b, r = i;
    if (nhwc) {
      ch = r % c; r /= c;
      ox = r % ow; r /= ow;
      oy = r % oh; b = r / oh;
    } else {
      ox = r % ow; r /= ow;
      oy = r % oh; r /= oh;
      ch = r % c; b = r / c;
    }
    float m = -3.402823466e38f;
    for (int dy = 0; dy < k; dy++) {
      int iy = oy * s - pad + dy;
      if (iy < 0 || iy >= h) continue;
      for (int dx = 0; dx < k; dx++) {
        int ix = ox * s - pad + dx;
        if (ix < 0 || ix >= w) continue;
        sz idx = nhwc ? ((sz)(b * h + iy) * w + ix) * c + ch : ((sz)(b * c + ch) * h + iy) * w + ix;
        float v = load(x + idx);
        m = v > m ? v : m;
      }
    }
    store(y + i, m);
  }
}

// avgpool is global average pooling to float [nb, c] (the linear layer
// runs in float32 whatever the precision: it is tiny, and it keeps two
// roundings off the logits).
template <typename T>
__device__ void avgpool(float* y, const T* x, int nb, int c, int hw, int nhwc) {
  int n = nb * c;
  GRID_LOOP(i, n) {
    int b = i / c;
    int ch = i - b * c;
    float acc = 0.f;
    if (nhwc) {
      // Eight loads in flight: at batch 1 there are only c threads, and one
      // dependent load at a time made this 12 us of a 260 us forward.
      const T* p = x + (sz)b * hw * c + ch;
      float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      int j = 0;
      for (; j + 8 <= hw; j += 8) {
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] += load(p + (sz)(j + k) * c);
      }
      for (; j < hw; j++) a[0] += load(p + (sz)j * c);
      acc = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    } else {
      const T* p = x + (sz)i * hw;
      for (int j = 0; j < hw; j++) acc += load(p + j);
    }
    y[i] = acc / (float)hw;
  }
}

// add_bias writes float logits: y[r, j] = x[r, j] + bias[j] (y may be x).
extern "C" __global__ void add_bias_f32(float* y, const float* x, const float* bias, int n, int cols) {
  GRID_LOOP(i, n) { y[i] = x[i] + bias[i % cols]; }
}

#define CONVERT(IN, IT, OUT, OT)                                                                     \
  extern "C" __global__ void convert_##IN##_##OUT(const IT* in, OT* out, int n, int c, int h, int w, \
                                                  int oh, int ow, int cpad, int s2d, int pad,        \
                                                  int nhwc, const float* affine) {                   \
    convert<IT, OT>(in, out, n, c, h, w, oh, ow, cpad, s2d, pad, nhwc, affine);                      \
  }
CONVERT(f32, float, f32, float)
CONVERT(f32, float, f16, f16)
CONVERT(f32, float, bf16, bf16)
CONVERT(f16, f16, f32, float)
CONVERT(f16, f16, f16, f16)
CONVERT(f16, f16, bf16, bf16)
CONVERT(u8, u8, f32, float)
CONVERT(u8, u8, f16, f16)
CONVERT(u8, u8, bf16, bf16)

#define ELEMENTWISE(S, T)                                                                              \
  extern "C" __global__ void scale_shift_##S(T* y, const T* x, const float* scale,                    \
                                             const float* shift, int n, int c, int div, int vec) {     \
    scale_shift<T>(y, x, scale, shift, n, c, div, vec);                                                \
  }                                                                                                    \
  extern "C" __global__ void relu_##S(T* y, const T* x, int n, int vec) { relu<T>(y, x, n, vec); }    \
  extern "C" __global__ void add_##S(T* y, const T* a, const T* b, int n, int vec) {                  \
    add<T>(y, a, b, n, vec);                                                                           \
  }                                                                                                    \
  extern "C" __global__ void epilogue_##S(T* y, const T* x, const float* bias, const T* z, int n,     \
                                          int c, int div, int relu, int vec) {                         \
    epilogue<T>(y, x, bias, z, n, c, div, relu, vec);                                                  \
  }                                                                                                    \
  extern "C" __global__ void maxpool_##S(T* y, const T* x, int nb, int c, int h, int w, int oh,       \
                                         int ow, int k, int s, int pad, int nhwc) {                    \
    maxpool<T>(y, x, nb, c, h, w, oh, ow, k, s, pad, nhwc);                                            \
  }                                                                                                    \
  extern "C" __global__ void avgpool_##S(float* y, const T* x, int nb, int c, int hw, int nhwc) {     \
    avgpool<T>(y, x, nb, c, hw, nhwc);                                                                 \
  }
ELEMENTWISE(f32, float)
ELEMENTWISE(f16, f16)
ELEMENTWISE(bf16, bf16)

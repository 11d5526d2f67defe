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

// conv_mma: a convolution of channels-last 16-bit tensors on the tensor
// cores (mma.sync m16n8k16, float32 accumulation) as an implicit GEMM whose
// reduction is split over gridDim.y slices. cuDNN's kernels for a batch of
// one leave most of the GPU idle on small maps (a 7x7 map is 49 GEMM rows:
// one tile row); splitting the reduction gives every SM work. The splits
// add their float32 sums into a zeroed buffer (red.global.add: no round
// trip), and the split that finishes last for a tile reads the total,
// applies the epilogue and zeroes the tile again, so that the whole
// convolution is one kernel.
//
// GEMM view: row m is output pixel (image, oh, ow) of M, column n an output
// channel of Cout, and the reduction runs over (r, s, c) in chunks of 32
// consecutive elements of one filter row, whose (s, c) are contiguous in
// both the input and the filter (KS*C % 32 == 0, C % 8 == 0: a 16-byte
// piece never straddles two taps; Cout % 64 == 0). Channels-last input
// makes even a narrow stem (C = 16 after space-to-depth) a full chunk. A
// block of 8 warps (2 x 4) computes a 64 x 64 tile of rows x columns, each
// warp 32 x 16 as 2 x 2 fragments. Chunks stream through a ring of CM_STAGES shared
// memory buffers by cp.async (zero-filled outside the image and past M), so
// that several chunks' loads are in flight while one is multiplied. Each
// thread reads 16 contiguous bytes (8 channels) per fragment row and
// column, which serve two mma steps: within a chunk the reduction order is
// permuted the same way for both operands (thread t's logical k 2t+e and
// 2t+8+e of step j are channels 8t+4j+e and 8t+4j+2+e), so no shuffles are
// needed, and a warp's reads are 512 contiguous bytes (no bank conflicts).
//
// x: [N, H, W, C]; w: [Cout, KS, KS, C]; bias: float32 [Cout]; res: [M,
// Cout] or null; y: [M, Cout]; part: float32 [M, Cout], zero (used with
// more than one split); count: one zero word per tile, left zero. chunks:
// reduction chunks per split.
template <typename T> struct ConvMma;
template <> struct ConvMma<f16> {
  static __device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct ConvMma<bf16> {
  static __device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ void ldcg8(const float* p, float* r) {
  asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(r[0]), "=f"(r[1]) : "l"(p));
}

#ifdef __clang__
#define __shared__ __attribute__((shared))
#define LAUNCH_BOUNDS(n) __attribute__((launch_bounds(n)))
#define CTAID_Y __nvvm_read_ptx_sreg_ctaid_y()
#define NCTAID_Y __nvvm_read_ptx_sreg_nctaid_y()
#else
#define LAUNCH_BOUNDS(n) __launch_bounds__(n)
#define CTAID_Y blockIdx.y
#define NCTAID_Y gridDim.y
#endif
#define SYNC_THREADS() asm volatile("bar.sync 0;" ::: "memory")
#define FENCE() asm volatile("membar.gl;" ::: "memory")

__device__ __forceinline__ unsigned atomic_inc_u32(unsigned* p) {
  unsigned old;
  asm volatile("atom.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
}

// 8 warps (2 x 4) of 32 x 16 outputs each: two warps per scheduler, so
// that one's shared loads and mma chain overlap the other's.
#define CM_THREADS 256
#define CM_MB 2
#define CM_NB 2
// Tile rows of each operand a thread copies per chunk (64 rows of 4 pieces).
#define CM_LR (256 / CM_THREADS)
#ifndef CM_STAGES
#define CM_STAGES 4
#endif
// One chunk's tile of one operand: 64 rows of 32 channels (64 bytes).
#define CM_TILE_BYTES (64 * 64)

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// cp_async16 copies 16 bytes from global p to shared s, or zeros when !ok.
__device__ __forceinline__ void cp_async16(unsigned s, const void* p, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(p), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void lds16(unsigned s, unsigned* r) {
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
// red_add2 adds (a, b) to p[0], p[1] at L2 (one vector reduction where
// the target has it: nvcc for sm_90 and later).
__device__ __forceinline__ void red_add2(float* p, float a, float b) {
#if !defined(__clang__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1,%2};" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(a) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p + 1), "f"(b) : "memory");
#endif
}

template <typename T>
__device__ __forceinline__ void conv_mma(const T* x, const T* w, const float* bias, const T* res, T* y, float* part,
                                         unsigned* count, int H, int W, int C, int OH, int OW, int Cout, int KS,
                                         int stride, int pad, int M, int chunks, int relu) {
  __shared__ __attribute__((aligned(16))) unsigned char smem[CM_STAGES][2][CM_TILE_BYTES];
  const int tid = TID_X, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tilesN = Cout >> 6;
  const int tile = CTAID_X, mt = tile / tilesN, nt = tile - mt * tilesN;
  const int split = CTAID_Y, splits = NCTAID_Y;
  const int RC = KS * C >> 5, total = KS * RC;
  const int q0 = split * chunks, q1 = q0 + chunks < total ? q0 + chunks : total;
  const int ohw = OH * OW, K = KS * KS * C;

  // Loader: this thread copies 16 bytes (piece p) of CM_LR tile rows of
  // both operands per chunk.
  const int lr = tid >> 2, piece = tid & 3;
  const T* xrow[CM_LR];
  int ih0[CM_LR], iw0[CM_LR];
  const T* wcol[CM_LR];
#pragma unroll
  for (int i = 0; i < CM_LR; i++) {
    int m = mt * 64 + lr + (CM_THREADS / 4) * i;
    if (m < M) {
      int img = m / ohw, p = m - img * ohw, oh = p / OW, ow = p - oh * OW;
      xrow[i] = x + (sz)img * H * W * C;
      ih0[i] = oh * stride - pad;
      iw0[i] = ow * stride - pad;
    } else {
      xrow[i] = x;
      ih0[i] = iw0[i] = -0x40000000;
    }
    wcol[i] = w + (sz)(nt * 64 + lr + (CM_THREADS / 4) * i) * K;
  }
  const unsigned sbase = smem_addr(&smem[0][0][0]);
  const unsigned soff = (unsigned)(lr * 64 + piece * 16);
  // This piece's 8 elements of the next chunk to fetch: filter row fr,
  // tap fs and channel fc (element fe of the row's KS*C), advanced chunk by
  // chunk (chunks never straddle rows: KS*C % 32 == 0).
  int fr = q0 / RC, fe = ((q0 - fr * RC) << 5) + 8 * piece, fs = fe / C, fc = fe - fs * C;
  auto fetch = [&](int q, int stage) {
    if (q < q1) {
#pragma unroll
      for (int i = 0; i < CM_LR; i++) {
        int ih = ih0[i] + fr, iw = iw0[i] + fs;
        bool ok = ih >= 0 && ih < H && iw >= 0 && iw < W;
        const T* src = ok ? xrow[i] + ((sz)ih * W + iw) * C + fc : x;
        unsigned so = soff + (unsigned)(i * (CM_THREADS / 4) * 64);
        cp_async16(sbase + (unsigned)((stage * 2 + 0) * CM_TILE_BYTES) + so, src, ok);
        cp_async16(sbase + (unsigned)((stage * 2 + 1) * CM_TILE_BYTES) + so, wcol[i] + fr * KS * C + fe, true);
      }
      fe += 32;
      fc += 32;
      while (fc >= C) {
        fc -= C;
        fs++;
      }
      if (fs >= KS) {
        fs -= KS;
        fe -= KS * C;
        fr++;
      }
    }
    cp_async_commit();
  };

  float acc[CM_MB][CM_NB][4];
#pragma unroll
  for (int i = 0; i < CM_MB; i++)
#pragma unroll
    for (int j = 0; j < CM_NB; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

  const int rowBase = (warp & 1) * 32, colBase = (warp >> 1) * 16;
#pragma unroll
  for (int s = 0; s < CM_STAGES - 1; s++) fetch(q0 + s, s);
  // The epilogue's operands, read now so that their latency hides behind
  // the main loop's.
  const int row0 = mt * 64 + rowBase, col0 = nt * 64 + colBase;
  float bv[CM_NB][2];
  unsigned rv[CM_MB][2][CM_NB];
#pragma unroll
  for (int j = 0; j < CM_NB; j++) {
    bv[j][0] = bias[col0 + j * 8 + 2 * t];
    bv[j][1] = bias[col0 + j * 8 + 2 * t + 1];
  }
#pragma unroll
  for (int i = 0; i < CM_MB; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int m = row0 + i * 16 + h * 8 + g;
#pragma unroll
      for (int j = 0; j < CM_NB; j++)
        rv[i][h][j] = res && m < M ? *(const unsigned*)(res + (sz)m * Cout + col0 + j * 8 + 2 * t) : 0u;
    }
  for (int q = q0; q < q1; q++) {
    const int stage = (q - q0) % CM_STAGES;
    cp_async_wait<CM_STAGES - 2>();
    SYNC_THREADS();
    // The buffer refilled here was read in the previous iteration, before
    // the barrier above.
    fetch(q + CM_STAGES - 1, (q - q0 + CM_STAGES - 1) % CM_STAGES);
    const unsigned sa = sbase + (unsigned)(stage * 2 * CM_TILE_BYTES), sb = sa + CM_TILE_BYTES;
    unsigned a[CM_MB][2][4], b[CM_NB][4];
#pragma unroll
    for (int i = 0; i < CM_MB; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) lds16(sa + (unsigned)((rowBase + i * 16 + h * 8 + g) * 64 + t * 16), a[i][h]);
#pragma unroll
    for (int j = 0; j < CM_NB; j++) lds16(sb + (unsigned)((colBase + j * 8 + g) * 64 + t * 16), b[j]);
#pragma unroll
    for (int st = 0; st < 2; st++) {
#pragma unroll
      for (int i = 0; i < CM_MB; i++) {
        unsigned fa[4] = {a[i][0][2 * st], a[i][1][2 * st], a[i][0][2 * st + 1], a[i][1][2 * st + 1]};
#pragma unroll
        for (int j = 0; j < CM_NB; j++) ConvMma<T>::mma(acc[i][j], fa, b[j][2 * st], b[j][2 * st + 1]);
      }
    }
  }
  cp_async_wait<0>();

  if (splits > 1) {
    // Add this split's sums into the tile; the last split to arrive
    // reads the total back and zeroes it for the next launch.
#pragma unroll
    for (int i = 0; i < CM_MB; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        int m = row0 + i * 16 + h * 8 + g;
        if (m >= M) continue;
        float* pr = part + (sz)m * Cout + col0 + 2 * t;
#pragma unroll
        for (int j = 0; j < CM_NB; j++) red_add2(pr + j * 8, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    FENCE();
    SYNC_THREADS();
    unsigned mine = 0;
    if (tid == 0) {
      mine = atomic_inc_u32(count + tile) == (unsigned)(splits - 1);
      if (mine) count[tile] = 0;
    }
    // A barrier that also tells every thread thread 0's answer.
    unsigned last;
    asm volatile("{ .reg .pred p, q; setp.ne.u32 p, %1, 0; bar.red.or.pred q, 0, p; selp.u32 %0, 1, 0, q; }"
                 : "=r"(last)
                 : "r"(mine)
                 : "memory");
    if (!last) return;
    FENCE();
#pragma unroll
    for (int i = 0; i < CM_MB; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        int m = row0 + i * 16 + h * 8 + g;
        if (m >= M) continue;
        float* pr = part + (sz)m * Cout + col0 + 2 * t;
#pragma unroll
        for (int j = 0; j < CM_NB; j++) ldcg8(pr + j * 8, &acc[i][j][2 * h]);
      }
#pragma unroll
    for (int i = 0; i < CM_MB; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        int m = row0 + i * 16 + h * 8 + g;
        if (m >= M) continue;
        float* pr = part + (sz)m * Cout + col0 + 2 * t;
#pragma unroll
        for (int j = 0; j < CM_NB; j++)
          asm volatile("st.global.cg.v2.f32 [%0], {%1,%1};" ::"l"(pr + j * 8), "f"(0.f) : "memory");
      }
  }
#pragma unroll
  for (int i = 0; i < CM_MB; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int m = row0 + i * 16 + h * 8 + g;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < CM_NB; j++) {
        int n = col0 + j * 8 + 2 * t;
        float v0 = acc[i][j][2 * h] + bv[j][0], v1 = acc[i][j][2 * h + 1] + bv[j][1];
        sz off = (sz)m * Cout + n;
        if (res) {
          const T* r2 = (const T*)&rv[i][h][j];
          v0 += load(r2);
          v1 += load(r2 + 1);
        }
        if (relu) {
          v0 = v0 > 0.f ? v0 : 0.f;
          v1 = v1 > 0.f ? v1 : 0.f;
        }
        store(y + off, v0);
        store(y + off + 1, v1);
      }
    }
}

#define CONV_MMA(S, T)                                                                                           \
  extern "C" __global__ void LAUNCH_BOUNDS(CM_THREADS) conv_mma_##S(                                                \
      const T* x, const T* w, const float* bias, const T* res, T* y, float* part, unsigned* count, int H, int W, \
      int C, int OH, int OW, int Cout, int KS, int stride, int pad, int M, int chunks, int relu) {               \
    conv_mma<T>(x, w, bias, res, y, part, count, H, W, C, OH, OW, Cout, KS, stride, pad, M, chunks, relu);       \
  }
CONV_MMA(f16, f16)
CONV_MMA(bf16, bf16)

// Kernels of the cuda engine's general-graph executor (internal/engine/cuda
// graph*.go): every IR op that is not a convolution or a matrix product.
// Each kernel exists for the three storage types (f32, f16, bf16) and
// computes in float32. Like goinfer.cu it avoids the CUDA headers so that
// clang (-nocudainc) and nvcc both compile it; transcendental functions are
// built on the PTX approximations (ex2, lg2, rsqrt), accurate to a few ulp
// of float32, well inside the engine's fp32 tolerance.

#ifdef __clang__
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline)) inline
#define TID_X __nvvm_read_ptx_sreg_tid_x()
#define NTID_X __nvvm_read_ptx_sreg_ntid_x()
#define CTAID_X __nvvm_read_ptx_sreg_ctaid_x()
#define NCTAID_X __nvvm_read_ptx_sreg_nctaid_x()
#define SYNC() asm volatile("bar.sync 0;" ::: "memory")
#define SYNCWARP() asm volatile("bar.warp.sync -1;" ::: "memory")
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __noinline__
#define TID_X threadIdx.x
#define NTID_X blockDim.x
#define CTAID_X blockIdx.x
#define NCTAID_X gridDim.x
#define SYNC() __syncthreads()
#define SYNCWARP() __syncwarp()
#endif

typedef unsigned short u16;
typedef long long i64;

struct f16 { u16 v; };
struct bf16 { u16 v; };

__device__ __forceinline__ float bits_f32(unsigned b) {
  float f;
  asm("mov.b32 %0, %1;" : "=f"(f) : "r"(b));
  return f;
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

__device__ __forceinline__ unsigned f32_bits(float f) {
  unsigned b;
  asm("mov.b32 %0, %1;" : "=r"(b) : "f"(f));
  return b;
}

// 16 bytes: one vector load or store.
struct alignas(16) U4 { unsigned a, b, c, d; };

__device__ __forceinline__ float load(const float* p) { return *p; }
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
template <float (*TO)(u16), u16 (*FROM)(float)> struct Vec16 {
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
template <> struct Vec<f16> : Vec16<h2f, f2h> {};
template <> struct Vec<bf16> : Vec16<b2f, f2b> {};

template <typename T> __device__ __forceinline__ void vload(const T* p, float* f) { Vec<T>::unpack(*(const U4*)p, f); }
template <typename T> __device__ __forceinline__ void vstore(T* p, const float* f) { *(U4*)p = Vec<T>::pack(f); }

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2(float x) {
  float y;
  asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fsqrt(float x) {
  float y;
  asm("sqrt.rn.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fexp(float x) { return ex2(x * 1.4426950408889634f); }
__device__ __forceinline__ float flog(float x) { return lg2(x) * 0.6931471805599453f; }
__device__ __forceinline__ float fmin_(float a, float b) { return a < b ? a : b; }
__device__ __forceinline__ float fmax_(float a, float b) { return a > b ? a : b; }
__device__ __forceinline__ float fabs_(float a) { return a < 0 ? -a : a; }
__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + fexp(-x)); }
__device__ __forceinline__ float ftanh(float x) {
  // tanh(x) = 1 - 2/(exp(2x)+1), saturating for large |x|.
  if (x > 15.f) return 1.f;
  if (x < -15.f) return -1.f;
  if (fabs_(x) < 0.0005f) return x;
  return 1.f - 2.f / (fexp(2.f * x) + 1.f);
}
// erf by Abramowitz and Stegun 7.1.26's refinement (W. J. Cody's rational
// form would be tighter; this one is within 1.2e-7 absolute).
__device__ __forceinline__ float ferf(float x) {
  float s = x < 0 ? -1.f : 1.f;
  float a = fabs_(x);
  float t = 1.f / (1.f + 0.5f * a);
  // Numerical Recipes' erfc Chebyshev fit: relative error below 1.2e-7.
  float y = t * fexp(-a * a - 1.26551223f +
                     t * (1.00002368f +
                          t * (0.37409196f +
                               t * (0.09678418f +
                                    t * (-0.18628806f +
                                         t * (0.27886807f +
                                              t * (-1.13520398f +
                                                   t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f)))))))));
  return s * (1.f - y);
}

// Activation and unary op codes (graph_ops.go's ewOp).
enum {
  OP_COPY = 0, OP_RELU, OP_SIGMOID, OP_TANH, OP_EXP, OP_LOG, OP_SQRT, OP_RECIP, OP_NEG, OP_ABS,
  OP_ERF, OP_HARDSWISH, OP_SILU, OP_HARDSIGMOID, OP_GELU, OP_GELU_TANH, OP_CLIP, OP_LEAKY, OP_FILL,
  OP_SOFTPLUS, OP_FLOOR, OP_CEIL, OP_MISH,
  OP_ADD = 32, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAX, OP_MIN, OP_PRELU
};

__device__ __forceinline__ float unary(int op, float x, float p0, float p1) {
  switch (op) {
    case OP_COPY: return x;
    case OP_RELU: return x > 0 ? x : 0.f;
    case OP_SIGMOID: return sigm(x);
    case OP_TANH: return ftanh(x);
    case OP_EXP: return fexp(x);
    case OP_LOG: return flog(x);
    case OP_SQRT: return fsqrt(x);
    case OP_RECIP: return 1.f / x;
    case OP_NEG: return -x;
    case OP_ABS: return fabs_(x);
    case OP_ERF: return ferf(x);
    case OP_HARDSWISH: return x * fmin_(fmax_(x + 3.f, 0.f), 6.f) * (1.f / 6.f);
    case OP_SILU: return x * sigm(x);
    case OP_HARDSIGMOID: return fmax_(0.f, fmin_(1.f, p0 * x + p1));
    case OP_GELU: return 0.5f * x * (1.f + ferf(x * 0.7071067811865476f));
    case OP_GELU_TANH: return 0.5f * x * (1.f + ftanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case OP_CLIP: return fmin_(fmax_(x, p0), p1);
    case OP_LEAKY: return x < 0 ? p0 * x : x;
    case OP_FILL: return p0;
    case OP_SOFTPLUS: return x > 20.f ? x : flog(1.f + fexp(x));
    case OP_FLOOR: { float r; asm("cvt.rmi.f32.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
    case OP_CEIL: { float r; asm("cvt.rpi.f32.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
    case OP_MISH: { float sp = x > 20.f ? x : flog(1.f + fexp(x)); return x * ftanh(sp); }
  }
  return x;
}

// The depthwise kernels' prologue: the activation of the convolution that
// produced their input (a 1x1 expansion's SiLU, hard swish or ReLU6),
// applied as the input is loaded instead of in a pass of its own over the
// expanded tensor. meta[14] is its op code (OP_COPY: none), meta[15] and
// meta[16] the bits of its two parameters (Clip's bounds). The planner
// only takes activations with f(0) = 0, so the zeros standing for padding
// may go through it too.
struct Pre {
  int op;
  float p0, p1;
};
__device__ __forceinline__ Pre dw_pre(const int* meta) {
  Pre p;
  p.op = meta[14];
  p.p0 = bits_f32((unsigned)meta[15]);
  p.p1 = bits_f32((unsigned)meta[16]);
  return p;
}
// pre_fast is the prologue (the depthwise kernels run in the channels-last
// plans of 16-bit storage only): SiLU through the hardware
// tanh (x * (1 + tanh(x/2)) / 2, one special-function instruction where
// sigm takes an exponential and a division; its error, about 2^-11
// relative, is below the storage's rounding). The tiled kernels activate
// each input once per filter row that reads it, so its cost counts.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float pre_fast(int op, float x, float p0, float p1) {
  switch (op) {
    case OP_RELU: return x > 0 ? x : 0.f;
    case OP_CLIP: return fmin_(fmax_(x, p0), p1);
    case OP_HARDSWISH: return x * fmin_(fmax_(x + 3.f, 0.f), 6.f) * (1.f / 6.f);
    case OP_SILU: { float h = 0.5f * x; return h + h * tanh_approx(h); }
  }
  return x;
}

__device__ __forceinline__ float binary(int op, float a, float b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW:
      if (b == 2.f) return a * a;
      if (b == 1.f) return a;
      if (b == 0.5f) return fsqrt(a);
      if (a == 0.f) return b > 0 ? 0.f : (b == 0.f ? 1.f : 1.f / 0.f);
      if (a < 0.f) {
        // Negative bases: defined for integer exponents only.
        float r; asm("cvt.rni.f32.f32 %0, %1;" : "=f"(r) : "f"(b));
        if (r != b) return 0.f / 0.f;
        float m = ex2(b * lg2(-a));
        int odd = ((long long)r) & 1;
        return odd ? -m : m;
      }
      return ex2(b * lg2(a));
    case OP_MAX: return fmax_(a, b);
    case OP_MIN: return fmin_(a, b);
    case OP_PRELU: return a < 0 ? a * b : a;
  }
  return a;
}

// Indices are 32-bit (the engine refuses values of 2^31 elements or more):
// 64-bit division costs several times more on the GPU.
// pdl_enter starts every kernel: with programmatic dependent launch (the
// engine's launches on compute capability 9.0 and later) a kernel may be
// resident before the one it follows has finished, so it first waits for
// that kernel's writes, then lets the next kernel launch in its turn (and
// wait the same way), which hides a launch behind each kernel's run. Both
// instructions do nothing for a kernel launched the ordinary way.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// goinfer_pdl tells the engine whether the code the driver loaded for this
// GPU waits as pdl_enter says (compiled for compute capability 9.0 or
// later), so that it may launch these kernels as dependents.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
extern "C" __device__ int goinfer_pdl = 1;
#else
extern "C" __device__ int goinfer_pdl = 0;
#endif

#define GRID_LOOP(i, n) \
  for (int i = CTAID_X * NTID_X + TID_X; i < (int)(n); i += NCTAID_X * NTID_X)

#define MAXD 6

// ew: out[o(i)] = f(a[a(i)], b[b(i)]) over a MAXD-d index space. meta holds
// the shape (MAXD ints, leading ones for lower ranks) then the element
// strides of out, a and b (MAXD each; 0 broadcasts). Unary ops ignore b.
// It covers elementwise ops with NumPy broadcasting and every strided copy:
// transposes, slices, concatenation (one call per input, into a strided
// view of the output), gathers of a constant index, expands.
template <typename T>
__device__ __forceinline__ void ew(T* out, const T* a, const T* b, const int* meta, i64 n, int op, float p0, float p1) {
  int shape[MAXD], os[MAXD], as[MAXD], bs[MAXD];
#pragma unroll
  for (int d = 0; d < MAXD; d++) {
    shape[d] = meta[d];
    os[d] = meta[MAXD + d];
    as[d] = meta[2 * MAXD + d];
    bs[d] = meta[3 * MAXD + d];
  }
  GRID_LOOP(i, n) {
    int r = i, oi = 0, ai = 0, bi = 0;
#pragma unroll
    for (int d = MAXD - 1; d >= 0; d--) {
      if (shape[d] == 1) continue;
      int q = r / shape[d];
      int c = r - q * shape[d];
      r = q;
      oi += c * os[d];
      ai += c * as[d];
      bi += c * bs[d];
    }
    float x = op == OP_FILL ? 0.f : load(a + ai);
    float y = op >= OP_ADD ? binary(op, x, load(b + bi)) : unary(op, x, p0, p1);
    store(out + oi, y);
  }
}

// ew_flat is ew for contiguous same-shape operands (b broadcast as a
// scalar when bscalar): no index arithmetic.
template <typename T>
__device__ __forceinline__ void ew_flat(T* out, const T* a, const T* b, i64 n, int op, float p0, float p1, int bscalar) {
  GRID_LOOP(i, n) {
    float x = op == OP_FILL ? 0.f : load(a + i);
    float y = op >= OP_ADD ? binary(op, x, load(b + (bscalar ? 0 : i))) : unary(op, x, p0, p1);
    store(out + i, y);
  }
}

// affine: y = act(x*scale[c] + shift[c] + res), c = (i / inner) % C. scale,
// shift and res may be null. It is batch normalization, and the epilogue of
// convolutions (bias per channel, inner = H*W) and matrix products (bias
// per column, inner = 1), with the residual add and activation fused.
template <typename T>
__device__ __forceinline__ void affine(T* y, const T* x, const float* scale, const float* shift, const T* res, i64 n, int C,
                       int inner, int act, float p0, float p1) {
  GRID_LOOP(i, n) {
    int c = (inner == 1 ? i : i / inner) % C;
    float v = load(x + i);
    if (scale) v *= scale[c];
    if (shift) v += shift[c];
    if (res) v += load(res + i);
    store(y + i, unary(act, v, p0, p1));
  }
}

// pool: 2-d max or average pooling of nc planes, one output element per
// thread: NCHW when C is 0, else channels-last with C channels (nc = N*C).
// Average pooling divides by the window's elements inside the padded input
// (countPad) or inside the input only.
template <typename T>
__device__ __forceinline__ void pool(T* y, const T* x, int nc, int H, int W, int OH, int OW, int kh, int kw, int sh, int sw,
                     int ph, int pw, int dh, int dw, int isMax, int countPad, int padEndH, int padEndW, int C) {
  i64 n = (i64)nc * OH * OW;
  GRID_LOOP(i, n) {
    int ox, oy;
    const T* src;
    int cs = 1;  // element stride between pixels
    if (C > 0) {
      int c = i % C;
      int q = i / C;
      ox = q % OW;
      oy = (q / OW) % OH;
      int b = q / (OW * OH);
      src = x + b * H * W * C + c;
      cs = C;
    } else {
      ox = i % OW;
      oy = (i / OW) % OH;
      int p = i / (OW * OH);
      src = x + p * H * W;
    }
    int y0 = oy * sh - ph, x0 = ox * sw - pw;
    float acc = isMax ? -3.4028234663852886e38f : 0.f;
    int cnt = 0;
    for (int ky = 0; ky < kh; ky++) {
      int iy = y0 + ky * dh;
      if (iy < 0 || iy >= H) continue;
      for (int kx = 0; kx < kw; kx++) {
        int ix = x0 + kx * dw;
        if (ix < 0 || ix >= W) continue;
        float v = load(src + (iy * W + ix) * cs);
        if (isMax) acc = fmax_(acc, v);
        else acc += v;
        cnt++;
      }
    }
    if (!isMax) {
      if (countPad) {
        // The window clipped to the padded input, as PyTorch and ONNX count.
        int ye = y0 + (kh - 1) * dh + 1, xe = x0 + (kw - 1) * dw + 1;
        if (ye > H + padEndH) ye = H + padEndH;
        if (xe > W + padEndW) xe = W + padEndW;
        cnt = ((ye - y0 + dh - 1) / dh) * ((xe - x0 + dw - 1) / dw);
      }
      acc = cnt > 0 ? acc / cnt : 0.f;
    }
    store(y + i, acc);
  }
}

#define RB 256

__device__ __forceinline__ float block_sum(float v, float* sh) {
  int t = TID_X;
  sh[t] = v;
  SYNC();
  for (int s = RB / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    SYNC();
  }
  float r = sh[0];
  SYNC();
  return r;
}
__device__ __forceinline__ float block_max(float v, float* sh) {
  int t = TID_X;
  sh[t] = v;
  SYNC();
  for (int s = RB / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = fmax_(sh[t], sh[t + s]);
    SYNC();
  }
  float r = sh[0];
  SYNC();
  return r;
}

// rows_reduce: y[r] = mean, max or sum of x[r*len .. (r+1)*len) (op 0, 1,
// 2), one block of RB threads per row, blocks striding over rows.
template <typename T>
__device__ __forceinline__ void rows_reduce(T* y, const T* x, int rows, int len, int op) {
  __shared__ float sh[RB];
  for (int r = CTAID_X; r < rows; r += NCTAID_X) {
    const T* src = x + (i64)r * len;
    float acc = op == 1 ? -3.4028234663852886e38f : 0.f;
    for (int j = TID_X; j < len; j += RB) {
      float v = load(src + j);
      acc = op == 1 ? fmax_(acc, v) : acc + v;
    }
    acc = op == 1 ? block_max(acc, sh) : block_sum(acc, sh);
    if (TID_X == 0) store(y + r, op == 0 ? acc / len : acc);
  }
}

// softmax over rows of len (logsm: log-softmax), one block per row.
template <typename T>
__device__ __forceinline__ void softmax(T* y, const T* x, int rows, int len, int logsm) {
  __shared__ float sh[RB];
  for (int r = CTAID_X; r < rows; r += NCTAID_X) {
    const T* src = x + (i64)r * len;
    T* dst = y + (i64)r * len;
    float m = -3.4028234663852886e38f;
    for (int j = TID_X; j < len; j += RB) m = fmax_(m, load(src + j));
    m = block_max(m, sh);
    float s = 0.f;
    for (int j = TID_X; j < len; j += RB) s += fexp(load(src + j) - m);
    s = block_sum(s, sh);
    float inv = 1.f / s, ls = flog(s);
    for (int j = TID_X; j < len; j += RB) {
      float v = load(src + j) - m;
      store(dst + j, logsm ? v - ls : fexp(v) * inv);
    }
  }
}

// layernorm over rows of len: y = (x - mean) / sqrt(var + eps) * g + b
// (g, b per position in the row; b may be null). Two passes over the row
// (mean, then the centred variance) for float32-exact statistics.
template <typename T>
__device__ __forceinline__ void layernorm(T* y, const T* x, const float* g, const float* b, int rows, int len, float eps) {
  __shared__ float sh[RB];
  for (int r = CTAID_X; r < rows; r += NCTAID_X) {
    const T* src = x + (i64)r * len;
    T* dst = y + (i64)r * len;
    float s = 0.f;
    for (int j = TID_X; j < len; j += RB) s += load(src + j);
    float mean = block_sum(s, sh) / len;
    float q = 0.f;
    for (int j = TID_X; j < len; j += RB) {
      float d = load(src + j) - mean;
      q += d * d;
    }
    float var = block_sum(q, sh) / len;
    float inv = 1.f / fsqrt(var + eps);
    for (int j = TID_X; j < len; j += RB) {
      float v = (load(src + j) - mean) * inv * g[j];
      if (b) v += b[j];
      store(dst + j, v);
    }
  }
}

// layernorm_strided normalizes over C channels at stride inner (the channel
// axis of NCHW: ConvNeXt's 2-d LayerNorm form), one thread per (n, pixel).
template <typename T>
__device__ __forceinline__ void layernorm_strided(T* y, const T* x, const float* g, const float* b, int outer, int C, int inner,
                                  float eps) {
  i64 n = (i64)outer * inner;
  GRID_LOOP(i, n) {
    i64 o = i / inner, p = i - o * inner;
    const T* src = x + o * C * inner + p;
    T* dst = y + o * C * inner + p;
    float s = 0.f;
    for (int c = 0; c < C; c++) s += load(src + (i64)c * inner);
    float mean = s / C, q = 0.f;
    for (int c = 0; c < C; c++) {
      float d = load(src + (i64)c * inner) - mean;
      q += d * d;
    }
    float inv = 1.f / fsqrt(q / C + eps);
    for (int c = 0; c < C; c++) {
      float v = (load(src + (i64)c * inner) - mean) * inv * g[c];
      if (b) v += b[c];
      store(dst + (i64)c * inner, v);
    }
  }
}

// reduce_cl: y[b*C + c] = mean, max or sum (op 0, 1, 2) over the hw pixels
// of channels-last x. A block of 256 threads takes 32 channels of one
// image: each warp reads 32 neighbouring channels of a pixel, the 8 warps
// split the pixels, and shared memory adds their partial results (batch 1
// has too few (image, channel) pairs for a thread each).
template <typename T>
__device__ __forceinline__ void reduce_cl(T* y, const T* x, int nb, int C, int hw, int op) {
  __shared__ float sh[8][33];
  int groups = (C + 31) / 32;
  int tx = TID_X & 31, ty = TID_X >> 5;
  for (int g = CTAID_X; g < nb * groups; g += NCTAID_X) {
    int b = g / groups;
    int c = (g - b * groups) * 32 + tx;
    float acc = op == 1 ? -3.4028234663852886e38f : 0.f;
    if (c < C) {
      const T* src = x + b * hw * C + c;
      for (int p = ty; p < hw; p += 8) {
        float v = load(src + p * C);
        acc = op == 1 ? fmax_(acc, v) : acc + v;
      }
    }
    sh[ty][tx] = acc;
    SYNC();
    if (ty == 0 && c < C) {
      for (int k = 1; k < 8; k++) acc = op == 1 ? fmax_(acc, sh[k][tx]) : acc + sh[k][tx];
      store(y + b * C + c, op == 0 ? acc / hw : acc);
    }
    SYNC();
  }
}

__device__ __forceinline__ float shfl_xor(float v, int lane) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 31, -1;" : "=f"(r) : "f"(v), "r"(lane));
  return r;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax_(v, shfl_xor(v, o));
  return v;
}

// fc_warp: y[b][k] = act(sum_c x[b][c] * w[k][c] + bias[k]), one warp per
// output (the lanes stride over c, then a butterfly sum): the dense layers
// of squeeze-and-excitation blocks at small batches ([N, C, 1, 1] inputs),
// where cuDNN takes a convolution, an epilogue kernel and, below 8 input
// channels, a padding copy for kilobytes of work. w is float32 [K][C].
template <typename T>
__device__ __forceinline__ void fc_warp(T* y, const T* x, const float* w, const float* bias, int nb, int C, int K,
                                        int act, float p0, float p1) {
  int lane = TID_X & 31;
  int wpb = NTID_X >> 5;
  for (int o = CTAID_X * wpb + (TID_X >> 5); o < nb * K; o += NCTAID_X * wpb) {
    int b = o / K, k = o - b * K;
    const T* xb = x + b * C;
    const float* wk = w + k * C;
    float acc = 0.f;
    for (int c = lane; c < C; c += 32) acc += load(xb + c) * wk[c];
    acc = warp_sum(acc);
    if (lane == 0) store(y + o, unary(act, acc + (bias ? bias[k] : 0.f), p0, p1));
  }
}

// softmax_warp: one warp per row of len <= 256 (attention rows), the row
// held in registers: one read and one write per element.
template <typename T>
__device__ __forceinline__ void softmax_warp(T* y, const T* x, int rows, int len, int logsm) {
  int lane = TID_X & 31;
  int warps = NTID_X >> 5;
  for (int r = CTAID_X * warps + (TID_X >> 5); r < rows; r += NCTAID_X * warps) {
    const T* src = x + (i64)r * len;
    T* dst = y + (i64)r * len;
    float v[8];
    float m = -3.4028234663852886e38f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      int j = lane + 32 * k;
      v[k] = j < len ? load(src + j) : -3.4028234663852886e38f;
      m = fmax_(m, v[k]);
    }
    m = warp_max(m);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      int j = lane + 32 * k;
      v[k] = j < len ? fexp(v[k] - m) : 0.f;
      s += v[k];
    }
    s = warp_sum(s);
    float inv = 1.f / s, ls = flog(s);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      int j = lane + 32 * k;
      if (j < len) store(dst + j, logsm ? flog(v[k]) : v[k] * inv);
    }
  }
}

// layernorm_warp: one warp per row, two passes for the statistics.
template <typename T>
__device__ __forceinline__ void layernorm_warp(T* y, const T* x, const float* g, const float* b, int rows, int len, float eps) {
  int lane = TID_X & 31;
  int warps = NTID_X >> 5;
  for (int r = CTAID_X * warps + (TID_X >> 5); r < rows; r += NCTAID_X * warps) {
    const T* src = x + (i64)r * len;
    T* dst = y + (i64)r * len;
    float s = 0.f;
    for (int j = lane; j < len; j += 32) s += load(src + j);
    float mean = warp_sum(s) / len;
    float q = 0.f;
    for (int j = lane; j < len; j += 32) {
      float d = load(src + j) - mean;
      q += d * d;
    }
    float inv = 1.f / fsqrt(warp_sum(q) / len + eps);
    for (int j = lane; j < len; j += 32) {
      float v = (load(src + j) - mean) * inv * g[j];
      if (b) v += b[j];
      store(dst + j, v);
    }
  }
}

// layernorm_vec: one warp per row of len = a multiple of the 16-byte
// vector, at most 32 * LN_VPL vectors, rows 16-byte aligned. The row is
// read once, into registers (LN_VPL vectors a lane), and both statistics
// come from there: a row of ViT-B's 768 halves is 3 loads a lane where
// layernorm_warp makes 72.
#define LN_VPL 4
template <typename T>
__device__ __forceinline__ void layernorm_vec(T* y, const T* x, const float* g, const float* b, int rows, int len, float eps) {
  const int V = Vec<T>::N;
  int lane = TID_X & 31;
  int warps = NTID_X >> 5;
  int nv = len / V;
  for (int r = CTAID_X * warps + (TID_X >> 5); r < rows; r += NCTAID_X * warps) {
    const T* src = x + (i64)r * len;
    T* dst = y + (i64)r * len;
    float v[LN_VPL][V];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
      int j = lane + 32 * k;
      if (j < nv) {
        vload(src + j * V, v[k]);
#pragma unroll
        for (int e = 0; e < V; e++) s += v[k][e];
      }
    }
    float mean = warp_sum(s) / len;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
      if (lane + 32 * k < nv) {
#pragma unroll
        for (int e = 0; e < V; e++) {
          float d = v[k][e] - mean;
          q += d * d;
        }
      }
    }
    float inv = 1.f / fsqrt(warp_sum(q) / len + eps);
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
      int j = lane + 32 * k;
      if (j < nv) {
        const float* gj = g + j * V;
#pragma unroll
        for (int e = 0; e < V; e++) {
          float t = (v[k][e] - mean) * inv * gj[e];
          if (b) t += b[j * V + e];
          v[k][e] = t;
        }
        vstore(dst + j * V, v[k]);
      }
    }
  }
}

// layernorm_group: G lanes per row, G the least power of two with
// G * LN_VPL vectors covering the row (the engine takes it for rows of up
// to 16 * LN_VPL vectors and more rows than layernorm_vec is for): a warp
// normalizes 32 / G rows at once, each read once into registers in
// 16-byte vectors. ConvNeXt's rows of 96 to 384 channels at batch 256 took
// a whole warp each in layernorm_warp, with 2-byte loads, in three passes.
// Rows are 16-byte aligned, len a multiple of the vector.
template <typename T>
__device__ __forceinline__ void layernorm_group(T* y, const T* x, const float* g, const float* b, int rows, int len,
                                                float eps) {
  const int V = Vec<T>::N;
  int nv = len / V;
  int G = 1;
  while (G * LN_VPL < nv && G < 32) G <<= 1;
  int lane = TID_X & 31, sub = lane & (G - 1);
  int per = 32 / G;  // rows per warp
  int warps = NTID_X >> 5;
  // The loop runs per warp (all lanes take the shuffles); a group past
  // the last row computes nothing it stores.
  for (int r0 = (CTAID_X * warps + (TID_X >> 5)) * per; r0 < rows; r0 += NCTAID_X * warps * per) {
    int r = r0 + lane / G;
    bool live = r < rows;
    const T* src = x + (i64)r * len;
    T* dst = y + (i64)r * len;
    float v[LN_VPL][V];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
      int j = sub + G * k;
      if (live && j < nv) {
        vload(src + j * V, v[k]);
#pragma unroll
        for (int e = 0; e < V; e++) s += v[k][e];
      }
    }
    for (int o = G >> 1; o > 0; o >>= 1) s += shfl_xor(s, o);
    float mean = s / len;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
      if (live && sub + G * k < nv) {
#pragma unroll
        for (int e = 0; e < V; e++) {
          float d = v[k][e] - mean;
          q += d * d;
        }
      }
    }
    for (int o = G >> 1; o > 0; o >>= 1) q += shfl_xor(q, o);
    float inv = 1.f / fsqrt(q / len + eps);
#pragma unroll
    for (int k = 0; k < LN_VPL; k++) {
      int j = sub + G * k;
      if (live && j < nv) {
        const float* gj = g + j * V;
#pragma unroll
        for (int e = 0; e < V; e++) {
          float t = (v[k][e] - mean) * inv * gj[e];
          if (b) t += b[j * V + e];
          v[k][e] = t;
        }
        vstore(dst + j * V, v[k]);
      }
    }
  }
}

// LNG_MINB: the resident blocks of 256 threads per SM layernorm_group is
// compiled for (0: the compiler's choice, 80 registers: 3 blocks).
#ifndef LNG_MINB
#define LNG_MINB 4
#endif
#if LNG_MINB > 0
#define LNG_LB __attribute__((launch_bounds(256, LNG_MINB)))
#else
#define LNG_LB
#endif

// dwconv: depthwise convolution of channels-last x (one filter per
// channel), one output element per thread (neighbouring threads:
// neighbouring channels), with the epilogue fused: bias, residual (same
// layout as y) and activation. w is float32 [C][kh][kw]; meta holds N, C,
// H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, then the prologue (dw_pre).
template <typename T>
__device__ __forceinline__ void dwconv(T* y, const T* x, const float* w, const float* bias, const T* res, const int* meta, int n,
                                       int act, float p0, float p1) {
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5], kh = meta[6], kw = meta[7];
  int sh = meta[8], sw = meta[9], ph = meta[10], pw = meta[11], dh = meta[12], dw = meta[13];
  Pre pre = dw_pre(meta);
  GRID_LOOP(i, n) {
    int c = i % C;
    int q = i / C;
    int ox = q % OW;
    int oy = (q / OW) % OH;
    int b = q / (OW * OH);
    const T* src = x + b * H * W * C + c;
    const float* wc = w + c * kh * kw;
    float acc = bias ? bias[c] : 0.f;
    int y0 = oy * sh - ph, x0 = ox * sw - pw;
    for (int ky = 0; ky < kh; ky++) {
      int iy = y0 + ky * dh;
      if (iy < 0 || iy >= H) continue;
      for (int kx = 0; kx < kw; kx++) {
        int ix = x0 + kx * dw;
        if (ix < 0 || ix >= W) continue;
        acc += pre_fast(pre.op, load(src + (iy * W + ix) * C), pre.p0, pre.p1) * wc[ky * kw + kx];
      }
    }
    if (res) acc += load(res + i);
    store(y + i, unary(act, acc, p0, p1));
  }
}

// affine_vec is affine over 16-byte vectors when the channel is the
// innermost dimension (inner 1) and C is a multiple of the vector: n counts
// vectors.
template <typename T>
__device__ __forceinline__ void affine_vec(T* y, const T* x, const float* scale, const float* shift, const T* res, int n, int C,
                                           int act, float p0, float p1) {
  const int V = Vec<T>::N;
  GRID_LOOP(i, n) {
    int e = i * V;
    int c = e % C;
    float v[V], r[V];
    vload(x + e, v);
    if (res) vload(res + e, r);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float t = v[k];
      if (scale) t *= scale[c + k];
      if (shift) t += shift[c + k];
      if (res) t += r[k];
      v[k] = unary(act, t, p0, p1);
    }
    vstore(y + e, v);
  }
}

// dwconv_vec is dwconv over 16-byte vectors of channels (C a multiple of
// the vector), its filter laid out [kh][kw][C]: n counts vectors.
template <typename T>
__device__ __forceinline__ void dwconv_vec(T* y, const T* x, const float* w, const float* bias, const T* res, const int* meta,
                                           int n, int act, float p0, float p1) {
  const int V = Vec<T>::N;
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5], kh = meta[6], kw = meta[7];
  int sh = meta[8], sw = meta[9], ph = meta[10], pw = meta[11], dh = meta[12], dw = meta[13];
  int CV = C / V;
  Pre pre = dw_pre(meta);
  GRID_LOOP(i, n) {
    int c = (i % CV) * V;
    int q = i / CV;
    int ox = q % OW;
    int oy = (q / OW) % OH;
    int b = q / (OW * OH);
    const T* src = x + b * H * W * C + c;
    float acc[V], v[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = bias ? bias[c + k] : 0.f;
    int y0 = oy * sh - ph, x0 = ox * sw - pw;
    for (int ky = 0; ky < kh; ky++) {
      int iy = y0 + ky * dh;
      if (iy < 0 || iy >= H) continue;
      for (int kx = 0; kx < kw; kx++) {
        int ix = x0 + kx * dw;
        if (ix < 0 || ix >= W) continue;
        vload(src + (iy * W + ix) * C, v);
        const float* wk = w + (ky * kw + kx) * C + c;
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] += pre_fast(pre.op, v[k], pre.p0, pre.p1) * wk[k];
      }
    }
    int e = q * C + c;
    if (res) {
      vload(res + e, v);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += v[k];
    }
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = unary(act, acc[k], p0, p1);
    vstore(y + e, acc);
  }
}

// F8 carries one vector of results to dw_store.
struct F8 { float v[8]; };

// dw_store is the tiled depthwise kernel's epilogue for one vector:
// residual, activation, store. Not inlined: the activation switch inlined
// for each of a thread's TW vectors made the kernels several times larger.
template <typename T>
__device__ NOINLINE void dw_store(T* y, const T* res, int e, F8 o, int act, float p0, float p1) {
  const int V = Vec<T>::N;
  if (res) {
    float r[V];
    vload(res + e, r);
#pragma unroll
    for (int k = 0; k < V; k++) o.v[k] += r[k];
  }
#pragma unroll
  for (int k = 0; k < V; k++) o.v[k] = unary(act, o.v[k], p0, p1);
  vstore(y + e, o.v);
}

// pre_vec applies the prologue to one vector of inputs. Not inlined, as
// dw_store: the activation switch unrolled over each of a row's inputs
// for every tiled kernel made the module much larger.
__device__ NOINLINE F8 pre_vec(F8 v, Pre p) {
#pragma unroll
  for (int k = 0; k < 8; k++) v.v[k] = pre_fast(p.op, v.v[k], p.p0, p.p1);
  return v;
}

// dwconv_tile is dwconv_vec for square K x K filters of stride S (dilation
// 1): a thread computes TW neighbouring outputs of one row for one vector
// of channels. Each filter row's (TW-1)*S+K inputs are read once into
// registers and each tap's weights once for the TW outputs, where
// dwconv_vec re-reads both for every output (its reads, not its
// arithmetic, bounded it). n counts (image, row, group of TW columns,
// vector) items; the filter is [K][K][C].
template <typename T, int K, int S, int TW>
__device__ __forceinline__ void dwconv_tile(T* __restrict__ y, const T* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ bias, const T* __restrict__ res, const int* meta,
                                            int n, int act, float p0, float p1) {
  const int V = Vec<T>::N;
  const int IW = (TW - 1) * S + K;
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5];
  int ph = meta[10], pw = meta[11];
  int CV = C / V;
  int OWT = (OW + TW - 1) / TW;
  Pre pre = dw_pre(meta);
  GRID_LOOP(i, n) {
    int cv = i % CV;
    int q = i / CV;
    int tx = q % OWT;
    q /= OWT;
    int oy = q % OH;
    int b = q / OH;
    int c = cv * V;
    int ox0 = tx * TW;
    const T* src = x + b * H * W * C + c;
    float acc[TW][V];
#pragma unroll
    for (int k = 0; k < V; k++) {
      float b0 = bias ? bias[c + k] : 0.f;
#pragma unroll
      for (int t = 0; t < TW; t++) acc[t][k] = b0;
    }
    int y0 = oy * S - ph, x0 = ox0 * S - pw;
    // Rows are not unrolled: the code stays K times smaller, and a row's
    // registers are indexed by constants all the same.
#pragma unroll 1
    for (int ky = 0; ky < K; ky++) {
      int iy = y0 + ky;
      if (iy < 0 || iy >= H) continue;
      const T* row = src + iy * W * C;
      float in[IW][V];
#pragma unroll
      for (int j = 0; j < IW; j++) {
        int ix = x0 + j;
        if (ix >= 0 && ix < W) {
          vload(row + ix * C, in[j]);
        } else {
#pragma unroll
          for (int k = 0; k < V; k++) in[j][k] = 0.f;
        }
      }
      // SiLU and hard swish (EfficientNet's, MobileNetV3's) inline, the
      // rest through a call.
      if (pre.op == OP_SILU) {
#pragma unroll
        for (int j = 0; j < IW; j++) {
#pragma unroll
          for (int k = 0; k < V; k++) in[j][k] = pre_fast(OP_SILU, in[j][k], 0.f, 0.f);
        }
      } else if (pre.op == OP_HARDSWISH) {
#pragma unroll
        for (int j = 0; j < IW; j++) {
#pragma unroll
          for (int k = 0; k < V; k++) in[j][k] = pre_fast(OP_HARDSWISH, in[j][k], 0.f, 0.f);
        }
      } else if (pre.op != OP_COPY) {
#pragma unroll
        for (int j = 0; j < IW; j++) {
          F8 t;
#pragma unroll
          for (int k = 0; k < V; k++) t.v[k] = in[j][k];
          t = pre_vec(t, pre);
#pragma unroll
          for (int k = 0; k < V; k++) in[j][k] = t.v[k];
        }
      }
#pragma unroll
      for (int kx = 0; kx < K; kx++) {
        const U4* wk = (const U4*)(w + (ky * K + kx) * C + c);
        float wv[V];
#pragma unroll
        for (int h = 0; h < V / 4; h++) Vec<float>::unpack(wk[h], wv + 4 * h);
#pragma unroll
        for (int t = 0; t < TW; t++) {
#pragma unroll
          for (int k = 0; k < V; k++) acc[t][k] += in[t * S + kx][k] * wv[k];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < TW; t++) {
      int ox = ox0 + t;
      if (ox >= OW) break;
      F8 o;
#pragma unroll
      for (int k = 0; k < V; k++) o.v[k] = acc[t][k];
      dw_store(y, res, ((b * OH + oy) * OW + ox) * C + c, o, act, p0, p1);
    }
  }
}

// dwconv_rows is the depthwise kernel for few outputs (batch 1): the K
// filter rows of one output vector go to K lanes of a group of G (K
// rounded up to a power of two), each of which reads its row's K inputs and
// weights at once; the group sums its partials with shuffles. A thread so
// waits on memory once, where dwconv_tile's row loop waits K times, and a
// layer has G times more threads to hide that wait with. n counts output
// vectors times G, rounded up to whole warps (the shuffles need every lane).
template <typename T, int K, int S>
__device__ __forceinline__ void dwconv_rows(T* __restrict__ y, const T* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ bias, const T* __restrict__ res, const int* meta,
                                            int n, int act, float p0, float p1) {
  const int V = Vec<T>::N;
  const int G = K <= 4 ? 4 : 8;
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5];
  int ph = meta[10], pw = meta[11];
  int CV = C / V;
  int items = meta[0] * OH * OW * CV;
  Pre pre = dw_pre(meta);
  GRID_LOOP(i, n) {
    int ky = i % G;
    int item = i / G;
    int cv = item % CV;
    int q = item / CV;
    int ox = q % OW;
    q /= OW;
    int oy = q % OH;
    int b = q / OH;
    int c = cv * V;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.f;
    int iy = oy * S - ph + ky;
    if (item < items && ky < K && iy >= 0 && iy < H) {
      const T* row = x + ((b * H + iy) * W) * C + c;
      int x0 = ox * S - pw;
      float in[K][V];
#pragma unroll
      for (int j = 0; j < K; j++) {
        int ix = x0 + j;
        if (ix >= 0 && ix < W) {
          vload(row + ix * C, in[j]);
        } else {
#pragma unroll
          for (int k = 0; k < V; k++) in[j][k] = 0.f;
        }
      }
      if (pre.op != OP_COPY) {
        // Padding stays zero: the prologue applies to the input, and the
        // convolution pads what it produces.
#pragma unroll
        for (int j = 0; j < K; j++) {
          int ix = x0 + j;
          if (ix < 0 || ix >= W) continue;
          F8 t;
#pragma unroll
          for (int k = 0; k < V; k++) t.v[k] = in[j][k];
          t = pre_vec(t, pre);
#pragma unroll
          for (int k = 0; k < V; k++) in[j][k] = t.v[k];
        }
      }
#pragma unroll
      for (int kx = 0; kx < K; kx++) {
        const U4* wk = (const U4*)(w + (ky * K + kx) * C + c);
        float wv[V];
#pragma unroll
        for (int h = 0; h < V / 4; h++) Vec<float>::unpack(wk[h], wv + 4 * h);
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] += in[kx][k] * wv[k];
      }
    }
#pragma unroll
    for (int o = 1; o < G; o <<= 1) {
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += shfl_xor(acc[k], o);
    }
    if (ky == 0 && item < items) {
      F8 r;
#pragma unroll
      for (int k = 0; k < V; k++) r.v[k] = acc[k] + (bias ? bias[c + k] : 0.f);
      dw_store(y, res, item * V, r, act, p0, p1);
    }
  }
}

// dw_store1 is dw_store for one output.
template <typename T>
__device__ NOINLINE void dw_store1(T* y, const T* res, i64 e, float v, int act, float p0, float p1) {
  if (res) v += load(res + e);
  store(y + e, unary(act, v, p0, p1));
}

// dwconv_slide is the depthwise kernel that reads least: a thread owns one
// channel and TW neighbouring outputs of a row, holds its K x K filter in
// registers and walks the input a column (K rows) at a time, each column
// feeding every output whose window covers it. Neighbouring threads own
// neighbouring channels, so a warp's loads are contiguous. An input is read
// about K*(1+(K-1)/TW) times and a weight once per TW outputs, where
// dwconv_tile x1 reads each input K*K times and the filter for every output
// (the 7x7 layers at batch 1 were bound by those reads). n counts (image,
// row, group of TW columns, channel) items; the filter is [K][K][C]. It
// takes no prologue (the engine does not choose it for one): a prologue on
// each of its (TW-1)*S+K unrolled columns of K loads made it several times
// larger.
template <typename T, int K, int S, int TW>
__device__ __forceinline__ void dwconv_slide(T* __restrict__ y, const T* __restrict__ x, const float* __restrict__ w,
                                             const float* __restrict__ bias, const T* __restrict__ res, const int* meta,
                                             int n, int act, float p0, float p1) {
  const int IW = (TW - 1) * S + K;
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5];
  int ph = meta[10], pw = meta[11];
  int OWT = (OW + TW - 1) / TW;
  if (dw_pre(meta).op != OP_COPY) asm volatile("trap;");
  GRID_LOOP(i, n) {
    int c = i % C;
    int q = i / C;
    int tx = q % OWT;
    q /= OWT;
    int oy = q % OH;
    int b = q / OH;
    float f[K * K];
#pragma unroll
    for (int j = 0; j < K * K; j++) f[j] = w[j * C + c];
    float acc[TW];
    float b0 = bias ? bias[c] : 0.f;
#pragma unroll
    for (int t = 0; t < TW; t++) acc[t] = b0;
    int y0 = oy * S - ph, x0 = tx * TW * S - pw;
    const T* src = x + (i64)b * H * W * C + c;
#pragma unroll
    for (int j = 0; j < IW; j++) {
      int ix = x0 + j;
      bool inx = ix >= 0 && ix < W;
      float col[K];
#pragma unroll
      for (int ky = 0; ky < K; ky++) {
        int iy = y0 + ky;
        col[ky] = 0.f;
        if (inx && iy >= 0 && iy < H) {
          col[ky] = load(src + ((i64)iy * W + ix) * C);
        }
      }
#pragma unroll
      for (int t = 0; t < TW; t++) {
        const int kx = j - t * S;
        if (kx >= 0 && kx < K) {
#pragma unroll
          for (int ky = 0; ky < K; ky++) acc[t] += col[ky] * f[ky * K + kx];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < TW; t++) {
      int ox = tx * TW + t;
      if (ox >= OW) break;
      dw_store1(y, res, (((i64)b * OH + oy) * OW + ox) * C + c, acc[t], act, p0, p1);
    }
  }
}

// Pair16 converts two 16-bit values packed in 32 bits to floats and back.
template <typename T> struct Pair16;
template <> struct Pair16<f16> {
  static __device__ __forceinline__ void unpack(unsigned u, float& a, float& b) {
    a = h2f((u16)(u & 0xffff));
    b = h2f((u16)(u >> 16));
  }
  static __device__ __forceinline__ unsigned pack(float a, float b) { return (unsigned)f2h(a) | ((unsigned)f2h(b) << 16); }
};
template <> struct Pair16<bf16> {
  static __device__ __forceinline__ void unpack(unsigned u, float& a, float& b) {
    a = bits_f32(u << 16);
    b = bits_f32(u & 0xffff0000u);
  }
  static __device__ __forceinline__ unsigned pack(float a, float b) { return (unsigned)f2b(a) | ((unsigned)f2b(b) << 16); }
};

// smem_addr is the shared-space address of p, a pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned s;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(p));
  return s;
}

// dw_store2 is dwconv_smem's epilogue for two neighbouring channels:
// residual, activation, one 32-bit store. Not inlined, as dw_store.
template <typename T>
__device__ NOINLINE void dw_store2(T* y, const T* res, i64 e, float a, float b, int act, float p0, float p1) {
  if (res) {
    float ra, rb;
    Pair16<T>::unpack(*(const unsigned*)(res + e), ra, rb);
    a += ra;
    b += rb;
  }
  *(unsigned*)(y + e) = Pair16<T>::pack(unary(act, a, p0, p1), unary(act, b, p0, p1));
}

// dwconv_smem is the depthwise kernel for large maps (batch 256): a block
// of P*RG*CG threads owns an (RG*TH) x (CG*TW) tile of one image's outputs
// for 2P channels. It copies the tile's input window (the prologue
// applied once per input) and the filter for those channels into shared
// memory in 16-byte pieces, then each thread computes TH x TW outputs of two
// neighbouring channels with the filter rows and a window row at a time in
// registers. dwconv_tile's threads each read K rows of 8-channel inputs
// and the filter from memory for every row of outputs, holding so many
// registers that few threads stay resident (ConvNeXt's 7x7 layers ran at
// about a sixth of the arithmetic rate). n counts (image, tile row, tile
// column, channel block) items; C is a multiple of 8; the filter is
// [K][K][C]. A warp's two groups of 16 pairs (P = 16, CG even) read shared
// memory TW*S*P words apart, in different banks.
template <typename T, int K, int S, int TH, int TW, int RG, int CG, int P>
__device__ __forceinline__ void dwconv_smem(T* __restrict__ y, const T* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ bias, const T* __restrict__ res, const int* meta,
                                            int n, int act, float p0, float p1) {
  constexpr int OHB = RG * TH, OWB = CG * TW;
  constexpr int IHB = (OHB - 1) * S + K, IWB = (OWB - 1) * S + K;
  constexpr int CB = 2 * P, CH = CB / 8, NT = P * RG * CG;
  constexpr int IR = (TH - 1) * S + K, IW = (TW - 1) * S + K;
  __shared__ __attribute__((aligned(16))) unsigned xs[IHB * IWB * P];
  __shared__ __attribute__((aligned(16))) float ws[K * K * CB];
  int C = meta[1], H = meta[2], W = meta[3], OH = meta[4], OW = meta[5];
  int ph = meta[10], pw = meta[11];
  Pre pre = dw_pre(meta);
  int tid = TID_X, p = tid % P, grp = tid / P, rg = grp / CG, cg = grp % CG;
  int tilesH = (OH + OHB - 1) / OHB, tilesW = (OW + OWB - 1) / OWB, cbs = (C + CB - 1) / CB;
  for (int item = CTAID_X; item < n; item += NCTAID_X) {
    int cb = item % cbs;
    int q = item / cbs;
    int tx = q % tilesW;
    q /= tilesW;
    int ty = q % tilesH;
    int b = q / tilesH;
    int c0 = cb * CB, oy0 = ty * OHB, ox0 = tx * OWB;
    int iy0 = oy0 * S - ph, ix0 = ox0 * S - pw;
    const T* xb = x + (i64)b * H * W * C;
    SYNC();  // the previous item's reads of xs and ws are done
    for (int e = tid; e < IHB * IWB * CH; e += NT) {
      int pix = e / CH, ch = e - pix * CH, r = pix / IWB, col = pix - r * IWB;
      int iy = iy0 + r, ix = ix0 + col, c = c0 + ch * 8;
      U4 v = {0u, 0u, 0u, 0u};
      if (iy >= 0 && iy < H && ix >= 0 && ix < W && c < C) {
        v = *(const U4*)(xb + ((i64)iy * W + ix) * C + c);
        if (pre.op != OP_COPY) {
          // SiLU and hard swish (EfficientNet's, MobileNetV3's) inline,
          // the rest through a call (a struct through local memory).
          F8 f;
          Vec<T>::unpack(v, f.v);
          if (pre.op == OP_SILU) {
#pragma unroll
            for (int k = 0; k < 8; k++) f.v[k] = pre_fast(OP_SILU, f.v[k], 0.f, 0.f);
          } else if (pre.op == OP_HARDSWISH) {
#pragma unroll
            for (int k = 0; k < 8; k++) f.v[k] = pre_fast(OP_HARDSWISH, f.v[k], 0.f, 0.f);
          } else {
            f = pre_vec(f, pre);
          }
          v = Vec<T>::pack(f.v);
        }
      }
      *(U4*)&xs[pix * P + ch * 4] = v;
    }
    for (int e = tid; e < K * K * CB / 4; e += NT) {
      int j = e / (CB / 4), c = e - j * (CB / 4);
      U4 v = {0u, 0u, 0u, 0u};
      if (c0 + c * 4 < C) v = *(const U4*)(w + j * C + c0 + c * 4);
      *(U4*)&ws[j * CB + c * 4] = v;
    }
    SYNC();
    int c = c0 + 2 * p;
    float b0 = 0.f, b1 = 0.f;
    if (bias && c < C) {
      b0 = bias[c];
      b1 = bias[c + 1];
    }
    float acc[TH][TW][2];
#pragma unroll
    for (int o = 0; o < TH; o++) {
#pragma unroll
      for (int t = 0; t < TW; t++) {
        acc[o][t][0] = b0;
        acc[o][t][1] = b1;
      }
    }
    const unsigned* xt = xs + (rg * TH * S * IWB + cg * TW * S) * P + p;
    unsigned wsa = smem_addr(&ws[2 * p]);
#pragma unroll
    for (int r = 0; r < IR; r++) {
      float in[IW][2];
#pragma unroll
      for (int j = 0; j < IW; j++) Pair16<T>::unpack(xt[(r * IWB + j) * P], in[j][0], in[j][1]);
#pragma unroll
      for (int o = 0; o < TH; o++) {
        const int ky = r - o * S;
        if (ky < 0 || ky >= K) continue;
#pragma unroll
        for (int kx = 0; kx < K; kx++) {
          // Loaded where used (volatile: not hoisted): the filter kept
          // in registers across the window's rows would take 2*K*K of
          // them and so most of the resident threads.
          float w0, w1;
          asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(w0), "=f"(w1) : "r"(wsa + 8 * (ky * K + kx) * P));
#pragma unroll
          for (int t = 0; t < TW; t++) {
            acc[o][t][0] += in[t * S + kx][0] * w0;
            acc[o][t][1] += in[t * S + kx][1] * w1;
          }
        }
      }
    }
    if (c < C) {
#pragma unroll
      for (int o = 0; o < TH; o++) {
        int oy = oy0 + rg * TH + o;
#pragma unroll
        for (int t = 0; t < TW; t++) {
          int ox = ox0 + cg * TW + t;
          if (oy < OH && ox < OW)
            dw_store2(y, res, (((i64)b * OH + oy) * OW + ox) * C + c, acc[o][t][0], acc[o][t][1], act, p0, p1);
        }
      }
    }
  }
}

// scale_cl: y = x op s[b][c] for channels-last x (hwc elements per image)
// and s of one value per image and channel (squeeze-and-excitation's
// channel scale), over 16-byte vectors (C a multiple of the vector): n
// counts vectors. The strided kernel did this with 6-d index arithmetic
// per element.
template <typename T>
__device__ __forceinline__ void scale_cl(T* y, const T* x, const T* s, int n, int C, int hwc, int op) {
  const int V = Vec<T>::N;
  GRID_LOOP(i, n) {
    int e = i * V;
    int b = e / hwc;
    int c = (e - b * hwc) % C;
    float v[V], w[V];
    vload(x + e, v);
    vload(s + b * C + c, w);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = binary(op, v[k], w[k]);
    vstore(y + e, v);
  }
}

// affine_rows is affine (no residual) for strided views: the elements, in
// the packed order of their layout, are rows of len contiguous elements,
// xs apart in x and ys apart in y (a channel prefix or slice of a shared
// concatenation buffer).
template <typename T>
__device__ __forceinline__ void affine_rows(T* y, const T* x, const float* scale, const float* shift, i64 n, int C,
                                            int inner, int len, int ys, int xs, int act, float p0, float p1) {
  GRID_LOOP(i, n) {
    int c = (inner == 1 ? i : i / inner) % C;
    int r = i / len;
    int j = i - r * len;
    float v = load(x + (i64)r * xs + j);
    if (scale) v *= scale[c];
    if (shift) v += shift[c];
    store(y + (i64)r * ys + j, unary(act, v, p0, p1));
  }
}

// affine_rows_vec is affine_rows over 16-byte vectors when the channel is
// innermost (inner 1) and C, len, xs and ys are multiples of the vector: n
// counts vectors.
template <typename T>
__device__ __forceinline__ void affine_rows_vec(T* y, const T* x, const float* scale, const float* shift, int n, int C,
                                                int len, int ys, int xs, int act, float p0, float p1) {
  const int V = Vec<T>::N;
  GRID_LOOP(i, n) {
    int e = i * V;
    int c = e % C;
    int r = e / len;
    int j = e - r * len;
    float v[V];
    vload(x + (i64)r * xs + j, v);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float t = v[k];
      if (scale) t *= scale[c + k];
      if (shift) t += shift[c + k];
      v[k] = unary(act, t, p0, p1);
    }
    vstore(y + (i64)r * ys + j, v);
  }
}

// ew_chain applies up to MAXOPS elementwise ops in turn to each element of
// a (one load and one store instead of one per op): meta is ew's shape and
// the strides of out and a, then the strides of each op's operand
// (MAXOPS x MAXD, 0 broadcasts), then the op count, the op codes and their
// two parameters as float bits. Unary ops ignore their operand.
#define MAXOPS 4
template <typename T>
__device__ __forceinline__ void ew_chain(T* out, const T* a, const T* b0, const T* b1, const T* b2, const T* b3,
                                         const int* meta, i64 n) {
  int shape[MAXD], os[MAXD], as[MAXD], bs[MAXOPS][MAXD];
#pragma unroll
  for (int d = 0; d < MAXD; d++) {
    shape[d] = meta[d];
    os[d] = meta[MAXD + d];
    as[d] = meta[2 * MAXD + d];
#pragma unroll
    for (int k = 0; k < MAXOPS; k++) bs[k][d] = meta[(3 + k) * MAXD + d];
  }
  const int* m = meta + (3 + MAXOPS) * MAXD;
  int nops = m[0];
  int ops[MAXOPS];
  float p0[MAXOPS], p1[MAXOPS];
#pragma unroll
  for (int k = 0; k < MAXOPS; k++) {
    ops[k] = m[1 + k];
    p0[k] = bits_f32((unsigned)m[1 + MAXOPS + k]);
    p1[k] = bits_f32((unsigned)m[1 + 2 * MAXOPS + k]);
  }
  const T* b[MAXOPS] = {b0, b1, b2, b3};
  GRID_LOOP(i, n) {
    int r = i, oi = 0, ai = 0;
    int bi[MAXOPS] = {0, 0, 0, 0};
#pragma unroll
    for (int d = MAXD - 1; d >= 0; d--) {
      if (shape[d] == 1) continue;
      int q = r / shape[d];
      int c = r - q * shape[d];
      r = q;
      oi += c * os[d];
      ai += c * as[d];
#pragma unroll
      for (int k = 0; k < MAXOPS; k++) bi[k] += c * bs[k][d];
    }
    float v = load(a + ai);
#pragma unroll
    for (int k = 0; k < MAXOPS; k++) {
      if (k < nops) v = ops[k] >= OP_ADD ? binary(ops[k], v, load(b[k] + bi[k])) : unary(ops[k], v, p0[k], p1[k]);
    }
    store(out + oi, v);
  }
}

// Fused attention: out = softmax(scale * q k^T) v for every (b1, b2) pair
// of batch indices, the [S, L] scores never written to memory (online
// softmax: a running maximum and sum per query row rescale the output as
// key tiles arrive). meta holds B1, B2, S (queries), L (keys), D (query and
// key size), DV (value size), then the element strides (b1, b2, row,
// column) of q [S, D], k [L, D], v [L, DV] and out [S, DV]: any views of
// the operands (heads split out of a packed projection, transposes) are
// read in place.
#define NEG_INF bits_f32(0xff800000u)
#define AMAX 128

__device__ __forceinline__ float shfl_idx(float v, int lane) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 31, -1;" : "=f"(r) : "f"(v), "r"(lane));
  return r;
}
__device__ __forceinline__ void warp_sync() { asm volatile("bar.warp.sync -1;" ::: "memory"); }

// attn_warp: one warp per query row (D, DV <= AMAX), the row's scaled
// query in shared memory; each lane scores one key of a tile of 32, the
// warp rescales its output (lane d holds columns d, d+32, ...) and adds
// the tile's values. CUDA cores, any storage type.
template <typename T>
__device__ __forceinline__ void attn_warp(T* out, const T* q, const T* k, const T* v, const int* m, float scale) {
  __shared__ float qsh[8][AMAX];
  int S = m[2], L = m[3], D = m[4], DV = m[5], B2 = m[1];
  int lane = TID_X & 31, w = TID_X >> 5, warps = NTID_X >> 5;
  int rows = m[0] * B2 * S;
  for (int r = CTAID_X * warps + w; r < rows; r += NCTAID_X * warps) {
    int s = r % S, b = r / S, b2 = b % B2, b1 = b / B2;
    const T* qr = q + b1 * m[6] + b2 * m[7] + s * m[8];
    const T* kb = k + b1 * m[10] + b2 * m[11];
    const T* vb = v + b1 * m[14] + b2 * m[15];
    T* orow = out + b1 * m[18] + b2 * m[19] + s * m[20];
    for (int d = lane; d < D; d += 32) qsh[w][d] = load(qr + d * m[9]) * scale;
    warp_sync();
    float mx = NEG_INF, l = 0.f, o[AMAX / 32];
#pragma unroll
    for (int i = 0; i < AMAX / 32; i++) o[i] = 0.f;
    for (int j0 = 0; j0 < L; j0 += 32) {
      int j = j0 + lane;
      float sc = NEG_INF;
      if (j < L) {
        const T* kr = kb + j * m[12];
        float acc = 0.f;
        for (int d = 0; d < D; d++) acc += qsh[w][d] * load(kr + d * m[13]);
        sc = acc;
      }
      float mn = fmax_(mx, warp_max(sc));
      float corr = fexp(mx - mn);
      float p = j < L ? fexp(sc - mn) : 0.f;
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int i = 0; i < AMAX / 32; i++) o[i] *= corr;
      int cnt = L - j0 < 32 ? L - j0 : 32;
      for (int jj = 0; jj < cnt; jj++) {
        float pj = shfl_idx(p, jj);
        const T* vr = vb + (j0 + jj) * m[16];
#pragma unroll
        for (int i = 0; i < AMAX / 32; i++) {
          int d = lane + 32 * i;
          if (d < DV) o[i] += pj * load(vr + d * m[17]);
        }
      }
      mx = mn;
    }
#pragma unroll
    for (int i = 0; i < AMAX / 32; i++) {
      int d = lane + 32 * i;
      if (d < DV) store(orow + d * m[21], o[i] / l);
    }
    warp_sync();
  }
}

// Tensor-core attention for 16-bit types: mma.sync m16n8k16 (sm_80+),
// float32 accumulation. A block of 4 warps takes 64 query rows of one
// (b1, b2), 16 per warp, its queries as A fragments in registers; per tile
// of 64 keys the block stages K and V in shared memory, each warp computes
// its 16 x 64 scores, rescales its running output, turns the
// probabilities (rounded to T) into A fragments in place and multiplies
// them by V. DH (64 or 128) bounds D and DV; smaller sizes are
// zero-padded.
template <typename T> struct Mma;
template <> struct Mma<f16> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    return (unsigned)f2h(lo) | ((unsigned)f2h(hi) << 16);
  }
};
template <> struct Mma<bf16> {
  static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    return (unsigned)f2b(lo) | ((unsigned)f2b(hi) << 16);
  }
};

// raw16 is element (r, c) of a strided 16-bit matrix of rows x cols, or
// zero bits (0.0) outside it.
template <typename T>
__device__ __forceinline__ unsigned raw16(const T* p, int r, int c, int rs, int cs, int rows, int cols) {
  return (r < rows && c < cols) ? (unsigned)p[r * rs + c * cs].v : 0u;
}

// ld16 loads 16 bytes from global memory into r, or zeros for a null p;
// st16 stores them (a generic address: shared memory here).
__device__ __forceinline__ void ld16(const void* p, unsigned* r) {
  r[0] = r[1] = r[2] = r[3] = 0u;
  if (p) asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
__device__ __forceinline__ void st16(void* p, const unsigned* r) {
  asm volatile("st.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

#define ATQ 64
#define ATK 64

// ldsm4 loads four 8x8 matrices of 16-bit elements from shared memory
// (ldmatrix; trans: each transposed), lane i giving the address of row
// i%8 of matrix i/8; r[j] is this lane's fragment of matrix j.
__device__ __forceinline__ void ldsm4(const void* p, unsigned* r, bool trans) {
  if (trans)
    asm volatile(
        "{ .reg .u64 a; .reg .u32 s; cvta.to.shared.u64 a, %4; cvt.u32.u64 s, a;\n"
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [s]; }"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "l"(p)
        : "memory");
  else
    asm volatile(
        "{ .reg .u64 a; .reg .u32 s; cvta.to.shared.u64 a, %4; cvt.u32.u64 s, a;\n"
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [s]; }"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "l"(p)
        : "memory");
}

// LDM: B fragments by ldmatrix (four per instruction) instead of 32- and
// 16-bit shared loads.
// 0/1 switches for A/B builds. ATTN_QO: queries in and outputs out
// through shared memory in 16-byte accesses where their rows allow.
// ATTN_DB: the next tile of keys and values copied in by cp.async while
// the current one computes, where two tiles fit the 48 KB of static
// shared memory (head sizes up to 64).
#ifndef ATTN_QO
#define ATTN_QO 1
#endif
#ifndef ATTN_DB
#define ATTN_DB 0
#endif

// cp_async16 copies 16 bytes from global src to shared dst without
// registers, or zero-fills them where n is 0 (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int n) {
  asm volatile(
      "{ .reg .u64 a; .reg .u32 s; cvta.to.shared.u64 a, %0; cvt.u32.u64 s, a;\n"
      "cp.async.cg.shared.global [s], [%1], 16, %2; }" ::"l"(dst),
      "l"(src), "r"(n)
      : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// attn_kv_async copies keys and values [j0, j0 + ATK) into shared memory
// by cp.async (zeros past L keys and D / DV columns), one commit group;
// rows must be contiguous and 16-byte aligned.
template <typename T, int DH>
__device__ __forceinline__ void attn_kv_async(u16 (*ks)[DH + 8], u16 (*vs)[DH + 8], const T* kb, const T* vb,
                                              const int* m, int j0, int L, int D, int DV, int tid) {
#pragma unroll
  for (int c = 0; c < ATK * DH / 8 / 128; c++) {
    int e = (tid + c * 128) * 8, key = e / DH, d = e - key * DH;
    bool kin = j0 + key < L && d < D, vin = j0 + key < L && d < DV;
    cp_async16(&ks[key][d], kin ? (const void*)(kb + (j0 + key) * m[12] + d) : (const void*)kb, kin ? 16 : 0);
    cp_async16(&vs[key][d], vin ? (const void*)(vb + (j0 + key) * m[16] + d) : (const void*)vb, vin ? 16 : 0);
  }
  cp_async_commit();
}

template <typename T, int DH, bool LDM>
__device__ __forceinline__ void attn_mma(T* out, const T* q, const T* k, const T* v, const int* m, float scale) {
  constexpr int NB = ATTN_DB && DH <= 64 ? 2 : 1;
  __shared__ __attribute__((aligned(16))) u16 ks[NB][ATK][DH + 8];
  __shared__ __attribute__((aligned(16))) u16 vs[NB][ATK][DH + 8];
  int B2 = m[1], S = m[2], L = m[3], D = m[4], DV = m[5];
  int tid = TID_X, lane = tid & 31, w = tid >> 5, g = lane >> 2, tg = lane & 3;
  int tiles = (S + ATQ - 1) / ATQ;
  float sl2 = scale * 1.4426950408889634f;
  for (int blk = CTAID_X; blk < m[0] * B2 * tiles; blk += NCTAID_X) {
    int t = blk % tiles, b = blk / tiles, b2 = b % B2, b1 = b / B2;
    const T* qb = q + b1 * m[6] + b2 * m[7];
    const T* kb = k + b1 * m[10] + b2 * m[11];
    const T* vb = v + b1 * m[14] + b2 * m[15];
    T* ob = out + b1 * m[18] + b2 * m[19];
    // K and V rows of contiguous, 16-byte aligned chunks: vector loads.
    bool vec = m[13] == 1 && m[17] == 1 && D % 8 == 0 && DV % 8 == 0 && m[12] % 8 == 0 && m[16] % 8 == 0 &&
               ((unsigned long long)kb & 15) == 0 && ((unsigned long long)vb & 15) == 0;
    int r0 = t * ATQ + w * 16 + g, r1 = r0 + 8;
    unsigned qa[DH / 16][4];
    if (ATTN_QO && m[9] == 1 && m[8] % 8 == 0 && D % 8 == 0 && ((unsigned long long)qb & 15) == 0) {
      // The block's 64 query rows through shared memory: 16-byte loads
      // of whole rows, then A fragments by ldmatrix (the element loads
      // below read a quarter of each 32-byte sector they touch).
      SYNC();
#pragma unroll
      for (int c = 0; c < ATQ * DH / 8 / 128; c++) {
        int e = (tid + c * 128) * 8, row = e / DH, d = e - row * DH, r = t * ATQ + row;
        unsigned x[4];
        ld16(r < S && d < D ? (const void*)(qb + r * m[8] + d) : 0, x);
        st16(&vs[0][row][d], x);
      }
      SYNC();
#pragma unroll
      for (int kk = 0; kk < DH / 16; kk++) ldsm4(&vs[0][w * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8], qa[kk], false);
    } else {
#pragma unroll
      for (int kk = 0; kk < DH / 16; kk++) {
        int c0 = kk * 16 + tg * 2, c1 = c0 + 8;
        qa[kk][0] = raw16(qb, r0, c0, m[8], m[9], S, D) | (raw16(qb, r0, c0 + 1, m[8], m[9], S, D) << 16);
        qa[kk][1] = raw16(qb, r1, c0, m[8], m[9], S, D) | (raw16(qb, r1, c0 + 1, m[8], m[9], S, D) << 16);
        qa[kk][2] = raw16(qb, r0, c1, m[8], m[9], S, D) | (raw16(qb, r0, c1 + 1, m[8], m[9], S, D) << 16);
        qa[kk][3] = raw16(qb, r1, c1, m[8], m[9], S, D) | (raw16(qb, r1, c1 + 1, m[8], m[9], S, D) << 16);
      }
    }
    float o[DH / 8][4];
#pragma unroll
    for (int nt = 0; nt < DH / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
    float mx0 = NEG_INF, mx1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    // db: tile n + 1 is copied in (cp.async) while tile n computes; the
    // barrier at a tile's end frees its buffer for the copy after next.
    const bool db = NB == 2 && vec;
    if (db) {
      SYNC();
      attn_kv_async<T, DH>(ks[0], vs[0], kb, vb, m, 0, L, D, DV, tid);
    }
    for (int j0 = 0, nb = 0; j0 < L; j0 += ATK, nb = db ? nb ^ 1 : 0) {
      if (db) {
        if (j0 + ATK < L) {
          attn_kv_async<T, DH>(ks[nb ^ 1], vs[nb ^ 1], kb, vb, m, j0 + ATK, L, D, DV, tid);
          cp_async_wait<1>();
        } else {
          cp_async_wait<0>();
        }
      } else {
      SYNC();
      if (vec) {
        // 16-byte chunks of 8 elements, all of a thread's loads issued
        // before its stores (a load-store loop waits out each load's
        // latency in turn).
        const int CH = ATK * DH / 8 / 128;
        unsigned kr[CH][4], vr[CH][4];
#pragma unroll
        for (int c = 0; c < CH; c++) {
          int e = (tid + c * 128) * 8, key = e / DH, d = e - key * DH;
          bool in = j0 + key < L;
          ld16(in && d < D ? (const void*)(kb + (j0 + key) * m[12] + d) : 0, kr[c]);
          ld16(in && d < DV ? (const void*)(vb + (j0 + key) * m[16] + d) : 0, vr[c]);
        }
#pragma unroll
        for (int c = 0; c < CH; c++) {
          int e = (tid + c * 128) * 8, key = e / DH, d = e - key * DH;
          st16(&ks[0][key][d], kr[c]);
          st16(&vs[0][key][d], vr[c]);
        }
      } else {
        for (int e = tid; e < ATK * DH; e += 128) {
          int key = e / DH, d = e - key * DH;
          ks[0][key][d] = (u16)raw16(kb, j0 + key, d, m[12], m[13], L, D);
          vs[0][key][d] = (u16)raw16(vb, j0 + key, d, m[16], m[17], L, DV);
        }
      }
      }
      SYNC();
      const u16(*kt)[DH + 8] = ks[nb];
      const u16(*vt)[DH + 8] = vs[nb];
      float s[ATK / 8][4];
#pragma unroll
      for (int nt = 0; nt < ATK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      if (LDM) {
        // Lane i addresses row i%8 of 8x8 matrix i/8: keys of n-tiles nt
        // and nt+1, head columns kk*16 and kk*16+8.
        int mj = lane >> 3, mr = lane & 7;
#pragma unroll
        for (int nt = 0; nt < ATK / 8; nt += 2) {
#pragma unroll
          for (int kk = 0; kk < DH / 16; kk++) {
            unsigned b[4];
            ldsm4(&kt[(nt + (mj >> 1)) * 8 + mr][kk * 16 + (mj & 1) * 8], b, false);
            Mma<T>::run(s[nt], qa[kk], b[0], b[1]);
            Mma<T>::run(s[nt + 1], qa[kk], b[2], b[3]);
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < ATK / 8; nt++) {
#pragma unroll
          for (int kk = 0; kk < DH / 16; kk++) {
            unsigned b0 = *(const unsigned*)&kt[nt * 8 + g][kk * 16 + tg * 2];
            unsigned b1 = *(const unsigned*)&kt[nt * 8 + g][kk * 16 + 8 + tg * 2];
            Mma<T>::run(s[nt], qa[kk], b0, b1);
          }
        }
      }
      float mn0 = mx0, mn1 = mx1;
#pragma unroll
      for (int nt = 0; nt < ATK / 8; nt++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
          bool in = j0 + nt * 8 + tg * 2 + e < L;
          s[nt][e] = in ? s[nt][e] * sl2 : NEG_INF;
          s[nt][2 + e] = in ? s[nt][2 + e] * sl2 : NEG_INF;
          mn0 = fmax_(mn0, s[nt][e]);
          mn1 = fmax_(mn1, s[nt][2 + e]);
        }
      }
      mn0 = fmax_(mn0, shfl_xor(mn0, 1));
      mn0 = fmax_(mn0, shfl_xor(mn0, 2));
      mn1 = fmax_(mn1, shfl_xor(mn1, 1));
      mn1 = fmax_(mn1, shfl_xor(mn1, 2));
      float c0 = ex2(mx0 - mn0), c1 = ex2(mx1 - mn1);
      l0 *= c0;
      l1 *= c1;
#pragma unroll
      for (int nt = 0; nt < DH / 8; nt++) {
        o[nt][0] *= c0;
        o[nt][1] *= c0;
        o[nt][2] *= c1;
        o[nt][3] *= c1;
      }
      unsigned pa[ATK / 16][4];
#pragma unroll
      for (int nt = 0; nt < ATK / 8; nt++) {
        float p0 = ex2(s[nt][0] - mn0), p1 = ex2(s[nt][1] - mn0);
        float p2 = ex2(s[nt][2] - mn1), p3 = ex2(s[nt][3] - mn1);
        l0 += p0 + p1;
        l1 += p2 + p3;
        pa[nt / 2][(nt & 1) * 2] = Mma<T>::pack(p0, p1);
        pa[nt / 2][(nt & 1) * 2 + 1] = Mma<T>::pack(p2, p3);
      }
#pragma unroll
      for (int kc = 0; kc < ATK / 16; kc++) {
        if (LDM) {
          // Transposed 8x8 matrices: keys kc*16 and kc*16+8, value
          // columns of n-tiles nt and nt+1.
          int mj = lane >> 3, mr = lane & 7;
#pragma unroll
          for (int nt = 0; nt < DH / 8; nt += 2) {
            unsigned b[4];
            ldsm4(&vt[kc * 16 + (mj & 1) * 8 + mr][(nt + (mj >> 1)) * 8], b, true);
            Mma<T>::run(o[nt], pa[kc], b[0], b[1]);
            Mma<T>::run(o[nt + 1], pa[kc], b[2], b[3]);
          }
        } else {
          int key = kc * 16 + tg * 2;
#pragma unroll
          for (int nt = 0; nt < DH / 8; nt++) {
            int col = nt * 8 + g;
            unsigned b0 = (unsigned)vt[key][col] | ((unsigned)vt[key + 1][col] << 16);
            unsigned b1 = (unsigned)vt[key + 8][col] | ((unsigned)vt[key + 9][col] << 16);
            Mma<T>::run(o[nt], pa[kc], b0, b1);
          }
        }
      }
      mx0 = mn0;
      mx1 = mn1;
      if (db) SYNC();
    }
    l0 += shfl_xor(l0, 1);
    l0 += shfl_xor(l0, 2);
    l1 += shfl_xor(l1, 1);
    l1 += shfl_xor(l1, 2);
    float i0 = 1.f / l0, i1 = 1.f / l1;
    if (ATTN_QO && m[21] == 1 && m[20] % 8 == 0 && DV % 8 == 0 && ((unsigned long long)ob & 15) == 0) {
      // The same through shared memory the other way: each warp's rows
      // as pairs of T, then the block's rows out in 16-byte stores.
      SYNC();
#pragma unroll
      for (int nt = 0; nt < DH / 8; nt++) {
        *(unsigned*)&ks[0][w * 16 + g][nt * 8 + tg * 2] = Mma<T>::pack(o[nt][0] * i0, o[nt][1] * i0);
        *(unsigned*)&ks[0][w * 16 + g + 8][nt * 8 + tg * 2] = Mma<T>::pack(o[nt][2] * i1, o[nt][3] * i1);
      }
      SYNC();
#pragma unroll
      for (int c = 0; c < ATQ * DH / 8 / 128; c++) {
        int e = (tid + c * 128) * 8, row = e / DH, d = e - row * DH, r = t * ATQ + row;
        if (r < S && d < DV) {
          unsigned x[4];
          asm volatile("ld.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "l"(&ks[0][row][d]));
          st16(ob + r * m[20] + d, x);
        }
      }
      continue;
    }
#pragma unroll
    for (int nt = 0; nt < DH / 8; nt++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        int col = nt * 8 + tg * 2 + e;
        if (col >= DV) continue;
        if (r0 < S) store(ob + r0 * m[20] + col * m[21], o[nt][e] * i0);
        if (r1 < S) store(ob + r1 * m[20] + col * m[21], o[nt][2 + e] * i1);
      }
    }
  }
}

#define ASK 32
#define ASW 4

// attn_split is attn_mma (ldmatrix fragments) for few query tiles, as at
// batch 1 (ViT-B/16: 12 heads x 4 tiles of 64 queries leave most SMs idle
// and each warp walks all keys in turn). A block of ASW warps takes 16
// query rows; each warp takes every ASW-th chunk of ASK keys with its own
// shared tiles (no block barrier in the loop), keeps its own running
// maximum, sum and output, and the warps' parts are merged through shared
// memory at the end. A block's wait is so a quarter of attn_mma's, and
// there are 4 times the blocks.
template <typename T, int DH>
__device__ __forceinline__ void attn_split(T* out, const T* q, const T* k, const T* v, const int* m, float scale) {
  __shared__ __attribute__((aligned(16))) u16 ks[ASW][ASK][DH + 8];
  __shared__ __attribute__((aligned(16))) u16 vs[ASW][ASK][DH + 8];
  int B2 = m[1], S = m[2], L = m[3], D = m[4], DV = m[5];
  int tid = TID_X, lane = tid & 31, w = tid >> 5, g = lane >> 2, tg = lane & 3;
  int mj = lane >> 3, mr = lane & 7;
  int tiles = (S + 15) / 16;
  float sl2 = scale * 1.4426950408889634f;
  // The merge's room, over the key tiles once every warp is done with them.
  float* mxs = (float*)&ks[0][0][0];
  float* ls = mxs + ASW * 16;
  float* os = ls + ASW * 16;
  for (int blk = CTAID_X; blk < m[0] * B2 * tiles; blk += NCTAID_X) {
    int t = blk % tiles, b = blk / tiles, b2 = b % B2, b1 = b / B2;
    const T* qb = q + b1 * m[6] + b2 * m[7];
    const T* kb = k + b1 * m[10] + b2 * m[11];
    const T* vb = v + b1 * m[14] + b2 * m[15];
    T* ob = out + b1 * m[18] + b2 * m[19];
    bool vec = m[13] == 1 && m[17] == 1 && D % 8 == 0 && DV % 8 == 0 && m[12] % 8 == 0 && m[16] % 8 == 0 &&
               ((unsigned long long)kb & 15) == 0 && ((unsigned long long)vb & 15) == 0;
    int r0 = t * 16 + g, r1 = r0 + 8;
    unsigned qa[DH / 16][4];
#pragma unroll
    for (int kk = 0; kk < DH / 16; kk++) {
      int c0 = kk * 16 + tg * 2, c1 = c0 + 8;
      qa[kk][0] = raw16(qb, r0, c0, m[8], m[9], S, D) | (raw16(qb, r0, c0 + 1, m[8], m[9], S, D) << 16);
      qa[kk][1] = raw16(qb, r1, c0, m[8], m[9], S, D) | (raw16(qb, r1, c0 + 1, m[8], m[9], S, D) << 16);
      qa[kk][2] = raw16(qb, r0, c1, m[8], m[9], S, D) | (raw16(qb, r0, c1 + 1, m[8], m[9], S, D) << 16);
      qa[kk][3] = raw16(qb, r1, c1, m[8], m[9], S, D) | (raw16(qb, r1, c1 + 1, m[8], m[9], S, D) << 16);
    }
    float o[DH / 8][4];
#pragma unroll
    for (int nt = 0; nt < DH / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
    float mx0 = NEG_INF, mx1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    for (int j0 = w * ASK; j0 < L; j0 += ASW * ASK) {
      SYNCWARP();
      if (vec) {
        const int CH = ASK * DH / 8 / 32;
        unsigned kr[CH][4], vr[CH][4];
#pragma unroll
        for (int c = 0; c < CH; c++) {
          int e = (lane + c * 32) * 8, key = e / DH, d = e - key * DH;
          bool in = j0 + key < L;
          ld16(in && d < D ? (const void*)(kb + (j0 + key) * m[12] + d) : 0, kr[c]);
          ld16(in && d < DV ? (const void*)(vb + (j0 + key) * m[16] + d) : 0, vr[c]);
        }
#pragma unroll
        for (int c = 0; c < CH; c++) {
          int e = (lane + c * 32) * 8, key = e / DH, d = e - key * DH;
          st16(&ks[w][key][d], kr[c]);
          st16(&vs[w][key][d], vr[c]);
        }
      } else {
        for (int e = lane; e < ASK * DH; e += 32) {
          int key = e / DH, d = e - key * DH;
          ks[w][key][d] = (u16)raw16(kb, j0 + key, d, m[12], m[13], L, D);
          vs[w][key][d] = (u16)raw16(vb, j0 + key, d, m[16], m[17], L, DV);
        }
      }
      SYNCWARP();
      float s[ASK / 8][4];
#pragma unroll
      for (int nt = 0; nt < ASK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int nt = 0; nt < ASK / 8; nt += 2) {
#pragma unroll
        for (int kk = 0; kk < DH / 16; kk++) {
          unsigned bb[4];
          ldsm4(&ks[w][(nt + (mj >> 1)) * 8 + mr][kk * 16 + (mj & 1) * 8], bb, false);
          Mma<T>::run(s[nt], qa[kk], bb[0], bb[1]);
          Mma<T>::run(s[nt + 1], qa[kk], bb[2], bb[3]);
        }
      }
      float mn0 = mx0, mn1 = mx1;
#pragma unroll
      for (int nt = 0; nt < ASK / 8; nt++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
          bool in = j0 + nt * 8 + tg * 2 + e < L;
          s[nt][e] = in ? s[nt][e] * sl2 : NEG_INF;
          s[nt][2 + e] = in ? s[nt][2 + e] * sl2 : NEG_INF;
          mn0 = fmax_(mn0, s[nt][e]);
          mn1 = fmax_(mn1, s[nt][2 + e]);
        }
      }
      mn0 = fmax_(mn0, shfl_xor(mn0, 1));
      mn0 = fmax_(mn0, shfl_xor(mn0, 2));
      mn1 = fmax_(mn1, shfl_xor(mn1, 1));
      mn1 = fmax_(mn1, shfl_xor(mn1, 2));
      float c0 = ex2(mx0 - mn0), c1 = ex2(mx1 - mn1);
      l0 *= c0;
      l1 *= c1;
#pragma unroll
      for (int nt = 0; nt < DH / 8; nt++) {
        o[nt][0] *= c0;
        o[nt][1] *= c0;
        o[nt][2] *= c1;
        o[nt][3] *= c1;
      }
      unsigned pa[ASK / 16][4];
#pragma unroll
      for (int nt = 0; nt < ASK / 8; nt++) {
        float p0 = ex2(s[nt][0] - mn0), p1 = ex2(s[nt][1] - mn0);
        float p2 = ex2(s[nt][2] - mn1), p3 = ex2(s[nt][3] - mn1);
        l0 += p0 + p1;
        l1 += p2 + p3;
        pa[nt / 2][(nt & 1) * 2] = Mma<T>::pack(p0, p1);
        pa[nt / 2][(nt & 1) * 2 + 1] = Mma<T>::pack(p2, p3);
      }
#pragma unroll
      for (int kc = 0; kc < ASK / 16; kc++) {
#pragma unroll
        for (int nt = 0; nt < DH / 8; nt += 2) {
          unsigned bb[4];
          ldsm4(&vs[w][kc * 16 + (mj & 1) * 8 + mr][(nt + (mj >> 1)) * 8], bb, true);
          Mma<T>::run(o[nt], pa[kc], bb[0], bb[1]);
          Mma<T>::run(o[nt + 1], pa[kc], bb[2], bb[3]);
        }
      }
      mx0 = mn0;
      mx1 = mn1;
    }
    l0 += shfl_xor(l0, 1);
    l0 += shfl_xor(l0, 2);
    l1 += shfl_xor(l1, 1);
    l1 += shfl_xor(l1, 2);
    SYNC();
    if (tg == 0) {
      mxs[w * 16 + g] = mx0;
      mxs[w * 16 + g + 8] = mx1;
      ls[w * 16 + g] = l0;
      ls[w * 16 + g + 8] = l1;
    }
#pragma unroll
    for (int nt = 0; nt < DH / 8; nt++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        int col = nt * 8 + tg * 2 + e;
        os[(w * 16 + g) * DH + col] = o[nt][e];
        os[(w * 16 + g + 8) * DH + col] = o[nt][2 + e];
      }
    }
    SYNC();
    for (int idx = tid; idx < 16 * DH; idx += ASW * 32) {
      int row = idx / DH, col = idx - row * DH;
      int r = t * 16 + row;
      if (r >= S || col >= DV) continue;
      float mxa = NEG_INF;
#pragma unroll
      for (int u = 0; u < ASW; u++) mxa = fmax_(mxa, mxs[u * 16 + row]);
      float lt = 0.f, ot = 0.f;
#pragma unroll
      for (int u = 0; u < ASW; u++) {
        // A warp without keys (short sequences) has -inf and adds nothing.
        float f = mxs[u * 16 + row] == NEG_INF ? 0.f : ex2(mxs[u * 16 + row] - mxa);
        lt += f * ls[u * 16 + row];
        ot += f * os[(u * 16 + row) * DH + col];
      }
      store(ob + r * m[20] + col * m[21], ot / lt);
    }
    SYNC();
  }
}

// pad_cl: an image batch [nb][C][hw] into channels-last [nb*hw][8] with
// channels C..7 zero, one pixel per thread and its 8 channels written as
// 16-byte stores: cuDNN's channels-last kernels run an RGB stem several
// times faster with its channels padded to 8, and a fill then a strided
// copy wrote the padded tensor twice (as did 2-byte stores 16 bytes apart,
// one memory transaction each).
template <typename T>
__device__ __forceinline__ void pad_cl(T* y, const T* x, i64 pixels, int hw, int C) {
  constexpr int vecs = 8 * sizeof(T) / sizeof(U4);
  GRID_LOOP(p, pixels) {
    i64 b = p / hw, q = p - b * hw;
    const T* xs = x + b * C * hw + q;
    union {
      T v[8];
      U4 u[vecs];
    } px;
#pragma unroll
    for (int ch = 0; ch < 8; ch++) store(px.v + ch, ch < C ? load(xs + (i64)ch * hw) : 0.f);
    U4* yp = reinterpret_cast<U4*>(y + p * 8);
#pragma unroll
    for (int k = 0; k < vecs; k++) yp[k] = px.u[k];
  }
}

template <typename I, typename O>
__device__ __forceinline__ void cast(O* y, const I* x, i64 n) {
  GRID_LOOP(i, n) store(y + i, load(x + i));
}

#define INSTANTIATE(T, S)                                                                                         \
  extern "C" __global__ void g_ew_##S(T* out, const T* a, const T* b, const int* meta, i64 n, int op, float p0,  \
                                      float p1) { pdl_enter();                                                   \
    ew<T>(out, a, b, meta, n, op, p0, p1);                                                                       \
  }                                                                                                              \
  extern "C" __global__ void g_ew_flat_##S(T* out, const T* a, const T* b, i64 n, int op, float p0, float p1,     \
                                           int bscalar) { pdl_enter();                                           \
    ew_flat<T>(out, a, b, n, op, p0, p1, bscalar);                                                               \
  }                                                                                                              \
  extern "C" __global__ void g_affine_##S(T* y, const T* x, const float* scale, const float* shift, const T* res, \
                                          i64 n, int C, int inner, int act, float p0, float p1) { pdl_enter();   \
    affine<T>(y, x, scale, shift, res, n, C, inner, act, p0, p1);                                                \
  }                                                                                                              \
  extern "C" __global__ void g_pool_##S(T* y, const T* x, int nc, int H, int W, int OH, int OW, int kh, int kw,   \
                                        int sh, int sw, int ph, int pw, int dh, int dw, int isMax, int countPad, \
                                        int peh, int pew, int C) { pdl_enter();                                  \
    pool<T>(y, x, nc, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw, isMax, countPad, peh, pew, C);              \
  }                                                                                                              \
  extern "C" __global__ void g_reduce_cl_##S(T* y, const T* x, int nb, int C, int hw, int op) { pdl_enter();     \
    reduce_cl<T>(y, x, nb, C, hw, op);                                                                           \
  }                                                                                                              \
  extern "C" __global__ void g_reduce_##S(T* y, const T* x, int rows, int len, int op) { pdl_enter();            \
    rows_reduce<T>(y, x, rows, len, op);                                                                         \
  }                                                                                                              \
  extern "C" __global__ void g_softmax_##S(T* y, const T* x, int rows, int len, int logsm) { pdl_enter();        \
    softmax<T>(y, x, rows, len, logsm);                                                                          \
  }                                                                                                              \
  extern "C" __global__ void g_layernorm_##S(T* y, const T* x, const float* g, const float* b, int rows, int len, \
                                             float eps) { pdl_enter();                                           \
    layernorm<T>(y, x, g, b, rows, len, eps);                                                                    \
  }                                                                                                              \
  extern "C" __global__ void g_layernorm_strided_##S(T* y, const T* x, const float* g, const float* b,           \
                                                     int outer, int C, int inner, float eps) { pdl_enter();      \
    layernorm_strided<T>(y, x, g, b, outer, C, inner, eps);                                                      \
  }                                                                                                              \
  extern "C" __global__ void g_softmax_warp_##S(T* y, const T* x, int rows, int len, int logsm) { pdl_enter();   \
    softmax_warp<T>(y, x, rows, len, logsm);                                                                     \
  }                                                                                                              \
  extern "C" __global__ void g_layernorm_warp_##S(T* y, const T* x, const float* g, const float* b, int rows,    \
                                                  int len, float eps) { pdl_enter();                             \
    layernorm_warp<T>(y, x, g, b, rows, len, eps);                                                               \
  }                                                                                                              \
  extern "C" __global__ void g_layernorm_vec_##S(T* y, const T* x, const float* g, const float* b, int rows,     \
                                                 int len, float eps) { pdl_enter();                              \
    layernorm_vec<T>(y, x, g, b, rows, len, eps);                                                                \
  }                                                                                                              \
  extern "C" __global__ void LNG_LB g_layernorm_group_##S(T* y, const T* x, const float* g, const float* b, int rows,   \
                                                   int len, float eps) { pdl_enter();                            \
    layernorm_group<T>(y, x, g, b, rows, len, eps);                                                              \
  }                                                                                                              \
  extern "C" __global__ void g_dwconv_##S(T* y, const T* x, const float* w, const float* bias, const T* res,     \
                                          const int* meta, int n, int act, float p0, float p1) { pdl_enter();    \
    dwconv<T>(y, x, w, bias, res, meta, n, act, p0, p1);                                                         \
  }                                                                                                              \
  extern "C" __global__ void g_affine_vec_##S(T* y, const T* x, const float* scale, const float* shift,          \
                                              const T* res, int n, int C, int act, float p0, float p1) { pdl_enter();         \
    affine_vec<T>(y, x, scale, shift, res, n, C, act, p0, p1);                                                   \
  }                                                                                                              \
  extern "C" __global__ void g_dwconv_vec_##S(T* y, const T* x, const float* w, const float* bias, const T* res, \
                                              const int* meta, int n, int act, float p0, float p1) { pdl_enter();             \
    dwconv_vec<T>(y, x, w, bias, res, meta, n, act, p0, p1);                                                     \
  }                                                                                                              \
  extern "C" __global__ void g_scale_cl_##S(T* y, const T* x, const T* s, int n, int C, int hwc, int op) { pdl_enter();        \
    scale_cl<T>(y, x, s, n, C, hwc, op);                                                                         \
  }                                                                                                              \
  extern "C" __global__ void g_affine_rows_##S(T* y, const T* x, const float* scale, const float* shift, i64 n,   \
                                               int C, int inner, int len, int ys, int xs, int act, float p0,     \
                                               float p1) { pdl_enter();                                          \
    affine_rows<T>(y, x, scale, shift, n, C, inner, len, ys, xs, act, p0, p1);                                   \
  }                                                                                                              \
  extern "C" __global__ void g_affine_rows_vec_##S(T* y, const T* x, const float* scale, const float* shift,     \
                                                   int n, int C, int len, int ys, int xs, int act, float p0,     \
                                                   float p1) { pdl_enter();                                      \
    affine_rows_vec<T>(y, x, scale, shift, n, C, len, ys, xs, act, p0, p1);                                      \
  }                                                                                                              \
  extern "C" __global__ void g_ew_chain_##S(T* out, const T* a, const T* b0, const T* b1, const T* b2,           \
                                            const T* b3, const int* meta, i64 n) { pdl_enter();                  \
    ew_chain<T>(out, a, b0, b1, b2, b3, meta, n);                                                                \
  }                                                                                                              \
  extern "C" __global__ void g_fc_##S(T* y, const T* x, const float* w, const float* bias, int nb, int C, int K,  \
                                      int act, float p0, float p1) { pdl_enter();                                \
    fc_warp<T>(y, x, w, bias, nb, C, K, act, p0, p1);                                                            \
  }                                                                                                              \
  extern "C" __global__ void g_cast_in_##S(T* y, const float* x, i64 n) { pdl_enter(); cast<float, T>(y, x, n); }              \
  extern "C" __global__ void g_pad_cl_##S(T* y, const T* x, i64 pixels, int hw, int C) { pdl_enter();            \
    pad_cl<T>(y, x, pixels, hw, C);                                                                              \
  }                                                                                                              \
  extern "C" __global__ void g_attn_##S(T* out, const T* q, const T* k, const T* v, const int* meta, float scale) { pdl_enter(); \
    attn_warp<T>(out, q, k, v, meta, scale);                                                                     \
  }                                                                                                              \
  extern "C" __global__ void g_cast_out_##S(float* y, const T* x, i64 n) { pdl_enter(); cast<T, float>(y, x, n); }

INSTANTIATE(float, f32)
INSTANTIATE(f16, f16)
INSTANTIATE(bf16, bf16)

// The tiled depthwise kernels: g_dwt_k<K>s<S>t<TW>_<dtype>.
#define DWT(T, S_, K, ST, TW)                                                                                     \
  extern "C" __global__ void g_dwt_k##K##s##ST##t##TW##_##S_(T* y, const T* x, const float* w, const float* bias, \
                                                             const T* res, const int* meta, int n, int act,       \
                                                             float p0, float p1) { pdl_enter();                   \
    dwconv_tile<T, K, ST, TW>(y, x, w, bias, res, meta, n, act, p0, p1);                                          \
  }
// Channels-last (and so the depthwise kernels) is the 16-bit precisions'
// layout only; output widths of multiples of 7 (224-pixel images: 112, 56,
// 28, 14, 7) tile exactly, others waste a part of their last tile.
// Tiles of 4 (fewer registers, more threads) for 3x3 and 5x5; tiles of 1
// (a thread per output vector, a row's taps unrolled) for small batches,
// where tiles of 7 leave most SMs idle (768x7x7 at batch 1: 672 threads);
// the compiled engine times each against the others.
#define DWT_ALL(T, S_) \
  DWT(T, S_, 3, 1, 7) DWT(T, S_, 3, 2, 7) DWT(T, S_, 5, 1, 7) DWT(T, S_, 5, 2, 7) DWT(T, S_, 7, 1, 7) DWT(T, S_, 7, 2, 7) \
  DWT(T, S_, 3, 1, 4) DWT(T, S_, 3, 2, 4) DWT(T, S_, 5, 1, 4) DWT(T, S_, 5, 2, 4) \
  DWT(T, S_, 3, 1, 1) DWT(T, S_, 3, 2, 1) DWT(T, S_, 5, 1, 1) DWT(T, S_, 5, 2, 1) DWT(T, S_, 7, 1, 1) DWT(T, S_, 7, 2, 1)
DWT_ALL(f16, f16)
DWT_ALL(bf16, bf16)

// The row-split depthwise kernels: g_dwr_k<K>s<S>_<dtype>.
#define DWR(T, S_, K, ST)                                                                                         \
  extern "C" __global__ void g_dwr_k##K##s##ST##_##S_(T* y, const T* x, const float* w, const float* bias,         \
                                                      const T* res, const int* meta, int n, int act, float p0,    \
                                                      float p1) { pdl_enter();                                    \
    dwconv_rows<T, K, ST>(y, x, w, bias, res, meta, n, act, p0, p1);                                              \
  }
#define DWR_ALL(T, S_) \
  DWR(T, S_, 3, 1) DWR(T, S_, 3, 2) DWR(T, S_, 5, 1) DWR(T, S_, 5, 2) DWR(T, S_, 7, 1) DWR(T, S_, 7, 2)
DWR_ALL(f16, f16)
DWR_ALL(bf16, bf16)

// The sliding-window depthwise kernels: g_dws_k<K>s<S>t<TW>_<dtype>. Tiles
// of 7 outputs read least (224-pixel images' widths are multiples of 7);
// tiles of 4 and 2 give batch 1's small maps more threads.
#define DWS(T, S_, K, ST, TW)                                                                                     \
  extern "C" __global__ void g_dws_k##K##s##ST##t##TW##_##S_(T* y, const T* x, const float* w, const float* bias, \
                                                             const T* res, const int* meta, int n, int act,       \
                                                             float p0, float p1) { pdl_enter();                   \
    dwconv_slide<T, K, ST, TW>(y, x, w, bias, res, meta, n, act, p0, p1);                                         \
  }
#define DWS_K(T, S_, K, ST) DWS(T, S_, K, ST, 7) DWS(T, S_, K, ST, 4) DWS(T, S_, K, ST, 2)
#define DWS_ALL(T, S_) \
  DWS_K(T, S_, 3, 1) DWS_K(T, S_, 3, 2) DWS_K(T, S_, 5, 1) DWS_K(T, S_, 5, 2) DWS_K(T, S_, 7, 1) DWS_K(T, S_, 7, 2)
DWS_ALL(f16, f16)
DWS_ALL(bf16, bf16)

// The shared-memory depthwise kernels: g_dwb_k<K>s<S>t<T>_<dtype>, output
// tiles of T x T per block of 224 threads: 14 x 14 (two rows of 7 per
// thread, 32 channels; 224-pixel images' maps of 112 to 14 tile exactly)
// and 7 x 7 (a row of 7 per thread, 64 channels; the 7 x 7 maps).
// DWB_MINB14 and DWB_MINB7: the resident blocks per SM each kernel is
// compiled for (launch bounds; 0: the compiler's choice of registers).
// The kernels wait on memory, so resident blocks count more than the few
// bytes the 14 x 14 kernel spills at 4 (CHANGELOG, session 17).
#ifndef DWB_MINB14
#define DWB_MINB14 4
#endif
#ifndef DWB_MINB7
#define DWB_MINB7 5
#endif
#if DWB_MINB14 > 0
#define DWB_LB14 __attribute__((launch_bounds(224, DWB_MINB14)))
#else
#define DWB_LB14
#endif
#if DWB_MINB7 > 0
#define DWB_LB7 __attribute__((launch_bounds(224, DWB_MINB7)))
#else
#define DWB_LB7
#endif
#define DWB(T, S_, K)                                                                                              \
  extern "C" __global__ void DWB_LB14 g_dwb_k##K##s1t14_##S_(T* y, const T* x, const float* w, const float* bias,         \
                                                    const T* res, const int* meta, int n, int act, float p0,     \
                                                    float p1) { pdl_enter();                                     \
    dwconv_smem<T, K, 1, 2, 7, 7, 2, 16>(y, x, w, bias, res, meta, n, act, p0, p1);                              \
  }                                                                                                              \
  extern "C" __global__ void DWB_LB7 g_dwb_k##K##s1t7_##S_(T* y, const T* x, const float* w, const float* bias,          \
                                                   const T* res, const int* meta, int n, int act, float p0,      \
                                                   float p1) { pdl_enter();                                      \
    dwconv_smem<T, K, 1, 1, 7, 7, 1, 32>(y, x, w, bias, res, meta, n, act, p0, p1);                              \
  }
// Stride 2: 7 x 7 tiles of 64 channels (15 x 15 or 17 x 17 inputs; 7 x 7
// filters would not fit the 48 KB of static shared memory).
#ifndef DWB_MINBS2
#define DWB_MINBS2 4
#endif
#define DWB2(T, S_, K)                                                                                             \
  extern "C" __global__ void __attribute__((launch_bounds(224, DWB_MINBS2)))                                      \
  g_dwb_k##K##s2t7_##S_(T* y, const T* x, const float* w, const float* bias, const T* res, const int* meta, int n, \
                        int act, float p0, float p1) { pdl_enter();                                               \
    dwconv_smem<T, K, 2, 1, 7, 7, 1, 32>(y, x, w, bias, res, meta, n, act, p0, p1);                               \
  }
#define DWB_ALL(T, S_) DWB(T, S_, 3) DWB(T, S_, 5) DWB(T, S_, 7) DWB2(T, S_, 3) DWB2(T, S_, 5)
DWB_ALL(f16, f16)
DWB_ALL(bf16, bf16)

// ATTN_MINB: the resident blocks per SM the tensor-core attention is
// compiled for (launch bounds; 0: the compiler's choice of registers, 154
// for the 64-wide head: 3 blocks). 4 blocks (128 registers, 16 bytes
// spilled) measured faster than 3, 5 and 6 (CHANGELOG, session 17).
#ifndef ATTN_MINB
#define ATTN_MINB 4
#endif
#if ATTN_MINB > 0
#define ATTN_LB __attribute__((launch_bounds(128, ATTN_MINB)))
#else
#define ATTN_LB
#endif
#define ATTN_MMA(T, S, NAME, DH, LDM)                                                                           \
  extern "C" __global__ void ATTN_LB g_attn_##NAME##_##S(T* out, const T* q, const T* k, const T* v, const int* meta,  \
                                                 float scale) { pdl_enter();                                   \
    attn_mma<T, DH, LDM>(out, q, k, v, meta, scale);                                                           \
  }
#define INSTANTIATE_MMA(T, S)                                                                                     \
  ATTN_MMA(T, S, mma64, 64, false) ATTN_MMA(T, S, mma128, 128, false)                                           \
  ATTN_MMA(T, S, ldm64, 64, true) ATTN_MMA(T, S, ldm128, 128, true)                                             \
  extern "C" __global__ void g_attn_split64_##S(T* out, const T* q, const T* k, const T* v, const int* meta,     \
                                                float scale) { pdl_enter();                                     \
    attn_split<T, 64>(out, q, k, v, meta, scale);                                                              \
  }

INSTANTIATE_MMA(f16, f16)
INSTANTIATE_MMA(bf16, bf16)

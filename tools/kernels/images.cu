// Image kernels of goinfer's GPU image path (package imagegpu).
//
// ycc_to_rgb turns nvJPEG's planar YCbCr output (chroma at its coded
// resolution) into RGB planes the way libjpeg does it for PIL: "fancy"
// triangle upsampling of 4:2:2 and 4:2:0 chroma, then libjpeg's 16-bit
// fixed-point colour conversion. The arithmetic is imageproc's
// (ycbcr.go), written per output pixel.
//
// preprocess resizes, center-crops, normalises and stores every image of
// a batch into a model's input slot in one pass. The resize is PIL's
// fixed-point two-pass resample exactly as imageproc computes it
// (resize.go): the host hands over imageproc's integer taps for each
// output column and row of the crop; each output pixel sums its
// horizontal taps per source row, rounds and clamps that row to 8 bits
// (PIL's horizontal pass), then sums those with the vertical taps and
// rounds and clamps again (the vertical pass). The 8-bit result indexes
// a table of the normalised value, (x/255 - mean)/std as torchvision
// computes it in float32, so the input is the CPU path's, bit for bit.
//
// softmax_topk is the classifier's post-processing: per row of logits, the
// softmax (in float64, from the row's largest value, as package topk) and
// the k best classes, best first, ties to the lower index, NaN last.
//
// Like goinfer.cu it needs no CUDA headers, so that clang's NVPTX back end
// compiles it where no CUDA toolkit is installed; build.sh writes the PTX
// (and, with nvcc, a fatbin).

#ifdef __clang__
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline)) inline
#define TID_X __nvvm_read_ptx_sreg_tid_x()
#define NTID_X __nvvm_read_ptx_sreg_ntid_x()
#define CTAID_X __nvvm_read_ptx_sreg_ctaid_x()
#define NCTAID_X __nvvm_read_ptx_sreg_nctaid_x()
#define CTAID_Y __nvvm_read_ptx_sreg_ctaid_y()
#define SYNC() asm volatile("bar.sync 0;" ::: "memory")
#else
#define TID_X threadIdx.x
#define NTID_X blockDim.x
#define CTAID_X blockIdx.x
#define NCTAID_X gridDim.x
#define CTAID_Y blockIdx.y
#define SYNC() __syncthreads()
#endif

typedef unsigned short u16;
typedef unsigned char u8;

// ---------------------------------------------------------------------------
// YCbCr to RGB.

// YccDesc is one image decoded to planar YCbCr; the RGB planes go to
// rgb + c * plane_stride with row pitch `pitch`.
struct YccDesc {
  const u8* y;
  const u8* cb;
  const u8* cr;
  u8* rgb;
  long long plane_stride;
  int ypitch, cpitch, pitch;
  int w, h;   // luma size
  int cw, ch; // chroma size
  int mode;   // 0: 4:4:4, 1: 4:2:2 (h2v1), 2: 4:2:0 (h2v2)
};

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// chroma is the full-resolution chroma sample at (x, y): libjpeg's fancy
// upsampling, the nearer coded sample weighted 3/4 (3/4 x 3/4 for h2v2),
// edges repeating themselves, with libjpeg's alternating rounding bias.
__device__ __forceinline__ int chroma(const u8* p, int pitch, int x, int y, int cw, int ch, int mode) {
  if (mode == 0) return p[(long long)y * pitch + x];
  int i = x >> 1;
  if (mode == 1) {
    const u8* r = p + (long long)y * pitch;
    if (x & 1) return (3 * r[i] + r[imin(i + 1, cw - 1)] + 2) >> 2;
    return (3 * r[i] + r[imax(i - 1, 0)] + 1) >> 2;
  }
  int cy = y >> 1;
  int fy = imin(imax((y & 1) ? cy + 1 : cy - 1, 0), ch - 1);
  const u8* nr = p + (long long)cy * pitch;
  const u8* fr = p + (long long)fy * pitch;
  int c = 3 * nr[i] + fr[i];
  if (cw == 1) return (4 * c + 8) >> 4;
  if (x & 1) {
    int j = imin(i + 1, cw - 1);
    return (3 * c + 3 * nr[j] + fr[j] + 7) >> 4;
  }
  int j = imax(i - 1, 0);
  return (3 * c + 3 * nr[j] + fr[j] + 8) >> 4;
}

__device__ __forceinline__ u8 clamp255(int v) { return (u8)(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// ycc_to_rgb: grid (any, n images), a grid-stride loop over each image's
// pixels.
extern "C" __global__ void ycc_to_rgb(const YccDesc* descs) {
  YccDesc d = descs[CTAID_Y];
  int n = d.w * d.h;
  for (int p = CTAID_X * NTID_X + TID_X; p < n; p += NCTAID_X * NTID_X) {
    int x = p % d.w, y = p / d.w;
    int Y = d.y[(long long)y * d.ypitch + x];
    int cb = chroma(d.cb, d.cpitch, x, y, d.cw, d.ch, d.mode) - 128;
    int cr = chroma(d.cr, d.cpitch, x, y, d.cw, d.ch, d.mode) - 128;
    // libjpeg's jdcolor.c constants: FIX(1.402), FIX(1.772), FIX(0.71414),
    // FIX(0.34414) in 16 fractional bits.
    int r = Y + ((91881 * cr + 32768) >> 16);
    int g = Y + ((-22554 * cb + 32768 - 46802 * cr) >> 16);
    int b = Y + ((116130 * cb + 32768) >> 16);
    u8* o = d.rgb + (long long)y * d.pitch + x;
    o[0] = clamp255(r);
    o[d.plane_stride] = clamp255(g);
    o[2 * d.plane_stride] = clamp255(b);
  }
}

// ---------------------------------------------------------------------------
// Resize, crop, normalise.

// ImageDesc describes one decoded image (RGB planes, plane c at base + c *
// plane_stride) and the taps of its crop: xtab holds, for each output
// column, the first source column, the tap count and xstride-2 weights;
// ytab the same for rows. valid 0 marks a failed image.
struct ImageDesc {
  const u8* base;
  long long plane_stride;
  const int* xtab;
  const int* ytab;
  int pitch;
  int xstride, ystride;
  int valid;
};

// PREC is imageproc.FixedPointBits.
#define PREC 22

__device__ __forceinline__ int clip8(int v) {
  v >>= PREC;
  return v < 0 ? 0 : (v > 255 ? 255 : v);
}

// preprocess: grid (ceil(crop_w*crop_h / blockDim.x), n images); out is
// [n, 3, crop_h, crop_w]; lut[c*256 + x] is pixel x of channel c
// normalised, in the output type.
template <typename OT>
__device__ void preprocess(const ImageDesc* descs, OT* out, int crop_w, int crop_h, const OT* lut) {
  int img = CTAID_Y;
  int p = CTAID_X * NTID_X + TID_X;
  int plane = crop_w * crop_h;
  if (p >= plane) return;
  ImageDesc d = descs[img];
  OT* o = out + (long long)img * 3 * plane + p;
  if (!d.valid) {
    for (int c = 0; c < 3; c++) o[c * plane] = lut[c * 256];
    return;
  }
  int ox = p % crop_w, oy = p / crop_w;
  const int* tx = d.xtab + ox * d.xstride;
  const int* ty = d.ytab + oy * d.ystride;
  int x0 = tx[0], nx = tx[1], y0 = ty[0], ny = ty[1];
  const int* kx = tx + 2;
  const int* ky = ty + 2;
  for (int c = 0; c < 3; c++) {
    const u8* src = d.base + c * d.plane_stride + (long long)y0 * d.pitch + x0;
    int acc = 1 << (PREC - 1);
    for (int j = 0; j < ny; j++) {
      const u8* row = src + (long long)j * d.pitch;
      int h = 1 << (PREC - 1);
      for (int i = 0; i < nx; i++) h += (int)row[i] * kx[i];
      acc += clip8(h) * ky[j];
    }
    o[c * plane] = lut[c * 256 + clip8(acc)];
  }
}

extern "C" __global__ void preprocess_f32(const ImageDesc* descs, float* out, int crop_w, int crop_h,
                                          const float* lut) {
  preprocess<float>(descs, out, crop_w, crop_h, lut);
}
extern "C" __global__ void preprocess_f16(const ImageDesc* descs, u16* out, int crop_w, int crop_h,
                                          const u16* lut) {
  preprocess<u16>(descs, out, crop_w, crop_h, lut);
}

// ---------------------------------------------------------------------------
// Softmax and top-k.

#define TKB 256

struct Pair {
  int index;
  float value;
};

union FloatBits {
  float f;
  int i;
};
__device__ __forceinline__ float fbits(int i) {
  FloatBits b;
  b.i = i;
  return b.f;
}
#define F_INF fbits(0x7f800000)
#define F_NAN fbits(0x7fc00000)

union DoubleBits {
  double d;
  long long i;
};

// dexp is e^x for x <= 0 in float64, to within an ulp or so: x = k ln2 +
// r with |r| <= ln2/2, e^r by its Taylor series to r^13, times 2^k.
__device__ __forceinline__ double dexp(double x) {
  if (!(x > -708.0)) return 0.0; // -Inf too; below it the softmax is 0 in float32
  const double invln2 = 1.4426950408889634074, ln2hi = 6.93147180369123816490e-01,
               ln2lo = 1.90821492927058770002e-10;
  int k = (int)(x * invln2 - 0.5);
  double r = (x - k * ln2hi) - k * ln2lo;
  double s = 1.0 / 6227020800.0; // 1/13!
  const double inv[12] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                          1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                          1.0 / 24.0,        1.0 / 6.0,        0.5,             1.0};
  for (int i = 0; i < 12; i++) s = s * r + inv[i];
  s = s * r + 1.0;
  DoubleBits b;
  b.i = (long long)(k + 1023) << 52;
  return s * b.d;
}

// before reports whether class ia of value va ranks before class ib of
// value vb: the higher value, NaN below everything, the lower index on
// ties (package topk's order).
__device__ __forceinline__ bool before(float va, int ia, float vb, int ib) {
  bool na = va != va, nb = vb != vb;
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// softmax_topk: one block of TKB threads per row of `classes` logits;
// out[row*k + r] is the r-th best class of the row. With softmax set the
// values ranked and returned are the probabilities, else the logits.
extern "C" __global__ void softmax_topk(const float* logits, int classes, int k, int softmax, Pair* out) {
  __shared__ float sv[TKB];
  __shared__ int si[TKB];
  __shared__ double sd[TKB];
  int t = TID_X;
  const float* row = logits + (long long)CTAID_X * classes;
  // mode 0: exp(v - m)/sum; 1: the row has no distribution (NaN); 2: +Inf
  // logits share it (n of them); 3: the logits themselves.
  int mode = 3;
  double m = 0, sum = 1;
  int ninf = 0;
  if (softmax) {
    float mx = -F_INF;
    int nan = 0;
    for (int j = t; j < classes; j += TKB) {
      float v = row[j];
      if (v != v) nan = 1;
      else if (v > mx) mx = v;
    }
    sv[t] = mx;
    si[t] = nan;
    SYNC();
    for (int s = TKB / 2; s > 0; s >>= 1) {
      if (t < s) {
        if (sv[t + s] > sv[t]) sv[t] = sv[t + s];
        si[t] |= si[t + s];
      }
      SYNC();
    }
    mx = sv[0];
    nan = si[0];
    SYNC();
    m = mx;
    if (nan || mx == -F_INF) {
      mode = 1;
    } else if (mx == F_INF) {
      int c = 0;
      for (int j = t; j < classes; j += TKB) c += row[j] == F_INF;
      si[t] = c;
      SYNC();
      for (int s = TKB / 2; s > 0; s >>= 1) {
        if (t < s) si[t] += si[t + s];
        SYNC();
      }
      ninf = si[0];
      SYNC();
      mode = 2;
    } else {
      double acc = 0;
      for (int j = t; j < classes; j += TKB) acc += dexp((double)row[j] - m);
      sd[t] = acc;
      SYNC();
      for (int s = TKB / 2; s > 0; s >>= 1) {
        if (t < s) sd[t] += sd[t + s];
        SYNC();
      }
      sum = sd[0];
      SYNC();
      mode = 0;
    }
  }
  float pv = 0;
  int pi = -1; // no class taken yet
  Pair* o = out + (long long)CTAID_X * k;
  for (int r = 0; r < k; r++) {
    float bv = 0;
    int bi = -1;
    for (int j = t; j < classes; j += TKB) {
      float v = row[j];
      switch (mode) {
        case 0: v = (float)(dexp((double)v - m) / sum); break;
        case 1: v = F_NAN; break;
        case 2: v = v == F_INF ? (float)(1.0 / ninf) : 0.f; break;
      }
      if (pi >= 0 && !before(pv, pi, v, j)) continue; // taken already
      if (bi < 0 || before(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    sv[t] = bv;
    si[t] = bi;
    SYNC();
    for (int s = TKB / 2; s > 0; s >>= 1) {
      if (t < s && si[t + s] >= 0 && (si[t] < 0 || before(sv[t + s], si[t + s], sv[t], si[t]))) {
        sv[t] = sv[t + s];
        si[t] = si[t + s];
      }
      SYNC();
    }
    pv = sv[0];
    pi = si[0];
    if (t == 0) {
      o[r].index = pi;
      o[r].value = pv;
    }
    SYNC();
  }
}

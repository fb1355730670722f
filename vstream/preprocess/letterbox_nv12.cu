// The resampler's letterbox of NV12 frames (vstream/preprocess/resample.py) as one CUDA kernel
// a batch, for vstream/preprocess/kernel.py, which compiles it with NVRTC when a pipeline starts.
//
// Every output pixel reads its 2 x 2 source neighbours, converts each to RGB with FFmpeg's
// fixed-point arithmetic, and blends them with OpenCV's fixed-point weights, exactly as the
// torch resampler's tensor operations do, step for step, in 32-bit integers: the same
// pixels, into float32 or float16 inputs, in one launch instead of about a hundred
// dispatches. The tests compile this file as C++ too (VSTREAM_HOST) and compare its pixels
// with the torch resampler's on the CPU.

#ifdef VSTREAM_HOST
#define VSTREAM_DEVICE inline
#else
#define VSTREAM_DEVICE __device__ __forceinline__
#endif

// The frames one launch takes: kernel.py's MAX_FRAMES, passed in its compiler options.
#ifndef VSTREAM_MAX_FRAMES
#error "compile with -DVSTREAM_MAX_FRAMES=N (MAX_FRAMES of vstream/preprocess/kernel.py)"
#endif

// A model input of float32, or of float16 (rounded to nearest, ties to even, from the float32
// value, as torch rounds the float it computes a float16 tensor's division in).
#ifdef VSTREAM_HOST
typedef _Float16 half_t;
VSTREAM_DEVICE void store(half_t* into, float value) { *into = (half_t)value; }
#else
typedef unsigned short half_t;  // the bits of a float16
VSTREAM_DEVICE void store(half_t* into, float value) {
    unsigned short bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
    *into = bits;
}
#endif
VSTREAM_DEVICE void store(float* into, float value) { *into = value; }

// The frames of one launch, by value in the kernel's parameters (nothing to copy to the GPU
// first): where each frame's luma begins and its strides, in samples.
struct Frames {
    long long address[VSTREAM_MAX_FRAMES];
    long long row_stride[VSTREAM_MAX_FRAMES];
    long long column_stride[VSTREAM_MAX_FRAMES];
};

// FFmpeg's YUV -> RGB conversion in 3.13 fixed point (resample.FixedPoint).
struct Conversion {
    int y_offset;
    int y_gain;
    int v_to_r;
    int u_to_b;
    int u_to_g;
    int v_to_g;
};

// Where the output goes: the model input's window of each frame, strides in its elements.
struct Output {
    long long address;
    long long frame_stride;
    long long channel_stride;
    long long row_stride;
    long long column_stride;
};

VSTREAM_DEVICE int clip_level(int value) { return value < 0 ? 0 : (value > 255 ? 255 : value); }

// FFmpeg's RGB of one source pixel: its luma, and the chroma of the 2 x 2 block it lies in.
VSTREAM_DEVICE void rgb_at(const unsigned char* frame, long long rows, long long columns,
                           int source_height, int row, int column, const Conversion& k,
                           int rgb[3]) {
    const int luma = frame[row * rows + column * columns];
    const long long chroma_row = (long long)(source_height + row / 2) * rows;
    const int chroma_column = (column / 2) * 2;
    const int u = frame[chroma_row + chroma_column * columns] - 128;
    const int v = frame[chroma_row + (chroma_column + 1) * columns] - 128;
    int y = luma - k.y_offset;
    y = ((y < 0 ? 0 : y) * k.y_gain) >> 13;
    rgb[0] = clip_level(y + ((v * k.v_to_r) >> 13));
    rgb[1] = clip_level(((v * k.v_to_g) >> 13) + ((u * k.u_to_g) >> 13) + y);
    rgb[2] = clip_level(y + ((u * k.u_to_b) >> 13));
}

// Output pixel `index` (frame, row, column in that order, columns fastest): its three channels,
// as `Element`s. Taps are (4, n) int32: the first neighbour, the second, then their weights
// out of 2048.
template <typename Element>
VSTREAM_DEVICE void letterbox_pixel(const Frames& frames, int source_height,
                                    const int* row_taps, int height, const int* column_taps,
                                    int width, const Conversion& k, const Output& out,
                                    long long index) {
    const int x = (int)(index % width);
    const int y = (int)((index / width) % height);
    const int f = (int)(index / ((long long)width * height));
    const unsigned char* frame = (const unsigned char*)frames.address[f];
    const long long rows = frames.row_stride[f];
    const long long columns = frames.column_stride[f];
    const int row[2] = {row_taps[y], row_taps[height + y]};
    const int row_weight[2] = {row_taps[2 * height + y], row_taps[3 * height + y]};
    const int column[2] = {column_taps[x], column_taps[width + x]};
    const int column_weight[2] = {column_taps[2 * width + x], column_taps[3 * width + x]};
    int across[2][3];
    for (int r = 0; r < 2; ++r) {
        int first[3], second[3];
        rgb_at(frame, rows, columns, source_height, row[r], column[0], k, first);
        rgb_at(frame, rows, columns, source_height, row[r], column[1], k, second);
        for (int c = 0; c < 3; ++c) {
            across[r][c] = (first[c] * column_weight[0] + second[c] * column_weight[1]) >> 4;
        }
    }
    Element* pixel = (Element*)out.address + f * out.frame_stride + y * out.row_stride +
                     x * out.column_stride;
    for (int c = 0; c < 3; ++c) {
        const int down = ((across[0][c] * row_weight[0]) >> 16) +
                         ((across[1][c] * row_weight[1]) >> 16);
        store(pixel + c * out.channel_stride, (float)((down + 2) >> 2) / 255.0f);
    }
}

#ifndef VSTREAM_HOST
template <typename Element>
__device__ void letterbox_nv12_into(const Frames& frames, int frame_count, int source_height,
                                    const int* row_taps, int height, const int* column_taps,
                                    int width, const Conversion& k, const Output& out) {
    const long long pixels = (long long)frame_count * height * width;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pixels; i += step) {
        letterbox_pixel<Element>(frames, source_height, row_taps, height, column_taps, width, k,
                                 out, i);
    }
}

extern "C" __global__ void letterbox_nv12(Frames frames, int frame_count, int source_height,
                                          const int* row_taps, int height,
                                          const int* column_taps, int width, Conversion k,
                                          Output out) {
    letterbox_nv12_into<float>(frames, frame_count, source_height, row_taps, height, column_taps,
                               width, k, out);
}

extern "C" __global__ void letterbox_nv12_half(Frames frames, int frame_count,
                                               int source_height, const int* row_taps,
                                               int height, const int* column_taps, int width,
                                               Conversion k, Output out) {
    letterbox_nv12_into<half_t>(frames, frame_count, source_height, row_taps, height,
                                column_taps, width, k, out);
}
#endif

// Which summation order does cuBLAS use for microgpt.cu's sgemv/sger shapes?
// For each shape (rows x cols, as microgpt.cu calls them) and random inputs, compares cuBLAS's
// bits with candidate orders computed here: the reduction split S ways, lane l summing with fma
// either k = l, l+S, ... (strided) or its own contiguous chunk of K/S (chunked), then the S partial
// sums combined by a shfl_down-style tree or sequentially. Prints, per op and shape, how many
// outputs each candidate reproduces exactly. Build: nvcc -O3 -arch=sm_90 tools/experiments/cublas_order_probe.cu -lcublas
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define MAXK 64
#define NCAND 24

// out[c * n + i]: candidate c for output i; reduction of a[i, k] * b[k] over k < K.
// a is addressed as a[i * sa + k * sk].
__global__ void candidates(const float *a, const float *b, float *out, int n, int K, int sa, int sk, const float *init) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float base = init ? init[i] : 0.0f;
    int splits[6] = {1, 2, 4, 8, 16, 32};
    for (int c = 0; c < 12; ++c) {
        int s = c % 6, chunked = c / 6;
        int S = splits[s];
        float part[32];
        for (int l = 0; l < S; ++l) {
            float acc = 0.0f;
            if (chunked) {
                int len = (K + S - 1) / S;
                for (int k = l * len; k < (l + 1) * len && k < K; ++k) acc = fmaf(a[i * sa + k * sk], b[k], acc);
            } else {
                for (int k = l; k < K; k += S) acc = fmaf(a[i * sa + k * sk], b[k], acc);
            }
            part[l] = acc;
        }
        // tree (shfl_down style): part[l] += part[l + width]
        float tree[32];
        for (int l = 0; l < S; ++l) tree[l] = part[l];
        for (int w = S / 2; w > 0; w /= 2)
            for (int l = 0; l < w; ++l) tree[l] = __fadd_rn(tree[l], tree[l + w]);
        float seq = part[0];
        for (int l = 1; l < S; ++l) seq = __fadd_rn(seq, part[l]);
        out[(2 * c) * n + i] = init ? __fadd_rn(tree[0], base) : tree[0];
        out[(2 * c + 1) * n + i] = init ? __fadd_rn(seq, base) : seq;
    }
}

__global__ void ger_candidates(const float *x, const float *y, const float *a0, float *out, int rows, int cols) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) return;
    int r = idx / cols, c = idx % cols;
    out[idx] = fmaf(x[c], y[r], a0[idx]);
    out[rows * cols + idx] = __fadd_rn(a0[idx], __fmul_rn(x[c], y[r]));
}

static float frand(void) { return (float)rand() / RAND_MAX * 2.0f - 1.0f; }

int main(void) {
    cublasHandle_t h;
    cublasCreate(&h);
    int shapes[4][2] = {{16, 16}, {64, 16}, {16, 64}, {27, 16}};
    const float one = 1.0f, zero = 0.0f;
    srand(7);
    for (int s = 0; s < 4; ++s) {
        int rows = shapes[s][0], cols = shapes[s][1];
        int trials = 200;
        long match_t[NCAND] = {0}, match_n[NCAND] = {0}, match_g[2] = {0}, total_t = 0, total_n = 0, total_g = 0;
        float *w, *x, *g, *y, *gx0, *gx, *cand, *a0, *a;
        cudaMallocManaged(&w, rows * cols * 4); cudaMallocManaged(&x, cols * 4); cudaMallocManaged(&g, rows * 4);
        cudaMallocManaged(&y, rows * 4); cudaMallocManaged(&gx0, cols * 4); cudaMallocManaged(&gx, cols * 4);
        cudaMallocManaged(&cand, 4096 * 4); cudaMallocManaged(&a0, rows * cols * 4); cudaMallocManaged(&a, rows * cols * 4);
        for (int t = 0; t < trials; ++t) {
            for (int i = 0; i < rows * cols; ++i) { w[i] = frand(); a0[i] = frand() * 0.01f; a[i] = a0[i]; }
            for (int i = 0; i < cols; ++i) { x[i] = frand(); gx0[i] = frand(); gx[i] = gx0[i]; }
            for (int i = 0; i < rows; ++i) g[i] = frand();
            // launch_matvec: y[r] = sum_c w[r*cols+c] x[c]
            cublasSgemv(h, CUBLAS_OP_T, cols, rows, &one, w, cols, x, 1, &zero, y, 1);
            candidates<<<1, 128>>>(w, x, cand, rows, cols, cols, 1, NULL);
            cudaDeviceSynchronize();
            for (int c = 0; c < NCAND; ++c) for (int i = 0; i < rows; ++i) match_t[c] += cand[c * rows + i] == y[i];
            total_t += rows;
            // launch_linear_backward's sgemv N (beta 1): gx[c] += sum_r w[r*cols+c] g[r]
            cublasSgemv(h, CUBLAS_OP_N, cols, rows, &one, w, cols, g, 1, &one, gx, 1);
            candidates<<<1, 128>>>(w, g, cand, cols, rows, 1, cols, gx0);
            cudaDeviceSynchronize();
            for (int c = 0; c < NCAND; ++c) for (int i = 0; i < cols; ++i) match_n[c] += cand[c * cols + i] == gx[i];
            total_n += cols;
            // sger: a[r*cols+c] += x[c] g[r]
            cublasSger(h, cols, rows, &one, x, 1, g, 1, a, cols);
            ger_candidates<<<(rows * cols + 127) / 128, 128>>>(x, g, a0, cand, rows, cols);
            cudaDeviceSynchronize();
            for (int c = 0; c < 2; ++c) for (int i = 0; i < rows * cols; ++i) match_g[c] += cand[c * rows * cols + i] == a[i];
            total_g += rows * cols;
        }
        printf("shape rows=%d cols=%d\n  sgemv_T (matvec) exact matches of %ld:", rows, cols, total_t);
        for (int c = 0; c < NCAND; ++c) printf(" %s%d%s=%ld", c >= 12 ? "chunk" : "stride", 1 << ((c / 2) % 6), c % 2 ? "seq" : "tree", match_t[c]);
        printf("\n  sgemv_N (backward) exact matches of %ld:", total_n);
        for (int c = 0; c < NCAND; ++c) printf(" %s%d%s=%ld", c >= 12 ? "chunk" : "stride", 1 << ((c / 2) % 6), c % 2 ? "seq" : "tree", match_n[c]);
        printf("\n  sger exact matches of %ld: fma=%ld mul_then_add=%ld\n", total_g, match_g[0], match_g[1]);
    }
    cublasDestroy(h);
    return 0;
}

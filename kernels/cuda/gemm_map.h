/* gemm_map.h — how a row-major gemm of the kernels table (kernels/kernels.h) maps onto
 * column-major cuBLAS, in one place so the CPU unit tests can check the mapping against OpenBLAS
 * (tests/unit/test_gpu_cpu.c) even where no GPU exists.
 *
 * Row-major C[m x n] = op(A)[m x k] . op(B)[k x n]. A row-major matrix read column-major is its
 * transpose, so cuBLAS computes C^T[n x m] = op(B)^T . op(A)^T: B is cuBLAS's first operand, A its
 * second, m and n swap, and the transpose flags and leading dimensions carry over unchanged.
 * For the bf16/fp16 path each operand is first packed as stored (rows x cols, leading dimension =
 * cols): stored A is (ta ? k x m : m x k), stored B is (tb ? n x k : k x n).
 * Header-only, C and C++, nothing owned. */
#ifndef RM_KERNELS_CUDA_GEMM_MAP_H
#define RM_KERNELS_CUDA_GEMM_MAP_H
#include <stdbool.h>

typedef struct rm_gemm_cm {
    bool trans_first, trans_second; /* op of cuBLAS's A and B */
    int m, n, k;                    /* cuBLAS's m, n, k */
    int first_is_b;                 /* 1: cuBLAS's first operand is the table's B */
    int ld_first, ld_second;
} rm_gemm_cm;

static inline rm_gemm_cm rm_gemm_colmajor(bool ta, bool tb, int m, int n, int k, int lda, int ldb)
{
    rm_gemm_cm g;
    g.trans_first = tb;
    g.trans_second = ta;
    g.m = n;
    g.n = m;
    g.k = k;
    g.first_is_b = 1;
    g.ld_first = ldb;
    g.ld_second = lda;
    return g;
}

/* Stored (row-major) shape of an operand whose op() is rows_op x cols_op. */
static inline void rm_gemm_stored(bool trans, int rows_op, int cols_op, int *rows, int *cols)
{
    *rows = trans ? cols_op : rows_op;
    *cols = trans ? rows_op : cols_op;
}
#endif

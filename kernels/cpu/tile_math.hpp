// Dense tile products for the CPU backends, written as row axpys (the innermost loop runs along a
// contiguous row of the output) so the compiler vectorises them without reassociating any sum:
// every output element accumulates its terms in increasing order of the inner index, as a scalar
// loop would. Four output rows share each load of the right-hand row.
#pragma once

#include <cstddef>

namespace fc::kernels::cpu {

// C (m x n, row stride ldc) += A (m x k, lda) B (k x n, ldb)
template <class T>
inline void gemm_nn(int m, int n, int k, const T* __restrict A, int lda, const T* __restrict B, int ldb, T* __restrict C, int ldc) {
  int i = 0;
  for (; i + 4 <= m; i += 4) {
    T* __restrict c0 = C + static_cast<std::ptrdiff_t>(i) * ldc;
    T* __restrict c1 = c0 + ldc;
    T* __restrict c2 = c1 + ldc;
    T* __restrict c3 = c2 + ldc;
    const T* a = A + static_cast<std::ptrdiff_t>(i) * lda;
    for (int p = 0; p < k; ++p) {
      const T a0 = a[p], a1 = a[lda + p], a2 = a[2 * lda + p], a3 = a[3 * lda + p];
      const T* __restrict b = B + static_cast<std::ptrdiff_t>(p) * ldb;
      for (int j = 0; j < n; ++j) {
        const T bj = b[j];
        c0[j] += a0 * bj;
        c1[j] += a1 * bj;
        c2[j] += a2 * bj;
        c3[j] += a3 * bj;
      }
    }
  }
  for (; i < m; ++i) {
    T* __restrict c = C + static_cast<std::ptrdiff_t>(i) * ldc;
    const T* a = A + static_cast<std::ptrdiff_t>(i) * lda;
    for (int p = 0; p < k; ++p) {
      const T ap = a[p];
      const T* __restrict b = B + static_cast<std::ptrdiff_t>(p) * ldb;
      for (int j = 0; j < n; ++j) c[j] += ap * b[j];
    }
  }
}

// C (m x n, ldc) += A^T B for A (k x m, lda) and B (k x n, ldb)
template <class T>
inline void gemm_tn(int m, int n, int k, const T* __restrict A, int lda, const T* __restrict B, int ldb, T* __restrict C, int ldc) {
  for (int p = 0; p < k; ++p) {
    const T* a = A + static_cast<std::ptrdiff_t>(p) * lda;
    const T* __restrict b = B + static_cast<std::ptrdiff_t>(p) * ldb;
    int i = 0;
    for (; i + 4 <= m; i += 4) {
      const T a0 = a[i], a1 = a[i + 1], a2 = a[i + 2], a3 = a[i + 3];
      T* __restrict c0 = C + static_cast<std::ptrdiff_t>(i) * ldc;
      T* __restrict c1 = c0 + ldc;
      T* __restrict c2 = c1 + ldc;
      T* __restrict c3 = c2 + ldc;
      for (int j = 0; j < n; ++j) {
        const T bj = b[j];
        c0[j] += a0 * bj;
        c1[j] += a1 * bj;
        c2[j] += a2 * bj;
        c3[j] += a3 * bj;
      }
    }
    for (; i < m; ++i) {
      const T ai = a[i];
      T* __restrict c = C + static_cast<std::ptrdiff_t>(i) * ldc;
      for (int j = 0; j < n; ++j) c[j] += ai * b[j];
    }
  }
}

// dst (cols x rows, ld = rows) = src (rows x cols, ld = cols)^T
template <class T>
inline void transpose(int rows, int cols, const T* src, T* dst) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[static_cast<std::ptrdiff_t>(c) * rows + r] = src[static_cast<std::ptrdiff_t>(r) * cols + c];
}

}  // namespace fc::kernels::cpu

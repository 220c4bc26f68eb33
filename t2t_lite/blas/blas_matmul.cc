// T2tLiteBlasMatMul: a float32 matrix product through OpenBLAS's sgemm, for the products that
// TensorFlow's own CPU matmul (Eigen and oneDNN) runs at half the hardware's rate: the weight
// gradients x^T dy of training, whose inner dimension is the batch's token count.
//
// The product is split into one block of rows (or of columns, when there are more of them)
// per thread of TensorFlow's intra-op pool, and each block is one single-threaded sgemm call,
// so the op uses the threads TensorFlow was given and no pool of its own. Every element of the
// result is one sgemm dot product over the whole inner dimension, whatever the split.
#include <algorithm>
#include <climits>
#include <mutex>
#include <optional>

#include "cblas.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_lite {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Products smaller than this many floating-point operations run in the calling thread.
constexpr double kMinFlopsToSplit = 4e6;
// Blocks start at multiples of this many rows or columns (whole register tiles).
constexpr int64_t kBlockAlignment = 16;

class BlasMatMulOp : public OpKernel {
 public:
  explicit BlasMatMulOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("transpose_a", &transpose_a_));
    OP_REQUIRES_OK(context, context->GetAttr("transpose_b", &transpose_b_));
    // OpenBLAS then runs each call in the calling thread: the threads are TensorFlow's. This
    // OpenBLAS is scipy-openblas32's own library, so numpy's and scipy's keep their settings.
    // (Its header declares a per-thread setter that the library does not export.)
    static std::once_flag single_threaded;
    std::call_once(single_threaded, [] { scipy_openblas_set_num_threads(1); });
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& a = context->input(0);
    const Tensor& b = context->input(1);
    OP_REQUIRES(context, a.dims() == 2 && b.dims() == 2,
                tensorflow::errors::InvalidArgument(
                    "T2tLiteBlasMatMul multiplies matrices; got ranks ", a.dims(), " and ",
                    b.dims()));
    const int64_t m = a.dim_size(transpose_a_ ? 1 : 0);
    const int64_t k = a.dim_size(transpose_a_ ? 0 : 1);
    const int64_t k_of_b = b.dim_size(transpose_b_ ? 1 : 0);
    const int64_t n = b.dim_size(transpose_b_ ? 0 : 1);
    OP_REQUIRES(context, k == k_of_b,
                tensorflow::errors::InvalidArgument(
                    "T2tLiteBlasMatMul: the inner sizes differ, ", k, " and ", k_of_b));
    for (const int64_t size : {m, n, k, a.dim_size(1), b.dim_size(1)}) {
      OP_REQUIRES(context, size <= INT_MAX,
                  tensorflow::errors::InvalidArgument(
                      "T2tLiteBlasMatMul: a dimension of ", size, " exceeds OpenBLAS's 32-bit "
                      "sizes"));
    }
    Tensor* product = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({m, n}), &product));
    if (m == 0 || n == 0) return;
    float* c = product->flat<float>().data();
    if (k == 0) {
      std::fill(c, c + m * n, 0.0f);
      return;
    }
    const Operands operands{a.flat<float>().data(), b.flat<float>().data(),
                            static_cast<int>(a.dim_size(1)), static_cast<int>(b.dim_size(1)),
                            c, m, n, k};
    auto* workers = context->device()->tensorflow_cpu_worker_threads();
    const int threads = workers->num_threads;
    if (threads <= 1 || 2.0 * m * n * k < kMinFlopsToSplit) {
      Multiply(operands, /*split_rows=*/true, 0, m);
      return;
    }
    const bool split_rows = m >= n;
    const int64_t size = split_rows ? m : n;
    int64_t block = (size + threads - 1) / threads;
    block = (block + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
    const int64_t blocks = (size + block - 1) / block;
    workers->workers->ParallelFor(
        blocks,
        tensorflow::thread::ThreadPool::SchedulingParams(
            tensorflow::thread::ThreadPool::SchedulingStrategy::kFixedBlockSize, std::nullopt,
            /*block_size=*/1),
        [&](int64_t first, int64_t last) {
          for (int64_t index = first; index < last; ++index) {
            const int64_t start = index * block;
            Multiply(operands, split_rows, start, std::min(block, size - start));
          }
        });
  }

 private:
  struct Operands {
    const float* a;
    const float* b;
    int lda, ldb;
    float* c;
    int64_t m, n, k;
  };

  // The rows [start, start + count) of the product (split_rows), or its columns.
  void Multiply(const Operands& x, bool split_rows, int64_t start, int64_t count) const {
    if (count <= 0) return;
    const CBLAS_TRANSPOSE transpose_a = transpose_a_ ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE transpose_b = transpose_b_ ? CblasTrans : CblasNoTrans;
    if (split_rows) {
      const float* a = transpose_a_ ? x.a + start : x.a + start * x.lda;
      scipy_cblas_sgemm(CblasRowMajor, transpose_a, transpose_b, count, x.n, x.k, 1.0f, a,
                        x.lda, x.b, x.ldb, 0.0f, x.c + start * x.n, x.n);
    } else {
      const float* b = transpose_b_ ? x.b + start * x.ldb : x.b + start;
      scipy_cblas_sgemm(CblasRowMajor, transpose_a, transpose_b, x.m, count, x.k, 1.0f, x.a,
                        x.lda, b, x.ldb, 0.0f, x.c + start, x.n);
    }
  }

  bool transpose_a_;
  bool transpose_b_;
};

}  // namespace

REGISTER_OP("T2tLiteBlasMatMul")
    .Input("a: float")
    .Input("b: float")
    .Output("product: float")
    .Attr("transpose_a: bool = false")
    .Attr("transpose_b: bool = false")
    .SetShapeFn(::tensorflow::shape_inference::MatMulShape)
    .Doc("a @ b (each optionally transposed) through OpenBLAS sgemm; float32, CPU.");

REGISTER_KERNEL_BUILDER(Name("T2tLiteBlasMatMul").Device(::tensorflow::DEVICE_CPU),
                        BlasMatMulOp);

}  // namespace t2t_lite

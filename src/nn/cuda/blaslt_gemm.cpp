// cuBLASLt GEMM (see blaslt_gemm.hpp). Row-major C = op(A) op(B) is, read column-major,
// C^T = op(B)^T op(A)^T: cuBLASLt gets B as its first operand and A as its second, with the
// same transpose flags and leading dimensions, and no data moves.
#include "nn/cuda/blaslt_gemm.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include "check/cublas_check.hpp"
#include "check/cuda_check.hpp"
#include "kernels/activation_kernels.hpp"
#include "ringtrain/core/log.hpp"

namespace ringtrain::cuda {

struct BlasLt::Plan {
  Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  // cuBLASLt's operands: first = our B, second = our A; C is also the output D.
  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> first, second, c;
  Epilogue fused = Epilogue::none;  // cuBLASLt's epilogue; gemm() runs a kernel for the key's when it differs
  cublasLtMatmulAlgo_t algo{};      // the heuristic's first choice, filled in by plan_for()
  bool on_cublas = false;           // no cuBLASLt algorithm: the plain GEMM runs on cuBLAS
};

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: break;
  }
  throw Error(fmt::format("gemm: unsupported element type {} on CUDA (f32, bf16 or f16)", dtype_name(t)));
}

// The largest power of two dividing the address, up to 256 (what cuBLASLt assumes by default).
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  return static_cast<std::uint32_t>(std::min<std::uintptr_t>(256, address & (~address + 1)));
}

// Read column-major (file header), cuBLASLt's D is C^T with n rows and m columns, its first
// operand is our B and its second our A. Our bias over C's columns (j < n) is then a vector
// over D's rows broadcast along its columns: EPILOGUE_BIAS ("length = rows of D"). Our
// bias_grad, one sum over k per row of op(A) (i < m), is one value per column of D reduced
// from the second operand (op(A)^T is cuBLASLt's op(B)): EPILOGUE_BGRADB ("length = columns
// of D, reduced over k"). BGRADA would sum op(B) instead, one value per j < n. For
// CudaLinear's dW[out, in] = dy^T x (A = dy, trans_a) BGRADB sums dy over the batch. The ReLU
// bit-mask is a matrix of D's shape with a leading dimension in bits: bit j + i * ld for D's
// row j and column i, our C[i][j] (ReluMask).
cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::relu: return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::bias_relu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::bias_grad: return CUBLASLT_EPILOGUE_BGRADB;
    case Epilogue::relu_mask: return CUBLASLT_EPILOGUE_RELU_AUX;
    case Epilogue::bias_relu_mask: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case Epilogue::relu_grad: return CUBLASLT_EPILOGUE_DRELU;
    case Epilogue::gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::bias_gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::gelu_grad: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::none: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::bias: return " + bias";
    case Epilogue::relu: return " + relu";
    case Epilogue::bias_relu: return " + bias + relu";
    case Epilogue::bias_grad: return " + bias gradient";
    case Epilogue::relu_mask: return " + relu (bit-mask)";
    case Epilogue::bias_relu_mask: return " + bias + relu (bit-mask)";
    case Epilogue::relu_grad: return " + relu gradient";
    case Epilogue::gelu_aux: return " + gelu (its input kept)";
    case Epilogue::bias_gelu_aux: return " + bias + gelu (its input kept)";
    case Epilogue::gelu_grad: return " + gelu gradient";
    case Epilogue::none: break;
  }
  return "";
}

bool has_vector(Epilogue e) {
  return e == Epilogue::bias || e == Epilogue::bias_relu || e == Epilogue::bias_grad || e == Epilogue::bias_relu_mask ||
         e == Epilogue::bias_gelu_aux;
}

bool has_mask(Epilogue e) {
  return e == Epilogue::relu_mask || e == Epilogue::bias_relu_mask || e == Epilogue::relu_grad;
}

bool has_gelu(Epilogue e) {
  return e == Epilogue::gelu_aux || e == Epilogue::bias_gelu_aux || e == Epilogue::gelu_grad;
}

// The epilogues that write C from the product (C packed): every one but the bias gradient.
bool writes_c(Epilogue e) { return e != Epilogue::none && e != Epilogue::bias_grad; }

// The activation the unfused path's bias kernel applies after the plain GEMM (a GELU runs after it).
kernels::Activation forward_activation(Epilogue e) {
  return e == Epilogue::relu || e == Epilogue::bias_relu || e == Epilogue::relu_mask || e == Epilogue::bias_relu_mask
             ? kernels::Activation::relu
             : kernels::Activation::none;
}

// The epilogue's vector, set on the descriptor before each call: plans are shared by every
// vector of the same alignment. The heuristic also reads it (for that alignment).
void set_vector(cublasLtMatmulDesc_t desc, void* vector) {
  void* pointer = vector;
  RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                 static_cast<const void*>(&pointer), sizeof(pointer)));
}

// Whether cuBLASLt's epilogue is asked for at all. cuBLASLt kernels have been reported to assume
// a 16-byte aligned vector whatever the heuristic was told: a less aligned one takes the plain
// GEMM and the kernel, which give the same values. A relu_grad without bits has no mask to read;
// a GELU's input must be 16-byte aligned with a leading dimension of whole 16-byte rows.
bool fusable(Epilogue epilogue, std::uint32_t align_vector, std::uint32_t align_mask, std::uint32_t align_gelu,
             std::int64_t gelu_ld) {
  if (epilogue == Epilogue::none) return false;
  if (has_vector(epilogue) && align_vector < 16) return false;
  if (has_gelu(epilogue)) return align_gelu >= 16 && gelu_ld % 8 == 0;
  return !has_mask(epilogue) || align_mask >= 16;
}

// The epilogue's auxiliary matrix: the ReLU's bit-mask or the GELU's input.
void set_aux_pointer(cublasLtMatmulDesc_t desc, void* aux) {
  RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                 static_cast<const void*>(&aux), sizeof(aux)));
}

cublasComputeType_t compute_type(DType ab_type, MathMode math) {
  return ab_type == DType::f32 && math == MathMode::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasLtHandle_t create_blaslt() {
  cublasLtHandle_t handle = nullptr;
  RT_CUBLAS_CHECK(cublasLtCreate(&handle));
  return handle;
}

// batch > 1: `batch` matrices, each `stride` elements after the one before.
Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> make_layout(DType type, std::int64_t rows, std::int64_t cols,
                                                                       std::int64_t ld, std::int64_t batch,
                                                                       std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  RT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, cuda_type(type), static_cast<std::uint64_t>(rows),
                                             static_cast<std::uint64_t>(cols), ld));
  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> owned(layout);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    RT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    RT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return owned;
}

}  // namespace

bool costly_unaligned_rows(const GemmShape& s, DType ab_type, DType c_type) {
  constexpr double kCostlyFlops = 1e9;
  const auto ab = static_cast<std::int64_t>(dtype_size(ab_type)), c = static_cast<std::int64_t>(dtype_size(c_type));
  const bool unaligned = s.lda * ab % 16 != 0 || s.ldb * ab % 16 != 0 || s.ldc * c % 16 != 0;
  return unaligned && 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) *
                              static_cast<double>(s.batch) >=
                          kCostlyFlops;
}

std::string BlasLt::describe(const Key& key) {
  const GemmShape& s = key.shape;
  return fmt::format(
      "gemm m={} n={} k={} trans_a={} trans_b={} lda={} ldb={} ldc={} batch={} {} x {} -> {}{}{} (alignment "
      "A/B/C/vector/mask/gelu {}/{}/{}/{}/{}/{} bytes{})",
      s.m, s.n, s.k, s.trans_a, s.trans_b, s.lda, s.ldb, s.ldc, s.batch, dtype_name(key.ab_type),
      dtype_name(key.ab_type), dtype_name(key.c_type), key.math == MathMode::tf32 ? " tf32" : "",
      epilogue_name(key.epilogue), key.align_a, key.align_b, key.align_c, key.align_vector, key.align_mask,
      key.align_gelu,
      key.mask_ld > 0   ? fmt::format("; mask ld {} bits", key.mask_ld)
      : key.gelu_ld > 0 ? fmt::format("; gelu input ld {}", key.gelu_ld)
                        : "");
}

BlasLt::BlasLt(std::size_t workspace_bytes, bool always_cublas)
    : handle_(create_blaslt()), workspace_(workspace_bytes), always_cublas_(always_cublas) {}

BlasLt::~BlasLt() = default;

BlasLt::Key BlasLt::make_key(const GemmShape& s, const void* a, const void* b, const void* c, DType ab_type,
                             DType c_type, MathMode math, Epilogue epilogue, const void* vector, const ReluMask* mask,
                             const GeluAux* gelu) const {
  // Only f32 inputs have a choice of math: one plan serves both modes otherwise.
  const MathMode effective = ab_type == DType::f32 ? math : MathMode::strict_f32;
  const std::uint32_t align_vector = has_vector(epilogue) ? alignment(vector) : 0;
  const bool masked = has_mask(epilogue) && mask != nullptr;
  const bool gelu_aux = has_gelu(epilogue) && gelu != nullptr;
  return Key{s,
             ab_type,
             c_type,
             effective,
             epilogue,
             alignment(a),
             alignment(b),
             alignment(c),
             align_vector,
             masked ? alignment(mask->bits) : 0,
             masked ? mask->ld : 0,
             gelu_aux ? alignment(gelu->pre) : 0,
             gelu_aux ? gelu->ld : 0};
}

std::unique_ptr<BlasLt::Plan> BlasLt::make_plan(const Key& key) const {
  const GemmShape& s = key.shape;
  // Checked once per key, when its plan is made (a null pointer has alignment 0; make_layout
  // rejects element types cuBLASLt does not take here).
  RT_REQUIRE(key.c_type == DType::f32 || key.c_type == key.ab_type, Error, "{}: C must be f32 or of A's type",
             describe(key));
  RT_REQUIRE(s.m > 0 && s.n > 0 && s.k > 0, Error, "{}: m, n and k must be > 0", describe(key));
  RT_REQUIRE(s.batch >= 1 && s.batch <= std::int64_t{1} << 30 && (s.batch == 1 || key.epilogue == Epilogue::none),
             Error, "{}: a batch of {} (1 to 2^30, no epilogue when > 1)", describe(key), s.batch);
  RT_REQUIRE(s.lda >= (s.trans_a ? s.m : s.k) && s.ldb >= (s.trans_b ? s.k : s.n) && s.ldc >= s.n, Error,
             "{}: a leading dimension is shorter than its row", describe(key));
  RT_REQUIRE(key.align_a > 0 && key.align_b > 0 && key.align_c > 0, Error, "{}: null pointer", describe(key));
  // The unfused path's kernels (gemm) read C and A packed; the fused form is held to the same.
  RT_REQUIRE(!has_vector(key.epilogue) || key.align_vector > 0, Error, "{}: null epilogue vector", describe(key));
  RT_REQUIRE(!writes_c(key.epilogue) || s.ldc == s.n, Error, "{}: the epilogue needs ldc == n", describe(key));
  RT_REQUIRE(!has_mask(key.epilogue) || (key.mask_ld >= s.n && key.mask_ld % 128 == 0), Error,
             "{}: the ReLU bit-mask needs a leading dimension of whole 128-bit words >= n (got {})", describe(key),
             key.mask_ld);
  RT_REQUIRE(key.epilogue == Epilogue::relu_grad || !has_mask(key.epilogue) || key.align_mask > 0, Error,
             "{}: no bit-mask to write", describe(key));
  RT_REQUIRE(!has_gelu(key.epilogue) || (key.align_gelu > 0 && key.gelu_ld == s.n), Error,
             "{}: the GELU's input needs a buffer of C's shape, packed (ld == n)", describe(key));
  RT_REQUIRE(key.epilogue != Epilogue::bias_grad || key.c_type == DType::f32, Error,
             "{}: the bias-gradient epilogue needs an f32 C (its vector is C's type)", describe(key));
  RT_REQUIRE(key.epilogue != Epilogue::bias_grad || s.lda == (s.trans_a ? s.m : s.k), Error,
             "{}: the bias-gradient epilogue needs A packed (lda == {})", describe(key), s.trans_a ? s.m : s.k);
  auto plan = std::make_unique<Plan>();
  cublasLtMatmulDesc_t desc = nullptr;
  RT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute_type(key.ab_type, key.math), CUDA_R_32F));
  plan->desc.reset(desc);
  const cublasOperation_t op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  // Column-major views of the row-major buffers: B is [n, k] (or [k, n] when transposed), A is
  // [k, m] (or [m, k]), C is [n, m].
  plan->first = make_layout(key.ab_type, s.trans_b ? s.k : s.n, s.trans_b ? s.n : s.k, s.ldb, s.batch, s.stride_b);
  plan->second = make_layout(key.ab_type, s.trans_a ? s.m : s.k, s.trans_a ? s.k : s.m, s.lda, s.batch, s.stride_a);
  plan->c = make_layout(key.c_type, s.n, s.m, s.ldc, s.batch, s.stride_c);
  if (key.epilogue != Epilogue::none) {
    const cublasLtEpilogue_t epilogue = lt_epilogue(key.epilogue);
    RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (has_vector(key.epilogue)) {  // the vector is C's type (cuBLASLt's default; said, not assumed)
      const auto vector_type = static_cast<std::int32_t>(cuda_type(key.c_type));
      RT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vector_type, sizeof(vector_type)));
    }
    if (has_mask(key.epilogue))
      RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &key.mask_ld,
                                                     sizeof(key.mask_ld)));
    if (has_gelu(key.epilogue)) {  // the GELU's input: C's type and shape (said, not assumed)
      const auto aux_type = static_cast<std::int32_t>(cuda_type(key.c_type));
      RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                                     sizeof(aux_type)));
      RT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &key.gelu_ld,
                                                     sizeof(key.gelu_ld)));
    }
    plan->fused = key.epilogue;
  }
  return plan;
}

std::vector<cublasLtMatmulHeuristicResult_t> BlasLt::candidates(const Key& key, const Plan& plan, int count) const {
  cublasLtMatmulPreference_t pref = nullptr;
  RT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> owned(pref);
  const std::uint64_t workspace = workspace_.bytes();
  RT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                       sizeof(workspace)));
  // Operands may be views at any offset into an arena: tell the heuristic their real alignment.
  const std::uint32_t align_first = key.align_b, align_second = key.align_a, align_c = key.align_c;
  RT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first,
                                                       sizeof(align_first)));
  RT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second,
                                                       sizeof(align_second)));
  RT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                       sizeof(align_c)));
  RT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                       sizeof(align_c)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int returned = 0;
  const cublasStatus_t rc =
      cublasLtMatmulAlgoGetHeuristic(handle_.get(), plan.desc.get(), plan.first.get(), plan.second.get(), plan.c.get(),
                                     plan.c.get(), pref, count, results.data(), &returned);
  // NOT_SUPPORTED is the heuristic's answer "nothing fits", not a failure of the call; with an
  // epilogue INVALID_VALUE can be too (a vector type or alignment it does not take).
  const bool refused =
      rc == CUBLAS_STATUS_NOT_SUPPORTED || (key.epilogue != Epilogue::none && rc == CUBLAS_STATUS_INVALID_VALUE);
  if (rc != CUBLAS_STATUS_SUCCESS && !refused) check::cublas(rc, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  results.resize(rc == CUBLAS_STATUS_SUCCESS ? static_cast<std::size_t>(returned) : 0);
  std::erase_if(results, [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
  return results;
}

BlasLt::Plan& BlasLt::plan_for(const Key& key, void* vector, void* aux) {
  if (const auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto plan = make_plan(key);  // also checks the epilogue's requirements, which the unfused kernels share
  if (!warned_unaligned_ && costly_unaligned_rows(key.shape, key.ab_type, key.c_type)) {
    log::warn(
        "{}: a row of A, B or C is not a multiple of 16 bytes, so cuBLASLt has only its slow unaligned kernels for "
        "it (a Linear pads its own output rows; here the dimension itself needs a multiple of 8 elements for "
        "bf16/f16, 4 for f32; warned once)",
        describe(key));
    warned_unaligned_ = true;
  }
  std::vector<cublasLtMatmulHeuristicResult_t> offered;
  if (!always_cublas_ && fusable(key.epilogue, key.align_vector, key.align_mask, key.align_gelu, key.gelu_ld)) {
    if (has_vector(key.epilogue)) set_vector(plan->desc.get(), vector);
    if (has_mask(key.epilogue) || has_gelu(key.epilogue)) set_aux_pointer(plan->desc.get(), aux);
    offered = candidates(key, *plan, 1);
    if (offered.empty() && !warned_unfused_) {
      log::warn(
          "cuBLASLt has no algorithm for {}: running the plain GEMM, then a kernel for the epilogue "
          "(slower; warned once, other such GEMMs fall back silently)",
          describe(key));
      warned_unfused_ = true;
    }
  }
  if (offered.empty()) {  // no epilogue, or not fused: the plain GEMM (gemm() runs the kernel after it)
    Key plain = key;
    plain.epilogue = Epilogue::none;
    plain.align_vector = plain.align_mask = plain.align_gelu = 0;
    plain.mask_ld = plain.gelu_ld = 0;
    plan = make_plan(plain);
    if (!always_cublas_) offered = candidates(plain, *plan, 1);
  }
  if (offered.empty()) {  // not even the plain GEMM: cuBLAS runs it
    plan->on_cublas = true;
    if (!always_cublas_ && !warned_cublas_) {
      log::warn(
          "cuBLASLt has no algorithm for {} within a workspace of {} bytes: running it on cuBLAS (cublasGemmEx; "
          "warned once, other such GEMMs follow silently)",
          describe(key), workspace_.bytes());
      warned_cublas_ = true;
    }
  } else {
    plan->algo = offered.front().algo;
  }
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void BlasLt::run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float alpha, const void* a, const void* b,
                 float beta, void* c, void* vector, void* aux, void* stream) const {
  if (has_vector(plan.fused)) set_vector(plan.desc.get(), vector);
  if (has_mask(plan.fused) || has_gelu(plan.fused)) set_aux_pointer(plan.desc.get(), aux);
  RT_CUBLAS_CHECK(cublasLtMatmul(handle_.get(), plan.desc.get(), &alpha, b, plan.first.get(), a, plan.second.get(),
                                 &beta, c, plan.c.get(), c, plan.c.get(), &algo, workspace_.get(), workspace_.bytes(),
                                 static_cast<cudaStream_t>(stream)));
}

void BlasLt::run_cublas(const Key& key, float alpha, const void* a, const void* b, float beta, void* c, void* stream) {
  const GemmShape& s = key.shape;
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  RT_REQUIRE(std::max({s.m, s.n, s.k, s.lda, s.ldb, s.ldc, s.batch}) <= kMax, Error,
             "{}: a dimension above 2^31 - 1, which cublasGemmEx does not take", describe(key));
  if (!cublas_) {
    cublasHandle_t handle = nullptr;
    RT_CUBLAS_CHECK(cublasCreate(&handle));
    cublas_.reset(handle);
    // Its scratch is ours (the calls queue on the same stream as the cuBLASLt ones): nothing is
    // allocated inside a captured CUDA graph.
    RT_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace_.get(), workspace_.bytes()));
  }
  RT_CUBLAS_CHECK(cublasSetStream(cublas_.get(), static_cast<cudaStream_t>(stream)));
  // As cuBLASLt's: column-major C^T [n, m] = op(B)^T op(A)^T, B first.
  const cublasOperation_t op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto i32 = [](std::int64_t v) { return static_cast<int>(v); };
  const cudaDataType_t ab = cuda_type(key.ab_type), ct = cuda_type(key.c_type);
  const cublasComputeType_t compute = compute_type(key.ab_type, key.math);
  if (s.batch == 1) {
    RT_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), op_first, op_second, i32(s.n), i32(s.m), i32(s.k), &alpha, b, ab,
                                 i32(s.ldb), a, ab, i32(s.lda), &beta, c, ct, i32(s.ldc), compute,
                                 CUBLAS_GEMM_DEFAULT));
    return;
  }
  RT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_.get(), op_first, op_second, i32(s.n), i32(s.m), i32(s.k), &alpha,
                                             b, ab, i32(s.ldb), s.stride_b, a, ab, i32(s.lda), s.stride_a, &beta, c, ct,
                                             i32(s.ldc), s.stride_c, i32(s.batch), compute, CUBLAS_GEMM_DEFAULT));
}

bool BlasLt::gemm(const GemmShape& s, float alpha, const void* a, const void* b, float beta, void* c, DType ab_type,
                  DType c_type, MathMode math, void* stream, Epilogue epilogue, void* vector, const ReluMask* mask,
                  const GeluAux* gelu) {
  if (s.m == 0 || s.n == 0) return false;  // as blas::sgemm
  RT_REQUIRE(has_vector(epilogue) || vector == nullptr, Error, "gemm: a vector the epilogue{} does not read",
             epilogue_name(epilogue));
  RT_REQUIRE(has_mask(epilogue) == (mask != nullptr), Error, "gemm: the epilogue{} {} a ReLU mask",
             epilogue_name(epilogue), has_mask(epilogue) ? "needs" : "reads no");
  RT_REQUIRE(epilogue != Epilogue::relu_grad || mask->output != nullptr, Error,
             "gemm: the ReLU-gradient epilogue needs the ReLU's output (its rule when not fused)");
  RT_REQUIRE(has_gelu(epilogue) == (gelu != nullptr && gelu->pre != nullptr), Error,
             "gemm: the epilogue{} {} a GELU input", epilogue_name(epilogue),
             has_gelu(epilogue) ? "needs" : "reads no");
  // Whether cuBLASLt scales its bias gradient by alpha is not documented: only alpha == 1 is taken.
  RT_REQUIRE(epilogue != Epilogue::bias_grad || alpha == 1.0f, Error,
             "gemm: the bias-gradient epilogue needs alpha == 1 (got {})", alpha);
  void* aux = mask != nullptr ? mask->bits : gelu != nullptr ? gelu->pre : nullptr;
  const Key key = make_key(s, a, b, c, ab_type, c_type, math, epilogue, vector, mask, gelu);
  const Plan& plan = plan_for(key, vector, aux);
  if (plan.on_cublas)
    run_cublas(key, alpha, a, b, beta, c, stream);
  else
    run(plan, plan.algo, alpha, a, b, beta, c, vector, aux, stream);
  if (plan.fused == epilogue) return epilogue != Epilogue::none;
  // Unfused: the kernel the epilogue replaces, on packed C and A (make_plan checked).
  if (epilogue == Epilogue::relu_grad) {
    kernels::launch_relu_backward(c, mask->output, c, s.m * s.n, c_type, stream);
  } else if (epilogue == Epilogue::gelu_grad) {
    kernels::launch_gelu_backward(c, gelu->pre, c, s.m * s.n, c_type, stream);
  } else if (has_gelu(epilogue)) {  // the bias (if any), the GELU's input kept, the GELU
    kernels::launch_bias_act_forward(c, vector, c_type, s.m, s.n, 1, kernels::Activation::none, c_type, stream);
    RT_CUDA_CHECK(cudaMemcpyAsync(gelu->pre, c, static_cast<std::size_t>(s.m * s.n) * dtype_size(c_type),
                                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
    kernels::launch_gelu_forward(c, c, s.m * s.n, c_type, stream);
  } else if (writes_c(epilogue)) {  // vector is null for relu and relu_mask
    kernels::launch_bias_act_forward(c, vector, c_type, s.m, s.n, 1, forward_activation(epilogue), c_type, stream);
  } else {  // op(A)[i][k] is A[k][i] of A [k, m] when trans_a, else A[i][k] of A [m, k]
    kernels::launch_bias_grad(static_cast<float*>(vector), a, s.trans_a ? s.k : 1, s.m, s.trans_a ? 1 : s.k, ab_type,
                              stream);
  }
  return false;
}

std::vector<double> BlasLt::time_candidates(const GemmShape& s, const void* a, const void* b, void* c, DType ab_type,
                                            DType c_type, MathMode math, void* stream, int repeats,
                                            int max_candidates) {
  RT_REQUIRE(repeats > 0 && max_candidates > 0, Error,
             "time_candidates: repeats ({}) and max_candidates ({}) must be > 0", repeats, max_candidates);
  const Key key = make_key(s, a, b, c, ab_type, c_type, math, Epilogue::none, nullptr, nullptr, nullptr);
  const auto plan = make_plan(key);
  const auto offered = candidates(key, *plan, max_candidates);
  RT_REQUIRE(!offered.empty(), Error, "cuBLASLt has no algorithm for {} within a workspace of {} bytes", describe(key),
             workspace_.bytes());
  const auto st = static_cast<cudaStream_t>(stream);
  cudaEvent_t start = nullptr, stop = nullptr;
  RT_CUDA_CHECK(cudaEventCreate(&start));
  const Owned<cudaEvent_t, cudaEventDestroy> own_start(start);
  RT_CUDA_CHECK(cudaEventCreate(&stop));
  const Owned<cudaEvent_t, cudaEventDestroy> own_stop(stop);
  std::vector<double> ms;
  for (const cublasLtMatmulHeuristicResult_t& r : offered) {
    run(*plan, r.algo, 1.0f, a, b, 0.0f, c, nullptr, nullptr, stream);  // warm-up: first-call setup is not timed
    RT_CUDA_CHECK(cudaEventRecord(start, st));
    for (int i = 0; i < repeats; ++i) run(*plan, r.algo, 1.0f, a, b, 0.0f, c, nullptr, nullptr, stream);
    RT_CUDA_CHECK(cudaEventRecord(stop, st));
    RT_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.0f;
    RT_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(static_cast<double>(elapsed) / repeats);
  }
  return ms;
}

}  // namespace ringtrain::cuda

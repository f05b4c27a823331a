/* test_cuda_host_math.c — the host-side logic of the GPU code, checked without a GPU (built and
 * run in every configuration):
 *   - kernels/cuda/sdpa_layout.h: the dims/strides cuDNN's attention graph gets address every
 *     element of the token-major (B, S, H, D) tensors exactly where it is (Q, O, V, and K as K^T
 *     for the first matmul), the stats index is the packed (B, H, Sq) one the LSE transpose reads,
 *     and cuDNN 9.10.0 / 9.10.1 (wrong bf16 attention) and head dims cuDNN lacks are refused;
 *   - kernels/cuda/gemm_layout.h: a column-major GEMM run on the host with the layouts and ops
 *     given to cuBLASLt computes the row-major nn.Linear y = x W^T exactly (strided x and y), with
 *     the bias along D's rows (N values);
 *   - bf16 activations (the "cuda" table): which operands go to cuDNN's graph as they are
 *     (contiguous, 16-byte aligned bf16) and which are copied (fused qkv column blocks); the
 *     cuBLASLt leading dimensions stay in elements (not bytes) and the alignment of bf16
 *     column blocks is that of their byte offset; the VAE convolution's row band (halo rows,
 *     element offsets, and the bytes they make for 2- and 4-byte elements);
 *   - lib/cp/device_ids.h: ranks sharing a device are found from their UUIDs (NCCL or staged).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/gemm_layout.h"
#include "kernels/cuda/sdpa_layout.h"
#include "kernels/cuda/vae_ops_cuda.h"
#include "lib/cp/device_ids.h"
#include "tests/test_util.h"

static int64_t offset(const cpdit_sdpa_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3)
{
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3 * t->stride[3];
}

/* Every (b, h, s, d) of q/o/v/K^T and every stats row against the token-major formula. */
static void check_sdpa_layout(int B, int Sq, int Skv, int H, int D)
{
    const cpdit_sdpa_layout l = cpdit_sdpa_layout_for(B, Sq, Skv, H, D);
    int bad = 0;
    CHECK(l.q.dim[0] == B && l.q.dim[1] == H && l.q.dim[2] == Sq && l.q.dim[3] == D);
    CHECK(l.kt.dim[0] == B && l.kt.dim[1] == H && l.kt.dim[2] == D && l.kt.dim[3] == Skv);
    CHECK(l.v.dim[2] == Skv && l.v.dim[3] == D && l.stats.dim[2] == Sq && l.stats.dim[3] == 1);
    CHECK(l.q.stride[3] == 1 && l.v.stride[3] == 1); /* cuDNN: unit stride along D */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            for (int s = 0; s < Sq; s++) {
                for (int d = 0; d < D; d++) {
                    const int64_t want = (((int64_t)b * Sq + s) * H + h) * D + d;
                    bad += offset(&l.q, b, h, s, d) != want || offset(&l.o, b, h, s, d) != want;
                }
                bad += offset(&l.stats, b, h, s, 0) !=
                       (int64_t)cpdit_sdpa_stats_index(b, h, s, H, Sq);
                bad += cpdit_sdpa_stats_index(b, h, s, H, Sq) != ((size_t)b * H + h) * Sq + s;
            }
            for (int s = 0; s < Skv; s++)
                for (int d = 0; d < D; d++) {
                    const int64_t want = (((int64_t)b * Skv + s) * H + h) * D + d;
                    bad += offset(&l.v, b, h, s, d) != want;
                    bad += offset(&l.kt, b, h, d, s) != want; /* K^T (d, s) is K (s, d) */
                }
        }
    /* the virtual scores: packed (B, H, Sq, Skv) */
    bad += offset(&l.scores, B - 1, H - 1, Sq - 1, Skv - 1) != (int64_t)B * H * Sq * Skv - 1;
    CHECK_MSG(bad == 0, "sdpa layout B %d Sq %d Skv %d H %d D %d: %d wrong offsets", B, Sq, Skv,
              H, D, bad);
}

static void check_sdpa_rules(void)
{
    CHECK(cpdit_sdpa_version_refused(91000) != NULL);
    CHECK(cpdit_sdpa_version_refused(91001) != NULL);
    CHECK(cpdit_sdpa_version_refused(91002) == NULL);
    CHECK(cpdit_sdpa_version_refused(90100) == NULL);
    CHECK(cpdit_sdpa_version_refused(91900) == NULL);
    CHECK(cpdit_sdpa_version_refused(80906) != NULL);
    CHECK(cpdit_sdpa_head_dim_ok(128) && cpdit_sdpa_head_dim_ok(8) && cpdit_sdpa_head_dim_ok(256));
    CHECK(!cpdit_sdpa_head_dim_ok(12) && !cpdit_sdpa_head_dim_ok(264) && !cpdit_sdpa_head_dim_ok(0));
}

/* Element (r, c) of a column-major matrix m with leading dimension ld, through op. */
static double cm(const double *m, int64_t ld, int trans, int64_t r, int64_t c)
{
    return trans ? m[c + r * ld] : m[r + c * ld];
}

static void check_gemm_layout(int M, int K, int N, int ldx, int ldy)
{
    const cpdit_lt_linear_layout l = cpdit_lt_linear_layout_for(M, K, N, ldx, ldy);
    double x[64 * 40], w[64 * 40], b[64], y[64 * 80];
    uint64_t r = 12345;
    for (int i = 0; i < M * ldx; i++)
        x[i] = (double)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 54) - 512;
    for (int i = 0; i < N * K; i++)
        w[i] = (double)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 54) - 512;
    for (int i = 0; i < N; i++)
        b[i] = i * 3.0 - 7;
    /* op(A) is (m x k), op(B) (k x n), D (m x n): m, n, k = N, M, K */
    const int64_t m = l.trans_a ? (int64_t)l.a.cols : (int64_t)l.a.rows;
    const int64_t k = l.trans_a ? (int64_t)l.a.rows : (int64_t)l.a.cols;
    const int64_t n = l.trans_b ? (int64_t)l.b.rows : (int64_t)l.b.cols;
    CHECK(m == N && n == M && k == K);
    CHECK((int64_t)l.c.rows == m && (int64_t)l.c.cols == n); /* bias: l.c.rows values */
    CHECK(l.a.ld >= (int64_t)l.a.rows && l.b.ld >= (int64_t)l.b.rows &&
          l.c.ld >= (int64_t)l.c.rows);
    for (int i = 0; i < M * ldy; i++)
        y[i] = -1e300; /* padding columns must stay untouched */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = b[i]; /* the bias vector runs along D's rows */
            for (int64_t t = 0; t < k; t++)
                acc += cm(w, l.a.ld, l.trans_a, i, t) * cm(x, l.b.ld, l.trans_b, t, j);
            y[i + j * l.c.ld] = acc;
        }
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldy; j++) {
            if (j >= N) {
                bad += y[(size_t)i * ldy + j] != -1e300;
                continue;
            }
            double want = b[j];
            for (int t = 0; t < K; t++)
                want += x[(size_t)i * ldx + t] * w[(size_t)j * K + t];
            bad += y[(size_t)i * ldy + j] != want;
        }
    CHECK_MSG(bad == 0, "gemm layout M %d K %d N %d ldx %d ldy %d: %d wrong", M, K, N, ldx, ldy,
              bad);
}

static void check_alignment(void)
{
    static _Alignas(256) unsigned char buf[1024];
    CHECK(cpdit_lt_pointer_alignment(buf) == 256);
    CHECK(cpdit_lt_pointer_alignment(buf + 4) == 4);
    CHECK(cpdit_lt_pointer_alignment(buf + 96) == 32);
    CHECK(cpdit_lt_pointer_alignment(buf + 512) == 256);
}

/* bf16 activations and cuDNN's operands: FLUX's fused qkv (tokens, 3 H D) column blocks are
 * copied, a contiguous aligned block is passed as it is, fp32 never is (cuda-fp32 rounds). */
static void check_sdpa_operands(void)
{
    const int64_t HD = 24 * 128;
    static _Alignas(256) unsigned char buf[64];
    const uintptr_t base = (uintptr_t)buf;
    CHECK(cpdit_sdpa_operand_direct(2, base, HD, HD));
    CHECK(!cpdit_sdpa_operand_direct(2, base, 3 * HD, HD));          /* q of fused qkv */
    CHECK(!cpdit_sdpa_operand_direct(2, base + 2 * HD, 3 * HD, HD)); /* k of fused qkv */
    CHECK(!cpdit_sdpa_operand_direct(4, base, HD, HD));              /* fp32: rounded copy */
    CHECK(!cpdit_sdpa_operand_direct(2, base + 2, HD, HD));          /* odd element offset */
    CHECK(cpdit_sdpa_operand_direct(2, base + 16, HD, HD));          /* 8 elements in: aligned */
    /* a block of B Sq rows after another tensor of B S H D bf16 elements stays aligned when
     * H D is a multiple of 8 (cuDNN's head dims are) */
    CHECK(cpdit_sdpa_operand_direct(2, base + (uintptr_t)(2 * 77 * 3 * 64) * 2, 3 * 64, 3 * 64));
}

/* The cuBLASLt layout is in elements whatever the element size: FLUX's single block writes its
 * MLP (N 12288) into columns 3072.. of y (M, 3072 + 12288) bf16; ld stays 15360 (not 30720
 * bytes), and the column block's alignment is its byte offset's (6144 bytes: 256-aligned). */
static void check_bf16_gemm_strides(void)
{
    const int ldy = 3072 + 12288;
    const cpdit_lt_linear_layout l = cpdit_lt_linear_layout_for(4608, 3072, 12288, 3072, ldy);
    CHECK(l.c.ld == ldy && l.b.ld == 3072 && l.a.ld == 3072);
    static _Alignas(256) unsigned char y[64 * 1024];
    CHECK(cpdit_lt_pointer_alignment(y + (size_t)3072 * 2) == 256); /* bf16 column 3072 */
    CHECK(cpdit_lt_pointer_alignment(y + (size_t)3072 * 4) == 256); /* fp32 column 3072 */
    CHECK(cpdit_lt_pointer_alignment(y + (size_t)1 * 2) == 2);      /* bf16 column 1 */
    CHECK(cpdit_lt_pointer_alignment(y + (size_t)24 * 2) == 16);    /* bf16 column 24 */
}

/* The VAE convolution's band: offsets in elements from row 0 (the 3x3 halo row above is
 * negative), element counts, and bytes for bf16 (2) and fp32 (4) activations. */
static void check_conv_band(void)
{
    const int W = 13, Cin = 24, Cout = 20;
    cpdit_conv_band b = cpdit_conv_band_for(3, 0, 4, W, Cin, Cout);
    CHECK(b.in_row0 == -1 && b.rows_in == 6 && b.rows_out == 4);
    CHECK(b.in_offset == -(long long)W * Cin && b.out_offset == 0);
    CHECK(b.in_elems == (size_t)6 * W * Cin && b.out_elems == (size_t)4 * W * Cout);
    b = cpdit_conv_band_for(3, 4, 9, W, Cin, Cout);
    CHECK(b.in_row0 == 3 && b.rows_in == 7 && b.in_offset == 3LL * W * Cin);
    CHECK(b.out_offset == 4LL * W * Cout && b.out_elems == (size_t)5 * W * Cout);
    /* the last input element read is row r1 (the halo below), the last written row r1 - 1 */
    CHECK(b.in_offset + (long long)b.in_elems == 10LL * W * Cin);
    CHECK(b.out_offset + (long long)b.out_elems == 9LL * W * Cout);
    b = cpdit_conv_band_for(1, 2, 5, W, Cin, Cout);
    CHECK(b.in_row0 == 2 && b.rows_in == 3 && b.in_offset == 2LL * W * Cin);
    /* bytes: a 1024 x 1024 x 128 band of 8 rows fits a size_t and an int64 for both types */
    b = cpdit_conv_band_for(3, 1000, 1008, 1024, 128, 128);
    CHECK(b.in_offset * 2 == 999LL * 1024 * 128 * 2);
    CHECK(b.in_elems * 4 == (size_t)10 * 1024 * 128 * 4);
}

static void put_id(unsigned char *tab, int i, int valid, unsigned char tag)
{
    unsigned char *e = tab + (size_t)i * CPDIT_DEVICE_ID_BYTES;
    memset(e, 0, CPDIT_DEVICE_ID_BYTES);
    e[0] = (unsigned char)valid;
    for (int j = 1; j < CPDIT_DEVICE_ID_BYTES; j++)
        e[j] = (unsigned char)(0xA0 + j);
    e[CPDIT_DEVICE_ID_BYTES - 1] = tag; /* UUIDs differ in their last byte only */
}

static void check_device_ids(void)
{
    unsigned char tab[4 * CPDIT_DEVICE_ID_BYTES];
    for (int i = 0; i < 4; i++)
        put_id(tab, i, 1, (unsigned char)i);
    CHECK(cpdit_device_ids_shared(tab, 4) == 0); /* four GPUs */
    CHECK(cpdit_device_ids_shared(tab, 1) == 0);
    put_id(tab, 3, 1, 1); /* rank 3 on rank 1's GPU */
    CHECK(cpdit_device_ids_shared(tab, 4) == 1);
    CHECK(cpdit_device_ids_shared(tab, 3) == 0);
    put_id(tab, 2, 0, 2); /* rank 2 cannot tell its device */
    CHECK(cpdit_device_ids_shared(tab, 3) == 1);
}

int main(void)
{
    check_sdpa_layout(1, 5, 7, 3, 8);
    check_sdpa_layout(2, 4, 3, 2, 16);
    check_sdpa_layout(1, 1, 1, 1, 8);
    /* FLUX.1-dev's joint attention: the extreme offsets only (a full walk is 56M elements) */
    {
        const int64_t B = 1, S = 4608, H = 24, D = 128;
        const cpdit_sdpa_layout l = cpdit_sdpa_layout_for(B, S, S, H, D);
        CHECK(offset(&l.q, 0, H - 1, S - 1, D - 1) == S * H * D - 1);
        CHECK(offset(&l.kt, 0, H - 1, D - 1, S - 1) == S * H * D - 1);
        CHECK(offset(&l.stats, 0, H - 1, S - 1, 0) == H * S - 1);
    }
    check_sdpa_rules();
    check_gemm_layout(7, 5, 3, 5, 3);
    check_gemm_layout(4, 6, 9, 11, 20); /* column blocks of fused buffers */
    check_gemm_layout(1, 33, 17, 40, 17);
    check_alignment();
    check_sdpa_operands();
    check_bf16_gemm_strides();
    check_conv_band();
    check_device_ids();
    printf("host math of the GPU code: sdpa layout and operands, gemm layout and bf16 strides, "
           "conv band, device ids checked\n");
    TEST_MAIN_END();
}

/* test_flux_shard.c — the FLUX token layout (flux_shard_layout) and token slicing, without MPI:
 * every token is held by exactly one rank, in order; text is split balanced; the totals are
 * balanced whenever the image can even out the text (and then every rank holds the same count
 * when the total divides); otherwise both parts are split balanced on their own; the batch
 * split over data-parallel groups is balanced and covers every item once. */
#include "config.h"

#include <stdlib.h>

#include "lib/models/flux/flux_shard.h"
#include "tests/test_util.h"

static void check_layout(int n, int txt, int img)
{
    cp_seq_layout l;
    cpdit_error err;
    CHECK(flux_shard_layout(&l, n, txt, img, &err) == CPDIT_OK);
    int t_at = 0, i_at = 0, lo = 1 << 30, hi = -1, tlo = 1 << 30, thi = -1;
    for (int r = 0; r < n; r++) {
        CHECK_MSG(l.txt_start[r] == t_at && l.img_start[r] == i_at,
                  "n %d txt %d img %d: rank %d starts at %d/%d, expected %d/%d", n, txt, img, r,
                  l.txt_start[r], l.img_start[r], t_at, i_at);
        CHECK(l.txt_len[r] >= 0 && l.img_len[r] >= 0);
        CHECK(l.len[r] == l.txt_len[r] + l.img_len[r]);
        t_at += l.txt_len[r];
        i_at += l.img_len[r];
        lo = l.len[r] < lo ? l.len[r] : lo;
        hi = l.len[r] > hi ? l.len[r] : hi;
        tlo = l.txt_len[r] < tlo ? l.txt_len[r] : tlo;
        thi = l.txt_len[r] > thi ? l.txt_len[r] : thi;
    }
    CHECK(t_at == txt && i_at == img);
    CHECK_MSG(thi - tlo <= 1, "text split unbalanced: %d..%d", tlo, thi);
    /* the image can even out the text when every rank's balanced total >= its text share */
    const int can_even = (txt + img) / n >= (txt + n - 1) / n;
    if (can_even)
        CHECK_MSG(hi - lo <= 1, "n %d txt %d img %d: totals %d..%d not balanced", n, txt, img,
                  lo, hi);
    if (can_even && (txt + img) % n == 0)
        CHECK(cp_seq_layout_is_even(&l));
    /* global indices: text tokens first, then image tokens */
    for (int r = 0; r < n; r++)
        for (int i = 0; i < l.len[r]; i++) {
            const int g = cp_seq_layout_global_index(&l, r, i);
            const int want = i < l.txt_len[r] ? l.txt_start[r] + i
                                              : txt + l.img_start[r] + (i - l.txt_len[r]);
            CHECK(g == want);
        }
    cp_seq_layout_free(&l);
}

int main(void)
{
    check_layout(1, 7, 15);
    check_layout(2, 7, 15);  /* 22 = 11 + 11: text 4 + 3, image 7 + 8 */
    check_layout(3, 7, 15);
    check_layout(8, 7, 15);  /* a rank without text */
    check_layout(8, 6, 26);  /* 32 tokens: even although neither part divides */
    check_layout(4, 512, 4096);
    check_layout(7, 0, 13);  /* no text at all */
    check_layout(8, 2, 4);   /* fewer tokens than ranks */
    check_layout(4, 9, 1);   /* image too short to even out the text: both balanced */

    cp_seq_layout l;
    cpdit_error err;
    CHECK(flux_shard_layout(&l, 2, 7, 15, &err) == CPDIT_OK);
    CHECK(cp_seq_layout_is_even(&l));
    CHECK(l.txt_len[0] == 4 && l.txt_len[1] == 3 && l.img_len[0] == 7 && l.img_len[1] == 8);
    cp_seq_layout_free(&l);

    /* take: rows [start, start + len) of every item */
    float full[2 * 5 * 3], local[2 * 2 * 3];
    for (int i = 0; i < 30; i++)
        full[i] = (float)i;
    flux_shard_take(local, full, 2, 5, 1, 2, 3);
    CHECK(local[0] == 3.0f && local[5] == 8.0f && local[6] == 18.0f && local[11] == 23.0f);

    /* batch over dp groups */
    int covered[10] = {0};
    for (int d = 0; d < 4; d++) {
        int s, c;
        flux_shard_batch(10, 4, d, &s, &c);
        CHECK(c == (d < 2 ? 3 : 2));
        for (int b = s; b < s + c; b++)
            covered[b]++;
    }
    for (int b = 0; b < 10; b++)
        CHECK(covered[b] == 1);
    int s, c;
    flux_shard_batch(1, 3, 2, &s, &c);
    CHECK(c == 0);
    TEST_MAIN_END();
}

/* t5_relative_bias.c — T5's bucketed relative position bias (see t5_encoder.h).
 *
 * Half of the buckets (per direction when bidirectional) hold the exact distances 0..max_exact-1,
 * the other half cover max_exact..max_distance logarithmically; farther distances share the last
 * bucket. The logarithm is taken in fp32 and truncated, like torch's
 *   max_exact + (log(n.float() / max_exact) / math.log(max_distance / max_exact)
 *                * (num_buckets - max_exact)).to(long)
 * so that the boundaries land where transformers puts them (tests/data/t5_buckets_expected.txt
 * holds torch's buckets for a range of configs). The attention mask joins the bias as
 * transformers' extended mask does: (1 - mask) * finfo(float32).min added to it.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/t5_encoder.h"

int t5_relative_position_bucket(int relative_position, int bidirectional, int num_buckets,
                                int max_distance)
{
    int bucket = 0;
    int n;
    if (bidirectional) {
        num_buckets /= 2;
        if (relative_position > 0)
            bucket += num_buckets;
        n = abs(relative_position);
    } else {
        n = relative_position < 0 ? -relative_position : 0;
    }
    const int max_exact = num_buckets / 2;
    if (n < max_exact)
        return bucket + n;
    /* fp32 like torch: log of a float32 tensor, divided by a Python float, times an int */
    const float ratio = (float)n / (float)max_exact;
    const float log_range = (float)log((double)max_distance / (double)max_exact);
    const float v = logf(ratio) / log_range * (float)(num_buckets - max_exact);
    long large = max_exact + (long)v;
    if (large > num_buckets - 1)
        large = num_buckets - 1;
    return bucket + (int)large;
}

void t5_position_bias(float *bias, const float *table, int num_buckets, int max_distance, int H,
                      int Sq, int Sk)
{
    t5_position_bias_masked(bias, table, num_buckets, max_distance, H, Sq, Sk, NULL);
}

void t5_mask_to_bias(float *key_add, const int32_t *mask, int Sk)
{
    for (int j = 0; j < Sk; j++)
        key_add[j] = (1.0f - (float)mask[j]) * T5_MASK_MIN;
}

void t5_position_bias_masked(float *bias, const float *table, int num_buckets, int max_distance,
                             int H, int Sq, int Sk, const float *key_add)
{
    /* bias[h, i, :] is a window of one line per head: line[d] = table[bucket(d - (Sq-1)), h]
     * for the distances d - (Sq-1) = j - i in [-(Sq-1), Sk-1]; row i starts at d = Sq-1-i */
    const int n_dist = Sq + Sk - 1;
    int *bucket_of = malloc((size_t)n_dist * sizeof *bucket_of);
    float *line = malloc((size_t)n_dist * sizeof *line);
    if (!bucket_of || !line) { /* tiny; fall back to computing per entry */
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Sq; i++)
                for (int j = 0; j < Sk; j++) {
                    float v = table[(size_t)t5_relative_position_bucket(j - i, 1, num_buckets,
                                                                        max_distance) * H + h];
                    if (key_add)
                        v += key_add[j];
                    bias[((size_t)h * Sq + i) * Sk + j] = v;
                }
        free(bucket_of);
        free(line);
        return;
    }
    for (int d = 0; d < n_dist; d++)
        bucket_of[d] = t5_relative_position_bucket(d - (Sq - 1), 1, num_buckets, max_distance);
    for (int h = 0; h < H; h++) {
        for (int d = 0; d < n_dist; d++)
            line[d] = table[(size_t)bucket_of[d] * H + h];
        for (int i = 0; i < Sq; i++) {
            float *row = bias + ((size_t)h * Sq + i) * Sk;
            const float *from = line + (Sq - 1 - i);
            if (!key_add)
                memcpy(row, from, (size_t)Sk * sizeof *row);
            else
                for (int j = 0; j < Sk; j++)
                    row[j] = from[j] + key_add[j];
        }
    }
    free(bucket_of);
    free(line);
}

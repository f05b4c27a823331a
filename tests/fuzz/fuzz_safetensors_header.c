/* fuzz_safetensors_header.c — libFuzzer target for the safetensors parser.
 *
 * The input is a whole safetensors file in memory. It is validated with
 * safetensors_parse_buffer(); when accepted, every lookup is exercised and every tensor is
 * converted to f32, so that a header which passes validation but points outside the buffer
 * would be caught by AddressSanitizer. Build: `make fuzz-safetensors` (clang + libFuzzer);
 * `make check` runs it over the seed corpus through tests/fuzz/fuzz_driver_main.c.
 */
#include "lib/io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

#define FUZZ_MAX_CONVERT_ELEMS (1u << 20) /* bounds the f32 scratch buffer per tensor */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    safetensors_file *f = NULL;
    cpdit_error err;
    size_t i;
    if (safetensors_parse_buffer(&f, data, size, "fuzz", &err) != CPDIT_OK)
        return 0;
    for (i = 0; i < safetensors_count(f); i++) {
        const safetensors_tensor *t = safetensors_tensor_at(f, i);
        float *buf;
        if (safetensors_find(f, t->name) != t)
            abort(); /* lookup must find what iteration lists */
        if (t->nelem > FUZZ_MAX_CONVERT_ELEMS)
            continue;
        buf = malloc((t->nelem ? t->nelem : 1) * sizeof *buf);
        if (buf && safetensors_tensor_read_f32(t, buf, t->nelem, &err) != CPDIT_OK)
            abort(); /* every dtype converts */
        free(buf);
    }
    for (i = 0; i < safetensors_metadata_count(f); i++) {
        const char *key = NULL, *value = NULL;
        if (safetensors_metadata_at(f, i, &key, &value) != 0 ||
            safetensors_metadata_get(f, key) != value)
            abort();
    }
    safetensors_close(f);
    return 0;
}

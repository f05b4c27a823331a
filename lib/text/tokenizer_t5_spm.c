/* tokenizer_t5_spm.c — the T5 tokenizer from a SentencePiece model file (spiece.model), built
 * the way transformers converts the slow T5Tokenizer into T5TokenizerFast (T5Converter):
 *
 *   vocabulary = the model's pieces and scores, then <extra_id_{E-1}> ... <extra_id_0> (score
 *   0); unk = trainer_spec.unk_id; no byte fallback; normalizer = the model's precompiled
 *   charsmap, Strip(right), Replace(" {2,}" -> "▁"); Metaspace with prepend_scheme "always"
 *   (legacy) or "first"; specials matched in the raw text = control and user-defined pieces,
 *   <unk>, the extra ids; post-processor "$A </s>".
 *
 * Only the ModelProto fields this needs are read (protobuf wire format, unknown fields
 * skipped): pieces (1: piece 1, score 2, type 3), trainer_spec (2: model_type 3, unk_id 40),
 * normalizer_spec (3: precompiled_charsmap 2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/text/tokenizer_common.h"
#include "lib/text/tokenizer_t5_internal.h"

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };
enum { PIECE_UNKNOWN = 2, PIECE_CONTROL = 3, PIECE_USER_DEFINED = 4 }; /* SentencePiece.Type */
enum { MODEL_UNIGRAM = 1 };                                            /* TrainerSpec.ModelType */
#define EXTRA_ID_MAX_TEXT 32

typedef struct pb {
    const unsigned char *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            return 0;
    }
    return -1;
}

/* Next field: its number, wire type, and for WIRE_LEN the payload (*sub); numbers in *v. */
static int pb_field(pb *b, uint32_t *field, int *wire, uint64_t *v, pb *sub)
{
    uint64_t key;
    if (pb_varint(b, &key) != 0)
        return -1;
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case WIRE_VARINT:
        return pb_varint(b, v);
    case WIRE_I64:
    case WIRE_I32: {
        size_t n = *wire == WIRE_I64 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n)
            return -1;
        *v = 0;
        for (size_t i = 0; i < n; i++)
            *v |= (uint64_t)b->p[i] << (8 * i);
        b->p += n;
        return 0;
    }
    case WIRE_LEN:
        if (pb_varint(b, v) != 0 || *v > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return 0;
    default:
        return -1;
    }
}

typedef struct spm_piece {
    const char *text;
    size_t len;
    float score;
    int type;
} spm_piece;

static float float_of_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

cpdit_status t5_tokenizer_from_spm(const unsigned char *data, size_t len, size_t extra_ids,
                                   int legacy, const char *where, t5_tokenizer **out,
                                   cpdit_error *err)
{
    *out = NULL;
    pb b = {data, data + len}, sub;
    uint32_t field;
    int wire;
    uint64_t v;
    size_t n = 0, cap = 0;
    spm_piece *pieces = NULL;
    pb charsmap = {NULL, NULL};
    int64_t unk_id = 0, model_type = MODEL_UNIGRAM;
    cpdit_status st = CPDIT_OK;
    t5_tokenizer *t = NULL;

    while (b.p < b.end) {
        if (pb_field(&b, &field, &wire, &v, &sub) != 0)
            goto corrupt;
        if (field == 1 && wire == WIRE_LEN) { /* SentencePiece */
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                spm_piece *np = realloc(pieces, cap * sizeof *np);
                if (!np)
                    goto oom;
                pieces = np;
            }
            spm_piece *sp = &pieces[n++];
            memset(sp, 0, sizeof *sp);
            sp->type = 1;
            pb in = sub, s2;
            while (in.p < in.end) {
                if (pb_field(&in, &field, &wire, &v, &s2) != 0)
                    goto corrupt;
                if (field == 1 && wire == WIRE_LEN) {
                    sp->text = (const char *)s2.p;
                    sp->len = (size_t)(s2.end - s2.p);
                } else if (field == 2 && wire == WIRE_I32) {
                    sp->score = float_of_bits((uint32_t)v);
                } else if (field == 3 && wire == WIRE_VARINT) {
                    sp->type = (int)v;
                }
            }
        } else if (field == 2 && wire == WIRE_LEN) { /* TrainerSpec */
            pb in = sub, s2;
            while (in.p < in.end) {
                if (pb_field(&in, &field, &wire, &v, &s2) != 0)
                    goto corrupt;
                if (field == 3 && wire == WIRE_VARINT)
                    model_type = (int64_t)v;
                else if (field == 40 && wire == WIRE_VARINT)
                    unk_id = (int64_t)v;
            }
        } else if (field == 3 && wire == WIRE_LEN) { /* NormalizerSpec */
            pb in = sub, s2;
            while (in.p < in.end) {
                if (pb_field(&in, &field, &wire, &v, &s2) != 0)
                    goto corrupt;
                if (field == 2 && wire == WIRE_LEN)
                    charsmap = s2;
            }
        }
    }
    if (n == 0 || model_type != MODEL_UNIGRAM || unk_id < 0 || (size_t)unk_id >= n) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, where,
                             "spiece.model: not a Unigram model with pieces and an unk id");
        goto done;
    }

    t = calloc(1, sizeof *t);
    if (!t || t5_vocab_init(t, n + extra_ids) != 0)
        goto oom;
    t->unk_id = (int32_t)unk_id;
    for (size_t i = 0; i < n; i++)
        if (t5_vocab_set(t, i, pieces[i].text ? pieces[i].text : "", pieces[i].len,
                         (double)pieces[i].score) != 0)
            goto oom;
    for (size_t i = 0; i < n; i++)
        if ((pieces[i].type == PIECE_CONTROL || pieces[i].type == PIECE_USER_DEFINED ||
             pieces[i].type == PIECE_UNKNOWN) &&
            pieces[i].len > 0 && t5_add_special(t, pieces[i].text, pieces[i].len, (int32_t)i))
            goto oom;
    for (size_t e = 0; e < extra_ids; e++) { /* id n + e holds <extra_id_{E-1-e}> */
        char text[EXTRA_ID_MAX_TEXT];
        int l = snprintf(text, sizeof text, "<extra_id_%zu>", extra_ids - 1 - e);
        if (t5_vocab_set(t, n + e, text, (size_t)l, 0.0) != 0 ||
            t5_add_special(t, text, (size_t)l, (int32_t)(n + e)) != 0)
            goto oom;
    }
    if (charsmap.p && charsmap.end > charsmap.p) {
        st = spm_charsmap_parse(&t->charsmap, charsmap.p, (size_t)(charsmap.end - charsmap.p),
                                where, err);
        if (st != CPDIT_OK)
            goto done;
        t->steps[t->n_steps++] = (norm_step){.kind = NORM_CHARSMAP};
    }
    t->steps[t->n_steps++] = (norm_step){.kind = NORM_STRIP, .right = 1};
    t->steps[t->n_steps] = (norm_step){.kind = NORM_REPLACE_SPACE_RUN};
    t->steps[t->n_steps].content = strdup("\xe2\x96\x81");
    if (!t->steps[t->n_steps++].content)
        goto oom;
    t->has_metaspace = 1;
    t->split = 1;
    t->prepend = legacy ? PREPEND_ALWAYS : PREPEND_FIRST;
    memcpy(t->replacement, "\xe2\x96\x81", 4);
    t->replacement_len = 3;
    int32_t eos;
    if (!token_map_get(t->pieces, "</s>", 4, &eos) || eos < 0) {
        st = cpdit_error_set(err, CPDIT_ERR_INPUT, where, "spiece.model: no </s> piece");
        goto done;
    }
    t->suffix_ids = malloc(sizeof *t->suffix_ids);
    if (!t->suffix_ids)
        goto oom;
    t->suffix_ids[0] = eos;
    t->n_suffix = 1;
    goto done;
corrupt:
    st = cpdit_error_set(err, CPDIT_ERR_INPUT, where, "spiece.model: not a valid protobuf");
    goto done;
oom:
    st = cpdit_error_set(err, CPDIT_ERR_RUNTIME, where, "out of memory");
done:
    free(pieces);
    if (st != CPDIT_OK) {
        t5_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CPDIT_OK;
}

/* video_webp.c — animated WebP through libwebp's WebPAnimEncoder, metadata in an XMP chunk
 * (video_writer.h). Built only when configure finds libwebp and libwebpmux.
 *
 * The encoder keeps the compressed frames; at finish they are assembled, the XMP chunk is
 * added with WebPMux, and the bytes go to the temporary file made at open (atomic_file). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/encode.h>
#include <webp/mux.h>

#include "lib/io/atomic_file.h"
#include "lib/io/video_writer_internal.h"

#define MS_PER_SECOND 1000.0
/* Growth step of the XMP text buffer (bytes). */
#define XMP_CHUNK 4096
#define XMP_NAMESPACE "urn:cpdit:metadata:1"
/* Bytes of one pixel of the RGB input. */
#define RGB_BYTES 3

typedef struct webp_state {
    atomic_file af;
    WebPAnimEncoder *enc;
    WebPConfig config;
} webp_state;

/* A growable text buffer for the XMP packet. */
typedef struct text_buf {
    char *s;
    size_t len, cap;
    int oom;
} text_buf;

static void tb_put(text_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap + n + XMP_CHUNK;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void tb_str(text_buf *b, const char *s)
{
    tb_put(b, s, strlen(s));
}

/* s as XML character data: & < > " escaped; control characters XML 1.0 forbids become '?'. */
static void tb_xml_text(text_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '&': tb_str(b, "&amp;"); break;
        case '<': tb_str(b, "&lt;"); break;
        case '>': tb_str(b, "&gt;"); break;
        case '"': tb_str(b, "&quot;"); break;
        default:
            if (*p < ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                tb_put(b, "?", 1);
            else
                tb_put(b, (const char *)p, 1);
        }
    }
}

/* key as an XML element name: letters, digits, '_', '-', '.' kept, others '_'; a leading
 * digit, '-' or '.' gets a '_' in front. */
static void tb_xml_name(text_buf *b, const char *key)
{
    if (!((key[0] >= 'A' && key[0] <= 'Z') || (key[0] >= 'a' && key[0] <= 'z') || key[0] == '_'))
        tb_put(b, "_", 1);
    for (const char *p = key; *p; p++) {
        char c = *p;
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        tb_put(b, ok ? p : "_", 1);
    }
}

/* The XMP packet: one element cpdit:KEY per tag in namespace XMP_NAMESPACE. NULL: no memory. */
static char *xmp_packet(const cpdit_video_writer *w)
{
    text_buf b = {0};
    tb_str(&b, "<?xpacket begin=\"\xEF\xBB\xBF\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>\n"
               "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\">\n"
               " <rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">\n"
               "  <rdf:Description rdf:about=\"\" xmlns:cpdit=\"" XMP_NAMESPACE "\">\n");
    for (int i = 0; i < w->n_tags; i++) {
        tb_str(&b, "   <cpdit:");
        tb_xml_name(&b, w->tags[i].key);
        tb_str(&b, ">");
        tb_xml_text(&b, w->tags[i].value);
        tb_str(&b, "</cpdit:");
        tb_xml_name(&b, w->tags[i].key);
        tb_str(&b, ">\n");
    }
    tb_str(&b, "  </rdf:Description>\n </rdf:RDF>\n</x:xmpmeta>\n<?xpacket end=\"w\"?>");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static const char *webp_codec(const cpdit_video_writer *w)
{
    return w->opt.webp_lossless ? "webp-lossless" : "webp-lossy";
}

static void webp_describe(char *buf, size_t size)
{
    int v = WebPGetEncoderVersion(), m = WebPGetMuxVersion();
    snprintf(buf, size, "libwebp %d.%d.%d, libwebpmux %d.%d.%d", v >> 16, (v >> 8) & 0xff,
             v & 0xff, m >> 16, (m >> 8) & 0xff, m & 0xff);
}

/* Time of frame i in milliseconds, rounded from the exact fraction (no drift). */
static int frame_ms(const cpdit_video_writer *w, int i)
{
    return (int)lround(i * MS_PER_SECOND * w->fps_den / w->fps_num);
}

static void webp_free(webp_state *s)
{
    if (!s)
        return;
    if (s->enc)
        WebPAnimEncoderDelete(s->enc);
    atomic_file_abort(&s->af);
    free(s);
}

static cpdit_status webp_open(cpdit_video_writer *w, cpdit_error *err)
{
    webp_state *s = calloc(1, sizeof *s);
    if (!s)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "out of memory");
    WebPAnimEncoderOptions eo;
    if (!WebPConfigInit(&s->config) || !WebPAnimEncoderOptionsInit(&eo)) {
        free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                               "webp: libwebp version mismatch (headers vs library)");
    }
    s->config.lossless = w->opt.webp_lossless ? 1 : 0;
    s->config.quality = w->opt.webp_quality;
    eo.anim_params.loop_count = w->opt.webp_loops;
    eo.allow_mixed = 0; /* every frame lossless, or every frame lossy */
    if (!WebPValidateConfig(&s->config)) {
        free(s);
        return cpdit_error_set(err, CPDIT_ERR_INPUT, w->path, "webp: invalid settings");
    }
    cpdit_status st = atomic_file_begin(&s->af, w->path, err);
    if (st) {
        free(s);
        return st;
    }
    s->enc = WebPAnimEncoderNew(w->width, w->height, &eo);
    if (!s->enc) {
        webp_free(s);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                               "webp: cannot create the animation encoder (%dx%d)", w->width,
                               w->height);
    }
    w->state = s;
    return CPDIT_OK;
}

/* rgb: (H, W, 3) uint8, frame number w->frames. */
static cpdit_status webp_add(cpdit_video_writer *w, const uint8_t *rgb, cpdit_error *err)
{
    webp_state *s = w->state;
    WebPPicture pic;
    if (!WebPPictureInit(&pic))
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "webp: version mismatch");
    pic.use_argb = 1;
    pic.width = w->width;
    pic.height = w->height;
    if (!WebPPictureImportRGB(&pic, rgb, RGB_BYTES * w->width)) {
        WebPPictureFree(&pic);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "webp: out of memory");
    }
    int ok = WebPAnimEncoderAdd(s->enc, &pic, frame_ms(w, w->frames), &s->config);
    WebPPictureFree(&pic);
    if (!ok)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "webp: cannot encode frame %d: %s",
                               w->frames, WebPAnimEncoderGetError(s->enc));
    return CPDIT_OK;
}

/* Assembled animation + XMP chunk into out (free with WebPDataClear). */
static cpdit_status assemble(cpdit_video_writer *w, webp_state *s, WebPData *out,
                             cpdit_error *err)
{
    WebPData anim;
    WebPDataInit(&anim);
    if (!WebPAnimEncoderAdd(s->enc, NULL, frame_ms(w, w->frames), NULL) ||
        !WebPAnimEncoderAssemble(s->enc, &anim)) {
        cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path, "webp: cannot assemble the animation: %s",
                        WebPAnimEncoderGetError(s->enc));
        WebPDataClear(&anim);
        return CPDIT_ERR_RUNTIME;
    }
    if (w->n_tags == 0) {
        *out = anim;
        return CPDIT_OK;
    }
    char *xmp = xmp_packet(w);
    WebPMux *mux = xmp ? WebPMuxCreate(&anim, 0) : NULL;
    WebPData chunk = {(const uint8_t *)xmp, xmp ? strlen(xmp) : 0};
    WebPDataInit(out);
    int ok = mux && WebPMuxSetChunk(mux, "XMP ", &chunk, 1) == WEBP_MUX_OK &&
             WebPMuxAssemble(mux, out) == WEBP_MUX_OK;
    if (mux)
        WebPMuxDelete(mux);
    free(xmp);
    WebPDataClear(&anim);
    if (!ok) {
        WebPDataClear(out);
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, w->path,
                               "webp: cannot add the XMP metadata chunk");
    }
    return CPDIT_OK;
}

static cpdit_status webp_finish(cpdit_video_writer *w, long long *bytes, cpdit_error *err)
{
    webp_state *s = w->state;
    w->state = NULL;
    WebPData data;
    *bytes = 0;
    cpdit_status st = assemble(w, s, &data, err);
    if (!st) {
        if (data.size > 0)
            (void)fwrite(data.bytes, 1, data.size, s->af.fp); /* commit reports short writes */
        st = atomic_file_commit(&s->af, err);
        if (!st)
            *bytes = (long long)data.size;
        WebPDataClear(&data);
    }
    webp_free(s);
    return st;
}

static void webp_abort(cpdit_video_writer *w)
{
    webp_free(w->state);
    w->state = NULL;
}

const video_backend cpdit_video_webp_backend = {
    .codec = webp_codec,
    .open = webp_open,
    .add = webp_add,
    .finish = webp_finish,
    .abort = webp_abort,
    .describe = webp_describe,
    .usable = NULL,
};

/* cmd_run_video.c — the clip of `cpdit run --model WAN --frames N` (cmd_run.h): the writer of
 * OUTPUT/00000-SEED-SLUG.mp4 (or .webp, or a folder of PNG frames) opened before sampling (a bad
 * destination fails before any work), fed each frame as the decoder makes it
 * (pipeline_run.on_frame), moved into place when the clip is complete (lib/io/video_writer.h:
 * a temporary file and a rename, so a killed run leaves no torn file under the name). */
#include "config.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "bin/cmd_run.h"
#include "lib/io/video_writer.h"
#include "lib/pipeline/pipeline.h"

int run_video_name(const run_item_options *o, const char *slug, char *name, size_t n,
                   cpdit_error *err)
{
    cpdit_video_format f = CPDIT_VIDEO_MP4;
    if (o->video_format &&
        cpdit_video_format_parse(o->video_format, &f, "--format", err))
        return CPDIT_ERR_INPUT;
    char why[512];
    if (!cpdit_video_format_available(f, why, sizeof why))
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--format", "%s", why);
    if (snprintf(name, n, "%05d-%llu-%s%s", 0, (unsigned long long)o->seed, slug,
                 cpdit_video_format_extension(f)) >= (int)n)
        return cpdit_error_set(err, CPDIT_ERR_INPUT, "--output", "name too long");
    return CPDIT_OK;
}

int run_video_open(run_video *v, const run_item_options *o, const pipeline_params *prm,
                   const char *path, cpdit_error *err)
{
    cpdit_video_format f = CPDIT_VIDEO_MP4;
    if (o->video_format &&
        cpdit_video_format_parse(o->video_format, &f, "--format", err))
        return CPDIT_ERR_INPUT;
    cpdit_video_options vo;
    cpdit_video_options_init(&vo, f);
    vo.fps = o->fps > 0 ? o->fps : CPDIT_VIDEO_DEFAULT_FPS;
    char seed_text[32], steps_text[16], size_text[32], cfg_text[32], frames_text[16];
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)prm->seed);
    snprintf(steps_text, sizeof steps_text, "%d", prm->steps);
    snprintf(size_text, sizeof size_text, "%dx%d", prm->width, prm->height);
    snprintf(cfg_text, sizeof cfg_text, "%g", prm->true_cfg);
    snprintf(frames_text, sizeof frames_text, "%d", prm->frames);
    const cpdit_video_tag tags[] = {{"prompt", prm->prompt},
                                    {"negative_prompt",
                                     prm->negative_prompt ? prm->negative_prompt : ""},
                                    {"seed", seed_text},
                                    {"steps", steps_text},
                                    {"size", size_text},
                                    {"frames", frames_text},
                                    {"guidance", cfg_text},
                                    {"model", o->model},
                                    {"Software", "cpdit " PACKAGE_VERSION}};
    cpdit_error *keep = v->err; /* where a frame's failure is told: the caller's */
    memset(v, 0, sizeof *v);
    v->err = keep;
    return cpdit_video_writer_open(&v->w, path, prm->width, prm->height, &vo, tags,
                                   (int)(sizeof tags / sizeof tags[0]), err);
}

int run_video_frame(void *ctx, int f, int n_frames, const uint8_t *rgb, int height, int width)
{
    run_video *v = ctx;
    (void)f;
    (void)n_frames;
    (void)height;
    (void)width;
    if (!v->w || v->failed)
        return 1;
    const double t0 = MPI_Wtime();
    if (cpdit_video_writer_add(v->w, rgb, 1, v->err))
        v->failed = 1;
    v->encode_s += MPI_Wtime() - t0;
    return v->failed;
}

int run_video_finish(run_video *v, int st, cpdit_error *err)
{
    if (!v->w)
        return st;
    if (st) {
        cpdit_video_writer_abort(v->w);
        v->w = NULL;
        return st;
    }
    cpdit_video_result res;
    const double t0 = MPI_Wtime();
    st = cpdit_video_writer_finish(v->w, &res, err);
    v->finish_s = MPI_Wtime() - t0;
    v->w = NULL;
    if (st)
        return st;
    printf("%s\n", res.file);
    fprintf(stderr, "cpdit: video: frames %d, fps %g, duration %.3f s, codec %s, file %s\n",
            res.frames, res.fps, res.duration_s, res.codec, res.file);
    return CPDIT_OK;
}

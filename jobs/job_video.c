/* job_video.c — a video item of a batch (job_run.h VIDEOS): the group leader opens the clip's
 * writer at OUTPUT/FILE before the render (a temporary file or folder, lib/io/video_writer.h),
 * the render hook hands it each frame as the decoder makes it (so memory holds one frame, not
 * the clip: mp4 and png-frames; webp's encoder keeps the clip), and the record step moves it
 * into place and appends the index line, or drops it. An item is done only when its file is
 * in place, complete; a kill leaves a temporary name that the next run removes. */
#include "jobs/job_run_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/core/version.h"
#include "lib/cp/comm.h"
#include "lib/io/video_writer.h"

#define NUM_TEXT 32
#define REASON_MAX (CPDIT_ERROR_WHERE_MAX + CPDIT_ERROR_WHAT_MAX + 32)

static cpdit_video_format video_format_of(manifest_format f)
{
    return f == MANIFEST_FORMAT_WEBP         ? CPDIT_VIDEO_WEBP
           : f == MANIFEST_FORMAT_PNG_FRAMES ? CPDIT_VIDEO_PNG_FRAMES
                                             : CPDIT_VIDEO_MP4;
}

/* The leader: the writer of x's clip, with the generation metadata in the file. */
static cpdit_status open_writer(job_video *v, const manifest *m, const job_item *x,
                                const job_grid_info *gi, cpdit_error *err)
{
    cpdit_video_options vo;
    cpdit_video_options_init(&vo, video_format_of(x->format));
    vo.fps = x->fps;
    char seed[NUM_TEXT], steps[NUM_TEXT], size[NUM_TEXT], cfg[NUM_TEXT], frames[NUM_TEXT],
        index[NUM_TEXT], grid[3 * NUM_TEXT], shift[NUM_TEXT], sw[NUM_TEXT];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)x->seed);
    snprintf(steps, sizeof steps, "%d", x->steps);
    snprintf(size, sizeof size, "%dx%d", x->width, x->height);
    snprintf(cfg, sizeof cfg, "%g", x->true_cfg);
    snprintf(frames, sizeof frames, "%d", x->frames);
    snprintf(index, sizeof index, "%llu", (unsigned long long)x->index);
    snprintf(grid, sizeof grid, "dp %d x ring %d x ulysses %d", gi->dp, gi->ring, gi->ulysses);
    snprintf(shift, sizeof shift, "%g", x->flow_shift);
    snprintf(sw, sizeof sw, "cpdit %s", cpdit_version_string());
    cpdit_video_tag tags[] = {{"prompt", x->prompt}, {"seed", seed},   {"steps", steps},
                              {"size", size},        {"frames", frames}, {"guidance", cfg},
                              {"model", m->model},   {"index", index},  {"grid", grid},
                              {"Software", sw},      {"flow_shift", shift},
                              {"negative_prompt", x->negative_prompt}};
    int n_tags = (int)(sizeof tags / sizeof tags[0]);
    if (!x->negative_prompt)
        n_tags--;
    if (!(x->flow_shift > 0)) /* the folder's: not a setting of this item */
        tags[10] = tags[n_tags - 1], n_tags--;
    char *path = job_path_join(m->output_dir, x->file);
    cpdit_status st = path ? cpdit_video_writer_open(&v->w, path, x->width, x->height, &vo,
                                                     tags, n_tags, err)
                           : cpdit_error_set(err, CPDIT_ERR_RUNTIME, x->file, "out of memory");
    free(path);
    return st;
}

/* job_frame_sink.on_frame: one decoded frame into the writer (the leader only). */
static int video_frame(void *ctx, int f, int n_frames, const uint8_t *rgb, int height,
                       int width)
{
    job_video *v = ctx;
    (void)f, (void)n_frames, (void)height, (void)width;
    if (!v->w || v->failed)
        return 1;
    if (cpdit_video_writer_add(v->w, rgb, 1, &v->error))
        v->failed = 1;
    return v->failed;
}

cpdit_status job_video_render(const manifest *m, const job_runner_hooks *hooks,
                              const job_item *x, const cp_grid *g, const job_grid_info *gi,
                              job_video *v, job_item_times *times, cpdit_error *err)
{
    memset(v, 0, sizeof *v);
    cpdit_error_clear(&v->error);
    if (!hooks->render_video)
        return cpdit_error_set(err, CPDIT_ERR_RUNTIME, "render", "no video render hook");
    cpdit_status st = CPDIT_OK;
    if (g->cp_rank == 0)
        st = open_writer(v, m, x, gi, err);
    /* the whole group renders or none of it: the leader's writer must be open */
    long long bad = st != CPDIT_OK;
    if (g->cp_size > 1 &&
        cpdit_comm_allreduce(g->cp, &bad, 1, CPDIT_COMM_INT64, CPDIT_COMM_MAX, err))
        return CPDIT_ERR_RUNTIME;
    if (bad)
        return st ? st : cpdit_error_set(err, CPDIT_ERR_RUNTIME, x->file, "the group leader "
                                         "could not open the video file");
    job_frame_sink sink = {video_frame, v};
    st = hooks->render_video(x, g, &sink, times, hooks->ctx, err);
    if (st && v->failed) /* the writer's own reason */
        *err = v->error;
    return st;
}

void job_video_abort(job_video *v)
{
    cpdit_video_writer_abort(v->w);
    v->w = NULL;
}

int job_video_record(const manifest *m, const job_item *x, const job_grid_info *gi,
                     job_video *v, const char *failure, double t0, job_item_times *times,
                     const char *index_path, cpdit_status *fatal, cpdit_error *fatal_err)
{
    const double t_write = job_now();
    char reason[REASON_MAX];
    const char *error = failure;
    if (failure) {
        job_video_abort(v);
    } else {
        cpdit_error werr;
        cpdit_error_clear(&werr);
        cpdit_video_result res;
        cpdit_status st = v->w ? cpdit_video_writer_finish(v->w, &res, &werr)
                               : cpdit_error_set(&werr, CPDIT_ERR_RUNTIME, x->file,
                                                 "no video writer");
        v->w = NULL;
        if (st) {
            snprintf(reason, sizeof reason, "writing the video: %s%s%s", werr.where,
                     werr.where[0] ? ": " : "", werr.what);
            error = reason;
        }
        /* the frames went to the writer while they were decoded: writing is the finish */
        times->write_s = job_now() - t_write;
    }
    size_t len;
    char *line = job_index_line_timed(x, gi, job_now() - t0, times, error, &len);
    cpdit_status st = line ? job_index_append(index_path, line, len, fatal_err)
                           : cpdit_error_set(fatal_err, CPDIT_ERR_RUNTIME, index_path,
                                             "out of memory");
    free(line);
    if (st) {
        *fatal = st;
        return -1;
    }
    return error ? 1 : 0;
}

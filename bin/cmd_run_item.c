/* cmd_run_item.c — `cpdit run --model DIR|builtin:tiny --prompt P ...`: one image, no manifest.
 *
 * Every rank of the MPI job takes part: the ranks form dp groups of ring x ulysses; the item
 * runs on data-parallel group 0 (other groups have nothing to do for a single item and wait),
 * except with true CFG (--negative-prompt, --true-cfg > 1) and two or more groups: then group 1
 * computes the negative branch beside group 0 (CFG-parallel; see pipeline_run.cfg_comm).
 * With --vae-parallel world the other groups' ranks join the item's VAE decode, split by rows
 * over every rank of the job (pipeline_run.vae_world). The PNG is written by CP rank 0 of that
 * group: OUTPUT/00000-<seed>-<slug>.png, through a
 * temporary file and rename, with the generation parameters as PNG text chunks.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bin/cli.h"
#include "lib/cp/comm_mpi.h"
#include "bin/cmd_run.h"
#include "lib/builtin/builtin_model.h"
#include "lib/cp/grid_mpi.h"
#include "jobs/job_run.h"
#include "jobs/job_items.h"
#include "jobs/job_placement.h"
#include "lib/models/model.h"
#include "lib/models/model_defaults.h"
#include "lib/pipeline/pipeline.h"
#include "lib/io/png_writer.h"
#include "lib/io/regular_file.h"
#include "topology/cost_model.h"
#include "topology/grid_choice.h"

#define SUB "run"

/* Progress on a terminal: one line rewritten in place; in a log: nothing per step, unless
 * --verbose (then a plain line per step, with the bytes read from storage during the step
 * where the kernel says). */
static void progress_line(int step, int steps, double seconds, long long read_bytes, void *ctx)
{
    const run_item_options *o = ctx;
    if (o && o->verbose) { /* plain lines, also under mpirun */
        if (read_bytes >= 0)
            cli_verbose_line("step %d/%d %.3f s, disk read %lld bytes", step, steps, seconds,
                             read_bytes);
        else
            cli_verbose_line("step %d/%d %.3f s", step, steps, seconds);
        return;
    }
    if (!isatty(STDERR_FILENO))
        return;
    fprintf(stderr, "\rcpdit: step %d/%d  %.2f s/step", step, steps, seconds);
    if (step == steps)
        fputc('\n', stderr);
}

void run_item_defaults(run_item_options *o)
{
    memset(o, 0, sizeof *o);
    o->model = "builtin:tiny";
    o->width = o->height = 0; /* 0: the model's (run_item_model_defaults) */
    o->steps = 0;             /* 0: the model's; a folder: 28 if guidance-distilled, else 4 */
    o->guidance = 3.5f;
    o->true_cfg = 1.0f;
    o->output = "out";
    o->ring = o->ulysses = 0;
    o->variant = NULL; /* auto */
}

void run_item_model_defaults(run_item_options *o)
{
    builtin_run_defaults d; /* lib/models/model_defaults.h: shared with manifests */
    const int builtin = builtin_model_is_spec(o->model);
    o->is_video = model_run_defaults(o->model, 1, &d) == MODEL_KIND_VIDEO;
    if (o->is_video) {
        if (!o->frames)
            o->frames = d.frames;
        /* Wan's guidance_scale is true CFG: --guidance or --true-cfg say it */
        if (o->guidance_given && !o->true_cfg_given) {
            o->true_cfg = o->guidance;
            o->true_cfg_given = 1;
        }
    }
    if (!o->width)
        o->width = d.width;
    if (!o->height)
        o->height = d.height;
    if (!o->max_sequence_length)
        o->max_sequence_length = d.max_sequence_length; /* 0 stays: the pipeline's */
    if (builtin && !o->steps)
        o->steps = d.steps;
    if (!o->true_cfg_given) /* true CFG as the model is meant to run */
        o->true_cfg = (float)d.true_cfg;
    if (!o->negative_prompt)
        o->negative_prompt = d.negative_prompt;
}

/* The group leader of an item that rendered: the PNG (OUTPUT/name), its path on stdout, and
 * where the time and the weights went (stderr). */
static cpdit_status write_and_report(const run_item_options *o, pipeline *p,
                                     const pipeline_params *prm, const uint8_t *rgb,
                                     const pipeline_timings *tmp, const char *name,
                                     const cp_grid *g, const cp_grid *vae_world,
                                     cpdit_error *err)
{
    const pipeline_timings tm = *tmp;
    cpdit_status st = pipeline_make_dirs(o->output, err);
    char seed_text[32], steps_text[16], size_text[32], guidance_text[32];
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)o->seed);
    snprintf(steps_text, sizeof steps_text, "%d", prm->steps);
    snprintf(size_text, sizeof size_text, "%dx%d", prm->width, prm->height);
    snprintf(guidance_text, sizeof guidance_text, "%g", prm->guidance);
    cpdit_png_text text[] = {{"prompt", prm->prompt},   {"seed", seed_text},
                             {"steps", steps_text},     {"size", size_text},
                             {"guidance", guidance_text}, {"model", o->model},
                             {"Software", "cpdit " PACKAGE_VERSION}};
    char out_path[4096 + 200];
    snprintf(out_path, sizeof out_path, "%s/%s", o->output, name);
    const double t_write = MPI_Wtime();
    if (!st)
        st = cpdit_png_write_rgb8(out_path, rgb, prm->width, prm->height, text,
                                  (int)(sizeof text / sizeof text[0]), err);
    if (!st) /* where the time went (the index line's "times" of a batch) */
        fprintf(stderr, "cpdit: times: text %.3f s, %d steps %.3f s (%.3f s/step, "
                "slowest %.3f s), vae %.3f s%s, write %.3f s\n", tm.text_s, tm.steps,
                tm.sample_s, tm.steps ? tm.sample_s / tm.steps : 0.0, tm.step_max_s,
                tm.vae_s + tm.vae_load_s, tm.vae_load_s > 0 ? " (with loading)" : "",
                MPI_Wtime() - t_write);
    text_weight_stats cs, ts;
    pipeline_text_weight_stats(p, &cs, &ts);
    if (!st && o->verbose && (cs.streaming || ts.streaming)) /* over their budget */
        fprintf(stderr, "cpdit: text encoders streamed per layer: making the weights "
                "%.3f s (CLIP %.3f, T5 %.3f; the next layer on a helper thread), the "
                "forwards waited %.3f s for them\n", cs.create_s + ts.create_s,
                cs.create_s, ts.create_s, cs.stall_s + ts.stall_s);
    if (!st && prm->cache.kind != PIPELINE_CACHE_NONE) {
        char spec[64];
        pipeline_cache_describe(&prm->cache, spec, sizeof spec);
        fprintf(stderr, "cpdit: cache %s: %d forwards full, %d cached, saved %.3f s, state "
                "%zu bytes per rank, steps %s\n", spec, tm.cache.full, tm.cache.cached,
                pipeline_cache_saved_s(&tm.cache), tm.cache.state_bytes, tm.cache.pattern);
    }
    if (!st && tm.read_step1_bytes >= 0) /* weights that fit: nothing after step 1 */
        fprintf(stderr, "cpdit: disk read: step 1 %lld bytes, later steps %lld bytes\n",
                tm.read_step1_bytes, tm.read_later_bytes > 0 ? tm.read_later_bytes : 0);
    if (!st)
        printf("%s\n", out_path);
    long n_dec = 0;
    const double t_dec = pipeline_decode_seconds(p, &n_dec);
    model_weight_stats ws;
    pipeline_weight_stats(p, &ws);
    char how[96];
    if (ws.resident)
        snprintf(how, sizeof how, "made once");
    else if (ws.stream_sharers > 1)
        snprintf(how, sizeof how, "streamed per block, slots shared by %d ranks",
                 ws.stream_sharers);
    else
        snprintf(how, sizeof how, "streamed per block, slots its own");
    if (!st && o->verbose)
        fprintf(stderr, "cpdit: transformer weights: %s (largest block %.1f MiB); "
                "made in %.3f s, the steps waited %.3f s; %llu blocks made by another "
                "rank (CP rank 0's figures)\n", how,
                ws.largest_group_bytes / 1048576.0, ws.create_seconds,
                ws.stall_seconds, ws.peer_groups);
    if (!st && n_dec)
        fprintf(stderr, "cpdit: vae decode: %.3f s (%s)\n", t_dec,
                vae_world ? "split over all ranks of the job"
                : o->vae_tiling ? "tiled, CP rank 0"
                : g->cp_size > 1 && !o->vae_single_rank ? "split over the CP group"
                                                         : "CP rank 0");
    return st;
}

/* What would fail only after rendering is refused before the model loads: the prompt texts
 * (UTF-8, as a manifest's), the output folder, and the PNG's path (not a FIFO or a device). */
static cpdit_status check_before_render(const run_item_options *o, const char *png_name,
                                        cpdit_error *err)
{
    cpdit_status st = cli_check_text_option("--prompt", o->prompt, err);
    if (!st)
        st = cli_check_text_option("--negative-prompt", o->negative_prompt, err);
    if (!st)
        st = cli_check_output_folder("--output", o->output, err);
    char path[4096 + 200];
    snprintf(path, sizeof path, "%s/%s", o->output, png_name);
    if (!st)
        st = cpdit_check_output_file(path, "cannot write the output file", err);
    return st;
}

int run_item(const run_item_options *o_given)
{
    run_item_options resolved = *o_given;
    run_item_model_defaults(&resolved);
    const run_item_options *o = &resolved;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cpdit_error err;
    cpdit_error_clear(&err);
    cp_grid *g = NULL;
    pipeline *p = NULL;
    uint8_t *rgb = NULL;
    int ring = o->ring ? o->ring : 1, ulysses = o->ulysses ? o->ulysses : 1;
    const char *variant = o->variant;
    int anything = o->anything;
    char path[4096], name[160 + JOB_SLUG_MAX], slug[JOB_SLUG_MAX + 1];
    job_slug(o->prompt ? o->prompt : "", slug);
    snprintf(name, sizeof name, "%05d-%llu-%s.png", 0, (unsigned long long)o->seed, slug);
    cpdit_status st = o->is_video ? run_video_name(o, slug, name, sizeof name, &err) : CPDIT_OK;
    if (!st)
        st = check_before_render(o, name, &err);
    st = job_agree_status(MPI_COMM_WORLD, st, &err); /* all ranks stop here, or none */
    if (!st && !o->ring && !o->ulysses) {
        /* no grid given: the planner's choice for one image from the topology file (or
         * $CPDIT_TOPOLOGY), else from a quick probe now (topology/grid_choice.h) */
        grid_choice gc;
        grid_choice_request rq = {o->topology, o->model, o->width, o->height,
                                  o->max_sequence_length, o->steps, 1, size,
                                  o->is_video ? o->frames : 0,
                                  o->true_cfg > 1.0f && o->negative_prompt != NULL, o->backend,
                                  0 /* threads: this process's */,
                                  o->output /* the job-start probe kept there */};
        st = grid_choice_world(MPI_COMM_WORLD, &rq, &gc, &err);
        if (!st) {
            ring = gc.ring;
            ulysses = gc.ulysses;
            if (!variant || strcmp(variant, "auto") == 0)
                variant = gc.variant;
            anything |= strstr(gc.variant, "+anything") != NULL;
            char line[GRID_CHOICE_REASON_MAX + 128];
            if (rank == 0)
                fprintf(stderr, "grid: %s\n", grid_choice_line(&gc, line, sizeof line));
        }
    }
    const cpdit_backend *grid_be = NULL; /* the grid's communicators move this backend's memory */
    if (!st)
        st = cpdit_backend_resolve(o->backend, &grid_be, &err);
    if (!st)
        st = cp_grid_create_for(MPI_COMM_WORLD, 0, ring, ulysses, grid_be, &g, &err);
    st = job_agree_status(MPI_COMM_WORLD, st, &err); /* placement below is collective */
    if (!st)
        job_placement_log(MPI_COMM_WORLD, g, NULL, o->verbose, stderr);
    const double t_open = MPI_Wtime();
    if (!st)
        st = run_open_pipeline(&p, o->model, o, &err);
    if (!st && rank == 0 && o->verbose) /* minutes at full size: say where they went */
        fprintf(stderr, "cpdit: model loaded in %.3f s\n", MPI_Wtime() - t_open);
    pipeline_params prm = {o->prompt, o->negative_prompt, o->seed, o->width, o->height,
                           o->steps, o->guidance, o->true_cfg, o->max_sequence_length,
                           o->is_video ? o->frames : 0, o->flow_shift, {0}};
    if (!st && o->cache) /* checked by the option parser */
        st = pipeline_cache_parse(o->cache, "--cache", &prm.cache, &err);
    if (!st) {
        if (!prm.steps)
            prm.steps = pipeline_default_steps(p);
        st = pipeline_check_params(p, &prm, &err);
    }
    pipeline_run run;
    memset(&run, 0, sizeof run);
    run.grid = g;
    run.progress = progress_line;
    run.ctx = (void *)o;
    pipeline_timings tm;
    memset(&tm, 0, sizeof tm);
    run.timings = &tm;
    run.vae_single_rank = o->vae_single_rank;
    run.vae_tiling = o->vae_tiling;
    if (!st)
        st = cm_variant_parse(variant, &run.attn, &err);
    run.attn.anything |= anything;
    if (o->dump) {
        if (snprintf(path, sizeof path, "%s/%05d", o->dump, 0) >= (int)sizeof path)
            st = cpdit_error_set(&err, CPDIT_ERR_INPUT, "--dump", "path too long");
        run.dump_dir = path;
    }
    /* setup can fail on some ranks only (a folder not mounted on one node): agree first,
     * with the lowest failing rank's message, so no rank waits in a collective alone */
    st = job_agree_status(MPI_COMM_WORLD, st, &err);
    cp_grid *vae_world = NULL; /* --vae-parallel world: dp = 1 over every rank */
    if (!st && o->vae_world) {
        st = cp_grid_create_for(MPI_COMM_WORLD, 1, size, 1, grid_be, &vae_world, &err);
        st = job_agree_status(MPI_COMM_WORLD, st, &err);
    }
    run.vae_world = vae_world;
    /* CFG-parallel: with true CFG and two or more data-parallel groups, groups 0 and 1 run
     * the prompt and the negative prompt side by side (ranks paired by CP coordinates) */
    cpdit_comm *cfg_comm = NULL;
    const int cfg = o->true_cfg > 1.0f && o->negative_prompt; /* "" too, as diffusers */
    if (!st && cfg && g->dp >= 2) {
        MPI_Comm pair = MPI_COMM_NULL;
        MPI_Comm_split(cpdit_comm_mpi_handle(g->dp_comm), g->dp_index < 2 ? 0 : MPI_UNDEFINED,
                       g->dp_index, &pair);
        if (pair != MPI_COMM_NULL)
            st = cpdit_comm_mpi_create(pair, 1, &cfg_comm, &err);
        run.cfg_comm = cfg_comm;
        st = job_agree_status(MPI_COMM_WORLD, st, &err);
    }
    /* a clip: its writer opened now on the writing rank (a bad destination fails before
     * sampling), fed each frame as it is decoded */
    run_video video;
    memset(&video, 0, sizeof video);
    cpdit_error verr;
    cpdit_error_clear(&verr);
    video.err = &verr;
    const int writer = !st && g->cp_rank == 0 && g->dp_index == 0;
    if (o->is_video) {
        char vpath[4096 + 200];
        snprintf(vpath, sizeof vpath, "%s/%s", o->output, name);
        if (writer && !(st = pipeline_make_dirs(o->output, &err)))
            st = run_video_open(&video, o, &prm, vpath, &err);
        run.on_frame = run_video_frame;
        run.frame_ctx = &video;
        st = job_agree_status(MPI_COMM_WORLD, st, &err);
    }
    if (!st && (g->dp_index == 0 || (cfg_comm && g->dp_index == 1))) {
        st = cli_end_job_if_broken(pipeline_generate(p, &prm, &run, &rgb, &err), &err);
        if (!st && o->verbose && prm.cache.kind != PIPELINE_CACHE_NONE) /* decisions per rank */
            fprintf(stderr, "cpdit: rank %d (group %d, CP rank %d) cache steps %s\n", rank,
                    g->dp_index, g->cp_rank, tm.cache.pattern);
        if (video.failed && st) /* the writer's own reason */
            err = verr;
        if (o->is_video && writer) {
            st = run_video_finish(&video, st, &err);
            if (!st) /* as an image's line; frames are encoded while the decode runs */
                fprintf(stderr, "cpdit: times: text %.3f s, %d steps %.3f s (%.3f s/step, "
                        "slowest %.3f s), vae %.3f s%s (encoding frames %.3f s of it), "
                        "write %.3f s\n", tm.text_s, tm.steps, tm.sample_s,
                        tm.steps ? tm.sample_s / tm.steps : 0.0, tm.step_max_s,
                        tm.vae_s + tm.vae_load_s, tm.vae_load_s > 0 ? " (with loading)" : "",
                        video.encode_s, video.finish_s);
        } else if (!st && g->cp_rank == 0 && g->dp_index == 0)
            st = write_and_report(o, p, &prm, rgb, &tm, name, g, vae_world, &err);
    } else if (!st && vae_world) { /* no part in the item: join its decode */
        cli_end_job_if_broken(pipeline_vae_world_idle(p, &run, &err), &err);
    }
    int code = st ? (st == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME) : CLI_EXIT_OK;
    /* the render can fail on one group only: agree on the worst code, report once */
    cpdit_status all = job_agree_status(MPI_COMM_WORLD, st, &err);
    int worst = all ? (all == CPDIT_ERR_INPUT ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME) : CLI_EXIT_OK;
    if (worst < code)
        worst = code;
    if (all && rank == 0)
        cli_report(&err);
    free(rgb);
    cpdit_comm_destroy(cfg_comm);
    cp_grid_destroy(vae_world);
    pipeline_close(p);
    cp_grid_destroy(g);
    return worst;
}

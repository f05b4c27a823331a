/* cmd_forward.h — `cpdit forward`: run one model component on tensors from a safetensors file.
 *
 *   cpdit forward --model DIR --component transformer|vae|text_encoder --inputs IN.safetensors
 *                 --output OUT.safetensors [--ulysses U] [--ring R] [--anything]
 *                 [--attention VARIANT] [--attention-backend KERNEL] [--backend NAME]
 *                 [--weight-format native|fp32] [--no-weight-sharing] [--vae-parallel on|off]
 *                 [--verbose]
 *
 * cmd_forward parses the options, initialises MPI, and runs the component on every rank of
 * the job; rank 0 writes the output. The transformer part lives in cmd_forward.c; the VAE
 * part is provided by the VAE module as vae_forward_command (below) and linked in when that
 * module is part of the build.
 */
#ifndef CPDIT_CMD_FORWARD_H
#define CPDIT_CMD_FORWARD_H

#include "lib/core/cpdit_error.h"

typedef struct forward_options {
    const char *model;             /* --model DIR (pipeline root, component folder or file) */
    const char *component;         /* --component: "transformer", "vae" or "text_encoder" */
    const char *inputs;            /* --inputs IN.safetensors */
    const char *output;            /* --output OUT.safetensors */
    const char *attention;         /* --attention: the CP variant (cp_attention_config_parse) */
    const char *attention_backend; /* --attention-backend: the backend's local attention
                                      kernel (NULL: its default) */
    const char *backend;           /* --backend NAME (NULL: the best available) */
    const char *weight_format;     /* --weight-format: native (bf16 as stored) or fp32 */
    int no_weight_sharing;         /* --no-weight-sharing: a copy of the weights per rank */
    size_t weight_memory;          /* --weight-memory SIZE: budget of resident weights (0:
                                      unlimited); smaller than the model = streamed per block */
    int no_weight_prefetch;        /* --no-weight-prefetch: streamed blocks made when needed */
    int ulysses, ring;             /* --ulysses U, --ring R (default 1 each) */
    int anything;                  /* --anything: uneven lengths / head shares allowed */
    int verbose;                   /* --verbose: timings and memory on stderr (rank 0) */
    int vae_parallel;              /* --vae-parallel on|off (default on): split the decode */
    int world_rank, world_size;    /* of MPI_COMM_WORLD, filled after MPI_Init */
} forward_options;

/* `cpdit forward ...`; argv[0] is "forward". Returns the process exit code (0, 1, 2). */
int cmd_forward(int argc, char **argv);

/* The VAE decoder's forward (latent_sample -> sample), called on every rank after MPI_Init
 * with the parsed options; rank 0 writes opt->output. Returns CPDIT_OK or the status with err
 * filled (every rank should return the same status; rank 0's message is printed). Defined by
 * the VAE module; referenced weakly here so that a build without it still links. */
cpdit_status vae_forward_command(const forward_options *opt, cpdit_error *err);

/* The Wan transformer's forward (bin/cmd_forward_wan.c), called on every rank after MPI_Init
 * for a model of the wan family (cmd_forward.c's component table: model_detect.h's name).
 * Returns as vae_forward_command. */
cpdit_status wan_transformer_forward_command(const forward_options *opt, cpdit_error *err);
int wan_forward_is_wan(const char *model);

/* The text encoder's forward (input_ids, attention_mask -> last_hidden_state; T5 or UMT5),
 * bin/cmd_forward_text.c; called on every rank like vae_forward_command. */
cpdit_status text_encoder_forward_command(const forward_options *opt, cpdit_error *err);

#endif

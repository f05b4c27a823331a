/* cpdit.c — the cpdit program: global options and subcommand dispatch.
 *
 *   cpdit [--help | --version] <subcommand> [options]
 *
 * Each subcommand lives in its own bin/cmd_*.c file and is listed in `commands` below.
 * Subcommands whose implementation has not landed yet say so plainly and exit 1.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin/build_info.h"
#include "bin/cli.h"
#include "kernels/host_runtime.h"

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const cli_command commands[] = {
    {"run", "generate images: one prompt, or a YAML batch manifest",
     "usage: cpdit run MANIFEST.yaml [--check | --status] [--output DIR] [--dp D] [--ring R]\n"
     "                 [--ulysses U] [--anything] [--topology FILE] [--attention VARIANT]\n"
     "                 [--attention-backend KERNEL] [--backend NAME]\n"
     "       cpdit run --model DIR|builtin:NAME --prompt P [--seed S] [--width W] [--height H]\n"
     "                 [--steps N] [--guidance G] [--negative-prompt N] [--true-cfg C]\n"
     "                 [--max-sequence-length L] [--output DIR] [--ring R] [--ulysses U]\n"
     "                 [--anything] [--attention VARIANT] [--attention-backend KERNEL]\n"
     "                 [--backend NAME] [--dump DIR]\n"
     "                 [--weight-format native|fp32] [--weight-memory SIZE]\n"
     "                 [--no-weight-sharing] [--topology FILE]\n"
     "                 video models: [--frames N] [--fps F] [--flow-shift S]\n"
     "                 [--format mp4|webp|png-frames]\n"
     "       (both forms) [--vae-parallel on|off|world] [--vae-tiling] [--verbose]\n"
     "                 [--cache fbcache[:THRESHOLD]|taylorseer[:ORDER,INTERVAL]|none]\n"
     "\n"
     "Runs the FLUX.1 text-to-image pipeline on every rank of the MPI job (start it with\n"
     "srun or mpirun). Ranks form data-parallel groups of ring x ulysses context-parallel\n"
     "ranks; each group renders its share of the items and writes PNG files (temporary\n"
     "file + rename) and one JSON line per item to OUTPUT/index.jsonl.\n"
     "\n"
     "Without a manifest: one image, OUTPUT/00000-SEED-SLUG.png (default output: out/).\n"
     "Defaults: seed 0; guidance 3.5; a folder: 1024x1024, 28 steps for guidance-distilled\n"
     "models (FLUX.1-dev), 4 otherwise (schnell); a built-in model its own (also for what a\n"
     "manifest leaves out): builtin:tiny 256x256, 28 steps; builtin:shapes as trained,\n"
     "128x128, 20 steps, 32 T5 tokens, --true-cfg 4 with the empty negative prompt.\n"
     "--dp D (manifest form): data-parallel groups (default: the ranks left over by ring x\n"
     "ulysses). builtin:NAME is builtin:tiny or builtin:shapes (`cpdit builtin list`).\n"
     "The run starts with a placement line (ranks x threads, each rank's CPUs) and warns when\n"
     "a host is oversubscribed. --status exits 3 while items are left, 4 when some failed.\n"
     "Without grid flags (and with `parallel: auto` in a manifest) the grid is the one\n"
     "`cpdit plan` chooses from --topology FILE or $CPDIT_TOPOLOGY (for the manifest's item\n"
     "count; one image: latency; measured `cpdit tune` winners first); without a topology\n"
     "file every rank runs the probe's quick mode first (about a second per rank pair;\n"
     "`cpdit probe` once per partition saves it) and plans on that, keeping it in the output\n"
     "folder (.cpdit-probe-KEY.json, or in $CPDIT_PROBE_CACHE) for later runs on the same\n"
     "hosts, hardware and rank layout (requeues skip the probe); if that probe fails, all\n"
     "ranks run data-parallel. The summary and each index line say which grid and why\n"
     "(\"grid: dp 2 ring 1 ulysses 2 unified (predicted from ...)\"). Sizes whose token count\n"
     "does not divide the group switch on the uneven ('anything') attention modes.\n"
     "--attention: the context-parallel variant: auto, ring, ring-allgather, ulysses,\n"
     "unified, unified-allgather. --backend: the kernel table the models run on (cpdit\n"
     "--version lists those built in; default: the best available). --attention-backend:\n"
     "that backend's local attention kernel (cpu: cpu-flash, cpu-reference; cuda:\n"
     "cuda-flash, cuda-reference, cudnn; auto: cuda times cuda-flash and cudnn once per\n"
     "shape and keeps the faster, cpu takes cpu-flash; default: the first listed).\n"
     "A Wan 2.1 folder or builtin:wan-tiny makes a video (README \"Videos\"): one clip,\n"
     "OUTPUT/00000-SEED-SLUG.mp4 (--format webp: .webp; png-frames: a folder of\n"
     "frame_NNNNN.png), --frames 4k+1 (default 81; wan-tiny 17), --fps (16), --flow-shift\n"
     "(the folder's scheduler config), WanPipeline's 832x480, 50 steps and guidance 5 as\n"
     "true CFG against the empty negative prompt (--guidance or --true-cfg set it).\n"
     "True CFG (--negative-prompt N --true-cfg C, C > 1) runs CFG-parallel when the job has\n"
     "two or more data-parallel groups (e.g. mpirun -np 4 ... --ring 1 --ulysses 2): group 1\n"
     "computes the negative branch beside group 0. In a batch whose defaults have true CFG,\n"
     "an even number of groups pairs up (2j with 2j + 1): each pair renders its items with\n"
     "one branch per group (half the time per item, the same images per hour); the summary\n"
     "lists both groups of a pair, the second marked as the partner.\n"
     "--cache (manifest: cache:) skips transformer work between steps: fbcache[:T] (first-\n"
     "block cache, diffusers' FirstBlockCache: the remaining blocks are skipped while the\n"
     "first block's residual changed by at most T relative to the last full step; default\n"
     "0.05) or taylorseer[:ORDER,INTERVAL] (full steps 0-2 and then every INTERVAL, the\n"
     "others forecast from finite differences; default 1,5); none (default) runs every\n"
     "block. The ranks of a CP group take the same decisions (the difference is reduced\n"
     "over the group); the item line and the index (\"cache\") give full and cached\n"
     "forwards, the time saved and the steps (F full, C cached).\n"
     "--dump DIR writes DIR/<item>/noise.safetensors (tensor latents, the initial noise\n"
     "(1, 16, H/8, W/8) as drawn from the seed), DIR/<item>/schedule.json and\n"
     "DIR/<item>/image.safetensors (tensor image, the decoded (1, 3, H, W) in fp32).\n"
     "--weight-format: native (default) computes the linear layers from the weights as\n"
     "stored (bf16 packed once at load, bf16 GEMM with fp32 sums); fp32 converts them once\n"
     "and uses SGEMM (exact reference, twice the memory). --weight-memory SIZE (e.g. 20G):\n"
     "the transformer's weights are made once and kept when they fit in SIZE (default: 80%\n"
     "of the available memory), else streamed block by block at every step. The ranks of a\n"
     "node share one copy of them (MPI shared memory) unless --no-weight-sharing; streamed,\n"
     "the ranks of a CP group on a node share the two block slots, each block made once.\n"
     "The VAE decode is split by rows over the CP group (exact); --vae-parallel off decodes\n"
     "on CP rank 0 alone; --vae-parallel world (manifest: vae_parallel: world) splits it\n"
     "over EVERY rank of the job, so data-parallel groups that have no item join the\n"
     "decode (e.g. one prompt on dp 2 x ulysses 2: 4 ranks decode instead of 2). Batches\n"
     "then run in rounds: round k is every group's k-th item; the round's images are\n"
     "decoded one after another by all ranks (same pixels as the group decode to float\n"
     "rounding); a stop ends every group at the same round. --vae-tiling (manifest:\n"
     "vae_tiling: true) decodes on CP rank 0 in overlapping tiles as diffusers'\n"
     "enable_tiling: less memory, APPROXIMATE; never the default (not with world). The run\n"
     "ends with the decode time and how it ran; index lines say it in \"grid\": {\"vae\"}.\n"
     "--verbose: plain lines (also under mpirun and in logs) with the model's loading time\n"
     "and each step's time; every run ends with where the time went (text encoding, steps,\n"
     "VAE decode, writing).\n",
     cmd_run},
    {"submit", "check a manifest, write its sbatch script and submit it to Slurm",
     "usage: cpdit submit MANIFEST.yaml [--dry-run] [-N|--nodes N] [--ntasks-per-node T]\n"
     "                    [--gpus-per-node G] [-c|--cpus-per-task C] [-t|--time T]\n"
     "                    [-p|--partition P] [-A|--account A] [-q|--qos Q] [-a|--array K[%M]]\n"
     "                    [--exclusive] [--cpu-bind B] [--gpu-bind B] [--max-requeues N]\n"
     "                    [--setup FILE] [--output DIR] [--topology FILE] [--dp D] [--ring R]\n"
     "                    [--ulysses U] [--anything] [--signal-lead S]\n"
     "                    [--weight-format native|fp32] [-- extra sbatch options]\n"
     "\n"
     "Checks the manifest as `cpdit run MANIFEST --check` does (a bad one is refused with\n"
     "FILE:LINE:COL and exit 2; nothing is queued), writes OUTPUT/cpdit-job.sbatch (a\n"
     "commented bash script), submits it with `sbatch --parsable` and prints the job id.\n"
     "--dry-run prints the script and writes and submits nothing.\n"
     "The script runs `cpdit run MANIFEST` under `srun --mpi=pmix` (when `srun --mpi=list`\n"
     "has pmix) or mpirun: one task per GPU with --gpus-per-node (each rank takes the GPU of\n"
     "its local rank), else --ntasks-per-node tasks (default 1). Slurm sends USR1 S seconds\n"
     "(default 120) before the time limit; the script's trap (USR1 or TERM) writes a stop\n"
     "request and sends USR1 to the ranks, cpdit stops after the current step, writes its\n"
     "stop marker and exits 3, and the script requeues the job; logs go to OUTPUT/slurm-*.out\n"
     "(appended). --array K splits the items into K disjoint shares (item i goes to task\n"
     "i mod K); K%M runs at most M of them at once. Options after -- are added as #SBATCH\n"
     "lines. Watch with `cpdit status OUTPUT`.\n"
     "Placement: srun gets -c C (and SRUN_CPUS_PER_TASK is exported: Slurm >= 22.05 does not\n"
     "pass --cpus-per-task on to srun), --cpu-bind=cores and with GPUs --gpu-bind=single:1\n"
     "(--cpu-bind / --gpu-bind B to change, off to leave out); the mpirun fallback binds\n"
     "--bind-to core --map-by slot:PE=C ($CPDIT_MPIRUN_BIND at job time replaces it); C is\n"
     "also each rank's threads (CPDIT_THREADS). --exclusive: whole nodes. --max-requeues\n"
     "N: once SLURM_RESTART_COUNT reaches N a stopped job ends with exit 3, not requeued.\n"
     "--setup FILE (or --prolog): its lines (module load, source env.sh) run in the script\n"
     "before the launcher. --time must be longer than the signal lead (refused otherwise).\n"
     "Grid: --dp/--ring/--ulysses, else the manifest's parallel:; for parallel: auto the\n"
     "script passes --topology FILE (or $CPDIT_TOPOLOGY as set when submitting) to the run;\n"
     "without one, the run reads $CPDIT_TOPOLOGY at job start or runs a quick probe.\n"
     "--weight-format is passed on to `cpdit run` (fp32: the exact path, e.g. to compare\n"
     "a multi-node job's images with a 1-rank run's).\n",
     cmd_submit},
    {"status", "items done, failed and left in an output folder, per array task",
     "usage: cpdit status OUTPUT_DIR [--manifest M]\n"
     "       cpdit run MANIFEST --status [--output DIR]\n"
     "\n"
     "Counts the manifest's items (the manifest of the folder's last run, from\n"
     "OUTPUT_DIR/.cpdit-run.json, unless --manifest names one): done (complete PNG), failed\n"
     "(a failed index line and no PNG), left; per array task and in total. Also the index\n"
     "lines over all index*.jsonl files and duplicates, a run holding the folder's lock, and\n"
     "stop markers of runs that a signal ended. Writes nothing. Exits 0 when every item is\n"
     "done, 3 while items are left (none failed), 4 when some failed: a script can loop on\n"
     "it.\n",
     cmd_status},
    {"launch", "run mpirun (or another launcher) so that a stop exits 3, resumable",
     "usage: cpdit launch [--] COMMAND...\n"
     "       e.g. cpdit launch mpirun -np 4 cpdit run batch.yaml\n"
     "\n"
     "A plain mpirun that gets SIGTERM kills the ranks after its timeout and exits 1, even\n"
     "when cpdit stopped cleanly. launch runs COMMAND in a process group of its own and\n"
     "turns the first SIGTERM, SIGINT, SIGHUP or SIGUSR1 it gets into one SIGUSR1 to\n"
     "COMMAND, which mpirun passes on to every rank without killing them: cpdit stops after\n"
     "the current step, writes its stop marker and exits 3. A second signal sends SIGTERM to\n"
     "COMMAND's group. Exit status: COMMAND's (128+N when it died of signal N), and 3\n"
     "(stopped, resumable: rerun the same command) whenever the stop marker of COMMAND's\n"
     "`run MANIFEST [--output DIR]` appeared while it ran.\n",
     cmd_launch},
    {"probe", "measure the machine (hwloc, NVML, links, compute) into a topology file",
     cmd_probe_help, cmd_probe},
    {"plan", "rank the dp x ring x ulysses grids by predicted time; show the choice",
     "usage: cpdit plan [MANIFEST.yaml] [--manifest FILE] [-m|--model DIR|builtin:NAME]\n"
     "                  [-t|--topology FILE] [-n|--ranks N] [--width W] [--height H]\n"
     "                  [--frames N] [--steps S] [--max-sequence-length L] [--cfg | --no-cfg]\n"
     "                  [--objective latency|throughput] [--images K] [--threads T]\n"
     "                  [--backend NAME] [--json]\n"
     "\n"
     "Predicts, for every way to split N ranks (default: the ranks the topology file was\n"
     "measured with) into data-parallel groups of ring x ulysses context-parallel ranks, the\n"
     "time of one transformer step, its compute / communication split, the ring transfer that\n"
     "hides behind compute, memory per rank, images per hour and core-hours (GPU-hours on\n"
     "GPU ranks) per 1000 images, from the model's config, the size and the link and compute\n"
     "rates in FILE (written by `cpdit probe`; default $CPDIT_TOPOLOGY). The first column #\n"
     "is the ranking.\n"
     "The request has the defaults `cpdit run` uses: a manifest's (model, size or its first\n"
     "size, max_sequence_length, steps, true_cfg with a negative prompt: --cfg, its item\n"
     "count: --images), else the model's run defaults (builtin:shapes 128x128, 20 steps, 32\n"
     "T5 tokens, CFG on; a folder 1024x1024, 28 steps, its family's tokens); options given\n"
     "win. The line `request: ...` shows the key of the step (size, frames, text tokens,\n"
     "CFG, ranks x threads, backend, dtype); grids measured by `cpdit tune` for exactly\n"
     "that key rank by measurement, and for the same image count tune's own choice first.\n"
     "--objective latency ranks by the time of one image; throughput (the default with\n"
     "--images K > 1 or a manifest of several items) by the time of the whole job of K\n"
     "images, ceil(K / dp) x steps x step time. --steps: sampler steps per image.\n"
     "The variant each grid needs is named: local, ulysses, ring, ring-allgather, unified,\n"
     "unified-allgather, with +anything when the tokens do not divide ring x ulysses or the\n"
     "heads do not divide ulysses. The last line is `chosen: dp D ring R ulysses U VARIANT`;\n"
     "--json prints the same as one JSON document. The model family (FLUX.1, Wan 2.1) comes\n"
     "from the transformer's _class_name; --frames N plans a video model's N frames (Wan:\n"
     "4k + 1, e.g. 81). The model is explained in topology/COST-MODEL.md.\n",
     cmd_plan},
    {"tune", "time candidate grids with real steps, record the fastest, write a report",
     "usage: cpdit tune [MANIFEST.yaml] [--manifest FILE] [-m|--model DIR|builtin:NAME]\n"
     "                  [-t|--topology FILE] [--width W] [--height H] [--frames N]\n"
     "                  [--steps S] [--max-sequence-length L] [--cfg | --no-cfg]\n"
     "                  [--objective latency|throughput] [--images K] [--top K]\n"
     "                  [--rounds R] [--budget SECONDS] [--report DIR]\n"
     "       (under mpirun -np N or srun)\n"
     "\n"
     "Runs the K best grids `cpdit plan` predicts (--top, default 4) plus two baselines (all\n"
     "data-parallel, pure Ulysses over every rank), interleaved round by round so a noisy\n"
     "machine slows every grid alike: one warm-up round, at least R timed rounds (--rounds,\n"
     "default 3), then more rounds of the grids whose 95 % interval of the median step is\n"
     "wider than 5 % of it, until the budget (--budget, default 60 s) is spent. Each grid's\n"
     "objective (as plan's: latency of one image, or the time of K images) comes with its\n"
     "interval; grids whose intervals overlap the best one's are tied, and a tie goes to the\n"
     "simpler grid (more data parallelism, even splits, no ring). The request and its\n"
     "defaults are plan's (the manifest's, else the model's run defaults); --steps is the\n"
     "sampler steps per image, --rounds the timed rounds.\n"
     "The winner and every measured median go into FILE's \"tuned\" section (atomic\n"
     "rewrite) under the step's whole key (model, size, frames, text tokens, CFG, ranks,\n"
     "threads per rank, backend, dtype); `parallel: auto` and `cpdit run` without grid flags\n"
     "use them only for that key. FILE: --topology, else $CPDIT_TOPOLOGY, else\n"
     "./cpdit-topology.json; when none exists `cpdit probe --quick` runs first and its result\n"
     "is saved as ./cpdit-topology.json.\n"
     "The report folder (default cpdit-report/) gets report.html (self-contained, charts\n"
     "inline), report.md, report.json ({\"objective\", \"images\", \"key\", \"command\",\n"
     "\"candidates\": [{\"dp\", \"ring\", \"ulysses\", \"variant\", \"predicted_s\",\n"
     "\"measured_s\", \"samples\", \"stats\", \"objective\"}], \"chosen\"}) and, when built with\n"
     "PLplot, bandwidth.png and predicted_vs_measured.png.\n"
     "A grid that fails on any rank is marked failed on all of them; the others go on\n"
     "(exit 1 only when every grid failed).\n",
     cmd_tune},
    {"forward", "run one model component on tensors from a safetensors file",
     "usage: cpdit forward --model DIR --component transformer|vae|text_encoder\n"
     "                     --inputs IN.safetensors\n"
     "                     --output OUT.safetensors [--ulysses U] [--ring R] [--anything]\n"
     "                     [--attention VARIANT] [--attention-backend KERNEL]\n"
     "                     [--backend NAME] [--weight-format native|fp32]\n"
     "                     [--no-weight-sharing] [--weight-memory SIZE]\n"
     "                     [--no-weight-prefetch] [--vae-parallel on|off] [--verbose]\n"
     "\n"
     "Input tensors are named as diffusers' forward arguments (transformer: hidden_states,\n"
     "encoder_hidden_states, pooled_projections, timestep, img_ids, txt_ids, guidance;\n"
     "vae: latent_sample). The output tensor is `sample`, float32. Run under mpirun -np N\n"
     "with U*R dividing N (the rest is data-parallel). --attention picks the\n"
     "context-parallel variant: auto, ring, ring-allgather, ulysses, unified,\n"
     "unified-allgather (a variant given to --attention-backend, the old spelling, still\n"
     "works). --attention-backend KERNEL picks the backend's local attention kernel (cpu:\n"
     "cpu-flash, cpu-reference; cuda: cuda-flash, cuda-reference, cudnn; auto: the fastest\n"
     "measured per shape on cuda, cpu-flash on cpu); --backend NAME the backend (default:\n"
     "the best available).\n"
     "--verbose prints the grid, timings and peak memory on rank 0.\n"
     "--weight-format: native (default: bf16 weights as stored, bf16 GEMM) or fp32 (SGEMM,\n"
     "the exact reference). The ranks of a node share one copy of the weights (MPI shared\n"
     "memory) unless --no-weight-sharing. --weight-memory SIZE (8G, 512M, bytes) caps the\n"
     "transformer's resident weights: a model larger than SIZE is streamed block by block,\n"
     "the next block read and converted on a helper thread while the current one computes\n"
     "(--no-weight-prefetch: each block made when needed); the ranks of a CP group on one\n"
     "node share the two block slots, each block made by one of them in turn.\n"
     "The VAE decode is split by rows over all ranks (exact: halo rows, GroupNorm moments\n"
     "reduced over the ranks); --vae-parallel off decodes on rank 0 alone.\n"
     "text_encoder (T5 or Wan's UMT5, DIR/text_encoder/ or the folder itself): input_ids\n"
     "(B, S) and attention_mask (B, S) (int64, int32 or float; absent = all ones) give\n"
     "last_hidden_state (B, S, d_model) float32, as transformers' encoder model; rank 0\n"
     "computes.\n",
     cmd_forward},
    {"tokenize", "print the CLIP and T5 (or Wan's UMT5) token ids of a prompt",
     "usage: cpdit tokenize --model DIR|builtin:NAME [--max-sequence-length N] PROMPT\n"
     "\n"
     "Prints two lines, `clip: <ids>` and `t5: <ids>`, unpadded, with the special tokens\n"
     "each tokenizer adds. DIR is a diffusers-layout folder; it only needs tokenizer/\n"
     "(CLIP: vocab.json, merges.txt) and tokenizer_2/ (T5: tokenizer.json or spiece.model).\n"
     "builtin:NAME uses the built-in model's tokenizers (cached as for `cpdit run`).\n"
     "CLIP ids are cut to 77; T5 ids to --max-sequence-length (default 512, the most FLUX.1\n"
     "allows; schnell uses 256), with a warning on stderr when a prompt is cut.\n"
     "A Wan folder (model_index.json _class_name Wan*) prints one line, `umt5: <ids>`: its\n"
     "tokenizer/ (UMT5) on the prompt after WanPipeline's whitespace cleaning.\n",
     cmd_tokenize},
    {"bench", "benchmarks that print tables (attention, kernel, ops, vae)",
     "usage: cpdit bench attention [--batch B] [--txt T] [--img I] [--heads H] [--head-dim D]\n"
     "                             [--iters N] [--warmup N] [--variants LIST] [--anything]\n"
     "                             [--ring R --ulysses U] [--sgemm-n N]\n"
     "       cpdit bench kernel [--batch B] [--heads H] [--head-dims 64,128]\n"
     "                          [--seq-lens 1024,4096] [--reps N]\n"
     "       cpdit bench ops [--backend NAME] [--op NAME] [--reps N]\n"
     "       cpdit bench vae [--sizes 256,512] [--iters N] [--weight-format fp32|native]\n"
     "\n"
     "attention: run under mpirun -np N. Times every context-parallel variant (ring,\n"
     "ring-allgather, ulysses, unified, unified-allgather; or LIST) on every ring x ulysses\n"
     "grid of N ranks (or only R x U): time per call min/avg/max over ranks, GFLOP/s, MB sent\n"
     "per rank, and the ratio to the ideal 1/N of the single-rank kernel time.\n"
     "kernel: the local CPU attention kernel's FLOP rate next to the BLAS SGEMM rate.\n"
     "ops: every op of the kernel table (the conformance suite's cases, largest shape) on\n"
     "every backend and attention kernel: time per call, GFLOP/s and GB/s.\n"
     "vae: FLUX.1's VAE decoder (random weights) split by rows over the ranks of the job,\n"
     "with fp32 and with native (bf16) convolutions (or the one named): time, GFLOP/s, % of\n"
     "one rank's SGEMM rate measured in the same run, peak RSS per rank.\n"
     "Each table starts with the build line, including the BLAS kernels in use.\n",
     cmd_bench},
    {"builtin", "list the built-in models or write one out as a diffusers folder",
     "usage: cpdit builtin list\n"
     "       cpdit builtin write DIR [--name tiny|shapes|wan-tiny] [--text-only]\n"
     "       cpdit builtin sheet OUTPUT_DIR [--cols N]\n"
     "\n"
     "The built-in models have FLUX.1's architecture at tiny sizes and run anywhere without a\n"
     "download: builtin:shapes was trained on procedural shapes and draws prompts of its\n"
     "grammar (\"a large red circle in the center on a blue background\"; see README.md),\n"
     "builtin:tiny has random weights generated from a fixed seed (a smoke-test model),\n"
     "builtin:wan-tiny is a Wan 2.1 text-to-video pipeline with random weights (clips)\n"
     "(`--model builtin:shapes`, `model: builtin:shapes` in a manifest). `write` stores one as a\n"
     "normal diffusers-layout folder (model_index.json, transformer/, vae/, text_encoder/,\n"
     "text_encoder_2/, tokenizer/, tokenizer_2/, scheduler/); `run` caches it under\n"
     "$CPDIT_CACHE (default ~/.cache/cpdit) on first use; --text-only leaves out the\n"
     "transformer's and the VAE's weights (for tests/reference/train-builtin/).\n"
     "`sheet` puts the images of a `cpdit run` output folder in one grid (4 per row), or its\n"
     "clips as their first, middle and last frame (1 clip per row; --cols N per row),\n"
     "OUTPUT_DIR/contact-sheet.png, with the prompts in OUTPUT_DIR/contact-sheet.txt, and\n"
     "checks the colours of builtin:shapes images whose prompt names a full scene.\n",
     cmd_builtin},
    {"version", "print the version and what this build contains",
     "usage: cpdit version   (same as cpdit --version)\n"
     "\n"
     "Prints the version, the configure options, whether CUDA, NCCL and cuDNN are compiled\n"
     "in, the MPI library, hwloc, and which BLAS kernels run on this CPU.\n",
     cmd_version},
    {"help", "show help for a subcommand",
     "usage: cpdit help [SUBCOMMAND]   (same as cpdit SUBCOMMAND --help)\n", cmd_help},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

const cli_command *cli_find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_main_help(FILE *out)
{
    fprintf(out,
            "usage: cpdit [--help | --version] <subcommand> [--threads N] [--profile] [options]\n"
            "\n"
            "cpdit runs FLUX-class diffusion transformers with context-parallel attention\n"
            "(Ring, Ulysses, Unified, and uneven 'anything' modes) across the ranks of an MPI\n"
            "job, and turns YAML batches of prompts into PNG files on shared storage.\n"
            "\n"
            "subcommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n"
                 "'cpdit help <subcommand>' or 'cpdit <subcommand> --help' shows its options.\n"
                 "--profile (any subcommand): time, GFLOP/s, page faults per op class at exit.\n"
                 "--threads N (any subcommand; or CPDIT_THREADS=N): threads of each rank; else\n"
                 "SLURM_CPUS_PER_TASK, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, else the rank's CPU\n"
                 "binding shared among the node's ranks. Give ranks their cores: mpirun\n"
                 "--bind-to none or --map-by slot:PE=N, srun -c N.\n");
    cli_print_exit_codes(out);
}

static int cmd_version(int argc, char **argv)
{
    if (argc > 1)
        return cli_usage_error("version", "unexpected argument '%s'", argv[1]);
    cpdit_build_info_print(stdout);
    return CLI_EXIT_OK;
}

/* A subcommand's help and the exit codes every subcommand shares (launch exits with its
 * COMMAND's status, as its own help says). */
static void print_command_help(const cli_command *c, FILE *out)
{
    fputs(c->help, out);
    if (c->fn != cmd_launch)
        cli_print_exit_codes(out);
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        print_main_help(stdout);
        return CLI_EXIT_OK;
    }
    if (argc > 2)
        return cli_usage_error("help", "expected one subcommand name, got %d arguments", argc - 1);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        argv[1] = "help"; /* cpdit help --help: help's own text */
    const cli_command *c = cli_find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "cpdit: help: unknown subcommand '%s' (see 'cpdit --help')\n", argv[1]);
        return CLI_EXIT_USAGE;
    }
    print_command_help(c, stdout);
    return CLI_EXIT_OK;
}

/* Whether this process is rank 0 of its job by the launcher's environment (or not launched by
 * one). */
static int is_first_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                        "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return atoi(v) == 0;
    }
    return 1;
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* Before anything touches BLAS: make sure the fastest correct kernels for this CPU run
     * (may re-execute the program once with OPENBLAS_CORETYPE set; see blas_runtime.h). */
    cpdit_host_runtime_init(argc, argv);
    if (cli_take_global_options(&argc, argv) != CLI_EXIT_OK) /* --threads N, --profile */
        return CLI_EXIT_USAGE;

    if (argc < 2) {
        print_main_help(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *first = argv[1];
    if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
        print_main_help(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(first, "--version") == 0 || strcmp(first, "-V") == 0)
        return cmd_version(1, argv + 1);
    if (first[0] == '-') {
        fprintf(stderr, "cpdit: unknown option '%s' (see 'cpdit --help')\n", first);
        return CLI_EXIT_USAGE;
    }
    const cli_command *c = cli_find_command(first);
    if (!c) {
        fprintf(stderr, "cpdit: unknown subcommand '%s' (see 'cpdit --help')\n", first);
        return CLI_EXIT_USAGE;
    }
    if (c->fn != cmd_help && wants_help(argc - 1, argv + 1)) {
        print_command_help(c, stdout);
        return CLI_EXIT_OK;
    }
    const int rc = c->fn(argc - 1, argv + 1);
    if (is_first_rank()) /* --profile: one table, from the first rank */
        cpdit_host_profile_report(stderr);
    return rc;
}

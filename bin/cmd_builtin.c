/* cmd_builtin.c — `cpdit builtin list` and `cpdit builtin write DIR [--name NAME]
 * [--text-only]`: the built-in models (real FLUX.1 architecture at tiny sizes: "tiny" with
 * random weights, "shapes" trained on procedural shapes), written out as a normal
 * diffusers-layout folder. --text-only writes what tests/reference/train-builtin/ trains against:
 * configs, tokenizers and text encoders, without the transformer's and VAE's weights.
 * `cpdit builtin sheet DIR [--cols N]`: a contact sheet of an output folder's images or clips
 * (first, middle and last frame; contact_sheet.h), with builtin:shapes' colour check of each
 * (reported, not an exit status). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "lib/builtin/contact_sheet.h"
#include "bin/cli.h"

#define SUB "builtin"

static const char *description_of(const char *name)
{
    for (size_t i = 0; i < builtin_model_count(); i++)
        if (strcmp(builtin_model_name_at(i), name) == 0)
            return builtin_model_description_at(i);
    return "";
}

static int write_model(const char *name, const char *dir, int text_only)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    builtin_model_stats st;
    if (text_only) {
        if (builtin_model_write_text(name, dir, &err))
            return cli_report(&err);
        printf("%s: builtin:%s without the transformer's and the VAE's weights (configs, "
               "tokenizers, text encoders)\n", dir, name);
        return CLI_EXIT_OK;
    }
    if (builtin_model_write(name, dir, &err) || builtin_model_stats_of(name, dir, &st, &err))
        return cli_report(&err);
    builtin_run_defaults rd;
    memset(&rd, 0, sizeof rd);
    char spec[128];
    snprintf(spec, sizeof spec, BUILTIN_SPEC_PREFIX "%s", name);
    const int video = builtin_model_run_defaults(spec, &rd) && rd.frames > 0;
    printf("%s: builtin:%s, a %s pipeline folder: %s\n", dir, name,
           video ? "WanPipeline (Wan 2.1)" : "FLUX.1", description_of(name));
    printf("  transformer %zu, vae %zu, clip %zu, t5 %zu parameters; vocabularies %zu / %zu; "
           "%zu bytes\n",
           st.transformer_params, st.vae_params, st.clip_params, st.t5_params, st.clip_vocab,
           st.t5_vocab, st.total_bytes);
    return CLI_EXIT_OK;
}

static int sheet(int argc, char **argv)
{
    const char *dir = NULL;
    long cols = 0; /* contact_sheet.h: 4 for images, 1 for clips */
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--cols") == 0 && i + 1 < argc) {
            if (cli_parse_int(SUB, "--cols", argv[++i], 1, 64, &cols))
                return CLI_EXIT_USAGE;
        } else if (argv[i][0] == '-' || dir) {
            return cli_usage_error(SUB, "sheet: unexpected argument '%s'", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        return cli_usage_error(SUB, "sheet: which output folder?");
    cpdit_error err;
    cpdit_error_clear(&err);
    contact_sheet_result r;
    if (contact_sheet_write(dir, (int)cols, &r, &err))
        return cli_report(&err);
    if (r.clips)
        printf("%s/contact-sheet.png: %d clips (first, middle, last frame)%s%.0d%s; "
               "%s/contact-sheet.txt: prompts", dir, r.clips, r.images > r.clips ? " and " : "",
               r.images - r.clips, r.images > r.clips ? " images" : "", dir);
    else
        printf("%s/contact-sheet.png: %d images; %s/contact-sheet.txt: prompts", dir, r.images,
               dir);
    if (r.checked)
        printf("; builtin:shapes colour check: %d/%d right", r.right, r.checked);
    printf("\n");
    return CLI_EXIT_OK;
}

int cmd_builtin(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "sheet") == 0)
        return sheet(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "list") == 0 && argc == 2) {
        for (size_t i = 0; i < builtin_model_count(); i++)
            printf("builtin:%-8s %s\n", builtin_model_name_at(i),
                   builtin_model_description_at(i));
        return CLI_EXIT_OK;
    }
    if (argc >= 3 && strcmp(argv[1], "write") == 0) {
        const char *name = "tiny", *dir = NULL;
        int text_only = 0;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
                name = argv[++i];
            else if (strcmp(argv[i], "--text-only") == 0)
                text_only = 1;
            else if (argv[i][0] == '-')
                return cli_usage_error(SUB, "unknown or incomplete option '%s'", argv[i]);
            else if (!dir)
                dir = argv[i];
            else
                return cli_usage_error(SUB, "unexpected argument '%s'", argv[i]);
        }
        if (!dir)
            return cli_usage_error(SUB, "write: which folder?");
        int known = 0;
        for (size_t i = 0; i < builtin_model_count(); i++)
            known |= strcmp(builtin_model_name_at(i), name) == 0;
        if (!known)
            return cli_usage_error(SUB, "--name: no built-in model '%s' (see 'cpdit builtin list')",
                                   name);
        return write_model(name, dir, text_only);
    }
    return cli_usage_error(SUB, "expected 'list', 'write DIR [--name NAME] [--text-only]' or "
                           "'sheet DIR [--cols N]'");
}

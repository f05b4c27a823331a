/* cmd_builtin.c — `cpdit builtin list` and `cpdit builtin write DIR [--name tiny]`: the
 * built-in models (deterministic random weights, real FLUX.1 architecture at tiny sizes),
 * written out as a normal diffusers-layout folder. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "lib/builtin/builtin_model.h"
#include "bin/cli.h"

#define SUB "builtin"

static int write_model(const char *name, const char *dir)
{
    cpdit_error err;
    cpdit_error_clear(&err);
    builtin_model_stats st;
    if (builtin_model_write(name, dir, &err) || builtin_model_stats_of(name, dir, &st, &err))
        return cli_report(&err);
    printf("%s: builtin:%s, a FLUX.1 pipeline folder (random weights: a smoke-test model)\n",
           dir, name);
    printf("  transformer %zu, vae %zu, clip %zu, t5 %zu parameters; vocabularies %zu / %zu; "
           "%zu bytes\n",
           st.transformer_params, st.vae_params, st.clip_params, st.t5_params, st.clip_vocab,
           st.t5_vocab, st.total_bytes);
    return CLI_EXIT_OK;
}

int cmd_builtin(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "list") == 0 && argc == 2) {
        for (size_t i = 0; i < builtin_model_count(); i++)
            printf("builtin:%s\n", builtin_model_name_at(i));
        return CLI_EXIT_OK;
    }
    if (argc >= 3 && strcmp(argv[1], "write") == 0) {
        const char *name = "tiny", *dir = NULL;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
                name = argv[++i];
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
        return write_model(name, dir);
    }
    return cli_usage_error(SUB, "expected 'list' or 'write DIR [--name NAME]'");
}

/* test_grid.c — the process grid, sequence sharding and the attention validation messages.
 *
 * Pure parts (every rank checks them): degree validation and its messages, rank <-> coordinate
 * maps, balanced and joint sharding, take/put round trips, cp_attention_validate messages and
 * variant names. MPI part (run under several rank counts by tests/grid.sh): for every
 * ring x ulysses that divides the world, every sub-communicator has the right size, this rank
 * at the right position, and exactly the members the layout formula says.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cp/cp_attention.h"
#include "lib/cp/cp_shard.h"
#include "lib/cp/grid_mpi.h"
#include "lib/cp/comm_mpi.h"
#include "tests/test_util.h"

static void test_resolve(void)
{
    cpdit_error e;
    int dp = -1;
    CHECK(cp_grid_resolve(8, 0, 2, 2, &dp, &e) == CPDIT_OK && dp == 2);
    CHECK(cp_grid_resolve(8, 2, 2, 2, &dp, &e) == CPDIT_OK && dp == 2);
    CHECK(cp_grid_resolve(1, 0, 1, 1, &dp, &e) == CPDIT_OK && dp == 1);

    CHECK(cp_grid_resolve(8, 0, 3, 2, &dp, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "ring 3 x ulysses 2 = 6 does not divide 8 ranks");
    CHECK_STR_CONTAINS(e.what, "(1, 2, 4, 8)");
    CHECK_STR_CONTAINS(e.what, "multiple of 6 ranks");
    CHECK_STR_CONTAINS(e.where, "grid");

    CHECK(cp_grid_resolve(4, 0, 0, 2, &dp, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "ring degree must be >= 1 (got 0)");
    CHECK_STR_CONTAINS(e.what, "--ring 1");
    CHECK(cp_grid_resolve(4, 0, 2, -1, &dp, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "ulysses degree must be >= 1 (got -1)");
    CHECK(cp_grid_resolve(4, -2, 2, 1, &dp, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "0 for \"the rest");
    CHECK(cp_grid_resolve(8, 3, 2, 2, &dp, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "use dp 2");
    CHECK(cp_grid_resolve(4, 0, 4, 2, &dp, &e) == CPDIT_ERR_INPUT); /* 8 > 4 ranks */
    CHECK_STR_CONTAINS(e.what, "does not divide 4 ranks");
}

static void test_coords(void)
{
    /* rank = dp*(R*U) + r*U + u, both directions, on a few shapes */
    const int shapes[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 4}, {4, 2}, {3, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], U = shapes[s][1];
        for (int rank = 0; rank < 3 * R * U; rank++) {
            int d, r, u;
            cp_grid_coords(rank, R, U, &d, &r, &u);
            CHECK(d == rank / (R * U) && r == (rank % (R * U)) / U && u == rank % U);
            CHECK(cp_grid_rank_of(d, r, u, R, U) == rank);
        }
    }
    int d, r, u;
    cp_grid_coords(13, 2, 3, &d, &r, &u); /* 13 = 2*6 + 0*3 + 1 */
    CHECK(d == 2 && r == 0 && u == 1);
}

static void test_shard(void)
{
    int start, len;
    /* 6 heads over 4: 2,2,1,1 */
    const int want_len[4] = {2, 2, 1, 1}, want_start[4] = {0, 2, 4, 5};
    for (int i = 0; i < 4; i++) {
        cp_shard_balanced(6, 4, i, &start, &len);
        CHECK(len == want_len[i] && start == want_start[i]);
    }
    cp_shard_balanced(3, 8, 7, &start, &len);
    CHECK(len == 0 && start == 3);

    /* 7 text + 24 image tokens over 8 ranks: rank 7 holds no text */
    cpdit_error e;
    cp_seq_layout l;
    CHECK(cp_seq_layout_joint(&l, 8, 7, 24, &e) == CPDIT_OK);
    CHECK(l.txt_len[7] == 0 && l.txt_len[0] == 1 && l.img_len[0] == 3);
    CHECK(l.len[7] == 3 && l.len[0] == 4);
    CHECK(cp_seq_layout_total(&l) == 31 && cp_seq_layout_max_len(&l) == 4);
    CHECK(!cp_seq_layout_is_even(&l));
    CHECK(cp_seq_layout_global_index(&l, 0, 0) == 0);
    CHECK(cp_seq_layout_global_index(&l, 0, 1) == 7);  /* first image token */
    CHECK(cp_seq_layout_global_index(&l, 7, 0) == 7 + 21);

    /* take / put: every global token lands in exactly one rank and comes back */
    const int B = 2, W = 3, S = 31;
    float full[2 * 31 * 3], back[2 * 31 * 3], local[2 * 4 * 3];
    for (int i = 0; i < B * S * W; i++) {
        full[i] = (float)i;
        back[i] = -1.0f;
    }
    for (int r = 0; r < 8; r++) {
        cp_shard_take(local, full, &l, r, B, W);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < l.len[r]; i++) {
                int gi = cp_seq_layout_global_index(&l, r, i);
                CHECK(local[(b * l.len[r] + i) * W + 1] == full[(b * S + gi) * W + 1]);
            }
        cp_shard_put(back, local, &l, r, B, W);
    }
    CHECK(memcmp(full, back, sizeof full) == 0);
    cp_seq_layout_free(&l);

    const int lens[3] = {0, 5, 2};
    CHECK(cp_seq_layout_from_lengths(&l, 3, lens, &e) == CPDIT_OK);
    CHECK(cp_seq_layout_total(&l) == 7 && cp_seq_layout_global_index(&l, 2, 1) == 6);
    cp_seq_layout_free(&l);
    const int neg[2] = {1, -1};
    CHECK(cp_seq_layout_from_lengths(&l, 2, neg, &e) == CPDIT_ERR_INPUT);
}

static void test_validate(void)
{
    cpdit_error e;
    cp_seq_layout even, odd, tiny;
    cp_seq_layout_joint(&even, 4, 8, 24, &e); /* 8 tokens each */
    cp_seq_layout_joint(&odd, 4, 3, 10, &e);  /* 13 tokens */
    cp_seq_layout_joint(&tiny, 8, 0, 7, &e);  /* fewer tokens than ranks */
    cp_attention_config cfg = {0};

    CHECK(cp_attention_config_parse("ulysses", &cfg, &e) == CPDIT_OK);
    CHECK(cp_attention_validate(&cfg, 1, 4, &even, 1, 24, 64, &e) == CPDIT_OK);
    CHECK(cp_attention_validate(&cfg, 1, 4, &even, 1, 6, 64, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "6 heads do not divide over 4 Ulysses ranks");
    CHECK_STR_CONTAINS(e.what, "--anything");
    CHECK_STR_CONTAINS(e.what, "2,2,1,1");
    CHECK(cp_attention_validate(&cfg, 2, 2, &even, 1, 3, 64, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "more Ulysses ranks than heads");
    CHECK_STR_CONTAINS(e.what, "--anything");
    cfg.anything = 1;
    CHECK(cp_attention_validate(&cfg, 1, 4, &even, 1, 6, 64, &e) == CPDIT_OK);
    CHECK(cp_attention_validate(&cfg, 1, 4, &even, 1, 3, 64, &e) == CPDIT_OK);

    /* uneven lengths */
    CHECK(cp_attention_config_parse("ring", &cfg, &e) == CPDIT_OK);
    cfg.anything = 0;
    CHECK(cp_attention_validate(&cfg, 4, 1, &odd, 1, 5, 16, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "do not split evenly over 4 ranks");
    CHECK_STR_CONTAINS(e.what, "--anything");
    CHECK(cp_attention_validate(&cfg, 8, 1, &tiny, 1, 5, 16, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "7 tokens over 8 ranks: more ranks than tokens");
    CHECK_STR_CONTAINS(e.what, "--anything");
    /* ring does not split heads: 5 heads on 4 ring ranks is fine when lengths are even */
    CHECK(cp_attention_validate(&cfg, 4, 1, &even, 1, 5, 16, &e) == CPDIT_OK);
    cfg.anything = 1;
    CHECK(cp_attention_validate(&cfg, 4, 1, &odd, 1, 5, 16, &e) == CPDIT_OK);
    CHECK(cp_attention_validate(&cfg, 8, 1, &tiny, 1, 5, 16, &e) == CPDIT_OK);

    /* unified: heads over the ulysses degree only */
    CHECK(cp_attention_config_parse("unified-allgather", &cfg, &e) == CPDIT_OK);
    CHECK(cfg.variant == CP_ATTN_UNIFIED && cfg.ring_mode == CP_RING_ALLGATHER);
    cfg.anything = 0;
    CHECK(cp_attention_validate(&cfg, 2, 2, &even, 1, 6, 16, &e) == CPDIT_OK);
    CHECK(cp_attention_validate(&cfg, 2, 2, &even, 1, 7, 16, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "7 heads do not divide over 2 Ulysses ranks");

    /* shape and degree errors */
    CHECK(cp_attention_validate(&cfg, 0, 4, &even, 1, 8, 16, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "must be >= 1");
    CHECK(cp_attention_validate(&cfg, 2, 1, &even, 1, 8, 16, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "layout is for 4 ranks");
    CHECK(cp_attention_validate(&cfg, 2, 2, &even, 0, 8, 16, &e) == CPDIT_ERR_INPUT);
    CHECK(cp_attention_config_parse("ringg", &cfg, &e) == CPDIT_ERR_INPUT);
    CHECK_STR_CONTAINS(e.what, "ring-allgather");

    const char *names[] = {"auto", "ring", "ring-allgather", "ulysses", "unified",
                           "unified-allgather"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK(cp_attention_config_parse(names[i], &cfg, &e) == CPDIT_OK);
        CHECK(strcmp(cp_attention_config_name(&cfg), names[i]) == 0);
    }
    cp_seq_layout_free(&even);
    cp_seq_layout_free(&odd);
    cp_seq_layout_free(&tiny);
}

/* Members of c (world ranks), gathered in c's rank order. */
static void members(cpdit_comm *c, int world_rank, int *out)
{
    MPI_Allgather(&world_rank, 1, MPI_INT, out, 1, MPI_INT, cpdit_comm_mpi_handle(c));
}

static void test_grid_mpi(void)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *m = malloc((size_t)size * sizeof *m);
    for (int cp = 1; cp <= size; cp++) {
        if (size % cp)
            continue;
        for (int R = 1; R <= cp; R++) {
            if (cp % R)
                continue;
            const int U = cp / R;
            cp_grid *g = NULL;
            cpdit_error e;
            CHECK(cp_grid_create(MPI_COMM_WORLD, 0, R, U, &g, &e) == CPDIT_OK);
            if (!g)
                continue;
            CHECK(g->dp * R * U == size && g->cp_size == cp);
            CHECK(g->cp->size == cp && g->cp->rank == g->cp_rank);
            CHECK(g->ring_comm->size == R && g->ring_comm->rank == g->ring_index);
            CHECK(g->ulysses_comm->size == U && g->ulysses_comm->rank == g->ulysses_index);
            CHECK(g->dp_comm->size == g->dp && g->dp_comm->rank == g->dp_index);
            CHECK(cp_grid_rank_of(g->dp_index, g->ring_index, g->ulysses_index, R, U) == rank);
            members(g->cp, rank, m);
            for (int i = 0; i < cp; i++)
                CHECK(m[i] == g->dp_index * cp + i);
            members(g->ring_comm, rank, m);
            for (int i = 0; i < R; i++)
                CHECK(m[i] == cp_grid_rank_of(g->dp_index, i, g->ulysses_index, R, U));
            members(g->ulysses_comm, rank, m);
            for (int i = 0; i < U; i++)
                CHECK(m[i] == cp_grid_rank_of(g->dp_index, g->ring_index, i, R, U));
            members(g->dp_comm, rank, m);
            for (int i = 0; i < g->dp; i++)
                CHECK(m[i] == cp_grid_rank_of(i, g->ring_index, g->ulysses_index, R, U));
            char buf[128];
            CHECK_STR_CONTAINS(cp_grid_describe(g, buf, sizeof buf), "ring");
            cp_grid_destroy(g);
        }
    }
    /* a grid that does not fit fails the same way on every rank, with the message */
    cp_grid *g = NULL;
    cpdit_error e;
    CHECK(cp_grid_create(MPI_COMM_WORLD, 0, size + 1, 1, &g, &e) == CPDIT_ERR_INPUT && !g);
    CHECK_STR_CONTAINS(e.what, "does not divide");
    free(m);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_resolve();
    test_coords();
    test_shard();
    test_validate();
    test_grid_mpi();
    int failed = test_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    if (any && !failed)
        fprintf(stderr, "another rank failed\n");
    test_failures += any && !failed;
    TEST_MAIN_END();
}

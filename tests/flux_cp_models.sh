# flux_cp_models.sh — sourced by the CP forward tests (flux_forward_cp.sh, bf16_activations.sh):
# make_cp_models DIR writes the two test transformers and their inputs into DIR, using $TOOL
# (tests/flux_test_tool); returns non-zero when that fails.
# Model A: 3 heads x 16, 2 double + 2 single blocks, BF16, batch 1, 7 text + 15 image tokens
#   (22 tokens: text and image split separately; 8 ranks leave one rank without text; 3 heads
#   leave Ulysses ranks without heads).
# Model D: 4 heads x 64, 1 + 1 blocks, batch 3, 6 text + 26 image tokens (32 in total: neither
#   part divides 4 or 8, but cpdit's layout evens the totals so the strict modes run).
make_cp_models() {
    "$TOOL" make-model "$1/A" --heads 3 --head-dim 16 --axes 4,6,6 --layers 2 --single 2 \
        --in 16 --joint 32 --pooled 24 --guidance 1 --dtype BF16 --seed 1 &&
        "$TOOL" make-inputs "$1/A.in" --model "$1/A" --batch 1 --txt 7 --img-h 5 --img-w 3 \
            --seed 1 &&
        "$TOOL" make-model "$1/D" --heads 4 --head-dim 64 --axes 8,28,28 --layers 1 \
            --single 1 --in 32 --joint 48 --pooled 16 --guidance 0 --dtype BF16 --seed 4 &&
        "$TOOL" make-inputs "$1/D.in" --model "$1/D" --batch 3 --txt 6 --img-h 2 --img-w 13 \
            --seed 4
}

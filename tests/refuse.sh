#!/bin/sh
# refuse.sh — what cannot work is refused early and clearly (issue 17), each case with its
# exit code and message:
#   1. integers with leading zeros are decimal everywhere (width: 0000000032, steps: 0004)
#   2. a UTF-8 byte order mark starting a text or a JSONL prompts file is dropped
#   3. an unknown built-in model: FILE:LINE:COL from --check and from the run (exit 2)
#   4. the output folder is a file: FILE:LINE:COL, exit 2, from --check and from the run
#   5. the item-count maximum crossed in a prompts file: exit 2 and no output folder left
#   6. a FIFO as prompts_file: refused without opening it (a one-shot writer keeps its data);
#      a FIFO as vae/config.json and as the transformer's weights: refused, no hang
#   7. a symbolic link loop on vae/, or as the manifest's model folder: reported as a link loop
#   8. NaN weights: the item is "failed" in the index with the reason, no PNG, exit 4
#   9. a read-only output folder, or index: exit 1 before rendering, no PNG, no index line (as
#      a non-root user: root may write anywhere; skipped when root cannot switch user)
#  10. `cpdit tokenize --model builtin:tiny` works as `run` does
# The vanished temporary file is tested in test_atomic_file, the NaN/Inf checks of the
# pipeline in test_nonfinite, the item maximum in an inline manifest in test_manifest_bad.
# Nothing here depends on timing: the time limits (timeout, mpi-run.sh) only turn a hang into
# a failure, and are far above what each step takes on a loaded machine. Round 2 (issue 28)
# is tests/refuse2.sh.
CPDIT=${CPDIT:-./cpdit}
: "${MPI_RUN:?MPI_RUN is set by make check}"
top_builddir=$(cd "${top_builddir:-.}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/cpdit-refuse-XXXXXX") || exit 1
writer=
trap '[ -n "$writer" ] && kill $writer 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
status=0
fail() { echo "FAIL: $*"; status=1; }

# expect NAME CODE PATTERN -- COMMAND...: exit CODE and PATTERN in stdout+stderr
expect() {
    name=$1; want=$2; pat=$3; shift 4
    "$@" > "$name.log" 2>&1
    got=$?
    if [ "$got" != "$want" ]; then
        fail "$name: exit $got, want $want"; cat "$name.log"
    elif ! grep -q -- "$pat" "$name.log"; then
        fail "$name: no '$pat' in the output"; cat "$name.log"
    else
        echo "ok: $name -> $got"
    fi
}
run1="$MPI_RUN -np 1 $CPDIT run" # mpi-run.sh has a time limit: a hang fails, not stalls

# 1. leading zeros
cat > zeros.yaml <<'E'
model: builtin:tiny
defaults: {width: 0000000032, height: 0048, steps: 0004}
prompts: [a red fox]
E
expect zeros 0 '32x48     4 ' -- "$CPDIT" run zeros.yaml --check

# 2. byte order marks
printf '\357\273\277hello\nworld\n' > bom.txt
printf '\357\273\277"hello"\n{"prompt": "world"}\n' > bom.jsonl
for f in bom.txt bom.jsonl; do
    printf 'model: builtin:tiny\nprompts_file: %s\n' "$f" > "m-$f.yaml"
    expect "bom-$f" 0 '00000-0-hello.png  hello$' -- "$CPDIT" run "m-$f.yaml" --check
done

# 3. unknown built-in model
printf 'prompts: [a]\nmodel: builtin:huge\n' > huge.yaml
expect huge-check 2 '^cpdit: huge.yaml:2:8: model: no built-in model "huge"' -- \
    "$CPDIT" run huge.yaml --check
expect huge-run 2 '^cpdit: huge.yaml:2:8: model: no built-in model "huge"' -- $run1 huge.yaml

# 4. the output folder is a file
touch afile
printf 'model: builtin:tiny\noutput: {dir: afile}\nprompts: [a]\n' > file.yaml
expect file-check 2 'file.yaml:2:15: output.dir: "afile" is a regular file, not a folder' -- \
    "$CPDIT" run file.yaml --check
expect file-run 2 'file.yaml:2:15: output.dir: "afile" is a regular file, not a folder' -- \
    $run1 file.yaml
expect file-option 2 '^cpdit: --output: "afile/x": a part of the path is a file' -- \
    "$CPDIT" run file.yaml --check --output afile/x

# 5. more than the maximum of items, crossed on line 2 of the prompts file
printf '"a dog"\n{"prompt": "a cat", "seeds": {"count": 1000000}}\n' > many.jsonl
printf 'model: builtin:tiny\ndefaults: {width: 32, height: 32, steps: 1}\nprompts_file: many.jsonl\n' > many.yaml
expect many-check 2 '^cpdit: many.jsonl:2: too many items' -- "$CPDIT" run many.yaml --check
expect many-run 2 '^cpdit: many.jsonl:2: too many items' -- $run1 many.yaml --output new/a/b
[ -e new ] && fail "many-run: left an output folder behind: $(find new)"

# 6. FIFOs
mkfifo fifo.txt
printf 'model: builtin:tiny\nprompts_file: fifo.txt\n' > fifo.yaml
(printf 'for someone else\n' > fifo.txt) & writer=$!
expect fifo-check 2 'prompts file "fifo.txt" is a FIFO (named pipe), not a regular file' -- \
    timeout 300 "$CPDIT" run fifo.yaml --check
got=$(timeout 120 cat fifo.txt) # a hang guard only: the writer is waiting already
[ "$got" = "for someone else" ] || fail "fifo: the one-shot writer's line was taken: '$got'"
wait $writer 2>/dev/null; writer=

# a copy of the built-in model made of links, with one file replaced
"$CPDIT" builtin write "$work/tiny" > /dev/null || fail "builtin write"
linked_copy() { # linked_copy DST COMPONENT: links, except DST/COMPONENT is a folder of links
    mkdir "$1"
    for e in "$work"/tiny/*; do
        [ "$(basename "$e")" = "$2" ] || ln -s "$e" "$1/"
    done
    mkdir "$1/$2"
    for e in "$work/tiny/$2"/*; do ln -s "$e" "$1/$2/"; done
}
item="--prompt x --width 32 --height 32 --steps 1 --output out-fifo"
linked_copy fifo_vae vae
rm fifo_vae/vae/config.json && mkfifo fifo_vae/vae/config.json
expect fifo-config 2 'config.json: cannot read: is a FIFO (named pipe), not a regular file' -- \
    $run1 --model fifo_vae $item
linked_copy fifo_weights transformer
rm fifo_weights/transformer/diffusion_pytorch_model.safetensors
mkfifo fifo_weights/transformer/diffusion_pytorch_model.safetensors
expect fifo-weights 2 'safetensors: cannot open: is a FIFO (named pipe), not a regular file' -- \
    $run1 --model fifo_weights $item

# 7. a link loop in place of vae/
linked_copy loop_vae vae
rm -r loop_vae/vae && ln -s loop_b loop_vae/vae && ln -s vae loop_vae/loop_b
expect loop 2 'component "vae": symbolic link loop' -- $run1 --model loop_vae $item
ln -s loop_m loop_m && printf 'model: loop_m\nprompts: [a]\n' > loop.yaml
expect loop-manifest 2 'loop.yaml:1:8: model folder "loop_m" is a symbolic link loop' -- \
    "$CPDIT" run loop.yaml --check

# 8. NaN weights: a failed item, with the reason, and no image
"$top_builddir/tests/test_nonfinite" --write "$work/nan_model" || fail "test_nonfinite --write"
printf 'model: %s\noutput: {dir: out-nan}\ndefaults: {width: 32, height: 32, steps: 1}\nprompts: [a red fox]\n' \
    "$work/nan_model" > nan.yaml
expect nan-run 4 '1 items failed' -- $run1 nan.yaml
grep -q '"status":"failed".*latents after sampling: .* not finite' out-nan/index.jsonl ||
    { fail "nan-run: no failed line with the reason"; cat out-nan/index.jsonl; }
ls out-nan/*.png > /dev/null 2>&1 && fail "nan-run: a PNG was written"

# 9. a read-only output folder
as_user=
if [ "$(id -u)" != 0 ]; then
    as_user=" "
elif command -v setpriv > /dev/null && id nobody > /dev/null 2>&1; then
    as_user="setpriv --reuid=nobody --regid=$(id -g nobody) --clear-groups"
fi
if [ -n "$as_user" ]; then
    chmod 755 "$work" && mkdir -m 777 cache && mkdir ro && chmod 555 ro
    printf 'model: builtin:tiny\noutput: {dir: ro}\ndefaults: {width: 32, height: 32, steps: 1}\nprompts: [a, b]\n' > ro.yaml
    chmod 644 ro.yaml
    expect ro-check 1 'ro.yaml:2:15: output.dir: the output folder "ro" is not writable' -- \
        $as_user env CPDIT_CACHE="$work/cache" "$CPDIT" run ro.yaml --check
    expect ro-run 1 'ro.yaml:2:15: output.dir: the output folder "ro" is not writable' -- \
        $as_user env CPDIT_CACHE="$work/cache" "$MPI_RUN" -np 1 "$CPDIT" run ro.yaml
    [ -z "$(ls -A ro)" ] || fail "ro-run: wrote into the read-only folder: $(ls -A ro)"
    grep -q 'index line\|items failed' ro-run.log && fail "ro-run: claims an index line"
    # a writable folder with a read-only index: refused before rendering too
    mkdir -m 777 roi && : > roi/index.jsonl && chmod 444 roi/index.jsonl
    expect ro-index 1 'the index "roi/index.jsonl" is not writable' -- \
        $as_user env CPDIT_CACHE="$work/cache" "$MPI_RUN" -np 1 "$CPDIT" run ro.yaml --output roi
    [ "$(ls -A roi)" = index.jsonl ] || fail "ro-index: wrote into the folder: $(ls -A roi)"
else
    echo "note: root without setpriv/nobody: read-only folder case skipped"
fi

# 10. tokenize with a built-in model, as with its folder
expect tokenize 0 '^t5: ' -- "$CPDIT" tokenize --model builtin:tiny "a red fox"
"$CPDIT" tokenize --model "$work/tiny" "a red fox" > tokenize-dir.log 2>&1
cmp -s tokenize.log tokenize-dir.log || fail "tokenize: builtin:tiny and its folder differ"

[ $status -eq 0 ] && echo "ok: refuse.sh"
exit $status

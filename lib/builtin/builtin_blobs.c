/* builtin_blobs.c — the trained weights of builtin:shapes, compiled into the library from
 * the files shipped in lib/builtin/shapes/ (made by tests/reference/train-builtin/, see its README):
 *   transformer.safetensors   FluxTransformer2DModel, bf16
 *   vae.safetensors           AutoencoderKL (encoder + decoder), bf16
 * They are included byte for byte with the assembler's .incbin (GCC and Clang on ELF), so the
 * library needs no data files at run time; builtin_model.c writes them into the model folder.
 * CPDIT_BUILTIN_SHAPES_DIR (set by lib/builtin/builtin.am) is the folder, as the compiler
 * sees it from the build directory. */
#include "config.h"

#include "lib/builtin/builtin_internal.h"

#ifndef CPDIT_BUILTIN_SHAPES_DIR
#error "CPDIT_BUILTIN_SHAPES_DIR must name lib/builtin/shapes (see lib/builtin/builtin.am)"
#endif

/* A read-only, 64-byte aligned copy of FILE between the hidden symbols SYM_start and
 * SYM_end. */
#define BUILTIN_INCBIN(SYM, FILE)                                                          \
    __asm__(".section .rodata\n"                                                           \
            ".balign 64\n"                                                                 \
            ".globl " #SYM "_start\n"                                                      \
            ".hidden " #SYM "_start\n" #SYM "_start:\n"                                    \
            ".incbin \"" CPDIT_BUILTIN_SHAPES_DIR "/" FILE "\"\n"                          \
            ".globl " #SYM "_end\n"                                                        \
            ".hidden " #SYM "_end\n" #SYM "_end:\n"                                        \
            ".previous\n");                                                                \
    extern const unsigned char SYM##_start[] __attribute__((visibility("hidden")));        \
    extern const unsigned char SYM##_end[] __attribute__((visibility("hidden")))

BUILTIN_INCBIN(cpdit_shapes_transformer, "transformer.safetensors");
BUILTIN_INCBIN(cpdit_shapes_vae, "vae.safetensors");

const builtin_blob builtin_shapes_transformer = {cpdit_shapes_transformer_start,
                                                 cpdit_shapes_transformer_end};
const builtin_blob builtin_shapes_vae = {cpdit_shapes_vae_start, cpdit_shapes_vae_end};

/* vae_factors.h — written by tests/reference/train-builtin/export.py: builtin:shapes' VAE latent
 * statistics (1 / std and mean of the encoder's mean latents over training images). */
#define SHAPES_VAE_SCALING 2.24121566
#define SHAPES_VAE_SHIFT -0.0142939426

"""What training does for LoRA (`model.lora_rank`, `tfformer.models.lora`):
adapt the built model, say how much of it trains, and draw the adapters
again after a resume (Keras backs adapted layers up merged and restores
them with zero adapters, which no gradient moves). Each is a no-op for a
run without `model.lora_rank`."""

import numpy as np


def adapt(model, model_config, progress):
    """Freezes `model`'s backbone, adds the config's adapters and says how
    many of the parameters train."""
    if model_config.lora_rank is None:
        return
    from tfformer.models.lora import enable_lora

    c = model_config
    enable_lora(model, c.lora_rank, c.lora_targets, c.lora_alpha)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    progress(
        f"LoRA: rank {model_config.lora_rank} on "
        f"{', '.join(model_config.lora_targets)}; {trainable:,} of "
        f"{model.count_params():,} parameters train"
    )


def after_restore(model, state, config, strategy, progress):
    """Draws A again in every adapter a restored backup (`state` not None)
    left at zero."""
    if state is None or config.model.lora_rank is None:
        return
    from tfformer.models.lora import redraw_adapters

    with strategy.scope():
        redrawn = redraw_adapters(model, seed=config.train.seed)
    progress(
        f"LoRA: resumed from merged weights; {redrawn} adapters drawn again "
        "(the run's update may reach twice the rank)"
    )

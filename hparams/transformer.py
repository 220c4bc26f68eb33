"""Registered hparams sets of the Transformer, versioned as tensor2tensor versioned them.

`transformer_base_v1` is the paper's base model; `transformer_base_v2` moved to pre-norm with
more dropout and a doubled learning rate; `transformer_base` (t2t's v3, the default) changed
Adam's beta2 and the learning-rate schedule. The smaller sets are sized for a CPU.
"""
from t2t_lite.hparams_lib import HParams
from t2t_lite.registry import register_hparams


@register_hparams
def transformer_base_v1():
    """Paper §5 and Table 3 (base): post-norm, Adam(0.9, 0.98, 1e-9), the §5.3 schedule with
    warmup 4000, residual and embedding dropout 0.1, no attention or relu dropout."""
    return HParams(
        layer_preprocess_sequence="none",
        layer_postprocess_sequence="dan",
        attention_dropout=0.0,
        relu_dropout=0.0,
        optimizer_adam_beta2=0.98,
        learning_rate_schedule=("constant", "noam"),
        learning_rate_constant=1.0,
        learning_rate_warmup_steps=4000,
    )


@register_hparams
def transformer_base_v2():
    """t2t's v2: pre-norm with a final norm, attention and relu dropout 0.1, warmup 8000, the
    learning rate doubled."""
    return transformer_base_v1().replace(
        layer_preprocess_sequence="n",
        layer_postprocess_sequence="da",
        attention_dropout=0.1,
        relu_dropout=0.1,
        learning_rate_constant=2.0,
        learning_rate_warmup_steps=8000,
    )


@register_hparams
def transformer_base():
    """t2t's v3 and default: v2 with Adam beta2 0.997 and
    lr = 2.0 * min(1, step / 8000) * rsqrt(max(step, 8000)) * rsqrt(hidden_size)."""
    return transformer_base_v2().replace(
        optimizer_adam_beta2=0.997,
        learning_rate_schedule=("constant", "linear_warmup", "rsqrt_decay", "rsqrt_hidden_size"),
    )


@register_hparams
def transformer_base_single_gpu():
    """t2t's single-GPU set: smaller batches, longer warmup, no rsqrt(hidden_size)."""
    return transformer_base().replace(
        batch_size=1024,
        learning_rate_schedule=("constant", "linear_warmup", "rsqrt_decay"),
        learning_rate_constant=0.1,
        learning_rate_warmup_steps=16000,
    )


@register_hparams
def transformer_big():
    """Paper Table 3 (big): d_model 1024, d_ff 4096, 16 heads, dropout 0.3."""
    return transformer_base().replace(
        hidden_size=1024,
        filter_size=4096,
        num_heads=16,
        batch_size=2048,
        layer_prepostprocess_dropout=0.3,
    )


@register_hparams
def transformer_small():
    """The CPU comparison model: d_model 256, d_ff 1024, 4 heads, 3+3 layers, max_length 100."""
    return transformer_base().replace(
        hidden_size=256,
        filter_size=1024,
        num_heads=4,
        num_hidden_layers=3,
        max_length=100,
    )


@register_hparams
def transformer_tiny():
    """t2t's transformer_tiny: d_model 128, d_ff 512, 4 heads, 2+2 layers."""
    return transformer_base().replace(
        hidden_size=128,
        filter_size=512,
        num_heads=4,
        num_hidden_layers=2,
    )

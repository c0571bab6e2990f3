"""Mixed precision, as tf.keras.mixed_precision: ``set_global_policy("mixed_bfloat16")`` makes the
layers made afterwards run their matrix products (Dense, Conv2D over 16 channels or more) in bf16
with float32 accumulation, keeping variables, activations, the loss and the optimizer's state in
float32. Where the CPU has no bf16 instructions (AVX512_BF16 or AMX) the products stay float32 and
one line says so. "mixed_float16" is refused: float16 products are a GPU's."""
from .. import _tandem
from ..errors import Error


class Policy:
    """A dtype policy by name: "float32" or "mixed_bfloat16"."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise Error(f"Policy: the name must be a string such as 'mixed_bfloat16', got {type(name).__name__}")
        if name not in ("float32", "mixed_bfloat16"):
            # The engine's message names what is accepted (and why mixed_float16 is not).
            _tandem.set_global_policy(name)
        self.name = name

    @property
    def compute_dtype(self):
        return "bfloat16" if self.name == "mixed_bfloat16" else "float32"

    @property
    def variable_dtype(self):
        return "float32"

    def __eq__(self, other):
        return isinstance(other, Policy) and other.name == self.name

    def __repr__(self):
        return f'<Policy "{self.name}">'


def set_global_policy(policy):
    """The policy layers made from now on take: a name or a Policy (None: "float32")."""
    name = "float32" if policy is None else policy.name if isinstance(policy, Policy) else policy
    _tandem.set_global_policy(name)


def global_policy():
    return Policy(_tandem.global_policy())

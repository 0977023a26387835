"""Which model names are admitted, and the shape of the names derived from them.

The naming scheme (docs/concepts.md: "Names and ownership"):
- model-level objects (the model's Service) are named as the model: `<model>`;
- per-hardware objects (CompileJob, Deployment, its Service and ConfigMap, PDB, HPA) are
  `<model>--<hardware class>`, the class cut and given a hash of the full name when the whole
  would pass TARGET_NAME_MAX (builders.naming.target_name); a compile Job is that name plus
  `-<8 hex of a hash of its options and of what shapes the Job>`.

A model name is a DNS-1035 label of at most MODEL_NAME_MAX characters without `--` (the CRD's
rules below refuse others). So a per-hardware name holds `--` and no model name does; and its
part before the first `--` is its model's whole name, never cut. Two models' derived names can
therefore never be equal, whatever the names are. An object that has the name anyway (made by
hand, by another tool, or by an older scheme) is never overwritten: its controller owner is
checked first (controllers.owned).
"""

import re

SEPARATOR = "--"
TARGET_NAME_MAX = 54  # + "-" + 8 hex (builders.job.job_name) = a compile Job's name, a 63-char label value
HASH_SUFFIX = 7  # "-" + 6 hex
# The model's name whole, the separator, at least one character of the class, the hash suffix.
MODEL_NAME_MAX = TARGET_NAME_MAX - len(SEPARATOR) - 1 - HASH_SUFFIX
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


# (CEL expression on the InferenceModel's root, Python check, message): the API server enforces
# the expressions (crdgen renders them), the webhook and the reconciler the checks.
MODEL_NAME_RULES = (
    (
        f"self.metadata.name.matches('{DNS_1035_LABEL}')",
        lambda name: re.fullmatch(DNS_1035_LABEL, name) is not None,
        "metadata.name: must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and "
        "ending with a letter or digit, no dots (it names the model's Service, and a Service name cannot have dots)",
    ),
    (
        f"size(self.metadata.name) <= {MODEL_NAME_MAX}",
        lambda name: len(name) <= MODEL_NAME_MAX,
        f"metadata.name: must be at most {MODEL_NAME_MAX} characters: the per-hardware objects are named "
        f"<name>{SEPARATOR}<hardware class>, which must fit Kubernetes' 63-character names and label values",
    ),
    (
        f"!self.metadata.name.contains('{SEPARATOR}')",
        lambda name: SEPARATOR not in name,
        f"metadata.name: must not contain '{SEPARATOR}': it separates the model from the hardware class in the "
        "names of per-hardware objects",
    ),
)


def model_name_problems(name: str) -> list[str]:
    """Why no derived object could carry `name` (empty: it is fine)."""
    return [message for _, check, message in MODEL_NAME_RULES if not check(name)]

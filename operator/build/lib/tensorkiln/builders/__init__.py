"""Pure builders of the objects the operator applies: same input, same object."""
